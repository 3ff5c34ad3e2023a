"""The program's own barriers: `tl.disable_thread_storage_sync` (TileLang's key).

A program that writes code for one thread (`tx = T.get_thread_binding()`) or swaps
elements of a shared tile in a T.Parallel loop may know better than the compiler where
its threads must wait: two halves of one tile, one read while the other is written, need
no barrier between. With the key, tilelab puts none inside such code, nor between two
pieces of thread code (passes/insert_barriers.py, passes/hide_from_thread_sync.py): the
barriers there are the program's `T.sync_threads()`. Tile ops keep theirs, also against
the program's code. Without the key, TVM's barrier pass wants one inside a branch on each
thread's own value, and the compile stops with a clear message.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabCompileError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")

OWN = {PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC: True}
THREADS = 128
ROUNDS = 5
REFUSED = r"needs a barrier \(__syncthreads\) inside an `if`"


@tilelab.jit(out_idx=[-1])
def exchange(blocks, n=THREADS, rounds=ROUNDS):
    """Rounds of a double-buffered exchange in shared memory, written for one thread:
    each round reads half `r` of `buf` (its own element and a neighbour's) and writes half
    `r ^ 1`, how depending on its own value; one barrier a round, at its top, is all it
    needs. out[b, t] = thread t's element after the rounds plus what it gathered."""
    @T.prim_func
    def kernel(x: T.Tensor((blocks, n), T.float32), out: T.Tensor((blocks, n), T.float32)):
        with T.Kernel(blocks, threads=n) as b:
            tx = T.get_thread_binding()
            buf = T.alloc_shared((2, n), T.float32)
            v = T.alloc_var(T.float32)
            gathered = T.alloc_var(T.float32)
            gathered = 0.0
            buf[0, tx] = x[b, tx]
            for rnd in T.serial(rounds):
                r = rnd % 2
                T.sync_threads()
                v = buf[r, tx]
                if v > 0:
                    buf[r ^ 1, tx] = v * 0.5
                    gathered = gathered + buf[r, (tx + 1) % n]
                else:
                    buf[r ^ 1, tx] = v + buf[r, (tx + 3) % n]
            T.sync_threads()
            out[b, tx] = buf[rounds % 2, tx] + gathered
    return kernel


def expected_exchange(x, rounds=ROUNDS):
    cur, gathered = x.clone(), torch.zeros_like(x)
    for _ in range(rounds):
        positive = cur > 0
        gathered += torch.where(positive, cur.roll(-1, dims=1), 0.0)
        cur = torch.where(positive, cur * 0.5, cur + cur.roll(-3, dims=1))
    return cur + gathered


@tilelab.jit(out_idx=[-1])
def transposition_sort(blocks, n=2 * THREADS):
    """Each block's row sorted by odd-even transposition: `n` phases of compare-exchanges
    of neighbouring pairs (even pairs, then odd ones) in a T.Parallel loop, swapped
    through a name, a barrier of the program's after each phase."""
    @T.prim_func
    def kernel(x: T.Tensor((blocks, n), T.float32), out: T.Tensor((blocks, n), T.float32)):
        with T.Kernel(blocks, threads=n // 2) as b:
            tile = T.alloc_shared((n,), T.float32)
            T.copy(x[b, 0:n], tile)
            for phase in T.serial(n):
                for i in T.Parallel(n // 2):
                    lo = 2 * i + phase % 2
                    if lo + 1 < n and tile[lo] > tile[lo + 1]:
                        val = tile[lo]
                        tile[lo] = tile[lo + 1]
                        tile[lo + 1] = val
                T.sync_threads()
            T.copy(tile, out[b, 0:n])
    return kernel


@tilelab.jit(out_idx=[-1])
def shifted(blocks, n=THREADS):
    """out[b, i] = x[b, (i + 2) % n], passed along by other threads each time: a T.copy
    fills a shared tile, a T.Parallel loop reads it shifted into another, thread code reads
    that one shifted into a third, and a T.copy writes it out."""
    @T.prim_func
    def kernel(x: T.Tensor((blocks, n), T.float32), out: T.Tensor((blocks, n), T.float32)):
        with T.Kernel(blocks, threads=n) as b:
            tx = T.get_thread_binding()
            s = T.alloc_shared((n,), T.float32)
            t = T.alloc_shared((n,), T.float32)
            u = T.alloc_shared((n,), T.float32)
            T.copy(x[b, 0:n], s)
            for i in T.Parallel(n):
                t[i] = s[(i + 1) % n]
            u[tx] = t[(tx + 1) % n]
            T.copy(u, out[b, 0:n])
    return kernel


def body_of(source: str) -> str:
    return source[source.rindex("__global__"):]


# ---------------------------------------------------------------- on the CPU


def test_cpu_exchange_matches_torch_with_and_without_the_key():
    x = torch.randn(3, THREADS)
    for configs in (OWN, None):  # the CPU runs each piece for all threads in turn
        torch.testing.assert_close(exchange.compile(3, target="cpu", pass_configs=configs)(x),
                                   expected_exchange(x))


def test_cpu_sort_matches_torch():
    x = torch.randn(2, 2 * THREADS)
    got = transposition_sort.compile(2, target="cpu", pass_configs=OWN)(x)
    torch.testing.assert_close(got, x.sort(dim=1).values)


# ---------------------------------------------------------------- CUDA


def test_without_the_key_cuda_wants_a_barrier_inside_a_branch():
    with pytest.raises(TileLabCompileError, match=REFUSED):
        exchange.compile(2, target="cuda:sm_90a")


def test_a_swap_inside_t_parallel_needs_no_key():
    """T.Parallel iterations are independent: TVM's barrier pass sees such a loop as one
    statement (no barrier between its elements), so the sort's swap under a branch compiles
    without the key."""
    source = transposition_sort.compile(2, target="cuda:sm_90a").get_kernel_source()
    assert "__global__" in source


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_with_the_key_the_barriers_of_thread_code_are_the_programs(arch):
    """Two `__syncthreads()`, where the program wrote them: none inside the branch, and
    none between the read of half `r` and the writes of half `r ^ 1` (InsertBarriers
    put one there before, where it sees two statements race on `buf`)."""
    source = body_of(exchange.compile(2, target=f"cuda:{arch}", pass_configs=OWN)
                     .get_kernel_source())
    assert source.count("__syncthreads()") == 2
    loop = source[source.index("for (int rnd"):]
    assert loop.index("__syncthreads()") < loop.index("if (")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_with_the_key_a_t_parallel_swap_compiles(arch):
    source = body_of(transposition_sort.compile(2, target=f"cuda:{arch}", pass_configs=OWN)
                     .get_kernel_source())
    loop = source[source.index("for (int phase"):]
    assert loop.count("__syncthreads()") >= 1


@needs_nvcc
def test_tile_ops_keep_their_barriers_with_the_key():
    """A barrier after each writer of `s`, `t` and `u` - the T.copy, the T.Parallel loop,
    the thread code - before its readers, as without the key: the barriers a program
    places itself are only those between and inside its own per-thread code."""
    source = body_of(shifted.compile(2, target="cuda:sm_90a", pass_configs=OWN)
                     .get_kernel_source())
    barriers = [i for i in range(len(source)) if source.startswith("__syncthreads()", i)]
    assert len(barriers) == 3
    assert source.index("x_ptr +") < barriers[0] and source.rindex("out_ptr +") > barriers[2]


def test_cpu_tile_ops_and_thread_code_pass_the_row_along():
    x = torch.randn(2, THREADS)
    got = shifted.compile(2, target="cpu", pass_configs=OWN)(x)
    torch.testing.assert_close(got, x.roll(-2, dims=1))


@tilelab.jit
def copy_then_thread_code(A, B):
    """A tile op reads `X` for the last time, then thread code writes and reads `Y`, with
    no barrier between or after: the merge may not put `Y` over `X` (ThreadSync, which
    does not see the program's code under the key, would not order the two)."""
    A: T.Tensor((1024,), T.float32)
    B: T.Tensor((128,), T.float32)
    out1 = T.empty((1024,), T.float32)
    out2 = T.empty((128,), T.float32)
    with T.Kernel(1, threads=128):
        tx = T.get_thread_binding()
        X = T.alloc_shared((1024,), T.float32)
        Y = T.alloc_shared((1024,), T.float32)
        T.copy(A, X)
        T.copy(X, out1)
        Y[tx * 8] = B[tx] * 2
        out2[tx] = Y[tx * 8] + 1
    return out1, out2


@needs_nvcc
def test_with_the_key_a_tile_the_programs_code_touches_keeps_its_bytes():
    a, b = torch.empty(1024, device="meta"), torch.empty(128, device="meta")
    own = copy_then_thread_code.compile(a, b, target="cuda:sm_90a", pass_configs=OWN)
    assert own.launch["dynamic_smem"] >= 2 * 1024 * 4  # X and Y apart
    source = body_of(own.get_kernel_source())
    assert source.count("__syncthreads()") == 1  # after the copy into X; none of the program's


@needs_nvcc
def test_a_kernel_of_tile_ops_alone_compiles_the_same_with_the_key():
    """A 128x256 GEMM tile in 4 cp.async stages: 192 KiB of slots, and its epilogue's tile
    in the place of dead slots. Tiles touched by no code of the program's own keep sharing
    bytes (keeping every tile alive to the end of its list asked for 256 KiB)."""
    from examples.gemm import gemm_kernel

    def compiled(configs):
        return gemm_kernel.compile(M=1024, N=1024, K=1024, block_n=256, block_k=64,
                                   num_stages=4, threads=256, target="cuda:sm_90a",
                                   pass_configs={"tl.disable_tma_lower": True, **configs})

    own, plain = compiled(OWN), compiled({})
    assert own.launch["dynamic_smem"] == plain.launch["dynamic_smem"] == 192 * 1024
    assert own.get_kernel_source() == plain.get_kernel_source()


@pytest.mark.gpu
def test_gpu_the_programs_barriers_suffice():
    x = torch.randn(7, THREADS, device="cuda")
    got = exchange.compile(7, target="cuda", pass_configs=OWN)(x)
    torch.testing.assert_close(got, expected_exchange(x))
    x = torch.randn(5, 2 * THREADS, device="cuda")
    got = transposition_sort.compile(5, target="cuda", pass_configs=OWN)(x)
    torch.testing.assert_close(got, x.sort(dim=1).values)
    x = torch.randn(3, THREADS, device="cuda")
    torch.testing.assert_close(shifted.compile(3, target="cuda", pass_configs=OWN)(x),
                               x.roll(-2, dims=1))
