"""A fragment written in a T.Parallel loop at fewer dimensions than the loop's.

`acc[i] += s[i, j]` inside `T.Parallel(M, N)` sums each row on the CPU, which runs the
iterations one after another. On the GPU the loop's iterations are dealt to threads,
and where the threads share the iterations that write one element, each keeps its own
copy of it: a quarter of the row in each of four threads, one of them stored. That was
a silent wrong answer on the GPU; the CUDA compile now refuses it at the fragment's line
(passes/infer_layouts.py, `_check_copies_agree`), and writes whose copies agree still
compile: every thread that keeps the element runs every iteration that writes it, or
every iteration writes the same value.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def row_sums_after_gemm(A, B, how: str = "accumulate"):
    """The rows of A @ B summed: by `acc[i] += s[i, j]` over the accumulator's columns,
    which the GEMM's layout deals to four threads a row (refused on CUDA), or by
    T.reduce_sum; `broadcast` writes a value every iteration agrees on."""
    A: T.Tensor((64, 64), T.float16)
    B: T.Tensor((64, 64), T.float16)
    out = T.empty((64,), T.float32)
    with T.Kernel(1, threads=128):
        a_s = T.alloc_shared((64, 64), T.float16)
        b_s = T.alloc_shared((64, 64), T.float16)
        s = T.alloc_fragment((64, 64), T.float32)
        acc = T.alloc_fragment((64,), T.float32)
        T.copy(A, a_s)
        T.copy(B, b_s)
        T.clear(s)
        T.gemm(a_s, b_s, s)
        T.clear(acc)
        if how == "accumulate":
            for i, j in T.Parallel(64, 64):
                acc[i] += s[i, j]
        elif how == "reduce":
            T.reduce_sum(s, acc, dim=1, clear=False)
        else:
            T.reduce_sum(s, acc, dim=1)
            for i, _j in T.Parallel(64, 64):
                acc[i] = acc[i] * 0 + s[i, 0] * 0 + 2.0 if how == "self" else 2.0
        T.copy(acc, out)
    return out


def _inputs(device="cpu"):
    torch.manual_seed(0)
    return (torch.randn(64, 64, dtype=torch.float16, device=device),
            torch.randn(64, 64, dtype=torch.float16, device=device))


def test_the_cpu_sums_the_rows_either_way():
    a, b = _inputs()
    expected = (a.float() @ b.float()).sum(dim=1)
    for how in ("accumulate", "reduce"):
        torch.testing.assert_close(row_sums_after_gemm(a, b, how=how), expected,
                                   rtol=1e-4, atol=1e-3)


@needs_nvcc
def test_cuda_refuses_copies_that_would_disagree_at_the_fragments_line():
    a, b = _inputs()
    with pytest.raises(TileLabError, match="each would keep its own part") as error:
        row_sums_after_gemm.compile(a, b, how="accumulate", target="cuda:sm_90a")
    assert error.value.location.source_line.strip() == "acc = T.alloc_fragment((64,), T.float32)"
    assert "T.reduce_sum" in str(error.value)


@needs_nvcc
@pytest.mark.parametrize("how", ["reduce", "broadcast", "self"])
def test_copies_that_agree_compile(how):
    """T.reduce_sum combines the row across its threads; a value no iteration changes
    (2.0) reaches every copy. A value that reads the element itself (`self`) is refused:
    each thread would apply it as often as it runs iterations."""
    a, b = _inputs()
    if how == "self":
        with pytest.raises(TileLabError, match="each would keep its own part"):
            row_sums_after_gemm.compile(a, b, how=how, target="cuda:sm_90a")
        return
    row_sums_after_gemm.compile(a, b, how=how, target="cuda:sm_90a")


@pytest.mark.gpu
def test_the_gpu_sums_the_rows_with_reduce_sum():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b = _inputs("cuda")
    torch.testing.assert_close(row_sums_after_gemm(a, b, how="reduce", target="cuda"),
                               (a.float() @ b.float()).sum(dim=1), rtol=1e-4, atol=1e-3)
