"""`T.atomic_add`: `dst += value` safely when several blocks update the same elements.

Loop semantics: `dst[i, j] += src[i, j]` (or `dst[i] += scalar`); the CPU backend
runs the blocks of a kernel with atomics one after another, so plain adds suffice.

Thread lowering: `atomicAdd` on each element, by the thread that holds it (a
fragment) or dealt to the threads (shared or global memory); in code written for one
thread, that thread adds every element. The only tile op
allowed inside `T.Parallel`: there each iteration adds its own scalar.

`return_prev=True` (code written for one thread): the element's value before this
thread's add, kept in a register of the thread's own (`pos = T.atomic_add(count[0], 1,
return_prev=True)` hands each thread a different slot); every thread that reaches it
adds, as in CUDA.
"""

from __future__ import annotations

import math

from tvm import tirx

from ..errors import TileLabTypeError
from ..ir.builder import current
from ..ir.expr import is_expr, to_expr
from ..ir.layout import thread_elements
from ..ir.tile_ops import Region, _const_int, config, is_load, regions, scalars, tile_call
from ..ir.visit import loop_nest
from . import Effects, TileOp, register
from ._lowering import (
    address,
    extern,
    guard,
    holds_part_of,
    in_bounds,
    index_map,
    is_fragment,
    region_map,
    seq,
    unravel,
)
from ._operands import resolve_pair


def atomic_add(dst, value, memory_order="relaxed", return_prev=False, use_tma=False):
    """`dst += value` safely when several blocks update the same elements.

    `dst` is an element `C[i, j]` with a scalar value, or a buffer/region with a
    tile of the same extents as `value`. The update is atomic and nothing more
    (`memory_order="relaxed"`): it does not order other memory accesses.
    `use_tma` (TileLang's hint to reduce the tile into global memory with one bulk
    TMA operation) is accepted; tilelab's threads add their elements with atomics
    either way, with the same result.
    """
    builder = current("atomic_add")
    if not isinstance(use_tma, bool):
        raise TileLabTypeError(f"T.atomic_add(use_tma=...) takes True or False, got "
                               f"{use_tma!r}")
    if memory_order != "relaxed":
        raise TileLabTypeError(f"T.atomic_add with memory_order={memory_order!r} is not "
                               "supported",
                               hint="tilelab's atomics are relaxed; order work between "
                                    "blocks with separate kernels")
    builder.has_atomics = True
    scalar = is_load(dst) and (is_expr(value) or isinstance(value, (int, float)))
    if return_prev:
        return _add_returning_prev(builder, dst, value, scalar)
    if scalar:
        region = Region(dst.source, tuple(dst.indices), (1,) * len(dst.indices))
        builder.emit(tile_call("atomic_add", region, to_expr(value, region.dtype)))
        return
    src, dst = resolve_pair(value, dst, "atomic_add")
    builder.emit(tile_call("atomic_add", dst, src))


def _add_returning_prev(builder, dst, value, scalar: bool):
    """`T.atomic_add(dst[i], v, return_prev=True)`: the add, and the element's old value
    in a fresh register of the thread's own (which the caller assigns or uses)."""
    if not scalar:
        raise TileLabTypeError(
            "T.atomic_add(..., return_prev=True) returns the old value of one element: give "
            "it an element and a scalar, as T.atomic_add(counts[i], 1, return_prev=True)")
    if not builder.thread_vars:
        raise TileLabTypeError(
            "T.atomic_add(..., return_prev=True) gives each thread the value it found; it "
            "belongs in code written for one thread (after tx = T.get_thread_binding())",
            hint="in a tile program, T.atomic_add returns nothing")
    region = Region(dst.source, tuple(dst.indices), (1,) * len(dst.indices))
    prev = builder.allocate("local", (1,), str(region.dtype), "local")
    builder.emit(tile_call("atomic_add", region, to_expr(value, region.dtype),
                           Region.whole(prev), returns_prev=True))
    return tirx.BufferLoad(prev, [0])


def _vector_add(name: str, lanes: int, dst, value) -> None:
    """TileLang's vector atomics: the `lanes` consecutive elements starting at `value`
    added to those starting at `dst` (the last index counting up), each atomically."""
    if not (is_load(dst) and is_load(value)):
        raise TileLabTypeError(
            f"T.{name} takes two elements, dst[..., j] and value[..., j]: the first of the "
            f"{lanes} consecutive elements to add",
            hint=f"T.atomic_add(dst[..., j:j + {lanes}], value[..., j:j + {lanes}]) adds a "
                 "region")
    for lane in range(lanes):
        def at(load, lane=lane):
            *lead, last = load.indices
            return tirx.BufferLoad(load.source, [*lead, last + lane])

        atomic_add(at(dst), at(value))


