"""TileLang's rule for global tensors' edges (passes/safe_global_access.py): through TileLang's
API a read outside a tensor gives 0 and a write there is skipped, on both backends; a
tilelab program keeps its bounds error; where the bounds are known to hold nothing changes."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.compat import tilelang
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


def gather_rows(jit, **options):
    """Y[m] = 2 * X[idx[m]] for the rows of each block; idx may hold a sentinel past X's
    end (the sparse attention examples' way of saying "no row here"), and the last block
    also writes rows past Y's end (M is not a multiple of 16)."""
    @jit(**options)
    def gather(X, idx):
        N, D, M = T.const("N, D, M")
        X: T.Tensor((N, D), T.float32)
        idx: T.Tensor((M,), T.int32)
        Y = T.empty((M, D), T.float32)
        with T.Kernel(T.ceildiv(M, 16), threads=128) as bx:
            for i, j in T.Parallel(16, D):
                Y[bx * 16 + i, j] = X[idx[bx * 16 + i], j] * 2.0
        return Y

    return gather


def inputs(device):
    x = torch.randn(50, 32, device=device)
    idx = torch.randint(0, 50, (40,), dtype=torch.int32, device=device)
    idx[::3] = 50  # the sentinel: one past the last row
    idx[1] = -1
    return x, idx


def expected(x, idx):
    inside = (idx >= 0) & (idx < len(x))
    rows = x[idx.clamp(0, len(x) - 1).long()] * 2
    return torch.where(inside[:, None], rows, torch.zeros((), device=x.device))


def test_through_tilelangs_api_reads_outside_give_zero():
    x, idx = inputs("cpu")
    torch.testing.assert_close(gather_rows(tilelang.jit)(x, idx), expected(x, idx))


def test_tilelab_programs_keep_their_bounds_error():
    x, idx = inputs("cpu")
    with pytest.raises(TileLabError, match="index out of bounds") as info:
        gather_rows(tilelab.jit)(x, idx)
    assert "test_safe_global_access.py" in info.value.location.filename


def test_tilelangs_key_turns_it_off():
    x, idx = inputs("cpu")
    program = gather_rows(tilelang.jit,
                          pass_configs={tilelang.PassConfigKey.TL_DISABLE_SAFE_MEMORY_LEGALIZE:
                                        True})
    with pytest.raises(TileLabError, match="index out of bounds"):
        program(x, idx)


@tilelab.jit
def double(A):
    A: T.Tensor((1024,), T.float32)
    B = T.empty((1024,), T.float32)
    with T.Kernel(8, threads=128) as bx:
        for i in T.Parallel(128):
            B[bx * 128 + i] = A[bx * 128 + i] * 2.0
    return B


@needs_nvcc
def test_no_guard_where_the_bounds_hold():
    plain = double.compile(target="cuda:sm_90a").get_kernel_source()
    safe = double.compile(target="cuda:sm_90a",
                          pass_configs={"tl.safe_global_access": True}).get_kernel_source()
    assert safe == plain


@needs_nvcc
def test_cuda_guards_the_gather():
    kernel = gather_rows(tilelang.jit).compile(N=50, D=32, M=40, target="cuda:sm_90a")
    source = kernel.get_kernel_source()
    assert "< 50)" in source and "0 <= idx" in source.replace("(0 <= idx", "0 <= idx")


@tilelang.jit
def moved_after_its_test(X, idx):
    """The `if` that tested v changes v before the load: its test proves nothing there."""
    X: T.Tensor((8,), T.float32)
    idx: T.Tensor((4,), T.int32)
    Y = T.empty((4,), T.float32)
    with T.Kernel(4, threads=32) as i:
        v = T.alloc_var(T.int32)
        v = idx[i]
        Y[i] = -1.0
        if v >= 0 and v < 8:
            v = v + 1
            Y[i] = X[v]
    return Y


@tilelang.jit
def tile_op_operands(X, idx):
    """Loads inside a tile op's operands: a fill value and a gathered row's index."""
    X: T.Tensor((6, 8), T.float32)
    idx: T.Tensor((6,), T.int32)
    Y = T.empty((4, 8), T.float32)
    Z = T.empty((4, 8), T.float32)
    with T.Kernel(4, threads=32) as bx:
        s = T.alloc_shared((8,), T.float32)
        T.fill(s, X[bx * 2, 0])
        T.copy(s, Y[bx, 0:8])
        T.copy(X[idx[bx * 2], 0:8], Z[bx, 0:8])
    return Y, Z


def test_a_test_that_the_branch_undoes_and_tile_op_operands_are_guarded():
    x = torch.randn(8)
    idx = torch.tensor([7, 3, -1, 0], dtype=torch.int32)
    expected = torch.tensor([0.0, x[4], -1.0, x[1]])  # v = 8 reads past X's end: 0
    torch.testing.assert_close(moved_after_its_test(x, idx), expected)
    x = torch.randn(6, 8)
    idx = torch.tensor([5, 0, 2, 1, 4, 3], dtype=torch.int32)
    y, z = tile_op_operands(x, idx)
    rows = torch.arange(4) * 2  # 6 is past X's rows, and past idx's elements
    expected_y = torch.where(rows[:, None] < 6, x[rows.clamp(max=5), 0][:, None],
                             torch.zeros(())).expand(4, 8)
    gathered = torch.where((rows < 6)[:, None], x[idx[rows.clamp(max=5)].long()], x[0])
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(z, gathered)


@pytest.mark.gpu
def test_gpu_matches_torch():
    x, idx = inputs("cuda")
    torch.testing.assert_close(gather_rows(tilelang.jit)(x, idx), expected(x, idx))
