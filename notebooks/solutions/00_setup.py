"""Solutions to chapter 0's exercise. In the notebook: %load solutions/00_setup.py"""

import torch

import tilelab
import tilelab.language as T

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# Exercise 00.1: Y = factor * X, in the factory style
@tilelab.jit(out_idx=[1], target=DEVICE)
def make_scale(N: int, factor: float, block_size: int = 128):
    @T.prim_func
    def scale_kernel(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block_size), threads=block_size) as block_id:
            for thread_id in T.Parallel(block_size):
                index = block_id * block_size + thread_id
                if index < N:
                    Y[index] = X[index] * factor

    return scale_kernel
