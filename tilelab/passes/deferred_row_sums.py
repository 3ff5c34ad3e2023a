"""Sum a loop's rows across threads once, after the loop, where only a running total needs them.

FlashAttention keeps the sum of each row's exponentials:

    T.fill(running_sum, 0)
    for k in T.Pipelined(...):
        ...
        T.reduce_sum(scores, tile_sum, dim=1)
        for i in T.Parallel(bm):
            running_sum[i] = running_sum[i] * rescale[i] + tile_sum[i]
        ...
    ... running_sum read after the loop

On the GPU a row of `scores` lies across a few threads (four, in a wgmma accumulator), so
T.reduce_sum folds each thread's registers and then combines the threads with warp
shuffles - in every iteration, between the exponentials and the next multiply. But the
running sum is linear in the tile sums, and every thread of a row multiplies by the same
`rescale[i]`: each thread may keep a running sum of its own registers only, and the
shuffles can run once, on the running sum, after the loop. FlashAttention 2 and 3 keep
their row sums that way. On an H100 (the generated CUDA rewritten the same way before
this pass existed, `python bench/fa_source_rewrites.py OUT deferred_sum`, timed in pairs):
FlashAttention d128 causal with 128x128 tiles 0.978 of the time, 128x128 0.996, causal
128x64 0.984, 128x64 0.994; the CUDA this pass gives is the rewritten source, byte for byte.

This pass splits such a reduction in two tile calls: `split="own"` where it was (each
thread's registers) and `split="across"` right after the loop (the threads of each row
combine the running total). Both carry the source, the tile sum and the running total,
and their lowerings (ops/reduce.py) decide from the layouts alike whether the split
holds; where it does not, the first reduces whole and the second does nothing.

Taken where: the reduction is a sum from a fragment into a fragment that it clears; the
statement right after it is a T.Parallel loop over the rows storing
`total[i] = total[i] * x[i] + part[i]` or `total[i] + part[i]` (x a fragment read at i);
the tile sum and the running total appear nowhere else in the loop, the tile sum nowhere
outside it; and the running total is filled with zeros before the loop with nothing in
between touching it (each thread's share of a non-zero start would be counted once per
thread). CUDA only: on the CPU one thread holds whole rows.

The default; `tl.disable_deferred_row_sums` keeps the shuffles in every iteration. On an
H100 FlashAttention's key loop runs 0.3-1.2% faster without them (paired A/B,
bench/results/deferred_row_sums_ab_h100.json), and the differential tester's attention
programs, which write their row sums this way, match their reference with it.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.tile_ops import (
    Region,
    accessed_buffers,
    config,
    is_load,
    is_tile_call,
    regions,
    scalars,
    tile_call,
)
from ..ir.visit import rewrite, walk
from ..ops._lowering import is_fragment, is_whole


def _uses(node, buffer) -> int:
    """How often `node` reads or writes `buffer`, in statements or as a tile op's region."""
    found = accessed_buffers(node)
    walk(node, TilePrimitiveCall, lambda call: found.extend(r.buffer for r in regions(call)))
    return sum(1 for b in found if b.same_as(buffer))


def _running_total(loop, part):
    """The running total a T.Parallel loop accumulates `part` into; None unless the loop is
    `total[i] = total[i] * x[i] + part[i]` (or `total[i] + part[i]`), x a fragment."""
    if not isinstance(loop, tirx.For) or loop.kind != tirx.ForKind.PARALLEL:
        return None
    store = loop.body
    if not isinstance(store, tirx.BufferStore) or len(store.indices) != 1 or \
            not store.indices[0].same_as(loop.loop_var) or not is_fragment(store.buffer):
        return None
    total, i = store.buffer, loop.loop_var

    def at_i(expr, buffer=None):
        return is_load(expr) and len(expr.indices) == 1 and expr.indices[0].same_as(i) and \
            (buffer is None or expr.source.same_as(buffer))

    value = store.value
    if not isinstance(value, tirx.Add):
        return None
    for carried, added in ((value.a, value.b), (value.b, value.a)):
        if not at_i(added, part):
            continue
        if at_i(carried, total):
            return total
        if isinstance(carried, tirx.Mul):
            for kept, scale in ((carried.a, carried.b), (carried.b, carried.a)):
                if at_i(kept, total) and at_i(scale) and is_fragment(scale.source) and \
                        not scale.source.same_as(part) and not scale.source.same_as(total):
                    return total
    return None


def _zeroed_before(stmts: list, index: int, total) -> bool:
    """Is `total` filled with zeros before stmts[index], with nothing touching it between?"""
    for stmt in reversed(stmts[:index]):
        if is_tile_call(stmt, "fill") and regions(stmt)[0].buffer.same_as(total):
            value = scalars(stmt)[0]
            return is_whole(regions(stmt)[0]) and isinstance(value, tirx.FloatImm) and \
                value.value == 0
        if _uses(stmt, total):
            return False
    return False


def _split(loop, stmts: list, index: int, func_body):
    """`loop` (stmts[index]) with its row sum split, and the combining call after it; None
    where the pattern does not hold."""
    body = loop.body
    if not isinstance(body, tirx.SeqStmt):
        return None
    inner = list(body.seq)
    for k, stmt in enumerate(inner[:-1]):
        if not is_tile_call(stmt, "reduce"):
            continue
        cfg = config(stmt)
        src, part = regions(stmt)[:2]
        if cfg["kind"] != "sum" or not cfg["clear"] or "split" in cfg or \
                not is_fragment(src.buffer) or not is_fragment(part.buffer) or \
                not is_whole(src) or not is_whole(part):
            continue
        total = _running_total(inner[k + 1], part.buffer)
        if total is None or tuple(total.shape) != tuple(part.buffer.shape):
            continue
        others = inner[:k] + inner[k + 2:]
        if any(_uses(s, part.buffer) or _uses(s, total) for s in others):
            continue
        if _uses(func_body, part.buffer) != _uses(loop, part.buffer):  # used outside the loop
            continue
        if not _zeroed_before(stmts, index, total):
            continue
        whole_total = Region.whole(total)
        loc = {"loc": stmt.config["loc"]} if "loc" in stmt.config else {}
        own = tile_call("reduce", src, part, whole_total, kind="sum", dim=cfg["dim"],
                        clear=True, split="own", **loc)
        across = tile_call("reduce", src, whole_total, part, kind="sum", dim=cfg["dim"],
                           clear=False, split="across", **loc)
        inner[k] = own
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, tirx.SeqStmt(inner),
                        annotations=loop.annotations), across
    return None


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.DeferredRowSums")
def DeferredRowSums(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects tile-level IR (tile ops and T.Parallel loops not yet lowered)."""
    body = func.body

    def visit(seq):
        stmts = list(seq.seq)
        out, changed = [], False
        for index, stmt in enumerate(stmts):
            done = _split(stmt, stmts, index, body) \
                if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.SERIAL else None
            if done is None:
                out.append(stmt)
                continue
            loop, across = done
            out += [loop, across]
            changed = True
        return tirx.SeqStmt(out) if changed else seq

    return func.with_body(rewrite(body, tirx.SeqStmt, visit))
