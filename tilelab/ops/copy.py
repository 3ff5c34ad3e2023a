"""`T.copy`: move a tile between any two of global, shared and fragment memory.

Loop semantics: `dst[i, j] = src[i, j]` over the tile; elements past the edge of a
global tensor read as 0 and are never written.

Thread lowering: between global and shared memory every thread of the block takes
16-byte vectors in turn (`cp.async` when a software pipeline issued the copy), or, where
the pipeline chose TMA (passes/pipeline_loops.py), thread 0 asks the Tensor Memory
Accelerator for the tile, one box per wgmma panel; to or from a fragment each thread
moves the elements it keeps; between fragments of different layouts the tile passes
through a shared scratch tile.

Layouts: a fragment-to-fragment copy passes a known layout to the other side; a
half-precision shared tile written from a fragment is swizzled, because each thread
stores a few elements per row, which row-major would send to one bank from all
eight rows a warp writes at once.
"""

from __future__ import annotations

import json
import math
import warnings

import tvm
from tvm import tirx

from ..errors import TileLabCompileError, TileLabTypeError, TileLabWarning
from ..ir.builder import current
from ..ir.dtypes import as_dtype, is_float8, itemsize
from ..ir.expr import to_expr
from ..ir.layout import Layout, holds_matrix_rows, thread_elements
from ..ir.tile_ops import Region, _const_int, config, regions, tile_call
from ..ir.visit import loop_nest
from . import Effects, TileOp, register
from ._lowering import (
    address,
    aligned,
    all_of,
    extern,
    guard,
    holds_part_of,
    in_bounds,
    index_map,
    is_fragment,
    is_whole,
    region_map,
    seq,
    simplify,
    sync,
    unravel,
    vector_width,
)
from ._operands import grown_source, operand, resolve_pair


def copy(src, dst, coalesced_width=None, disable_tma: bool = False, eviction_policy=None):
    """Copy a tile between any two of global, shared and fragment memory.

    Either side may be a whole buffer, a region `A[0:64, k:k + 32]`, or a start
    point `A[by * 64, k * 32]` whose extents are taken from the other side.
    Elements outside a global tensor are read as zero and never written. A source
    region smaller than a destination nearer the threads grows from its start to the
    destination's size, as TileLang copies (with a warning: the source is read past
    the region named); a copy never writes past the region it names.

    The rest are TileLang's hints, which change no result: `coalesced_width`, the most
    elements a thread moves in one access (the compiler's choice, at most 16 bytes, is
    narrowed to it); `disable_tma`, a pipelined loop with this copy does not use TMA
    (where it would on sm_90a; see passes/pipeline_loops.py); `eviction_policy`, a
    cache hint ("evict_normal", "evict_first", "evict_last") that tilelab accepts and
    does not emit.
    """
    if not isinstance(disable_tma, bool):
        raise TileLabTypeError(f"T.copy(disable_tma=...) takes True or False, got "
                               f"{disable_tma!r}")
    if coalesced_width is not None and (isinstance(coalesced_width, bool) or not isinstance(
            coalesced_width, int) or coalesced_width < 1):
        raise TileLabTypeError(f"T.copy(coalesced_width=...) takes a number of elements "
                               f"(a positive int), got {coalesced_width!r}")
    if eviction_policy not in (None, "evict_normal", "evict_first", "evict_last"):
        raise TileLabTypeError(f"T.copy(eviction_policy=...) takes 'evict_normal', "
                               f"'evict_first' or 'evict_last', got {eviction_policy!r}")
    builder = current("copy")
    src, dst = operand(src, "copy"), operand(dst, "copy")
    grown = grown_source(src, dst)
    if grown is not None:
        where = f"{builder.location}: " if builder.location is not None else ""
        warnings.warn(f"{where}T.copy between regions of different sizes: as in TileLang, it "
                      f"covers the region nearer the threads, so {grown.buffer.name} is read "
                      f"over ({', '.join(str(e) for e in grown.extents)}) from the region's "
                      "start", TileLabWarning, stacklevel=2)
        src = grown
    src, dst = resolve_pair(src, dst, "copy")
    hints = {"disable_tma": True} if disable_tma else {}
    if coalesced_width is not None:
        hints["coalesced_width"] = coalesced_width
    builder.emit(tile_call("copy", src, dst, **hints))


