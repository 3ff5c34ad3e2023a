"""Online softmax: a row softmax that never holds a whole row (course chapter 9.6).

`softmax.py` keeps each row in registers, which stops working for long rows.
Here a block walks along its rows in tiles of `block_n` columns and keeps
only two numbers per row: the running maximum m and the running sum l of
exp(x - m). When a tile raises the maximum from m_old to m_new, the sum so
far is rescaled by exp(m_old - m_new) before the tile's terms are added, so
after one pass over the row l is the exact softmax denominator. A second
pass then writes exp(x - m) / l tile by tile.

The exponentials use exp2 on x·log2(e), as GPU kernels do (exp(x) = 2^(x·log2 e)).
The last tile of a row may stick out past column N: `T.copy` fills those
columns with zeros, so they are masked to -inf before they can count.

    python examples/online_softmax.py --device cpu --m 256 --n 8192 --block-n 512
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.online_softmax import online_softmax_kernel`
    from . import common
else:  # run as a script, as in `python examples/online_softmax.py`
    import common

default_device = common.default_device  # still importable from this module

LOG2_E = 1.4426950408889634


@tilelab.jit
def online_softmax_kernel(X, block_m: int = 1, block_n: int = 256, num_stages: int = 2):
    M, N = T.const("M, N")

    input_dtype = T.float16
    accumulation_dtype = T.float32

    X: T.Tensor((M, N), input_dtype)
    Y = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        tile = T.alloc_fragment((block_m, block_n), accumulation_dtype)
        output = T.alloc_fragment((block_m, block_n), input_dtype)

        running_max = T.alloc_fragment((block_m,), accumulation_dtype)
        previous_max = T.alloc_fragment((block_m,), accumulation_dtype)
        rescale = T.alloc_fragment((block_m,), accumulation_dtype)
        tile_sum = T.alloc_fragment((block_m,), accumulation_dtype)
        running_sum = T.alloc_fragment((block_m,), accumulation_dtype)

        T.fill(running_max, -T.infinity(accumulation_dtype))
        T.fill(running_sum, 0)

        # pass 1: running max and running sum, one tile of columns at a time
        for column_block in T.Pipelined(T.ceildiv(N, block_n), num_stages=num_stages):
            T.copy(X[block * block_m, column_block * block_n], tile)

            # scale to base 2; columns past the end of the row must not count
            for i, j in T.Parallel(block_m, block_n):
                tile[i, j] = T.if_then_else(
                    column_block * block_n + j < N,
                    tile[i, j] * LOG2_E,
                    -T.infinity(accumulation_dtype),
                )

            T.copy(running_max, previous_max)
            T.reduce_max(tile, running_max, dim=1, clear=False)

            for i in T.Parallel(block_m):
                rescale[i] = T.exp2(previous_max[i] - running_max[i])

            for i, j in T.Parallel(block_m, block_n):
                tile[i, j] = T.exp2(tile[i, j] - running_max[i])

            T.reduce_sum(tile, tile_sum, dim=1, clear=True)

            for i in T.Parallel(block_m):
                running_sum[i] = running_sum[i] * rescale[i] + tile_sum[i]

        # pass 2: normalize with the final max and sum
        for column_block in T.Pipelined(T.ceildiv(N, block_n), num_stages=num_stages):
            T.copy(X[block * block_m, column_block * block_n], tile)

            for i, j in T.Parallel(block_m, block_n):
                probability = T.exp2(tile[i, j] * LOG2_E - running_max[i]) / running_sum[i]
                output[i, j] = T.Cast(input_dtype, probability)

            T.copy(output, Y[block * block_m, column_block * block_n])

    return Y


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def check(device: str) -> None:
    """Fresh random rows, with whole tiles and with a partial last tile or block."""
    cases = [((16, 512), 1, 128), ((16, 512), 4, 64), ((10, 1000), 4, 128), ((3, 37), 1, 16)]
    for (m, n), block_m, block_n in cases:
        # negative rows: unmasked zero padding past column N would dominate the sum
        x = torch.randn(m, n, device=device, dtype=torch.float16) * 2 - 4
        actual = online_softmax_kernel(x, block_m=block_m, block_n=block_n)
        torch.testing.assert_close(actual, reference(x), rtol=1e-2, atol=1e-2)


def main() -> None:
    sizes = {"m": "rows", "n": "columns (the softmax axis)"}
    parser = common.parser(__doc__, sizes, block_m=1)
    parser.add_argument("--block-n", type=int, default=256)
    args = parser.parse_args()
    m = common.pick_size(args.m, args.device, gpu=4096, cpu=256)
    n = common.pick_size(args.n, args.device, gpu=32768, cpu=4096)

    check(args.device)
    print("online_softmax: check passed (including partial tiles)")

    x = torch.randn(m, n, device=args.device, dtype=torch.float16)
    kernel = online_softmax_kernel.compile(x, block_m=args.block_m, block_n=args.block_n)
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-2, atol=1e-2)

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(x),
                                               lambda: torch.softmax(x, dim=-1), args.device)
    common.report(f"M = {m}, N = {n}, float16, block {args.block_m}×{args.block_n}, "
                  f"on {args.device}",
                  tilelab_ms, torch_ms, gigabytes=3 * m * n * 2 / 1e9)  # X read twice, Y once


if __name__ == "__main__":
    main()
