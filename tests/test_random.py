"""Random numbers in the kernel (`T.rng_init`, `T.rng_rand`, `T.rng_rand_float`).

Every number is compared with a Philox4x32-10 written here in plain Python from the
algorithm's definition (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"),
with curand's mapping of (seed, subsequence, offset) to keys and counters; TileLang's
rand example compares the same numbers with Triton's `tl.randint4x` (its row in
docs/TILELANG_COMPAT.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")

MASK = (1 << 32) - 1


def philox(seed: int, seq: int, position: int) -> int:
    """Number `position` of stream (seed, seq)."""
    counter = [(position >> 2) & MASK, position >> 34, seq & MASK, seq >> 32]
    key = [seed & MASK, seed >> 32]
    for _ in range(10):
        product0, product1 = 0xD2511F53 * counter[0], 0xCD9E8D57 * counter[2]
        counter = [(product1 >> 32) ^ counter[1] ^ key[0], product1 & MASK,
                   (product0 >> 32) ^ counter[3] ^ key[1], product0 & MASK]
        key = [(key[0] + 0x9E3779B9) & MASK, (key[1] + 0xBB67AE85) & MASK]
    return counter[position & 3]


def test_the_reference_is_philox():
    """The generator's published known-answer test (Random123, kat_vectors: philox4x32_10
    of counter 0 and key 0)."""
    words = [philox(0, 0, lane) for lane in range(4)]
    assert words == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


@tilelab.jit
def per_thread(blocks=3, threads=32, draws=5, seed=7, offset=5):
    """Each thread its own subsequence (its index in the grid), `draws` numbers from
    `offset` on, in a loop of its own; every other one only where the thread's index is
    odd (a draw in a branch moves the stream only where it runs)."""
    n = blocks * threads
    A = T.empty((n, draws), "uint32")
    B = T.empty((n,), "uint32")
    with T.Kernel(blocks, threads=threads) as bx:
        tx = T.get_thread_binding()
        T.rng_init(seed, bx * threads + tx, offset)
        for j in T.serial(draws):
            A[bx * threads + tx, j] = T.rng_rand()
        if tx % 2 == 1:
            B[bx * threads + tx] = T.rng_rand() ^ T.rng_rand()  # two numbers
        else:
            B[bx * threads + tx] = 0
    return A, B


def _per_thread_reference(blocks=3, threads=32, draws=5, seed=7, offset=5):
    n = blocks * threads
    a = [[philox(seed, t, offset + j) for j in range(draws)] for t in range(n)]
    b = [philox(seed, t, offset + draws) ^ philox(seed, t, offset + draws + 1) if t % 2 else 0
         for t in range(n)]
    return np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


def _as_uint(t: torch.Tensor) -> np.ndarray:
    return t.cpu().numpy().astype(np.uint64)


@tilelab.jit
def one_thread(m=300, seed=2**40 + 3):
    """A block of one thread draws in a T.Parallel loop: its elements, in order."""
    A = T.empty((m,), "uint32")
    U = T.empty((m,), T.float32)
    with T.Kernel(T.ceildiv(m, 128), threads=1) as bx:
        T.rng_init(seed, 9, bx * 256)
        for i in T.Parallel(128):
            if bx * 128 + i < m:
                A[bx * 128 + i] = T.rng_rand()
                U[bx * 128 + i] = T.rng_rand_float()
    return A, U


def _one_thread_reference(m=300, seed=2**40 + 3):
    a, u = [], []
    for e in range(m):
        block, i = divmod(e, 128)
        a.append(philox(seed, 9, block * 256 + 2 * i))
        x = philox(seed, 9, block * 256 + 2 * i + 1)
        # x rounded to float32, then x * 2**-32 + 2**-33 exact in float64 and rounded once
        u.append(np.float32(float(np.float32(x)) * 2.0 ** -32 + 2.0 ** -33))
    return np.array(a, dtype=np.uint64), np.array(u, dtype=np.float32)


@tilelab.jit
def default_streams(blocks=2, threads=(8, 4)):
    """`T.rng_init(seed)`: each thread of the grid its own subsequence, its index among all
    threads (x fastest, then y, then the blocks)."""
    per_block = threads[0] * threads[1]
    A = T.empty((blocks * per_block,), "uint32")
    with T.Kernel(blocks, threads=threads) as bx:
        tx, ty = T.get_thread_binding(0), T.get_thread_binding(1)
        T.rng_init(11)
        A[bx * per_block + ty * threads[0] + tx] = T.rng_rand()
    return A


def test_each_thread_draws_its_own_stream_on_the_cpu():
    a, b = per_thread()
    ref_a, ref_b = _per_thread_reference()
    assert np.array_equal(_as_uint(a), ref_a) and np.array_equal(_as_uint(b), ref_b)


def test_a_block_of_one_thread_draws_in_a_parallel_loop():
    a, u = one_thread()
    ref_a, ref_u = _one_thread_reference()
    assert np.array_equal(_as_uint(a), ref_a)
    assert np.array_equal(u.numpy(), ref_u) and float(u.min()) > 0 and float(u.max()) <= 1


def test_the_default_subsequence_is_the_threads_index_in_the_grid():
    assert np.array_equal(_as_uint(default_streams()),
                          np.array([philox(11, t, 0) for t in range(64)], dtype=np.uint64))


def _program(case: str):
    @T.prim_func
    def kernel(A: T.Tensor((64,), "uint32"), U: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=32):
            if case == "no stream":
                A[0] = T.rng_rand()
            elif case == "dealt to threads":
                T.rng_init(1)
                for i in T.Parallel(64):
                    A[i] = T.rng_rand()
            elif case == "xorwow":
                T.rng_init(1, generator="curandStateXORWOW_t")
            else:
                T.rng_init(1)
                U[0] = T.rng_rand_float(32, "normal")

    return kernel


@pytest.mark.parametrize(("case", "message"), [
    ("no stream", "before T.rng_init"),
    ("dealt to threads", "inside a T.Parallel loop of a block of 32"),
    ("xorwow", "Philox4x32-10"), ("normal", "float32 uniform")])
def test_what_has_no_meaning_is_an_error_at_its_line(case, message):
    with pytest.raises(TileLabError, match=message) as info:
        _program(case)
    assert info.value.location is not None and info.value.location.line > 0


@needs_nvcc
def test_the_kernels_compile_for_cuda():
    for kernel in (per_thread, one_thread, default_streams):
        source = kernel.compile(target="cuda:sm_90a").get_kernel_source()
        assert "philox9_x" in source  # ten rounds, each word bound once


@pytest.mark.gpu
def test_the_same_numbers_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b = per_thread(target="cuda")
    ref_a, ref_b = _per_thread_reference()
    assert np.array_equal(_as_uint(a), ref_a) and np.array_equal(_as_uint(b), ref_b)
    a, u = one_thread(target="cuda")
    ref_a, ref_u = _one_thread_reference()
    assert np.array_equal(_as_uint(a), ref_a) and np.array_equal(u.cpu().numpy(), ref_u)
    assert np.array_equal(_as_uint(default_streams(target="cuda")),
                          np.array([philox(11, t, 0) for t in range(64)], dtype=np.uint64))
