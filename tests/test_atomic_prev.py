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


@tilelab.jit(out_idx=[-1])
def histogram_by_var(n, bins=16):
    """Each thread files its values into a shared histogram at the bin a T.alloc_var
    holds (the index of the atomic is a register of the thread's own)."""
    @T.prim_func
    def kernel(x: T.Tensor((n,), T.int32), out: T.Tensor((bins,), T.int32)):
        with T.Kernel(1, threads=THREADS):
            tx = T.get_thread_binding()
            hist = T.alloc_shared((bins,), T.int32)
            b = T.alloc_var(T.int32)
            T.fill(hist, 0)
            for s in T.serial(T.ceildiv(n, THREADS)):
                if s * THREADS + tx < n:
                    b = x[s * THREADS + tx] % bins
                    T.atomic_add(hist[b], 1)
            T.copy(hist, out)
    return kernel


def check_histogram(target, device, n=1000):
    x = torch.randint(0, 1000, (n,), dtype=torch.int32, device=device)
    out = histogram_by_var.compile(n, target=target)(x)
    torch.testing.assert_close(out.cpu(), torch.bincount(x.cpu() % 16, minlength=16).int())


def test_cpu_atomic_at_a_register_index():
    check_histogram("cpu", "cpu")


@needs_nvcc
def test_cuda_atomic_at_a_register_index_reads_the_register():
    """The atomic's address reads the thread's register (it once named the T.alloc_var
    itself, which no longer existed there: 'used before its definition')."""
    source = histogram_by_var.compile(1000, target="cuda:sm_90a").get_kernel_source()
    assert "atomicAdd((&(hist_ptr[b_ptr[0]]))" in source


@pytest.mark.gpu
def test_gpu_atomic_at_a_register_index():
    check_histogram("cuda", "cuda")
