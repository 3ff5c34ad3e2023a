"""Solutions to chapter 8's exercises. In the notebook: %load solutions/08_debugging.py"""

import torch

import tilelab
import tilelab.language as T

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LOG2_E = 1.4426950408889634


# Exercise 08.1: the guard keeps the last block inside Y
@tilelab.jit(target=DEVICE)
def make_clamp(N: int, low: float, high: float, block_size: int = 256):
    @T.prim_func
    def clamp(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block_size), threads=block_size) as block_id:
            for thread_id in T.Parallel(block_size):
                index = block_id * block_size + thread_id
                if index < N:
                    Y[index] = T.min(T.max(X[index], low), high)

    return clamp


# Exercise 08.2: W is N x K (nn.Linear's layout): copy N x K tiles, multiply by the transpose
@tilelab.jit
def linear(X, W, block_m: int = 64, block_n: int = 64, block_k: int = 32):
    M, N, K = T.const("M, N, K")

    X: T.Tensor((M, K), T.float16)
    W: T.Tensor((N, K), T.float16)
    Y = T.empty((M, N), T.float16)

    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=128) as (
        block_x,
        block_y,
    ):
        x_shared = T.alloc_shared((block_m, block_k), T.float16)
        w_shared = T.alloc_shared((block_n, block_k), T.float16)
        accumulator = T.alloc_fragment((block_m, block_n), T.float32)

        T.clear(accumulator)
        for step in T.Pipelined(T.ceildiv(K, block_k), num_stages=2):
            T.copy(X[block_y * block_m, step * block_k], x_shared)
            T.copy(W[block_x * block_n, step * block_k], w_shared)
            T.gemm(x_shared, w_shared, accumulator, transpose_B=True)

        T.copy(accumulator, Y[block_y * block_m, block_x * block_n])

    return Y


# Exercise 08.3: the online softmax keeps block_n / 128 values per thread, whatever N is
@tilelab.jit
def long_row_softmax(X, block_n: int = 256):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float16)
    Y = T.empty((M, N), T.float16)

    with T.Kernel(M, threads=128) as row:
        tile = T.alloc_fragment((1, block_n), T.float32)
        output = T.alloc_fragment((1, block_n), T.float16)
        running_max = T.alloc_fragment((1,), T.float32)
        previous_max = T.alloc_fragment((1,), T.float32)
        tile_sum = T.alloc_fragment((1,), T.float32)
        running_sum = T.alloc_fragment((1,), T.float32)

        T.fill(running_max, -T.infinity(T.float32))
        T.fill(running_sum, 0)

        for column_block in T.serial(T.ceildiv(N, block_n)):
            T.copy(X[row, column_block * block_n], tile)
            for i, j in T.Parallel(1, block_n):
                tile[i, j] = T.if_then_else(column_block * block_n + j < N,
                                            tile[i, j] * LOG2_E, -T.infinity(T.float32))
            T.copy(running_max, previous_max)
            T.reduce_max(tile, running_max, dim=1, clear=False)
            for i, j in T.Parallel(1, block_n):
                tile[i, j] = T.exp2(tile[i, j] - running_max[i])
            T.reduce_sum(tile, tile_sum, dim=1, clear=True)
            for i in T.Parallel(1):
                running_sum[i] = (running_sum[i] * T.exp2(previous_max[i] - running_max[i])
                                  + tile_sum[i])

        for column_block in T.serial(T.ceildiv(N, block_n)):
            T.copy(X[row, column_block * block_n], tile)
            for i, j in T.Parallel(1, block_n):
                output[i, j] = T.Cast(
                    T.float16, T.exp2(tile[i, j] * LOG2_E - running_max[i]) / running_sum[i])
            T.copy(output, Y[row, column_block * block_n])

    return Y
