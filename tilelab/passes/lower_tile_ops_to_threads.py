"""Lower tile operations to the code each GPU thread runs: the driver.

After layout inference every fragment has a `Fragment` layout, so each
thread knows which elements it keeps and in which of its registers. This
pass rewrites the tile program into per-thread code around `threadIdx.x`:

* a fragment becomes a small local array per thread;
* a `T.Parallel` nest over a fragment runs, on each thread, just the
  iterations whose elements that thread keeps (the layout's inverse gives the
  index of register `reg` on thread `tx`); the register loop is unrolled at
  compile time so every register index is a constant; a nest without
  fragments is dealt to the threads in runs of up to four elements;
* a store outside parallel loops runs once per block (thread 0), or on every
  thread for a register;
* code written for one thread (a `tilelab.per_thread` mark of passes/thread_code.py)
  runs on every thread as the body of a T.Parallel iteration does; where the program
  places the barriers of such code itself (`tl.disable_thread_storage_sync`), each
  piece of it and each T.Parallel nest that touches shared memory is marked
  `OWN_BARRIERS`; otherwise such a nest is marked `AS_ONE`, one statement to TVM's
  barrier pass (passes/hide_from_thread_sync.py);
* a tile op is lowered by its own module (`tilelab/ops/copy.py`, `gemm.py`,
  ...), which gets a `ThreadLowering` - the context below: the thread index,
  the layouts, each fragment's local array, and helpers that deal work to
  threads or guard a padded register.

Edges are guarded: global elements outside the tensor read as zero and are
never written, as the loop semantics (each op's CPU lowering) say.
"""

from __future__ import annotations

import functools
import math

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import TileLabTypeError
from ..ir.expr import dtype_of
from ..ir.keys import (
    AS_ONE,
    KERNEL,
    LAYOUT_PLAN,
    OWN_BARRIERS,
    PER_THREAD,
    SWIZZLE,
    THREAD_INDEX,
    THREADS,
    WARP_ROLE,
    block_threads,
    fact_value,
    role_threads,
    without_facts,
)
from ..ir.layout import Fragment, kept_whole_alike, owner_table, thread_elements
from ..ir.tile_ops import _const_int, data_of, is_buffer, is_load, touches_shared
from ..ir.visit import keep_user_errors, rewrite, rewrite_pre, substitute, walk
from ..ops import at_user_line, lookup
from ..ops._lowering import (
    address,
    extern_name,
    is_fragment,
    seq,
    simplify,
    thread_index_range,
    unravel,
)
from .infer_layouts import (
    LayoutPlan,
    is_zero_offset,
    parallel_nest,
    register_read_by_all,
    relative_shifts,
    shifter,
)
from .thread_code import exchange_tiles, hands_over, thread_indices


def _is_register_tile(buffer) -> bool:
    """A fragment or a T.alloc_var scalar, before this pass gives it a local array."""
    return is_buffer(buffer) and buffer.scope() in ("local.fragment", "local.var")


def _placed(layout, row, col) -> list:
    """(row, col) of a shared tile moved where its layout stores it (simplified).

    A wrap of a wrap in a swizzled column, `(x % 8 + 5) % 8`, is kept as a bitwise and:
    TVM's iterator analysis (in FlattenBuffer) reads `x % 8 * 8 - (x % 8 + 5) % 8 * 8`
    as a constant, dropping the outer wrap, and then divides by zero. The simplifier
    gives that form to the column of a fragment region copied to a shifted place
    (`T.copy(f[0:1, 53:58], s[6:7, 31:36])`). Both mean the same; `&` the analysis
    leaves alone."""
    new_row, new_col = layout.place(row, col)

    def wrap_as_and(node):
        m, a = _const_int(node.b), node.a
        if m and m & (m - 1) == 0 and isinstance(a, tirx.Add) and \
                isinstance(a.a, tirx.FloorMod) and _const_int(a.a.b) == m and \
                _const_int(a.b) is not None:
            return tirx.bitwise_and(a, tirx.const(m - 1, dtype_of(a)))
        return node

    return [new_row if new_row is row else simplify(new_row),
            rewrite(simplify(new_col), tirx.FloorMod, wrap_as_and)]