def tma_copy(src, dst, *, barrier=None, eviction_policy=None, **_ignored):
    """TileLang's copy with user-managed completion: a global-to-shared tile copy that the
    program's own mbarrier protocol orders (`barrier`: the one its consumers wait on).

    On sm_90a, where the tile is a warpgroup MMA operand that TMA can fill, the role's
    first thread announces the tile's bytes to `barrier` and asks TMA for it: the phase
    completes once the arrivals the barrier expects are in *and* the bytes have landed
    (passes/pipeline_loops.py plans it). Otherwise the role's threads copy the tile
    themselves, and it is in place before they arrive. On the CPU it is a copy."""
    from .barrier import barrier_element

    builder = current("tma_copy")
    if barrier is None:
        raise TileLabTypeError("T.tma_copy(src, dst, barrier=...) needs the barrier its "
                               "consumers wait on", hint="or use T.copy")
    src, dst = resolve_pair(src, dst, "tma_copy")
    if src.scope != "global" or not dst.scope.startswith("shared"):
        raise TileLabTypeError("T.tma_copy copies a tile from a global tensor into shared "
                               f"memory; here {src.buffer.name} ({src.scope}) -> "
                               f"{dst.buffer.name} ({dst.scope})", hint="use T.copy")
    element, _ = barrier_element(barrier, "tma_copy", builder)
    at = tirx.address_of(tirx.BufferLoad(element.buffer, list(element.starts)))
    builder.emit(tile_call("copy", src, dst, by_barrier=True, barrier=at))


def effects(call) -> Effects:
    src, dst = regions(call)
    tma = is_tma_store(call)
    return Effects(reads=(src,), writes=(dst,), synchronizes=tma, reads_late=tma)


def is_tma_store(call) -> bool:
    """A copy from a shared tile that TMA stores (passes/tma_stores.py gave it its map)."""
    return "tma" in config(call) and regions(call)[1].scope == "global"


# ---------------------------------------------------------------- layout rule


def fix_layouts(call, ctx) -> None:
    src, dst = regions(call)
    if is_tma_store(call):  # TMA reads the tile in the panels its descriptor's swizzle says
        shape = tuple(int(s) for s in src.buffer.shape)
        spec = json.loads(config(call)["tma_spec"])
        ctx.plan.shared_layouts[src.buffer.name] = Layout.wgmma_panels(
            shape, as_dtype(src.dtype).bits, int(spec["swizzle"]))
        return
    if is_fragment(src.buffer) and dst.buffer.scope().startswith("shared") and \
            as_dtype(str(dst.buffer.dtype)).bits == 16 and dst.buffer.name not in \
            ctx.plan.shared_layouts and len(dst.buffer.shape) >= 2:
        shape = tuple(int(s) for s in dst.buffer.shape)
        ctx.plan.shared_layouts[dst.buffer.name] = Layout.swizzled(shape[-2:], 16)


def propagate_layouts(call, ctx) -> bool:
    src, dst = regions(call)
    changed = False
    if is_fragment(src.buffer) and is_fragment(dst.buffer):
        for x, y in ((src, dst), (dst, src)):
            if x.buffer.name in ctx.layouts and y.buffer.name not in ctx.layouts:
                changed |= ctx.assign(y.buffer, ctx.layouts[x.buffer.name], "T.copy")
    return changed


# ---------------------------------------------------------------- loop semantics (CPU)


def copy_loops(src: Region, dst: Region):
    extents = dst.squeezed_extents() or [1]
    src_at, dst_at = index_map(src), index_map(dst)

    def body(loop_vars):
        si, di = src_at(loop_vars), dst_at(loop_vars)
        value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
        src_ok = all_of(in_bounds(src, si))
        if src_ok is not None:
            value = tirx.if_then_else(src_ok, value, to_expr(0, dst.dtype))
        return guard(in_bounds(dst, di), tirx.BufferStore(dst.buffer, value, di))

    return loop_nest(extents, body)


def lower_loops(call):
    return copy_loops(*regions(call))


# ---------------------------------------------------------------- thread lowering (CUDA)


def lower_threads(call, ctx):
    if ctx.in_parallel:  # in code one thread runs for itself, into or out of its registers
        return lower_loops(call)
    src, dst = regions(call)
    fs, fd = is_fragment(src.buffer), is_fragment(dst.buffer)
    if fs and fd:
        return fragment_to_fragment(ctx, src, dst)
    if fs and call in ctx.plan.stmatrix:
        return stmatrix_store(ctx, src, dst, ctx.plan.stmatrix[call])
    if fs or fd:
        return fragment_memory(ctx, src, dst, _widest(call))
    if "tma" in config(call):
        return tma_store(ctx, call) if dst.scope == "global" else tma_load(ctx, call)
    if config(call).get("by_barrier"):  # T.tma_copy: the readers may be warpgroup MMAs, which
        # read through the async proxy; each writer orders its stores before its arrival
        from ._gemm_wgmma import proxy_fence

        return seq([cooperative(ctx, src, dst, widest=_widest(call)), proxy_fence()])
    return cooperative(ctx, src, dst, bool(config(call).get("asynchronous")), _widest(call))


