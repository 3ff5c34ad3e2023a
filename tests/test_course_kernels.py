"""The course kernels of `examples/` against PyTorch, on the CPU backend.

Every test draws fresh random inputs and compares with a PyTorch computation
on the same inputs, once for shapes that are multiples of the block sizes and
once with partial tiles at the edges (tails), for each dtype a kernel claims.
"""

from __future__ import annotations

import pytest
import torch

import tilelab.language as T
from examples.flash_attention import flash_attention_kernel
from examples.flash_attention import reference as attention_reference
from examples.gemm import gemm_kernel
from examples.gemm import reference as gemm_reference
from examples.gemm_bias_relu import gemm_bias_relu_kernel
from examples.gemm_bias_relu import reference as gemm_bias_relu_reference
from examples.layer_norm import layer_norm_in_registers_kernel, layer_norm_kernel
from examples.layer_norm import reference as layer_norm_reference
from examples.online_softmax import online_softmax_kernel
from examples.rms_norm import reference as rms_norm_reference
from examples.rms_norm import rms_norm_kernel
from examples.row_sum import row_sum_kernel
from examples.softmax import softmax_kernel
from examples.vector_add import vector_add_kernel

FP16 = {"rtol": 1e-2, "atol": 1e-2}


@pytest.mark.parametrize("n, block_size", [(2048, 256), (1000, 256), (1, 128), (130, 64)])
def test_vector_add(n, block_size):
    torch.manual_seed(n)
    a, b = torch.randn(n), torch.randn(n)
    torch.testing.assert_close(vector_add_kernel(a, b, block_size=block_size), a + b)


