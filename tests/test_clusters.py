"""Pairs of blocks that share their tiles: clusters and TMA multicast on sm_90a.

FlashAttention's query blocks of one head all read the same K and V tiles. Where a
split loop computes between its T.gemm and two neighbouring blocks run it alike and
copy the same tiles (pipeline_loops.Roles.pair), the two run as a cluster: each
producer asks TMA for half of a tile's boxes, multicast into both blocks, and a slot
is refilled once the consumer warps of both have released it. H200, b4 h32 s4096
d128: 1.009x the same kernel without clusters and 1.015x SDPA over 48 paired rounds.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.cuda_source import loop_text
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
NO_MULTICAST = {"tl.disable_tma_multicast": True}


def _attention(batch, heads, sequence, dimension, target="cuda:sm_90a", configs=None,
               causal=False):
    from examples.flash_attention import flash_attention_kernel as fa

    return tilelab.compile(fa.fn(batch, heads, sequence, dimension, block_m=128, block_n=128,
                                 threads=256, causal=causal),
                           out_idx=fa.out_idx, target=target,
                           pass_configs={**fa.pass_configs, **(configs or {})})


@needs_nvcc
def test_neighbouring_query_blocks_share_k_and_v():
    kernel = _attention(2, 4, 1000, 128)  # 8 query blocks: 4 pairs along blockIdx.x
    source = kernel.get_kernel_source()
    assert kernel.launch["cluster"] == [2, 1, 1]
    assert "__cluster_dims__(2, 1, 1) __launch_bounds__(384) " in source
    assert source.count("tl::cluster_sync();") == 1  # after both blocks' mbarrier inits
    # two boxes per tile: each block asks for one of K's and one of V's, for both
    producer = source[source.index("registers_down"):]
    assert producer.count("tl::tma_load_multicast(") == 4
    assert "tl::tma_load(" not in producer
    assert producer.count("tl::cluster_rank() == 0") == 2
    # the slots' `empty` barriers count the consumer warps of both blocks, which release
    # a slot in both
    assert source.count("])), 16);") == 2
    assert "tl::mbar_arrive_warp_pair(" in loop_text(source, "key_block")
    # before the barriers go, both blocks' releases of the last two slots
    assert "key_block_released < 8" in source
    plan = kernel.trace.pipelines[0]
    assert plan["cluster"] == [2, 1, 1]
    assert "clusters of 2 along blockIdx.x" in plan["copies"] and "tiles of K, V" in plan["copies"]
    copies = [i for i in kernel.trace.instructions if i.get("kind") == "tma"]
    assert copies and all("multicast to a cluster of 2" in i["instruction"] for i in copies)


@needs_nvcc
@pytest.mark.parametrize("why, shape, configs, causal", [
    ("the key", (2, 4, 1000, 128), NO_MULTICAST, False),
    ("causal: the pair's key loops differ in length", (2, 4, 1000, 128), None, True),
    ("an odd number of query blocks", (1, 2, 1100, 128), None, False),
    ("d64: one box per tile, nothing to halve", (2, 4, 1000, 64), None, False),
    ("a rotated loop: measured 0.98x with clusters", (2, 4, 1000, 128),
     {"tl.enable_intra_warpgroup_overlap": True}, False),
])
def test_blocks_stay_apart_where_they_cannot_share(why, shape, configs, causal):
    kernel = _attention(*shape, configs=configs, causal=causal)
    source = kernel.get_kernel_source()
    assert "cluster" not in kernel.launch, why
    assert "__cluster_dims__" not in source and "multicast" not in source, why
    assert kernel.trace.pipelines[0].get("cluster") is None


@tilelab.jit(out_idx=[3])
def windowed_attention(sequence: int, shift: int):
    """Scores and a weighted sum over four key tiles, starting at tile `shift * block`:
    with shift 0 every query block reads the same tiles, with 1 each reads its own."""
    dimension, rows = 128, 128

    @T.prim_func
    def kernel(Q: T.Tensor((sequence, dimension), T.float16),
               K: T.Tensor((sequence, dimension), T.float16),
               V: T.Tensor((sequence, dimension), T.float16),
               O: T.Tensor((sequence, dimension), T.float16)):  # noqa: E741
        with T.Kernel(T.ceildiv(sequence, rows), threads=256) as block:
            q = T.alloc_shared((rows, dimension), T.float16)
            k = T.alloc_shared((rows, dimension), T.float16)
            v = T.alloc_shared((rows, dimension), T.float16)
            scores = T.alloc_fragment((rows, rows), T.float32)
            weights = T.alloc_fragment((rows, rows), T.float16)
            out = T.alloc_fragment((rows, dimension), T.float32)
            T.copy(Q[block * rows, 0], q)
            T.clear(out)
            for key_block in T.Pipelined(4, num_stages=2):
                T.copy(K[(key_block + shift * block) * rows, 0], k)
                T.clear(scores)
                T.gemm(q, k, scores, transpose_B=True)
                for i, j in T.Parallel(rows, rows):
                    scores[i, j] = T.exp2(scores[i, j] * 0.01)
                T.copy(scores, weights)
                T.copy(V[(key_block + shift * block) * rows, 0], v)
                T.gemm(weights, v, out)
            T.copy(out, O[block * rows, 0])

    return kernel


@needs_nvcc
def test_blocks_that_copy_different_tiles_stay_apart():
    """The loops of neighbouring blocks match in length either way; only where the proof
    finds the same tile starts in both blocks (shift 0) do they pair."""
    same = windowed_attention.compile(1024, 0, target="cuda:sm_90a")
    own = windowed_attention.compile(1024, 1, target="cuda:sm_90a")
    assert all("warp_specialized" in k.trace.pipelines[0] for k in (same, own))
    assert same.launch["cluster"] == [2, 1, 1]
    assert "cluster" not in own.launch
    assert "multicast" not in own.get_kernel_source()


@needs_nvcc
def test_a_gemm_loop_keeps_a_copy_per_block():
    """A loop that only multiplies keeps its MMAs in flight, and the cross-block release
    measured slower there (GEMM 8192^3 with B shared by pairs of blocks, H200)."""
    from tests.test_wgmma import _inputs, matmul

    cfg = {"block_k": 64, "stages": 4}
    a, b = _inputs(cfg, 1024, 1024, 1024)
    kernel = matmul.compile(a.to("meta"), b.to("meta"), target="cuda:sm_90a", **cfg)
    assert "warp_specialized" in kernel.trace.pipelines[0]
    assert "cluster" not in kernel.launch


@pytest.mark.gpu
@pytest.mark.parametrize("sequence", [1000, 1024, 1536])
def test_shared_tiles_give_the_same_attention_on_the_gpu(sequence):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    import torch.nn.functional as F

    shape = (2, 3, sequence, 128)
    paired = _attention(*shape, target="cuda")
    apart = _attention(*shape, target="cuda", configs=NO_MULTICAST)
    assert paired.launch["cluster"] == [2, 1, 1] and "cluster" not in apart.launch
    for seed in range(3):
        torch.manual_seed(seed)
        q, k, v = (torch.randn(*shape, dtype=torch.float16, device="cuda") for _ in range(3))
        got = paired(q, k, v)
        torch.testing.assert_close(got, apart(q, k, v), rtol=0, atol=0)  # the same sums
        want = F.scaled_dot_product_attention(q, k, v)
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
