"""Solutions to chapter 5's exercises. In the notebook: %load solutions/05_layer_norm.py"""

import tilelab
import tilelab.language as T


# Exercise 05.1: Y = LayerNorm(X + R) * gamma + beta, in one kernel
@tilelab.jit
def add_layer_norm(X, R, Gamma, Beta, eps: float = 1e-5, block_m: int = 1):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float16)
    R: T.Tensor((M, N), T.float16)
    Gamma: T.Tensor((N,), T.float16)
    Beta: T.Tensor((N,), T.float16)
    Y = T.empty((M, N), T.float16)

    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        x = T.alloc_fragment((block_m, N), T.float32)
        residual = T.alloc_fragment((block_m, N), T.float32)
        squares = T.alloc_fragment((block_m, N), T.float32)
        row_sum = T.alloc_fragment((block_m,), T.float32)
        row_square_sum = T.alloc_fragment((block_m,), T.float32)
        output = T.alloc_fragment((block_m, N), T.float16)

        T.copy(X[block * block_m, 0], x)
        T.copy(R[block * block_m, 0], residual)

        for i, j in T.Parallel(block_m, N):
            x[i, j] = x[i, j] + residual[i, j]  # the residual first, then the statistics
            squares[i, j] = x[i, j] * x[i, j]

        T.reduce_sum(x, row_sum, dim=1, clear=True)
        T.reduce_sum(squares, row_square_sum, dim=1, clear=True)

        for i, j in T.Parallel(block_m, N):
            mean = row_sum[i] / N
            variance = row_square_sum[i] / N - mean * mean
            normalized = (x[i, j] - mean) * T.rsqrt(variance + eps)
            output[i, j] = T.Cast(T.float16, normalized * Gamma[j] + Beta[j])

        T.copy(output, Y[block * block_m, 0])

    return Y


# Exercise 05.2: the mean first, then the mean of (x - mean)^2
@tilelab.jit
def layer_norm_two_pass(X, Gamma, Beta, eps: float = 1e-5, block_m: int = 1):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float16)
    Gamma: T.Tensor((N,), T.float16)
    Beta: T.Tensor((N,), T.float16)
    Y = T.empty((M, N), T.float16)

    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        x = T.alloc_fragment((block_m, N), T.float32)
        squares = T.alloc_fragment((block_m, N), T.float32)
        row_sum = T.alloc_fragment((block_m,), T.float32)
        row_mean = T.alloc_fragment((block_m,), T.float32)
        row_square_sum = T.alloc_fragment((block_m,), T.float32)
        output = T.alloc_fragment((block_m, N), T.float16)

        T.copy(X[block * block_m, 0], x)

        T.reduce_sum(x, row_sum, dim=1, clear=True)
        for i in T.Parallel(block_m):
            row_mean[i] = row_sum[i] / N

        for i, j in T.Parallel(block_m, N):  # second pass, over registers: free
            centered = x[i, j] - row_mean[i]
            squares[i, j] = centered * centered
        T.reduce_sum(squares, row_square_sum, dim=1, clear=True)

        for i, j in T.Parallel(block_m, N):
            inverse_std = T.rsqrt(row_square_sum[i] / N + eps)
            normalized = (x[i, j] - row_mean[i]) * inverse_std
            output[i, j] = T.Cast(T.float16, normalized * Gamma[j] + Beta[j])

        T.copy(output, Y[block * block_m, 0])

    return Y
