"""A tile access past the tile's end on every run is refused when compiling, for every
target (passes/check_loop_bounds.py); what only a run can decide is left to the run."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.source_lines import line_of
from tilelab import TileLabError

TARGETS = ["cpu", "cuda:sm_90a"]  # CUDA: refused before nvcc, so no GPU or nvcc needed


def _refused(program, target, marker, match):
    with pytest.raises(TileLabError, match=match) as info:
        tilelab.compile(program, target=target)
    assert info.value.location.line == line_of(__file__, marker), str(info.value)
    return info.value


@pytest.mark.parametrize("target", TARGETS)
def test_a_fragment_read_for_every_row_of_a_smaller_fragment(target):
    """As TileLang's attention-sink backward example: a fragment of `heads` values filled
    and read by a loop over the block's rows."""
    @T.prim_func
    def sink(S: T.Tensor((8,), T.float32), Out: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64) as by:
            sinks = T.alloc_fragment((8,), T.float32)
            rows = T.alloc_fragment((64,), T.float32)
            for i in T.Parallel(64):
                sinks[i] = S[by]  # @sink-fill
            for i in T.Parallel(64):
                rows[i] = sinks[i] * 2.0
            T.copy(rows, Out)

    err = _refused(sink, target, "# @sink-fill",
                   r"index out of bounds: sinks\[i\] \(the shape of sinks is \(8,\)\)")
    assert "i runs from 0 to 63" in err.hint and "reaches 63" in err.hint


@pytest.mark.parametrize("target", TARGETS)
def test_a_shifted_shared_read_names_its_dimension(target):
    @T.prim_func
    def shifted(A: T.Tensor((16, 16), T.float16), B: T.Tensor((16, 16), T.float16)):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((16, 16), T.float16)
            T.copy(A, s)
            for i, j in T.Parallel(16, 16):
                B[i, j] = s[i, j + 1]  # @shifted

    err = _refused(shifted, target, "# @shifted", r"index out of bounds: s\[i, j \+ 1\]")
    assert "index 1 reaches 16" in err.hint


@pytest.mark.parametrize("target", TARGETS)
def test_a_negative_index_in_a_serial_loop(target):
    @T.prim_func
    def behind(A: T.Tensor((32,), T.float32), B: T.Tensor((32,), T.float32)):
        with T.Kernel(1, threads=32):
            f = T.alloc_fragment((32,), T.float32)
            T.copy(A, f)
            for k in T.serial(4):
                for i in T.Parallel(32):
                    f[i] = f[i - k] + 1.0  # @behind
            T.copy(f, B)

    err = _refused(behind, target, "# @behind", r"index out of bounds: f\[i - k\]")
    assert "reaches -3" in err.hint


@tilelab.jit(out_idx=[-1])
def guarded():
    """Indices past a tile's end that never run: under an `if`, inside T.if_then_else,
    wrapped by %, read from a tensor, or in a loop whose trip count is known only at run
    time."""
    @T.prim_func
    def kernel(A: T.Tensor((8,), T.float32), idx: T.Tensor((64,), T.int32),
               m: T.int32, B: T.Tensor((5, 64), T.float32)):
        with T.Kernel(1, threads=64):
            f = T.alloc_fragment((8,), T.float32)
            T.copy(A, f)
            for i in T.Parallel(64):
                B[0, i] = 0.0
                if i < 8:
                    B[0, i] = f[i]
                B[1, i] = T.if_then_else(i < 8, f[T.min(i, 63)], -1.0)
                B[2, i] = f[i % 8]
                B[3, i] = f[idx[i]]
                B[4, i] = 0.0
            for k in T.serial(m):
                B[4, k] = f[k]
            for i in T.Parallel(64):
                for _k in T.serial(m - 5):  # no iteration at m = 5
                    B[4, i] = f[i]
    return kernel


def test_accesses_that_only_a_run_can_decide_compile_and_compute():
    a = torch.randn(8)
    idx = torch.randint(0, 8, (64,), dtype=torch.int32)
    out = guarded.compile(target="cpu")(a, idx, 5)
    i = torch.arange(64)
    want = torch.stack([torch.where(i < 8, a[i.clamp(max=7)], 0.0),
                        torch.where(i < 8, a[i.clamp(max=7)], -1.0),
                        a[i % 8], a[idx.long()],
                        torch.where(i < 5, a[i.clamp(max=7)], 0.0)])
    torch.testing.assert_close(out, want)
    guarded.compile(target="cuda:sm_90a")  # compiles there too


def test_the_run_time_check_still_catches_what_a_run_decides():
    """m = 12 sends the symbolic loops past f's 8 elements: the CPU stops there."""
    a = torch.randn(8)
    idx = torch.zeros(64, dtype=torch.int32)
    with pytest.raises(TileLabError, match=r"index out of bounds: f\[[ik]\]"):
        guarded.compile(target="cpu")(a, idx, 12)
