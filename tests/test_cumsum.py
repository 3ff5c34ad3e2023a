"""T.cumsum, the primitive added as one module (tilelab/ops/cumsum.py), against torch.cumsum.

On the CPU for every dimension, both directions, in place and into a second tile, at
shapes with tails; compiled for CUDA (nvcc, no GPU needed) and run on a GPU when there is one.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc


@tilelab.jit
def cumsum_tiles(X, block_m: int = 16, dim: int = 1, reverse: bool = False,
                 in_place: bool = True):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        tile = T.alloc_shared((block_m, N), T.float32)
        sums = T.alloc_shared((block_m, N), T.float32)
        T.copy(X[block * block_m, 0], tile)
        if in_place:
            T.cumsum(tile, dim=dim, reverse=reverse)
            T.copy(tile, Y[block * block_m, 0])
        else:
            T.cumsum(tile, sums, dim=dim, reverse=reverse)
            T.copy(sums, Y[block * block_m, 0])
    return Y


def reference(x: torch.Tensor, block_m: int, dim: int, reverse: bool) -> torch.Tensor:
    """torch.cumsum within each block of block_m rows (dim 0 scans inside a block)."""
    out = []
    for part in x.split(block_m, dim=0):
        source = part.flip(dim) if reverse else part
        sums = source.cumsum(dim)
        out.append(sums.flip(dim) if reverse else sums)
    return torch.cat(out)


CASES = [(dim, reverse, in_place) for dim in (0, 1) for reverse in (False, True)
         for in_place in (True, False)]


@pytest.mark.parametrize("dim, reverse, in_place", CASES)
def test_cumsum_matches_torch_on_the_cpu(dim, reverse, in_place):
    x = torch.randn(37, 50)  # 37 rows: the last block of 16 is partial
    y = cumsum_tiles(x, dim=dim, reverse=reverse, in_place=in_place)
    torch.testing.assert_close(y, reference(x, 16, dim, reverse), rtol=1e-5, atol=1e-4)


def test_cumsum_checks_its_arguments():
    with pytest.raises(tilelab.TileLabError, match="same shape") as info:
        @T.prim_func
        def wrong(X: T.Tensor((8, 8), T.float32)):
            with T.Kernel(1, threads=32):
                a = T.alloc_shared((8, 8), T.float32)
                b = T.alloc_shared((8, 4), T.float32)
                T.cumsum(a, b)
    assert "T.cumsum(a, b)" in str(info.value)


@pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
def test_cumsum_compiles_for_cuda_with_barriers_around_it():
    kernel = cumsum_tiles.compile(M=37, N=50, dim=1, target="cuda:sm_90a")
    source = kernel.trace.code["cuda"]
    assert source.count("__syncthreads()") >= 2  # after the tile is loaded, before it is read
    assert isinstance(kernel.cubin, bytes) and kernel.cubin


@T.prim_func
def cumsum_in_registers(X: T.Tensor((64,), T.float32)):
    """An in-place scan of a fragment: the CPU runs it as written; on the GPU the scan
    walks shared tiles, so the fragment is staged through one (passes/stage_operands.py)."""
    with T.Kernel(1, threads=32):
        values = T.alloc_fragment((64,), T.float32)
        T.copy(X, values)
        T.cumsum(values)
        T.copy(values, X)


def test_cumsum_of_a_fragment_on_the_cpu():
    x = torch.randn(64)
    expected = x.cumsum(0)
    tilelab.compile(cumsum_in_registers, target="cpu")(x)
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
def test_cumsum_of_a_fragment_is_staged_through_shared_tiles_on_the_gpu():
    trace = tilelab.compile(cumsum_in_registers, target="cuda:sm_90a").trace
    staged = next(p for p in trace.passes if p.name == "tilelab.StageOperands")
    assert staged.changed
    assert "T.tile.cumsum(values_in_shared[0:64], values_in_shared_[0:64]" in staged.ir


@pytest.mark.gpu
def test_cumsum_of_a_fragment_on_the_gpu():
    x = torch.randn(64, device="cuda")
    expected = x.cumsum(0)
    tilelab.compile(cumsum_in_registers, target="cuda")(x)
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dim, reverse, in_place", CASES)
def test_cumsum_matches_torch_on_the_gpu(dim, reverse, in_place):
    x = torch.randn(37, 50, device="cuda")
    y = cumsum_tiles(x, dim=dim, reverse=reverse, in_place=in_place)
    torch.testing.assert_close(y, reference(x, 16, dim, reverse), rtol=1e-5, atol=1e-4)
