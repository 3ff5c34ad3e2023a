"""Shared tiles whose swizzled columns TVM 0.27 once could not flatten (differential tester,
seeds 4311 #140 and 4301 #118, shrunk): written as `chunk - chunk % 8`, a column of the
first eight chunks became `c * 8 - c % 8 * 8` with c < 8, and FlattenBuffer divided by zero.
Layout.swizzled and Layout.wgmma_panels write the group as `chunk // 8 * 8` instead."""

import tilelab
import tilelab.language as T


@tilelab.jit
def transposed_through_a_register(X):
    """A fragment's sub-region copied into a swizzled half tile, then each element read back
    transposed into a one-element register (seed 4311 #140)."""
    X: T.Tensor((64, 64), T.float16)
    Y = T.empty((64, 32), T.float16)
    with T.Kernel(1, threads=256) as _:
        f0 = T.alloc_fragment((32, 64), T.float16)
        s0 = T.alloc_shared((32, 64), T.float16)
        s1 = T.alloc_shared((64, 32), T.float16)
        l0 = T.alloc_local((1,), T.float16)
        T.copy(X[0, 0], f0)
        T.clear(s0)
        T.copy(f0[0:31, 41:53], s0[1:32, 14:26])
        for i, j in T.Parallel(64, 32):
            l0[0] = s0[j, i]
            s1[i, j] = l0[0] + 1
        T.copy(s1, Y[0, 0])
    return Y


def expected_transposed(x):
    import torch

    s0 = torch.zeros(32, 64, dtype=x.dtype)
    s0[1:32, 14:26] = x[0:31, 41:53]
    return s0.T + 1


@tilelab.jit
def part_of_a_float32_tile(X):
    """A float32 tile stored whole after a sub-region of a fragment was copied into it (seed
    4301 #118; its store goes by TMA where asked for, the tile in wgmma panels)."""
    X: T.Tensor((64, 8), T.float32)
    Y = T.empty((8, 64), T.float32)
    with T.Kernel(1, threads=64) as _:
        s0 = T.alloc_shared((64, 8), T.float32)
        f1 = T.alloc_fragment((8, 64), T.float32)
        s2 = T.alloc_shared((8, 64), T.float32)
        T.copy(X[0, 0], s0)
        for i, j in T.Parallel(8, 64):
            f1[i, j] = s0[j, i]
        T.clear(s2)
        T.copy(f1[2:6, 9:42], s2[2:6, 0:33])
        T.copy(s2, Y[0, 0])
    return Y


def expected_part(x):
    import torch

    y = torch.zeros(8, 64, dtype=x.dtype)
    y[2:6, 0:33] = x.T[2:6, 9:42]
    return y
