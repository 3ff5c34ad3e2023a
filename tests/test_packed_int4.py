"""4-bit integer tensors (`T.Tensor(shape, T.int4)`, `T.uint4`): passed in as bytes, two
values to a byte, the first in the low four bits; 4-bit tiles hold one value a byte
(passes/packed_int4.py). TileLang's int4 GEMM example is written this way: a T.int4 tensor,
tiles and T.gemm into int32. Checked against torch on fresh random values, edge tiles
included; writing a 4-bit tensor is an error at its line."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


def pack(values: torch.Tensor) -> torch.Tensor:
    """Values in [-8, 8) or [0, 16), two to a byte: the even one in the low four bits."""
    wide = values.to(torch.int16)
    packed = (wide[..., 0::2] & 15) | ((wide[..., 1::2] & 15) << 4)
    return packed.to(torch.uint8 if values.dtype == torch.uint8 else torch.int8).contiguous()


@tilelab.jit(out_idx=-1)
def int4_gemm(M, N, K, block_M=32, block_N=32, block_K=32, dtype=T.int4, stages=2):
    """C = A Bᵀ in int32, A and B of 4-bit values, tiles through shared memory."""
    @T.prim_func
    def kernel(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype),
               C: T.Tensor((M, N), T.int32)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_N, block_K), dtype)
            C_local = T.alloc_fragment((block_M, block_N), T.int32)
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, block_K), num_stages=stages):
                T.copy(A[by * block_M, ko * block_K], A_shared)
                T.copy(B[bx * block_N, ko * block_K], B_shared)
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            T.copy(C_local, C[by * block_M, bx * block_N])
    return kernel


def _random(shape, dtype):
    if dtype == T.int4:
        return torch.randint(-8, 8, shape, dtype=torch.int8)
    return torch.randint(0, 16, shape, dtype=torch.uint8)


@pytest.mark.parametrize("dtype", [T.int4, T.uint4])
def test_gemm_of_4_bit_values_matches_torch_edges_included(dtype):
    torch.manual_seed(4)
    for M, N, K in [(64, 64, 64), (100, 72, 96)]:  # the second: partial tiles on every side
        a, b = _random((M, K), dtype), _random((N, K), dtype)
        c = int4_gemm(M, N, K, dtype=dtype)(pack(a), pack(b))
        assert torch.equal(c, a.to(torch.int32) @ b.to(torch.int32).T)


@tilelab.jit(out_idx=-1)
def dequantize(rows, cols, dtype=T.int4):
    """Y[i, j] = A[i, j] * scale[i]: elements of a 4-bit tensor read one by one, and a
    4-bit fragment filled from it."""
    @T.prim_func
    def kernel(A: T.Tensor((rows, cols), dtype), scale: T.Tensor((rows,), T.float32),
               Y: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(1, threads=64):
            held = T.alloc_fragment((rows, cols), dtype)
            T.copy(A, held)
            for i, j in T.Parallel(rows, cols):
                Y[i, j] = T.cast(A[i, j], T.float32) * scale[i] + T.cast(held[i, j], T.float32)
    return kernel


@pytest.mark.parametrize("dtype", [T.int4, T.uint4])
def test_elements_and_tiles_of_4_bit_tensors_keep_their_values(dtype):
    torch.manual_seed(5)
    a, scale = _random((16, 32), dtype), torch.rand(16) + 0.5  # a wrong value is 0.5 away
    y = dequantize(16, 32, dtype=dtype)(pack(a), scale)
    torch.testing.assert_close(y, a.float() * scale[:, None] + a.float())


def _message(fn) -> str:
    with pytest.raises(TileLabError) as caught:
        fn()
    return str(caught.value)


def test_writing_a_4_bit_tensor_is_an_error_at_its_line():
    @tilelab.jit
    def stores(A: T.Tensor((8, 8), T.int4)):
        with T.Kernel(1, threads=32):
            A[0, 1] = 3

    @tilelab.jit
    def copies_in(A: T.Tensor((8, 8), T.int4)):
        with T.Kernel(1, threads=32):
            tile = T.alloc_shared((8, 8), T.int4)
            T.clear(tile)
            T.copy(tile, A)

    packed = torch.zeros(8, 4, dtype=torch.int8)
    text = _message(lambda: stores(packed))
    assert "A[0, 1] = 3" in text and "reads int4 tensors but does not write them" in text
    text = _message(lambda: copies_in(packed))
    assert "T.copy(tile, A)" in text and "T.copy writes A, a tensor of int4 values" in text

    @tilelab.jit(out_idx=-1)
    def makes(n):
        @T.prim_func
        def kernel(X: T.Tensor((n,), T.int8), Y: T.Tensor((n,), T.int4)):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(n):
                    X[i] = T.cast(Y[i], T.int8)
        return kernel

    assert "out_idx 1 names Y, a tensor of int4 values" in _message(lambda: makes(8))


def test_a_4_bit_tensor_passed_unpacked_says_how_to_pack_it():
    @tilelab.jit
    def reads(A: T.Tensor((8, 8), T.uint4), Y: T.Tensor((8,), T.int32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                Y[i] = A[i, 7]

    text = _message(lambda: reads(torch.zeros(8, 8, dtype=torch.uint8),
                                  torch.zeros(8, dtype=torch.int32)))
    assert "A holds (8, 8) uint4 values, two to a byte: pass uint8 of shape (8, 4); the " \
           "tensor passed has shape (8, 8)" in text
    y = torch.zeros(8, dtype=torch.int32)
    values = torch.randint(0, 16, (8, 8), dtype=torch.uint8)
    reads(pack(values), y)
    assert torch.equal(y, values[:, 7].to(torch.int32))

    @tilelab.jit
    def odd(A: T.Tensor((8, 7), T.int4), Y: T.Tensor((8,), T.int32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                Y[i] = A[i, 0]

    assert "A has 7 int4 values in its last dimension; they come two to a byte" in _message(
        lambda: odd(torch.zeros(8, 3, dtype=torch.int8), y))


def test_a_tile_op_other_than_copy_on_a_4_bit_tensor_says_to_copy_it_first():
    @tilelab.jit
    def sums(A: T.Tensor((8, 8), T.int4), Y: T.Tensor((8,), T.int32)):
        with T.Kernel(1, threads=32):
            rows = T.alloc_fragment((8,), T.int32)
            T.reduce_sum(A, rows, dim=1)
            T.copy(rows, Y)

    text = _message(lambda: sums(torch.zeros(8, 4, dtype=torch.int8),
                                 torch.zeros(8, dtype=torch.int32)))
    assert "T.reduce_sum(A, rows, dim=1)" in text and "T.copy it into a tile first" in text


@needs_nvcc
def test_compiles_for_cuda_with_no_4_bit_type_left():
    kernel = int4_gemm.compile(100, 72, 96, target="cuda")
    assert [r["instruction"] for r in kernel.trace.instructions if r["op"] == "gemm"] == ["fma"]
    assert "signed char* __restrict__ A" in kernel.get_kernel_source()


@pytest.mark.gpu
def test_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(6)
    for dtype in (T.int4, T.uint4):
        a, b = _random((100, 96), dtype), _random((72, 96), dtype)
        c = int4_gemm.compile(100, 72, 96, dtype=dtype, target="cuda")(pack(a).cuda(),
                                                                       pack(b).cuda())
        assert torch.equal(c.cpu(), a.to(torch.int32) @ b.to(torch.int32).T)
        s = torch.rand(16) + 0.5
        v = _random((16, 32), dtype)
        y = dequantize.compile(16, 32, dtype=dtype, target="cuda")(pack(v).cuda(), s.cuda())
        torch.testing.assert_close(y.cpu(), v.float() * s[:, None] + v.float())
