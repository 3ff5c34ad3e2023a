"""`T.atomic_add(dst[i], v, return_prev=True)` in code written for one thread: the value the
element held before this thread's add. Each thread that reaches it adds, and the old
values hand out distinct slots - the way a top-k selector compacts the indices it keeps."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

THREADS = 128


@tilelab.jit(out_idx=[-2, -1])
def compact_positive(n):
    """Each block writes the indices of its row's positive values, in some order, to the
    front of `kept` and their number to `count` (a shared counter bumped by every thread
    that finds one)."""
    @T.prim_func
    def kernel(x: T.Tensor((4, n), T.float32), kept: T.Tensor((4, n), T.int32),
               count: T.Tensor((4,), T.int32)):
        with T.Kernel(4, threads=THREADS) as b:
            tx = T.get_thread_binding()
            filled = T.alloc_shared((1,), T.int32)
            pos = T.alloc_var(T.int32)
            T.fill(filled, 0)
            for s in T.serial(T.ceildiv(n, THREADS)):
                i = s * THREADS + tx
                if i < n:
                    kept[b, i] = -1
            T.sync_threads()
            for s in T.serial(T.ceildiv(n, THREADS)):
                i = s * THREADS + tx
                if i < n:
                    if x[b, i] > 0:
                        pos = T.atomic_add(filled[0], 1, return_prev=True)
                        kept[b, pos] = i
            T.sync_threads()
            if tx == 0:
                count[b] = filled[0]
    return kernel


def check_compaction(target, device, n=1000):
    x = torch.randn(4, n, device=device)
    kept, count = compact_positive.compile(n, target=target)(x)
    kept, count, x = kept.cpu(), count.cpu(), x.cpu()
    for b in range(4):
        expected = torch.nonzero(x[b] > 0).flatten().to(torch.int32)
        assert int(count[b]) == len(expected)
        assert torch.equal(kept[b, :len(expected)].sort().values, expected)
        assert bool((kept[b, len(expected):] == -1).all())


def test_cpu_old_values_hand_out_distinct_slots():
    check_compaction("cpu", "cpu")


@needs_nvcc
def test_cuda_old_value_comes_from_atomic_add():
    source = compact_positive.compile(1000, target="cuda:sm_90a").get_kernel_source()
    body = source[source.rindex("__global__"):]
    assert "= atomicAdd(" in body


@pytest.mark.gpu
def test_gpu_old_values_hand_out_distinct_slots():
    check_compaction("cuda", "cuda")


def test_return_prev_needs_code_for_one_thread_and_one_element():
    @tilelab.jit
    def tile_program():
        @T.prim_func
        def kernel(a: T.Tensor((8,), T.int32)):
            with T.Kernel(1, threads=32):
                T.atomic_add(a[0], 1, return_prev=True)
        return kernel

    with pytest.raises(TileLabError, match="belongs in code written for one thread"):
        tile_program.compile(target="cpu")

    @tilelab.jit
    def tile_add():
        @T.prim_func
        def kernel(a: T.Tensor((8,), T.int32), b: T.Tensor((8,), T.int32)):
            with T.Kernel(1, threads=32):
                T.get_thread_binding()
                T.atomic_add(a, b, return_prev=True)
        return kernel

    with pytest.raises(TileLabError, match="returns the old value of one element"):
        tile_add.compile(target="cpu")
