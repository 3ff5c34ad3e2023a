"""The front end: a kernel's Python source becomes a TIR function.

tilelab does not run the kernel function as Python. It reads the function's
source, parses it with `ast`, and *interprets* the tree statement by statement:

* Python values stay Python. Sizes, block shapes, dtypes, helper results and
  `if` tests on them are evaluated at compile time, like a macro language.
* Values that only exist on the device (block indices, loop variables, buffer
  elements) are TIR expressions; arithmetic on them builds expressions.
* Loops over `T.Parallel`, `T.Pipelined`, `T.serial` or `range`, `if` and
  `while` on a device value, stores into buffers and `T.*` calls become TIR
  statements. (A `while` on Python values runs while compiling.)
* `break` and `continue` in a serial loop become a small state register of the
  loop (`_LoopExit`): leaving sets it, and what would have been skipped is guarded
  by it - plain `if`s and a register, which every backend already runs.

Because every statement is visited with its position, any mistake becomes a
`TileLabError` at the user's own file, line and column. `@T.macro` helpers are
interpreted the same way; any other function is ordinary Python, called as is.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import inspect
import linecache
import textwrap
from collections import OrderedDict
from dataclasses import dataclass, field

import tvm
from tvm import tirx

from ..errors import (
    SourceLocation,
    TileLabError,
    TileLabSyntaxError,
    TileLabTypeError,
    UnknownSize,
    tvm_span,
)
from ..ir.builder import Builder, ParamInfo, SymbolicSize, activate, seq
from ..ir.dtypes import PACKED, DType
from ..ir.keys import KERNEL, PROGRAM_CONFIGS, SOURCE_FILE
from ..ir.tile_ops import Region, _const_int, is_buffer
from ..ir.visit import walk
from . import expr as E
from .primitives import Kernel, Loop, Tensor, serial, unroll, ws
from .tilelang_names import attr

_OPERATORS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&",
    ast.BitOr: "|", ast.BitXor: "^", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Eq: "==", ast.NotEq: "!=",
}


# ---------------------------------------------------------------- source of a function


@dataclass
class FunctionSource:
    """A function's syntax tree and where its text lives, for error positions."""

    node: ast.FunctionDef
    filename: str
    lines: list[str]  # the file's lines, so carets work without the file on disk
    line_offset: int
    col_offset: int
    text: str

    @staticmethod
    def of(fn) -> FunctionSource:
        fn = inspect.unwrap(fn)
        try:
            lines, first_line = _source_lines(fn)
        except (OSError, TypeError) as err:
            raise TileLabSyntaxError(
                f"cannot read the source of {getattr(fn, '__name__', fn)!r}",
                hint="kernels must be defined in a file or a notebook cell, not with exec()",
            ) from err
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        indent = len(lines[0]) - len(lines[0].lstrip())
        tree = ast.parse(dedented)
        node = tree.body[0]
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise TileLabSyntaxError(f"{fn.__name__} is not a function definition")
        filename = fn.__code__.co_filename
        all_lines = linecache.getlines(filename) or lines
        return FunctionSource(node, filename, all_lines, first_line - 1, indent, text)

    def location(self, node) -> SourceLocation:
        line = self.line_offset + getattr(node, "lineno", 1)
        col = self.col_offset + getattr(node, "col_offset", 0)
        text = self.lines[line - 1].rstrip("\n") if 0 < line <= len(self.lines) else None
        return SourceLocation(self.filename, line, col, text)


_SOURCE_LINES: OrderedDict = OrderedDict()  # (file text, first line) -> its lines, first line


def _source_lines(fn) -> tuple[list[str], int]:
    """`inspect.getsourcelines(fn)`, remembered by the text of the function's file and its
    first line. inspect tokenizes the file from there to find where the function ends, some
    milliseconds a call, and a notebook cell traces the same functions each time it runs
    (under a new file name each time: the key is the text)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return inspect.getsourcelines(fn)
    linecache.checkcache(code.co_filename)  # as inspect does: a file changed on disk is read again
    key = ("".join(linecache.getlines(code.co_filename)), code.co_firstlineno)
    if not key[0]:
        return inspect.getsourcelines(fn)
    found = _SOURCE_LINES.get(key)
    if found is None:
        found = _SOURCE_LINES[key] = inspect.getsourcelines(fn)
        while len(_SOURCE_LINES) > 64:
            _SOURCE_LINES.popitem(last=False)
    return list(found[0]), found[1]


# ---------------------------------------------------------------- the traced program


@dataclass
class TileProgram:
    """The front end's result: a TIR function plus what the compiler and runtime need."""

    func: tirx.PrimFunc
    name: str
    params: list[ParamInfo]
    source: FunctionSource
    has_atomics: bool = False
    buffer_locations: dict = field(default_factory=dict)
    threads: tuple = ()
    layouts: dict = field(default_factory=dict)  # T.annotate_layout: buffer name -> layout
    captured: dict = field(default_factory=dict)  # module globals read while tracing
    returned: int | None = None  # eager style: how many outputs `return` names (None: all)

    @property
    def outputs(self) -> list[int]:
        return [i for i, p in enumerate(self.params) if p.output]

    def script(self) -> str:
        return self.func.script()

    def with_outputs(self, out_idx) -> TileProgram:
        """Mark parameters as outputs (the factory style's `out_idx`)."""
        if out_idx is None:
            return self
        indices = [out_idx] if isinstance(out_idx, int) else list(out_idx)
        n = len(self.params)
        indices = [i + n if i < 0 else i for i in indices]
        for i in indices:
            if not 0 <= i < n:
                raise TileLabTypeError(f"out_idx {i} is out of range: {self.name} has {n} "
                                       "tensor parameters")
        buffers = list(self.func.params)
        for i in indices:
            if len(buffers) == n and str(buffers[i].dtype) in PACKED:
                raise TileLabTypeError(f"out_idx {i} names {self.params[i].name}, a tensor of "
                                       f"{buffers[i].dtype} values; tilelab reads "
                                       f"{buffers[i].dtype} tensors but does not write them",
                                       self.params[i].location)
        params = [ParamInfo(p.name, p.shape, p.dtype, i in indices, p.location)
                  for i, p in enumerate(self.params)]
        return TileProgram(self.func, self.name, params, self.source, self.has_atomics,
                           self.buffer_locations, self.threads, self.layouts,
                           self.captured, self.returned)


