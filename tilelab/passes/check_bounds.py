"""Check every element access on the CPU, so that a mistake is an error, not a crash.

On a GPU an access past the end of a tile reads garbage or faults; on the CPU it
silently corrupts memory or kills the process (and the notebook with it). This
pass, on the CPU only, puts each statement that reads or writes buffer elements
behind a test of its indices, `0 <= index < extent` in every dimension:

    if (in bounds):  C[i] = A[i] + B[i]
    else:            status[0] = <which check failed>

A failed check skips the statement, notes its number and the kernel runs on;
after the kernel the first noted check raises, naming the buffer, the index and
the user's line (kept on each statement as its `span` by the front end). Most
tests are provably true (`i` runs over `0..63` of a 64-element tile) and the
simplifier deletes them, so only data-dependent and tail indices cost anything.

Integer division and remainder get the same treatment for a zero divisor (and
for the one overflowing quotient, INT_MIN // -1): the CPU would otherwise stop
the whole process with SIGFPE. These checks are always on; the bounds checks are
on unless ``TILELAB_CHECK_BOUNDS=0``.

Reads that a select guards (`if_then_else(in tensor, A[i], 0)`, how copies read
past the edge of a tensor) are checked only where the guard holds.
"""

from __future__ import annotations

import os

import tvm
from tvm import tirx
from tvm.ir import StringImm

from ..ir.keys import THREAD_COPIES
from ..ir.tile_ops import is_load, is_select
from ..ir.visit import rewrite
from ..ops._lowering import is_check

MARKER = "tilelab-check"  # error messages start with it; the CPU runner turns them into errors