def atomic_addx2(dst, value):
    """`dst[..., j:j + 2] += value[..., j:j + 2]`, each element atomically (TileLang's
    AtomicAddx2; tilelab issues one atomic add per element)."""
    _vector_add("atomic_addx2", 2, dst, value)


def atomic_addx4(dst, value):
    """`dst[..., j:j + 4] += value[..., j:j + 4]`, each element atomically."""
    _vector_add("atomic_addx4", 4, dst, value)


def _operands(call):
    """(dst, src, prev): src a region or a scalar; prev the register that receives the
    element's old value (return_prev=True), else None."""
    regs = regions(call)
    if config(call).get("returns_prev"):
        return regs[0], scalars(call)[0], regs[1]
    return regs[0], regs[1] if len(regs) > 1 else scalars(call)[0], None


def effects(call) -> Effects:
    dst, src, prev = _operands(call)
    reads = (dst, src) if isinstance(src, Region) else (dst,)
    return Effects(reads=reads, writes=(dst,) if prev is None else (dst, prev))


# ---------------------------------------------------------------- loop semantics (CPU)


def atomic_loops(dst: Region, src, prev: Region | None = None):
    if not isinstance(src, Region):  # a scalar added to one element
        idx = list(dst.starts)
        old = tirx.BufferLoad(dst.buffer, idx)
        add = tirx.BufferStore(dst.buffer, old + to_expr(src, dst.dtype), idx)
        if prev is not None:
            add = seq([tirx.BufferStore(prev.buffer, old, list(prev.starts)), add])
        return guard(in_bounds(dst, idx), add)
    extents = dst.squeezed_extents() or [1]
    src_at, dst_at = index_map(src), index_map(dst)

    def body(loop_vars):
        si, di = src_at(loop_vars), dst_at(loop_vars)
        old = tirx.BufferLoad(dst.buffer, di)
        value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
        return guard(in_bounds(dst, di) + in_bounds(src, si),
                      tirx.BufferStore(dst.buffer, old + value, di))

    return loop_nest(extents, body)


def lower_loops(call):
    return atomic_loops(*_operands(call))


# ---------------------------------------------------------------- thread lowering (CUDA)


def lower_threads(call, ctx):
    return atomic_threads(ctx, *_operands(call))


def atomic_threads(ctx, dst: Region, src, prev: Region | None = None):
    if not isinstance(src, Region):
        idx = list(dst.starts)
        if prev is None:
            stmt = extern("atomicAdd", address(dst.buffer, idx), to_expr(src, dst.dtype))
        else:  # in code of one thread (MarkThreadCode makes its register private)
            stmt = tirx.BufferStore(prev.buffer, tirx.call_extern(
                dst.dtype, "atomicAdd", address(dst.buffer, idx), to_expr(src, dst.dtype)),
                list(prev.starts))
        stmt = guard(in_bounds(dst, idx), stmt)
        if not ctx.in_parallel:
            stmt = tirx.IfThenElse(tirx.EQ(ctx.tx, 0), stmt, None)
        return stmt
    if is_fragment(src.buffer):
        frag = ctx.layout_of(src.buffer)
        elements = thread_elements(frag)
        rank = len(frag.shape)
        dst_at, inside = region_map(src, dst)
        stmts = []
        for reg in range(frag.local_size):
            if not holds_part_of(elements, [reg], src):
                continue
            index = ctx.inverse(frag, reg)
            di = dst_at(index[:rank])
            value = to_expr(tirx.BufferLoad(ctx.local(src.buffer), [reg]), dst.dtype)
            conds = inside(index[:rank]) + in_bounds(dst, di)
            if frag.replicate > 1:
                conds.append(tirx.EQ(index[rank], 0))
            stmts.append(ctx.only_if_valid(frag, reg, guard(conds, extern(
                "atomicAdd", address(dst.buffer, di), value))))
        return seq(stmts)
    extents = [int(_const_int(e)) for e in dst.squeezed_extents()] or [1]

    def add_one(flat):
        idx = unravel(flat, extents)
        si, di = index_map(src)(idx), index_map(dst)(idx)
        value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
        return guard(in_bounds(dst, di) + in_bounds(src, si),
                      extern("atomicAdd", address(dst.buffer, di), value))

    if ctx.in_parallel:  # code of one thread (passes/thread_code.py): it adds every element
        flat = tirx.Var("e", "int32")
        return tirx.For(flat, 0, math.prod(extents), tirx.ForKind.SERIAL, add_one(flat))
    return ctx.deal(math.prod(extents), add_one)


register(TileOp("atomic_add", primitives=(atomic_add, atomic_addx2, atomic_addx4),
                effects=effects, in_parallel=True, in_thread_code=True,
                lowerings={"cpu": lower_loops, "cuda": lower_threads}))