class _Return(Exception):
    def __init__(self, value):
        self.value = value


# ---------------------------------------------------------------- the interpreter


class Interpreter:
    """Walks one function body; `T.*` calls emit into `builder`."""

    def __init__(self, builder: Builder, source: FunctionSource, env: dict,
                 module_globals: dict | None = None):
        self.builder = builder
        self.source = source
        self.env = env  # globals and closure of the function
        self.module_globals = module_globals or {}  # the function's module, to note reads of
        self.locals: dict = {}
        self.snapshots: dict = {}  # name -> _Snapshot, for names bound to loaded values
        self.exits: list[_LoopExit] = []  # the loops being traced, innermost last
        self.kernel_ifs = 0  # `if`s and `while`s on device values around this statement
        self.dead = False  # the rest of the statement list follows a break or continue

    # -- names

    def lookup(self, name: str, node):
        if name in self.snapshots and self.snapshots[name].stale(self.builder):
            self.keep_value(name)
        for scope in (self.locals, self.env, builtins.__dict__):
            if name in scope:
                value = scope[name]
                if scope is self.env and _is_data(value) and \
                        self.module_globals.get(name, _MISSING) is value:
                    # a module global the kernel bakes in: a JIT cache key must follow it
                    self.builder.captured[name] = value
                if _is_scalar_var(value):
                    return tirx.BufferLoad(value, [0])
                return value
        raise TileLabSyntaxError(f"name {name!r} is not defined")

    def bind(self, target, value):
        if isinstance(target, ast.Name):
            current = self.locals.get(target.id)
            if _is_scalar_var(current) and not is_buffer(value):
                self.builder.emit(tirx.BufferStore(current, E.to_expr(value, current.dtype), [0]))
            else:
                self.locals[target.id] = value
                self.snapshots.pop(target.id, None)
                if E.is_expr(value) and self.builder.in_kernel:
                    snapshot = _Snapshot.of(value, self.builder)
                    if snapshot is not None:
                        self.snapshots[target.id] = snapshot
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value) if not E.is_expr(value) else None
            if values is None or len(values) != len(target.elts):
                raise TileLabSyntaxError(f"cannot unpack into {len(target.elts)} names")
            for t, v in zip(target.elts, values):
                self.bind(t, v)
        elif isinstance(target, ast.Subscript):
            obj = self.eval(target.value)
            if is_buffer(obj):
                if str(obj.dtype) in PACKED and obj.scope() == "global":
                    raise TileLabTypeError(f"{obj.name} is a tensor of {obj.dtype} values; "
                                           f"tilelab reads {obj.dtype} tensors but does not "
                                           "write them",
                                           hint="write int8 values and pack them with torch")
                indices = self.buffer_indices(obj, target.slice)
                if isinstance(indices, Region):
                    raise TileLabSyntaxError("assign to one element at a time, or use T.copy / "
                                             "T.fill for a whole region")
                self.builder.emit(tirx.BufferStore(obj, E.to_expr(value, obj.dtype), indices,
                                                   span=tvm_span(self.builder.location)))
            else:
                obj[self.eval(target.slice)] = value
        else:
            raise TileLabSyntaxError(f"cannot assign to {type(target).__name__}")

    def keep_value(self, name: str):
        """`name` was bound to a value read from a buffer that has been stored into since:
        as in TileLang (where `x = A[i]` binds x), it means the value read then. Until now
        the name stood for the expression, re-read where used; from here it reads a
        private scalar that holds the value, set where the name was bound."""
        snapshot = self.snapshots.pop(name)
        value = self.locals[name]
        held = tirx.decl_buffer((1,), E.dtype_of(value), name=self.builder.fresh_name(name),
                                scope="local.var")
        snapshot.insert([tirx.AllocBuffer(held), tirx.BufferStore(held, value, [0])],
                        self.snapshots.values())
        self.locals[name] = tirx.BufferLoad(held, [0])

    # -- statements

    def run(self, body: list[ast.stmt]):
        for i, stmt in enumerate(body):
            loop = self.exits[-1] if self.exits else None
            left = loop.conditional_exits if loop is not None else 0
            self.exec(stmt)
            if self.dead:  # after a break or continue: the rest is never reached
                return
            if loop is not None and loop.conditional_exits > left and i + 1 < len(body):
                # `stmt` may have left the iteration: the rest runs only if it did not
                with self.builder.block() as rest:
                    self.run(body[i + 1:])
                self.builder.emit(tirx.IfThenElse(
                    tirx.EQ(tirx.BufferLoad(loop.state, [0]), 0), seq(rest), None))
                return

    def run_iteration(self, body: list[ast.stmt], loop: _LoopExit):
        """Trace one iteration of a loop's body (a kernel loop's only one, or one copy of
        a loop unrolled at compile time), guarded by the loop's state if it has one."""
        if not _leaves(body):  # no break or continue of this loop: traced in place
            self.run(body)
            return
        self.exits.append(loop)
        try:
            with self.builder.block() as stmts:
                self.run(body)
        finally:
            self.exits.pop()
            self.dead = False
        if loop.state is None:
            self.builder.emit(seq(stmts))
            return
        if loop.continues:  # a `continue` of the last iteration is over
            stmts = [tirx.BufferStore(loop.state, tirx.const(0, "int32"), [0]), *stmts]
        self.builder.emit(tirx.IfThenElse(
            tirx.LT(tirx.BufferLoad(loop.state, [0]), 2), seq(stmts), None))

    def emit_loop(self, stmt, loop: _LoopExit):
        """A traced loop, after its state register (0 before each run of the loop)."""
        if loop.state is not None:
            self.builder.emit(tirx.AllocBuffer(loop.state))
            self.builder.emit(tirx.BufferStore(loop.state, tirx.const(0, "int32"), [0]))
        self.builder.emit(stmt)

    def exec_Break(self, node):  # noqa: N802
        self.leave_loop("break", 2)

    def exec_Continue(self, node):  # noqa: N802
        self.leave_loop("continue", 1)

    def leave_loop(self, word: str, state: int):
        if not self.exits:
            raise TileLabSyntaxError(f"{word} outside a loop")
        loop = self.exits[-1]
        if loop.refused:
            raise TileLabSyntaxError(f"{word} in {loop.refused}",
                                     hint="break and continue leave T.serial loops, `range` "
                                          "loops, T.unroll loops and `while` loops")
        self.dead = True
        if self.kernel_ifs == loop.kernel_ifs and loop.unrolled:
            loop.stopped = word == "break"  # decided while compiling: plain Python
            return
        if loop.state is None:
            loop.state = tirx.decl_buffer((1,), "int32", scope="local.var",
                                          name=self.builder.fresh_name("loop_exit"))
        loop.continues |= word == "continue"
        loop.conditional_exits += 1
        self.builder.emit(tirx.BufferStore(loop.state, tirx.const(state, "int32"), [0]))

    def exec(self, node: ast.stmt):
        location = self.source.location(node)
        self.builder.location = location
        handler = getattr(self, "exec_" + type(node).__name__, None)
        if handler is None:
            raise TileLabSyntaxError(f"{_describe_node(node)} is not supported in a kernel",
                                     location)
        with _located(location):
            handler(node)
        builder = self.builder
        if builder.after_statement:  # a T.rng_rand's stream moves on past its numbers
            for store in builder.after_statement.values():
                builder.emit(store)
            builder.after_statement.clear()
            builder.draws_pending = 0

    def exec_Expr(self, node):  # noqa: N802
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.eval(node.value)

    def exec_Pass(self, node):  # noqa: N802
        pass

    def exec_Assign(self, node):  # noqa: N802
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.builder.pending_name = node.targets[0].id
        try:
            value = self.eval(node.value)
        finally:
            self.builder.pending_name = None
        for target in node.targets:
            self.bind(target, value)

    def exec_AugAssign(self, node):  # noqa: N802
        op = _OPERATORS[type(node.op)]
        load = ast.Name(node.target.id, ast.Load()) if isinstance(node.target, ast.Name) else \
            ast.Subscript(node.target.value, node.target.slice, ast.Load())
        ast.copy_location(load, node.target)
        self.bind(node.target, E.binary(op, self.eval(load), self.eval(node.value)))

    def exec_AnnAssign(self, node):  # noqa: N802
        if node.value is not None:
            return self.exec_Assign(ast.copy_location(
                ast.Assign([node.target], node.value), node))
        spec = self.eval(node.annotation)
        if not isinstance(spec, Tensor) or not isinstance(node.target, ast.Name):
            raise TileLabSyntaxError("a bare annotation in a kernel must declare a tensor "
                                     "parameter: `A: T.Tensor((M, N), T.float16)`")
        if self.builder.in_kernel:
            raise TileLabSyntaxError("tensor parameters are declared before `with T.Kernel`")
        self.locals[node.target.id] = self.builder.declare_param(node.target.id, spec.shape,
                                                                 spec.dtype)

    def exec_For(self, node):  # noqa: N802
        if node.orelse:
            raise TileLabSyntaxError("for ... else is not supported in a kernel")
        iterable = self.eval_loop_iter(node.iter)
        if isinstance(iterable, unroll) and _places_gemm_operands(node.body, node.target):
            start, stop = _const_int(iterable.start), _const_int(iterable.stop)
            if start is not None and stop is not None:
                iterable = range(start, stop)  # written out now: each copy's offsets constant
        if isinstance(iterable, Loop):
            names = _target_names(node.target)
            loop = _LoopExit.of(iterable, self.kernel_ifs)

            def body(loop_vars):
                self.bind(node.target, loop_vars)
                self.run_iteration(node.body, loop)

            self.emit_loop(iterable.build(names, body), loop)
            return
        if not _leaves(node.body):
            for value in iterable:  # a Python sequence: unrolled at compile time
                self.bind(node.target, value)
                self.run(node.body)
            return
        loop = _LoopExit(self.kernel_ifs, unrolled=True)
        with self.builder.block() as copies:
            for value in iterable:
                self.bind(node.target, value)
                self.run_iteration(node.body, loop)
                if loop.stopped:
                    break
        self.emit_loop(seq(copies), loop)

    def eval_loop_iter(self, node):
        if isinstance(node, ast.Call) and self.eval(node.func) is builtins.range:
            args = [self.eval(a) for a in node.args]
            if len(args) == 3:
                if args[2] != 1:
                    raise TileLabSyntaxError("range() in a kernel supports step 1 only")
                args = args[:2]
            return serial(*args)
        return self.eval(node)

    def exec_If(self, node):  # noqa: N802
        cond = E.as_ir(self.eval(node.test))
        if E.is_expr(cond) and _const_int(cond) is not None:
            cond = bool(_const_int(cond))
        if not E.is_expr(cond):
            self.run(node.body if cond else node.orelse)
            return
        self.kernel_ifs += 1
        try:
            with self.builder.block() as then_stmts:
                self.run(node.body)
            self.dead = False
            else_stmt = None
            if node.orelse:
                with self.builder.block() as else_stmts:
                    self.run(node.orelse)
                self.dead = False
                else_stmt = seq(else_stmts)
        finally:
            self.kernel_ifs -= 1
        self.builder.emit(tirx.IfThenElse(cond, seq(then_stmts), else_stmt,
                                          span=tvm_span(self.source.location(node))))

    # A `while` whose condition is known at compile time runs here, as Python; one that
    # reads kernel values (a local variable, a tensor) becomes a loop of the kernel.
    MAX_UNROLLED = 100_000

    def exec_While(self, node):  # noqa: N802
        if node.orelse:
            raise TileLabSyntaxError("while ... else is not supported in a kernel")
        stores = sum(self.builder.writes.values())
        cond = E.as_ir(self.eval(node.test))
        if E.is_expr(cond) and _const_int(cond) is None:
            if sum(self.builder.writes.values()) != stores:
                raise TileLabSyntaxError(
                    "this while condition stores as well as reads (a warp shuffle, an "
                    "atomic_add with return_prev): the kernel would store once, before the "
                    "first round, and re-read only the result each round",
                    hint="compute the value into a T.alloc_var before the loop and again at "
                         "the end of its body, and test that")
            return self.kernel_while(node, cond)
        if not _leaves(node.body):
            return self.unroll_while(node, cond, _LoopExit(self.kernel_ifs, unrolled=True))
        loop = _LoopExit(self.kernel_ifs, unrolled=True)
        with self.builder.block() as copies:
            self.unroll_while(node, cond, loop)
        self.emit_loop(seq(copies), loop)
        return None

    def unroll_while(self, node, cond, loop: _LoopExit):
        for _ in range(self.MAX_UNROLLED):
            if not (bool(_const_int(cond)) if E.is_expr(cond) else cond):
                return
            self.run_iteration(node.body, loop)
            if loop.stopped:
                return
            cond = E.as_ir(self.eval(node.test))
        raise TileLabSyntaxError(
            f"this while loop's condition is known while compiling and still held after "
            f"{self.MAX_UNROLLED} rounds (it would be unrolled into the kernel)",
            hint="make the condition read a kernel value (T.alloc_var) to loop on the GPU; "
                 "a break on a kernel value does not end a loop unrolled while compiling")

    def kernel_while(self, node, cond):
        """The body runs while `cond` holds, re-read each round; the names the condition
        reads keep their binding (kernel state lives in T.alloc_var or local buffers)."""
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        before = {n: self.locals.get(n, _MISSING) for n in names}
        loop = _LoopExit(self.kernel_ifs + 1)
        self.kernel_ifs += 1
        try:
            with self.builder.block() as stmts:
                self.run_iteration(node.body, loop)
        finally:
            self.kernel_ifs -= 1
        rebound = sorted(n for n in names if self.locals.get(n, _MISSING) is not before[n])
        if rebound:
            raise TileLabSyntaxError(
                f"the while condition reads {', '.join(rebound)}, which the loop body "
                "assigns anew: the condition would keep reading the first value",
                hint="keep the loop's state in a T.alloc_var (x = T.alloc_var(T.int32)) and "
                     "update it with x[0] = ... or x = ...")
        if loop.state is not None:  # a break ends the loop before its condition is re-read
            cond = tirx.And(tirx.LT(tirx.BufferLoad(loop.state, [0]), 2), cond)
        self.emit_loop(tirx.While(cond, seq(stmts), span=tvm_span(self.source.location(node))),
                       loop)

    def exec_With(self, node):  # noqa: N802
        if len(node.items) != 1:
            raise TileLabSyntaxError("use one T.Kernel per `with` statement")
        item = node.items[0]
        ctx = self.eval(item.context_expr)
        if not isinstance(ctx, (Kernel, ws, attr)):
            raise TileLabSyntaxError("only `with T.Kernel(...)`, `with T.ws(...)` and `with "
                                     "T.attr(...)` are supported in a kernel")
        if isinstance(ctx, (ws, attr)):  # the same context manager a Python helper enters
            if item.optional_vars is not None:
                raise TileLabSyntaxError("`with T.ws(...)` or `T.attr(...)` binds no names; "
                                         "drop the `as ...`")
            with ctx:
                self.run(node.body)
            return
        names = _target_names(item.optional_vars) if item.optional_vars is not None else []

        def body(block_vars):
            if item.optional_vars is not None:
                self.bind(item.optional_vars, block_vars)
            self.run(node.body)

        self.builder.emit(ctx.build(names, body))

    def exec_Return(self, node):  # noqa: N802
        raise _Return(self.eval(node.value) if node.value is not None else None)

    def exec_FunctionDef(self, node):  # noqa: N802
        namespace = dict(self.env)
        namespace.update(self.locals)
        code = compile(ast.Module([node], []), self.source.filename, "exec")
        exec(code, namespace)  # a plain Python helper defined inside the kernel
        self.locals[node.name] = namespace[node.name]

    def exec_Assert(self, node):  # noqa: N802
        cond = self.eval(node.test)
        if E.is_expr(cond):
            raise TileLabSyntaxError("assert works on compile-time values only")
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else "assertion failed"
            raise TileLabError(str(msg))

    def exec_Import(self, node):  # noqa: N802
        namespace: dict = {}
        exec(compile(ast.Module([node], []), self.source.filename, "exec"), namespace)
        self.locals.update(namespace)

    exec_ImportFrom = exec_Import  # noqa: N815

    # -- expressions

    def eval(self, node):
        handler = getattr(self, "eval_" + type(node).__name__, None)
        if handler is None:
            value = self.eval_python(node)
        elif isinstance(node, (ast.Call, ast.Subscript, ast.Name, ast.Attribute)):
            with _located(self.source.location(node)):
                value = handler(node)
        else:
            value = handler(node)
        if isinstance(value, SymbolicSize):  # a `T.const` size: a number once a tensor gave it
            value = value.resolve(self.builder.shape_constants)
        return value

    def eval_python(self, node):
        """Expressions tilelab does not model (comprehensions, lambdas...) run as Python."""
        namespace = dict(self.env)
        namespace.update({k: self.lookup(k, node) for k in self.locals})
        code = compile(ast.Expression(node), self.source.filename, "eval")
        with _located(self.source.location(node)):
            return E.as_ir(eval(code, namespace))  # noqa: S307 - user code, by design

    def eval_Constant(self, node):  # noqa: N802
        return node.value

    def eval_Name(self, node):  # noqa: N802
        return self.lookup(node.id, node)

    def eval_Attribute(self, node):  # noqa: N802
        obj = self.eval(node.value)
        try:
            return getattr(obj, node.attr)
        except TileLabError:
            raise
        except AttributeError:
            owner = getattr(obj, "__name__", type(obj).__name__)
            raise TileLabSyntaxError(f"{owner} has no attribute {node.attr!r}") from None

    def eval_Tuple(self, node):  # noqa: N802
        return tuple(self.eval(e) for e in node.elts)

    def eval_List(self, node):  # noqa: N802
        return [self.eval(e) for e in node.elts]

    def eval_BinOp(self, node):  # noqa: N802
        return E.binary(_OPERATORS[type(node.op)], self.eval(node.left), self.eval(node.right))

    def eval_UnaryOp(self, node):  # noqa: N802
        value = self.eval(node.operand)
        if not E.is_expr(value):
            return {ast.USub: lambda v: -v, ast.UAdd: lambda v: +v, ast.Not: lambda v: not v,
                    ast.Invert: lambda v: ~v}[type(node.op)](value)
        if isinstance(node.op, ast.USub):
            return E.binary("*", value, -1)
        if isinstance(node.op, ast.Not):
            return tirx.Not(value)
        if isinstance(node.op, ast.Invert):
            return tirx.bitwise_not(value)
        return value

    def eval_BoolOp(self, node):  # noqa: N802
        op = "and" if isinstance(node.op, ast.And) else "or"
        pending = []
        for value_node in node.values:
            value = self.eval(value_node)
            if not E.is_expr(value):
                if (op == "and") != bool(value):  # Python short-circuit
                    return value if not pending else E.logical(op, pending + [value])
                continue
            pending.append(value)
        return E.logical(op, pending) if pending else value

    def eval_Compare(self, node):  # noqa: N802
        left = self.eval(node.left)
        results = []
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
                result = {ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
                          ast.In: lambda a, b: a in b,
                          ast.NotIn: lambda a, b: a not in b}[type(op)](left, right)
            else:
                result = E.binary(_OPERATORS[type(op)], left, right)
            results.append(result)
            left = right
        if all(not E.is_expr(r) for r in results):
            return all(results)
        return E.logical("and", [r for r in results if E.is_expr(r)])

    def eval_IfExp(self, node):  # noqa: N802
        cond = E.as_ir(self.eval(node.test))
        if not E.is_expr(cond):
            return self.eval(node.body if cond else node.orelse)
        return E.if_then_else(cond, self.eval(node.body), self.eval(node.orelse))

    def eval_Subscript(self, node):  # noqa: N802
        obj = self.eval(node.value)
        if is_buffer(obj):
            indices = self.buffer_indices(obj, node.slice)
            return indices if isinstance(indices, Region) else tirx.BufferLoad(obj, indices)
        return obj[self.eval(node.slice)]

    def eval_Slice(self, node):  # noqa: N802
        parts = [self.eval(p) if p is not None else None for p in (node.lower, node.upper,
                                                                    node.step)]
        return slice(*parts)

    def buffer_indices(self, buffer, slice_node):
        """`A[i, j]` → index expressions; `A[0:64, k:k + 32]` → a Region."""
        elts = slice_node.elts if isinstance(slice_node, ast.Tuple) else [slice_node]
        rank = len(buffer.shape)
        if len(elts) != rank:
            raise TileLabTypeError(f"{buffer.name} has {rank} dimension(s) but is indexed with "
                                   f"{len(elts)}")
        if not any(isinstance(e, ast.Slice) for e in elts):
            return [E.to_expr(_integer_index(self.eval(e), buffer), "int32") for e in elts]
        starts, extents = [], []
        for e, dim in zip(elts, buffer.shape):
            if isinstance(e, ast.Slice):
                s = self.eval_Slice(e)
                if s.step not in (None, 1):
                    raise TileLabSyntaxError("buffer regions take step 1 only")
                start = 0 if s.start is None else _integer_index(s.start, buffer)
                stop = dim if s.stop is None else _integer_index(s.stop, buffer)
                starts.append(start)
                extent = E.binary("-", stop, start)
                if E.is_expr(extent):
                    from tvm import sym

                    extent = sym.Analyzer().simplify(extent)
                extents.append(extent)
            else:
                starts.append(_integer_index(self.eval(e), buffer))
                extents.append(1)
        return Region(buffer, tuple(starts), tuple(extents))

    def eval_Call(self, node):  # noqa: N802
        fn = self.eval(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.eval(a.value))
            else:
                args.append(self.eval(a))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.eval(kw.value))
            else:
                kwargs[kw.arg] = self.eval(kw.value)
        if getattr(fn, "__tilelab_macro__", False):
            return call_macro(self.builder, fn, args, kwargs)
        if fn in _ON_KERNEL_VALUES and not kwargs and \
                any(E.is_expr(E.as_ir(a)) for a in args):
            return _ON_KERNEL_VALUES[fn](*args)
        return E.as_ir(fn(*args, **kwargs))


