"""Lower tile operations to the code each GPU thread runs.

After layout inference every fragment has a `Fragment` layout, so each
thread knows which elements it keeps and in which of its registers. This
pass rewrites the tile program into per-thread code around `threadIdx.x`:

* a fragment becomes a small local array per thread;
* a `T.Parallel` nest over a fragment runs, on each thread, just the
  iterations whose elements that thread keeps (the layout's inverse gives the
  index of register `reg` on thread `tx`); the register loop is unrolled at
  compile time so every register index is a constant;
* a copy between global and shared memory is shared by all threads in
  16-byte vectors; a copy to or from a fragment is done by each thread for
  its own registers;
* a reduction folds each thread's registers, then combines threads with warp
  shuffles (`shfl.xor`) and, across warps, through shared memory;
* a GEMM on half-precision tiles becomes tensor-core `mma.sync` instructions
  fed by `ldmatrix` (see `_lower_gemm`).

Edges are guarded: global elements outside the tensor read as zero and are
never written, as the loop semantics of `lower_tile_ops_to_loops` say.
"""

from __future__ import annotations

import math

from tvm import sym, tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import TileLabTypeError
from ..ir.layout import Fragment
from ..ir.tile_ops import Region, _const_int, config, is_buffer, is_load, op_name, regions
from ..language.dtypes import itemsize
from ..language.expr import to_expr
from ._util import keep_user_errors, rewrite, rewrite_pre, substitute
from .infer_layouts import LayoutPlan, _parallel_nest, owner_table, thread_elements
from .lower_tile_ops_to_loops import (
    _all,
    _combine,
    _in_bounds,
    _index_map,
    _init,
    _printf,
    _spec,
    lower_print,
    message_format,
)

_ANALYZER = sym.Analyzer()


def simplify(expr):
    return _ANALYZER.simplify(expr) if not isinstance(expr, int) else expr


def _is_fragment(buffer) -> bool:
    return is_buffer(buffer) and buffer.scope() == "local.fragment"


def _is_register_tile(buffer) -> bool:
    """A fragment or a T.alloc_var scalar, before this pass gives it a local array."""
    return is_buffer(buffer) and buffer.scope() in ("local.fragment", "local.var")


def _extern(name: str, *args):
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def _seq(stmts):
    stmts = [s for s in stmts if s is not None]
    if not stmts:
        return tirx.Evaluate(0)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def _sync():
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))


def _address(buffer, indices, rw_mask: int = 1):
    """A pointer to an element, for instructions that take addresses (ldmatrix, mma).

    Shared tiles are addressed with `tvm_access_ptr`, which tells TVM's later passes
    that the tile is read (mask 1) or written (2) here; with a bare `&A[i]` they would
    think the tile dead and let another tile reuse its memory.
    """
    if not buffer.scope().startswith("shared"):
        return tirx.address_of(tirx.BufferLoad(buffer, list(indices)))
    shape = [int(s) for s in buffer.shape]
    offset = 0
    for index, extent in zip(indices, shape):
        offset = offset * extent + index
    return tirx.tvm_access_ptr(str(buffer.dtype), buffer, simplify(offset), 8, rw_mask)


