"""`T.make_tensor(address, shape, dtype)`: tensors reached through a table of addresses.

TileLang's grouped GEMM passes each group's A, B and C as `data_ptr()`s in `T.ptr`
tensors and makes tensors of them in the kernel, so that groups need not be
concatenated. Here: groups of different sizes (tails in M), the group found by a
T.alloc_var scan of tile offsets as the example does, a pipelined GEMM over K; on the
CPU, compiled for sm_90a (where TMA, whose descriptors the host makes for the launch's
tensors, leaves made tensors to cp.async), and on the GPU.
"""

from __future__ import annotations

import math

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")

SIZES, K, N, BLOCK = (20, 70, 33), 96, 48, 32


def grouped_gemm(sizes=SIZES, stages=2):
    """C_g = A_g @ B_g for each group g; A_g is (max M, K), its first sizes[g] rows used."""
    groups, rows = len(sizes), max(sizes)
    offsets = [sum(math.ceil(s / BLOCK) for s in sizes[:g]) for g in range(groups)]
    tiles = sum(math.ceil(s / BLOCK) for s in sizes)

    @T.prim_func
    def kernel(A_ptrs: T.Tensor((groups,), T.ptr), B_ptrs: T.Tensor((groups,), T.ptr),
               C_ptrs: T.Tensor((groups,), T.ptr), first_tile: T.Tensor((groups,), T.int32)):
        with T.Kernel(tiles, T.ceildiv(N, BLOCK), threads=128) as (bx, by):
            group = T.alloc_var(T.int32)
            group = 0
            for g in range(groups):
                group = T.if_then_else(bx >= first_tile[g], g, group)
            A = T.make_tensor(A_ptrs[group], (rows, K), T.float16)
            B = T.make_tensor(B_ptrs[group], (K, N), T.float16)
            C = T.make_tensor(C_ptrs[group], (rows, N), T.float16)
            row = (bx - first_tile[group]) * BLOCK
            a_tile = T.alloc_shared((BLOCK, BLOCK), T.float16)
            b_tile = T.alloc_shared((BLOCK, BLOCK), T.float16)
            acc = T.alloc_fragment((BLOCK, BLOCK), T.float32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, BLOCK), num_stages=stages):
                T.copy(A[row, k * BLOCK], a_tile)
                T.copy(B[k * BLOCK, by * BLOCK], b_tile)
                T.gemm(a_tile, b_tile, acc)
            T.copy(acc, C[row, by * BLOCK])

    return kernel, offsets


def _run(kernel, offsets, device, seed):
    torch.manual_seed(seed)
    rows = max(SIZES)
    a = [torch.randn(rows, K, device=device).half() for _ in SIZES]
    b = [torch.randn(K, N, device=device).half() for _ in SIZES]
    c = [torch.full((rows, N), 7.0, device=device).half() for _ in SIZES]

    def table(tensors):
        return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=device)

    kernel(table(a), table(b), table(c), torch.tensor(offsets, dtype=torch.int32,
                                                      device=device))
    for g, size in enumerate(SIZES):
        expected = (a[g][:size].float() @ b[g].float()).half()
        torch.testing.assert_close(c[g][:size], expected, atol=2e-2, rtol=2e-2)


def test_groups_through_an_address_table_on_the_cpu():
    kernel, offsets = grouped_gemm()
    compiled = tilelab.compile(kernel, target="cpu")
    for seed in range(2):
        _run(compiled, offsets, "cpu", seed)


@needs_nvcc
@pytest.mark.parametrize("stages", [1, 2])
def test_made_tensors_compile_for_cuda(stages):
    kernel, _ = grouped_gemm(stages=stages)
    compiled = tilelab.compile(kernel, target="cuda:sm_90a")
    source = compiled.get_kernel_source()
    assert "A_ptrs_ptr[" in source  # the address read in the kernel, from the group's entry
    if stages > 1:  # A and B are made tensors: no TMA descriptor, cp.async
        assert "cp_async" in source and "CUtensorMap" not in source.split("__global__")[-1]


def test_an_address_must_be_a_64_bit_kernel_value():
    def program(address_of):
        @T.prim_func
        def kernel(P: T.Tensor((2,), T.int32), X: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=32):
                A = T.make_tensor(address_of(P, X), (4,), T.float32)
                X[0] = A[0]

        return kernel

    for wrong in (lambda P, X: P[0], lambda P, X: X, lambda P, X: 12345):
        with pytest.raises(TileLabError, match="T.make_tensor takes an address"):
            program(wrong)
    with pytest.raises(TileLabError, match="contiguous"):
        @T.prim_func
        def strided(P: T.Tensor((2,), T.ptr), X: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=32):
                A = T.make_tensor(P[0], (4,), T.float32, strides=(2,))
                X[0] = A[0]


@pytest.mark.gpu
def test_groups_through_an_address_table_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for stages in (1, 2):
        kernel, offsets = grouped_gemm(stages=stages)
        compiled = tilelab.compile(kernel, target="cuda")
        for seed in range(2):
            _run(compiled, offsets, "cuda", seed)
