"""A fragment written in a T.Parallel loop at fewer dimensions than the loop's.

`acc[i] += s[i, j]` inside `T.Parallel(M, N)` sums each row on the CPU, which runs the
iterations one after another. On the GPU the loop's iterations are dealt to threads,
and where the threads share the iterations that write one element, each keeps its own
copy of it: a quarter of the row in each of four threads, one of them stored - a silent
wrong answer on the H200 until the twenty-second session. Now such a loop that folds
into the fragment (`+`, max, min) is done as what it is, a T.reduce of a register tile
of its values (passes/spill_fragments.py, `as_reduction`); any other write whose
copies would disagree is refused at the fragment's line
(passes/infer_layouts.py, `_check_copies_agree`); writes whose copies agree compile as
they are.
"""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError, TileLabWarning

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def row_sums_after_gemm(A, B, how: str = "accumulate"):
    """The rows of A @ B folded over the accumulator's columns, which the GEMM's layout
    deals to four threads a row: by `acc[i] += s[i, j]` (or max) in T.Parallel, or by
    T.reduce_sum; `broadcast` writes a value every iteration agrees on; `self` and
    `last` write values the threads' copies would disagree on."""
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
        elif how == "maximum":
            for i, j in T.Parallel(64, 64):
                acc[i] = T.max(acc[i], s[i, j])
        elif how == "last":
            for i, j in T.Parallel(64, 64):
                acc[i] = s[i, j]
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


def _expected(how, a, b):
    product = a.float() @ b.float()
    if how == "maximum":
        return product.max(dim=1).values.clamp(min=0)  # acc starts at 0
    return product.sum(dim=1)


def test_the_cpu_folds_the_rows_as_written():
    a, b = _inputs()
    for how in ("accumulate", "maximum", "reduce"):
        torch.testing.assert_close(row_sums_after_gemm(a, b, how=how), _expected(how, a, b),
                                   rtol=1e-4, atol=1e-3)


@needs_nvcc
@pytest.mark.parametrize("how", ["accumulate", "maximum"])
def test_cuda_makes_a_fold_over_shared_iterations_a_reduction(how):
    a, b = _inputs()
    with pytest.warns(TileLabWarning, match="done as a T.reduce of a register tile"):
        kernel = row_sums_after_gemm.compile(a, b, how=how, target="cuda:sm_90a")
    source = kernel.get_kernel_source()
    assert "acc_parts" in source and "tl::shfl_xor" in source  # the threads' parts combined


@needs_nvcc
@pytest.mark.parametrize("how", ["self", "last"])
def test_cuda_refuses_copies_that_would_disagree_at_the_fragments_line(how):
    """A value that reads the element itself (each thread would apply it as often as it
    runs iterations) or differs between the iterations (the last one wins on the CPU)."""
    a, b = _inputs()
    with pytest.raises(TileLabError, match="each would keep its own part") as error:
        row_sums_after_gemm.compile(a, b, how=how, target="cuda:sm_90a")
    assert error.value.location.source_line.strip() == \
        "acc = T.alloc_fragment((64,), T.float32)"
    assert "T.reduce_sum" in str(error.value)


@needs_nvcc
@pytest.mark.parametrize("how", ["reduce", "broadcast"])
def test_copies_that_agree_compile_as_they_are(how):
    a, b = _inputs()
    source = row_sums_after_gemm.compile(a, b, how=how, target="cuda:sm_90a") \
        .get_kernel_source()
    assert "acc_parts" not in source


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["accumulate", "maximum", "reduce"])
def test_the_gpu_folds_the_rows(how):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b = _inputs("cuda")
    torch.testing.assert_close(row_sums_after_gemm(a, b, how=how, target="cuda"),
                               _expected(how, a, b), rtol=1e-4, atol=1e-3)


@tilelab.jit
def gemv_with_a_reducer(a, x, block_m: int = 128, block_n: int = 128, threads: int = 256):
    """TileLang's gemv_alloc_reducer: o = a @ x, each block's rows folded over pipelined
    column tiles into a T.alloc_reducer."""
    M, N = T.const("M, N")
    a: T.Tensor((M, N), T.float16)
    x: T.Tensor((N,), T.float16)
    o = T.empty((M,), T.float16)
    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
        o_reducer = T.alloc_reducer(block_m, T.float32, replication="all")
        T.clear(o_reducer)
        for bn in T.Pipelined(T.ceildiv(N, block_n), num_stages=2):
            a_s = T.alloc_shared((block_m, block_n), T.float16)
            T.copy(a[bm * block_m, bn * block_n], a_s)
            a_f = T.alloc_fragment((block_m, block_n), T.float16)
            T.copy(a_s, a_f)
            x_f = T.alloc_fragment(block_n, T.float16)
            T.copy(x[bn * block_n], x_f)
            for i, j in T.Parallel(block_m, block_n):
                o_reducer[i] += a_f[i, j] * x_f[j]
        T.finalize_reducer(o_reducer)
        T.copy(o_reducer, o[bm * block_m])
    return o


def _gemv_inputs(device="cpu"):
    torch.manual_seed(1)
    return (torch.randn(200, 384, dtype=torch.float16, device=device),
            torch.randn(384, dtype=torch.float16, device=device))


def test_a_reducer_folds_on_the_cpu():
    a, x = _gemv_inputs()
    torch.testing.assert_close(gemv_with_a_reducer(a, x).float(), a.float() @ x.float(),
                               rtol=1e-2, atol=5e-2)


@needs_nvcc
def test_a_reducer_is_a_reduction_on_cuda():
    a, x = _gemv_inputs()
    with pytest.warns(TileLabWarning, match="o_reducer_parts"):
        gemv_with_a_reducer.compile(a, x, target="cuda:sm_90a")


@pytest.mark.gpu
def test_a_reducer_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, x = _gemv_inputs("cuda")
    torch.testing.assert_close(gemv_with_a_reducer(a, x, target="cuda").float(),
                               a.float() @ x.float(), rtol=1e-2, atol=5e-2)



REGRESSIONS = Path(__file__).parent / "difftest_regressions"


@needs_nvcc
@pytest.mark.parametrize("name", ["fold_result_read_in_another_layout",
                                  "reduce_into_a_fold_results_layout"])
def test_a_reduction_into_a_layout_other_uses_gave_compiles(name, monkeypatch, tmp_path):
    """The destination's layout came from another use and does not keep each row where
    its parts are: the results move to it through shared memory (ops/reduce.py,
    move_through_shared). Both programs failed to compile for CUDA before; the difftest
    regressions run them against the CPU on a GPU."""
    import tilelab.ops.reduce as reduce_module

    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path))  # compiled here, not found cached
    moved = []
    original = reduce_module.move_through_shared
    monkeypatch.setattr(reduce_module, "move_through_shared",
                        lambda *args: moved.append(1) or original(*args))
    module = runpy.run_path(str(REGRESSIONS / f"{name}.py"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TileLabWarning)
        tilelab.compile(module["make"](), target="cuda:sm_90a")
    assert moved
