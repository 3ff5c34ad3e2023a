"""Copies to and from part of a fragment (a regression: the CUDA lowering once copied the
whole fragment, ignoring the region - wrong values and writes past a shared tile)."""

import tilelab
import tilelab.language as T


@tilelab.jit
def fragment_region_to_shared(A, block: int = 32):
    """Per tile: B[0:24, 16:32] = A[4:28, 8:24], the rest of the tile zero."""
    M, N = T.const("M"), T.const("N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        whole = T.alloc_fragment((block, block), T.float32)
        tile = T.alloc_shared((block, block), T.float32)
        T.copy(A[by * block, bx * block], whole)
        T.clear(tile)
        T.copy(whole[4:28, 8:24], tile[0:24, 16:32])
        T.copy(tile, B[by * block, bx * block])
    return B


@tilelab.jit
def fragment_regions_between_fragments(A, block: int = 32):
    """Per tile: a (16, 16) fragment takes A[8:24, 0:16] of the tile and goes back into a
    cleared (32, 32) fragment at [16:32, 16:32]; also global -> part of a fragment."""
    M, N = T.const("M"), T.const("N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=64) as (bx, by):
        whole = T.alloc_fragment((block, block), T.float32)
        part = T.alloc_fragment((16, 16), T.float32)
        out = T.alloc_fragment((block, block), T.float32)
        T.copy(A[by * block, bx * block], whole)
        T.copy(whole[8:24, 0:16], part)
        T.clear(out)
        T.copy(part, out[16:32, 16:32])
        T.copy(A[by * block, bx * block], out[0:8, 0:32])
        T.copy(out, B[by * block, bx * block])
    return B


def tiles(a, block: int = 32):
    """`a` zero-padded to whole tiles, as (tiles_m, tiles_n, block, block)."""
    import torch

    m, n = a.shape
    pm, pn = -(-m // block) * block, -(-n // block) * block
    padded = torch.zeros(pm, pn, dtype=a.dtype, device=a.device)
    padded[:m, :n] = a
    return padded.reshape(pm // block, block, pn // block, block).permute(0, 2, 1, 3)


def untile(t, shape):
    tm, tn, b, _ = t.shape
    return t.permute(0, 2, 1, 3).reshape(tm * b, tn * b)[: shape[0], : shape[1]]


def expected_to_shared(a):
    import torch

    t = tiles(a)
    out = torch.zeros_like(t)
    out[:, :, 0:24, 16:32] = t[:, :, 4:28, 8:24]
    return untile(out, a.shape)


def expected_between_fragments(a):
    import torch

    t = tiles(a)
    out = torch.zeros_like(t)
    out[:, :, 16:32, 16:32] = t[:, :, 8:24, 0:16]
    out[:, :, 0:8, :] = t[:, :, 0:8, :]
    return untile(out, a.shape)


@tilelab.jit
def reverse_flagged_tiles(A, Flags, block: int = 32):
    """Per tile: reversed through shared memory where Flags[tile] > 0, else zeros; each
    block does two tiles in a loop. The branch reads a tensor the kernel never writes,
    so every thread of a block takes it the same way and barriers may go inside it."""
    N, G = T.const("N"), T.const("G")
    A: T.Tensor((N,), T.float32)
    Flags: T.Tensor((G,), T.int32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(G, 2), threads=64) as bx:
        tile = T.alloc_shared((block,), T.float32)
        flipped = T.alloc_shared((block,), T.float32)
        for k in T.serial(2):
            T.clear(flipped)
            g = bx * 2 + k
            if Flags[g] > 0:
                T.copy(A[g * block], tile)
                for i in T.Parallel(block):
                    flipped[i] = tile[block - 1 - i]
            T.copy(flipped, B[g * block])
    return B


def expected_reverse_flagged(a, flags, block: int = 32):
    import torch

    out = torch.zeros_like(a)
    for g, flag in enumerate(flags.tolist()):
        if flag > 0:
            tile = torch.zeros(block, dtype=a.dtype, device=a.device)
            part = a[g * block:(g + 1) * block]
            tile[:len(part)] = part
            out[g * block:(g + 1) * block] = tile.flip(0)[:len(part)]
    return out


@tilelab.jit
def wide_softmax(A, rows: int = 32, cols: int = 512):
    """Softmax of 512-wide rows by 32 threads: each thread holds 512 values of the tile
    across two reductions, more than its 255 registers (ptxas spills them)."""
    M = T.const("M")
    A: T.Tensor((M, cols), T.float32)
    B = T.empty((M, cols), T.float32)
    with T.Kernel(T.ceildiv(M, rows), threads=32) as bx:
        tile = T.alloc_fragment((rows, cols), T.float32)
        top = T.alloc_fragment((rows,), T.float32)
        total = T.alloc_fragment((rows,), T.float32)
        T.copy(A[bx * rows, 0], tile)
        T.reduce_max(tile, top, dim=1)
        for i, j in T.Parallel(rows, cols):
            tile[i, j] = T.exp(tile[i, j] - top[i])
        T.reduce_sum(tile, total, dim=1)
        for i, j in T.Parallel(rows, cols):
            tile[i, j] = tile[i, j] / total[i]
        T.copy(tile, B[bx * rows, 0])
    return B