# ---------------------------------------------------------------- helpers


def _fold(op):
    return lambda *values: functools.reduce(op, values)


# Python's abs, min and max of kernel values, written in the kernel's own code: T.abs,
# T.min and T.max (Python's would ask each comparison for a True/False the kernel only
# knows when it runs). A plain helper function's min(x, y) is Python's: it is refused.
_ON_KERNEL_VALUES = {builtins.abs: E.abs, builtins.min: _fold(E.min), builtins.max: _fold(E.max)}

_MISSING = object()


def _is_data(value) -> bool:
    """Plain values a kernel can bake into its code (sizes, flags, dtypes' names...)."""
    import numbers

    if value is None or isinstance(value, (str, numbers.Number)):
        return True
    return isinstance(value, (tuple, list)) and all(_is_data(v) for v in value)


def _leaves(body: list[ast.stmt]) -> bool:
    """Does a loop body hold a `break` or `continue` of its own loop (not of a loop in it)?"""
    def visit(node) -> bool:
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if isinstance(node, (ast.For, ast.While)):
            return any(visit(n) for n in node.orelse)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        return any(visit(n) for n in ast.iter_child_nodes(node))

    return any(visit(n) for n in body)


@dataclass
class _LoopExit:
    """How `break` and `continue` leave a loop being traced.

    TIR loops have fixed trip counts, so a loop the kernel runs is not left early:
    the loop keeps a state register (0 going on, 1 after a `continue`, 2 after a
    `break`), set where the program leaves, and each statement that would then be
    skipped is guarded - the rest of the iteration by `state == 0`, the next
    iterations by `state < 2` (a `continue` is cleared as an iteration starts), a
    `while` condition by `state < 2 and ...`. A loop unrolled while compiling (over a
    Python sequence) stops unrolling at a break reached under no `if` on a device
    value, as Python would; under such an `if` its copies are guarded the same way."""

    kernel_ifs: int  # device `if`s around the loop: an exit under more is conditional
    unrolled: bool = False  # traced once per element of a Python sequence
    refused: str = ""  # the loop kind break/continue cannot leave, as said in the error
    state: object = None  # the state register, once an exit needs it
    continues: bool = False  # does some `continue` set it to 1?
    conditional_exits: int = 0  # exits traced so far (each needs what follows guarded)
    stopped: bool = False  # an unconditional break of an unrolled loop: no more copies

    @staticmethod
    def of(loop: Loop, kernel_ifs: int) -> _LoopExit:
        from .primitives import Pipelined, unroll

        refused = "" if type(loop) in (serial, unroll) else \
            "a T.Pipelined loop (its stages are planned before it runs)" \
            if isinstance(loop, Pipelined) else \
            f"a T.{type(loop).__name__} loop (its iterations are not one after another)"
        return _LoopExit(kernel_ifs, refused=refused)


