"""Vector add: C = A + B, one element per thread (course chapter 7).

The simplest kernel there is: a 1-d grid of blocks, each block a `T.Parallel`
loop over `block_size` elements. The last block may reach past the end of the
vectors, so every element checks `index < N` before it reads or writes.

    python examples/vector_add.py --device cpu --size 1000000
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.vector_add import vector_add_kernel`
    from . import common
else:  # run as a script, as in `python examples/vector_add.py`
    import common

default_device = common.default_device  # still importable from this module


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


def main() -> None:
    parser = common.parser(__doc__, sizes={"size": "vector length"})
    parser.add_argument("--block-size", type=int, default=256)
    args = parser.parse_args()
    n = common.pick_size(args.size, args.device, gpu=1 << 24, cpu=1 << 20)

    check(args.device)
    print("vector_add: check passed (including a partial last block)")

    a = torch.randn(n, device=args.device, dtype=torch.float32)
    b = torch.randn_like(a)
    kernel = vector_add_kernel.compile(a, b, block_size=args.block_size)
    torch.testing.assert_close(kernel(a, b), reference(a, b))

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(a, b), lambda: reference(a, b),
                                               args.device)
    common.report(f"N = {n}, block_size = {args.block_size}, on {args.device}",
                  tilelab_ms, torch_ms, gigabytes=3 * n * 4 / 1e9)  # read A and B, write C


if __name__ == "__main__":
    main()
