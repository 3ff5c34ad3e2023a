"""Row sum: Y[i] = sum_j X[i, j] with a tile reduction (course chapter 8).

Each block loads `block_m` whole rows into a register fragment and reduces
them along dim 1 with `T.reduce_sum`. When M is not a multiple of `block_m`,
the last block's `T.copy` reads zeros past the last row and skips writing
the sums of rows that do not exist.

    python examples/row_sum.py --device cpu --m 4096 --n 1024
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.row_sum import row_sum_kernel`
    from . import common
else:  # run as a script, as in `python examples/row_sum.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit
def row_sum_kernel(X, block_m: int = 1):
    M, N = T.const("M, N")

    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M,), T.float32)

    with T.Kernel(T.ceildiv(M, block_m), threads=128) as block:
        values = T.alloc_fragment((block_m, N), T.float32)
        total = T.alloc_fragment((block_m,), T.float32)

        T.copy(X[block * block_m, 0], values)

        T.reduce_sum(values, total, dim=1, clear=True)

        T.copy(total, Y[block * block_m])

    return Y


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def check(device: str) -> None:
    """Fresh random matrices; (37, 100) with block_m=4 leaves a partial last block."""
    for (m, n), block_m in [((64, 128), 1), ((64, 128), 8), ((37, 100), 4)]:
        x = torch.randn(m, n, device=device, dtype=torch.float32)
        actual = row_sum_kernel(x, block_m=block_m)
        torch.testing.assert_close(actual, reference(x), rtol=1e-4, atol=1e-4)


def main() -> None:
    args = common.parser(__doc__, sizes={"m": "rows", "n": "columns"}, block_m=1).parse_args()
    m = common.pick_size(args.m, args.device, gpu=8192, cpu=2048)
    n = common.pick_size(args.n, args.device, gpu=4096, cpu=1024)

    check(args.device)
    print("row_sum: check passed (including a partial last block)")

    x = torch.randn(m, n, device=args.device, dtype=torch.float32)
    kernel = row_sum_kernel.compile(x, block_m=args.block_m)
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-4, atol=1e-4)

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(x), lambda: reference(x),
                                               args.device)
    common.report(f"M = {m}, N = {n}, block_m = {args.block_m}, on {args.device}",
                  tilelab_ms, torch_ms, gigabytes=(m * n + m) * 4 / 1e9)  # read X, write Y


if __name__ == "__main__":
    main()