TENSOR_MAP = "tilelab.tensor_map"  # AttrStmt: a TMA descriptor's spec, for the launcher


def _panel_boxes(ctx, tile: Region, tensor: Region, spec: dict, rw_mask: int):
    """For each wgmma panel of the shared `tile`: its address and the coordinates of its
    box in `tensor` (innermost first), as TMA's load and store take them. The tile must
    have the panels the descriptor's swizzle describes."""
    layout = ctx.plan.shared_layouts.get(tile.buffer.name)
    if layout is None or layout.recipe.get("kind") != "wgmma_panels" or \
            int(layout.recipe["swizzle_bytes"]) != spec["swizzle"]:
        raise TileLabCompileError(
            f"internal: a TMA copy of {tile.buffer.name} was planned with a "
            f"{spec['swizzle']}-byte swizzle, but layout inference gave it "
            f"{layout.recipe.get('kind') if layout else 'no layout'}",
            hint="compile with pass_configs={'tl.disable_tma_lower': True} meanwhile")
    width = spec["box"][0]
    outer = [tirx.Cast("int32", s) if not isinstance(s, int) else s
             for s in reversed(tensor.starts[:-2])]
    for panel in range(spec["panels"]):
        at = list(tile.starts[:-1]) + [tile.starts[-1] + panel * width]
        column = simplify(tensor.starts[-1] + panel * width)
        yield ctx.address(tile.buffer, at, rw_mask=rw_mask), \
            [tirx.Cast("int32", column), tirx.Cast("int32", tensor.starts[-2]), *outer]


def tma_load(ctx, call):
    """Thread 0 announces the tile's bytes to the slot's mbarrier and asks TMA for each
    wgmma panel of the tile: a box `panel width x rows` of the global tensor, written
    swizzled at the panel's place. The descriptor's spec rides on the statement
    (`TENSOR_MAP`) to the launch configuration (backends/cuda)."""
    src, dst = regions(call)
    cfg = config(call)
    spec = json.loads(cfg["tma_spec"])
    bar = cfg["barrier"]
    # a pipeline's own barrier counts the issuing thread's arrival; a T.tma_copy's
    # barrier counts the arrivals the program makes itself: only the bytes are announced
    announce = "tl::mbar_expect_tx" if cfg.get("by_barrier") else "tl::mbar_arrive_expect_tx"
    stmts = [extern(announce, bar, tirx.const(spec["bytes"], "uint32"))]
    boxes = list(_panel_boxes(ctx, dst, src, spec, rw_mask=2))
    blocks = int(cfg.get("multicast", 1))  # a cluster's blocks that share this tile
    if blocks == 1:
        stmts += [extern("tl::tma_load", at, cfg["tma"], bar, *box) for at, box in boxes]
    else:  # the block of rank r asks for boxes r, r + blocks, ... for all of them; the
        # whole tile's bytes land in each block's slot all the same
        mask = tirx.const((1 << blocks) - 1, "uint16")
        mine = [seq([extern("tl::tma_load_multicast", at, cfg["tma"], bar, mask, *box)
                     for at, box in boxes[rank::blocks]]) for rank in range(blocks)]
        rank = tirx.call_extern("int32", "tl::cluster_rank")
        choice = mine[-1]
        for r in reversed(range(blocks - 1)):
            choice = tirx.IfThenElse(tirx.EQ(rank, r), mine[r], choice)
        stmts.append(choice)
    issue = tirx.IfThenElse(tirx.EQ(ctx.tx, 0), seq(stmts), None)
    return tirx.AttrStmt(cfg["tma"], TENSOR_MAP, tvm.ir.StringImm(cfg["tma_spec"]), issue)


