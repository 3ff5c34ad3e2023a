"""TileLang programs as TileLang users write them.

Each test is a small kernel of the project's own written in TileLang's spellings,
run on the CPU against torch on fresh random inputs (sizes with tails).
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.errors import TileLabError


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- truth values (issue 15 item 3)


def _masked(x, flag):
    """A plain-Python helper (no @T.macro): `flag == 1` must stay a kernel comparison."""
    return T.if_then_else(flag == 1, x, -x)


@pytest.mark.parametrize("N", [8, 37])
def test_plain_helper_comparison_reaches_if_then_else_as_ir(N):
    @T.prim_func
    def alternate(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 16), threads=16) as bx:
            for i in T.Parallel(16):
                if bx * 16 + i < N:
                    flag = T.if_then_else((bx * 16 + i) % 2 == 0, 1, 0)
                    B[bx * 16 + i] = _masked(A[bx * 16 + i], flag)

    a = _rand(N, seed=N)
    expected = torch.where(torch.arange(N) % 2 == 0, a, -a)
    torch.testing.assert_close(tilelab.compile(alternate, out_idx=[1])(a), expected)


def _is_one(flag):
    return flag == 1


def test_plain_helper_result_drives_a_kernel_if():
    N = 21

    @T.prim_func
    def keep_odd(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                B[i] = 0.0
                if _is_one(i % 2):
                    B[i] = A[i]

    a = _rand(N, seed=3)
    expected = torch.where(torch.arange(N) % 2 == 1, a, torch.zeros(()))
    torch.testing.assert_close(tilelab.compile(keep_odd, out_idx=[1])(a), expected)


def _branchy(x, flag):
    if flag == 1:  # a Python `if` on a kernel value: no compile-time answer
        return x
    return -x


def _both(x, i):
    return x if (x > 0 and i < 1) else -x


@pytest.mark.parametrize("helper, line_text", [(_branchy, "if flag == 1:"),
                                               (_both, "x > 0 and i < 1")])
def test_python_truth_of_a_kernel_value_is_an_error_at_the_helpers_line(helper, line_text):
    def program():
        @T.prim_func
        def k(A: T.Tensor((8,), T.float32), B: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=8):
                for i in T.Parallel(8):
                    B[i] = helper(A[i], i % 2)

        return k

    with pytest.raises(TileLabError) as info:
        program()
    err = info.value
    assert err.location is not None and err.location.filename == __file__
    assert line_text in err.location.excerpt()
    assert "T.if_then_else" in str(err)


def test_compile_time_comparisons_still_decide_python_ifs():
    def scale(x, n):
        if n % 4 == 0 and n > 2:  # Python ints: an ordinary compile-time `if`
            return x * 2.0
        return x

    N = 12

    @T.prim_func
    def k(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=16):
            for i in T.Parallel(N):
                B[i] = scale(A[i], N)

    a = _rand(N, seed=5)
    torch.testing.assert_close(tilelab.compile(k, out_idx=[1])(a), a * 2)