@dataclass
class _Snapshot:
    """Where a name was bound to an expression that loads from buffers, and how many
    stores each of those buffers had then."""

    stmts: list  # the statement list being traced when the name was bound
    at: int  # its length then: where the value is to be kept, should it be needed
    reads: dict  # buffer name -> stores into it by then

    @staticmethod
    def of(value, builder) -> _Snapshot | None:
        loaded = set()
        walk(value, tvm.ir.TensorLoad, lambda load: loaded.add(load.source.name))
        if not loaded:
            return None
        return _Snapshot(builder.blocks[-1], len(builder.blocks[-1]),
                         {name: builder.writes.get(name, 0) for name in loaded})

    def stale(self, builder) -> bool:
        return any(builder.writes.get(name, 0) != n for name, n in self.reads.items())

    def insert(self, stmts: list, others) -> None:
        """Put `stmts` where the name was bound; later snapshots of that list move along."""
        self.stmts[self.at:self.at] = stmts
        for other in others:
            if other.stmts is self.stmts and other.at >= self.at:
                other.at += len(stmts)


def _is_scalar_var(value) -> bool:
    return is_buffer(value) and value.scope() == "local.var"


GEMMS = ("gemm", "wgmma_gemm")  # the ops whose parts of shared tiles sit at constant offsets


