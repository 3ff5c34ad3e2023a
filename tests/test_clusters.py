"""Pairs of blocks that share tiles: clusters and TMA multicast (passes/pipeline_loops.py).

In a warp-specialized TMA loop, blocks 2c and 2c + 1 along a block axis that copy the
same tiles of an operand at every iteration run as a cluster of two: each block's
producer asks TMA for every other box of those tiles, and each box lands in both
blocks. A slot is refilled only when the consumers of both blocks have released it.
Where the pairing cannot be proven (an odd grid, a swizzle that breaks the pairs, an
operand of one box), every block copies its own tiles, as before.
"""

from __future__ import annotations

import pytest
import torch

from examples.gemm import gemm_kernel
from tests.test_wgmma import _inputs, _reference, matmul
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
SPLIT = {"block_k": 64, "stages": 4}  # 128 KB of slots: alone on its SM, split between roles


def _meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


def _shared(kernel) -> str:
    """The operands the pipeline multicasts, from its plan ("" where none)."""
    copies = kernel.trace.pipelines[0]["copies"]
    return copies.split("copy the same tiles of ")[1].split(":")[0] if "clusters" in copies \
        else ""


@needs_nvcc
@pytest.mark.parametrize("m, n, k, cfg, cluster, shared", [
    # 7 x 8 blocks: by and by + 1 read the same columns of B (two boxes of 64)
    (1000, 776, 520, SPLIT, [1, 2, 1], "B"),
    # 8 x 8: bx and bx + 1 read the same rows of A, but A's 128x64 tile is one box; then
    # along y, B
    (1024, 1024, 512, SPLIT, [1, 2, 1], "B"),
    # a 128x128 A tile is two boxes: the pair along x shares it
    (1024, 1024, 512, {"block_k": 128, "stages": 3}, [2, 1, 1], "A"),
    # 3 x 3 blocks: no pair
    (300, 300, 512, SPLIT, None, ""),
])
def test_neighbouring_blocks_that_read_the_same_tiles_share_them(m, n, k, cfg, cluster, shared):
    kernel = matmul.compile(_meta(m, k), _meta(k, n), target="cuda:sm_90a", **cfg)
    source = kernel.get_kernel_source()
    assert kernel.launch.get("cluster") == cluster
    assert _shared(kernel) == shared
    if cluster is None:
        assert "__cluster_dims__" not in source and "tl::cluster_sync()" not in source
        return
    assert f"__cluster_dims__({', '.join(map(str, cluster))})" in source
    assert source.count("tl::cluster_sync();") == 1  # after the mbarriers' initialization
    loads = source.split("tl::tma_load_multicast(")[1:]
    assert loads and all(", (ushort)3, " in load.split(";")[0] for load in loads)  # both blocks
    # each block releases a slot at both blocks' `empty` mbarriers, which count 2 x 4 warps
    assert "tl::mbar_arrive_warp_cluster(" in source and "tl::mbar_arrive_warp(" not in source
    assert ")), 8);" in source.split("tl::mbar_init_fence")[0]


@needs_nvcc
def test_a_swizzled_launch_order_is_followed():
    """T.use_swizzle(8) renumbers the blocks after the pipeline is planned: bx and bx + 1 of
    the launch are the program's (by, bx) and (by + 1, bx) inside a panel, which share B.
    A panel that does not divide the rows (3 of 8) leaves pairs that cross panels: none."""
    a, b = _meta(1024, 512), _meta(512, 1024)
    paired = gemm_kernel.compile(a, b, block_k=64, num_stages=4, panel=8, target="cuda:sm_90a")
    assert paired.launch["cluster"] == [2, 1, 1] and _shared(paired) == "B"
    ragged = gemm_kernel.compile(a, b, block_k=64, num_stages=4, panel=3, target="cuda:sm_90a")
    assert "cluster" not in ragged.launch


@needs_nvcc
def test_the_last_slots_are_released_and_awaited_before_the_barriers_go():
    """A block may not reuse its mbarriers' memory while the other block's consumers still
    arrive there: after the loop each block releases its last slot and waits for the
    phases of the last `stages` iterations (fewer where the loop is shorter)."""
    kernel = matmul.compile(_meta(1000, 128), _meta(128, 776), target="cuda:sm_90a", **SPLIT)
    tail = kernel.get_kernel_source().split("wait_group_sync_aligned_0();")[-1]
    release, wait, inval = (tail.index(s) for s in ("tl::mbar_arrive_warp_cluster(",
                                                     "tl::mbar_wait(", "tl::mbar_inval("))
    assert release < wait < inval


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, cfg", [
    (1000, 776, 520, SPLIT),  # pairs along y, B shared, ragged edges (TMA zero-fills)
    (1024, 1024, 512, {"block_k": 128, "stages": 3}),  # pairs along x, A shared
    (1000, 776, 128, SPLIT),  # two iterations in four slots
    (1000, 776, 64, SPLIT),  # one
    (1024, 2048, 4096, SPLIT),  # a long loop: every slot's phase turns many times
    (1000, 1000, 1000, {**SPLIT, "block_n": 256, "threads": 256}),  # two consumer warpgroups
    (300, 300, 512, SPLIT),  # no pair
])
def test_clustered_gemms_are_right_on_the_gpu(m, n, k, cfg):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    configs = {"tl.force_warp_specialized": True}
    for seed in range(3):  # fresh inputs each time: a moving error would be a race
        torch.manual_seed(seed)
        a, b = _inputs(cfg, m, n, k, device="cuda")
        out = matmul(a, b, pass_configs=configs, **cfg)
        torch.testing.assert_close(out.float(), _reference(cfg, a, b), rtol=2e-2, atol=5e-2)
    for panel in (8, 4):
        a, b = _inputs({}, 1024, 2048, 1024, device="cuda")
        out = gemm_kernel(a, b, block_k=64, num_stages=4, panel=panel)
        torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=2e-2, atol=5e-2)
