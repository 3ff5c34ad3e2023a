"""Boolean tiles on the GPU: TVM's CUDA code generator has no vector type for bool, so a
copy of four mask bytes became an eight-byte `ushort4` (a misaligned-address fault on the
H200 in TileLang's block-sparse attention example) and a 16-wide loop was refused
(`boolx16`). passes/cuda_vectors.py moves booleans one at a time."""

import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


def mask_rows(rows=6, width=4):
    """Row `bx` of a bool mask into a fragment (4-byte rows: offsets 4-byte aligned only)."""
    @T.prim_func
    def kernel(M: T.Tensor((rows, width), T.bool), X: T.Tensor((rows, width), T.float32),
               Y: T.Tensor((rows, width), T.float32)):
        with T.Kernel(rows, threads=128) as bx:
            m = T.alloc_fragment((width,), T.bool)
            T.copy(M[bx, :], m)
            for j in T.Parallel(width):
                Y[bx, j] = T.if_then_else(m[j], X[bx, j], -1.0)

    return kernel


def positive_mask(n=1024):
    """A shared bool tile written 16 at a time by a parallel loop, copied out and used."""
    @T.prim_func
    def kernel(X: T.Tensor((n,), T.float32), Mo: T.Tensor((n,), T.bool),
               Y: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=128):
            m = T.alloc_shared((n,), T.bool)
            for i in T.Parallel(n):
                m[i] = X[i] > 0
            T.copy(m, Mo)
            for i in T.Parallel(n):
                Y[i] = T.if_then_else(m[i], X[i], 0.0)

    return kernel


def check(device):
    m = torch.rand(6, 4, device=device) > 0.5
    x = torch.randn(6, 4, device=device)
    y = torch.empty(6, 4, device=device)
    tilelab.compile(mask_rows(), target="auto")(m, x, y)
    torch.testing.assert_close(y, torch.where(m, x, -1.0))
    x = torch.randn(1024, device=device)
    mo = torch.empty(1024, dtype=torch.bool, device=device)
    y = torch.empty(1024, device=device)
    tilelab.compile(positive_mask(), target="auto")(x, mo, y)
    assert torch.equal(mo, x > 0)
    torch.testing.assert_close(y, x.clamp(min=0))


def test_on_the_cpu():
    check("cpu")


@needs_nvcc
@pytest.mark.parametrize("kernel", [mask_rows, positive_mask])
def test_booleans_move_one_at_a_time(kernel):
    source = tilelab.compile(kernel(), target="cuda:sm_90a").trace.code["cuda"]
    body = source[source.index('extern "C" __global__'):]
    assert not re.search(r"\b(ushort|uchar|char|short)\d\b", body)  # no vector types


@pytest.mark.gpu
def test_on_the_gpu():
    check("cuda")
