"""`T.reshape` (and TileLang's `T.view`) of a fragment: the same registers named with
another shape.

DeepSeek's indexer kernels multiply into an (N, Q * H) accumulator and then treat it
as (N, Q, H): a loop scales each head, a reduction sums the heads of each query. The
view's layout is its fragment's seen with the view's shape (`Fragment.viewed_as`), so
the view names the fragment's registers; reducing it along a dimension its fragment
never had is the general reduction of a layout (`Fragment._reduced_by_owners`): each
result on every thread that holds a part of its row.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError, TileLabWarning
from tilelab.ir.layout import Fragment, owner_table

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")

GROUPS, HEADS, DIM, BLOCK = 4, 16, 64, 64


@tilelab.jit
def head_sums(Q, K, W, threads: int = 128, by: str = "reshape"):
    """out[m, g] = sum over h of relu(Q[m] . K[g * H + h]) * W[g, h], the rows of Q in
    blocks of BLOCK (the last one short)."""
    M = T.const("M")
    Q: T.Tensor((M, DIM), T.float16)
    K: T.Tensor((GROUPS * HEADS, DIM), T.float16)
    W: T.Tensor((GROUPS, HEADS), T.float32)
    out = T.empty((M, GROUPS), T.float32)
    with T.Kernel(T.ceildiv(M, BLOCK), threads=threads) as bx:
        q_s = T.alloc_shared((BLOCK, DIM), T.float16)
        k_s = T.alloc_shared((GROUPS * HEADS, DIM), T.float16)
        s = T.alloc_fragment((BLOCK, GROUPS * HEADS), T.float32)
        s3 = T.reshape(s, (BLOCK, GROUPS, HEADS)) if by == "reshape" else \
            T.view(s, (BLOCK, GROUPS, HEADS))
        w = T.alloc_fragment((GROUPS, HEADS), T.float32)
        sums = T.alloc_fragment((BLOCK, GROUPS), T.float32)
        T.copy(Q[bx * BLOCK, 0], q_s)
        T.copy(K, k_s)
        T.copy(W, w)
        T.gemm(q_s, k_s, s, transpose_B=True, clear_accum=True)
        for i, g, h in T.Parallel(BLOCK, GROUPS, HEADS):
            s3[i, g, h] = T.max(s3[i, g, h], 0) * w[g, h]
        T.reduce_sum(s3, sums, dim=-1)
        T.copy(sums, out[bx * BLOCK, 0])
    return out


def _head_sums_inputs(m=100, device="cpu"):
    torch.manual_seed(1)
    return (torch.randn(m, DIM, dtype=torch.float16, device=device),
            torch.randn(GROUPS * HEADS, DIM, dtype=torch.float16, device=device),
            torch.randn(GROUPS, HEADS, device=device))


def _head_sums_expected(q, k, w):
    s = (q.float() @ k.float().T).clamp(min=0).view(q.shape[0], GROUPS, HEADS)
    return (s * w).sum(dim=-1)


@tilelab.jit
def reshaped_rows(X):
    """A tile loaded as (64, 32), seen as (64, 4, 8): the maximum of each group of 8 and
    the sum of each row, and the view written back through the fragment."""
    X: T.Tensor((64, 32), T.float32)
    maxima = T.empty((64, 4), T.float32)
    sums = T.empty((64,), T.float32)
    doubled = T.empty((64, 32), T.float32)
    with T.Kernel(1, threads=128):
        x = T.alloc_fragment((64, 32), T.float32)
        x3 = T.reshape(x, (64, 4, 8))
        top = T.alloc_fragment((64, 4), T.float32)
        total = T.alloc_fragment((64,), T.float32)
        T.copy(X, x)
        T.reduce_max(x3, top, dim=2)
        T.reduce_sum(x, total, dim=1)
        for i, g, e in T.Parallel(64, 4, 8):
            x3[i, g, e] = x3[i, g, e] * 2 + top[i, g] * 0
        T.copy(top, maxima)
        T.copy(total, sums)
        T.copy(x, doubled)
    return maxima, sums, doubled


def _reshaped_rows_expected(x):
    return x.view(64, 4, 8).amax(dim=2), x.sum(dim=1), x * 2


# ---------------------------------------------------------------- the CPU


@pytest.mark.parametrize("by", ["reshape", "view"])
def test_the_cpu_sums_each_group_of_heads(by):
    q, k, w = _head_sums_inputs()
    torch.testing.assert_close(head_sums(q, k, w, by=by), _head_sums_expected(q, k, w),
                               rtol=1e-4, atol=1e-3)


def test_the_cpu_reduces_and_writes_through_a_view():
    x = torch.randn(64, 32)
    for got, expected in zip(reshaped_rows(x), _reshaped_rows_expected(x)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- CUDA: the code


@needs_nvcc
@pytest.mark.parametrize(("target", "threads"), [("cuda:sm_90a", 128), ("cuda:sm_90a", 256),
                                                 ("cuda:sm_80", 128)])
def test_a_view_keeps_its_fragment_in_registers(target, threads):
    """No fragment moves to shared memory: the loop over the view, the weights read by
    (group, head) and the reduction all live where the GEMM left its accumulator."""
    q, k, w = _head_sums_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TileLabWarning)
        kernel = head_sums.compile(q, k, w, threads=threads, target=target)
    source = kernel.get_kernel_source()
    assert "s3" not in source  # the view names s's registers: no array of its own
    assert "tl::shfl_xor" in source  # a group's heads are spread over a quad of lanes


@needs_nvcc
def test_a_view_of_a_default_layout_compiles_without_moving():
    x = torch.randn(64, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TileLabWarning)
        reshaped_rows.compile(x, target="cuda:sm_90a")


# ---------------------------------------------------------------- layouts


LAYOUTS = {
    "mma accumulator": (Fragment.accumulator(64, 64, 2, 2), [(64, 4, 16), (64, 8, 8),
                                                             (4, 16, 64), (4096,)]),
    "wgmma accumulator": (Fragment.wgmma_accumulator(64, 64, 1, 1), [(64, 4, 16), (64, 2, 32),
                                                                    (16, 4, 64)]),
    "two warpgroups": (Fragment.wgmma_accumulator(128, 64, 2, 1), [(128, 4, 16), (8, 16, 64)]),
    "row spread": (Fragment.row_spread((64, 32), 128, 4), [(64, 4, 8), (16, 4, 32)]),
    "block cyclic": (Fragment.block_cyclic((64, 32), 128, 4), [(64, 4, 8), (2048,)]),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_reductions_of_views_keep_each_result_with_its_rows_threads(name):
    """Every reduction of every view that has one: each result element is kept by exactly
    the threads that hold a part of its row, once each, as T.reduce's lowering needs."""
    base, shapes = LAYOUTS[name]
    reduced_any = False
    for shape in shapes:
        view = base.viewed_as(shape)
        view.check()
        assert view.viewed_as(base.shape).same_as(base)
        view_owners = owner_table(view)
        for dim in range(len(shape)):
            try:
                reduced = view.reduce(dim)
            except NotImplementedError:
                continue
            reduced_any = True
            reduced.check()
            owners = owner_table(reduced)
            for row in itertools.product(*(range(e) for d, e in enumerate(shape) if d != dim)):
                holders = set()
                for k in range(shape[dim]):
                    element = (*row[:dim], k, *row[dim:])
                    holders |= set(view_owners[element])
                assert set(owners[row or (0,)]) == holders, (shape, dim, row)
    assert reduced_any


