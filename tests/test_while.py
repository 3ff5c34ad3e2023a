"""`while` in a kernel: a condition known while compiling runs as Python; one that reads
kernel values becomes a loop of the kernel (TileLang's stream-K GEMM walks its tiles so)."""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabSyntaxError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def halvings(X, block: int = 64):
    """How many times each value halves before it reaches 1 (floor of log2)."""
    N = T.const("N")
    X: T.Tensor((N,), T.int32)
    Y = T.empty((N,), T.int32)
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                steps = T.alloc_var(T.int32, 0)
                value = T.alloc_var(T.int32, 0)
                value = X[bx * block + i]
                while value > 1:
                    value = value // 2
                    steps = steps + 1
                Y[bx * block + i] = steps
    return Y


def _halvings_reference(x):
    return torch.tensor([max(int(v).bit_length() - 1, 0) for v in x], dtype=torch.int32)


@tilelab.jit
def tiles_in_turn(A, per_block: int = 3, rows: int = 16):
    """Each block copies `per_block` row tiles in turn, walking them with a while loop and
    a T.alloc_var cursor (the stream-K shape: tiles through shared memory in a loop)."""
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, rows * per_block), threads=64) as bx:
        tile = T.alloc_shared((rows, N), T.float32)
        cursor = T.alloc_var(T.int32, 0)
        cursor = bx * per_block
        while cursor < T.min((bx + 1) * per_block, T.ceildiv(M, rows)):
            T.copy(A[cursor * rows, 0], tile)
            for i, j in T.Parallel(rows, N):
                tile[i, j] = tile[i, j] * 2.0 + 1.0
            T.copy(tile, B[cursor * rows, 0])
            cursor = cursor + 1
    return B


@tilelab.jit
def tiles_allocated_in_the_loop(A, blocks: int = 2, rows: int = 16):
    """As TileLang's persistent AMD FlashAttention: the blocks take every `blocks`-th row
    tile, and the tiles they work in are allocated inside the while loop (on the CPU an
    array allocated in a while loop was taken anew each round and freed once, which
    LLVM refused)."""
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((M, N), T.float32)
    with T.Kernel(blocks, threads=64) as bx:
        cursor = T.alloc_var(T.int32)
        cursor = bx
        while cursor < T.ceildiv(M, rows):
            acc = T.alloc_fragment((rows, N), T.float32)
            tile = T.alloc_shared((rows, N), T.float32)
            T.copy(A[cursor * rows, 0], tile)
            T.copy(tile, acc)
            for i, j in T.Parallel(rows, N):
                acc[i, j] = acc[i, j] * 3.0 - cursor
            T.copy(acc, B[cursor * rows, 0])
            cursor = cursor + blocks
    return B


def _allocated_in_the_loop_reference(a, rows=16):
    return a * 3 - (torch.arange(a.shape[0], device=a.device) // rows)[:, None]


def test_a_loop_on_kernel_values_runs_on_the_cpu():
    for seed in range(2):
        torch.manual_seed(seed)
        x = torch.randint(0, 1 << 20, (300,), dtype=torch.int32)
        assert torch.equal(halvings(x), _halvings_reference(x))


def test_tiles_walked_by_a_while_loop_on_the_cpu():
    torch.manual_seed(2)
    a = torch.randn(200, 24)
    torch.testing.assert_close(tiles_in_turn(a), a * 2 + 1)


def test_tiles_allocated_inside_a_while_loop_on_the_cpu():
    torch.manual_seed(3)
    a = torch.randn(200, 24)
    torch.testing.assert_close(tiles_allocated_in_the_loop(a), _allocated_in_the_loop_reference(a))


@needs_nvcc
def test_a_kernel_while_compiles_for_cuda():
    x = torch.empty(300, dtype=torch.int32, device="meta")
    source = halvings.compile(x, target="cuda:sm_90a").get_kernel_source()
    assert "while (" in source
    a = torch.empty(200, 24, device="meta")
    source = tiles_in_turn.compile(a, target="cuda:sm_90a").get_kernel_source()
    body = source.split("while (")[1]
    assert body.count("__syncthreads()") >= 2  # the tile is rewritten each round
    assert "while (" in tiles_allocated_in_the_loop.compile(
        a, target="cuda:sm_90a").get_kernel_source()


def test_a_compile_time_while_runs_as_python():
    @tilelab.jit
    def padded(X):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y = T.empty((N,), T.float32)
        width = 1
        while width < N:  # the next power of two, while compiling
            width *= 2
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i] + width
        return Y

    x = torch.randn(20)
    torch.testing.assert_close(padded(x), x + 32)


def test_a_condition_on_a_rebound_name_is_an_error_at_its_line():
    @tilelab.jit
    def rebinding(X):
        N = T.const("N")
        X: T.Tensor((N,), T.int32)
        Y = T.empty((N,), T.int32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                value = X[i]
                while value > 1:
                    value = value // 2
                Y[i] = value
        return Y

    with pytest.raises(TileLabSyntaxError, match="the while condition reads value") as info:
        rebinding(torch.ones(8, dtype=torch.int32))
    assert "test_while.py" in str(info.value) and "T.alloc_var" in str(info.value)


def test_a_while_that_never_ends_while_compiling_is_an_error(monkeypatch):
    from tilelab.language.frontend import Interpreter

    monkeypatch.setattr(Interpreter, "MAX_UNROLLED", 50)

    @tilelab.jit
    def forever(X):
        N = T.const("N")
        X: T.Tensor((N,), T.float32)
        Y = T.empty((N,), T.float32)
        while True:
            pass
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i]
        return Y

    with pytest.raises(TileLabSyntaxError, match="still held after 50 rounds"):
        forever(torch.ones(8))


@pytest.mark.gpu
def test_while_loops_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for seed in range(2):
        torch.manual_seed(seed)
        x = torch.randint(0, 1 << 20, (300,), dtype=torch.int32, device="cuda")
        assert torch.equal(halvings(x).cpu(), _halvings_reference(x.cpu()))
        a = torch.randn(200, 24, device="cuda")
        torch.testing.assert_close(tiles_in_turn(a), a * 2 + 1)
        torch.testing.assert_close(tiles_allocated_in_the_loop(a),
                                   _allocated_in_the_loop_reference(a))
