"""float8 tiles. On the GPU: GPUs have no float8 arithmetic and CUDA C no operators for
it, so a float8 value meets others as float32 (`ir/expr.common_dtype`) and a store into a
float8 tile rounds back; `q[i, j] * 2.0` reached nvcc as `__nv_fp8_e4m3 * __nv_fp8_e4m3`
before. On the CPU: float8 buffers are bytes, decoded at each load and encoded at each
store with torch's rounding (passes/float8_as_bytes.py) - every byte and a sweep of float32
values checked against torch below."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

M = N = 64


def quantize(dtype):
    """Y = X rounded to float8; Z = 2 * that value, computed from the float8 tile."""
    @T.prim_func
    def kernel(X: T.Tensor((M, N), T.float32), Y: T.Tensor((M, N), dtype),
               Z: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), T.float32)
            q = T.alloc_fragment((M, N), dtype)
            T.copy(X, f)
            T.copy(f, q)
            T.copy(q, Y)
            for i, j in T.Parallel(M, N):
                Z[i, j] = q[i, j] * 2.0

    return kernel


FORMATS = ["float8_e4m3fn", "float8_e5m2"]


def _same(got, want):
    """Equal bytes, or both NaN (NaN's sign is not fixed by either conversion)."""
    return ((got.view(torch.uint8) == want.view(torch.uint8)) |
            (got.float().isnan() & want.float().isnan())).all()


def widen(dtype, n):
    @T.prim_func
    def kernel(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    Y[bx * 64 + i] = X[bx * 64 + i]

    return kernel


def narrow(dtype, n):
    @T.prim_func
    def kernel(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 256), threads=64) as bx:
            for i in T.Parallel(256):
                if bx * 256 + i < n:
                    Y[bx * 256 + i] = X[bx * 256 + i]

    return kernel


@pytest.mark.parametrize("name", FORMATS)
def test_every_float8_byte_reads_as_torch_reads_it(name):
    dtype = getattr(torch, name)
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype)
    y = torch.empty(256)
    tilelab.compile(widen(getattr(T, name), 256), target="cpu")(x, y)
    want = x.float()
    assert ((y == want) | (y.isnan() & want.isnan())).all()
    assert torch.equal(torch.signbit(y[~want.isnan()]), torch.signbit(want[~want.isnan()]))


@pytest.mark.parametrize("name", FORMATS)
def test_float32_values_round_to_float8_as_torch_rounds_them(name):
    """Random values at every scale, ties, subnormals, overflow, zeros of both signs,
    infinities, NaN, and every 65,537th float32 bit pattern."""
    generator = torch.Generator().manual_seed(8)
    scales = (1e-4, 0.02, 1.0, 37.0, 300.0, 6e4, 1e6)
    x = torch.cat([torch.randn(20000, generator=generator) * s for s in scales] + [
        torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 448.0, 464.0,
                      465.0, 480.0, 57344.0, 61440.0, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -11,
                      2.0 ** -16, 2.0 ** -17, 1.5 * 2.0 ** -17, 1e-30]),
        torch.arange(0, 1 << 32, 65537, dtype=torch.int64).to(torch.int32).view(torch.float32)])
    dtype = getattr(torch, name)
    y = torch.empty(len(x), dtype=dtype)
    tilelab.compile(narrow(getattr(T, name), len(x)), target="cpu")(x, y)
    assert _same(y, x.to(dtype))


@pytest.mark.parametrize("name", FORMATS)
def test_float8_tiles_on_the_cpu(name):
    """Rounded into a float8 fragment, copied out, and computed with in float32."""
    dtype = getattr(torch, name)
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(3)) * 40
    y, z = torch.empty(M, N, dtype=dtype), torch.empty(M, N)
    tilelab.compile(quantize(getattr(T, name)), target="cpu")(x, y, z)
    expected = x.to(dtype)
    assert _same(y, expected)
    torch.testing.assert_close(z, 2 * expected.float())


@needs_nvcc
@pytest.mark.parametrize("name", FORMATS)
def test_float8_arithmetic_compiles_in_float32(name):
    source = tilelab.compile(quantize(getattr(T, name)), target="cuda:sm_90a").trace.code["cuda"]
    assert "((float)q_ptr[0]) * " in source


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_on_the_gpu(name):
    x = torch.randn(M, N, device="cuda") * 40  # well inside both formats' finite range
    y = torch.empty(M, N, device="cuda", dtype=getattr(torch, name))
    z = torch.empty(M, N, device="cuda")
    tilelab.compile(quantize(getattr(T, name)), target="cuda")(x, y, z)
    expected = x.to(getattr(torch, name))
    assert torch.equal(y.view(torch.uint8), expected.view(torch.uint8))
    torch.testing.assert_close(z, 2 * expected.float())