def _places_gemm_operands(body, target) -> bool:
    """Does the loop variable (a `for` target name) place a part of a tile a T.gemm in the
    body multiplies (`T.gemm(Q_s[:, j * 64:(j + 1) * 64], ...)`)? A T.unroll loop of this
    kind is written out while tracing, as TileLang's unrolling would: the offsets of such
    parts must be constants."""
    if not isinstance(target, ast.Name):
        return False

    def in_slices(arg) -> bool:
        return any(isinstance(n, ast.Slice) and any(
            isinstance(m, ast.Name) and m.id == target.id for m in ast.walk(n))
            for sub in ast.walk(arg) if isinstance(sub, ast.Subscript)
            for n in ast.walk(sub.slice))

    return any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and
               call.func.attr in GEMMS and
               any(in_slices(a) for a in [*call.args, *(k.value for k in call.keywords)])
               for stmt in body for call in ast.walk(stmt))


def _target_names(target) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name)
                                                         for e in target.elts):
        return [e.id for e in target.elts]
    raise TileLabSyntaxError("loop and kernel variables must be plain names")


def _describe_node(node) -> str:
    names = {"While": "a while loop", "Try": "try/except", "Break": "break",
             "Continue": "continue", "Raise": "raise", "ClassDef": "a class definition",
             "Global": "global", "Nonlocal": "nonlocal", "Delete": "del"}
    return names.get(type(node).__name__, f"a {type(node).__name__} statement")


