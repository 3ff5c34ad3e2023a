"""Reductions across warps share one scratch tile (passes/lower_tile_ops_to_threads.py,
pooled_scratch): each warp leaves its partial results in shared memory for the others,
and a block's reductions take turns at one tile rather than keeping one each - a barrier
between one's reads and the next one's writes, traded for the bytes that a kernel near the
shared-memory limit lacks (TileLang's paged MLA decode, 1 KB over the 227 KB a block may
have with a tile per reduction)."""

import re

import numpy as np
import pytest

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

ROWS, COLS = 4, 1000  # a row spread over the 8 warps of the block; a tail past 992


def softmax_rows():
    """Row max, then row sum of the exponentials, each combined across the 8 warps."""
    @T.prim_func
    def kernel(X: T.Tensor((ROWS, COLS), T.float32), Y: T.Tensor((ROWS, COLS), T.float32)):
        with T.Kernel(1, threads=256):
            x = T.alloc_fragment((ROWS, 1024), T.float32)
            top = T.alloc_fragment((ROWS,), T.float32)
            total = T.alloc_fragment((ROWS,), T.float32)
            for i, j in T.Parallel(ROWS, 1024):
                x[i, j] = T.if_then_else(j < COLS, X[i, j], -T.infinity(T.float32))
            T.reduce_max(x, top, dim=1)
            for i, j in T.Parallel(ROWS, 1024):
                x[i, j] = T.exp(x[i, j] - top[i])
            T.reduce_sum(x, total, dim=1)
            for i, j in T.Parallel(ROWS, 1024):
                if j < COLS:
                    Y[i, j] = x[i, j] / total[i]

    return kernel


def reference(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_on_the_cpu():
    kernel = tilelab.compile(softmax_rows(), target="cpu")
    x = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    y = np.zeros_like(x)
    kernel(x, y)
    np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-7)


@needs_nvcc
def test_the_reductions_share_one_scratch_tile():
    kernel = tilelab.compile(softmax_rows(), target="cuda:sm_90a")
    lowered = kernel.trace.ir_after("tilelab.LowerTileOpsToThreads")
    tiles = re.findall(r"reduce_scratch\w* = T\.alloc_buffer\((\(\d+,\))", lowered)
    assert tiles == ["(32,)"]  # one tile: 8 warps x 4 rows, used by the max and the sum


@pytest.mark.gpu
def test_on_the_gpu():
    import torch

    kernel = tilelab.compile(softmax_rows(), target="cuda")
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(ROWS, COLS, device="cuda") * 4
        y = torch.zeros_like(x)
        kernel(x, y)
        torch.testing.assert_close(y, torch.softmax(x, 1), rtol=1e-5, atol=1e-7)
