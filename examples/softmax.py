"""Row softmax: Y = softmax(X, dim=-1), whole rows in registers (course chapter 9).

Each block holds `block_m` full rows in a fragment and runs the stable
softmax on them: row max, exp(x - max) in float32, row sum, divide. This is
the teaching version: a very long row does not fit in registers, which is
what `online_softmax.py` fixes. When M is not a multiple of `block_m`, the
last block works on zero rows past the end, and `T.copy` never writes them.

    python examples/softmax.py --device cpu --m 2048 --n 1024
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.softmax import softmax_kernel`
    from . import common
else:  # run as a script, as in `python examples/softmax.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit
def softmax_kernel(X, block_m: int = 1, threads: int = 128):
    M, N = T.const("M, N")

    input_dtype = T.float16
    accumulation_dtype = T.float32

    X: T.Tensor((M, N), input_dtype)
    Y = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as block:
        x = T.alloc_fragment((block_m, N), input_dtype)
        exponentials = T.alloc_fragment((block_m, N), accumulation_dtype)
        output = T.alloc_fragment((block_m, N), input_dtype)

        row_max = T.alloc_fragment((block_m,), input_dtype)
        row_sum = T.alloc_fragment((block_m,), accumulation_dtype)

        T.copy(X[block * block_m, 0], x)

        T.reduce_max(x, row_max, dim=1, clear=True)

        for i, column in T.Parallel(block_m, N):
            value = T.Cast(accumulation_dtype, x[i, column])
            maximum = T.Cast(accumulation_dtype, row_max[i])

            exponentials[i, column] = T.exp(value - maximum)

        T.reduce_sum(exponentials, row_sum, dim=1, clear=True)

        for i, column in T.Parallel(block_m, N):
            output[i, column] = T.Cast(input_dtype, exponentials[i, column] / row_sum[i])

        T.copy(output, Y[block * block_m, 0])

    return Y


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def check(device: str) -> None:
    """Fresh random rows; (50, 100) with block_m=8 leaves a partial last block."""
    for (m, n), block_m in [((64, 256), 1), ((64, 256), 4), ((50, 100), 8), ((3, 1000), 1)]:
        x = torch.randn(m, n, device=device, dtype=torch.float16) * 3
        actual = softmax_kernel(x, block_m=block_m)
        torch.testing.assert_close(actual, reference(x), rtol=1e-2, atol=1e-2)


def main() -> None:
    sizes = {"m": "rows", "n": "columns (the softmax axis)"}
    args = common.parser(__doc__, sizes, block_m=1).parse_args()
    m = common.pick_size(args.m, args.device, gpu=4096, cpu=1024)
    n = common.pick_size(args.n, args.device, gpu=4096, cpu=1024)

    check(args.device)
    print("softmax: check passed (including a partial last block)")

    x = torch.randn(m, n, device=args.device, dtype=torch.float16)
    kernel = softmax_kernel.compile(x, block_m=args.block_m)
    torch.testing.assert_close(kernel(x), reference(x), rtol=1e-2, atol=1e-2)

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(x),
                                               lambda: torch.softmax(x, dim=-1), args.device)
    common.report(f"M = {m}, N = {n}, float16, block_m = {args.block_m}, on {args.device}",
                  tilelab_ms, torch_ms, gigabytes=2 * m * n * 2 / 1e9)  # read X, write Y


if __name__ == "__main__":
    main()