def bounds_checks_enabled() -> bool:
    """Element bounds checks on the CPU: on unless TILELAB_CHECK_BOUNDS=0."""
    value = os.environ.get("TILELAB_CHECK_BOUNDS", "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def _children(expr) -> list:
    """The sub-expressions of an expression (those this pass needs to see)."""
    if is_load(expr):
        return list(expr.indices)
    if isinstance(expr, tvm.ir.Call) or hasattr(expr, "args"):
        return [a for a in getattr(expr, "args", []) if isinstance(a, tvm.ir.Expr)]
    out = []
    for name in ("a", "b", "value", "condition", "true_value", "false_value"):
        child = getattr(expr, name, None)
        if isinstance(child, tvm.ir.Expr):
            out.append(child)
    return out


def _and(a, b):
    return b if a is None else tirx.And(a, b)


def _implies(guard, cond):
    return cond if guard is None else tirx.Or(tirx.Not(guard), cond)


class _Checks:
    """The checks of one kernel: conditions, and the messages of the numbered checks."""

    def __init__(self, bounds: bool, fallback: str, thread_copies=()):
        self.bounds = bounds
        self.fallback = fallback  # where a statement without a span comes from
        self.messages: list[str] = []
        self.status = tirx.decl_buffer((1,), "int32", name="check_status")
        # registers that thread code writes have a copy per thread here, its first index
        # the thread's (passes/thread_code.ThreadLoops); messages show them as declared
        self.thread_copies = {str(name) for name in thread_copies}
        self.declared: dict = {}

    def as_written(self, buffer, indices):
        """An access as the program wrote it: a register without the thread's index of its
        copies, a scalar register (T.alloc_var) by its name, no casts between integers."""
        def declared(b):
            if b.name not in self.declared:
                self.declared[b.name] = tirx.decl_buffer(b.shape[1:], b.dtype, name=b.name,
                                                         scope=b.scope())
            return self.declared[b.name]

        def load(node):
            source, where = node.source, list(node.indices)
            if source.name in self.thread_copies:
                source, where = declared(source), where[1:]
            if source.scope() == "local.var":
                return tirx.Var(source.name, str(source.dtype))
            return tirx.BufferLoad(source, where)

        def cast(node):
            integers = all(str(t).startswith(("int", "uint")) for t in (node.ty, node.value.ty))
            return node.value if integers else node

        indices = [rewrite(rewrite(i, tvm.ir.TensorLoad, load), tirx.Cast, cast)
                   for i in indices]
        if buffer.name in self.thread_copies:
            buffer, indices = declared(buffer), indices[1:]
        return buffer, indices

    def number(self, message: str, where: str) -> int:
        self.messages.append(f"{MARKER}|{where}|{message}")
        return len(self.messages)

    def collect(self, expr, guard, where, out: list) -> None:
        """(condition, check number) for every access and division in `expr`."""
        if is_select(expr):
            cond, then, other = expr.args
            self.collect(cond, guard, where, out)
            self.collect(then, _and(guard, cond), where, out)
            self.collect(other, _and(guard, tirx.Not(cond)), where, out)
            return
        if is_load(expr) and self.bounds:
            self.access(expr.source, expr.indices, guard, where, out)
        if isinstance(expr, (tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod)) and \
                str(expr.ty).startswith(("int", "uint")) and \
                not isinstance(expr.b, tirx.IntImm):
            kind = "//" if isinstance(expr, (tirx.Div, tirx.FloorDiv)) else "%"
            dtype = str(expr.ty)
            n = self.number(f"integer division by zero: {expr.a} {kind} {expr.b}", where)
            out.append((_implies(guard, tirx.NE(expr.b, tirx.const(0, dtype))), n))
            if dtype.startswith("int"):  # INT_MIN // -1 overflows and traps too
                n = self.number(f"integer overflow: {expr.a} {kind} -1 with {expr.a} at its "
                                "smallest value", where)
                ok = tirx.Or(tirx.NE(expr.b, tirx.const(-1, dtype)),
                             tirx.NE(expr.a, tirx.min_value(dtype)))
                out.append((_implies(guard, ok), n))
        for child in _children(expr):
            self.collect(child, guard, where, out)

    def access(self, buffer, indices, guard, where, out: list, read: bool = True) -> None:
        if buffer.scope() == "local.var":  # a scalar: always element 0
            return
        conds = None
        for index, extent in zip(indices, buffer.shape):
            zero = tirx.const(0, str(index.ty))
            conds = _and(conds, tirx.And(tirx.LE(zero, index), tirx.LT(index, extent)))
        if conds is None:
            return
        message = out_of_bounds_message(*self.as_written(buffer, indices))
        if read and buffer.scope() == "global":
            # TileLang's CUDA lowering makes such reads 0 (LegalizeSafeMemoryAccess); tilelab
            # stops at them on the CPU and reads whatever lies there on a GPU
            message += "; a read past a tensor's edge is a mistake here, not 0 - guard it: " \
                       f"T.if_then_else(<index in bounds>, {buffer.name}[...], 0)"
        n = self.number(message, where)
        out.append((_implies(guard, conds), n))

    def guard(self, stmt, exprs, store=None):
        """`stmt` run only when its accesses are in bounds; else the failing check noted."""
        where = _where(stmt, self.fallback)
        checks: list = []
        for expr in exprs:
            self.collect(expr, None, where, checks)
        if store is not None and self.bounds:
            self.access(store.buffer, store.indices, None, where, checks, read=False)
        if not checks:
            return stmt
        ok = None
        for cond, _ in checks:
            ok = _and(ok, cond)
        note = None  # status = the first failing check
        for cond, n in reversed(checks):
            code = tirx.const(n, "int32")
            note = code if note is None else tirx.Select(tirx.Not(cond), code, note)
        failed = tirx.BufferStore(self.status, note, [0])
        return tirx.IfThenElse(ok, stmt, failed)

    def wrap(self, body):
        """Allocate the status, run the body, then raise for the check that failed."""
        if not self.messages:
            return body
        reports = [tirx.AssertStmt(tirx.NE(tirx.BufferLoad(self.status, [0]),
                                           tirx.const(n, "int32")),
                                   StringImm("IndexError"), [StringImm(message)])
                   for n, message in enumerate(self.messages, 1)]
        return tirx.SeqStmt([tirx.AllocBuffer(self.status),
                             tirx.BufferStore(self.status, tirx.const(0, "int32"), [0]),
                             body, *reports])


def out_of_bounds_message(buffer, indices) -> str:
    """What an access past a buffer's shape is called, here and when compiling
    (check_loop_bounds.py)."""
    text = ", ".join(str(i) for i in indices)
    shape = ", ".join(str(int(e)) if isinstance(e, tirx.IntImm) else str(e)
                      for e in buffer.shape) + ("," if len(buffer.shape) == 1 else "")
    return f"index out of bounds: {buffer.name}[{text}] (the shape of {buffer.name} is ({shape}))"


def _where(stmt, fallback: str) -> str:
    span = getattr(stmt, "span", None)
    if span is None or span.source_name is None:
        return fallback
    return f"{span.source_name.name}|{span.line}|{span.column}"


def check_accesses(func, fallback: str, bounds: bool):
    checks = _Checks(bounds, fallback, (func.attrs or {}).get(THREAD_COPIES, ()))

    def on_if(stmt):
        # the condition's own reads are tested first; the `if` runs only when they hold
        tested = checks.guard(tirx.Evaluate(0, span=stmt.span), [stmt.condition])
        if isinstance(tested, tirx.Evaluate):
            return stmt
        return tirx.IfThenElse(tested.condition, stmt, tested.else_case)

    def on_evaluate(stmt):
        if is_check(stmt):  # an op's own check (ops._lowering.check): noted when it fails
            cond, message, where = stmt.value.args[1:]
            n = checks.number(str(message.value), str(where.value) or checks.fallback)
            first = tirx.EQ(tirx.BufferLoad(checks.status, [0]), tirx.const(0, "int32"))
            return tirx.IfThenElse(tirx.And(tirx.Not(cond), first), tirx.BufferStore(
                checks.status, tirx.const(n, "int32"), [0]), None)  # the first one counts
        return checks.guard(stmt, [stmt.value])

    body = rewrite(func.body, tirx.IfThenElse, on_if)
    body = rewrite(body, tirx.Evaluate, on_evaluate)
    body = rewrite(body, tirx.BufferStore, lambda stmt: stmt if stmt.buffer.same_as(
        checks.status) else checks.guard(stmt, [stmt.value, *stmt.indices], store=stmt))
    return func.with_body(checks.wrap(body))


def CheckAccesses(fallback: str, bounds: bool | None = None):  # noqa: N802
    """Expects loop nests (tile ops lowered), block loops not yet parallel; every statement
    that accesses elements or divides integers comes out guarded, with its report after."""
    bounds = bounds_checks_enabled() if bounds is None else bounds

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.CheckAccesses")
    def _pass(func, _mod, _ctx):
        return check_accesses(func, fallback, bounds)

    return _pass