def tma_store(ctx, call):
    """Every thread fences its stores to the tile for the async proxy, the block waits
    for all of them, and thread 0 asks TMA to store each panel of the tile as a box of the
    global tensor, after its earlier stores' writes (two stores of one place stay in
    order). Nobody waits for TMA to have read the tile here: the block goes on, and the
    wait stands before the barrier ahead of the tile's next write, or at the kernel's end
    (passes/insert_barriers.py). The spec rides on the statement (`TENSOR_MAP`), as a
    load's does."""
    from ._gemm_wgmma import proxy_fence

    src, dst = regions(call)
    cfg = config(call)
    spec = json.loads(cfg["tma_spec"])
    stmts = [extern("tl::tma_store_wait")]
    for at, box in _panel_boxes(ctx, src, dst, spec, rw_mask=1):
        stmts.append(extern("tl::tma_store", cfg["tma"], at, *box))
    stmts.append(extern("tl::tma_store_commit"))
    if not cfg.get("read_waited_later"):  # (the barrier pass waits later where it can)
        stmts.append(extern("tl::tma_store_wait_read"))
    issue = tirx.IfThenElse(tirx.EQ(ctx.tx, 0), seq(stmts), None)
    return seq([proxy_fence(), sync(),
                tirx.AttrStmt(cfg["tma"], TENSOR_MAP, tvm.ir.StringImm(cfg["tma_spec"]),
                              issue)])


def fragment_to_fragment(ctx, src: Region, dst: Region):
    """Whole fragments of one layout: each thread copies its registers. Otherwise (other
    layouts, or sub-regions) the elements go through a shared-memory scratch tile of the
    copied region's shape (TVM's ThreadSync adds the barrier)."""
    a, b = ctx.layout_of(src.buffer), ctx.layout_of(dst.buffer)
    reg = tirx.Var("reg", "int32")
    whole = is_whole(src) and is_whole(dst)
    if whole and a.same_as(b):
        value = to_expr(tirx.BufferLoad(ctx.local(src.buffer), [reg]), dst.dtype)
        return tirx.For(reg, 0, a.local_size, tirx.ForKind.UNROLLED,
                        tirx.BufferStore(ctx.local(dst.buffer), value, [reg]))
    shape = [int(_const_int(e)) for e in src.squeezed_extents()] or [1]
    scratch = tirx.decl_buffer(shape, dst.dtype, name=f"{src.buffer.name}_to_{dst.buffer.name}",
                               scope="shared.dyn")
    ctx.scratch.append(scratch)
    middle = Region.whole(scratch)
    stmts = []
    for frag, region, is_src in ((a, src, True), (b, dst, False)):
        to_scratch, inside = region_map(region, middle)
        elements = thread_elements(frag)
        for r in range(frag.local_size):
            if not holds_part_of(elements, [r], region):
                continue
            index = ctx.inverse(frag, r)
            element = index[:len(frag.shape)]
            at = [simplify(e) for e in to_scratch(element)]
            if is_src:
                value = to_expr(tirx.BufferLoad(ctx.local(src.buffer), [r]), dst.dtype)
                conds = inside(element)
                if frag.replicate > 1:
                    conds.append(tirx.EQ(index[-1], 0))
                stmt = guard(conds, tirx.BufferStore(scratch, value, at))
            else:
                stmt = guard(inside(element), tirx.BufferStore(
                    ctx.local(dst.buffer), tirx.BufferLoad(scratch, at), [r]))
            stmts.append(ctx.only_if_valid(frag, r, stmt))
    return seq(stmts)


def _consecutive(elements, v: int, aligned_start: bool = False) -> bool:
    """Do registers reg..reg+v-1 hold consecutive elements of the last dimension (starting
    at a multiple of v, if `aligned_start`), for every thread?"""
    for per_thread in elements:
        for reg in range(0, len(per_thread), v):
            first = per_thread[reg]
            if aligned_start and first is not None and first[-1] % v:
                return False
            for k in range(1, v):
                e = per_thread[reg + k] if reg + k < len(per_thread) else None
                if first is None or e is None or e[:-1] != first[:-1] or e[-1] != first[-1] + k:
                    if not (first is None and e is None):
                        return False
    return True


def fragment_width(frag, src: Region, dst: Region, widest: int | None = None) -> int:
    """Registers a thread moves at once between a fragment and memory: up to 16 bytes of
    consecutive elements of the last dimension, within the copied region (and at most
    `widest`, the program's `coalesced_width`)."""
    frag_region, mem = (src, dst) if is_fragment(src.buffer) else (dst, src)
    nbytes = max(itemsize(src.dtype), itemsize(dst.dtype))
    v = vector_width(nbytes, frag.local_size, frag.shape[-1], *([widest] if widest else []))
    if mem.scope == "global":
        v = vector_width(nbytes, v, int(mem.buffer.shape[-1]))
    # a region that cuts the last dimension: a vector lies wholly inside it or outside
    cut = _const_int(frag_region.extents[-1]) != frag.shape[-1]
    if cut:
        v = vector_width(nbytes, v, int(_const_int(frag_region.extents[-1])))
    if not (aligned(mem.starts[-1], v) and aligned(frag_region.starts[-1], v)) or \
            _converts_float8(src, dst):
        v = 1
    elements = thread_elements(frag)
    while v > 1 and not _consecutive(elements, v, aligned_start=cut):
        v //= 2
    return v


