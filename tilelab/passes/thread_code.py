"""Code written for one thread: `tx = T.get_thread_binding()`.

A tile program describes the whole block's work and lets the compiler deal it to
threads. TileLang also lets a program speak for one thread, as CUDA does:

    tx = T.get_thread_binding()
    acc = T.alloc_local((1,), T.float32)          # each thread's own register
    for k in T.serial(K):
        acc[0] += A[bx * 128 + tx, k] * x[k]      # each thread its own row
    y[bx * 128 + tx] = acc[0]

A statement is *thread code* when it reads the thread index, or reads or writes a
register (`T.alloc_local`, `T.alloc_var`) that thread code wrote - that register is
then *private*: one copy per thread. Everything else stays the block's: the same
for every thread, done once.

`MarkThreadCode` (both backends, on tile ops) finds the private registers (a
fixpoint: a register written from a private one is private too), then puts a
`tilelab.per_thread` mark around each piece of thread code, as small as the
block's own control flow allows: through a loop or `if` that every thread takes
alike it goes inside, so that the marks are separated where the block could put a
barrier. An `if` whose condition is the thread index's alone (it reads no memory:
`if tx < 64:`) goes down to each statement as a guard, `if tx < 64: a` and `if tx <
64: b`, so that a barrier may stand between those too; around an `if` or loop on a
private register's value the mark stays outside. So TileLang's named barrier under
such an `if` (`if tx < 256: ... T.sync_threads(3, 256)`) is reached by every thread:
it becomes a barrier of the block (or role), its count checked against the threads
the `if`s let through. It refuses, at the user's line, what has no meaning for one
thread: a tile op other than
`T.fill`/`T.clear`/`T.atomic_add` and a `T.copy` into or out of the thread's own
registers (`T.alloc_local`), a `T.Parallel` loop or a fragment (the compiler
deals those to threads), a barrier that not every thread reaches - and a warp shuffle
or thread all-reduce whose store into its shared exchange and reads of it would fall in
one mark (under an `if` on a thread's own values), where no barrier can part them.

An `if` on the thread index whose branches hold the block's work (tile ops,
`T.Parallel`), `if tx < 128: ... else: ...` as TileLang's warp-specialized
kernels write it, splits the block instead: each branch becomes a warp role over
its range of threads (as `with T.ws(...)` is, in whole warps: passes/warp_roles.py;
`tx // 32 == 1` is warp 1's range), whose tile ops are dealt to the role's threads;
the CPU runs the roles by turns (passes/role_turns.py). Roles do not nest.

On the GPU a mark is lowered as the body of a `T.Parallel` iteration: every
thread runs it, its stores are not left to thread 0 (passes/lower_tile_ops_to_threads.py).
The compiler puts barriers between marks where their shared accesses race, as between
tile ops - unless the program places them itself (`tl.disable_thread_storage_sync`,
TileLang's key): then none goes inside a mark or between two marks
(passes/insert_barriers.py, passes/hide_from_thread_sync.py).
On the CPU `ThreadLoops` (after the tile ops became loops) runs each mark as a
loop over the block's threads, giving each private register a copy per thread.
Running one mark for all threads before the next mark starts is one order the GPU's
threads may take between barriers; a program whose result depends on another
order races on the GPU too.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import TileLabTypeError
from ..ir.keys import (
    EXCHANGE,
    KERNEL,
    PER_THREAD,
    THREAD_COPIES,
    THREAD_INDEX,
    THREADS,
    WARP_ROLE,
    role_threads,
)
from ..ir.tile_ops import (
    accessed_buffers,
    config,
    is_load,
    is_tile_call,
    loaded,
    regions,
    scalars,
    span_location,
)
from ..ir.visit import (
    block_body,
    keep_user_errors,
    rewrite,
    rewrite_pre,
    substitute,
    walk,
    with_block_body,
)
from ..ops import at_user_line, effects, lookup
from ..ops._lowering import is_fragment, is_sync, seq, sync, unravel

_REGISTERS = ("local", "local.var")


def _register(buffer) -> bool:
    return buffer.scope() in _REGISTERS


class _Private:
    """The thread-index variables, the loop variables that depend on them, and the
    registers thread code writes."""

    def __init__(self, thread_vars):
        self.vars = list(thread_vars)
        self.buffers: set = set()  # names

    def expr(self, node) -> bool:
        """Does an expression (or statement) read the thread index or a private register?"""
        found = []

        def visit(n):
            if isinstance(n, tirx.Var) and any(n.same_as(v) for v in self.vars):
                found.append(n)
            elif is_load(n) and n.source.name in self.buffers:
                found.append(n)

        walk(node, object, visit)
        return bool(found)

    def stmt(self, node) -> bool:
        """Does a statement read or write anything private?"""
        if self.expr(node):
            return True
        found = []

        def visit(n):
            if isinstance(n, tirx.BufferStore) and n.buffer.name in self.buffers:
                found.append(n)
            elif isinstance(n, TilePrimitiveCall) and any(
                    r.buffer.name in self.buffers for r in regions(n)):
                found.append(n)

        walk(node, object, visit)
        return bool(found)


def private_registers(body, thread_vars) -> _Private:
    """Grow the private set until nothing changes: a register written under private
    control, at a private index or with a private value is private."""
    private = _Private(thread_vars)
    changed = True

    def written(buffer, private_write: bool):
        nonlocal changed
        if private_write and _register(buffer) and buffer.name not in private.buffers:
            private.buffers.add(buffer.name)
            changed = True

    def scan(stmt, control: bool):
        if isinstance(stmt, tirx.SeqStmt):
            for s in stmt:
                scan(s, control)
        elif isinstance(stmt, tirx.For):
            varying = private.expr(stmt.min) or private.expr(stmt.extent)
            if varying and not any(stmt.loop_var.same_as(v) for v in private.vars):
                private.vars.append(stmt.loop_var)
            scan(stmt.body, control or varying)
        elif isinstance(stmt, tirx.While):
            scan(stmt.body, control or private.expr(stmt.condition))
        elif isinstance(stmt, tirx.IfThenElse):
            inner = control or private.expr(stmt.condition)
            scan(stmt.then_case, inner)
            if stmt.else_case is not None:
                scan(stmt.else_case, inner)
        elif isinstance(stmt, tirx.AttrStmt):
            scan(stmt.body, control)
        elif isinstance(stmt, tirx.BufferStore):
            written(stmt.buffer, control or private.expr(stmt.value) or
                    any(private.expr(i) for i in stmt.indices))
        elif isinstance(stmt, TilePrimitiveCall):
            done = effects(stmt)
            varying = control or any(private.expr(e) for e in scalars(stmt)) or any(
                private.expr(list(r.starts)) or r.buffer.name in private.buffers
                for r in done.reads) or config(stmt).get("returns_prev", False)
            for region in done.writes:
                written(region.buffer, varying or private.expr(list(region.starts)))

    while changed:
        changed = False
        scan(body, False)
    return private


WARP = 32


def _block_work(stmt) -> bool:
    """Does `stmt` hold work the whole block (or a role) shares: a tile op other than
    those one thread may do, or a T.Parallel loop?"""
    found = []

    def visit(node):
        if isinstance(node, TilePrimitiveCall) and \
                not lookup(node).allowed_in_thread_code(node) or \
                isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
            found.append(node)

    walk(stmt, object, visit)
    return bool(found)


def _arrivals(body, threads: int):
    """A role's `T.barrier_arrive`s: each of its threads arrives once (traced as the whole
    block's, before the `if` around them became a role)."""
    def recount(call):
        if not is_tile_call(call, "barrier_arrive"):
            return call
        settings = {str(k): v for k, v in call.config.items()}
        settings["arrivals"] = threads
        return TilePrimitiveCall(*call.args, op=call.op, config=settings)

    return rewrite(body, TilePrimitiveCall, recount)


