"""`T.fill` and `T.clear`: set every element of a tile to one value.

Loop semantics: `dst[i, j] = value` (elements past a global tensor's edge are skipped).
Thread lowering: a fragment is filled by each thread in its own registers; a shared or
global region is dealt to the threads element by element. A thread's own registers
(`T.alloc_local`), and anything in code each thread runs for itself, it fills alone.
"""

from __future__ import annotations

import math

from tvm import tirx

from ..ir.builder import current
from ..ir.expr import to_expr
from ..ir.tile_ops import Region, _const_int, is_load, regions, scalars, tile_call
from ..ir.visit import loop_nest
from . import Effects, TileOp, register
from ._lowering import guard, in_bounds, is_fragment, unravel, unrolled_registers
from ._operands import operand


def fill(buffer, value):
    """Set every element of a buffer (or region) to `value`."""
    builder = current("fill")
    region = operand(buffer, "fill")
    if is_load(region):
        region = Region(region.source, tuple(region.indices), (1,) * len(region.indices))
    builder.emit(tile_call("fill", region, to_expr(value, region.dtype)))


def clear(buffer):
    """Set every element to zero."""
    fill(buffer, 0)


def effects(call) -> Effects:
    return Effects(writes=(regions(call)[0],))


def fill_loops(dst: Region, value):
    extents = list(dst.extents)

    def body(loop_vars):
        idx = [s + v for s, v in zip(dst.starts, loop_vars)]
        return guard(in_bounds(dst, idx), tirx.BufferStore(dst.buffer, to_expr(value, dst.dtype),
                                                           idx))

    return loop_nest(extents, body)


def lower_loops(call):
    return fill_loops(regions(call)[0], scalars(call)[0])


def lower_threads(call, ctx):
    dst, value = regions(call)[0], scalars(call)[0]
    if is_fragment(dst.buffer):
        return unrolled_registers(ctx.local(dst.buffer), lambda reg: to_expr(value, dst.dtype))
    if dst.buffer.scope() == "local.var":  # T.clear(v) of a T.alloc_var: every thread's own
        return tirx.BufferStore(ctx.local(dst.buffer), to_expr(value, dst.dtype), [0])
    if ctx.in_parallel or dst.buffer.scope() == "local":
        return lower_loops(call)
    extents = [int(_const_int(e)) for e in dst.extents]

    def fill_one(flat):
        idx = [s + i for s, i in zip(dst.starts, unravel(flat, extents))]
        return guard(in_bounds(dst, idx), tirx.BufferStore(dst.buffer, to_expr(value, dst.dtype),
                                                           idx))

    return ctx.deal(math.prod(extents), fill_one)


register(TileOp("fill", primitives=(fill, clear), effects=effects, in_thread_code=True,
                lowerings={"cpu": lower_loops, "cuda": lower_threads}))
