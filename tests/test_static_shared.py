"""`T.alloc_shared(..., scope="shared")` (TileLang's static shared memory) is a tile in the
block's dynamic shared memory like any other (language/primitives.py alloc_shared).

A static array sits before the dynamic bytes and pushed every tile off the 1 KiB
boundary that wgmma reads its swizzle pattern from: TileLang's KDA wy_fast, whose
`Beta_shared` vector is static, stopped in wgmma_check_aligned (an unspecified launch
failure) in every configuration with a warpgroup MMA on the H200."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabTypeError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@tilelab.jit(out_idx=[-1])
def scaled_gemm(M, N, K, bm=64, bn=64, bk=32):
    """C = diag(scale) @ A @ B, the row scales kept in a static-scoped shared vector."""
    @T.prim_func
    def kernel(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
               scale: T.Tensor((M,), T.float16), C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            rows = T.alloc_shared((bm,), T.float16, scope="shared")
            A_s = T.alloc_shared((bm, bk), T.float16)
            B_s = T.alloc_shared((bk, bn), T.float16)
            acc = T.alloc_fragment((bm, bn), T.float32)
            for i in T.Parallel(bm):
                rows[i] = scale[by * bm + i]
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, acc)
            for i, j in T.Parallel(bm, bn):
                acc[i, j] = acc[i, j] * rows[i]
            T.copy(acc, C[by * bm, bx * bn])
    return kernel


def check(kernel, device):
    a = torch.randn(128, 96, device=device).half()
    b = torch.randn(96, 192, device=device).half()
    s = torch.randn(128, device=device).half()
    expected = (a.float() @ b.float()) * s.float()[:, None]
    torch.testing.assert_close(kernel(a, b, s), expected, rtol=1e-2, atol=1e-2)


def test_cpu_matches_torch():
    check(scaled_gemm.compile(128, 192, 96, target="cpu"), "cpu")


@needs_nvcc
def test_no_static_array_before_the_tiles():
    source = scaled_gemm.compile(128, 192, 96, target="cuda").get_kernel_source()
    assert "wgmma" in source
    assert "__shared__" in source and " __shared__ alignas" not in source.replace(
        "extern __shared__", "")


def test_other_scopes_are_refused_at_the_line():
    with pytest.raises(TileLabTypeError, match="scope 'shared' or 'shared.dyn'") as info:
        @T.prim_func
        def odd(A: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                T.alloc_shared((8,), T.float32, scope="global")
    assert "test_static_shared.py" in str(info.value)


@pytest.mark.gpu
def test_gpu_matches_torch():
    check(scaled_gemm.compile(128, 192, 96, target="cuda"), "cuda")