def _vector_width(nbytes: int, *limits) -> int:
    """Largest power of two <= 16 bytes of elements dividing every limit."""
    v = max(16 // nbytes, 1)
    while v > 1 and any(lim % v for lim in limits):
        v //= 2
    return v


class ThreadLowering:
    """State of the rewrite of one kernel body."""

    def __init__(self, plan: LayoutPlan, threads: int, tx, block_vars):
        self.plan = plan
        self.threads = threads
        self.tx = tx
        self.block_vars = block_vars
        self.locals: dict = {}  # fragment name -> per-thread local buffer
        self.scratch: list = []  # shared buffers added for reductions
        self.in_parallel = False
        self._inverse_cache: dict = {}

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
            indices[-1] = simplify(layout.column(indices[-2], indices[-1]))
        return _address(buffer, indices, rw_mask)

    def swizzle_accesses(self, body):
        """Rewrite loads and stores of swizzled shared tiles to their permuted columns.

        Inside a vectorized loop, column `base + v` becomes `swizzled(base) + v`: the
        swizzle moves whole 16-byte chunks, so a vector stays one contiguous access.
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
                    elif last.a.same_as(v):
                        last, lane = last.b, v
            col = simplify(layout.column(indices[-2], last))
            indices[-1] = col + lane if lane is not None else col
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

        from ._util import walk

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
            stmt = tirx.IfThenElse(tirx.LT(item, count), stmt, None)
        if rounds == 1:
            return stmt
        kind = tirx.ForKind.UNROLLED if rounds <= unroll_up_to else tirx.ForKind.SERIAL
        return tirx.For(c, 0, rounds, kind, stmt)

    def only_if_valid(self, frag: Fragment, reg: int, stmt):
        """Guard a statement on register `reg` of a padded fragment (some threads lack it)."""
        elements = thread_elements(frag)
        if all(elements[t][reg] is not None for t in range(frag.threads)):
            return stmt
        cond = simplify(frag.valid(self.tx, tirx.const(reg, "int32")))
        return tirx.IfThenElse(cond, stmt, None)

    # ------------------------------------------------------------ statements

    def lower(self, stmt):
        if isinstance(stmt, tirx.SeqStmt):
            return _seq([self.lower(s) for s in stmt])
        if isinstance(stmt, tirx.AllocBuffer):
            return self.lower_alloc(stmt)
        if isinstance(stmt, TilePrimitiveCall):
            return self.lower_tile_op(stmt)
        if isinstance(stmt, tirx.For):
            if stmt.kind == tirx.ForKind.PARALLEL:
                return self.lower_parallel(stmt)
            return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind,
                            self.lower(stmt.body), annotations=stmt.annotations)
        if isinstance(stmt, tirx.IfThenElse):
            return tirx.IfThenElse(self.fragment_scalars(stmt.condition),
                                   self.lower(stmt.then_case),
                                   self.lower(stmt.else_case) if stmt.else_case else None)
        if isinstance(stmt, tirx.BufferStore):
            return self.lower_block_store(stmt)
        return stmt

    def lower_alloc(self, stmt):
        buffer = stmt.buffer
        if _is_fragment(buffer):
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

        return rewrite(expr, tvm_expr_type(), replace)

    def replicated_local(self, buffer, indices):
        if buffer.scope() == "local.var":
            return indices[0]
        frag = self.layout_of(buffer)
        element = tuple(_const_int(i) for i in indices)
        if None in element:
            raise TileLabTypeError(f"fragment {buffer.name!r} is indexed with a variable outside "
                                   "a T.Parallel loop; loop over it with T.Parallel")
        owners = owner_table(frag).get(element, {})
        if len(owners) != self.threads or len(set(owners.values())) != 1:
            raise TileLabTypeError(
                f"element {element} of fragment {buffer.name!r} is used by the whole block but "
                f"lives on {len(owners)} of {self.threads} threads",
                hint="read it inside a T.Parallel loop, or reduce into a smaller fragment")
        return next(iter(owners.values()))

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
        nest = _parallel_nest(loop)
        body = loop
        for _ in nest.loop_vars:
            body = body.body
        layout = self.plan.loop_layouts.get(loop)
        outer, self.in_parallel = self.in_parallel, True
        try:
            if layout is None:
                return self.parallel_without_fragments(nest, body)
            elements = thread_elements(layout)
            stmts = []
            for reg in range(layout.local_size):
                if all(elements[t][reg] is None for t in range(layout.threads)):
                    continue
                index = self.inverse(layout, reg)
                mapped = self.map_fragment_accesses(body, nest, layout, reg)
                mapped = substitute(mapped, dict(zip(nest.loop_vars, index)))
                stmts.append(self.only_if_valid(layout, reg, self.lower(mapped)))
            return _seq(stmts)
        finally:
            self.in_parallel = outer

    def parallel_without_fragments(self, nest, body):
        """No fragments inside: deal the iterations to threads.

        When every thread gets several iterations, each takes a run of `vector`
        consecutive ones (up to four 32-bit elements: one 16-byte access), marked
        vectorized; otherwise iterations go round-robin, one per thread per round.
        """
        total = math.prod(nest.extents)
        vector = 4
        while vector > 1 and (total % (self.threads * vector) or nest.extents[-1] % vector):
            vector //= 2
        vv = tirx.Var("v", "int32")

        def run(chunk):
            flat = chunk * vector + vv if vector > 1 else chunk
            stmt = self.lower(substitute(body, dict(zip(nest.loop_vars,
                                                        _unravel(flat, nest.extents)))))
            return tirx.For(vv, 0, vector, tirx.ForKind.VECTORIZED, stmt) if vector > 1 \
                else stmt

        return self.deal(total // vector, run, unroll_up_to=8)

    def map_fragment_accesses(self, body, nest, layout, reg):
        """Replace fragment accesses of iteration register `reg` by local-array accesses."""
        elements = thread_elements(layout)

        def local_index(buffer, indices):
            pos = nest.positions(indices)
            frag = self.layout_of(buffer)
            owners = owner_table(frag)
            found = set()
            for t in range(layout.threads):
                element = elements[t][reg]
                if element is None:
                    continue
                wanted = tuple(0 if p is None else element[p] for p in pos)
                found.add(owners[wanted][t])
            if len(found) != 1:
                raise TileLabTypeError(f"fragment {buffer.name!r} does not line up with the loop "
                                       "layout of its T.Parallel loop")
            return found.pop()

        def on_load(load):
            if is_load(load) and _is_fragment(load.source):
                return tirx.BufferLoad(self.local(load.source),
                                       [local_index(load.source, load.indices)])
            if is_load(load) and load.source.scope() == "local.var":
                return tirx.BufferLoad(self.locals[load.source.name], list(load.indices))
            return load

        def on_store(store):
            if _is_fragment(store.buffer):
                return tirx.BufferStore(self.local(store.buffer), store.value,
                                        [local_index(store.buffer, store.indices)])
            if store.buffer.scope() == "local.var":
                return tirx.BufferStore(self.locals[store.buffer.name], store.value,
                                        list(store.indices))
            return store

        body = rewrite(body, tvm_expr_type(), on_load)
        return rewrite(body, tirx.BufferStore, on_store)

    # ------------------------------------------------------------ tile ops

    def lower_tile_op(self, stmt):
        name = op_name(stmt)
        regs = regions(stmt)
        cfg = config(stmt)
        scalars = [a for a in stmt.args if not isinstance(a, tvm_region_type())]
        if self.in_parallel and name not in ("atomic_add",):
            raise TileLabTypeError(f"T.{name} cannot be used inside a T.Parallel loop")
        if name == "copy":
            return self.lower_copy(*regs, asynchronous=bool(cfg.get("asynchronous")))
        if name == "fill":
            return self.lower_fill(regs[0], scalars[0])
        if name == "reduce":
            return self.lower_reduce(*regs, kind=cfg["kind"], dim=int(cfg["dim"]),
                                     clear=bool(cfg["clear"]))
        if name == "gemm":
            from .lower_gemm import lower_gemm

            return lower_gemm(self, stmt, *regs, cfg)
        if name == "atomic_add":
            return self.lower_atomic_add(regs[0], regs[1] if len(regs) > 1 else scalars[0])
        if name == "print":
            return self.lower_print(regs[0] if regs else scalars[0], cfg.get("msg", ""))
        raise NotImplementedError(f"no CUDA lowering for tile op {name}")

    # -- copies

    def lower_copy(self, src: Region, dst: Region, asynchronous: bool = False):
        fs, fd = _is_fragment(src.buffer), _is_fragment(dst.buffer)
        if fs and fd:
            return self.copy_fragment_to_fragment(src.buffer, dst.buffer)
        if fs or fd:
            return self.copy_fragment_memory(src, dst)
        return self.copy_cooperative(src, dst, asynchronous)

    def copy_fragment_to_fragment(self, src, dst):
        """Same layout: each thread copies its registers. Different layouts: the tile goes
        through a shared-memory scratch tile (TVM's ThreadSync adds the barrier)."""
        a, b = self.layout_of(src), self.layout_of(dst)
        reg = tirx.Var("reg", "int32")
        if a.same_as(b):
            value = to_expr(tirx.BufferLoad(self.local(src), [reg]), str(dst.dtype))
            return tirx.For(reg, 0, a.local_size, tirx.ForKind.UNROLLED,
                            tirx.BufferStore(self.local(dst), value, [reg]))
        scratch = tirx.decl_buffer(a.shape, dst.dtype, name=f"{src.name}_to_{dst.name}",
                                   scope="shared.dyn")
        self.scratch.append(scratch)
        rank = len(a.shape)
        stmts = []
        for frag, is_src in ((a, True), (b, False)):
            for r in range(frag.local_size):
                index = self.inverse(frag, r)
                if is_src:
                    value = to_expr(tirx.BufferLoad(self.local(src), [r]), str(dst.dtype))
                    stmt = tirx.BufferStore(scratch, value, index[:rank])
                    if frag.replicate > 1:
                        stmt = tirx.IfThenElse(tirx.EQ(index[rank], 0), stmt, None)
                else:
                    stmt = tirx.BufferStore(self.local(dst),
                                            tirx.BufferLoad(scratch, index[:rank]), [r])
                stmts.append(self.only_if_valid(frag, r, stmt))
        return _seq(stmts)

    def copy_fragment_memory(self, src: Region, dst: Region):
        to_memory = _is_fragment(src.buffer)
        frag_region, mem = (src, dst) if to_memory else (dst, src)
        frag = self.layout_of(frag_region.buffer)
        local = self.local(frag_region.buffer)
        elements = thread_elements(frag)
        rank = len(frag.shape)
        mem_at = _squeezed_map(frag.shape, mem)
        # registers reg..reg+v-1 hold consecutive elements of the last dimension?
        nbytes = max(itemsize(src.dtype), itemsize(dst.dtype))
        v = _vector_width(nbytes, frag.local_size, frag.shape[-1])
        if mem.scope == "global":
            v = _vector_width(nbytes, v, int(mem.buffer.shape[-1]))
        if not _aligned(mem.starts[-1], v):
            v = 1
        while v > 1 and not _consecutive(elements, v):
            v //= 2
        stmts = []
        vv = tirx.Var("v", "int32")
        for reg in range(0, frag.local_size, v):
            if all(elements[t][reg] is None for t in range(frag.threads)):
                continue
            index = self.inverse(frag, reg)
            element, rep = index[:rank], index[rank]
            last = list(element)
            last[-1] = last[-1] + vv if v > 1 else last[-1]
            mem_index = [simplify(e) for e in mem_at(last)]
            loc = tirx.const(reg, "int32") + vv if v > 1 else tirx.const(reg, "int32")
            if to_memory:
                value = to_expr(tirx.BufferLoad(local, [loc]), mem.dtype)
                stmt = tirx.BufferStore(mem.buffer, value, mem_index)
                conds = _in_bounds(mem, mem_at(element))
                if frag.replicate > 1:
                    conds.append(tirx.EQ(rep, 0))
                stmt = _guard(conds, stmt)
            else:
                value = to_expr(tirx.BufferLoad(mem.buffer, mem_index), str(local.dtype))
                ok = _all(_in_bounds(mem, mem_at(element)))
                if ok is not None:
                    value = tirx.if_then_else(ok, value, to_expr(0, str(local.dtype)))
                stmt = tirx.BufferStore(local, value, [loc])
            if v > 1:
                stmt = tirx.For(vv, 0, v, tirx.ForKind.VECTORIZED, stmt)
            stmts.append(self.only_if_valid(frag, reg, stmt))
        return _seq(stmts)

    def copy_cooperative(self, src: Region, dst: Region, asynchronous: bool = False):
        """All threads copy a tile between global and shared memory, 16 bytes at a time.

        `asynchronous` copies (issued by a software pipeline) use `cp.async`, which
        writes shared memory straight from global memory, zero-filling past the edge.
        """
        extents = [int(_const_int(e)) for e in dst.squeezed_extents()] or [1]
        total = math.prod(extents)
        nbytes = max(itemsize(src.dtype), itemsize(dst.dtype))
        limits = [extents[-1]]
        for region in (src, dst):
            if region.scope == "global":
                limits.append(int(region.buffer.shape[-1]))
            if _const_int(region.extents[-1]) == 1:
                limits.append(1)
        v = _vector_width(nbytes, *limits)
        if not (_aligned(src.starts[-1], v) and _aligned(dst.starts[-1], v)):
            v = 1
        vv = tirx.Var("v", "int32")
        src_at, dst_at = _index_map(src), _index_map(dst)
        nbytes_vector = v * itemsize(dst.dtype)
        use_cp_async = asynchronous and src.dtype == dst.dtype and \
            nbytes_vector in (4, 8, 16) and dst.scope.startswith("shared")

        def chunk_copy(chunk):
            base = _unravel(chunk * v, extents)
            full = list(base)
            full[-1] = full[-1] + vv if v > 1 else full[-1]
            src_ok = _all(_in_bounds(src, src_at(base)))
            if use_cp_async:
                stmt = _extern(f"tl::cp_async<{nbytes_vector}>",
                               self.address(dst.buffer, dst_at(base), rw_mask=2),
                               _address(src.buffer, src_at(base)),
                               src_ok if src_ok is not None else tirx.const(True, "bool"))
            else:
                value = to_expr(tirx.BufferLoad(src.buffer, src_at(full)), dst.dtype)
                if src_ok is not None:
                    value = tirx.if_then_else(src_ok, value, to_expr(0, dst.dtype))
                stmt = tirx.BufferStore(dst.buffer, value, dst_at(full))
                if v > 1:
                    stmt = tirx.For(vv, 0, v, tirx.ForKind.VECTORIZED, stmt)
            return _guard(_in_bounds(dst, dst_at(base)), stmt)

        return self.deal(total // v, chunk_copy, unroll_up_to=16)

    # -- fill

    def lower_fill(self, dst: Region, value):
        if _is_fragment(dst.buffer):
            local = self.local(dst.buffer)
            reg = tirx.Var("reg", "int32")
            return tirx.For(reg, 0, int(local.shape[0]), tirx.ForKind.UNROLLED,
                            tirx.BufferStore(local, to_expr(value, dst.dtype), [reg]))
        extents = [int(_const_int(e)) for e in dst.extents]

        def fill_one(flat):
            idx = [s + i for s, i in zip(dst.starts, _unravel(flat, extents))]
            return _guard(_in_bounds(dst, idx), tirx.BufferStore(dst.buffer,
                                                                 to_expr(value, dst.dtype), idx))

        return self.deal(math.prod(extents), fill_one)

    # -- reductions

    def lower_reduce(self, src: Region, dst: Region, kind: str, dim: int, clear: bool):
        if not (_is_fragment(src.buffer) and _is_fragment(dst.buffer)):
            raise TileLabTypeError("on the GPU, T.reduce_* works on fragments; copy the tile "
                                   "into a fragment first")
        sf, df = self.layout_of(src.buffer), self.layout_of(dst.buffer)
        s_local, d_local = self.local(src.buffer), self.local(dst.buffer)
        dtype = str(d_local.dtype)
        s_elems, d_owners = thread_elements(sf), owner_table(df)
        d_elems = thread_elements(df)

        def dst_element(element):
            kept = tuple(e for d, e in enumerate(element) if d != dim)
            kept = tuple(k for k, s in zip(kept, [x for d, x in enumerate(sf.shape) if d != dim])
                         if s != 1)
            shape = [s for s in df.shape if s != 1]
            full, it = [], iter(kept)
            for s in df.shape:
                full.append(next(it) if s != 1 and shape else 0)
            return tuple(full)

        # 1. each thread folds its own registers into one partial per result register
        acc = tirx.decl_buffer((df.local_size,), dtype, name=f"{dst.buffer.name}_partial",
                               scope="local")
        stmts = [tirx.AllocBuffer(acc)]
        reg = tirx.Var("reg", "int32")
        stmts.append(tirx.For(reg, 0, df.local_size, tirx.ForKind.UNROLLED,
                              tirx.BufferStore(acc, _init(kind, dtype), [reg])))
        for ls in range(sf.local_size):
            slots = set()
            for t in range(sf.threads):
                element = s_elems[t][ls]
                if element is None:
                    continue
                owners = d_owners.get(dst_element(element), {})
                if t not in owners:
                    raise TileLabTypeError(
                        f"T.reduce_{kind}: {dst.buffer.name!r} does not keep row "
                        f"{dst_element(element)} on thread {t}, which holds part of it")
                slots.add(owners[t])
            if not slots:
                continue
            if len(slots) != 1:
                raise TileLabTypeError(f"T.reduce_{kind}: layouts of {src.buffer.name!r} and "
                                       f"{dst.buffer.name!r} do not line up")
            slot = slots.pop()
            value = to_expr(tirx.BufferLoad(s_local, [ls]), dtype)
            stmts.append(self.only_if_valid(sf, ls, tirx.BufferStore(
                acc, _combine(kind, tirx.BufferLoad(acc, [slot]), value), [slot])))
        # 2. threads holding parts of the same row combine: shuffles, then shared memory
        masks = _xor_masks(sf, dst_element, df)
        warp_masks = [m for m in masks if m < 32]
        block_masks = [m for m in masks if m >= 32]
        combine_kind = "sum" if kind in ("sum", "abssum") else "max" if kind in (
            "max", "absmax") else "min"
        for m in warp_masks:
            stmts.append(tirx.For(reg, 0, df.local_size, tirx.ForKind.UNROLLED, tirx.BufferStore(
                acc, _combine(combine_kind, tirx.BufferLoad(acc, [reg]), tirx.call_extern(
                    dtype, "tl::shfl_xor", tirx.BufferLoad(acc, [reg]), m)), [reg])))
        if block_masks:
            stmts.append(self.combine_across_warps(acc, df, d_elems, block_masks, combine_kind))
        # 3. the result lands in the destination fragment
        final = tirx.BufferLoad(acc, [reg])
        if not clear:
            final = _combine(combine_kind, tirx.BufferLoad(d_local, [reg]), final)
        stmts.append(tirx.For(reg, 0, df.local_size, tirx.ForKind.UNROLLED,
                              tirx.BufferStore(d_local, final, [reg])))
        return _seq(stmts)

    def combine_across_warps(self, acc, df, d_elems, block_masks, kind):
        warps = self.threads // 32
        rows = math.prod(df.shape)
        dtype = str(acc.dtype)
        scratch = tirx.decl_buffer((warps * rows,), dtype, name="reduce_scratch",
                                   scope="shared.dyn")
        self.scratch.append(scratch)
        warp = tirx.floordiv(self.tx, 32)
        # Each reduction has its own scratch tile. The barrier between writing and reading
        # it is placed here; one before the next write, when the reduction runs again in a
        # loop, is left to TVM's ThreadSync pass, which sees these plain shared accesses.
        stmts = []
        for slot in range(df.local_size):
            index = self.inverse(df, slot)[: len(df.shape)]
            row = _flatten(index, df.shape)
            stmts.append(tirx.BufferStore(scratch, tirx.BufferLoad(acc, [slot]),
                                          [simplify(warp * rows + row)]))
        stmts.append(_sync())
        group = [0]
        for m in block_masks:
            group += [g ^ (m // 32) for g in group]
        for slot in range(df.local_size):
            index = self.inverse(df, slot)[: len(df.shape)]
            row = _flatten(index, df.shape)
            total = None
            for g in sorted(group):
                partner = tirx.bitwise_xor(warp, g) if g else warp
                value = tirx.BufferLoad(scratch, [simplify(partner * rows + row)])
                total = value if total is None else _combine(kind, total, value)
            stmts.append(tirx.BufferStore(acc, total, [slot]))
        return _seq(stmts)

    # -- atomics and printing

    def lower_atomic_add(self, dst: Region, src):
        if not isinstance(src, Region):
            idx = list(dst.starts)
            stmt = _extern("atomicAdd", _address(dst.buffer, idx), to_expr(src, dst.dtype))
            stmt = _guard(_in_bounds(dst, idx), stmt)
            if not self.in_parallel:
                stmt = tirx.IfThenElse(tirx.EQ(self.tx, 0), stmt, None)
            return stmt
        if _is_fragment(src.buffer):
            frag = self.layout_of(src.buffer)
            elements = thread_elements(frag)
            rank = len(frag.shape)
            dst_at = _squeezed_map(frag.shape, dst)
            stmts = []
            for reg in range(frag.local_size):
                if all(elements[t][reg] is None for t in range(frag.threads)):
                    continue
                index = self.inverse(frag, reg)
                di = dst_at(index[:rank])
                value = to_expr(tirx.BufferLoad(self.local(src.buffer), [reg]), dst.dtype)
                conds = _in_bounds(dst, di)
                if frag.replicate > 1:
                    conds.append(tirx.EQ(index[rank], 0))
                stmts.append(self.only_if_valid(frag, reg, _guard(conds, _extern(
                    "atomicAdd", _address(dst.buffer, di), value))))
            return _seq(stmts)
        extents = [int(_const_int(e)) for e in dst.squeezed_extents()] or [1]

        def add_one(flat):
            idx = _unravel(flat, extents)
            si, di = _index_map(src)(idx), _index_map(dst)(idx)
            value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
            return _guard(_in_bounds(dst, di) + _in_bounds(src, si),
                          _extern("atomicAdd", _address(dst.buffer, di), value))

        return self.deal(math.prod(extents), add_one)

    def lower_print(self, target, msg):
        """Thread 0 of block 0 prints values and shared/global tiles; a fragment is printed
        by every thread of block 0, each element with the thread that holds it."""
        first_block = _all([tirx.EQ(b, 0) for b in self.block_vars])
        if isinstance(target, Region) and _is_fragment(target.buffer):
            stmts = self.print_fragment(target.buffer, msg)
            return tirx.IfThenElse(first_block, stmts, None) if first_block is not None \
                else stmts
        first = _all([tirx.EQ(self.tx, 0)] + [tirx.EQ(b, 0) for b in self.block_vars])
        value = target if isinstance(target, Region) else self.fragment_scalars(target)
        return tirx.IfThenElse(first, lower_print(value, msg, c_source=True), None)

    def print_fragment(self, buffer, msg):
        frag = self.layout_of(buffer)
        local = self.local(buffer)
        rank = len(frag.shape)
        prefix, message = message_format(msg, c_source=True)  # the message is data
        stmts = []
        for reg in range(frag.local_size):
            index = self.inverse(frag, reg)
            value = tirx.BufferLoad(local, [reg])
            where = ", ".join(["%d"] * rank)
            fmt = f"{prefix}{buffer.name}[{where}] = {_spec(value)} (thread %d)\\n"
            stmt = _printf(fmt, *message, *[tirx.Cast("int32", i) for i in index[:rank]], value,
                           tirx.Cast("int32", self.tx))
            if frag.replicate > 1:
                stmt = tirx.IfThenElse(tirx.EQ(index[rank], 0), stmt, None)
            stmts.append(self.only_if_valid(frag, reg, stmt))
        return _seq(stmts)


def _squeezed_map(frag_shape, region: Region):
    """Map a fragment element's index to the memory region it is copied to or from.

    Unit dimensions on either side do not count: a (1, N) fragment matches
    `Y[row, 0:N]`, and a (64, 64) tile matches `Q[b, h, 0:64, 0:64]`.
    """
    free = [d for d, s in enumerate(frag_shape) if s != 1]
    region_at = _index_map(region)
    return lambda element: region_at([element[d] for d in free])


def _aligned(start, v: int) -> bool:
    """Is a region's first column a multiple of the vector width (so vectors stay aligned)?"""
    if v == 1:
        return True
    if _const_int(start) is not None:
        return _const_int(start) % v == 0
    return _ANALYZER.can_prove(tirx.EQ(tirx.floormod(start, v), 0))


def _consecutive(elements, v: int) -> bool:
    for per_thread in elements:
        for reg in range(0, len(per_thread), v):
            first = per_thread[reg]
            for k in range(1, v):
                e = per_thread[reg + k] if reg + k < len(per_thread) else None
                if first is None or e is None or e[:-1] != first[:-1] or e[-1] != first[-1] + k:
                    if not (first is None and e is None):
                        return False
    return True


def _xor_masks(sf: Fragment, dst_element, df: Fragment) -> list[int]:
    """Thread-index XOR masks that connect the threads holding parts of one result row.

    Only the first copy of each element counts: replicas of a replicated
    fragment already hold whole rows and must not be added twice. A shuffle
    with mask m combines register d of thread t with register d of thread t^m,
    so for every mask both threads must keep the same result row in register d
    (a thread with nothing of that row contributes the identity).
    """
    import itertools

    holders: dict = {}
    for element in itertools.product(*(range(s) for s in sf.shape)):
        holders.setdefault(dst_element(element), set()).add(sf.thread_of(*element))
    basis: list[int] = []
    for group in holders.values():
        t0 = min(group)
        for t in sorted(group):
            x = t ^ t0
            for b in basis:
                x = min(x, x ^ b)
            if x:
                basis.append(x)
                basis.sort(reverse=True)
    masks = sorted(basis)
    d_elems = thread_elements(df)
    for m in masks:
        for t in range(df.threads):
            partner = t ^ m
            if partner >= df.threads:
                raise TileLabTypeError("this reduction's threads do not form a shuffle pattern",
                                       hint="use a power-of-two number of threads")
            for a, b in zip(d_elems[t], d_elems[partner]):
                if a is not None and b is not None and a != b:
                    raise TileLabTypeError(
                        "this reduction's threads do not form a shuffle pattern",
                        hint="use a power-of-two number of threads per row")
    return masks


def _unravel(flat, extents):
    index, rest = [], flat
    for d, extent in enumerate(reversed(extents)):
        last = d == len(extents) - 1
        index.append(rest if last else tirx.floormod(rest, extent))
        rest = tirx.floordiv(rest, extent)
    return [simplify(i) for i in reversed(index)]


def _flatten(index, shape):
    flat = 0
    for i, extent in zip(index, shape):
        flat = flat * extent + i
    return flat


def _guard(conds, stmt):
    cond = _all(conds)
    return stmt if cond is None else tirx.IfThenElse(cond, stmt, None)


def tvm_expr_type():
    import tvm

    return tvm.ir.TensorLoad


def tvm_region_type():
    import tvm

    return tvm.ir.TensorRegion


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
    if swizzle and swizzle[2] and len(block_loops) >= 2:
        node = substitute(node, rasterize(block_loops, swizzle[0]))
    tx = tirx.Var("tx", "int32")
    body, scratch = lowering_fn(node, tx, [b.loop_var for b in block_loops])
    body = _seq([tirx.AllocBuffer(s) for s in scratch] + [body])
    iter_var = tirx.IterVar(None, tirx.Var("threadIdx.x", "int32"), tirx.IterVar.ThreadIndex,
                            "threadIdx.x")
    body = tirx.For(tx, 0, threads, tirx.ForKind.THREAD_BINDING, body, thread_binding=iter_var)
    for b in reversed(block_loops):
        body = tirx.For(b.loop_var, b.min, b.extent, b.kind, body,
                        thread_binding=b.thread_binding, annotations=b.annotations)
    return body


def LowerTileOpsToThreads(plans: dict):  # noqa: N802
    """Expects tile ops and a LayoutPlan per kernel (in `plans`, filled by InferLayouts)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.LowerTileOpsToThreads")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        kernel_plans = iter(plans["plans"])  # one per `with T.Kernel`, in program order

        def on_kernel(loop):
            if "tilelab.kernel" not in loop.annotations:
                return loop
            threads = math.prod(int(t) for t in loop.annotations["tilelab.threads"])
            plan = next(kernel_plans)

            def lower(body, tx, block_vars):
                lowering = ThreadLowering(plan, threads, tx, block_vars)
                return lowering.swizzle_accesses(lowering.lower(body)), lowering.scratch

            return _add_threads(loop, lower, threads, plans.get("swizzle"))

        return func.with_body(rewrite_pre(func.body, tirx.For, on_kernel))

    return _pass


def InferLayouts(plans: dict, on_plan=None):  # noqa: N802
    """Runs layout inference on each kernel and keeps the plan for the lowering pass."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.InferLayouts")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        from .infer_layouts import infer_layouts

        plans["plans"] = []  # a program may launch several kernels: a plan for each

        def visit(loop):
            if isinstance(loop, tirx.For) and "tilelab.kernel" in loop.annotations:
                threads = math.prod(int(t) for t in loop.annotations["tilelab.threads"])
                plans["plans"].append(infer_layouts(loop, threads, plans.get("annotated")))
                if on_plan is not None:
                    on_plan(plans["plans"][-1])

        from ._util import walk

        walk(func.body, tirx.For, visit)
        return func

    return _pass

