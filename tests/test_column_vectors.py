"""Column vectors of a GEMM accumulator kept in registers: a bias added along the columns
(TileLang's epilogues copy it into a fragment) and the sums of the accumulator's columns.

A row vector of the accumulator (softmax's row maximum) lives on the threads that hold
its row. A column vector is the same idea turned: layout inference gives it the
accumulator's layout reduced over the rows, so each thread keeps the columns of the
elements it holds, every column copied on each thread that needs it. On sm_90a that is
the wgmma accumulator (a column on 32 of a warpgroup's 128 threads), on sm_80 the
mma.sync one. The tests check the layout against the accumulator's, the CPU results
against torch (tails included), and, on a Hopper GPU, both instruction paths.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def gemm_columns(A, B, Bias, block_m: int = 128, block_n: int = 128, block_k: int = 32,
                 stages: int = 3, threads: int = 128, dtype=T.float16):
    """C = A @ B + bias (the bias in a fragment), and S[r] = the column sums of the rows
    of A @ B that block row r computes."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), dtype)
    B: T.Tensor((K, N), dtype)
    Bias: T.Tensor((N,), dtype)
    C = T.empty((M, N), dtype)
    S = T.empty((T.ceildiv(M, block_m), N), T.float32)
    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=threads) as (bx, by):
        a_tile = T.alloc_shared((block_m, block_k), dtype)
        b_tile = T.alloc_shared((block_k, block_n), dtype)
        acc = T.alloc_fragment((block_m, block_n), T.float32)
        bias = T.alloc_fragment((block_n,), dtype)
        sums = T.alloc_fragment((block_n,), T.float32)
        T.copy(Bias[bx * block_n], bias)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, block_k), num_stages=stages):
            T.copy(A[by * block_m, k * block_k], a_tile)
            T.copy(B[k * block_k, bx * block_n], b_tile)
            T.gemm(a_tile, b_tile, acc)
        T.reduce_sum(acc, sums, dim=0, clear=True)
        T.copy(sums, S[by, bx * block_n])
        for i, j in T.Parallel(block_m, block_n):
            acc[i, j] += bias[j]
        T.copy(acc, C[by * block_m, bx * block_n])
    return C, S


CONFIGS = {
    "one_warpgroup": {},
    "two_warpgroups": {"block_n": 256, "block_k": 64, "stages": 4, "threads": 256},
    "small": {"block_m": 64, "block_n": 64, "threads": 128},
}


def _inputs(m, n, k, dtype=torch.float16, device="cpu"):
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    bias = torch.randn(n, dtype=dtype, device=device)
    return a, b, bias


def _reference(a, b, bias, block_m):
    product = a.float() @ b.float()
    # rows past M are zero in the accumulator (the copies fill them with zeros)
    sums = torch.stack([product[r:r + block_m].sum(0) for r in range(0, a.shape[0], block_m)])
    return (product + bias.float()).to(a.dtype), sums


def _check(cfg, a, b, bias, target):
    dtype = T.float16 if a.dtype == torch.float16 else T.bfloat16
    c, s = gemm_columns(a, b, bias, target=target, dtype=dtype, **cfg)
    want_c, want_s = _reference(a, b, bias, cfg.get("block_m", 128))
    torch.testing.assert_close(c.float(), want_c.float(), rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(s, want_s, rtol=1e-3, atol=1e-2 * a.shape[1] ** 0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_results_with_tails(dtype):
    torch.manual_seed(0)
    _check(CONFIGS["small"], *_inputs(150, 200, 72, dtype), "cpu")


@needs_nvcc
@pytest.mark.parametrize("target, name, accumulator, copies", [
    ("cuda:sm_90a", "one_warpgroup", "wgmma_accumulator", 32),
    ("cuda:sm_90a", "two_warpgroups", "wgmma_accumulator", 32),
    ("cuda:sm_80", "one_warpgroup", "accumulator", 16),
])
def test_vectors_take_the_accumulators_columns(target, name, accumulator, copies):
    """Each thread keeps exactly the columns of the accumulator elements it holds."""
    kernel = gemm_columns.compile(*_inputs(256, 512, 128), target=target, **CONFIGS[name])
    layouts = kernel.trace.layouts
    acc_threads = layouts["acc"]["thread"][0]  # [row][column] -> thread
    assert layouts["acc"]["recipe"]["kind"] == accumulator
    for vector in ("bias", "sums"):
        layout = layouts[vector]
        assert layout["recipe"] == {"kind": "reduced", "of": layouts["acc"]["recipe"], "dim": 0}
        assert layout["replicate"] == copies
        holders = [set(column) for column in zip(*layout["thread"])]  # column -> threads
        for column, threads in enumerate(holders):
            needed = {row[column] for row in acc_threads}
            assert threads == needed, (vector, column)
    assert kernel.trace.resources["spill_stores_bytes"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("wgmma", [True, False])
def test_gpu_results_with_tails(name, wgmma):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a): wgmma and mma.sync both run there")
    cfg = dict(CONFIGS[name], pass_configs={"tl.disable_wgmma": not wgmma})
    for seed, dtype in ((0, torch.float16), (1, torch.bfloat16)):
        torch.manual_seed(seed)
        # rows 16-byte multiples apart (TMA), tiles cut at the bottom and right edges
        _check(cfg, *_inputs(333, 520, 200, dtype, "cuda"), "cuda:sm_90a")
