"""Tensor views (`T.Tensor(shape, dtype, X.data)`) and T.im2col: convolution as a GEMM.

A view is another shape over a kernel tensor's memory, as `X.view(shape)` in torch:
tile ops and indexing use it like any tensor, TMA describes the view's own shape over
X's memory, and the kernel's parameters stay the program's tensors
(passes/tensor_views.py). T.im2col fills a tile with a block of the im2col matrix of
an NHWC image, so that a convolution is a pipelined GEMM (TileLang's
examples/convolution).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def rows_of_64(X, block: int = 64):
    """Doubles X, seen as rows of 64 elements (read and written through views)."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float16)
    Y = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(M * N // 64, block), threads=128) as bx:
        x_rows = T.Tensor((M * N // 64, 64), T.float16, X.data)
        y_rows = T.Tensor((M * N // 64, 64), T.float16, Y.data)
        tile = T.alloc_shared((block, 64), T.float16)
        T.copy(x_rows[bx * block, 0], tile)
        for i, j in T.Parallel(block, 64):
            tile[i, j] = tile[i, j] * 2
        T.copy(tile, y_rows[bx * block, 0])
    return Y


@tilelab.jit
def plus_mirror(X):
    """X plus X with each row reversed: the tensor and a flat view of it, side by side."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float16)
    Y = T.empty((M, N), T.float16)
    with T.Kernel(M, threads=128) as bx:
        flat = T.Tensor((M * N,), T.float16, X.data)
        for j in T.Parallel(N):
            Y[bx, j] = X[bx, j] + flat[bx * N + (N - 1 - j)]
    return Y


@tilelab.jit
def conv2d(data, weight, stride: int = 1, dilation: int = 1, pad: int = 1,
           block_m: int = 64, block_n: int = 64, block_k: int = 32):
    """NHWC convolution as a GEMM: im2col rows of the image times the flattened filter."""
    N, C, H, W, F, K = T.const("N, C, H, W, F, K")
    OH = (H + 2 * pad - dilation * (K - 1) - 1) // stride + 1
    OW = (W + 2 * pad - dilation * (K - 1) - 1) // stride + 1
    data: T.Tensor((N, H, W, C), T.float16)
    weight: T.Tensor((K, K, C, F), T.float16)
    out = T.empty((N, OH, OW, F), T.float16)
    with T.Kernel(T.ceildiv(F, block_n), T.ceildiv(N * OH * OW, block_m), threads=128) as (
            bx, by):
        a_shared = T.alloc_shared((block_m, block_k), T.float16)
        b_shared = T.alloc_shared((block_k, block_n), T.float16)
        acc = T.alloc_fragment((block_m, block_n), T.float32)
        weight_rows = T.Tensor((K * K * C, F), T.float16, weight.data)
        out_rows = T.Tensor((N * OH * OW, F), T.float16, out.data)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K * K * C, block_k), num_stages=3):
            T.im2col(data, a_shared, by, k, K, stride, dilation, pad)
            T.copy(weight_rows[k * block_k, bx * block_n], b_shared)
            T.gemm(a_shared, b_shared, acc)
        T.copy(acc, out_rows[by * block_m, bx * block_n])
    return out


def _conv_reference(x, w, stride, dilation, pad):
    return F.conv2d(x.permute(0, 3, 1, 2).float(), w.permute(3, 2, 0, 1).float(),
                    stride=stride, padding=pad, dilation=dilation).permute(0, 2, 3, 1)


CONVS = [(2, 16, 9, 11, 40, 3, 1, 1, 1),  # N C H W F K stride dilation pad: tails everywhere
         (1, 8, 13, 10, 24, 3, 2, 2, 2),
         (3, 32, 8, 8, 64, 1, 1, 1, 0)]


def test_views_read_and_write_the_tensors_memory():
    torch.manual_seed(0)
    x = torch.randn(96, 256).half()
    torch.testing.assert_close(rows_of_64(x, target="cpu"), x * 2)
    torch.testing.assert_close(plus_mirror(x, target="cpu"), x + x.flip(1))


@pytest.mark.parametrize("sizes", CONVS)
def test_im2col_makes_a_convolution_a_gemm(sizes):
    n, c, h, w, f, k, stride, dilation, pad = sizes
    torch.manual_seed(1)
    x, weight = torch.randn(n, h, w, c).half(), torch.randn(k, k, c, f).half()
    out = conv2d(x, weight, stride, dilation, pad, target="cpu")
    torch.testing.assert_close(out.float(), _conv_reference(x, weight, stride, dilation, pad),
                               rtol=2e-2, atol=5e-2)


@needs_nvcc
def test_the_kernel_takes_the_tensors_not_their_views():
    x = torch.empty(96, 256, dtype=torch.float16, device="meta")
    for kernel in (rows_of_64, plus_mirror):
        source = kernel.compile(x, target="cuda:sm_90a").get_kernel_source()
        signature = next(line for line in source.splitlines() if "__global__" in line)
        assert signature.count("X_ptr") == 1 and signature.count("Y_ptr") == 1


@needs_nvcc
def test_tma_describes_the_views_shape_over_the_tensors_memory():
    kernel = conv2d.compile(torch.empty(2, 32, 32, 64, dtype=torch.float16, device="meta"),
                            torch.empty(3, 3, 64, 128, dtype=torch.float16, device="meta"),
                            target="cuda:sm_90a")
    (descriptor,) = kernel.launch["tensor_maps"]
    assert descriptor["tensor"] == 1  # the weight tensor, the program's second
    assert descriptor["view"] == "weight_rows" and descriptor["shape"] == [3 * 3 * 64, 128]


def test_a_view_must_be_of_a_kernel_tensor_and_fit_it():
    @tilelab.jit
    def too_big(X):
        X: T.Tensor((64,), T.float32)
        Y = T.empty((64,), T.float32)
        with T.Kernel(1, threads=64) as _:
            wide = T.Tensor((128,), T.float32, X.data)
            for i in T.Parallel(64):
                Y[i] = wide[i]
        return Y

    @tilelab.jit
    def other_dtype(X):
        X: T.Tensor((64,), T.float32)
        Y = T.empty((64,), T.float32)
        with T.Kernel(1, threads=64) as _:
            halves = T.Tensor((128,), T.float16, X.data)
            for i in T.Parallel(64):
                Y[i] = halves[i]
        return Y

    @tilelab.jit
    def of_a_tile(X):
        X: T.Tensor((64,), T.float32)
        Y = T.empty((64,), T.float32)
        with T.Kernel(1, threads=64) as _:
            tile = T.alloc_shared((64,), T.float32)
            flat = T.Tensor((64,), T.float32, tile.data)
            for i in T.Parallel(64):
                Y[i] = flat[i] + X[i]
        return Y

    x = torch.randn(64)
    for kernel, words in ((too_big, "holds 128 elements; X has 64"),
                          (other_dtype, "must have its dtype"),
                          (of_a_tile, "a kernel tensor's `.data`")):
        with pytest.raises(TileLabError, match=words) as caught:
            kernel(x, target="cpu")
        assert "test_tensor_views.py" in str(caught.value)  # at the user's line


@pytest.mark.gpu
def test_views_and_im2col_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    torch.manual_seed(2)
    x = torch.randn(96, 256, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(rows_of_64(x), x * 2)
    torch.testing.assert_close(plus_mirror(x), x + x.flip(1))
    for n, c, h, w, f, k, stride, dilation, pad in CONVS + [(4, 64, 30, 30, 128, 3, 1, 1, 1)]:
        data = torch.randn(n, h, w, c, dtype=torch.float16, device="cuda")
        weight = torch.randn(k, k, c, f, dtype=torch.float16, device="cuda")
        out = conv2d(data, weight, stride, dilation, pad)
        torch.testing.assert_close(out.float(), _conv_reference(data, weight, stride, dilation,
                                                                pad), rtol=2e-2, atol=5e-2)