class _located:
    """Context manager: errors inside get `location` (innermost wins) and read as user errors."""

    def __init__(self, location: SourceLocation):
        self.location = location

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or isinstance(exc, _Return):
            return False
        if isinstance(exc, TileLabError):
            exc.with_location(self.location)
            return False
        raise TileLabError(_user_message(exc), self.location) from None


def _user_message(exc: BaseException) -> str:
    """One readable line for an exception raised by Python or TVM while tracing."""
    text = str(exc).strip().splitlines()
    detail = text[-1] if text else ""
    if type(exc).__module__.startswith(("tvm", "tvm_ffi")):
        return f"invalid kernel expression ({detail})" if detail else "invalid kernel expression"
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _plain_globals(fn, enclosing: dict | None = None) -> dict:
    """The module globals of `fn` that no enclosing or closure variable hides."""
    hidden = set(enclosing or ()) | set(fn.__code__.co_freevars)
    return {k: v for k, v in fn.__globals__.items() if k not in hidden}


def _function_env(fn, enclosing: dict | None = None) -> dict:
    """Globals, then the variables of the enclosing scope, then the closure (innermost wins)."""
    env = dict(fn.__globals__)
    env.update(enclosing or {})
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                env[name] = cell.cell_contents
            except ValueError:  # a closure variable not assigned yet
                pass
    return env


def call_macro(builder: Builder, fn, args, kwargs):
    """Run a `@T.macro` helper through the interpreter, sharing the caller's builder."""
    source = FunctionSource.of(fn)
    interp = Interpreter(builder, source, _function_env(fn), _plain_globals(fn))
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    interp.locals.update(bound.arguments)
    try:
        interp.run(source.node.body)
    except _Return as ret:
        return ret.value
    return None


def _finish(builder: Builder, source: FunctionSource, name: str) -> TileProgram:
    builder.check_later_sizes()
    if not any(isinstance(s, tirx.For) and KERNEL in s.annotations
               for s in builder.blocks[0]):
        raise TileLabSyntaxError(f"{name} launches no kernel",
                                 source.location(source.node),
                                 hint="put the computation inside `with T.Kernel(...)`")
    body = seq(builder.blocks[0])
    func = tirx.PrimFunc(builder.param_buffers, body).with_attr("global_symbol", name) \
        .with_attr(SOURCE_FILE, source.filename)
    if builder.pass_configs:
        func = func.with_attr(PROGRAM_CONFIGS, dict(builder.pass_configs))
    return TileProgram(func, name, list(builder.params), source, builder.has_atomics,
                       dict(builder.buffer_locations),
                       getattr(builder, "threads", ()), dict(builder.annotated_layouts),
                       dict(builder.captured))