def _named_barrier(stmt) -> bool:
    """Is `stmt` TileLang's `T.sync_threads(id, count)` (before MarkThreadCode)?"""
    return is_sync(stmt) and len(stmt.value.args) == 3


def _and(guard, cond):
    return cond if guard is None else tirx.And(guard, cond)


def _thread_range(cond, x):
    """(lo, hi) with `cond` == `lo <= x < hi` for the flat thread index x (None: no bound
    that side), or None when `cond` is something else. `x // k` (a warp's or warpgroup's
    number) compares as the range of its threads."""
    def const(e):
        return int(e.value) if isinstance(e, tirx.IntImm) else None

    def scale(e):  # x -> 1, x // k -> k, else None
        if isinstance(e, tirx.Var) and e.same_as(x):
            return 1
        if isinstance(e, tirx.FloorDiv) and isinstance(e.a, tirx.Var) and e.a.same_as(x):
            return const(e.b)
        return None

    if isinstance(cond, tirx.And):
        a, b = _thread_range(cond.a, x), _thread_range(cond.b, x)
        if a is None or b is None:
            return None
        los = [v for v in (a[0], b[0]) if v is not None]
        his = [v for v in (a[1], b[1]) if v is not None]
        return (max(los) if los else None, min(his) if his else None)
    kinds = (tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ)
    if not isinstance(cond, kinds):
        return None
    kind = type(cond)
    if scale(cond.a) and const(cond.b) is not None:
        k, c = scale(cond.a), const(cond.b)
    elif scale(cond.b) and const(cond.a) is not None:  # c < x is x > c
        k, c = scale(cond.b), const(cond.a)
        kind = {tirx.LT: tirx.GT, tirx.LE: tirx.GE, tirx.GT: tirx.LT, tirx.GE: tirx.LE,
                tirx.EQ: tirx.EQ}[kind]
    else:
        return None
    return {tirx.LT: (None, c * k), tirx.LE: (None, (c + 1) * k),
            tirx.GT: ((c + 1) * k, None), tirx.GE: (c * k, None),
            tirx.EQ: (c * k, (c + 1) * k)}[kind]


