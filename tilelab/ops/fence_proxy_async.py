"""`T.fence_proxy_async()`: this thread's shared-memory stores so far ordered before the
async proxy's reads that follow (TileLang's spelling).

On Hopper the tensor cores' warpgroup MMAs and TMA read shared memory through the *async
proxy*, which does not see a thread's ordinary stores in program order. tilelab fences
the tiles it knows a T.gemm reads (passes/pipeline_loops.py, ops/copy.py's T.tma_copy);
a program that writes a tile in one warp role and hands it to another role's T.gemm
through an mbarrier says so itself, as TileLang's FlashMLA does before it arrives.

Loop semantics: nothing (the CPU has one memory). Thread lowering: each thread's
`fence.proxy.async.shared::cta`.
"""

from __future__ import annotations

from tvm import tirx

from ..ir.builder import current
from ..ir.tile_ops import tile_call
from . import Effects, TileOp, register
from ._gemm_wgmma import proxy_fence


def fence_proxy_async():
    """Order this thread's shared-memory stores before the tensor cores' and TMA's reads."""
    current("fence_proxy_async").emit(tile_call("fence_proxy_async"))


def effects(call) -> Effects:
    return Effects()


register(TileOp("fence_proxy_async", primitives=(fence_proxy_async,), effects=effects,
                in_parallel=False, in_thread_code=True,
                lowerings={"cpu": lambda call: tirx.Evaluate(0),
                           "cuda": lambda call, ctx: proxy_fence()}))
