"""`break` and `continue` in a kernel's loops (frontend.py, `_LoopExit`): a state register
of the loop, set where the program leaves, guards what would be skipped. The loops run
their full trip counts; the guarded statements do not run."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

ROWS, THREADS = 200, 64


@tilelab.jit(out_idx=[-1])
def first_above(n, threshold=1.0):
    """out[r] = the first column of row r whose value exceeds `threshold` (n if none), one
    row per thread: the break is each thread's own."""
    @T.prim_func
    def kernel(x: T.Tensor((ROWS, n), T.float32), out: T.Tensor((ROWS,), T.int32)):
        with T.Kernel(T.ceildiv(ROWS, THREADS), threads=THREADS) as b:
            tx = T.get_thread_binding()
            found = T.alloc_var(T.int32)
            row = b * THREADS + tx
            found = n
            if row < ROWS:
                for k in T.serial(n):
                    if x[row, k] > threshold:
                        found = k
                        break
                out[row] = found
    return kernel


@tilelab.jit(out_idx=[-1])
def clipped_sums(n, limit=3.0):
    """out[r] = the sum of row r's positive values, taken in order until the sum passes
    `limit` (continue skips the negatives, break stops); and by a while loop the same."""
    @T.prim_func
    def kernel(x: T.Tensor((ROWS, n), T.float32), out: T.Tensor((ROWS, 2), T.float32)):
        with T.Kernel(T.ceildiv(ROWS, THREADS), threads=THREADS) as b:
            tx = T.get_thread_binding()
            total = T.alloc_var(T.float32)
            k = T.alloc_var(T.int32)
            row = b * THREADS + tx
            if row < ROWS:
                total = 0.0
                for j in range(n):  # a `range` loop
                    if x[row, j] <= 0:
                        continue
                    total = total + x[row, j]
                    if total > limit:
                        break
                out[row, 0] = total
                total = 0.0
                k = 0
                while k < n:
                    k = k + 1
                    if x[row, k - 1] <= 0:
                        continue
                    total = total + x[row, k - 1]
                    if total > limit:
                        break
                out[row, 1] = total
    return kernel


@tilelab.jit(out_idx=[-1])
def halving_rounds(n):
    """A block-wide loop with tile ops that stops when the block's shared count says so
    (TileLang's top-k selector breaks out of its rounds alike): each round halves every
    element of the tile; it stops once the tile's first element is below 1."""
    @T.prim_func
    def kernel(x: T.Tensor((n,), T.float32), out: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((n,), T.float32)
            T.copy(x, tile)
            for _ in T.serial(10):
                if tile[0] < 1:
                    break
                for i in T.Parallel(n):
                    tile[i] = tile[i] * 0.5
            T.copy(tile, out)
    return kernel


def expected_first_above(x, threshold=1.0):
    above = x > threshold
    first = torch.where(above.any(1), above.int().argmax(1), torch.tensor(x.shape[1]))
    return first.to(torch.int32)


def expected_clipped(x, limit=3.0):
    out = []
    for row in x.tolist():
        total = 0.0
        for v in row:
            if v <= 0:
                continue
            total += v
            if total > limit:
                break
        out.append([total, total])
    return torch.tensor(out)


def expected_halving(x):
    x = x.clone()
    for _ in range(10):
        if x[0] < 1:
            break
        x *= 0.5
    return x


def check_all(target, device):
    x = torch.randn(ROWS, 37, device=device)
    torch.testing.assert_close(first_above.compile(37, target=target)(x).cpu(),
                               expected_first_above(x.cpu()))
    torch.testing.assert_close(clipped_sums.compile(37, target=target)(x).cpu(),
                               expected_clipped(x.cpu()), rtol=1e-5, atol=1e-5)
    v = torch.rand(300, device=device) + 1
    v[0] = 37.0  # 37 -> 18.5 -> ... -> 0.578: six rounds
    torch.testing.assert_close(halving_rounds.compile(300, target=target)(v).cpu(),
                               expected_halving(v.cpu()))


def test_cpu_break_and_continue_match_python():
    check_all("cpu", "cpu")


@needs_nvcc
def test_cuda_break_compiles_to_guards():
    for kernel, args in ((first_above, (37,)), (clipped_sums, (37,)), (halving_rounds, (300,))):
        source = kernel.compile(*args, target="cuda:sm_90a").get_kernel_source()
        assert "loop_exit" in source


@pytest.mark.gpu
def test_gpu_break_and_continue_match_python():
    check_all("cuda", "cuda")


def test_python_loops_stop_at_an_unconditional_break():
    @tilelab.jit(out_idx=[-1])
    def three_of_five():
        @T.prim_func
        def kernel(x: T.Tensor((5,), T.float32), out: T.Tensor((5,), T.float32)):
            with T.Kernel(1, threads=32):
                T.fill(out, 0)
                for i in [0, 1, 2, 3, 4]:  # unrolled while compiling
                    if i == 3:
                        break
                    out[i] = x[i]
        return kernel

    kernel = three_of_five.compile(target="cpu")
    assert "loop_exit" not in kernel.get_kernel_source()
    x = torch.randn(5)
    torch.testing.assert_close(kernel(x), torch.cat([x[:3], torch.zeros(2)]))


def _loop_with(loop):
    @T.prim_func
    def kernel(x: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            for i in loop(64):
                if x[i] > 0:
                    break
                x[i] = 1.0
    return kernel


@pytest.mark.parametrize("loop, match", [
    (T.Parallel, "break in a T.Parallel loop"),
    (lambda n: T.Pipelined(n, num_stages=2), "break in a T.Pipelined loop"),
    (T.vectorized, "break in a T.vectorized loop"),
])
def test_break_is_refused_where_iterations_are_not_in_order(loop, match):
    with pytest.raises(TileLabError, match=match) as info:
        _loop_with(loop)
    assert "break" in info.value.location.excerpt()
