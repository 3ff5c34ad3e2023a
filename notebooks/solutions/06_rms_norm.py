"""Solutions to chapter 6's exercise. In the notebook: %load solutions/06_rms_norm.py"""

import tilelab
import tilelab.language as T


# Exercise 06.1: H = X + R and Y = RMSNorm(H) * weight, both from one kernel
@tilelab.jit
def add_rms_norm(X, R, Weight, eps: float = 1e-6, block_m: int = 1):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float16)
    R: T.Tensor((M, N), T.float16)
    Weight: T.Tensor((N,), T.float16)
    H = T.empty((M, N), T.float16)
    Y = T.empty((M, N), T.float16)

    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        x = T.alloc_fragment((block_m, N), T.float32)
        residual = T.alloc_fragment((block_m, N), T.float32)
        hidden = T.alloc_fragment((block_m, N), T.float16)
        squares = T.alloc_fragment((block_m, N), T.float32)
        square_sum = T.alloc_fragment((block_m,), T.float32)
        output = T.alloc_fragment((block_m, N), T.float16)

        T.copy(X[block * block_m, 0], x)
        T.copy(R[block * block_m, 0], residual)

        for i, j in T.Parallel(block_m, N):
            hidden[i, j] = T.Cast(T.float16, x[i, j] + residual[i, j])
        T.copy(hidden, H[block * block_m, 0])

        for i, j in T.Parallel(block_m, N):
            x[i, j] = T.Cast(T.float32, hidden[i, j])  # normalize what H holds
            squares[i, j] = x[i, j] * x[i, j]
        T.reduce_sum(squares, square_sum, dim=1, clear=True)

        for i, j in T.Parallel(block_m, N):
            inverse_rms = T.rsqrt(square_sum[i] / N + eps)
            output[i, j] = T.Cast(T.float16, x[i, j] * inverse_rms * Weight[j])
        T.copy(output, Y[block * block_m, 0])

    return H, Y
