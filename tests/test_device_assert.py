"""`T.device_assert(condition, msg)`: the CPU stops at the first failure, at its line; the
GPU prints each failure and goes on (a trap would cost the process its CUDA context)."""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit(out_idx=[-1])
def square_roots(n=100):
    @T.prim_func
    def kernel(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            tile = T.alloc_fragment((32,), T.float32)
            T.copy(A[bx * 32], tile)
            T.device_assert(A[0] == A[0], "A[0] is NaN")  # a statement of the block
            for i in T.Parallel(32):
                T.device_assert(tile[i] >= 0, "inputs must be non-negative")
                tile[i] = T.sqrt(tile[i])
            T.copy(tile, B[bx * 32])
    return kernel


@tilelab.jit(out_idx=[-1])
def per_thread_sums(n=64):
    """Code written for one thread asserts about its own register."""
    @T.prim_func
    def kernel(A: T.Tensor((n, 8), T.int32), S: T.Tensor((n,), T.int32)):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            total = T.alloc_var(T.int32, 0)
            for k in T.serial(8):
                total = total + A[tx, k]
            T.device_assert(total < 1000, "a row sums to 1000 or more")
            S[tx] = total
    return kernel


def test_a_condition_that_holds_changes_nothing():
    a = torch.rand(100)
    torch.testing.assert_close(square_roots()(a), a.sqrt())
    rows = torch.randint(0, 100, (64, 8), dtype=torch.int32)
    assert torch.equal(per_thread_sums()(rows), rows.sum(1, dtype=torch.int32))


def test_the_first_failure_is_an_error_at_its_line():
    a = torch.rand(100)
    a[70] = -1.0
    with pytest.raises(TileLabError, match="T.device_assert failed: inputs must be "
                                           "non-negative") as info:
        square_roots()(a)
    assert info.value.location.line == square_roots.source.line_offset + 10
    rows = torch.zeros(64, 8, dtype=torch.int32)
    rows[5] = 200
    with pytest.raises(TileLabError, match="a row sums to 1000 or more"):
        per_thread_sums()(rows)


def test_a_condition_known_while_compiling():
    @T.prim_func
    def holds(A: T.Tensor((4,), T.float32)):
        with T.Kernel(1, threads=4):
            T.device_assert(4 % 2 == 0, "four is even")
            A[0] = 1.0

    with pytest.raises(TileLabError, match="T.device_assert: sizes must be even"):
        @T.prim_func
        def fails(A: T.Tensor((5,), T.float32)):
            with T.Kernel(1, threads=4):
                T.device_assert(5 % 2 == 0, "sizes must be even")
    with pytest.raises(TileLabError, match="takes a condition"):
        @T.prim_func
        def not_a_condition(A: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=4):
                T.device_assert(A[0], "A[0] is not a condition")


@needs_nvcc
def test_on_the_gpu_each_failure_is_printed_not_trapped():
    for kernel in (square_roots, per_thread_sums):
        source = kernel.compile(target="cuda:sm_90a").get_kernel_source()
        body = source[source.index('extern "C" __global__'):]
        assert "T.device_assert failed" in body and "printf" in body
        assert "assert(" not in body and "__trap" not in body


@pytest.mark.gpu
def test_failures_on_the_gpu_leave_the_results_and_the_context():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = torch.rand(100, device="cuda")
    a[70] = -1.0
    out = square_roots.compile(target="cuda")(a)  # prints one line, from block 2's thread 6
    torch.cuda.synchronize()
    assert torch.isnan(out[70]) and torch.allclose(out[:70], a[:70].sqrt())
    b = torch.rand(100, device="cuda")
    torch.testing.assert_close(square_roots.compile(target="cuda")(b), b.sqrt())