def widen_tiles(dtype):
    """float8 tiles widened to float16 by T.copy: shared to shared (every thread's share of
    the tile), then global to a fragment, as TileLang's fp8 MLA decode widens its KV."""
    @T.prim_func
    def kernel(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), T.float16),
               Z: T.Tensor((M, N), T.float16)):
        with T.Kernel(1, threads=128):
            q = T.alloc_shared((M, N), dtype)
            h = T.alloc_shared((M, N), T.float16)
            f = T.alloc_fragment((M, N), T.float16)
            T.copy(X, q)
            T.copy(q, h)
            T.copy(h, Y)
            T.copy(X, f)
            T.copy(f, Z)

    return kernel


@pytest.mark.parametrize("name", FORMATS)
def test_float8_tiles_widen_by_copy(name):
    x = (torch.randn(M, N) * 8).to(getattr(torch, name))
    kernel = tilelab.compile(widen_tiles(getattr(T, name)), target="cpu")
    y, z = torch.empty(M, N, dtype=torch.float16), torch.empty(M, N, dtype=torch.float16)
    kernel(x, y, z)
    torch.testing.assert_close(y, x.half(), rtol=0, atol=0)
    torch.testing.assert_close(z, x.half(), rtol=0, atol=0)
    if find_nvcc() is not None:  # one element a copy: nvcc took a vector cast of bytes
        source = tilelab.compile(widen_tiles(getattr(T, name)),
                                 target="cuda:sm_90a").get_kernel_source()
        assert "(uint4)(*(uint2*)" not in source


def gather_rows(dtype):
    """Blocks of 64 float8 rows from where `Idx` says (a block past X's end reads zeros), as
    DeepSeek's indexers gather key blocks by their top-k indices."""
    @T.prim_func
    def kernel(X: T.Tensor((256, N), dtype), Idx: T.Tensor((4,), T.int32),
               Y: T.Tensor((256, N), dtype)):
        with T.Kernel(4, threads=128) as bx:
            rows = T.alloc_shared((64, N), dtype)
            T.copy(X[Idx[bx] * 64:Idx[bx] * 64 + 64, :], rows)
            T.copy(rows, Y[bx * 64, 0])

    return kernel


def _gathered(x, index):
    out = torch.zeros(256, N, dtype=torch.uint8)
    for b, i in enumerate(index.tolist()):
        if 0 <= i * 64 < 256:
            out[b * 64:(b + 1) * 64] = x.view(torch.uint8)[i * 64:(i + 1) * 64].cpu()
    return out


@pytest.mark.parametrize("name", FORMATS)
def test_float8_rows_gathered_at_a_computed_start(name):
    """The copy cannot prove its rows inside X, so past the end it writes zeros: on the GPU
    a branch around each 16-byte vector (TVM's CUDA lowering selects at most 4 float8
    lanes; this kernel compiled for no GPU before)."""
    x = (torch.randn(256, N) * 8).to(getattr(torch, name))
    index = torch.tensor([3, 0, 7, 1], dtype=torch.int32)  # block 7 is past X's end
    y = torch.empty(256, N, dtype=getattr(torch, name))
    tilelab.compile(gather_rows(getattr(T, name)), target="cpu")(x, index, y)
    assert torch.equal(y.view(torch.uint8), _gathered(x, index))
    if find_nvcc() is not None:
        tilelab.compile(gather_rows(getattr(T, name)), target="cuda:sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("name", FORMATS)
def test_float8_rows_gathered_on_the_gpu(name):
    x = (torch.randn(256, N, device="cuda") * 8).to(getattr(torch, name))
    index = torch.tensor([3, 0, 7, 1], dtype=torch.int32, device="cuda")
    y = torch.empty(256, N, dtype=getattr(torch, name), device="cuda")
    tilelab.compile(gather_rows(getattr(T, name)), target="cuda")(x, index, y)
    assert torch.equal(y.view(torch.uint8).cpu(), _gathered(x, index))
