"""TileLang's 2:4 sparse GEMM (`T.gemm_sp`), a copy into a thread's own registers in code
each thread runs for itself, and how an out-of-bounds access to such a register reads."""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError
from tilelab.language.tilelang_names import sparse_e_factor

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def semi_sparse(rows: int, depth: int, dtype, seed: int) -> torch.Tensor:
    """A random matrix with at most two nonzeros in every group of four along K (one in
    every pair for float32), some groups with fewer."""
    g = torch.Generator().manual_seed(seed)
    kept, group = (1, 2) if dtype == torch.float32 else (2, 4)
    values = torch.randn(rows, depth, generator=g).to(dtype)
    scores = torch.rand(rows, depth // group, group, generator=g)
    keep = torch.zeros_like(scores, dtype=torch.bool)
    keep.scatter_(2, scores.topk(kept, dim=2).indices, True)
    values = values * keep.reshape(rows, depth)
    values[torch.rand(rows, depth, generator=g) < 0.1] = 0  # emptier groups too
    return values


def compress(dense: torch.Tensor, meta_dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """TileLang's layout of a 2:4 operand, written here from its contract: each group's
    nonzeros in order (padded with the group's first zeros), and 4 bits a group of
    positions - two 2-bit fields; for float32 pairs 0b0100 (first) or 0b1110 (second) -
    packed into each metadata element from the low bits up."""
    rows, depth = dense.shape
    kept, group = (1, 2) if dense.dtype == torch.float32 else (2, 4)
    groups = dense.reshape(rows, depth // group, group)
    order = torch.sort((groups == 0).to(torch.int8), dim=2, stable=True).indices[..., :kept]
    order = order.sort(dim=2).values
    values = groups.gather(2, order).reshape(rows, depth // group * kept)
    if kept == 1:
        nibble = torch.where(order[..., 0] == 0, 0b0100, 0b1110)
    else:
        nibble = order[..., 0] | (order[..., 1] << 2)
    per_meta = torch.iinfo(meta_dtype).bits // 4
    nibble = nibble.to(torch.int64).reshape(rows, -1, per_meta)
    packed = sum(nibble[..., i] << (4 * i) for i in range(per_meta))
    bits = torch.iinfo(meta_dtype).bits
    packed = torch.where(packed >= 1 << (bits - 1), packed - (1 << bits), packed)  # signed
    return values, packed.to(meta_dtype)


@tilelab.jit(out_idx=[3])
def sparse_gemm(M, N, K, dtype="float16", meta="int16", block_m=64, block_n=64, block_k=64,
                transpose_b=False, stages=2, threads=128):
    per_meta = sparse_e_factor(dtype, meta)
    b_shape = (N, K) if transpose_b else (K, N)
    b_tile = (block_n, block_k) if transpose_b else (block_k, block_n)
    kept = 1 if T.dtype(dtype).bits == 32 else 2
    width = 2 if kept == 1 else 4

    @T.prim_func
    def kernel(A: T.Tensor((M, K // width * kept), dtype), E: T.Tensor((M, K // per_meta), meta),
               B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=threads) as (bx, by):
            a = T.alloc_shared((block_m, block_k // width * kept), dtype)
            e = T.alloc_shared((block_m, block_k // per_meta), meta)
            b = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((block_m, block_n), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_k), num_stages=stages):
                T.copy(A[by * block_m, k * block_k // width * kept], a)
                T.copy(E[by * block_m, k * block_k // per_meta], e)
                if transpose_b:
                    T.copy(B[bx * block_n, k * block_k], b)
                else:
                    T.copy(B[k * block_k, bx * block_n], b)
                T.gemm_sp(a, e, b, acc, transpose_B=transpose_b)
            T.copy(acc, C[by * block_m, bx * block_n])

    return kernel


CASES = [  # M, N, K (tails in M and N), dtype, metadata, B transposed
    (100, 72, 128, torch.float16, torch.int16, False),
    (64, 50, 192, torch.bfloat16, torch.int16, True),
    (70, 64, 128, torch.float16, torch.int32, False),
    (64, 64, 128, torch.float16, torch.int8, False),
    (48, 40, 128, torch.float32, torch.int16, False),
]


def run_case(M, N, K, dtype, meta, transpose_b, device, seed=0):
    dense = semi_sparse(M, K, dtype, seed)
    values, metadata = compress(dense, meta)
    b = torch.randn((N, K) if transpose_b else (K, N), generator=torch.Generator().manual_seed(
        seed + 1)).to(dtype)
    kernel = sparse_gemm.compile(M, N, K, str(dtype).split(".")[1], str(meta).split(".")[1],
                         transpose_b=transpose_b,
                         target="cpu" if device == "cpu" else "cuda")
    out = kernel(values.to(device), metadata.to(device), b.to(device))
    expected = dense.float() @ (b.float().T if transpose_b else b.float())
    return out.cpu(), expected


@pytest.mark.parametrize("M, N, K, dtype, meta, transpose_b", CASES)
def test_gemm_sp_is_the_dense_product_on_the_cpu(M, N, K, dtype, meta, transpose_b):
    for seed in (0, 7):
        out, expected = run_case(M, N, K, dtype, meta, transpose_b, "cpu", seed)
        torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)


def test_compress_keeps_what_the_dense_matrix_holds():
    dense = semi_sparse(8, 32, torch.float16, 3)
    values, meta = compress(dense, torch.int16)
    assert values.shape == (8, 16) and meta.shape == (8, 2)
    assert torch.equal(values.float().abs().sum(), dense.float().abs().sum())


def test_gemm_sp_with_metadata_of_the_wrong_shape_is_an_error_at_its_line():
    def program():
        @T.prim_func
        def kernel(A: T.Tensor((64, 32), "float16"), E: T.Tensor((64, 8), "int16"),
                   B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 32), "float16")
                e = T.alloc_shared((64, 8), "int16")  # int16 metadata of a 64-deep A: 64x4
                b = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                T.copy(A, a)
                T.copy(E, e)
                T.copy(B, b)
                T.clear(acc)
                T.gemm_sp(a, e, b, acc)
                T.copy(acc, C)

    with pytest.raises(TileLabError) as info:
        program()
    assert "E is 64x8, expected 64x4" in str(info.value)
    assert "T.gemm_sp(a, e, b, acc)" in info.value.location.excerpt()


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("M, N, K, dtype, meta, transpose_b", CASES[:2])
def test_gemm_sp_compiles_for_hopper(M, N, K, dtype, meta, transpose_b):
    kernel = sparse_gemm.compile(M, N, K, str(dtype).split(".")[1], str(meta).split(".")[1],
                         transpose_b=transpose_b, target="cuda:sm_90a")
    assert "wgmma" in kernel.get_kernel_source()


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("M, N, K, dtype, meta, transpose_b", CASES)
def test_gemm_sp_on_the_gpu(M, N, K, dtype, meta, transpose_b):
    out, expected = run_case(M, N, K, dtype, meta, transpose_b, "cuda")
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)


# ------------------------------------------------------ T.copy into a thread's registers


def row_sums_by_thread(M, N):
    """Each thread copies its own row into its registers (T.copy in thread code)."""

    @T.prim_func
    def kernel(A: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
            tx = T.get_thread_binding()
            row = T.alloc_local((N,), "float32")
            total = T.alloc_var("float32")
            if bx * 32 + tx < M:
                T.copy(A[bx * 32 + tx, 0:N], row)
                total = 0.0
                for j in T.serial(N):
                    total += row[j]
                S[bx * 32 + tx] = total

    return kernel


def test_a_copy_into_a_threads_own_registers_runs_for_that_thread():
    a = torch.randn(45, 12)
    out = torch.zeros(45)
    tilelab.compile(row_sums_by_thread(45, 12), target="cpu")(a, out)
    torch.testing.assert_close(out, a.sum(1))


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_a_copy_into_a_threads_own_registers_compiles_for_cuda():
    tilelab.compile(row_sums_by_thread(45, 12), target="cuda:sm_90a")


@pytest.mark.gpu
@GPU
def test_a_copy_into_a_threads_own_registers_on_the_gpu():
    a = torch.randn(45, 12, device="cuda")
    out = torch.zeros(45, device="cuda")
    tilelab.compile(row_sums_by_thread(45, 12), target="cuda")(a, out)
    torch.testing.assert_close(out, a.sum(1))


def test_a_copy_of_shared_tiles_in_thread_code_is_still_refused():
    @T.prim_func
    def kernel(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            s = T.alloc_shared((64,), "float32")
            T.copy(A[tx:tx + 1], s[tx:tx + 1])  # each thread its element: shared, not its own
            T.copy(s, B)

    with pytest.raises(TileLabError, match="whole block's work"):
        tilelab.compile(kernel, target="cpu")


def test_a_registers_index_past_its_end_is_named_as_the_program_wrote_it():
    """On the CPU each thread has its own copy of a register (a first index, the thread's):
    the message shows the register as declared, its index as written."""

    @T.prim_func
    def kernel(A: T.Tensor((64,), "int32"), B: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            slots = T.alloc_local((2,), "int32")
            count = T.alloc_var("uint8")
            count = 0
            for _ in T.serial(3):
                slots[count] = A[tx]  # the third turn writes slots[2]
                count = count + 1
            B[tx] = slots[0]

    a, b = torch.arange(64, dtype=torch.int32), torch.zeros(64, dtype=torch.int32)
    with pytest.raises(TileLabError) as info:
        tilelab.compile(kernel, target="cpu")(a, b)
    assert "index out of bounds: slots[count] (the shape of slots is (2,))" in str(info.value)
    assert "slots[count] = A[tx]" in info.value.location.excerpt()


def test_gemm_sp_reads_transposed_nonzeros_and_metadata():
    """A_sparse given as (K/2) x M and E as (K/16) x M (transpose_A, transpose_E)."""
    M, N, K = 48, 40, 64
    dense = semi_sparse(M, K, torch.float16, 5)
    values, meta = compress(dense, torch.int16)
    b = torch.randn(K, N, generator=torch.Generator().manual_seed(6)).half()

    @T.prim_func
    def kernel(A: T.Tensor((K // 2, M), "float16"), E: T.Tensor((K // 16, M), "int16"),
               B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((K // 2, M), "float16")
            e = T.alloc_shared((K // 16, M), "int16")
            bs = T.alloc_shared((K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, a)
            T.copy(E, e)
            T.copy(B, bs)
            T.clear(acc)
            T.gemm_sp(a, e, bs, acc, transpose_A=True, transpose_E=True)
            T.copy(acc, C)

    out = torch.zeros(M, N)
    tilelab.compile(kernel, target="cpu")(values.T.contiguous(), meta.T.contiguous(), b, out)
    torch.testing.assert_close(out, dense.float() @ b.float(), rtol=1e-3, atol=1e-3)