class _Marker:
    """Puts the marks; splits the block into roles by `if`s on the thread index; refuses
    what one thread cannot do."""

    def __init__(self, private: _Private, func, kernel, exchanges: set):
        self.private = private
        self.func = func
        self.exchanges = exchanges  # names of the shared tiles of shuffles and all-reduces
        threads = [int(t) for t in kernel.annotations[THREADS]]
        self.threads = threads[0] if len(threads) == 1 else None  # roles need a 1-D block
        self.block = math.prod(threads)
        self.x = kernel.annotations[THREAD_INDEX][0]
        self.in_role = False  # marking a role's body (roles do not nest)
        self.within = (0, self.threads)  # the threads of the role being marked, or all

    def mark(self, stmt, guard=None):
        """`stmt` with its thread code marked. `guard`: a condition on the thread index
        (no loads) that an enclosing `if` put on every statement below it: pushed down to
        the marks, so that a barrier may still stand between them."""
        if isinstance(stmt, tirx.SeqStmt):
            return seq([self.mark(s, guard) for s in stmt])
        if _named_barrier(stmt):
            return self.named_barrier(stmt, guard)
        if isinstance(stmt, tirx.AllocBuffer) or guard is None and not self.private.stmt(stmt):
            return stmt
        private = self.private.expr
        if isinstance(stmt, tirx.For) and stmt.kind != tirx.ForKind.PARALLEL and \
                not private(stmt.min) and not private(stmt.extent):
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                            self.mark(stmt.body, guard), thread_binding=stmt.thread_binding,
                            annotations=stmt.annotations)
        if isinstance(stmt, tirx.IfThenElse) and not private(stmt.condition):
            return tirx.IfThenElse(stmt.condition, self.mark(stmt.then_case, guard),
                                   self.mark(stmt.else_case, guard) if stmt.else_case
                                   else None)
        if isinstance(stmt, tirx.IfThenElse) and _block_work(stmt):
            return seq(self.roles_of(stmt, guard))
        if isinstance(stmt, tirx.IfThenElse) and not loaded(stmt.condition):
            cond = stmt.condition
            then_case = self.mark(stmt.then_case, _and(guard, cond))
            if stmt.else_case is None:
                return then_case
            return seq([then_case, self.mark(stmt.else_case, _and(guard, tirx.Not(cond)))])
        if isinstance(stmt, tirx.While) and not private(stmt.condition):
            return tirx.While(stmt.condition, self.mark(stmt.body, guard))
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key != WARP_ROLE:
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value,
                                 self.mark(stmt.body, guard))
        self.check(stmt)
        body = stmt if guard is None else tirx.IfThenElse(guard, stmt, None)
        return tirx.AttrStmt(tirx.const(0, "int32"), PER_THREAD, tirx.const(1, "int32"), body)

    def roles_of(self, stmt, guard):
        """An `if` on the thread index around the block's work: its roles, or an error."""
        roles = None
        if self.threads and guard is None and not self.in_role:
            roles = self.roles(stmt, (0, self.threads))
        if roles is None:
            why = "inside another such `if`: roles do not nest" if self.in_role or guard \
                is not None else "whose condition is no range of the thread index x " \
                "(`tx < 64`, `64 <= tx < 128`, `tx // 32 == 1`, if/elif/else of ranges)" \
                if self.threads else "in a block of threads=(x, y, ...): roles split a 1-D block"
            raise TileLabTypeError(
                f"tile ops or T.Parallel under an `if` on the thread index {why}",
                _location(stmt), hint="split the block into ranges of whole warps with one "
                "if/elif/else chain, each branch the work of its threads")
        return roles

    def roles(self, stmt, within) -> list | None:
        """`if lo <= tx < hi: A else: B` (B perhaps another such `if`) over the threads
        `within`: a role per branch, or None where the condition is no range of threads."""
        bounds = _thread_range(stmt.condition, self.x)
        if bounds is None:
            return None
        lo = max(within[0], bounds[0] if bounds[0] is not None else within[0])
        hi = min(within[1], bounds[1] if bounds[1] is not None else within[1])
        if lo >= hi:  # the branch is never taken
            lo = hi = within[0]
        other = stmt.else_case
        if lo == within[0]:
            rest = (hi, within[1])
        elif hi == within[1]:
            rest = (within[0], lo)
        elif other is None:
            rest = (0, 0)  # nobody else has work here
        else:
            return None  # the other threads are two ranges: no single role
        out = [self.role((lo, hi), stmt.then_case, stmt)] if lo < hi else []
        if other is not None and rest[0] < rest[1]:
            if isinstance(other, tirx.IfThenElse) and self.private.expr(other.condition):
                inner = self.roles(other, rest)
                if inner is None:
                    return None
                out.extend(inner)
            else:
                out.append(self.role(rest, other, stmt))
        return out

    def role(self, threads, body, where):
        first, end = threads
        if first % WARP or end % WARP:
            raise TileLabTypeError(
                f"this `if` on the thread index gives threads {first}..{end - 1} work of the "
                "whole block (tile ops, T.Parallel): a branch so takes whole warps",
                _location(where), hint=f"split the block at multiples of {WARP} threads")
        self.in_role, self.within = True, threads
        try:
            marked = self.mark(body)
        finally:
            self.in_role, self.within = False, (0, self.threads)
        return tirx.AttrStmt(tirx.const(first, "int32"), WARP_ROLE, tirx.const(end, "int32"),
                             _arrivals(marked, end - first))

    def named_barrier(self, stmt, guard):
        """`T.sync_threads(id, count)` reached through uniform control flow and `if`s on the
        thread index alone (`guard`, pushed down below it): every thread of the block (or
        role) reaches it, so it is a barrier of them all - once `count` is the number of
        threads the guard lets through, as the program meant."""
        barrier_id, count = (int(a.value) for a in stmt.value.args[1:])
        lo, hi = self.within
        bounds = _thread_range(guard, self.x) if guard is not None else (None, None)
        if self.threads is None and guard is not None or bounds is None:
            raise TileLabTypeError(
                f"T.sync_threads({barrier_id}, {count}) under an `if` whose condition is no "
                "range of the flat thread index (`tx < 256`, `128 <= tx < 256`)",
                _location(stmt), hint="guard the named barrier with a range of threads")
        if self.threads is not None:
            lo = max(lo, bounds[0]) if bounds[0] is not None else lo
            hi = min(hi, bounds[1]) if bounds[1] is not None else hi
            reaching = max(hi - lo, 0)
        else:
            reaching = self.block
        if count != reaching:
            raise TileLabTypeError(
                f"T.sync_threads({barrier_id}, {count}) waits for {count} threads, but "
                f"{reaching} reach it here" + (f" (threads {lo}..{hi - 1})" if reaching else ""),
                _location(stmt), hint="give the number of threads the `if`s around it let "
                f"through: T.sync_threads({barrier_id}, {reaching})")
        return sync()

    def check(self, stmt):
        """What one thread may do: plain statements, loops, its own registers."""
        def refuse(node, message, hint):
            error = TileLabTypeError(message, _location(node) or _location(stmt), hint=hint)
            if isinstance(node, TilePrimitiveCall):
                with at_user_line(node, self.func):
                    raise error
            raise error

        def visit(node):
            if isinstance(node, TilePrimitiveCall):
                op = lookup(node)
                if not op.allowed_in_thread_code(node) or \
                        any(is_fragment(r.buffer) for r in regions(node)):
                    refuse(node, f"T.{op.name} is the whole block's work, and here it is in "
                           "code each thread runs for itself (it depends on the thread index "
                           "or on a thread's own register)",
                           "keep tile ops outside `if`s and loops on the thread index and "
                           "give them no per-thread values; one thread may T.fill/T.clear "
                           "its registers, T.copy into or out of them and T.atomic_add")
            elif isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
                refuse(node, "a T.Parallel loop in code each thread runs for itself (it "
                       "depends on the thread index or on a thread's own register): the "
                       "compiler deals a T.Parallel loop's elements to the threads",
                       "loop with T.serial in thread code, or keep the thread index out of "
                       "the T.Parallel loop")
            elif isinstance(node, tirx.AttrStmt) and node.attr_key == WARP_ROLE:
                refuse(node, "a T.ws role inside code each thread runs for itself",
                       "put the role outside `if`s and loops on the thread index")
            elif is_sync(node):
                refuse(node, "a barrier (T.sync_threads) inside an `if` or loop that depends "
                       "on the thread index: the threads that skip it never arrive",
                       "put the barrier where every thread of the block reaches it")
            elif isinstance(node, tirx.BufferStore) and is_fragment(node.buffer) or \
                    is_load(node) and is_fragment(node.source):
                name = node.buffer.name if isinstance(node, tirx.BufferStore) else \
                    node.source.name
                refuse(node, f"fragment {name!r} in code each thread runs for itself: the "
                       "compiler spreads a fragment's elements over the threads",
                       "use T.alloc_local for a thread's own registers, or T.alloc_shared")

        walk(stmt, object, visit)
        self.check_exchanges(stmt, refuse)

    def check_exchanges(self, stmt, refuse):
        """A warp shuffle or all-reduce stores into its exchange tile, then reads the
        entries other threads stored. The two must be separate pieces of thread code, a
        barrier between; in one piece (under an `if` or loop on a thread's own values) a
        thread would read entries its partners have not stored yet."""
        stored = {}

        def visit(node):
            if isinstance(node, tirx.BufferStore) and node.buffer.name in self.exchanges:
                stored.setdefault(node.buffer.name, node)

        walk(stmt, tirx.BufferStore, visit)
        read = []
        walk(stmt, object, lambda n: read.append(n) if is_load(n) and
             n.source.name in stored else None)
        if read:
            refuse(stored[read[0].source.name],
                   "a warp shuffle (or thread all-reduce) under an `if` or loop on a "
                   "thread's own values: its threads exchange values through shared memory, "
                   "and every thread of the block must store its value before any reads",
                   "shuffle where every thread gets to (before the `if`) and use the value "
                   "inside it")


