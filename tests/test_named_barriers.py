"""TileLang's named barrier, `T.sync_threads(barrier_id, arrive_count)`, in code written for
one thread: a barrier of the threads an `if` on the thread index lets through, as
DeepSeek's top-k selector scans a histogram with the block's first 256 threads.

tilelab pushes such an `if` down to each statement under it (passes/thread_code.py), so
every thread of the block reaches the barrier; it becomes a barrier of the block, once
its count is the number of threads the `if`s let through."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

BINS, THREADS = 64, 128


@tilelab.jit(out_idx=[-1])
def suffix_counts(n):
    """out[b, i] = how many of row b's values (in [0, BINS)) are >= i: a histogram by
    atomics from every thread, then a Hillis-Steele suffix sum by the first BINS threads
    alone, named barriers between its steps (as topk_selector's `if tx < RADIX:`)."""
    @T.prim_func
    def kernel(x: T.Tensor((4, n), T.int32), out: T.Tensor((4, BINS), T.int32)):
        with T.Kernel(4, threads=THREADS) as b:
            tx = T.get_thread_binding()
            hist = T.alloc_shared((BINS + 1,), T.int32)
            value = T.alloc_var(T.int32)
            T.fill(hist, 0)
            T.sync_threads()
            for s in T.serial(T.ceildiv(n, THREADS)):
                if s * THREADS + tx < n:
                    T.atomic_add(hist[x[b, s * THREADS + tx]], 1)
            T.sync_threads()
            if tx < BINS:
                for step in T.serial(6):  # 2**6 == BINS
                    offset = 1 << step
                    T.sync_threads(3, BINS)
                    if tx < BINS - offset:
                        value = hist[tx] + hist[tx + offset]
                    T.sync_threads(3, BINS)
                    if tx < BINS - offset:
                        hist[tx] = value
            T.sync_threads()
            if tx < BINS:
                out[b, tx] = hist[tx]
    return kernel


def expected_suffix_counts(x):
    counts = torch.stack([torch.bincount(row, minlength=BINS) for row in x])
    return counts.flip(1).cumsum(1).flip(1).to(torch.int32)


def check_suffix_counts(target, device, n=1000):
    x = torch.randint(0, BINS, (4, n), dtype=torch.int32, device=device)
    kernel = suffix_counts.compile(n, target=target)
    torch.testing.assert_close(kernel(x).cpu(), expected_suffix_counts(x.cpu()))


def test_cpu_named_barriers_scan_matches_torch():
    check_suffix_counts("cpu", "cpu")


@needs_nvcc
def test_cuda_named_barrier_is_a_barrier_every_thread_reaches():
    source = suffix_counts.compile(1000, target="cuda:sm_90a").get_kernel_source()
    body = source[source.rindex("__global__"):]
    loop = body[body.index("for (int step"):]
    loop = loop[:loop.index("\n  }") if "\n  }" in loop else len(loop)]
    assert loop.count("__syncthreads()") >= 2
    # the `if tx < BINS` is pushed below the barriers: none stands inside a branch
    for line in loop.splitlines():
        if "__syncthreads" in line:
            assert line.startswith("    __syncthreads") or line.strip() == "__syncthreads();"


@pytest.mark.gpu
def test_gpu_named_barriers_scan_matches_torch():
    check_suffix_counts("cuda", "cuda")


def _with_barrier(count, guard_hi):
    @tilelab.jit(out_idx=[-1])
    def bad():
        @T.prim_func
        def kernel(a: T.Tensor((THREADS,), T.float32), out: T.Tensor((THREADS,), T.float32)):
            with T.Kernel(1, threads=THREADS):
                tx = T.get_thread_binding()
                s = T.alloc_shared((THREADS,), T.float32)
                s[tx] = a[tx]
                if tx < guard_hi:
                    T.sync_threads(1, count)
                out[tx] = s[(tx + 1) % THREADS]
        return kernel
    return bad


def test_named_barrier_count_must_be_the_threads_reaching_it():
    with pytest.raises(TileLabError, match=r"waits for 32 threads, but 64 reach it") as info:
        _with_barrier(32, 64).compile(target="cpu")
    assert "test_named_barriers.py" in str(info.value)
    assert "T.sync_threads(1, 64)" in str(info.value)


def test_named_barrier_of_the_whole_block_is_a_block_barrier():
    a = torch.randn(THREADS)
    out = _with_barrier(THREADS, THREADS).compile(target="cpu")(a)
    torch.testing.assert_close(out, a.roll(-1))


def test_named_barrier_needs_code_for_one_thread():
    @tilelab.jit(out_idx=[-1])
    def tile_program():
        @T.prim_func
        def kernel(a: T.Tensor((THREADS,), T.float32), out: T.Tensor((THREADS,), T.float32)):
            with T.Kernel(1, threads=THREADS):
                s = T.alloc_shared((THREADS,), T.float32)
                T.copy(a, s)
                T.sync_threads(1, THREADS)
                T.copy(s, out)
        return kernel

    with pytest.raises(TileLabError, match="belongs in code written for one thread"):
        tile_program.compile(target="cpu")
