"""Solutions to chapter 1's exercises. In the notebook: %load solutions/01_vector_add.py"""

import tilelab
import tilelab.language as T


# Exercise 01.1: relu(A + B) * scale in one kernel
@tilelab.jit
def add_relu_scale(A, B, scale: float = 2.0, block_size: int = 256):
    N = T.const("N")

    A: T.Tensor((N,), T.float32)
    B: T.Tensor((N,), T.float32)
    C = T.empty((N,), T.float32)

    with T.Kernel(T.ceildiv(N, block_size), threads=block_size) as block_id:
        for thread_id in T.Parallel(block_size):
            index = block_id * block_size + thread_id
            if index < N:
                C[index] = T.max(A[index] + B[index], 0) * scale

    return C


# Exercise 01.2: N = 1000 float32 elements, block_size = 256
blocks = 4  # T.ceildiv(1000, 256)
idle_threads = 24  # 4 * 256 - 1000
bytes_moved = 12000  # (read A + read B + write C) * 1000 * 4 bytes