@pytest.mark.parametrize("m, n, block_m", [(32, 64, 1), (32, 64, 8), (29, 50, 8), (5, 3, 4)])
def test_row_sum(m, n, block_m):
    torch.manual_seed(m * n)
    x = torch.randn(m, n)
    torch.testing.assert_close(row_sum_kernel(x, block_m=block_m), x.sum(dim=-1),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m, n, block_m", [(32, 128, 1), (32, 128, 4), (21, 77, 4), (1, 5, 2)])
def test_softmax(m, n, block_m):
    torch.manual_seed(m + n)
    x = torch.randn(m, n, dtype=torch.float16) * 4
    expected = torch.softmax(x.float(), dim=-1).half()
    torch.testing.assert_close(softmax_kernel(x, block_m=block_m), expected, **FP16)


@pytest.mark.parametrize("m, n, block_m, block_n", [
    (8, 512, 1, 128),    # whole tiles
    (8, 512, 4, 64),
    (9, 300, 4, 128),    # partial last tile of columns and partial last block of rows
    (2, 7, 1, 16),       # a row shorter than one tile
])
def test_online_softmax(m, n, block_m, block_n):
    torch.manual_seed(m * 1000 + n)
    # negative rows: zero-filled columns past the end would dominate the sum if not masked
    x = torch.randn(m, n, dtype=torch.float16) * 2 - 4
    x[0, -1] = 6.0  # the row maximum sits in the last (possibly partial) tile
    expected = torch.softmax(x.float(), dim=-1).half()
    actual = online_softmax_kernel(x, block_m=block_m, block_n=block_n)
    torch.testing.assert_close(actual, expected, **FP16)


GEMM_DTYPES = [(torch.float16, T.float16, 1e-2), (torch.bfloat16, T.bfloat16, 1e-2)]
GEMM_SHAPES = [(64, 64, 64), (128, 64, 96), (70, 100, 45), (1, 33, 17)]


@pytest.mark.parametrize("torch_dtype, dtype, tol", GEMM_DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("m, n, k", GEMM_SHAPES)
def test_gemm(m, n, k, torch_dtype, dtype, tol):
    torch.manual_seed(m * n + k)
    a = torch.randn(m, k, dtype=torch_dtype)
    b = torch.randn(k, n, dtype=torch_dtype)
    actual = gemm_kernel(a, b, block_m=32, block_n=32, block_k=16, input_dtype=dtype)
    assert actual.dtype == torch_dtype
    torch.testing.assert_close(actual, gemm_reference(a, b), rtol=tol, atol=tol)


def test_gemm_tutorial_blocks_compiled_by_size():
    """The tutorial's call: `.compile(M=..., N=..., K=...)` with 128×128×32 blocks, then run."""
    torch.manual_seed(7)
    m, n, k = 130, 140, 40
    kernel = gemm_kernel.compile(M=m, N=n, K=k, block_m=128, block_n=128, block_k=32)
    a = torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(k, n, dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), gemm_reference(a, b), **FP16)


@pytest.mark.parametrize("torch_dtype, dtype, tol", GEMM_DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("m, n, k", [(64, 64, 32), (50, 70, 40)])
def test_gemm_bias_relu(m, n, k, torch_dtype, dtype, tol):
    torch.manual_seed(m + n * k)
    a = torch.randn(m, k, dtype=torch_dtype)
    b = torch.randn(k, n, dtype=torch_dtype)
    bias = torch.randn(n, dtype=torch_dtype)
    actual = gemm_bias_relu_kernel(a, b, bias, block_m=32, block_n=32, block_k=16,
                                   input_dtype=dtype)
    expected = gemm_bias_relu_reference(a, b, bias)
    assert (expected == 0).any() and (expected > 0).any()  # ReLU both clips and passes
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("kernel", [layer_norm_kernel, layer_norm_in_registers_kernel],
                         ids=["through_shared", "in_registers"])
@pytest.mark.parametrize("m, n, block_m", [(32, 128, 1), (32, 128, 4), (13, 96, 4), (3, 40, 8)])
def test_layer_norm(m, n, block_m, kernel):
    torch.manual_seed(m * 3 + n)
    x = torch.randn(m, n, dtype=torch.float16) + 0.5
    gamma = torch.randn(n, dtype=torch.float16)
    beta = torch.randn(n, dtype=torch.float16)
    actual = kernel(x, gamma, beta, eps=1e-5, block_m=block_m)
    torch.testing.assert_close(actual, layer_norm_reference(x, gamma, beta, eps=1e-5), **FP16)


@pytest.mark.parametrize("m, n, block_m", [(32, 128, 1), (32, 128, 8), (19, 72, 8)])
def test_rms_norm(m, n, block_m):
    torch.manual_seed(m * 5 + n)
    x = torch.randn(m, n, dtype=torch.float16)
    weight = torch.randn(n, dtype=torch.float16)
    actual = rms_norm_kernel(x, weight, eps=1e-6, block_m=block_m)
    torch.testing.assert_close(actual, rms_norm_reference(x, weight, eps=1e-6), **FP16)


@pytest.mark.parametrize("batch, sequence, dimension", [
    (1, 128, 64),    # whole 64×64 tiles
    (2, 100, 64),    # partial last query tile and last key tile
    (1, 128, 128),
    (2, 100, 128),
])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention(batch, sequence, dimension, causal):
    torch.manual_seed(batch * sequence + dimension)
    heads = 2
    shape = (batch, heads, sequence, dimension)
    q, k, v = (torch.randn(shape, dtype=torch.float16) for _ in range(3))
    kernel = flash_attention_kernel(batch, heads, sequence, dimension, causal=causal)
    actual = kernel(q, k, v)
    assert actual.shape == shape and actual.dtype == torch.float16
    torch.testing.assert_close(actual, attention_reference(q, k, v, causal),
                               rtol=2e-2, atol=2e-2)


def test_flash_attention_smaller_tiles_than_sequence_blocks():
    """block_m ≠ block_n: a causal query tile spans two key tiles, one of them partly masked."""
    torch.manual_seed(11)
    batch, heads, sequence, dimension = 1, 2, 90, 64
    q, k, v = (torch.randn(batch, heads, sequence, dimension, dtype=torch.float16)
               for _ in range(3))
    kernel = flash_attention_kernel(batch, heads, sequence, dimension, block_m=64, block_n=32,
                                    causal=True)
    torch.testing.assert_close(kernel(q, k, v), attention_reference(q, k, v, True),
                               rtol=2e-2, atol=2e-2)
