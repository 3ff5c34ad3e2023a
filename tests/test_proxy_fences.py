"""Proxy fences before warpgroup MMAs in a pipelined loop (passes/pipeline_loops.py,
_fenced_once; ops/_gemm_wgmma.py).

The tensor cores read shared memory through the async proxy; tiles written by ordinary
stores need a `fence.proxy.async` before an MMA reads them. In a pipelined loop a tile
that TMA fills needs none, a tile the loop only reads (FlashAttention's Q) needs one
before the loop, and a tile the loop writes (or cp.async fills) one every iteration.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.cuda_source import split_at_loop
from tests.test_warpgroup_turns import SPLIT, TURNS, _attention, _hopper
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
FENCE = "fence_proxy_proxy_async_shared__cta();"


@tilelab.jit(out_idx=[2])
def scores_then_product(Q, K, tiles: int = 4, threads: int = 128):
    """S = Q Kᵢᵀ, then O += S Kᵢ through a shared tile the loop writes, over key tiles Kᵢ."""
    Q: T.Tensor((64, 64), T.float16)
    K: T.Tensor((tiles * 64, 64), T.float16)
    O = T.empty((64, 64), T.float32)  # noqa: E741
    with T.Kernel(1, threads=threads):
        q = T.alloc_shared((64, 64), T.float16)
        k = T.alloc_shared((64, 64), T.float16)
        p = T.alloc_shared((64, 64), T.float16)
        s = T.alloc_fragment((64, 64), T.float32)
        o = T.alloc_fragment((64, 64), T.float32)
        T.copy(Q, q)
        T.clear(o)
        for i in T.Pipelined(tiles, num_stages=2):
            T.copy(K[i * 64, 0], k)
            T.clear(s)
            T.gemm(q, k, s, transpose_B=True)
            T.copy(s, p)
            T.gemm(p, k, o)
        T.copy(o, O)
    return O


def _inputs(device: str, tiles: int = 4):
    torch.manual_seed(tiles)
    return (torch.randn(64, 64, dtype=torch.float16, device=device),
            torch.randn(tiles * 64, 64, dtype=torch.float16, device=device))


def _reference(q, k):
    q, k = q.cpu().float(), k.cpu().float()
    return sum((q @ kt.T).half().float() @ kt for kt in k.split(64))


def _fences(source: str, loop: str) -> tuple[int, int]:
    """(fences before the loop, fences inside it)."""
    before, body = split_at_loop(source, loop)
    return before.count(FENCE), body.count(FENCE)


@needs_nvcc
def test_a_tile_the_loop_only_reads_is_fenced_once_before_it():
    q, k = _inputs("cpu")
    kernel = scores_then_product.compile(Q=q, K=k, target="cuda:sm_90a")
    assert kernel.trace.pipelines[0]["tma"]
    # Q (copied before the loop): once before it; K (TMA): never; P (written in the loop
    # by ordinary stores): before its T.gemm in every iteration
    assert _fences(kernel.get_kernel_source(), "i") == (1, 1)


@needs_nvcc
def test_tiles_cp_async_fills_keep_their_fence():
    q, k = _inputs("cpu")
    kernel = scores_then_product.compile(
        Q=q, K=k, target="cuda:sm_90a",
        pass_configs={PassConfigKey.TL_DISABLE_TMA_LOWER.value: True})
    assert not kernel.trace.pipelines[0]["tma"]
    assert _fences(kernel.get_kernel_source(), "i") == (0, 2)


@needs_nvcc
@pytest.mark.parametrize("configs", [{}, TURNS])
def test_split_attention_fences_q_once(configs):
    """Q by the consumers' stores before the key loop, K and V by TMA: one fence, before
    the loop; none in it."""
    source = _attention(configs={**SPLIT, **configs}, block_n=128).get_kernel_source()
    assert _fences(source, "key_block") == (1, 0)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_scores_then_product_matches_torch(device):
    if device == "cuda":
        _hopper()
    q, k = _inputs(device)
    out = scores_then_product(q, k, **({"target": "cpu"} if device == "cpu" else {}))
    torch.testing.assert_close(out.cpu(), _reference(q, k), rtol=1e-2, atol=1e-2)
