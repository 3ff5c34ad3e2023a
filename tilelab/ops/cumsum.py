"""`T.cumsum`: running sums of a tile along one dimension, as TileLang defines it.

`T.cumsum(src, dst=None, dim=0, reverse=False)` writes into `dst` (into `src` itself
when `dst` is left out) the inclusive prefix sums of `src` along `dim`, or the
suffix sums with `reverse=True`.

Loop semantics: along `dim`, a running sum `s += src[k]; dst[k] = s` (from the end
when reversed); every other index is an independent line. Writing in place is safe
because `src[k]` is read before `dst[k]` is written.

Thread lowering: the lines of a shared tile are dealt to the threads, each of which
scans its own lines serially in registers; the barriers before and after come from
the effects declared here (reads `src`, writes `dst`).
"""

from __future__ import annotations

import math

from tvm import tirx

from ..errors import TileLabTypeError
from ..ir.builder import current
from ..ir.expr import to_expr
from ..ir.tile_ops import Region, config, regions, tile_call
from ..ir.visit import loop_nest
from . import Effects, TileOp, register
from ._lowering import unravel
from ._operands import whole_shape


def cumsum(src, dst=None, dim=0, reverse=False):
    """Inclusive prefix sums of `src` along `dim` into `dst` (default: `src`, in place).

    `reverse=True` sums from the end: `dst[k] = src[k] + src[k + 1] + ...`.
    """
    builder = current("cumsum")
    dst = src if dst is None else dst
    shape, out_shape = whole_shape(src, "cumsum"), whole_shape(dst, "cumsum")
    if shape != out_shape:
        raise TileLabTypeError(f"T.cumsum: {src.name} {shape} and {dst.name} {out_shape} "
                               "must have the same shape")
    if not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
        raise TileLabTypeError(f"T.cumsum: dim={dim} is out of range for {src.name} of "
                               f"shape {shape}")
    builder.emit(tile_call("cumsum", Region.whole(src), Region.whole(dst),
                           dim=dim % len(shape), reverse=bool(reverse)))


def effects(call) -> Effects:
    src, dst = regions(call)
    return Effects(reads=(src,), writes=(dst,))


def _scan_line(src: Region, dst: Region, dim: int, reverse: bool, at: dict):
    """The serial scan of one line, its running sum in a register; `at` gives the index
    of every other dimension. (dst is only written, so no thread reads back a shared
    element another thread might be writing.)"""
    n = int(src.extents[dim])
    k = tirx.Var("k", "int32")
    pos = (n - 1 - k) if reverse else k
    index = [pos if d == dim else at[d] for d in range(len(src.extents))]
    total = tirx.decl_buffer((1,), dst.dtype, name="running_sum", scope="local")
    value = to_expr(tirx.BufferLoad(src.buffer, index), dst.dtype)
    step = tirx.SeqStmt([
        tirx.BufferStore(total, tirx.BufferLoad(total, [0]) + value, [0]),
        tirx.BufferStore(dst.buffer, tirx.BufferLoad(total, [0]), index)])
    return tirx.SeqStmt([tirx.AllocBuffer(total),
                         tirx.BufferStore(total, to_expr(0, dst.dtype), [0]),
                         tirx.For(k, 0, n, tirx.ForKind.SERIAL, step)])


def _settings(call):
    cfg = config(call)
    return int(cfg["dim"]), bool(cfg["reverse"])


def lower_loops(call):
    src, dst = regions(call)
    dim, reverse = _settings(call)
    others = [d for d in range(len(src.extents)) if d != dim]
    return loop_nest([src.extents[d] for d in others],
                     lambda idx: _scan_line(src, dst, dim, reverse, dict(zip(others, idx))))


def lower_threads(call, ctx):
    """Each thread scans whole lines: it first reads its line into registers, then writes
    the running sums. Reading everything first keeps an in-place scan free of a read
    after another thread's write; the guard of a partial last round sits inside each
    loop so that the barrier between the two phases stays outside any condition."""
    src, dst = regions(call)
    for region in (src, dst):
        if not region.scope.startswith("shared"):
            raise TileLabTypeError(
                f"on the GPU, T.cumsum works on shared tiles; {region.buffer.name!r} is in "
                f"{region.scope} memory", hint="copy the tile into T.alloc_shared first")
    dim, reverse = _settings(call)
    n = int(src.extents[dim])
    others = [d for d in range(len(src.extents)) if d != dim]
    extents = [int(src.extents[d]) for d in others]
    lines = math.prod(extents)
    rounds = -(-lines // ctx.threads)
    c = tirx.Var("c", "int32")
    k, kw = tirx.Var("k", "int32"), tirx.Var("k", "int32")  # each loop its own variable
    line = c * ctx.threads + ctx.tx if rounds > 1 else ctx.tx
    at = dict(zip(others, unravel(line, extents) if extents else []))

    def at_step(step):
        pos = (n - 1 - step) if reverse else step
        return [pos if d == dim else at[d] for d in range(len(src.extents))]
    values = tirx.decl_buffer((n,), dst.dtype, name="line", scope="local")
    total = tirx.decl_buffer((1,), dst.dtype, name="running_sum", scope="local")

    def guarded(stmt):
        return stmt if lines % ctx.threads == 0 else \
            tirx.IfThenElse(tirx.LT(line, lines), stmt, None)

    read = tirx.BufferStore(values, to_expr(tirx.BufferLoad(src.buffer, at_step(k)),
                                            dst.dtype), [k])
    write = tirx.SeqStmt([
        tirx.BufferStore(total, tirx.BufferLoad(total, [0]) + tirx.BufferLoad(values, [kw]),
                         [0]),
        tirx.BufferStore(dst.buffer, tirx.BufferLoad(total, [0]), at_step(kw))])
    body = tirx.SeqStmt([
        tirx.AllocBuffer(values), tirx.AllocBuffer(total),
        tirx.For(k, 0, n, tirx.ForKind.SERIAL, guarded(read)),
        tirx.BufferStore(total, to_expr(0, dst.dtype), [0]),
        tirx.For(kw, 0, n, tirx.ForKind.SERIAL, guarded(write))])
    return body if rounds == 1 else tirx.For(c, 0, rounds, tirx.ForKind.SERIAL, body)


def gpu_operands(call) -> list:
    """Threads scan whole lines of shared tiles (the result is written, not read)."""
    return [(0, ("shared",), True, False), (1, ("shared",), False, True)]


register(TileOp("cumsum", primitives=(cumsum,), effects=effects,
                lowerings={"cpu": lower_loops, "cuda": lower_threads},
                gpu_operands=gpu_operands))