@dataclass
class ShapedByCall:
    """A `@T.prim_func` that only a call can complete: its tensor sizes include `T.dynamic`
    names, or it has scalar parameters (`max_seqlen: T.int32`). It is traced again for
    each call's tensor shapes and scalar values (`trace(shapes, scalars)`): one kernel
    per shape and value, in which a scalar is a constant."""

    fn: object
    enclosing: dict
    name: str

    def trace(self, example_shapes: dict, scalars: dict | None = None) -> TileProgram:
        return trace_prim_func(self.fn, self.enclosing, example_shapes=example_shapes,
                               scalars=scalars or {})


def _scalar(name: str, dtype: DType, value):
    """A scalar argument's value, checked against its parameter's type."""
    import numbers

    if dtype.is_float and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return tirx.const(float(value), str(dtype))
    if not dtype.is_float and isinstance(value, numbers.Integral) and \
            (not isinstance(value, bool) or str(dtype) == "bool"):
        return int(value)  # a Python int: grid sizes and loop bounds stay constants
    raise TileLabTypeError(f"parameter {name} is a {dtype} scalar; the call gave "
                           f"{type(value).__name__} {value!r}")


def trace_prim_func(fn, enclosing: dict | None = None, example_shapes: dict | None = None,
                    scalars: dict | None = None, **_options) -> TileProgram | ShapedByCall:
    """Factory style: `@T.prim_func def kernel(A: T.Tensor(...), ...)` traced at definition.

    `enclosing` holds the factory's local variables: names used only in the
    parameter annotations (`Q: T.Tensor(shape, dtype)`) are not in the closure.
    Sizes that only the call's tensors know (`T.dynamic`) and scalar parameters defer
    the tracing to the call: the result is then a `ShapedByCall`, traced with
    `example_shapes` and `scalars` (name -> the call's value).
    """
    source = FunctionSource.of(fn)
    builder = Builder(example_shapes=dict(example_shapes or {}), source_file=source.filename)
    interp = Interpreter(builder, source, _function_env(fn, enclosing), _plain_globals(fn,
                                                                                    enclosing))
    with activate(builder), E.kernel_truth_values():
        args = source.node.args
        for arg in args.args:
            location = source.location(arg)
            builder.location = location
            if arg.annotation is None:
                raise TileLabSyntaxError(f"parameter {arg.arg} needs a T.Tensor annotation",
                                         location)
            with _located(location):
                spec = interp.eval(arg.annotation)
                if isinstance(spec, DType):  # a scalar parameter: known at each call
                    if example_shapes is None:
                        return ShapedByCall(fn, dict(enclosing or {}), fn.__name__)
                    if arg.arg not in (scalars or {}):
                        raise TileLabTypeError(f"parameter {arg.arg} is a {spec} scalar: "
                                               "pass a number for it")
                    interp.locals[arg.arg] = _scalar(arg.arg, spec, scalars[arg.arg])
                    continue
                if not isinstance(spec, Tensor):
                    raise TileLabSyntaxError(f"parameter {arg.arg} must be annotated with "
                                             "T.Tensor(shape, dtype) or a scalar type "
                                             "(T.int32, T.float32, ...)")
                if example_shapes is None and any(
                        isinstance(e, SymbolicSize) and isinstance(
                            e.resolve(builder.shape_constants), SymbolicSize)
                        for e in spec.shape):
                    return ShapedByCall(fn, dict(enclosing or {}), fn.__name__)
                interp.locals[arg.arg] = builder.declare_param(arg.arg, spec.shape, spec.dtype)
        try:
            interp.run(source.node.body)
        except _Return:
            pass
        return _finish(builder, source, fn.__name__)


def eager_tensor_params(source: FunctionSource, in_signature=()) -> list[str]:
    """Parameters of an eager-style kernel that its body declares as `X: T.Tensor(...)`,
    or its signature (`in_signature`: signature_tensors)."""
    declared = {s.target.id for s in source.node.body
                if isinstance(s, ast.AnnAssign) and s.value is None
                and isinstance(s.target, ast.Name)}
    return [a.arg for a in source.node.args.args if a.arg in declared or a.arg in in_signature]


def signature_tensors(fn, source: FunctionSource) -> dict:
    """Parameters an eager kernel annotates as tensors in its signature, `def add(A:
    T.Tensor((N,), T.float32), ...)` as TileLang allows: name -> (its T.Tensor, where).
    They are declared as if the body began with `A: T.Tensor(...)`. Python evaluated the
    annotations where the function was defined; under `from __future__ import
    annotations` they are text, evaluated here - while the function is being decorated,
    so that the factory's variables are still there to read."""
    found, env = {}, None
    for arg in source.node.args.args:
        spec = getattr(fn, "__annotations__", {}).get(arg.arg)
        if isinstance(spec, str):
            env = env or _function_env(fn, _defining_locals(fn))
            try:
                spec = eval(spec, dict(env))  # noqa: S307 - the user's own annotation
            except Exception as err:  # noqa: BLE001 - any failure: say which annotation
                raise TileLabSyntaxError(
                    f"cannot evaluate the annotation of {arg.arg} ({_user_message(err)})",
                    source.location(arg)) from None
        if isinstance(spec, Tensor):
            found[arg.arg] = (spec, source.location(arg))
    return found


def _declare_signature_tensors(signature: dict, builder, interp) -> None:
    for name, (spec, location) in signature.items():
        builder.location = location
        with _located(location):
            interp.locals[name] = builder.declare_param(name, spec.shape, spec.dtype)


def trace_eager(fn, source: FunctionSource, values: dict, shape_constants: dict,
                example_shapes: dict, signature: dict | None = None) -> TileProgram:
    """Eager style: trace the whole function with compile-time `values` for its parameters.

    A size may be named before the tensor that gives it (`Logits = T.empty((seq_len, n))`
    above `Weights: T.Tensor((seq_len, heads))`, as TileLang's `T.dynamic` sizes allow):
    then a first look at the function, taking unknown sizes as 1, learns the sizes the
    tensors give, and the function is traced again knowing them. `signature`: the
    tensors its signature declares (signature_tensors)."""
    signature = signature or {}
    try:
        return _trace_eager(fn, source, values, shape_constants, example_shapes, signature)
    except UnknownSize:
        learned = _sizes_given_later(fn, source, values, shape_constants, example_shapes,
                                     signature)
        if not learned:
            raise
    return _trace_eager(fn, source, values, shape_constants, example_shapes, signature,
                        learned)


