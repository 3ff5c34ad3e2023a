"""Solutions to chapter 3's exercises. In the notebook: %load solutions/03_softmax.py"""

import tilelab
import tilelab.language as T

LOG2_E = 1.4426950408889634


# Exercise 03.1: subtract the row maximum before exp()
@tilelab.jit
def stable_softmax(X):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float16)
    Y = T.empty((M, N), T.float16)

    with T.Kernel(M, threads=128) as row:
        x = T.alloc_fragment((1, N), T.float32)
        row_max = T.alloc_fragment((1,), T.float32)
        row_sum = T.alloc_fragment((1,), T.float32)
        output = T.alloc_fragment((1, N), T.float16)

        T.copy(X[row, 0], x)
        T.reduce_max(x, row_max, dim=1, clear=True)

        for i, j in T.Parallel(1, N):
            x[i, j] = T.exp(x[i, j] - row_max[i])

        T.reduce_sum(x, row_sum, dim=1, clear=True)

        for i, j in T.Parallel(1, N):
            output[i, j] = T.Cast(T.float16, x[i, j] / row_sum[i])

        T.copy(output, Y[row, 0])

    return Y


# Exercise 03.2: rescale the running sum when the maximum grows
@tilelab.jit
def online_softmax(X, block_n: int = 256):
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
