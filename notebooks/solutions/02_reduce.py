"""Solutions to chapter 2's exercises. In the notebook: %load solutions/02_reduce.py"""

import tilelab
import tilelab.language as T


# Exercise 02.1: the maximum of each row
@tilelab.jit
def row_max(X, block_m: int = 1):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M,), T.float32)

    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        values = T.alloc_fragment((block_m, N), T.float32)
        maximum = T.alloc_fragment((block_m,), T.float32)

        T.copy(X[block * block_m, 0], values)
        T.reduce_max(values, maximum, dim=1, clear=True)  # clear=True starts at -inf
        T.copy(maximum, Y[block * block_m])

    return Y


# Exercise 02.2: row sums, one tile of block_n columns at a time
@tilelab.jit
def row_sum_tiled(X, block_n: int = 128):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M,), T.float32)

    with T.Kernel(M, threads=128) as row:
        tile = T.alloc_fragment((1, block_n), T.float32)
        total = T.alloc_fragment((1,), T.float32)

        T.clear(total)  # once, before the loop

        for column_block in T.serial(T.ceildiv(N, block_n)):
            T.copy(X[row, column_block * block_n], tile)
            T.reduce_sum(tile, total, dim=1, clear=False)  # add to the total

        T.copy(total, Y[row])

    return Y
