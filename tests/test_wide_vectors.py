"""`T.vectorized` loops wider than 16 bytes: TVM's CUDA code generator has no type for
sixteen floats or halves or for eight doubles ("Cannot convert type float32x16"), and
wrote eight int32 as a `longlong4` nvcc rejects. passes/cuda_vectors.py splits such
loops into unrolled loops of 16-byte vectors (TileLang's Hadamard transform keeps 16 and
more float32 per thread), and a loop that gathers (its index does not move by one element
per iteration) into loops of four."""

import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

N = 1024


def doubled(per_thread: int, dtype: str):
    """Each thread loads `per_thread` elements into registers with one vectorized loop,
    doubles them one at a time, and stores them with another."""
    @tilelab.jit
    def kernel(A):
        A: T.Tensor((3, N), dtype)
        B = T.empty((3, N), dtype)
        with T.Kernel(3, threads=N // per_thread) as bx:
            regs = T.alloc_local((per_thread,), dtype)
            tx = T.get_thread_binding(0)
            for i in T.vectorized(per_thread):
                regs[i] = A[bx, tx * per_thread + i]
            for i in T.serial(per_thread):
                regs[i] = regs[i] + regs[i]
            for i in T.vectorized(per_thread):
                B[bx, tx * per_thread + i] = regs[i]
        return B

    return kernel


CASES = [(16, "float32"), (32, "float32"), (16, "float16"), (32, "bfloat16"), (64, "int8"),
         (8, "float64"), (8, "int32")]


def _input(dtype, device):
    x = torch.randn(3, N, device=device) * 20
    return x.to(getattr(torch, dtype))


@pytest.mark.parametrize(("per_thread", "dtype"), CASES)
def test_on_the_cpu(per_thread, dtype):
    a = _input(dtype, "cpu")
    torch.testing.assert_close(doubled(per_thread, dtype)(a), a + a)


@needs_nvcc
@pytest.mark.parametrize(("per_thread", "dtype"), CASES)
def test_no_vector_is_wider_than_16_bytes(per_thread, dtype):
    a = _input(dtype, "cpu")
    source = doubled(per_thread, dtype).compile(a, target="cuda:sm_90a").trace.code["cuda"]
    body = source[source.index('extern "C" __global__'):]
    loads = re.findall(r"\*\((\w+)\*\)\(A_ptr \+", body)  # vector loads of A, by their type
    assert loads, body
    widths = {"float4": 16, "uint4": 16, "int4": 16, "double2": 16, "uint2": 8, "int2": 8,
              "float2": 8, "uint": 4, "int": 4, "float": 4, "double": 8, "char4": 4}
    assert all(widths.get(t, 99) <= 16 for t in loads), loads
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    assert len(loads) == per_thread * itemsize // 16, loads  # 16 bytes each, none lost


@pytest.mark.gpu
@pytest.mark.parametrize(("per_thread", "dtype"), CASES)
def test_on_the_gpu(per_thread, dtype):
    a = _input(dtype, "cuda")
    torch.testing.assert_close(doubled(per_thread, dtype)(a), a + a)


def gathered(per_thread: int):
    """Each thread writes a run of `per_thread` bfloat16 elements, each read from a
    permuted place and offset by its own index: no vector access (the difftest's `tperm`
    steps with `vec`, seed 303 of --family threads, found nvcc rejecting it)."""
    @tilelab.jit
    def kernel(A):
        A: T.Tensor((N,), T.bfloat16)
        B = T.empty((N,), T.bfloat16)
        with T.Kernel(1, threads=N // per_thread):
            tx = T.get_thread_binding(0)
            for i in T.vectorized(per_thread):
                e = tx * per_thread + i
                B[e] = A[(e * 5 + 3) % N] + T.cast(e % 3, T.bfloat16)
        return B

    return kernel


def _gathered_reference(a):
    e = torch.arange(N, device=a.device)
    return a[(e * 5 + 3) % N] + (e % 3).to(torch.bfloat16)


@pytest.mark.parametrize("per_thread", [4, 8, 16])
def test_a_gather_on_the_cpu(per_thread):
    a = _input("bfloat16", "cpu")[0]
    torch.testing.assert_close(gathered(per_thread)(a), _gathered_reference(a))


@needs_nvcc
@pytest.mark.parametrize("per_thread", [4, 8, 16])
def test_a_gather_compiles_for_cuda(per_thread):
    a = _input("bfloat16", "cpu")[0]
    source = gathered(per_thread).compile(a, target="cuda:sm_90a").trace.code["cuda"]
    assert "longlong4" not in source


@pytest.mark.gpu
@pytest.mark.parametrize("per_thread", [4, 8, 16])
def test_a_gather_on_the_gpu(per_thread):
    a = _input("bfloat16", "cuda")[0]
    torch.testing.assert_close(gathered(per_thread)(a), _gathered_reference(a))
