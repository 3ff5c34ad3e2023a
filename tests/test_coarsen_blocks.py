"""Block coarsening (passes/coarsen_blocks.py): elementwise kernels of one element per thread
get several elements per thread on CUDA; everything else is left as written."""

from __future__ import annotations

import math

import pytest
import torch

import tilelab
import tilelab.language as T
from examples.vector_add import vector_add_kernel
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
TAIL = (1 << 23) + 3  # 32,769 blocks of 256: the last block holds 3 elements


@tilelab.jit
def block_tagged(A, block: int = 256):
    """Uses its block index other than in an address: every element gets `bx % 3`."""
    N = T.const("N")
    A: T.Tensor((N,), T.float16)
    C = T.empty((N,), T.float16)
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                C[bx * block + i] = A[bx * block + i] * 2 + T.cast(bx % 3, T.float16)
    return C


@tilelab.jit
def staged_scale(A, block: int = 256):
    """Goes through a shared tile: its threads share data, so its blocks stay as written."""
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        tile = T.alloc_shared((block,), T.float32)
        T.copy(A[bx * block], tile)
        for i in T.Parallel(block):
            tile[i] = tile[i] * 3
        T.copy(tile, C[bx * block])
    return C


def _tagged_reference(a, block=256):
    tags = (torch.arange(a.numel(), device=a.device) // block % 3).to(a.dtype)
    return a * 2 + tags


@needs_nvcc
def test_vector_add_takes_four_elements_per_thread():
    a = torch.empty(TAIL)
    kernel = vector_add_kernel.compile(a, a, target="cuda:sm_90a")
    blocks = -(-TAIL // 256)
    assert kernel.trace.resources["grid"] == [-(-blocks // 4), 1, 1]
    assert kernel.trace.resources["block"] == [256, 1, 1]
    plain = vector_add_kernel.compile(a, a, target="cuda:sm_90a",
                                      pass_configs={PassConfigKey.TL_DISABLE_COARSEN: True})
    assert plain.trace.resources["grid"] == [blocks, 1, 1]
    # a whole vector of 2^24: no guard left, one 16-byte access per tensor and thread
    whole = torch.empty(1 << 24)
    source = vector_add_kernel.compile(whole, whole, target="cuda:sm_90a").trace.code["cuda"]
    assert source.count("float4") >= 3 and "if (" not in source.split("__global__")[-1]


@needs_nvcc
def test_half_precision_takes_eight_and_small_or_shared_kernels_stay():
    a = torch.empty(TAIL, dtype=torch.float16)
    assert block_tagged.compile(a, target="cuda:sm_90a").trace.resources["grid"] == \
        [math.ceil(math.ceil(TAIL / 256) / 8), 1, 1]
    small = torch.empty(100_000, dtype=torch.float16)  # 391 blocks: would not fill the GPU
    assert block_tagged.compile(small, target="cuda:sm_90a").trace.resources["grid"] == \
        [391, 1, 1]
    x = torch.empty(TAIL)
    assert staged_scale.compile(x, target="cuda:sm_90a").trace.resources["grid"] == \
        [-(-TAIL // 256), 1, 1]


def test_the_cpu_backend_computes_the_same():
    a = torch.randn(TAIL).half()
    torch.testing.assert_close(block_tagged(a, target="cpu"), _tagged_reference(a))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [TAIL, 1 << 24, (1 << 22) + 1000])
def test_coarsened_kernels_on_the_gpu(n):
    torch.manual_seed(n)
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    torch.testing.assert_close(vector_add_kernel(a, b), a + b)
    h = torch.randn(n, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(block_tagged(h), _tagged_reference(h))
    torch.testing.assert_close(staged_scale(a), a * 3)
