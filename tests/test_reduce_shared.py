"""T.reduce_* of a tile in shared memory: the CPU always ran it; CUDA refused it ("works on
fragments"). Now each result element is folded by one thread, serially along the reduced
dimension, into a fragment (the thread that keeps the element) or a shared tile (dealt)."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

M, N = 40, 72  # rows past a warp's 32; a column count that is no power of two

REFERENCE = {
    "sum": lambda x, d: x.sum(d), "max": lambda x, d: x.amax(d), "min": lambda x, d: x.amin(d),
    "abssum": lambda x, d: x.abs().sum(d), "absmax": lambda x, d: x.abs().amax(d),
}


def reduce_from_shared(kind: str, result: str, dim: int, clear: bool, dtype=T.float32):
    """Rows (dim=1) or columns (dim=0) of an M x N tile copied into shared memory, folded
    into a fragment or a shared tile; with clear=False on top of 1.0 everywhere."""
    out = (M,) if dim == 1 else (N,)

    @T.prim_func
    def kernel(X: T.Tensor((M, N), dtype), Y: T.Tensor(out, T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((M, N), dtype)
            folded = T.alloc_fragment(out, T.float32) if result == "fragment" else \
                T.alloc_shared(out, T.float32)
            T.copy(X, tile)
            if not clear:
                T.fill(folded, 1.0)
            getattr(T, f"reduce_{kind}")(tile, folded, dim=dim, clear=clear)
            T.copy(folded, Y)

    return kernel


def expected(kind, x, dim, clear):
    value = REFERENCE[kind](x.float(), dim)
    if clear:
        return value
    return value + 1.0 if kind in ("sum", "abssum") else \
        torch.minimum(value, torch.ones_like(value)) if kind == "min" else \
        torch.maximum(value, torch.ones_like(value))


CASES = [(kind, result, dim, clear) for kind in REFERENCE for result in ("fragment", "shared")
         for dim in (0, 1) for clear in (True, False)]


@pytest.mark.parametrize("kind, result, dim, clear", CASES[::3])
def test_on_the_cpu(kind, result, dim, clear):
    x = torch.randn(M, N)
    y = tilelab.compile(reduce_from_shared(kind, result, dim, clear), out_idx=[1],
                        target="cpu")(x)
    torch.testing.assert_close(y, expected(kind, x, dim, clear), rtol=1e-5, atol=1e-5)


@needs_nvcc
@pytest.mark.parametrize("result", ["fragment", "shared"])
def test_compiles_for_cuda_with_one_thread_per_result(result):
    trace = tilelab.compile(reduce_from_shared("sum", result, 1, True), out_idx=[1],
                            target="cuda:sm_90a").trace
    source = trace.code["cuda"]
    assert "shfl" not in source  # no partials to combine: one thread folds a whole row
    assert trace.resources["spill_stores_bytes"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("kind, result, dim, clear", CASES)
def test_on_the_gpu(kind, result, dim, clear):
    x = torch.randn(M, N, device="cuda").half()
    y = tilelab.compile(reduce_from_shared(kind, result, dim, clear, T.float16), out_idx=[1],
                        target="cuda")(x)
    torch.testing.assert_close(y, expected(kind, x, dim, clear), rtol=1e-4, atol=1e-4)
