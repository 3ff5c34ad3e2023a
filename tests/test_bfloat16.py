"""bfloat16 on the CPU computes what the GPU computes.

TVM's CPU legalization carried bfloat16 arithmetic out in float32 and gave a kernel's
bfloat16 tiles float32 storage: a float32 value stored into one came back unrounded, and
`a * b + c` rounded once, where a GPU rounds each bfloat16 operation. A kernel that rounds
on purpose (scores written to a bfloat16 tile before a T.gemm) computed more precisely than
the GPU and failed checks against references that round as the GPU does
(flash-linear-attention's chunk_fwd_o, through TileLang's gdn/example_chunk_o).
passes/round_bfloat16.py rounds each bfloat16 value as it is computed; checked here against
torch's own rounding, ties, NaN, infinities and the largest values included."""

import pytest
import torch

import tilelab
import tilelab.language as T

M = N = 64


def through_tiles(scope):
    """Y: X after a stay in a bfloat16 tile; Z: that tile times W, by T.gemm."""
    @T.prim_func
    def kernel(X: T.Tensor((M, N), T.float32), W: T.Tensor((N, N), T.bfloat16),
               Y: T.Tensor((M, N), T.float32), Z: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((M, N), T.float32)
            tile = T.alloc_fragment((M, N), T.bfloat16) if scope == "fragment" else \
                T.alloc_shared((M, N), T.bfloat16)
            w = T.alloc_shared((N, N), T.bfloat16)
            acc = T.alloc_fragment((M, N), T.float32)
            T.copy(X, f)
            T.copy(f, tile)
            T.copy(tile, Y)
            T.copy(W, w)
            T.clear(acc)
            T.gemm(tile, w, acc)
            T.copy(acc, Z)

    return kernel


def _special_values():
    """float32 values at and around bfloat16's rounding points: exact ties (to even, both
    ways), one bit either side of a tie, the largest finite values, infinities, NaN."""
    ties = torch.tensor([0x3F808000, 0x3F818000, 0xBF808000, 0x3F807FFF, 0x3F808001,
                         0x7F7FFFFF, 0x7F7F7FFF, 0xFF7FFFFF, 0x00008000, 0x00018000],
                        dtype=torch.int64).to(torch.int32).view(torch.float32)
    return torch.cat([ties, torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0,
                                          -0.0, 1e-40, -3.0e38])])


@pytest.mark.parametrize("scope", ["fragment", "shared"])
def test_a_bfloat16_tile_rounds_what_is_stored_in_it(scope):
    kernel = tilelab.compile(through_tiles(scope), target="cpu")
    x = torch.randn(M, N) * 3
    special = _special_values()
    x.view(-1)[:special.numel()] = special
    w = torch.randn(N, N).bfloat16()
    y, z = torch.empty(M, N), torch.empty(M, N)
    kernel(x, w, y, z)
    rounded = x.bfloat16().float()
    same = (y == rounded) | (y.isnan() & rounded.isnan())
    assert same.all(), f"{(~same).sum().item()} values differ from torch's rounding"
    finite = rounded.isfinite().all(dim=1)  # rows without inf/NaN: their product is a number
    want = rounded[finite] @ w.float()
    assert torch.allclose(z[finite], want, rtol=1e-5, atol=1e-4)
    unrounded = x[finite] @ w.float()
    assert not torch.allclose(z[finite], unrounded, rtol=1e-5, atol=1e-4)


def test_each_bfloat16_operation_rounds_as_on_a_gpu():
    """`a * b + a` of bfloat16 values: the product rounds to bfloat16, then the sum, whether
    the result goes to a bfloat16 tile, a bfloat16 tensor or a float32 tensor; a bfloat16
    constant is a bfloat16 number too."""
    @T.prim_func
    def kernel(A: T.Tensor((256,), T.bfloat16), B: T.Tensor((256,), T.bfloat16),
               C: T.Tensor((256,), T.bfloat16), D: T.Tensor((256,), T.float32),
               E: T.Tensor((256,), T.float32)):
        with T.Kernel(1, threads=64):
            t = T.alloc_fragment((256,), T.bfloat16)
            for i in T.Parallel(256):
                t[i] = A[i] * B[i] + A[i]
            for i in T.Parallel(256):
                C[i] = t[i]
                D[i] = A[i] * B[i] + A[i]
                E[i] = A[i] * T.bfloat16(0.1)

    compiled = tilelab.compile(kernel, target="cpu")
    a, b = torch.randn(256).bfloat16(), torch.randn(256).bfloat16()
    c, d, e = torch.empty(256, dtype=torch.bfloat16), torch.empty(256), torch.empty(256)
    compiled(a, b, c, d, e)
    stepwise = (a * b) + a  # torch rounds each bfloat16 operation, as a GPU does
    once = (a.float() * b.float() + a.float()).bfloat16()
    assert not torch.equal(stepwise, once)  # the draw tells the two apart
    assert torch.equal(c, stepwise) and torch.equal(d, stepwise.float())
    assert torch.equal(e, (a * torch.tensor(0.1, dtype=torch.bfloat16)).float())