def describe(call, ctx) -> None:
    """A copy that touches shared memory: how it will move data (for the bank view); a copy
    between registers and global memory: how wide each thread's accesses are."""
    src, dst = regions(call)
    fs, fd = is_fragment(src.buffer), is_fragment(dst.buffer)
    if fs != fd and "global" in (src.scope, dst.scope):
        _describe_global(call, ctx, src, dst, fs)
        return
    if not any(r.scope.startswith("shared") for r in (src, dst)):
        return
    if fs and fd:
        return  # through a scratch tile of the lowering's own
    asynchronous = bool(config(call).get("asynchronous"))
    if "tma" in config(call):
        spec = json.loads(config(call)["tma_spec"])
        boxes = f"{spec['panels']} box(es) of {spec['box'][0]}x{spec['box'][1]}, " \
            f"{spec['swizzle']}-byte swizzle"
        if is_tma_store(call):
            instruction = f"TMA store: thread 0, {boxes}"
            why = ("a whole tile into a tensor the kernel touches in no other way: every "
                   "thread fences its stores for the async proxy, the block synchronizes, and "
                   "one thread asks the Tensor Memory Accelerator to store the tile's panels "
                   "(passes/tma_stores.py)" +
                   ("; the block goes on while TMA reads the tile, and waits for it before "
                    "the tile's next write (passes/insert_barriers.py)"
                    if config(call).get("read_waited_later") else ""))
        elif config(call).get("by_barrier"):
            instruction = f"TMA: thread 0, {boxes}, mbarrier"
            why = ("a T.tma_copy into a tile that warpgroup MMA reads: the role's first "
                   "thread announces its bytes to the program's mbarrier and asks the Tensor "
                   "Memory Accelerator for it, already swizzled")
        else:
            instruction = f"TMA: thread 0, {boxes}, mbarrier"
            why = ("a pipelined tile that warpgroup MMA reads: one thread asks the Tensor "
                   "Memory Accelerator for it, already swizzled; the threads wait on the "
                   "slot's mbarrier")
            if config(call).get("multicast"):
                instruction += f", multicast to a cluster of {config(call)['multicast']}"
                why += ("; the neighbouring block copies the same tile, so the two run as "
                        "a cluster and each asks for its share of the boxes, for both")
        _record(ctx, call, "tma", 0, instruction, why)
        return
    groups = stmatrix_groups(ctx.layouts[src.buffer.name], src, dst, _widest(call)) \
        if fs and ctx.stmatrix else []
    if groups:
        ctx.plan.stmatrix[call] = groups
        _record(ctx, call, "stmatrix", 8, "stmatrix.x4 16 B per lane",
                "the fragment holds 8x8 matrices in the MMA accumulator pattern: each warp "
                "stores four at once, every lane one 16-byte row (sm_90)", groups=groups)
        return
    if fs or fd:
        v, kind = fragment_width(ctx.layouts[(src if fs else dst).buffer.name], src, dst,
                                 _widest(call)), "registers"
    else:
        v, kind = cooperative_width(src, dst, _widest(call)), "cooperative"
    lane_bytes = v * itemsize(dst.dtype if dst.scope.startswith("shared") else src.dtype)
    share = f"{lane_bytes} bytes at a time"
    if kind == "cooperative" and uses_cp_async(src, dst, v, asynchronous):
        instruction = f"cp.async {lane_bytes} B per lane"
        why = f"a pipelined copy: every thread moves its share, {share}, without waiting" + \
            (f"; its loop keeps cp.async, not TMA: {config(call)['not_tma']}"
             if config(call).get("not_tma") else "")
    else:
        verb = "st" if dst.scope.startswith("shared") else "ld"
        instruction = f"{verb}.shared {lane_bytes} B per lane"
        why = (f"each thread moves the elements of its own registers, {share}"
               if kind == "registers" else f"every thread moves its share, {share}" +
               ("" if asynchronous else
                ", then arrives at the program's mbarrier (a T.tma_copy without TMA: "
                f"{config(call).get('not_tma', 'tl.disable_tma_lower')})"
                if config(call).get("by_barrier") else ", then the block synchronizes" +
                (f"; not a TMA store: {config(call)['not_tma']}"
                 if config(call).get("not_tma") else "")))
    _record(ctx, call, kind, v, instruction, why)


