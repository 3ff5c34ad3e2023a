"""Solutions to chapter 4's exercises. In the notebook: %load solutions/04_gemm.py"""

import tilelab
import tilelab.language as T

# Exercise 04.1: block_m = block_n = 128, block_k = 32, float16, num_stages = 3
stage_bytes = (128 * 32 + 32 * 128) * 2  # a tile of A and a tile of B: 16384
shared_bytes = 3 * stage_bytes  # three of each in flight: 49152
uses_per_a_element = 128  # A[i, k] meets B[k, j] for each of the block_n columns j


# Exercise 04.2: C = A @ B + R, the residual added in the epilogue
@tilelab.jit
def gemm_residual(A, B, R, block_m: int = 128, block_n: int = 128, block_k: int = 32,
                  num_stages: int = 2):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    R: T.Tensor((M, N), T.float16)
    C = T.empty((M, N), T.float16)

    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=128) as (
        block_x,
        block_y,
    ):
        a_shared = T.alloc_shared((block_m, block_k), T.float16)
        b_shared = T.alloc_shared((block_k, block_n), T.float16)
        r_shared = T.alloc_shared((block_m, block_n), T.float16)
        c_fragment = T.alloc_fragment((block_m, block_n), T.float32)

        T.clear(c_fragment)

        for reduction_block in T.Pipelined(T.ceildiv(K, block_k), num_stages=num_stages):
            T.copy(A[block_y * block_m, reduction_block * block_k], a_shared)
            T.copy(B[reduction_block * block_k, block_x * block_n], b_shared)
            T.gemm(a_shared, b_shared, c_fragment)

        # the block's tile of R, at the same offset as its tile of C (zeros past the edges)
        T.copy(R[block_y * block_m, block_x * block_n], r_shared)
        for i, j in T.Parallel(block_m, block_n):
            c_fragment[i, j] = c_fragment[i, j] + r_shared[i, j]

        T.copy(c_fragment, C[block_y * block_m, block_x * block_n])

    return C