def test_a_reduction_without_a_regular_pattern_is_refused():
    """Where the positions whose owners make up a row differ from row to row, there is no
    one layout for the result: NotImplementedError, which T.reduce reports at its line.
    Here row 0 is on eight threads, one element each, and row 1 on four, two each."""
    uneven = Fragment.custom((2, 8), lambda i, j: j // (1 + i), lambda i, j: i * (1 + j % 2))
    with pytest.raises(NotImplementedError):
        uneven.reduce(1)


# ---------------------------------------------------------------- mistakes


def _shared_reshape():
    @T.prim_func
    def kernel(X: T.Tensor((64, 32), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((64, 32), T.float32)
            T.reshape(tile, (2048,))
            T.copy(X, tile)
    return kernel


def _wrong_size():
    @T.prim_func
    def kernel(X: T.Tensor((64, 32), T.float32)):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 32), T.float32)
            T.reshape(x, (64, 4, 4))
            T.copy(X, x)
    return kernel


def _other_type():
    @T.prim_func
    def kernel(X: T.Tensor((64, 32), T.float32)):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((64, 32), T.float32)
            T.view(x, (64, 32), T.int32)
            T.copy(X, x)
    return kernel


@pytest.mark.parametrize(("make", "line", "says"), [
    (_shared_reshape, "T.reshape(tile, (2048,))", "reshapes kernel tensors and fragments"),
    (_wrong_size, "T.reshape(x, (64, 4, 4))", "a reshape keeps every element"),
    (_other_type, "T.view(x, (64, 32), T.int32)", "fragments keep their type"),
])
def test_mistakes_are_named_at_their_line(make, line, says):
    with pytest.raises(TileLabError, match=says) as error:
        make()
    assert error.value.location.source_line.strip() == line


# ---------------------------------------------------------------- the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [128, 256])
def test_the_gpu_sums_each_group_of_heads(threads):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    q, k, w = _head_sums_inputs(device="cuda")
    torch.testing.assert_close(head_sums(q, k, w, threads=threads, target="cuda"),
                               _head_sums_expected(q, k, w), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
def test_the_gpu_reduces_and_writes_through_a_view():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.randn(64, 32, device="cuda")
    for got, expected in zip(reshaped_rows(x, target="cuda"), _reshaped_rows_expected(x)):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
