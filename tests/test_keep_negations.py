"""Integer negations reach ptxas in a form it does not fold into a min/max
(passes/keep_negations.py: ptxas of CUDA 12.9 to 13.3 drops the negation of the
second operand of sm_90's three-input integer min/max)."""

import sys
from pathlib import Path

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
REGRESSIONS = Path(__file__).parent / "difftest_regressions"


def negate(dtype, n, spelling):
    @T.prim_func
    def negated(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 256), threads=64) as bx:
            for i in T.Parallel(256):
                if bx * 256 + i < n:
                    if spelling == "minus":
                        B[bx * 256 + i] = -A[bx * 256 + i]
                    else:
                        B[bx * 256 + i] = 0 - A[bx * 256 + i]
    return negated


def negated_row_max(rows, cols):
    """Each row's max of -x, and of max(x, -x): three-input min/max on sm_90."""
    @T.prim_func
    def row_max(X: T.Tensor((rows, cols), T.int32), Y: T.Tensor((rows,), T.int32),
                Z: T.Tensor((rows,), T.int32)):
        with T.Kernel(T.ceildiv(rows, 16), threads=128) as bx:
            tile = T.alloc_shared((16, 64), T.int32)
            negated = T.alloc_fragment((16, 64), T.int32)
            mixed = T.alloc_fragment((16, 64), T.int32)
            best = T.alloc_fragment((16,), T.int32)
            T.copy(X[bx * 16, 0], tile)
            for i, j in T.Parallel(16, 64):
                negated[i, j] = -tile[i, j]
                mixed[i, j] = T.max(tile[i, j], -tile[i, j])
            T.reduce_max(negated, best, dim=1)
            T.copy(best, Y[bx * 16])
            T.reduce_max(mixed, best, dim=1)
            T.copy(best, Z[bx * 16])
    return row_max


def _body(kernel) -> str:
    return kernel.get_kernel_source().split('extern "C"')[-1]


@needs_nvcc
def test_the_reduction_of_a_negated_tile_negates_through_the_helper():
    sys.path.insert(0, str(REGRESSIONS))
    try:
        import reduce_max_of_shifted_int_rows as program
    finally:
        sys.path.remove(str(REGRESSIONS))
    body = _body(tilelab.compile(program.make(), target="cuda:sm_90a"))
    assert body.count("tl::negate(") == 8 and "* -1" not in body


@needs_nvcc
@pytest.mark.parametrize("dtype", [T.int8, T.int16, T.int32])
@pytest.mark.parametrize("spelling", ["minus", "zero_minus"])
def test_vector_negations_go_lane_by_lane(dtype, spelling):
    body = _body(tilelab.compile(negate(dtype, 1000, spelling), target="cuda:sm_90a"))
    assert body.count("tl::negate(") == 4  # one vectorized int4/short4/char4 store


@needs_nvcc
@pytest.mark.parametrize("dtype", [T.int64, T.float32, T.float16])
def test_other_types_keep_their_negation(dtype):
    assert "tl::negate" not in _body(tilelab.compile(negate(dtype, 1000, "minus"),
                                                    target="cuda:sm_90a"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32])
def test_negations_on_the_gpu(dtype):
    n = 1000  # a tail: 1000 is no multiple of the 256 of a block
    a = torch.randint(-100, 100, (n,), dtype=dtype, device="cuda")
    a[:2] = torch.iinfo(dtype).min  # -min wraps to min, as in C and torch
    for spelling in ("minus", "zero_minus"):
        b = torch.zeros_like(a)
        tilelab.compile(negate(getattr(T, str(dtype).split(".")[1]), n, spelling),
                        target="cuda")(a, b)
        assert torch.equal(b, -a)


@pytest.mark.gpu
def test_negated_row_maxima_on_the_gpu():
    rows, cols = 40, 64
    x = torch.randint(-4, 5, (rows, cols), dtype=torch.int32, device="cuda")
    y = torch.zeros(rows, dtype=torch.int32, device="cuda")
    z = torch.zeros_like(y)
    tilelab.compile(negated_row_max(rows, cols), target="cuda")(x, y, z)
    assert torch.equal(y, (-x).amax(1)) and torch.equal(z, x.abs().amax(1))