def _location(node):
    """The user's line of the first statement in `node` that carries one (its span)."""
    found = []

    def visit(n):
        where = None if found else span_location(n)
        if where is not None:
            found.append(where)

    walk(node, object, visit)
    return found[0] if found else None


def takes_thread_index(func) -> bool:
    """Does a kernel of `func` use the thread index? Only then do the passes here run."""
    found = []
    walk(func.body, tirx.For, lambda loop: found.append(loop)
         if THREAD_INDEX in loop.annotations else None)
    return bool(found)


def _kernels(func, on_kernel):
    def visit(loop):
        if KERNEL in loop.annotations and THREAD_INDEX in loop.annotations:
            return on_kernel(loop)
        return loop

    return func.with_body(rewrite_pre(func.body, tirx.For, visit))


def exchange_tiles(body) -> set:
    """Names of the shared tiles through which thread code hands values between threads
    (a warp shuffle's, a thread all-reduce's: marked EXCHANGE where they are allocated).
    Their barriers are tilelab's to place, also where the program places those of its own
    thread code (tl.disable_thread_storage_sync)."""
    found = set()
    walk(body, tirx.AllocBuffer, lambda a: found.add(a.buffer.name)
         if EXCHANGE in a.annotations else None)
    return found


def hands_over(code, exchanges: set) -> bool:
    """Does `code` touch one of the `exchanges` (exchange_tiles)? Such code is never the
    program's to order under tl.disable_thread_storage_sync: the program cannot write the
    barriers of a shuffle's exchange (passes/insert_barriers.py, the thread lowering)."""
    return any(buffer.name in exchanges for buffer in accessed_buffers(code))


