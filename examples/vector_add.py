"""Vector add: C = A + B, one element per thread (course chapter 7).

The simplest kernel there is: a 1-d grid of blocks, each block a `T.Parallel`
loop over `block_size` elements. The last block may reach past the end of the
vectors, so every element checks `index < N` before it reads or writes.

    python examples/vector_add.py --device cpu --size 1000000
"""

from __future__ import annotations

import argparse

import torch

import tilelab
import tilelab.language as T
from tilelab.profiler import do_bench


@tilelab.jit
def vector_add_kernel(A, B, block_size: int = 256, threads: int = 0):
    N = T.const("N")

    A: T.Tensor((N,), T.float32)
    B: T.Tensor((N,), T.float32)

    C = T.empty((N,), T.float32)

    # One element per thread, as in the tutorial; with threads < block_size each thread
    # takes block_size // threads neighbouring elements (one 16-byte access for four).
    with T.Kernel(T.ceildiv(N, block_size), threads=threads or block_size) as block_id:
        for thread_id in T.Parallel(block_size):
            index = block_id * block_size + thread_id

            if index < N:
                C[index] = A[index] + B[index]

    return C


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def check(device: str) -> None:
    """Compare with PyTorch on fresh random vectors, with and without a partial last block."""
    for n, block_size in [(1024, 256), (1000, 256), (77, 32)]:
        a = torch.randn(n, device=device, dtype=torch.float32)
        b = torch.randn_like(a)
        actual = vector_add_kernel(a, b, block_size=block_size)
        torch.testing.assert_close(actual, reference(a, b))


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default=default_device())
    parser.add_argument("--size", type=int, default=None, help="vector length")
    parser.add_argument("--block-size", type=int, default=256)
    args = parser.parse_args()
    n = args.size or (1 << 24 if args.device == "cuda" else 1 << 20)

    check(args.device)
    print("vector_add: check passed (including a partial last block)")

    a = torch.randn(n, device=args.device, dtype=torch.float32)
    b = torch.randn_like(a)
    kernel = vector_add_kernel.compile(a, b, block_size=args.block_size)
    torch.testing.assert_close(kernel(a, b), reference(a, b))

    warmup, rep = (25, 100) if args.device == "cuda" else (5, 20)
    tilelab_ms = do_bench(lambda: kernel(a, b), warmup=warmup, rep=rep)
    torch_ms = do_bench(lambda: reference(a, b), warmup=warmup, rep=rep)
    gigabytes = 3 * n * 4 / 1e9  # read A and B, write C
    print(f"N = {n}, block_size = {args.block_size}, on {args.device}")
    print(f"  tilelab: {tilelab_ms:8.4f} ms  {gigabytes / tilelab_ms * 1e3:7.1f} GB/s")
    print(f"  PyTorch: {torch_ms:8.4f} ms  {gigabytes / torch_ms * 1e3:7.1f} GB/s")
    print(f"  speedup: {torch_ms / tilelab_ms:.2f}x")


if __name__ == "__main__":
    main()