def _record(ctx, call, kind: str, vector: int, instruction: str, why: str,
            **more) -> None:
    """The copy's instruction record (the bank view, `--source`); a copy to or from a
    fragment also names the fragment's region: [start (None where not a constant),
    extent] per dimension."""
    src, dst = regions(call)
    frag = src if is_fragment(src.buffer) else dst if is_fragment(dst.buffer) else None
    if frag is not None and kind in ("registers", "stmatrix"):
        more["region"] = [[_const_int(s), _const_int(e)] for s, e in zip(frag.starts, frag.extents)]
    ctx.plan.instructions.append({
        "op": "copy", "loc": str(call.config.get("loc", "")), "src": src.buffer.name,
        "dst": dst.buffer.name, "kind": kind, "vector": vector, "instruction": instruction,
        "why": why, **more})


# measured on the H200 (bench/gemm_epilogue.py): a 128x256 float16 GEMM tile stored from
# the accumulators 4 bytes per thread took about 7 us, through a shared tile about 1 us
_STAGE_HINT = ("; a warp instruction spreads over several rows. Copied into a shared tile "
               "first (T.copy(fragment, tile); T.copy(tile, global)), rows leave 16 bytes "
               "per thread: on the H200 a 128x256 GEMM tile's store took about 7 us from "
               "registers and 1 us through shared memory. The compiler does this by itself "
               "for T.gemm sums where the shared tile costs no block on the SM "
               "(passes/stage_stores.py; tl.disable_stage_stores turns it off)")


def _describe_global(call, ctx, src: Region, dst: Region, from_registers: bool) -> None:
    """The record of a copy between a fragment and global memory."""
    v = fragment_width(ctx.layouts[(src if from_registers else dst).buffer.name], src, dst,
                       _widest(call))
    lane_bytes = v * itemsize((dst if from_registers else src).dtype)  # of global memory
    verb = "st" if from_registers else "ld"
    why = f"each thread moves the elements of its own registers, {lane_bytes} bytes at a time"
    _record(ctx, call, "registers", v, f"{verb}.global {lane_bytes} B per lane",
            why + (_STAGE_HINT if from_registers and lane_bytes < 16 else ""))


def fragment_memory(ctx, src: Region, dst: Region, widest: int | None = None):
    to_memory = is_fragment(src.buffer)
    frag_region, mem = (src, dst) if to_memory else (dst, src)
    frag = ctx.layout_of(frag_region.buffer)
    local = ctx.local(frag_region.buffer)
    elements = thread_elements(frag)
    rank = len(frag.shape)
    mem_at, inside = region_map(frag_region, mem)
    v = fragment_width(frag, src, dst, widest)
    stmts = []
    vv = tirx.Var("v", "int32")
    for reg in range(0, frag.local_size, v):
        if not holds_part_of(elements, range(reg, reg + v), frag_region):
            continue
        index = ctx.inverse(frag, reg)
        element, rep = index[:rank], index[rank]
        last = list(element)
        last[-1] = last[-1] + vv if v > 1 else last[-1]
        mem_index = [simplify(e) for e in mem_at(last)]
        loc = tirx.const(reg, "int32") + vv if v > 1 else tirx.const(reg, "int32")
        if to_memory:
            value = to_expr(tirx.BufferLoad(local, [loc]), mem.dtype)
            stmt = tirx.BufferStore(mem.buffer, value, mem_index)
            conds = inside(element) + in_bounds(mem, mem_at(element))
            if frag.replicate > 1:
                conds.append(tirx.EQ(rep, 0))
            stmt = guard(conds, stmt)
        else:
            value = to_expr(tirx.BufferLoad(mem.buffer, mem_index), str(local.dtype))
            ok = all_of(in_bounds(mem, mem_at(element)))
            if ok is not None:
                value = tirx.if_then_else(ok, value, to_expr(0, str(local.dtype)))
            stmt = guard(inside(element), tirx.BufferStore(local, value, [loc]))
        if v > 1:
            stmt = tirx.For(vv, 0, v, tirx.ForKind.VECTORIZED, stmt)
        stmts.append(ctx.only_if_valid(frag, reg, stmt))
    return seq(stmts)


