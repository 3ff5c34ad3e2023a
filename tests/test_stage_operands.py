"""Programs the CPU ran and CUDA refused, because an op's GPU lowering takes an operand in
registers only: T.gemm into a shared tile, a fragment reduced into a shared vector. The
CUDA pipeline now stages such an operand through a fragment (passes/stage_operands.py);
the same programs compile for sm_80 and sm_90a and agree with torch on the GPU."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


def gemm_into_shared(accumulate: bool):
    """C = A @ B (+ C's old values when accumulating), the accumulator a shared tile."""
    @T.prim_func
    def kernel(A: T.Tensor((64, 32), T.float16), B: T.Tensor((32, 64), T.float16),
               C: T.Tensor((64, 64), T.float32)):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((64, 32), T.float16)
            b = T.alloc_shared((32, 64), T.float16)
            c = T.alloc_shared((64, 64), T.float32)
            T.copy(A, a)
            T.copy(B, b)
            T.copy(C, c)
            T.gemm(a, b, c, clear_accum=not accumulate)
            T.copy(c, C)

    return kernel


def row_max_into_shared(rows=40, cols=64):
    """Each row's maximum of a fragment, into a shared vector, then scaled by 2."""
    @T.prim_func
    def kernel(X: T.Tensor((rows, cols), T.float32), Y: T.Tensor((rows,), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((rows, cols), T.float32)
            best = T.alloc_shared((rows,), T.float32)
            T.copy(X, tile)
            T.reduce_max(tile, best, dim=1)
            for i in T.Parallel(rows):
                best[i] = best[i] * 2.0
            T.copy(best, Y)

    return kernel


def inputs(device="cpu"):
    a = torch.randn(64, 32, device=device).half()
    b = torch.randn(32, 64, device=device).half()
    c = torch.randn(64, 64, device=device)
    return a, b, c


@pytest.mark.parametrize("accumulate", [True, False])
def test_gemm_into_shared_on_the_cpu(accumulate):
    a, b, c = inputs()
    expected = a.float() @ b.float() + (c if accumulate else 0)
    tilelab.compile(gemm_into_shared(accumulate), target="cpu")(a, b, c)
    torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-3)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_they_compile_for_cuda(arch):
    kernel = tilelab.compile(gemm_into_shared(True), target=f"cuda:{arch}")
    names = [p.name for p in kernel.trace.passes]
    assert "tilelab.StageOperands" in names
    assert "c_in_registers" in kernel.trace.layouts  # a fragment like any other
    tilelab.compile(row_max_into_shared(), target=f"cuda:{arch}")


@pytest.mark.gpu
@pytest.mark.parametrize("accumulate", [True, False])
def test_gemm_into_shared_on_the_gpu(accumulate):
    a, b, c = inputs("cuda")
    expected = a.float() @ b.float() + (c if accumulate else 0)
    tilelab.compile(gemm_into_shared(accumulate), target="cuda")(a, b, c)
    torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_row_max_into_shared_on_the_gpu():
    x = torch.randn(40, 64, device="cuda")
    y = torch.empty(40, device="cuda")
    tilelab.compile(row_max_into_shared(), target="cuda")(x, y)
    torch.testing.assert_close(y, 2 * x.amax(1))
