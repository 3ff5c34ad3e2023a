"""A name bound in a kernel holds the value of that moment (TileLang's meaning of `x = A[i]`).

tilelab's front end binds a Python name to the expression it was given and re-reads it
where the name is used; once the buffer the expression reads has been stored into, a
re-read would see the new value. Such a name now keeps its value in a private scalar,
set where it was bound (frontend.Interpreter.keep_value). TileLang's bitonic sort swaps
through a name and sorted nothing before (its DSA top-k example: 126 of 128 rows wrong).

Also here: an `if` whose condition reads a shared tile inside a T.Parallel loop, which
stopped TVM's barrier pass with an internal check (passes/shared_conditions.py).
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def pair_sort(A):
    """Sort neighbouring pairs, swapping through a name as TileLang's bitonic sort does."""
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        tile = T.alloc_shared((64,), T.float32)
        T.copy(A[bx * 64], tile)
        for i in T.Parallel(64):
            j = i ^ 1
            if i < j and tile[i] > tile[j]:
                val = tile[i]
                tile[i] = tile[j]
                tile[j] = val
        T.copy(tile, B[bx * 64])
    return B


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_swap_through_a_name_swaps(device):
    a = torch.randn(256, device=device)
    torch.testing.assert_close(pair_sort(a), a.view(-1, 2).sort(dim=1).values.reshape(-1))


@needs_nvcc
def test_the_swap_compiles_for_cuda_without_a_barrier_in_its_branch():
    """Each pair is one iteration's alone, so the loop needs no barrier inside; TVM's
    barrier pass, which saw its stores race with other threads' reads, wanted one inside
    the `if` that some threads skip (refused then). It sees a T.Parallel loop as one
    statement now (passes/hide_from_thread_sync.py)."""
    source = pair_sort.compile(torch.empty(256, device="meta"),
                               target="cuda:sm_90a").get_kernel_source()
    assert "__global__" in source


@tilelab.jit
def keep_then_clear(A):
    """Names bound to loads, used after their buffers were stored into: per element, and
    once per block."""
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        tile = T.alloc_shared((64,), T.float32)
        frag = T.alloc_fragment((64,), T.float32)
        T.copy(A[bx * 64], tile)
        T.copy(tile, frag)
        first = tile[0]  # the block's first element, before the fill
        T.fill(tile, 0.0)
        for i in T.Parallel(64):
            old = frag[i]
            frag[i] = 0.0
            B[bx * 64 + i] = old + tile[i] + first
            if frag[i] == 0.0:
                C[bx * 64 + i] = old * 2.0
    return B, C


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_names_keep_the_values_they_were_bound_to(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    a = torch.randn(320, device=device)
    b, c = keep_then_clear(a)
    firsts = a.view(-1, 64)[:, :1].expand(-1, 64).reshape(-1)
    torch.testing.assert_close(b, a + firsts)
    torch.testing.assert_close(c, a * 2)


def test_a_name_rebound_before_the_store_reads_nothing_stale():
    """The value is kept only where it is needed: a kernel whose names are used before
    any store into what they read has no private scalar for them."""
    kernel = keep_then_clear.compile(torch.empty(64), target="cpu")
    source = kernel.trace.passes[0].ir
    assert "old" in source and "first" in source  # kept: both are read after the stores
    plain = tilelab.compile(_copy_through_a_name(), target="cpu")
    assert "local.var" not in plain.trace.passes[0].ir


def _copy_through_a_name():
    @T.prim_func
    def through(X: T.Tensor((64,), T.float32), Y: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            tile = T.alloc_shared((64,), T.float32)
            T.copy(X[0:64], tile)
            for i in T.Parallel(64):
                value = tile[i]
                Y[i] = value * 2.0
    return through


@tilelab.jit
def positives(A):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        tile = T.alloc_shared((64,), T.float32)
        T.copy(A[bx * 64], tile)
        for i in T.Parallel(64):
            if tile[i] > 0.0:
                B[bx * 64 + i] = 1.0
            else:
                B[bx * 64 + i] = tile[i]
    return B


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_branch_on_a_shared_element(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    a = torch.randn(320, device=device)
    torch.testing.assert_close(positives(a), torch.where(a > 0, 1.0, a))


@needs_nvcc
def test_a_branch_on_a_shared_element_compiles_for_cuda():
    source = positives.compile(torch.empty(320, device="meta"),
                               target="cuda:sm_90a").get_kernel_source()
    assert "bool cond" in source