class ThreadLowering:
    """State of the rewrite of one kernel body."""

    def __init__(self, plan: LayoutPlan, threads: int, tx, block_vars, func=None,
                 own_barriers: bool = False):
        self.func = func  # the PrimFunc: errors name the user's file through its attributes
        self.own_barriers = own_barriers  # tl.disable_thread_storage_sync
        self.plan = plan
        self.threads = threads
        self.tx = tx
        self.block_vars = block_vars
        self.locals: dict = {}  # fragment name -> per-thread local buffer
        self.scratch: list = []  # shared buffers added for reductions
        self.in_parallel = False
        self._inverse_cache: dict = {}
        # (fragment, id of the loop's layout, its register, the access's shifts) -> the
        # fragment's register that access reaches (the same on every thread)
        self._reached: dict = {}
        self._pools: dict = {}  # (name, dtype) -> the scratch tiles `finish` makes one

    # ------------------------------------------------------------ shared scratch

    def pooled_scratch(self, name: str, size: int, dtype: str):
        """A shared scratch tile of `size` elements that every use under this name and dtype
        in the block (or warp role) shares: `finish` makes them one tile, as large as the
        largest. The uses follow one another in program order, and TVM's ThreadSync puts a
        barrier between one use's last reads and the next one's first writes - one barrier
        traded for the bytes of a tile per use, which a kernel near the shared-memory limit
        needs (a paged MLA decode's row max and row sum across 8 warps)."""
        buffer = tirx.decl_buffer((size,), dtype, name=name, scope="shared.dyn")
        self._pools.setdefault((name, dtype), []).append(buffer)
        return buffer

    def finish(self, body):
        """`body` with each pool of scratch tiles (pooled_scratch) made its largest tile,
        which joins the tiles the kernel allocates."""
        merged = []  # (a tile, the largest of its pool); TVM objects compare by same_as
        for tiles in self._pools.values():
            keep = max(tiles, key=lambda t: int(t.shape[0]))
            self.scratch.append(keep)
            merged += [(t, keep) for t in tiles if not t.same_as(keep)]
        self._pools = {}

        def kept(buffer):
            return next((keep for t, keep in merged if t.same_as(buffer)), None)

        def store(s):
            keep = kept(s.buffer)
            return s if keep is None else tirx.BufferStore(keep, s.value, list(s.indices))

        def load(e):
            keep = kept(e.source) if is_buffer(e.source) else None
            return e if keep is None else tirx.BufferLoad(keep, list(e.indices))

        return rewrite(rewrite(body, tirx.BufferStore, store), tvm.ir.TensorLoad, load)

    # ------------------------------------------------------------ helpers

    def layout_of(self, buffer) -> Fragment:
        return self.plan.fragments[buffer.name]

    def local(self, buffer):
        return self.locals[buffer.name]

    def inverse(self, frag: Fragment, reg: int) -> list:
        """Index (and replica) of register `reg` on thread tx, as simplified expressions."""
        key = id(frag)
        if key not in self._inverse_cache:
            lvar = tirx.Var("reg", "int32")
            self._inverse_cache[key] = (lvar, frag.index_of(self.tx, lvar))
        lvar, exprs = self._inverse_cache[key]
        return [simplify(substitute(e, {lvar: tirx.const(reg, "int32")})) if not isinstance(e, int)
                else e for e in exprs]

    def address(self, buffer, indices, rw_mask: int = 1):
        """Pointer to a shared or local element, through the tile's swizzle if it has one."""
        indices = list(indices)
        layout = self.plan.shared_layouts.get(buffer.name)
        if layout is not None:
            indices[-2:] = _placed(layout, indices[-2], indices[-1])
        return address(buffer, indices, rw_mask)

    def swizzle_accesses(self, body):
        """Rewrite loads and stores of swizzled shared tiles to their permuted columns.

        Inside a vectorized loop, column `base + v` becomes `swizzled(base) + v`: a
        layout moves whole 16-byte chunks, so a vector stays one contiguous access.
        """
        if not self.plan.shared_layouts:
            return body
        import tvm

        vector_vars: list = []

        def column(buffer, indices):
            layout = self.plan.shared_layouts[buffer.name]
            indices = list(indices)
            last = indices[-1]
            lane = None
            if isinstance(last, tirx.Add):
                for v in vector_vars:
                    if last.b.same_as(v):
                        last, lane = last.a, v
                        break
                    if last.a.same_as(v):
                        last, lane = last.b, v
                        break
            row, col = _placed(layout, indices[-2], last)
            indices[-2:] = [row, col + lane if lane is not None else col]
            return indices

        def on_load(load):
            if is_load(load) and load.source.name in self.plan.shared_layouts:
                return tirx.BufferLoad(load.source, column(load.source, load.indices))
            return load

        def on_store(store):
            if store.buffer.name in self.plan.shared_layouts:
                return tirx.BufferStore(store.buffer, store.value,
                                        column(store.buffer, store.indices))
            return store

        def on_loop(loop):
            if loop.kind == tirx.ForKind.VECTORIZED:
                vector_vars.append(loop.loop_var)

        walk(body, tirx.For, on_loop)
        body = rewrite(body, tvm.ir.TensorLoad, on_load)
        return rewrite(body, tirx.BufferStore, on_store)

    def deal(self, count: int, body_fn, unroll_up_to: int = 0):
        """Items 0..count-1 dealt to the threads round-robin: in round c, thread tx takes item
        c * threads + tx. `body_fn(item)` builds one item's statement; items past `count` in
        the last round are skipped; up to `unroll_up_to` rounds are unrolled."""
        rounds = -(-count // self.threads)
        c = tirx.Var("c", "int32")
        item = c * self.threads + self.tx if rounds > 1 else self.tx
        stmt = body_fn(item)
        if count % self.threads:
            stmt = guard_each(tirx.LT(item, count), stmt)
        if rounds == 1:
            return stmt
        kind = tirx.ForKind.UNROLLED if rounds <= unroll_up_to else tirx.ForKind.SERIAL
        return tirx.For(c, 0, rounds, kind, stmt)

    def _has(self, frag: Fragment, reg: int):
        """Whether this thread has register `reg` of a padded fragment (some threads lack
        it): a condition on the thread, or None where every thread has it."""
        elements = thread_elements(frag)
        holders = [elements[t][reg] is not None for t in range(frag.threads)]
        if all(holders):
            return None
        if frag.valid is not None:
            return simplify(frag.valid(self.tx, tirx.const(reg, "int32")))
        # a layout the program gave (T.Fragment) says nothing of the threads it leaves
        # idle: the threads that hold the register, as ranges of thread indices
        ranges, start = [], None
        for t, held in enumerate(holders + [False]):
            if held and start is None:
                start = t
            elif not held and start is not None:
                ranges.append(tirx.And(self.tx >= start, self.tx < t))
                start = None
        return simplify(functools.reduce(tirx.Or, ranges, tirx.const(False, "bool")))

    def only_if_valid(self, frag: Fragment, reg: int, stmt):
        """Guard a statement on register `reg` of a padded fragment."""
        cond = self._has(frag, reg)
        return stmt if cond is None else guard_each(cond, stmt)

    def valid_or(self, frag: Fragment, reg: int, value, default):
        """`value` (of register `reg`) where the thread has that register of a padded
        fragment, `default` elsewhere."""
        cond = self._has(frag, reg)
        return value if cond is None else tirx.Select(cond, value, default)

    # ------------------------------------------------------------ statements

    def lower(self, stmt):
        if isinstance(stmt, tirx.SeqStmt):
            return seq([self.lower(s) for s in stmt])
        if isinstance(stmt, tirx.AllocBuffer):
            return self.lower_alloc(stmt)
        if isinstance(stmt, tirx.DeclBuffer) and is_fragment(stmt.buffer):
            # a view (T.reshape): its layout is its fragment's seen with its shape, so its
            # register numbers are the fragment's - it names the fragment's local array
            self.locals[stmt.buffer.name] = self.locals[data_of(stmt.data).name]
            return tirx.Evaluate(tirx.const(0, "int32"))
        if isinstance(stmt, TilePrimitiveCall):
            return self.lower_tile_op(stmt)
        if isinstance(stmt, tirx.For):
            if stmt.kind == tirx.ForKind.PARALLEL:
                return self.lower_parallel(stmt)
            # bounds may read a T.alloc_var (`for k in T.Pipelined(n)`): its register
            return tirx.For(stmt.loop_var, self.fragment_scalars(stmt.min),
                            self.fragment_scalars(stmt.extent), stmt.kind,
                            self.lower(stmt.body), annotations=without_facts(stmt.annotations))
        if isinstance(stmt, tirx.IfThenElse):
            return tirx.IfThenElse(self.fragment_scalars(stmt.condition),
                                   self.lower(stmt.then_case),
                                   self.lower(stmt.else_case) if stmt.else_case else None)
        if isinstance(stmt, tirx.While):
            return tirx.While(self.fragment_scalars(stmt.condition), self.lower(stmt.body))
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == WARP_ROLE:
            return self.lower_role(stmt)
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == PER_THREAD:
            return self.lower_thread_code(stmt.body)
        if isinstance(stmt, tirx.AttrStmt):  # a mark for a later pass (a pipeline's refill)
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, self.lower(stmt.body))
        if isinstance(stmt, tirx.BufferStore):
            return self.lower_block_store(stmt)
        if isinstance(stmt, tirx.Bind):  # `A = T.make_tensor(ptrs[i], ...)`, i a T.alloc_var
            return tirx.Bind(stmt.var, self.fragment_scalars(stmt.value))
        return stmt

    def lower_role(self, stmt):
        """`with T.ws(...)`: the body is lowered for the role's threads, numbered from 0
        (`rtx = threadIdx.x - first`), as if they were the block. The mark stays for
        passes/warp_roles.py, which turns it into the role's `if` once TVM has placed its
        barriers (and makes those inside the role's own)."""
        first, end = role_threads(stmt)
        rtx = tirx.Var("rtx", "int32")
        role = ThreadLowering(self.plan, end - first, rtx, self.block_vars, self.func,
                              self.own_barriers)
        role.locals, role.scratch = self.locals, self.scratch
        with thread_index_range(rtx, end - first):
            body = role.finish(role.lower(stmt.body))
        return tirx.AttrStmt(stmt.node, WARP_ROLE, stmt.value,
                             seq([tirx.Bind(rtx, self.tx - first), body]))

    def lower_thread_code(self, body):
        """Code each thread runs for itself (passes/thread_code.py): as the body of a
        T.Parallel iteration, every thread runs it and keeps its own stores."""
        outer, self.in_parallel = self.in_parallel, True
        try:
            return self.own(self.lower(body), outer, parallel=False)
        finally:
            self.in_parallel = outer

    def own(self, lowered, inside: bool, parallel: bool):
        """The lowered code of a piece of thread code or a T.Parallel nest, marked for TVM's
        ThreadSync (once: not `inside` another piece; code that touches no shared tile
        needs no barrier). Where the program places the barriers of its own code
        (tl.disable_thread_storage_sync), both are `OWN_BARRIERS`: ThreadSync does not see
        them. Otherwise a T.Parallel nest is `AS_ONE`: its iterations are independent, so
        ThreadSync orders it against the rest as one statement and puts no barrier between
        its unrolled elements (it takes all dynamic shared memory for one buffer). A piece
        that hands values through an exchange tile (a warp shuffle, a thread all-reduce)
        is neither: those barriers are tilelab's."""
        if inside or not touches_shared(lowered) or hands_over(lowered, self.exchanges):
            return lowered
        if not self.own_barriers and not parallel:
            return lowered
        key = OWN_BARRIERS if self.own_barriers else AS_ONE
        return tirx.AttrStmt(tirx.const(0, "int32"), key, tirx.const(1, "int32"), lowered)

    @functools.cached_property
    def exchanges(self) -> set:
        return exchange_tiles(self.func.body)

    def lower_alloc(self, stmt):
        buffer = stmt.buffer
        if is_fragment(buffer):
            frag = self.layout_of(buffer)
            local = tirx.decl_buffer((frag.local_size,), buffer.dtype, name=buffer.name,
                                     scope="local")
            self.locals[buffer.name] = local
            return tirx.AllocBuffer(local)
        if buffer.scope() == "local.var":
            local = tirx.decl_buffer(buffer.shape, buffer.dtype, name=buffer.name, scope="local")
            self.locals[buffer.name] = local
            return tirx.AllocBuffer(local)
        return stmt

    def fragment_scalars(self, expr):
        """Outside parallel loops, fragment reads must be of elements every thread keeps."""
        def replace(load):
            if not (is_load(load) and _is_register_tile(load.source)):
                return load
            return tirx.BufferLoad(self.locals[load.source.name],
                                   [self.replicated_local(load.source, load.indices)])

        return rewrite(expr, tvm.ir.TensorLoad, replace)

    def replicated_local(self, buffer, indices):
        """The register every thread reads element `indices` from (a variable index: where
        every thread keeps the whole fragment alike, e.g. a block mask read in a serial
        loop); InferLayouts checked that it exists."""
        if buffer.scope() == "local.var":
            return indices[0]
        return simplify(register_read_by_all(buffer, indices, self.layout_of(buffer),
                                             self.threads))

    def lower_block_store(self, stmt):
        """A store outside parallel loops runs once per block (or per thread for registers)."""
        value = self.fragment_scalars(stmt.value)
        indices = [self.fragment_scalars(i) for i in stmt.indices]
        if _is_register_tile(stmt.buffer):
            local = self.locals[stmt.buffer.name]
            index = self.replicated_local(stmt.buffer, indices)
            return tirx.BufferStore(local, value, [index])
        store = tirx.BufferStore(stmt.buffer, value, indices)
        if self.in_parallel or stmt.buffer.scope() == "local":
            return store
        return tirx.IfThenElse(tirx.EQ(self.tx, 0), store, None)

    # ------------------------------------------------------------ T.Parallel

    def lower_parallel(self, loop):
        nest = parallel_nest(loop)
        body = loop
        for _ in nest.loop_vars:
            body = body.body
        layout = self.plan.loop_layouts.get(loop)
        outer, self.in_parallel = self.in_parallel, True
        try:
            if layout is None:
                return self.own(self.parallel_without_fragments(nest, body), outer, parallel=True)
            elements = thread_elements(layout)
            stmts = []
            for reg in range(layout.local_size):
                if all(elements[t][reg] is None for t in range(layout.threads)):
                    continue
                index = self.inverse(layout, reg)
                shift = self.plan.loop_shifts.get(loop)
                if shift is not None:  # the iteration whose element + shift is there
                    index = [simplify(tirx.floormod(i - c + e, e)) if not is_zero_offset(c) else i
                             for i, c, e in zip(index, shift, nest.extents)] + index[len(shift):]
                mapped = self.map_fragment_accesses(body, nest, layout, reg)
                mapped = substitute(mapped, dict(zip(nest.loop_vars, index)))
                lowered = self.lower(mapped)
                if layout.replicate > 1:  # every copy runs the iteration; one writes memory
                    lowered = _first_copy_writes(lowered, index[len(nest.loop_vars)])
                stmts.append(self.only_if_valid(layout, reg, lowered))
            return self.own(seq(stmts), outer, parallel=True)
        finally:
            self.in_parallel = outer

    def parallel_without_fragments(self, nest, body):
        """No fragments inside: deal the iterations to threads.

        When every thread gets several iterations, each takes a run of `vector`
        consecutive ones (up to four 32-bit elements: one 16-byte access), marked
        vectorized; otherwise iterations go round-robin, one per thread per round.
        A body that writes a thread's own scalar (`T.alloc_local`) is not vectorized:
        the lanes of a vector would all write the one scalar.
        """
        total = math.prod(nest.extents)
        vector = 1 if _writes_private(body) else 4
        while vector > 1 and (total % (self.threads * vector) or nest.extents[-1] % vector):
            vector //= 2
        vv = tirx.Var("v", "int32")

        def run(chunk):
            flat = chunk * vector + vv if vector > 1 else chunk
            stmt = self.lower(substitute(body, dict(zip(nest.loop_vars,
                                                        unravel(flat, nest.extents)))))
            return tirx.For(vv, 0, vector, tirx.ForKind.VECTORIZED, stmt) if vector > 1 \
                else stmt

        return self.deal(total // vector, run, unroll_up_to=8)

    def map_fragment_accesses(self, body, nest, layout, reg):
        """Replace fragment accesses of iteration register `reg` by local-array accesses."""
        elements = thread_elements(layout)

        def local_index(buffer, indices, written):
            shifts = relative_shifts(nest, self.plan, indices)
            frag = self.layout_of(buffer)
            if shifts is None or (not written and any(shifts[1]) and kept_whole_alike(frag)):
                # a computed index: every thread keeps the whole fragment
                return simplify(frag.local_of(*indices))  # (checked by layout inference)
            key = (buffer.name, id(layout), reg, shifts)
            if key not in self._reached:
                owners, shift = owner_table(frag), shifter(*shifts, frag.shape)
                found = {owners[shift(elements[t][reg])][t]
                         for t in range(layout.threads) if elements[t][reg] is not None}
                if len(found) != 1:
                    raise TileLabTypeError(f"fragment {buffer.name!r} does not line up with "
                                           "the loop layout of its T.Parallel loop")
                self._reached[key] = found.pop()
            return self._reached[key]

        def on_load(load):
            if is_load(load) and is_fragment(load.source):
                return tirx.BufferLoad(self.local(load.source),
                                       [local_index(load.source, load.indices, False)])
            if is_load(load) and load.source.scope() == "local.var" and \
                    load.source.name in self.locals:  # (one of the body's own stays itself)
                return tirx.BufferLoad(self.locals[load.source.name], list(load.indices))
            return load

        def on_store(store):
            if is_fragment(store.buffer):
                return tirx.BufferStore(self.local(store.buffer), store.value,
                                        [local_index(store.buffer, store.indices, True)])
            if store.buffer.scope() == "local.var" and store.buffer.name in self.locals:
                return tirx.BufferStore(self.locals[store.buffer.name], store.value,
                                        list(store.indices))
            return store

        body = rewrite(body, tvm.ir.TensorLoad, on_load)
        return rewrite(body, tirx.BufferStore, on_store)

    # ------------------------------------------------------------ tile ops

    def lower_tile_op(self, stmt):
        """Each op lowers itself (its module in tilelab/ops/); this context is what it gets."""
        with at_user_line(stmt, self.func):
            op = lookup(stmt)
            if self.in_parallel and not op.in_parallel and not op.allowed_in_thread_code(stmt):
                raise TileLabTypeError(f"T.{op.name} cannot be used inside a T.Parallel loop")
            traced = stmt
            if not self.in_parallel:  # a region that starts at a T.alloc_var's value
                stmt = self.fragment_scalars(stmt)
            else:  # code of one thread: `T.atomic_add(hist[v], 1)` with v its T.alloc_var
                stmt = self.var_registers(stmt)
            self.plan.follow(traced, stmt)
            return op.lowering("cuda")(stmt, self)

    def var_registers(self, node):
        """`node` reading each T.alloc_var through the register array it became (the
        statements around it do so already: lower_alloc, map_fragment_accesses)."""
        def replace(load):
            if is_load(load) and load.source.scope() == "local.var" and \
                    load.source.name in self.locals:
                return tirx.BufferLoad(self.locals[load.source.name], list(load.indices))
            return load

        return rewrite(node, tvm.ir.TensorLoad, replace)


def guard_each(cond, stmt):
    """`if cond: a; b` as `if cond: a` and `if cond: b`, for a condition on thread and
    loop indices (which the statements cannot change).

    TVM's ThreadSync treats all dynamic shared tiles as one buffer, so it may want a
    barrier between `a` and `b` (one reads a tile, the other writes another); inside
    an `if` that depends on the thread it cannot put one, and fails. Between two
    `if`s it can.
    """
    if isinstance(stmt, tirx.SeqStmt):
        return seq([guard_each(cond, s) for s in stmt])
    return tirx.IfThenElse(cond, stmt, None)


def _first_copy_writes(stmt, rep):
    """In a loop over a replicated layout, the threads holding copies of an element all
    run its iteration: they keep their registers up to date, but only copy 0 stores to
    shared or global memory or adds atomically (every copy adding would count it again)."""
    first = tirx.EQ(rep, 0)

    def store(node):
        if node.buffer.scope() in ("local", "local.var"):
            return node
        return tirx.IfThenElse(first, node, None)

    def atomic(node):
        return tirx.IfThenElse(first, node, None) if extern_name(node).startswith("atomic") \
            else node

    return rewrite(rewrite(stmt, tirx.BufferStore, store), tirx.Evaluate, atomic)


def _writes_private(body) -> bool:
    found = []

    def visit(store):
        if store.buffer.scope() in ("local", "local.var"):
            found.append(store)

    walk(body, tirx.BufferStore, visit)
    return bool(found)


# ---------------------------------------------------------------- the pass


def rasterize(block_loops, panel: int):
    """`T.use_swizzle(panel)`: visit blocks in panels of `panel` rows for L2 reuse.

    Launch order is blockIdx.x fastest, so consecutive blocks normally sweep a
    whole row of output tiles, each needing a different column of B. Renumbered,
    consecutive blocks walk down a panel of `panel` rows first: they share
    columns of B and rows of A while those are still in L2.
    """
    bx, by = block_loops[0], block_loops[1]
    gx, gy = int(bx.extent), int(by.extent)
    linear = by.loop_var * gx + bx.loop_var
    panel_size = panel * gx
    panel_id, within = tirx.floordiv(linear, panel_size), tirx.floormod(linear, panel_size)
    rows = tirx.min(panel, gy - panel_id * panel)
    return {by.loop_var: panel_id * panel + tirx.floormod(within, rows),
            bx.loop_var: tirx.floordiv(within, rows)}


def _add_threads(loop, lowering_fn, threads, swizzle=None):
    """Wrap the innermost block loop's body in the threadIdx.x binding loop."""
    block_loops = []
    node = loop
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
        block_loops.append(node)
        node = node.body
    tx = tirx.Var("tx", "int32")
    with thread_index_range(tx, threads):
        body, scratch = lowering_fn(node, tx, [b.loop_var for b in block_loops])
    if THREAD_INDEX in loop.annotations:  # the program's own thread indices
        extents = [int(t) for t in loop.annotations[THREADS]]
        body = substitute(body, dict(zip(loop.annotations[THREAD_INDEX],
                                         thread_indices(tx, extents))))
    # renumber the blocks in the lowered code: substituted before, it would rebuild the
    # T.Parallel loops that read a block index, which the layout plan knows by identity
    if swizzle and swizzle[2] and len(block_loops) >= 2:
        body = substitute(body, rasterize(block_loops, swizzle[0]))
    body = seq([tirx.AllocBuffer(s) for s in scratch] + [body])
    iter_var = tirx.IterVar(None, tirx.Var("threadIdx.x", "int32"), tirx.IterVar.ThreadIndex,
                            "threadIdx.x")
    body = tirx.For(tx, 0, threads, tirx.ForKind.THREAD_BINDING, body, thread_binding=iter_var)
    for b in reversed(block_loops):
        annotations = {k: v for k, v in without_facts(b.annotations).items()
                       if k != THREAD_INDEX}
        body = tirx.For(b.loop_var, b.min, b.extent, b.kind, body,
                        thread_binding=b.thread_binding, annotations=annotations)
    return body


def LowerTileOpsToThreads(own_barriers: bool = False):  # noqa: N802
    """Expects tile ops, and the LayoutPlan InferLayouts left on each kernel loop (and
    T.use_swizzle's setting there, if the program has one). `own_barriers`: the program
    places the barriers of its thread code and T.Parallel loops (their code is marked)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.LowerTileOpsToThreads")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        def on_kernel(loop):
            if KERNEL not in loop.annotations:
                return loop
            if LAYOUT_PLAN not in loop.annotations:
                raise TileLabTypeError("LowerTileOpsToThreads needs the layout plan that "
                                       "InferLayouts leaves on each T.Kernel loop")
            plan = fact_value(loop.annotations[LAYOUT_PLAN])
            threads = block_threads(loop)

            def lower(body, tx, block_vars):
                lowering = ThreadLowering(plan, threads, tx, block_vars, func, own_barriers)
                lowered = lowering.finish(lowering.swizzle_accesses(lowering.lower(body)))
                return lowered, lowering.scratch

            swizzle = loop.annotations.get(SWIZZLE)
            if swizzle is not None:
                swizzle = (int(swizzle[0]), str(swizzle[1]), bool(swizzle[2]))
            return _add_threads(loop, lower, threads, swizzle)

        return func.with_body(rewrite_pre(func.body, tirx.For, on_kernel))

    return _pass
