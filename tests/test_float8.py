"""float8 tiles on the GPU: GPUs have no float8 arithmetic and CUDA C no operators for it,
so a float8 value meets others as float32 (`ir/expr.common_dtype`) and a store into a
float8 tile rounds back; `q[i, j] * 2.0` reached nvcc as `__nv_fp8_e4m3 * __nv_fp8_e4m3`
before. (The CPU backend refuses float8: tests/test_errors.py.)"""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

M = N = 64


def quantize(dtype):
    """Y = X rounded to float8; Z = 2 * that value, computed from the float8 tile."""
    @T.prim_func
    def kernel(X: T.Tensor((M, N), T.float32), Y: T.Tensor((M, N), dtype),
               Z: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), T.float32)
            q = T.alloc_fragment((M, N), dtype)
            T.copy(X, f)
            T.copy(f, q)
            T.copy(q, Y)
            for i, j in T.Parallel(M, N):
                Z[i, j] = q[i, j] * 2.0

    return kernel


@needs_nvcc
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_arithmetic_compiles_in_float32(name):
    source = tilelab.compile(quantize(getattr(T, name)), target="cuda:sm_90a").trace.code["cuda"]
    assert "((float)q_ptr[0]) * " in source


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_on_the_gpu(name):
    x = torch.randn(M, N, device="cuda") * 40  # well inside both formats' finite range
    y = torch.empty(M, N, device="cuda", dtype=getattr(torch, name))
    z = torch.empty(M, N, device="cuda")
    tilelab.compile(quantize(getattr(T, name)), target="cuda")(x, y, z)
    expected = x.to(getattr(torch, name))
    assert torch.equal(y.view(torch.uint8), expected.view(torch.uint8))
    torch.testing.assert_close(z, 2 * expected.float())
