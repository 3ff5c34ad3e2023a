"""`gemm_wait`: wait for the T.gemms a pipelined loop left in flight.

Users do not write it. On Hopper, `passes/pipeline_loops.py` lets each `T.gemm`
of a loop that only multiplies leave its warpgroup MMAs running while the
threads go on (`wgmma.wait_group 1`), and puts one `gemm_wait` per accumulator
after the loop: it waits for the last iteration's MMAs, after which the
accumulator's registers hold the product. A wait after the loop, not in its
last iteration: ptxas waits itself wherever it cannot prove the registers
complete, and a wait inside a branch of the loop made it wait in every
iteration.

A loop whose next iteration's first T.gemm is issued before this iteration's
last (`_rotate` there) waits with `pending=1`: for every group but the one
committed last, whose MMAs still run.

Loop semantics: nothing (the CPU runs every T.gemm to completion).
Thread lowering: `wgmma.wait_group N` (N = `pending`, 0 unless told) where a
warpgroup MMA writes the accumulator; nothing where the T.gemm took the Ampere
path.
"""

from __future__ import annotations

from tvm import tirx

from ..ir.tile_ops import regions
from . import Effects, TileOp, register
from ._gemm_wgmma import wait_all


def effects(call) -> Effects:
    return Effects(writes=(regions(call)[0],))  # its final values, as far as readers go


def lower_loops(call):
    return tirx.Evaluate(0)


def lower_threads(call, ctx):
    accumulator = regions(call)[0].buffer
    if any(regions(gemm)[2].buffer.same_as(accumulator) for gemm in ctx.plan.wgmma):
        return wait_all(ctx.local(accumulator), int(call.config.get("pending", 0)))
    return tirx.Evaluate(0)


register(TileOp("gemm_wait", primitives=(), effects=effects,
                lowerings={"cpu": lower_loops, "cuda": lower_threads}))
