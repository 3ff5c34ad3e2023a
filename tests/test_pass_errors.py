"""Errors raised inside a pass point at the tile op the user wrote (its line, a caret).

Each tile op carries its source location (`loc` in the IR), so a pass that rejects
an op - layout inference, the thread lowering - names that line rather than the
kernel's `def`. Compiled for CUDA: nothing is launched, and the errors come before nvcc.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tilelab
import tilelab.language as T
from tests.source_lines import line_of

THIS_FILE = Path(__file__).resolve()
LINES = THIS_FILE.read_text().splitlines()


def unsplittable_gemm():
    @T.prim_func
    def kernel(A: T.Tensor((24, 32), T.float16), B: T.Tensor((32, 24), T.float16),
               C: T.Tensor((24, 24), T.float32)):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((24, 32), T.float16)
            b = T.alloc_shared((32, 24), T.float16)
            acc = T.alloc_fragment((24, 24), T.float32)
            T.copy(A, a)
            T.copy(B, b)
            T.clear(acc)
            T.gemm(a, b, acc)  # @layout-error
            T.copy(acc, C)

    return kernel


def reduce_into_a_layout_that_does_not_line_up():
    """The result's annotated layout keeps row i on thread 127 - i alone, not on the
    threads that hold the row's parts (threads 0-63 hold none of it): the sums move there
    through shared memory (ops/reduce.py, move_through_shared)."""
    @T.prim_func
    def kernel(X: T.Tensor((64, 64), T.float32), Y: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((64, 64), T.float32)
            sums = T.alloc_fragment((64,), T.float32)
            T.annotate_layout({sums: T.Fragment((64,), forward_thread_fn=lambda i: 127 - i,
                                                forward_index_fn=lambda i: 0)})
            T.copy(X, tile)
            T.reduce_sum(tile, sums, dim=1)  # @lowering-error
            T.copy(sums, Y)

    return kernel


def refuse_the_move(monkeypatch):
    """The thread lowering of T.reduce_* rejects the program, as it did before the sums
    could move between layouts (an error raised inside an op's lowering, where the op's
    line must still be found)."""
    import tilelab.ops.reduce as reduce_module

    def refuse(*_args):
        raise tilelab.TileLabTypeError("the sums' layout does not keep rows where the "
                                       "tile holds their parts")

    monkeypatch.setattr(reduce_module, "move_through_shared", refuse)


@pytest.mark.parametrize("make, marker, words, refusal", [
    (unsplittable_gemm, "layout-error", "cannot be split among 4 warps", None),
    (reduce_into_a_layout_that_does_not_line_up, "lowering-error", "does not keep rows",
     refuse_the_move),
], ids=["infer-layouts", "lower-to-threads"])
def test_a_pass_error_points_at_the_tile_op(make, marker, words, refusal, monkeypatch,
                                            tmp_path):
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path))  # compiled here, not found cached
    if refusal is not None:
        refusal(monkeypatch)
    with pytest.raises(tilelab.TileLabError, match=words) as info:
        tilelab.compile(make(), target="cuda:sm_90a")
    where = info.value.location
    assert Path(where.filename).resolve() == THIS_FILE
    assert where.line == line_of(__file__, marker)
    text = str(info.value)
    assert f"test_pass_errors.py:{line_of(__file__, marker)}:" in text
    source, caret = text.splitlines()[1:3]
    assert source.strip() == LINES[where.line - 1].strip()
    assert caret.strip() == "^" and source.index("T.") == caret.index("^")


def test_the_ir_names_each_tile_op_line():
    program = unsplittable_gemm()
    assert f'loc="{line_of(__file__, "layout-error")}:' in program.func.script()


def test_a_reduction_into_an_annotated_layout_compiles():
    """The program above, unrefused: its sums go to the threads the annotation names, and
    only those write (the threads a register is on, found from the layout's table since a
    program's T.Fragment gives no validity test of its own)."""
    kernel = tilelab.compile(reduce_into_a_layout_that_does_not_line_up(),
                             target="cuda:sm_90a")
    assert "if (64 <= ((int)threadIdx.x))" in kernel.get_kernel_source()  # threads 64-127


@pytest.mark.gpu
def test_a_reduction_into_an_annotated_layout_is_right_on_the_gpu():
    import torch

    kernel = tilelab.compile(reduce_into_a_layout_that_does_not_line_up(), target="cuda")
    x = torch.randn(64, 64, device="cuda")
    y = torch.empty(64, device="cuda")
    kernel(x, y)
    torch.testing.assert_close(y, x.sum(1), rtol=1e-5, atol=1e-4)

