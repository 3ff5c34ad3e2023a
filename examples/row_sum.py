"""Row sum: Y[i] = sum_j X[i, j] with a tile reduction (course chapter 8).

Each block loads `block_m` whole rows into a register fragment and reduces
them along dim 1 with `T.reduce_sum`. When M is not a multiple of `block_m`,
the last block's `T.copy` reads zeros past the last row and skips writing
the sums of rows that do not exist.

    python examples/row_sum.py --device cpu --m 4096 --n 1024
"""

from __future__ import annotations

import argparse

import torch

import tilelab
import tilelab.language as T
from tilelab.profiler import do_bench


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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=default_device())
    parser.add_argument("--m", type=int, default=None, help="rows")
    parser.add_argument("--n", type=int, default=None, help="columns")
    parser.add_argument("--block-m", type=int, default=1)
    args = parser.parse_args()
    big = args.device == "cuda"
    m, n = args.m or (8192 if big else 2048), args.n or (4096 if big else 1024)

    check(args.device)
    print("row_sum: check passed (including a partial last block)")

    x = torch.randn(m, n, device=args.device, dtype=torch.float32)
    kernel = row_sum_kernel.compile(x, block_m=args.block_m)
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-4, atol=1e-4)

    warmup, rep = (25, 100) if args.device == "cuda" else (5, 20)
    tilelab_ms = do_bench(lambda: kernel(x), warmup=warmup, rep=rep)
    torch_ms = do_bench(lambda: reference(x), warmup=warmup, rep=rep)
    gigabytes = (m * n + m) * 4 / 1e9
    print(f"M = {m}, N = {n}, block_m = {args.block_m}, on {args.device}")
    print(f"  tilelab: {tilelab_ms:8.4f} ms  {gigabytes / tilelab_ms * 1e3:7.1f} GB/s")
    print(f"  PyTorch: {torch_ms:8.4f} ms  {gigabytes / torch_ms * 1e3:7.1f} GB/s")
    print(f"  speedup: {torch_ms / tilelab_ms:.2f}x")


if __name__ == "__main__":
    main()
