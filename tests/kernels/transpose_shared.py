"""A transpose through two shared tiles: one statement reads the first and writes the
second, so their lifetimes meet there (a regression: both once shared one address)."""

import tilelab
import tilelab.language as T


@tilelab.jit
def transpose_through_shared(A, block: int = 32):
    M, N = T.const("M"), T.const("N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((N, M), T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=256) as (bx, by):
        tile = T.alloc_shared((block, block), T.float32)
        flipped = T.alloc_shared((block, block), T.float32)
        T.copy(A[by * block, bx * block], tile)
        for i, j in T.Parallel(block, block):
            flipped[j, i] = tile[i, j]
        T.copy(flipped, B[bx * block, by * block])
    return B