def MarkThreadCode():  # noqa: N802
    """Expects tile ops; marks the thread code of kernels that take the thread index."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.MarkThreadCode")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        def on_kernel(kernel):
            def mark(body):
                body = _registers_of_each_thread(body)
                private = private_registers(body, kernel.annotations[THREAD_INDEX])
                return _Marker(private, func, kernel, exchange_tiles(body)).mark(body)

            return with_block_body(kernel, mark)

        return _kernels(func, on_kernel)

    return _pass


def _registers_of_each_thread(body):
    """Fragments that no tile op and no T.Parallel loop touches, only statements every
    thread runs (TileLang's hand-written producers keep the indices they prefetch so):
    each thread has the whole fragment, as T.alloc_local gives it, which code written
    for one thread may read and write."""
    fragments, whole_block_work, views = {}, set(), []

    def visit(node):
        if isinstance(node, tirx.AllocBuffer) and is_fragment(node.buffer):
            fragments[node.buffer.name] = node.buffer
        elif isinstance(node, TilePrimitiveCall):
            whole_block_work.update(r.buffer.name for r in regions(node))
        elif isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
            whole_block_work.update(b.name for b in accessed_buffers(node))
        elif isinstance(node, tirx.DeclBuffer) and is_fragment(node.buffer):
            views.append(node)  # a view of a fragment (T.view, T.reshape): left as it is

    walk(body, object, visit)
    if views:
        return body
    local = {name: tirx.decl_buffer(b.shape, str(b.dtype), name=name, scope="local")
             for name, b in fragments.items() if name not in whole_block_work}
    if not local:
        return body
    olds = [fragments[name] for name in local]
    return tvm_ffi.structural_map(body, (tirx.Var, lambda var: next(
        (local[old.name] for old in olds if var.same_as(old)), var)), order="post")


def thread_indices(flat, extents) -> list:
    """The x, y, z thread indices of the flat one (x varies fastest)."""
    return unravel(flat, extents[::-1])[::-1]


def ThreadLoops():  # noqa: N802
    """CPU, after the tile ops became loops: each mark runs once per thread."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.ThreadLoops")
    def _pass(func, _mod, _ctx):
        copied = set()  # (named on the function, for the bounds checks' messages)

        def on_kernel(kernel):
            extents = [int(t) for t in kernel.annotations[THREADS]]
            thread_vars = list(kernel.annotations[THREAD_INDEX])
            copies = _per_thread_copies(block_body(kernel), math.prod(extents))
            copied.update(copies)

            def access(t, node):
                if isinstance(node, tirx.BufferStore) and node.buffer.name in copies:
                    return tirx.BufferStore(copies[node.buffer.name], node.value,
                                            [t, *node.indices], span=node.span)
                if is_load(node) and node.source.name in copies:
                    return tirx.BufferLoad(copies[node.source.name], [t, *node.indices])
                return node

            def loops_over(threads):
                """Each mark as a loop over `threads` (first, end): a role's, or all."""
                def on_mark(attr):
                    if attr.attr_key != PER_THREAD:
                        return attr
                    t = tirx.Var("thread", "int32")
                    inner = substitute(attr.body, dict(zip(thread_vars,
                                                           thread_indices(t, extents))))
                    inner = rewrite(inner, tvm.ir.TensorLoad, lambda n: access(t, n))
                    inner = rewrite(inner, tirx.BufferStore, lambda n: access(t, n))
                    return tirx.For(t, threads[0], threads[1] - threads[0],
                                    tirx.ForKind.SERIAL, inner)

                return on_mark

            def in_role(attr):  # thread code inside a role: the role's threads run it
                if role_threads(attr) is None:
                    return attr
                first, end = role_threads(attr)
                return tirx.AttrStmt(attr.node, attr.attr_key, attr.value, rewrite(
                    attr.body, tirx.AttrStmt, loops_over((first, end))))

            def run(body):
                body = rewrite_pre(body, tirx.AttrStmt, in_role)
                body = rewrite(body, tirx.AttrStmt, loops_over((0, math.prod(extents))))
                return rewrite(body, tirx.AllocBuffer, lambda a: tirx.AllocBuffer(
                    copies[a.buffer.name]) if a.buffer.name in copies else a)

            done = with_block_body(kernel, run)  # the thread indices are gone now
            return tirx.For(done.loop_var, done.min, done.extent, done.kind, done.body,
                            thread_binding=done.thread_binding,
                            annotations={k: v for k, v in done.annotations.items()
                                         if k != THREAD_INDEX})

        func = _kernels(func, on_kernel)
        return func.with_attr(THREAD_COPIES, sorted(copied)) if copied else func

    return _pass


def _per_thread_copies(body, threads: int) -> dict:
    """A copy per thread of each register thread code writes: name -> [threads, ...]."""
    copies: dict = {}

    def in_mark(attr):
        if attr.attr_key != PER_THREAD:
            return

        def store(node):
            b = node.buffer
            if _register(b) and b.name not in copies:
                copies[b.name] = tirx.decl_buffer((threads, *b.shape), b.dtype, name=b.name,
                                                  scope="local")

        walk(attr.body, tirx.BufferStore, store)

    walk(body, tirx.AttrStmt, in_mark)
    return copies
