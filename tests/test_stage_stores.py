"""GEMM sums leave through a shared tile (passes/stage_stores.py).

The compile tests read the IR after the pass and the shared memory of the finished
kernel: the staged tile goes where the pipeline's slots were, in as few parts as fit,
and never costs a block on the multiprocessor. The GPU test compares the results with
and without the pass, edge tiles included.
"""

from __future__ import annotations

import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.test_wgmma import CONFIGS, _inputs, _reference, matmul
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
DIRECT = {"tl.disable_stage_stores": True}


@tilelab.jit
def walk_gemm(A, B, blocks: int = 132, block_m: int = 128, block_n: int = 256,
              block_k: int = 64, stages: int = 4, threads: int = 256):
    """A persistent GEMM that stores C straight from registers: its slots stay in use
    across the walk, so a staged tile has to fit beside them."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(blocks, threads=threads) as block:
        a_tile = T.alloc_shared((block_m, block_k), T.float16)
        b_tile = T.alloc_shared((block_k, block_n), T.float16)
        acc = T.alloc_fragment((block_m, block_n), T.float32)
        for ty, tx in T.Persistent([T.ceildiv(M, block_m), T.ceildiv(N, block_n)], blocks,
                                   block):
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_k), num_stages=stages):
                T.copy(A[ty * block_m, k * block_k], a_tile)
                T.copy(B[k * block_k, tx * block_n], b_tile)
                T.gemm(a_tile, b_tile, acc)
            T.copy(acc, C[ty * block_m, tx * block_n])
    return C


def test_the_merge_replay_reuses_the_places_of_finished_tiles():
    from tilelab.passes.stage_stores import merged_bytes

    slots = {"a": (0, 2, 24), "b": (0, 2, 24)}
    assert merged_bytes(slots) == 48
    assert merged_bytes({**slots, "c": (3, 3, 16)}) == 48  # in a's place
    assert merged_bytes({**slots, "c": (3, 3, 32)}) == 80  # fits in neither
    assert merged_bytes({**slots, "c": (2, 3, 16)}) == 64  # b is still in use at 2
    # a tile the program uses after the loop takes a place first: the next needs another
    assert merged_bytes({**slots, "d": (3, 4, 24), "c": (4, 4, 24)}) == 48
    assert merged_bytes({**slots, "d": (3, 4, 24), "c": (4, 4, 24), "e": (4, 4, 8)}) == 56


def _meta(*shape):
    return torch.empty(*shape, dtype=torch.float16, device="meta")


def _staged_tiles(kernel) -> list[tuple[int, ...]]:
    """Shapes of the tiles the pass added (from the IR after it)."""
    record = next(p for p in kernel.trace.passes if p.name == "tilelab.StageStores")
    return [tuple(int(d) for d in shape.split(", ")) for shape in
            re.findall(r"acc_staged = T.alloc_buffer\(\(([\d, ]+)\)", record.ir)]


def _smem(kernel) -> int:
    return kernel.trace.resources["dynamic_smem_bytes"]


def _course(cfg, pass_configs=None):
    return matmul.compile(_meta(1000, 520), _meta(520, 776), target="cuda:sm_90a",
                          pass_configs=pass_configs, **cfg)


@needs_nvcc
@pytest.mark.parametrize("name, shape", [
    ("two_groups_cols", (128, 256)),  # the 64 KB tile takes the place of A's 64 KB of slots
    ("course", (128, 64)),  # 32 KB fits in neither 24 KB slot array: two 16 KB halves
])
def test_the_staged_tile_reuses_the_dead_slots(name, shape):
    cfg = dict(CONFIGS[name], stages=4) if name == "two_groups_cols" else CONFIGS[name]
    staged, direct = _course(cfg), _course(cfg, DIRECT)
    assert _staged_tiles(staged) == [shape]
    assert _smem(staged) == _smem(direct)
    source = staged.get_kernel_source()
    assert source.count("uint4") > direct.get_kernel_source().count("uint4")  # 16-byte rows


@needs_nvcc
def test_a_walk_stages_beside_its_slots_in_parts():
    a, b = _meta(1000, 1000), _meta(1000, 1000)
    staged = walk_gemm.compile(a, b, target="cuda:sm_90a")
    direct = walk_gemm.compile(a, b, target="cuda:sm_90a", pass_configs=DIRECT)
    # four 48 KB slots stay in use: half of the 64 KB tile fits beside them
    assert _staged_tiles(staged) == [(128, 128)]
    assert _smem(staged) == _smem(direct) + 128 * 128 * 2


@needs_nvcc
def test_a_tile_that_would_cost_a_block_is_not_staged():
    # small tiles: 24 KB of slots in use across the walk, nine blocks to a multiprocessor;
    # even an eighth of C (1 KB) beside them would leave room for eight
    a, b = _meta(1000, 1000), _meta(1000, 1000)
    kernel = walk_gemm.compile(a, b, target="cuda:sm_90a", block_m=64, block_n=64,
                               block_k=32, stages=3, threads=128)
    assert _staged_tiles(kernel) == []
    assert "acc_staged" not in kernel.get_kernel_source()


@needs_nvcc
def test_other_stores_are_left_alone():
    from examples.softmax import softmax_kernel
    from examples.ws_gemm import ws_gemm_kernel

    for kernel in (softmax_kernel.compile(_meta(1000, 4096), target="cuda:sm_90a"),
                   ws_gemm_kernel.compile(_meta(1000, 1000), _meta(1000, 1000),
                                          target="cuda:sm_90a")):
        record = next(p for p in kernel.trace.passes if p.name == "tilelab.StageStores")
        assert not record.changed


def test_cpu_programs_are_unchanged():
    a, b = torch.randn(300, 200, dtype=torch.float16), torch.randn(200, 260, dtype=torch.float16)
    kernel = walk_gemm.compile(a, b, blocks=3, block_m=64, block_n=64, block_k=32, stages=2,
                               threads=128)
    assert all(p.name != "tilelab.StageStores" for p in kernel.trace.passes)
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=1e-2,
                               atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["course", "two_groups_cols", "bf16", "trans_b",
                                  "a_in_registers_two_groups"])
@pytest.mark.parametrize("pass_configs", [None, {"tl.disable_wgmma": True},
                                          {"tl.force_warp_specialized": True}])
def test_staged_results_on_the_gpu(name, pass_configs):
    cfg = CONFIGS[name]
    a, b = _inputs(cfg, 1000, 776, 520, device="cuda")
    kernel = matmul.compile(a, b, pass_configs=pass_configs, **cfg)
    assert _staged_tiles(kernel)
    torch.testing.assert_close(kernel(a, b).float(), _reference(cfg, a, b).float(),
                               rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_staged_walk_on_the_gpu():
    a = torch.randn(1000, 520, dtype=torch.float16, device="cuda")
    b = torch.randn(520, 1000, dtype=torch.float16, device="cuda")
    kernel = walk_gemm.compile(a, b, blocks=7)
    assert _staged_tiles(kernel)
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float()).half(), rtol=2e-2,
                               atol=2e-2)