def _sizes_given_later(fn, source, values, shape_constants, example_shapes,
                       signature) -> dict:
    """The sizes the tensors of a call give that `shape_constants` does not hold, learned
    by tracing with unknown sizes taken as 1 (as far as that trace gets)."""
    builder = Builder(shape_constants=dict(shape_constants), example_shapes=example_shapes,
                      source_file=source.filename, guess_sizes=True)
    interp = Interpreter(builder, source, _function_env(fn), _plain_globals(fn))
    interp.locals.update(values)
    with activate(builder), E.kernel_truth_values():
        try:
            _declare_signature_tensors(signature, builder, interp)
            interp.run(source.node.body)
        except (_Return, TileLabError):
            pass
    return {name: size for name, size in builder.shape_constants.items()
            if name not in shape_constants}


def _trace_eager(fn, source: FunctionSource, values: dict, shape_constants: dict,
                 example_shapes: dict, signature: dict,
                 learned: dict | None = None) -> TileProgram:
    builder = Builder(shape_constants={**shape_constants, **(learned or {})},
                      example_shapes=example_shapes, source_file=source.filename)
    interp = Interpreter(builder, source, _function_env(fn), _plain_globals(fn))
    interp.locals.update(values)
    returned, has_return = None, False
    with activate(builder), E.kernel_truth_values():
        try:
            _declare_signature_tensors(signature, builder, interp)
            interp.run(source.node.body)
        except _Return as ret:
            returned, has_return = ret.value, True
        program = _finish(builder, source, fn.__name__)
    unknown = [name for name in shape_constants if name not in builder.const_names]
    if unknown:
        sizes = ", ".join(sorted(builder.const_names)) or "none"
        raise TileLabTypeError(
            f"{fn.__name__} got unexpected keyword argument(s) {', '.join(unknown)}; its "
            f"sizes (T.const) are: {sizes}", source.location(source.node))
    outputs = returned if isinstance(returned, (tuple, list)) else \
        ([returned] if returned is not None else [])
    order = eager_tensor_params(source, signature)
    by_name = {p.name: (p, b) for p, b in zip(program.params, builder.param_buffers)}
    for param in program.params:
        if not param.output and param.name not in order:
            raise TileLabSyntaxError(
                f"{param.name} is declared as a tensor but is not a parameter of "
                f"{fn.__name__}", param.location,
                hint=f"add {param.name} to the parameters, or make an output with "
                     f"`{param.name} = T.empty(shape, dtype)` and return it")
    inputs = [by_name[n] for n in order if n in by_name]
    outs = []
    for out in outputs:
        match = [(p, b) for p, b in zip(program.params, builder.param_buffers) if b.same_as(out)]
        if not match or not match[0][0].output:
            raise TileLabSyntaxError("an eager kernel returns tensors created with T.empty",
                                     source.location(source.node))
        outs.append(match[0])
    unused_outputs = [pb for pb in zip(program.params, builder.param_buffers)
                      if pb[0].output and all(pb[1] is not o[1] for o in outs)]
    ordered = inputs + outs + unused_outputs
    func = tirx.PrimFunc([b for _, b in ordered], program.func.body,
                         attrs=program.func.attrs).with_attr("global_symbol", fn.__name__)
    program.func = func
    program.params = [p for p, _ in ordered]
    program.returned = len(outs) if has_return else None  # `return D`: D alone
    return program


def _integer_index(value, buffer):
    """An index or slice bound of `buffer`: an int or an integer expression, else an error."""
    if isinstance(value, (bool, float)) or (
            E.is_expr(value) and not E.dtype_of(value).startswith(("int", "uint"))):
        kind = type(value).__name__ if not E.is_expr(value) else E.dtype_of(value)
        raise TileLabTypeError(
            f"{buffer.name} is indexed with {value!r}, a {kind}; indices are integers",
            hint="use an integer expression (// divides integers, T.Cast('int32', x) converts)")
    return value


def prim_func(fn=None, **kwargs):
    """Mark a kernel function in the factory style; it is traced right away. Inside a
    `@tilelab.jit` factory a kernel that cannot be traced is kept as its error
    (`RefusedKernel`), raised where the kernel is used: a factory may define kernels it
    does not return (TileLang's examples keep variants side by side)."""
    if fn is None:
        return lambda f: prim_func(f, **kwargs)
    enclosing = _defining_locals(fn)
    if not _FACTORIES:
        return trace_prim_func(fn, enclosing=enclosing, **kwargs)
    try:
        return trace_prim_func(fn, enclosing=enclosing, **kwargs)
    except TileLabError as err:
        return RefusedKernel(fn.__name__, err)


_FACTORIES: list = []  # the @tilelab.jit factories running now


@contextlib.contextmanager
def in_factory(name: str):
    """While a `@tilelab.jit` factory runs (`prim_func` keeps refused kernels)."""
    _FACTORIES.append(name)
    try:
        yield
    finally:
        _FACTORIES.pop()


class RefusedKernel:
    """A `@T.prim_func` in a factory that could not be traced: any use raises its error."""

    def __init__(self, name: str, error: TileLabError):
        self.__dict__.update(name=name, error=error)

    def __getattr__(self, attribute):
        raise self.error

    def __repr__(self) -> str:
        return f"<RefusedKernel {self.name}: {str(self.error).splitlines()[0]}>"


def _defining_locals(fn) -> dict:
    """The locals of the functions whose bodies define `fn` (the factory, and the
    functions around it), innermost first.

    A kernel's annotations may name factory variables its body never uses, which
    Python then leaves out of the closure (always, under `from __future__ import
    annotations`); the defining frames have them.
    """
    import sys

    frame, code, env = sys._getframe(1), fn.__code__, {}
    while frame is not None:
        if code in frame.f_code.co_consts:
            env = {**frame.f_locals, **env}
            code = frame.f_code
        frame = frame.f_back
    return env
