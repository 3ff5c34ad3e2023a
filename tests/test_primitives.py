"""One small kernel per tile primitive, each checked against numpy or torch on the CPU.

Every expected value is computed by numpy/torch from the same random inputs
that the kernel gets; nothing is hard-coded.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.errors import TileLabError

RNG = np.random.default_rng


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------- T.copy


def copy_program(M, N, block_m, block_n):
    @T.prim_func
    def copy_tiles(A: T.Tensor((M, N), T.float32), B: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=64) as (bx, by):
            a_shared = T.alloc_shared((block_m, block_n), T.float32)
            a_frag = T.alloc_fragment((block_m, block_n), T.float32)
            # global -> shared with a region slice, shared -> fragment whole
            T.copy(A[by * block_m:(by + 1) * block_m, bx * block_n:bx * block_n + block_n],
                   a_shared)
            T.copy(a_shared, a_frag)
            for i, j in T.Parallel(block_m, block_n):
                a_frag[i, j] = a_frag[i, j] * 2.0 + 1.0
            # fragment -> global with a start point; the extents come from the fragment
            T.copy(a_frag, B[by * block_m, bx * block_n])

    return copy_tiles


@pytest.mark.parametrize("M, N", [(32, 16), (40, 30), (5, 3)])
def test_copy_global_shared_fragment_global(M, N):
    a = randn(RNG(M * N), M, N)
    kernel = tilelab.compile(copy_program(M, N, 16, 8), out_idx=[1])
    np.testing.assert_allclose(kernel(a), a * 2 + 1, rtol=1e-6)


def test_copy_partial_tiles_read_zeros_past_the_edge():
    """A tile that sticks out of A is zero-filled; the padded output shows every element."""
    M, N, bm, bn = 10, 13, 4, 8
    gm, gn = -(-M // bm), -(-N // bn)

    @T.prim_func
    def pad(A: T.Tensor((M, N), T.float32), P: T.Tensor((gm * bm, gn * bn), T.float32)):
        with T.Kernel(gn, gm) as (bx, by):
            tile = T.alloc_shared((bm, bn), T.float32)
            T.fill(tile, 7.0)  # garbage the zero fill must overwrite
            T.copy(A[by * bm, bx * bn], tile)
            T.copy(tile, P[by * bm, bx * bn])

    a = randn(RNG(1), M, N)
    expected = np.zeros((gm * bm, gn * bn), np.float32)
    expected[:M, :N] = a
    np.testing.assert_array_equal(tilelab.compile(pad, out_idx=[1])(a), expected)


def test_copy_partial_tiles_never_write_past_the_edge():
    """Writes of an edge tile stop at the tensor's border (the guard bytes stay untouched)."""
    M, N, bm, bn = 7, 9, 4, 4

    @T.prim_func
    def fill_all(C: T.Tensor((M, N), T.float32), Ones: T.Tensor((bm, bn), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            tile = T.alloc_fragment((bm, bn), T.float32)
            T.copy(Ones, tile)
            for i, j in T.Parallel(bm, bn):
                tile[i, j] = tile[i, j] + T.Cast(T.float32, by * bm + i) * 100.0 + j + bx * bn
            T.copy(tile, C[by * bm, bx * bn])

    kernel = tilelab.compile(fill_all)
    guard = np.full(M * N + 64, -5.0, np.float32)  # C is a view with guard elements after it
    c = guard[: M * N].reshape(M, N)
    ones = np.ones((bm, bn), np.float32)
    kernel(c, ones)
    rows, cols = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    np.testing.assert_array_equal(c, 1 + rows * 100.0 + cols)
    np.testing.assert_array_equal(guard[M * N:], -5.0)


def test_copy_one_row_tile_into_a_single_row_tensor():
    """A 16-row tile copied into a 1-row tensor writes row 0 only (unit dims are guarded too)."""
    N, bm, bn = 20, 16, 8
    guard = np.full(N + 16 * N, -5.0, np.float32)
    b = guard[:N].reshape(1, N)

    @T.prim_func
    def first_row(A: T.Tensor((1, N), T.float32), B: T.Tensor((1, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn)) as bx:
            tile = T.alloc_fragment((bm, bn), T.float32)
            T.copy(A[0, bx * bn], tile)
            for i, j in T.Parallel(bm, bn):
                tile[i, j] = tile[i, j] + 1.0
            T.copy(tile, B[0, bx * bn])

    a = randn(RNG(3), 1, N)
    tilelab.compile(first_row)(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)
    np.testing.assert_array_equal(guard[N:], -5.0)


def test_copy_region_slices_along_k():
    """`T.copy(A[0:16, k:k + 8], ...)` in a serial loop gathers column blocks."""
    M, K, bk = 16, 40, 8

    @T.prim_func
    def column_block_sums(A: T.Tensor((M, K), T.float32), S: T.Tensor((M, bk), T.float32)):
        with T.Kernel(1) as _:
            tile = T.alloc_shared((M, bk), T.float32)
            acc = T.alloc_fragment((M, bk), T.float32)
            T.clear(acc)
            for ko in T.serial(K // bk):
                k = ko * bk
                T.copy(A[0:16, k:k + 8], tile)
                for i, j in T.Parallel(M, bk):
                    acc[i, j] += tile[i, j]
            T.copy(acc, S)

    a = randn(RNG(4), M, K)
    expected = a.reshape(M, K // bk, bk).sum(axis=1)
    np.testing.assert_allclose(tilelab.compile(column_block_sums, out_idx=[1])(a), expected,
                               rtol=1e-5, atol=1e-5)


def test_copy_sub_regions_between_local_buffers_and_unit_dims():
    """A row `A[r, 0:N]` into a 1-d tile, and a fragment sub-block into another fragment."""
    M, N = 6, 8

    @T.prim_func
    def pieces(A: T.Tensor((M, N), T.float32), Row: T.Tensor((N,), T.float32),
               Block: T.Tensor((2, 4), T.float32), Rows: T.Tensor((2, N), T.float32)):
        with T.Kernel(1) as _:
            row = T.alloc_shared((N,), T.float32)
            whole = T.alloc_fragment((M, N), T.float32)
            corner = T.alloc_fragment((2, 4), T.float32)
            T.copy(A[3, 0:N], row)
            T.copy(row, Row)
            T.copy(A, whole)
            T.copy(whole[1:3, 2:6], corner)
            T.copy(corner, Block)
            T.copy(A[M - 2:M, :], Rows)  # `:` takes the whole dimension

    a = randn(RNG(5), M, N)
    row, block, rows = tilelab.compile(pieces, out_idx=[1, 2, 3])(a)
    np.testing.assert_array_equal(row, a[3])
    np.testing.assert_array_equal(block, a[1:3, 2:6])
    np.testing.assert_array_equal(rows, a[M - 2:])


# ---------------------------------------------------------------- T.fill, T.clear


def test_fill_and_clear():
    M, N = 8, 6

    @T.prim_func
    def fills(A: T.Tensor((M, N), T.float32), value: T.Tensor((1,), T.float32),
              F: T.Tensor((M, N), T.float32), C: T.Tensor((M, N), T.float32)):
        with T.Kernel(1) as _:
            f = T.alloc_fragment((M, N), T.float32)
            c = T.alloc_fragment((M, N), T.float32)
            T.copy(A, f)
            T.copy(A, c)
            T.fill(f[2:5, 1:4], value[0])  # a region only
            T.clear(c)
            T.copy(f, F)
            T.copy(c, C)

    a = randn(RNG(6), M, N)
    v = randn(RNG(7), 1)
    f, c = tilelab.compile(fills, out_idx=[2, 3])(a, v)
    expected = a.copy()
    expected[2:5, 1:4] = v[0]
    np.testing.assert_array_equal(f, expected)
    np.testing.assert_array_equal(c, np.zeros_like(a))


def test_fill_global_region_at_the_edge():
    """`T.fill` straight into a global region stops at the border."""
    M, N, bm = 10, 5, 4

    @T.prim_func
    def fill_rows(X: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            T.fill(X[bx * bm:bx * bm + bm, 0:N], T.Cast(T.float32, bx) + 0.5)

    guard = np.full(M * N + 32, -3.0, np.float32)
    x = guard[: M * N].reshape(M, N)
    tilelab.compile(fill_rows)(x)
    np.testing.assert_array_equal(x, np.repeat(np.arange(M) // bm + 0.5, N).reshape(M, N))
    np.testing.assert_array_equal(guard[M * N:], -3.0)


# ---------------------------------------------------------------- reductions

REDUCE_NUMPY = {
    "sum": lambda x, axis: x.sum(axis=axis),
    "max": lambda x, axis: x.max(axis=axis),
    "min": lambda x, axis: x.min(axis=axis),
    "abssum": lambda x, axis: np.abs(x).sum(axis=axis),
    "absmax": lambda x, axis: np.abs(x).max(axis=axis),
}
FOLD_NUMPY = {"sum": np.add, "max": np.maximum, "min": np.minimum, "abssum": np.add,
              "absmax": np.maximum}


def reduce_program(kind, M, N, dim, clear, dtype=T.float32):
    reduce = getattr(T, f"reduce_{kind}")
    out = N if dim == 0 else M

    @T.prim_func
    def reduce_kernel(A: T.Tensor((M, N), dtype), Init: T.Tensor((out,), dtype),
                      R: T.Tensor((out,), dtype)):
        with T.Kernel(1) as _:
            a = T.alloc_fragment((M, N), dtype)
            r = T.alloc_fragment((out,), dtype)
            T.copy(A, a)
            T.copy(Init, r)
            reduce(a, r, dim=dim, clear=clear)
            T.copy(r, R)

    return reduce_kernel


@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("clear", [True, False], ids=["clear", "accumulate"])
def test_reduce(kind, dim, clear):
    M, N = 12, 7
    rng = RNG(list(REDUCE_NUMPY).index(kind) * 4 + dim * 2 + clear)
    a = randn(rng, M, N)
    init = randn(rng, N if dim == 0 else M) * 3
    kernel = tilelab.compile(reduce_program(kind, M, N, dim, clear), out_idx=[2])
    expected = REDUCE_NUMPY[kind](a, dim)
    if not clear:
        expected = FOLD_NUMPY[kind](init, expected)
    np.testing.assert_allclose(kernel(a, init), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
def test_reduce_integers(kind):
    M, N = 5, 9
    rng = RNG(len(kind))
    a = rng.integers(-1000, 1000, (M, N), dtype=np.int32)
    init = np.zeros(M, np.int32)
    kernel = tilelab.compile(reduce_program(kind, M, N, 1, True, T.int32), out_idx=[2])
    np.testing.assert_array_equal(kernel(a, init), REDUCE_NUMPY[kind](a, 1))


def test_reduce_keeps_a_unit_dimension():
    """Reducing (M, N) over dim 1 into an (M, 1) tile, as FlashAttention-style code does."""
    M, N = 6, 10

    @T.prim_func
    def row_max(A: T.Tensor((M, N), T.float32), R: T.Tensor((M, 1), T.float32)):
        with T.Kernel(1) as _:
            a = T.alloc_fragment((M, N), T.float32)
            r = T.alloc_fragment((M, 1), T.float32)
            T.copy(A, a)
            T.reduce_max(a, r, dim=1)
            T.copy(r, R)

    a = randn(RNG(8), M, N)
    np.testing.assert_array_equal(tilelab.compile(row_max, out_idx=[1])(a),
                                  a.max(axis=1, keepdims=True))


# ---------------------------------------------------------------- T.gemm


@pytest.mark.parametrize("transpose_A", [False, True], ids=["A", "At"])
@pytest.mark.parametrize("transpose_B", [False, True], ids=["B", "Bt"])
def test_gemm_transposes(transpose_A, transpose_B):
    M, N, K = 24, 40, 20  # not multiples of the 16×16×8 tiles
    bm, bn, bk = 16, 16, 8
    a_shape = (K, M) if transpose_A else (M, K)
    b_shape = (N, K) if transpose_B else (K, N)
    a_tile = (bk, bm) if transpose_A else (bm, bk)
    b_tile = (bn, bk) if transpose_B else (bk, bn)

    @T.prim_func
    def mm(A: T.Tensor(a_shape, T.float32), B: T.Tensor(b_shape, T.float32),
           C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm)) as (bx, by):
            a_s = T.alloc_shared(a_tile, T.float32)
            b_s = T.alloc_shared(b_tile, T.float32)
            c_f = T.alloc_fragment((bm, bn), T.float32)
            T.clear(c_f)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if transpose_A:
                    T.copy(A[ko * bk, by * bm], a_s)
                else:
                    T.copy(A[by * bm, ko * bk], a_s)
                if transpose_B:
                    T.copy(B[bx * bn, ko * bk], b_s)
                else:
                    T.copy(B[ko * bk, bx * bn], b_s)
                T.gemm(a_s, b_s, c_f, transpose_A=transpose_A, transpose_B=transpose_B)
            T.copy(c_f, C[by * bm, bx * bn])

    rng = RNG(10 + 2 * transpose_A + transpose_B)
    a, b = randn(rng, *a_shape), randn(rng, *b_shape)
    expected = (a.T if transpose_A else a) @ (b.T if transpose_B else b)
    np.testing.assert_allclose(tilelab.compile(mm, out_idx=[2])(a, b), expected,
                               rtol=1e-4, atol=1e-4)


def test_gemm_clear_accum_and_fragment_operand():
    """`clear_accum=True` ignores what C held; A may be a fragment (as P in FlashAttention)."""
    M, N, K = 8, 12, 16

    @T.prim_func
    def mm(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
           C: T.Tensor((M, N), T.float32)):
        with T.Kernel(1) as _:
            a_f = T.alloc_fragment((M, K), T.float16)
            b_s = T.alloc_shared((K, N), T.float16)
            c_f = T.alloc_fragment((M, N), T.float32)
            T.fill(c_f, 123.0)
            T.copy(A, a_f)
            T.copy(B, b_s)
            T.gemm(a_f, b_s, c_f, clear_accum=True)
            T.copy(c_f, C)

    rng = RNG(12)
    a = randn(rng, M, K).astype(np.float16)
    b = randn(rng, K, N).astype(np.float16)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(tilelab.compile(mm, out_idx=[2])(a, b), expected,
                               rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- loops


def test_parallel_1d_2d_3d():
    D0, D1, D2 = 3, 5, 7

    @T.prim_func
    def loops(A: T.Tensor((D0, D1, D2), T.float32), X: T.Tensor((D2,), T.float32),
              Y: T.Tensor((D1, D2), T.float32), Z: T.Tensor((D0, D1, D2), T.float32)):
        with T.Kernel(1) as _:
            for k in T.Parallel(D2):
                X[k] = A[0, 0, k] * 3.0
            for j, k in T.Parallel(D1, D2):
                Y[j, k] = A[1, j, k] + A[2, j, k]
            for i, j, k in T.Parallel(D0, D1, D2):
                Z[i, j, k] = A[i, j, k] * T.Cast(T.float32, i * 100 + j * 10 + k)

    a = randn(RNG(13), D0, D1, D2)
    x, y, z = tilelab.compile(loops, out_idx=[1, 2, 3])(a)
    i, j, k = np.meshgrid(np.arange(D0), np.arange(D1), np.arange(D2), indexing="ij")
    np.testing.assert_allclose(x, a[0, 0] * 3, rtol=1e-6)
    np.testing.assert_allclose(y, a[1] + a[2], rtol=1e-6)
    np.testing.assert_allclose(z, a * (i * 100 + j * 10 + k), rtol=1e-6)


def test_serial_unroll_and_range_loops():
    """Prefix sums with T.serial, T.serial(start, stop), T.unroll and range(start, stop)."""
    M, N = 4, 9

    @T.prim_func
    def scans(A: T.Tensor((M, N), T.float32), S: T.Tensor((M, N), T.float32),
              Tail: T.Tensor((M,), T.float32), U: T.Tensor((M, N), T.float32),
              R: T.Tensor((M,), T.float32)):
        with T.Kernel(M) as row:
            S[row, 0] = A[row, 0]
            for j in T.serial(1, N):
                S[row, j] = S[row, j - 1] + A[row, j]
            Tail[row] = 0.0
            for j in range(3, N):
                Tail[row] = Tail[row] + A[row, j]
            for j in T.unroll(N):
                U[row, j] = A[row, N - 1 - j]
            R[row] = 0.0
            for j in T.serial(N):
                R[row] = R[row] * 0.5 + A[row, j]

    a = randn(RNG(14), M, N)
    s, tail, u, r = tilelab.compile(scans, out_idx=[1, 2, 3, 4])(a)
    expected_r = np.zeros(M, np.float32)
    for j in range(N):
        expected_r = expected_r * 0.5 + a[:, j]
    np.testing.assert_allclose(s, np.cumsum(a, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tail, a[:, 3:].sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(u, a[:, ::-1])
    np.testing.assert_allclose(r, expected_r, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- T.atomic_add


def test_atomic_add_scalar_from_many_blocks():
    """Each block adds its rows' sums into C[j]: column sums, accumulated into C's old values."""
    M, N, bm = 37, 6, 8

    @T.prim_func
    def column_sums(A: T.Tensor((M, N), T.float32), C: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            tile = T.alloc_fragment((bm, N), T.float32)
            partial = T.alloc_fragment((N,), T.float32)
            T.copy(A[bx * bm, 0], tile)
            T.reduce_sum(tile, partial, dim=0)
            for j in T.serial(N):
                T.atomic_add(C[j], partial[j])

    rng = RNG(15)
    a, c = randn(rng, M, N), randn(rng, N)
    expected = c + a.sum(axis=0)
    tilelab.compile(column_sums)(a, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


def test_atomic_add_tile_from_many_blocks():
    """Every block adds a whole (4, N) tile into the same rows of C (start-point form)."""
    M, N, bm = 20, 5, 4

    @T.prim_func
    def fold_rows(A: T.Tensor((M, N), T.float32), C: T.Tensor((bm, N), T.float32)):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            tile = T.alloc_fragment((bm, N), T.float32)
            T.copy(A[bx * bm, 0], tile)
            T.atomic_add(C[0, 0], tile)

    @T.prim_func
    def fold_rows_region(A: T.Tensor((M, N), T.float32), C: T.Tensor((bm, N), T.float32)):
        with T.Kernel(T.ceildiv(M, bm)) as bx:
            tile = T.alloc_shared((bm, N), T.float32)
            T.copy(A[bx * bm:bx * bm + bm, 0:N], tile)
            T.atomic_add(C[0:bm, 0:N], tile)

    rng = RNG(16)
    a = randn(rng, M, N)
    for program in (fold_rows, fold_rows_region):
        c = randn(rng, bm, N)
        expected = c + a.reshape(M // bm, bm, N).sum(axis=0)
        tilelab.compile(program)(a, c)
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


def _scatter_rows(lanes: int, M=24, N=32, rows=40, bm=8):
    """Each block adds its (bm, N) tile of A into the rows of C that Idx names, `lanes`
    elements at a time with TileLang's vector atomics (rows named twice get both)."""
    vector_add = {2: T.atomic_addx2, 4: T.atomic_addx4}[lanes]

    @T.prim_func
    def scatter(A: T.Tensor((M, N), T.float32), Idx: T.Tensor((M,), T.int32),
                C: T.Tensor((rows, N), T.float32)):
        with T.Kernel(T.ceildiv(M, bm), threads=64) as bx:
            tile = T.alloc_shared((bm, N), T.float32)
            T.copy(A[bx * bm, 0], tile)
            for i, j in T.Parallel(bm, N // lanes):
                vector_add(C[Idx[bx * bm + i], j * lanes], tile[i, j * lanes])

    return scatter


@pytest.mark.parametrize("lanes", [2, 4])
def test_vector_atomics_add_consecutive_elements(lanes):
    M, N, rows = 24, 32, 40
    rng = RNG(17)
    a, c = randn(rng, M, N), randn(rng, rows, N)
    idx = (np.arange(M) * 7 % 13).astype(np.int32)  # rows 0..12, several named twice
    expected = c.copy()
    np.add.at(expected, idx, a)
    tilelab.compile(_scatter_rows(lanes))(a, idx, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    from tilelab.backends.cuda.nvcc import find_nvcc

    if find_nvcc() is not None:  # one atomicAdd per element
        source = tilelab.compile(_scatter_rows(lanes), target="cuda:sm_90a").get_kernel_source()
        assert source.count("atomicAdd(") == lanes


@pytest.mark.gpu
@pytest.mark.parametrize("lanes", [2, 4])
def test_vector_atomics_on_the_gpu(lanes):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(lanes)
    a, c = torch.randn(24, 32, device="cuda"), torch.randn(40, 32, device="cuda")
    idx = (torch.arange(24, device="cuda") * 7 % 13).int()
    expected = c.clone().index_add_(0, idx, a)
    tilelab.compile(_scatter_rows(lanes), target="cuda")(a, idx, c)
    torch.testing.assert_close(c, expected, rtol=1e-5, atol=1e-5)


def test_vector_atomics_take_elements():
    with pytest.raises(TileLabError, match=r"T.atomic_addx4 takes two elements"):
        @T.prim_func
        def whole(A: T.Tensor((8, 8), T.float32), C: T.Tensor((8, 8), T.float32)):
            with T.Kernel(1, threads=32):
                tile = T.alloc_shared((8, 8), T.float32)
                T.copy(A, tile)
                T.atomic_addx4(C, tile)


# ---------------------------------------------------------------- scalars in registers


def test_alloc_var_and_alloc_local():
    M, N = 5, 8

    @T.prim_func
    def stats(A: T.Tensor((M, N), T.float32), Dot: T.Tensor((M,), T.float32),
              Top: T.Tensor((M, 2), T.float32)):
        with T.Kernel(M) as row:
            acc = T.alloc_var(T.float32)
            best = T.alloc_var(T.float32, init=-1e30)
            second = T.alloc_local((1,), T.float32)
            acc = 0.0
            second[0] = -1e30
            for j in T.serial(N):
                acc += A[row, j] * A[row, j]
                if A[row, j] > best:
                    second[0] = best
                    best = A[row, j]
                elif A[row, j] > second[0]:
                    second[0] = A[row, j]
            Dot[row] = acc
            Top[row, 0] = best
            Top[row, 1] = second[0]

    a = randn(RNG(17), M, N)
    dot, top = tilelab.compile(stats, out_idx=[1, 2])(a)
    np.testing.assert_allclose(dot, (a * a).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(top, -np.sort(-a, axis=1)[:, :2])


def test_clear_of_an_alloc_var_compiles_for_cuda():
    """`T.clear(v)` of a `T.alloc_var` sets each thread's own register (TileLang's
    blocksparse decode examples do it): on the CPU it always ran; the CUDA lowering dealt it
    out over the block like a shared tile, into a buffer that no longer existed."""
    from tilelab.backends.cuda.nvcc import find_nvcc

    @T.prim_func
    def row_sums(X: T.Tensor((4, 8), T.float32), Y: T.Tensor((4,), T.float32)):
        with T.Kernel(4, threads=128) as row:
            total = T.alloc_var(T.float32)
            T.clear(total)
            for j in T.serial(8):
                total += X[row, j]
            Y[row] = total

    x = randn(RNG(18), 4, 8)
    y = np.empty(4, np.float32)
    tilelab.compile(row_sums)(x, y)
    np.testing.assert_allclose(y, x.sum(axis=1), rtol=1e-5)
    if find_nvcc() is not None:
        source = tilelab.compile(row_sums, target="cuda:sm_90a").get_kernel_source()
        assert "total_ptr[0] = 0x0p+0f" in source


# ---------------------------------------------------------------- math


UNARY = [
    ("exp", T.exp, np.exp, (-3, 3)),
    ("exp2", T.exp2, np.exp2, (-3, 3)),
    ("log", T.log, np.log, (0.1, 5)),
    ("log2", T.log2, np.log2, (0.1, 5)),
    ("sqrt", T.sqrt, np.sqrt, (0.1, 5)),
    ("rsqrt", T.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 5)),
    ("abs", T.abs, np.abs, (-5, 5)),
]


def unary_program(fn, N):
    @T.prim_func
    def unary(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1) as _:
            for i in T.Parallel(N):
                B[i] = fn(A[i])

    return unary


@pytest.mark.parametrize("name, fn, reference, domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_math(name, fn, reference, domain):
    N = 33
    a = RNG(len(name)).uniform(*domain, N).astype(np.float32)
    kernel = tilelab.compile(unary_program(fn, N), out_idx=[1])
    np.testing.assert_allclose(kernel(a), reference(a), rtol=1e-5, atol=1e-6)


def test_binary_math_select_infinity_and_ceildiv():
    N = 40

    @T.prim_func
    def mix(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32),
            I: T.Tensor((N,), T.int32), Max: T.Tensor((N,), T.float32),  # noqa: E741
            Min: T.Tensor((N,), T.float32), Sel: T.Tensor((N,), T.float32),
            Inf: T.Tensor((N,), T.float32), Ceil: T.Tensor((N,), T.int32)):
        with T.Kernel(T.ceildiv(N, 16)) as bx:  # ceildiv of Python ints: 3 blocks
            for t in T.Parallel(16):
                i = bx * 16 + t
                if i < N:
                    Max[i] = T.max(A[i], B[i])
                    Min[i] = T.min(A[i], 0.0)
                    Sel[i] = T.if_then_else(A[i] > B[i], A[i] - B[i], B[i] * 2.0)
                    Inf[i] = T.if_then_else(A[i] > 0, T.infinity(T.float32),
                                            -T.infinity(T.float32))
                    Ceil[i] = T.ceildiv(I[i], 3)  # ceildiv of device values

    rng = RNG(18)
    a, b = randn(rng, N), randn(rng, N)
    ints = rng.integers(0, 50, N).astype(np.int32)
    mx, mn, sel, inf, ceil = tilelab.compile(mix, out_idx=[3, 4, 5, 6, 7])(a, b, ints)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, 0))
    np.testing.assert_allclose(sel, np.where(a > b, a - b, b * 2), rtol=1e-6)
    np.testing.assert_array_equal(inf, np.where(a > 0, np.inf, -np.inf).astype(np.float32))
    np.testing.assert_array_equal(ceil, -(-ints // 3))


def test_cast_between_types():
    N = 24

    @T.prim_func
    def casts(A: T.Tensor((N,), T.float32), ToInt: T.Tensor((N,), T.int32),
              ToHalf: T.Tensor((N,), T.float16), Back: T.Tensor((N,), T.float32)):
        with T.Kernel(1) as _:
            for i in T.Parallel(N):
                ToInt[i] = T.Cast(T.int32, A[i])
                ToHalf[i] = T.Cast(T.float16, A[i])
                Back[i] = T.Cast(T.float32, T.Cast(T.int32, A[i])) + 0.25

    a = (randn(RNG(19), N) * 20).astype(np.float32)
    to_int, to_half, back = tilelab.compile(casts, out_idx=[1, 2, 3])(a)
    np.testing.assert_array_equal(to_int, a.astype(np.int32))  # truncation toward zero, as C
    np.testing.assert_array_equal(to_half, a.astype(np.float16))
    np.testing.assert_array_equal(back, a.astype(np.int32).astype(np.float32) + 0.25)


# ---------------------------------------------------------------- dtypes

NUMPY_DTYPES = [
    (T.float16, np.float16), (T.float32, np.float32), (T.float64, np.float64),
    (T.int8, np.int8), (T.int32, np.int32), (T.int64, np.int64),
]


def affine_program(dtype, N, block):
    @T.prim_func
    def affine(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block)) as bx:
            tile = T.alloc_shared((block,), dtype)
            T.copy(A[bx * block], tile)
            for i in T.Parallel(block):
                tile[i] = tile[i] * 2 + 1
            T.copy(tile, B[bx * block])

    return affine


@pytest.mark.parametrize("dtype, np_dtype", NUMPY_DTYPES, ids=[str(d) for d, _ in NUMPY_DTYPES])
def test_dtypes_numpy_in_numpy_out(dtype, np_dtype):
    N = 45
    rng = RNG(20)
    if np.issubdtype(np_dtype, np.integer):
        a = rng.integers(-40, 40, N).astype(np_dtype)
    else:
        a = randn(rng, N, dtype=np_dtype)
    b = tilelab.compile(affine_program(dtype, N, 16), out_idx=[1])(a)
    assert isinstance(b, np.ndarray) and b.dtype == np_dtype
    np.testing.assert_array_equal(b, (a * np_dtype(2) + np_dtype(1)).astype(np_dtype))


@pytest.mark.parametrize("torch_dtype, dtype", [(torch.bfloat16, T.bfloat16),
                                                (torch.float16, T.float16),
                                                (torch.int64, T.int64)])
def test_dtypes_torch_in_torch_out(torch_dtype, dtype):
    N = 50
    torch.manual_seed(21)
    a = (torch.randn(N) * 10).to(torch_dtype)
    b = tilelab.compile(affine_program(dtype, N, 16), out_idx=[1])(a)
    assert isinstance(b, torch.Tensor) and b.dtype == torch_dtype
    torch.testing.assert_close(b, a * 2 + 1, rtol=0, atol=0)


def test_bool_masks():
    N = 30

    @T.prim_func
    def masks(A: T.Tensor((N,), T.float32), Keep: T.Tensor((N,), T.bool),
              Positive: T.Tensor((N,), T.bool), Kept: T.Tensor((N,), T.float32)):
        with T.Kernel(1) as _:
            for i in T.Parallel(N):
                Positive[i] = A[i] > 0
                Kept[i] = T.if_then_else(Keep[i], A[i], 0.0)

    rng = RNG(22)
    a = randn(rng, N)
    keep = rng.integers(0, 2, N).astype(bool)
    positive, kept = tilelab.compile(masks, out_idx=[2, 3])(a, keep)
    assert positive.dtype == np.bool_
    np.testing.assert_array_equal(positive, a > 0)
    np.testing.assert_array_equal(kept, np.where(keep, a, 0).astype(np.float32))


# ---------------------------------------------------------------- compile-time Python


def square_plus_one(x):
    """An ordinary Python helper: called natively on device expressions."""
    return x * x + 1.0


@T.macro
def scale_rows(tile, factors, rows, cols):
    """A macro: its T.Parallel loop is traced into the caller's kernel."""
    for i, j in T.Parallel(rows, cols):
        tile[i, j] = tile[i, j] * factors[i]


def compile_time_program(M, N, weights, use_helper):
    @T.prim_func
    def kernel(A: T.Tensor((M, N), T.float32), F: T.Tensor((M,), T.float32),
               B: T.Tensor((M, N), T.float32)):
        with T.Kernel(1) as _:
            tile = T.alloc_fragment((M, N), T.float32)
            factors = T.alloc_fragment((M,), T.float32)
            T.copy(A, tile)
            T.copy(F, factors)
            scale_rows(tile, factors, M, N)
            for i, j in T.Parallel(M, N):
                total = 0.0
                for w in weights:  # a Python list: unrolled while tracing
                    total = total + tile[i, j] * w
                if use_helper:  # a Python value: decided at compile time
                    total = square_plus_one(total)
                B[i, j] = total

    return kernel


@pytest.mark.parametrize("use_helper", [False, True])
def test_compile_time_python(use_helper):
    M, N = 4, 6
    rng = RNG(23)
    weights = [float(w) for w in rng.uniform(-1, 1, 3)]
    a, f = randn(rng, M, N), randn(rng, M)
    program = compile_time_program(M, N, weights, use_helper)
    assert program.script().count("tile[i, j]") >= len(weights)  # the list loop unrolled
    out = tilelab.compile(program, out_idx=[2])(a, f)
    total = sum((a * f[:, None]) * np.float32(w) for w in weights)
    expected = total * total + 1 if use_helper else total
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- T.print


def flush_c_stdout():
    ctypes.CDLL(None).fflush(None)


def test_print_scalar_and_buffer(capfd):
    N = 3

    @T.prim_func
    def show(A: T.Tensor((N,), T.float32), I: T.Tensor((1,), T.int32)):  # noqa: E741
        with T.Kernel(1) as _:
            tile = T.alloc_shared((N,), T.float32)
            T.copy(A, tile)
            T.print(I[0], msg="count")
            T.print(tile, msg="tile")

    a = randn(RNG(24), N)
    count = RNG(25).integers(1, 1000, 1).astype(np.int32)
    capfd.readouterr()
    tilelab.compile(show)(a, count)
    flush_c_stdout()
    out = capfd.readouterr().out
    assert f"count: {count[0]}" in out
    printed = {int(i): float(v) for i, v in re.findall(r"tile: \w+\[(\d+)\] = (\S+)", out)}
    assert sorted(printed) == list(range(N))
    np.testing.assert_allclose([printed[i] for i in range(N)], a, rtol=1e-5)


def test_print_passes_floats_to_printf_as_text(capfd):
    """TVM's LLVM code generator declares printf without `...`; x86-64's printf finds a
    double only when the caller counts its vector registers in %al, which that call does
    not do. Seen on the H200 machine's CPU: `T.print` of a tile printed 6.95e-310 for
    every element. The CPU backend hands printf no floating-point value at all."""
    N = 3

    @T.prim_func
    def show(A: T.Tensor((N,), T.float32)):
        with T.Kernel(1) as _:
            T.print(A, msg="tile")
            T.print(A[0] * 2.0, msg="twice")

    a = randn(RNG(27), N)
    kernel = tilelab.compile(show)
    calls = [line for line in kernel.trace.code["llvm"].splitlines()
             if "call" in line and "@printf(" in line]
    assert len(calls) == N + 1
    assert not [line for line in calls if "double" in line or "float" in line]
    capfd.readouterr()
    kernel(a)
    flush_c_stdout()
    out = capfd.readouterr().out
    assert float(re.search(r"twice: (\S+)", out).group(1)) == pytest.approx(2 * a[0], 1e-5)


# ---------------------------------------------------------------- program styles


def scaled_add_factory(N, block):
    @T.prim_func
    def scaled_add(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32),
                   C: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                index = bx * block + i
                if index < N:
                    C[index] = A[index] * 0.5 + B[index]

    return scaled_add


def test_factory_with_tilelab_compile_out_idx():
    N = 300
    rng = RNG(26)
    a, b = randn(rng, N), randn(rng, N)
    kernel = tilelab.compile(scaled_add_factory(N, 128), out_idx=[-1])
    np.testing.assert_allclose(kernel(a, b), a * 0.5 + b, rtol=1e-6)
    # without out_idx every tensor is an argument and the kernel writes into C
    c = np.zeros(N, np.float32)
    assert tilelab.compile(scaled_add_factory(N, 128))(a, b, c) is None
    np.testing.assert_allclose(c, a * 0.5 + b, rtol=1e-6)


@tilelab.jit(out_idx=[2])
def jit_scaled_add_inline(N: int, block: int = 64):
    @T.prim_func
    def scaled_add(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32),
                   C: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    C[bx * block + i] = A[bx * block + i] * 0.5 + B[bx * block + i]

    return scaled_add


def test_jit_factory_out_idx():
    factory = jit_scaled_add_inline
    for N in (128, 77):
        torch.manual_seed(N)
        a, b = torch.randn(N), torch.randn(N)
        kernel = factory(N)
        torch.testing.assert_close(kernel(a, b), a * 0.5 + b)
        assert factory(N) is kernel  # same sizes: the compiled kernel is reused


@tilelab.jit
def eager_row_scale(X, S, block_m: int = 4):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float32)
    S: T.Tensor((M,), T.float32)

    Y = T.empty((M, N), T.float32)

    with T.Kernel(T.ceildiv(M, block_m)) as bx:
        tile = T.alloc_fragment((block_m, N), T.float32)
        scale = T.alloc_fragment((block_m,), T.float32)
        T.copy(X[bx * block_m, 0], tile)
        T.copy(S[bx * block_m], scale)
        for i, j in T.Parallel(block_m, N):
            tile[i, j] = tile[i, j] * scale[i]
        T.copy(tile, Y[bx * block_m, 0])

    return Y


@pytest.mark.parametrize("M, N", [(8, 16), (10, 5)])
def test_eager_style_call_and_compile(M, N):
    rng = RNG(M * N)
    x, s = randn(rng, M, N), randn(rng, M)
    expected = x * s[:, None]
    # called with tensors: compiled for their shapes; numpy in, numpy out
    y = eager_row_scale(x, s)
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    # compiled with example tensors, then called
    kernel = eager_row_scale.compile(x, s, block_m=2)
    np.testing.assert_allclose(kernel(x, s), expected, rtol=1e-6)
    # compiled from sizes alone, as the tutorial's `.compile(M=..., N=...)`
    kernel = eager_row_scale.compile(M=M, N=N, block_m=8)
    torch.testing.assert_close(kernel(torch.from_numpy(x), torch.from_numpy(s)),
                               torch.from_numpy(expected))



def test_tilelab_compile_and_jit_stay_functions():
    """Compiling imports tilelab's submodules; `tilelab.compile` and `tilelab.jit` must survive."""
    N = 20
    a, b = randn(RNG(27), N), randn(RNG(28), N)
    for _ in range(2):
        kernel = tilelab.compile(scaled_add_factory(N, 16), out_idx=[2])
        np.testing.assert_allclose(kernel(a, b), a * 0.5 + b, rtol=1e-6)
    assert callable(tilelab.compile) and callable(tilelab.jit)