# ---------------------------------------------------------------- stmatrix (sm_90)

# (the fragment's type, the shared tile's) -> the header function (tilelab.cuh)
_STMATRIX = {("float32", "float16"): "tl::stmatrix_x4_float_as_half",
             ("float32", "bfloat16"): "tl::stmatrix_x4_float_as_bfloat16",
             ("float16", "float16"): "tl::stmatrix_x4_b16",
             ("bfloat16", "bfloat16"): "tl::stmatrix_x4_b16"}


def stmatrix_groups(frag, src: Region, dst: Region, widest: int | None = None) -> list[int]:
    """The registers (first of each eight) that `stmatrix.x4` stores in this copy of a
    fragment into a 16-bit shared tile; none where it cannot, and the threads store their
    own elements (fragment_memory).

    It can where the fragment holds 8x8 matrices as MMA accumulators do (ir/layout.py
    `holds_matrix_rows`): a warp then stores four matrices - eight registers a lane - in one
    instruction, each lane one row's 16 bytes, where the threads' own stores took four,
    4 bytes a lane over eight rows. Each row's eight elements must be 16 aligned bytes of
    the tile (a swizzle moves whole 16-byte chunks, so it keeps them so), and the copied
    region must take each warp's group of four matrices whole or not at all - the
    instruction is the warp's, no lane may sit out: the region's bounds, even where they
    are not constants (`c[part * 64:(part + 1) * 64, :]`), fall on multiples of the
    group's extent in each dimension."""
    if not dst.scope.startswith("shared") or (str(src.dtype), str(dst.dtype)) not in _STMATRIX:
        return []
    if (widest is not None and widest < 8) or frag.local_size % 8 or \
            not holds_matrix_rows(frag):
        return []
    extents = [_const_int(x) for x in src.extents]
    if None in extents or extents[-1] != _const_int(dst.extents[-1]) or \
            int(dst.buffer.shape[-1]) % 8 or not aligned(dst.starts[-1], 8):
        return []
    elements = thread_elements(frag)
    groups = []
    for reg in range(0, frag.local_size, 8):
        if not holds_part_of(elements, range(reg, reg + 8), src):
            continue  # wholly outside the region
        for warp in range(frag.threads // 32):
            block = [e for lane in elements[32 * warp:32 * warp + 32] for e in lane[reg:reg + 8]]
            for d, (start, extent, size) in enumerate(zip(src.starts, extents, frag.shape)):
                low = min(e[d] for e in block)
                span = max(e[d] for e in block) - low + 1
                whole = _const_int(start) == 0 and extent == int(size)
                if not whole and (span & (span - 1) or low % span or extent % span or
                                  not aligned(start, span)):
                    return []  # a bound of the region may cut this group
        groups.append(reg)
    return groups


def stmatrix_store(ctx, src: Region, dst: Region, groups: list[int]):
    """The copy as `stmatrix.x4`, one per group of eight registers (stmatrix_groups). Lane l
    gives the address of row l % 8 of matrix l // 8: the row whose first two elements lane
    4 (l % 8) of the same warp holds in register pair l // 8 of the group. A group lies in
    the region for the whole warp or for none of it, so the thread's own element says."""
    frag, local = ctx.layout_of(src.buffer), ctx.local(src.buffer)
    rank = len(frag.shape)
    at, inside = region_map(src, dst)
    lane = tirx.floormod(ctx.tx, 32)
    row_holder = ctx.tx - lane + tirx.floormod(lane, 8) * 4
    name = _STMATRIX[(str(src.dtype), str(dst.dtype))]
    stmts = []
    for reg in groups:
        element = frag.index_of(row_holder, reg + tirx.floordiv(lane, 8) * 2)[:rank]
        row = [simplify(to_expr(e)) for e in at(element)]
        stmt = extern(name, ctx.address(dst.buffer, row, rw_mask=2), address(local, [reg]))
        stmts.append(guard(inside(ctx.inverse(frag, reg)[:rank]), stmt))
    return seq(stmts)


def cooperative_width(src: Region, dst: Region, widest: int | None = None) -> int:
    """Elements each thread moves at once in a cooperative copy: up to 16 bytes (and at
    most `widest`, the program's `coalesced_width`), dividing the tile's rows (and a global
    tensor's), starting aligned on both sides."""
    extents = [int(_const_int(e)) for e in dst.squeezed_extents()] or [1]
    nbytes = max(itemsize(src.dtype), itemsize(dst.dtype))
    limits = [extents[-1]] + ([widest] if widest else [])
    for region in (src, dst):
        if region.scope == "global":
            limits.append(int(region.buffer.shape[-1]))
        if _const_int(region.extents[-1]) == 1:
            limits.append(1)
    v = vector_width(nbytes, *limits)
    if not (aligned(src.starts[-1], v) and aligned(dst.starts[-1], v)) or \
            _converts_float8(src, dst):
        v = 1
    return v


def _widest(call) -> int | None:
    """The program's `T.copy(..., coalesced_width=n)`: at most n elements an access."""
    n = config(call).get("coalesced_width")
    return int(n) if n is not None else None


def _converts_float8(src: Region, dst: Region) -> bool:
    """A copy that converts from or to float8 goes one element at a time: TVM's CUDA code
    keeps a vector of float8 as unsigned integers, and converting such a vector became a
    cast between integer vectors, which nvcc rejects (TileLang's fp8 MLA decode)."""
    return src.dtype != dst.dtype and (is_float8(src.dtype) or is_float8(dst.dtype))


def uses_cp_async(src: Region, dst: Region, v: int, asynchronous: bool) -> bool:
    """A pipelined copy into shared memory of 4, 8 or 16 bytes a thread, same type."""
    return asynchronous and src.dtype == dst.dtype and \
        v * itemsize(dst.dtype) in (4, 8, 16) and dst.scope.startswith("shared")


def cooperative(ctx, src: Region, dst: Region, asynchronous: bool = False,
                widest: int | None = None):
    """All threads copy a tile between global and shared memory, 16 bytes at a time.

    `asynchronous` copies (issued by a software pipeline) use `cp.async`, which
    writes shared memory straight from global memory, zero-filling past the edge.
    """
    extents = [int(_const_int(e)) for e in dst.squeezed_extents()] or [1]
    total = math.prod(extents)
    v = cooperative_width(src, dst, widest)
    vv = tirx.Var("v", "int32")
    src_at, dst_at = index_map(src), index_map(dst)
    nbytes_vector = v * itemsize(dst.dtype)
    use_cp_async = uses_cp_async(src, dst, v, asynchronous)

    def chunk_copy(chunk):
        base = unravel(chunk * v, extents)
        full = list(base)
        full[-1] = full[-1] + vv if v > 1 else full[-1]
        src_ok = all_of(in_bounds(src, src_at(base)))
        if use_cp_async:
            stmt = extern(f"tl::cp_async<{nbytes_vector}>",
                          ctx.address(dst.buffer, dst_at(base), rw_mask=2),
                          address(src.buffer, src_at(base)),
                          src_ok if src_ok is not None else tirx.const(True, "bool"))
        else:
            value = to_expr(tirx.BufferLoad(src.buffer, src_at(full)), dst.dtype)
            if src_ok is not None and is_float8(dst.dtype) and v > 4:
                # a branch, not a select: TVM's CUDA lowering has no select or broadcast of
                # more than 4 float8 lanes; past the edge the zeros are written one by one
                stmt = tirx.IfThenElse(src_ok, tirx.For(
                    vv, 0, v, tirx.ForKind.VECTORIZED,
                    tirx.BufferStore(dst.buffer, value, dst_at(full))), tirx.For(
                    vv, 0, v, tirx.ForKind.UNROLLED,
                    tirx.BufferStore(dst.buffer, to_expr(0, dst.dtype), dst_at(full))))
            else:
                if src_ok is not None:
                    value = tirx.if_then_else(src_ok, value, to_expr(0, dst.dtype))
                stmt = tirx.BufferStore(dst.buffer, value, dst_at(full))
                if v > 1:
                    stmt = tirx.For(vv, 0, v, tirx.ForKind.VECTORIZED, stmt)
        return guard(in_bounds(dst, dst_at(base)), stmt)

    return ctx.deal(total // v, chunk_copy, unroll_up_to=16)


def with_own_registers(call) -> bool:
    """A copy into or out of a thread's own registers (T.alloc_local) may stand in code
    each thread runs for itself: the thread copies the whole tile, alone."""
    return any(r.buffer.scope() == "local" for r in regions(call))


register(TileOp("copy", primitives=(copy, tma_copy), effects=effects, fix_layouts=fix_layouts,
                propagate_layouts=propagate_layouts, describe=describe,
                in_thread_code=with_own_registers,
                lowerings={"cpu": lower_loops, "cuda": lower_threads}))
