"""RMSNorm: Y = X / sqrt(mean(X²) + eps) * weight, per row (course chapter 12).

LayerNorm without the mean: each block loads `block_m` rows into a float32
fragment, reduces the squares, turns the mean square into an inverse RMS
with `T.rsqrt`, and scales. When M is not a multiple of `block_m`, the last
block works on zero rows past the end, which `T.copy` never writes back.

    python examples/rms_norm.py --device cpu --m 2048 --n 1024
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.rms_norm import rms_norm_kernel`
    from . import common
else:  # run as a script, as in `python examples/rms_norm.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit
def rms_norm_kernel(X, Weight, eps: float = 1e-6, block_m: int = 1,
                    threads: int = 128):
    M, N = T.const("M, N")

    input_dtype = T.float16
    accumulation_dtype = T.float32

    X: T.Tensor((M, N), input_dtype)
    Weight: T.Tensor((N,), input_dtype)

    Y = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as block:
        values = T.alloc_fragment((block_m, N), accumulation_dtype)
        squares = T.alloc_fragment((block_m, N), accumulation_dtype)
        square_sum = T.alloc_fragment((block_m,), accumulation_dtype)
        inverse_rms = T.alloc_fragment((block_m,), accumulation_dtype)
        output = T.alloc_fragment((block_m, N), input_dtype)

        T.copy(X[block * block_m, 0], values)

        for i, j in T.Parallel(block_m, N):
            squares[i, j] = values[i, j] * values[i, j]

        T.reduce_sum(squares, square_sum, dim=1, clear=True)

        for i in T.Parallel(block_m):
            inverse_rms[i] = T.rsqrt(square_sum[i] / N + eps)

        for i, j in T.Parallel(block_m, N):
            output[i, j] = T.Cast(
                input_dtype,
                values[i, j] * inverse_rms[i] * T.Cast(accumulation_dtype, Weight[j]),
            )

        T.copy(output, Y[block * block_m, 0])

    return Y


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    inverse_rms = torch.rsqrt(x.float().square().mean(dim=-1, keepdim=True) + eps)
    return (x.float() * inverse_rms * weight.float()).to(x.dtype)


def random_inputs(m: int, n: int, device: str):
    x = torch.randn(m, n, device=device, dtype=torch.float16)
    weight = torch.randn(n, device=device, dtype=torch.float16)
    return x, weight


def check(device: str) -> None:
    """Fresh random inputs; (30, 100) with block_m=8 leaves a partial last block."""
    for (m, n), block_m in [((64, 256), 1), ((64, 256), 8), ((30, 100), 8)]:
        x, weight = random_inputs(m, n, device)
        actual = rms_norm_kernel(x, weight, block_m=block_m)
        torch.testing.assert_close(actual, reference(x, weight), rtol=1e-2, atol=1e-2)


def main() -> None:
    sizes = {"m": "rows", "n": "normalized width"}
    args = common.parser(__doc__, sizes, block_m=1).parse_args()
    m = common.pick_size(args.m, args.device, gpu=8192, cpu=1024)
    n = common.pick_size(args.n, args.device, gpu=4096, cpu=1024)

    check(args.device)
    print("rms_norm: check passed (including a partial last block)")

    x, weight = random_inputs(m, n, args.device)
    kernel = rms_norm_kernel.compile(x, weight, block_m=args.block_m)
    torch.testing.assert_close(kernel(x, weight), reference(x, weight), rtol=1e-2, atol=1e-2)

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(x, weight),
                                               lambda: reference(x, weight), args.device)
    common.report(f"M = {m}, N = {n}, float16, block_m = {args.block_m}, on {args.device}",
                  tilelab_ms, torch_ms, labels=("tilelab", "PyTorch (unfused)"),
                  gigabytes=(2 * m * n + n) * 2 / 1e9)  # read X and the weight, write Y


if __name__ == "__main__":
    main()
