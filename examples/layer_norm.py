"""LayerNorm: Y = (X - mean) / sqrt(var + eps) * gamma + beta, per row (course chapter 11).

Each block normalizes `block_m` whole rows in one pass over memory: load the
rows (and gamma, beta) once, reduce the sum and the sum of squares in float32,
derive the mean and the inverse standard deviation, scale and shift, write.
When M is not a multiple of `block_m`, the last block normalizes zero rows
past the end (harmless: their variance is 0 and eps keeps rsqrt finite) and
`T.copy` never writes them.

    python examples/layer_norm.py --device cpu --m 2048 --n 1024
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.layer_norm import layer_norm_kernel`
    from . import common
else:  # run as a script, as in `python examples/layer_norm.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit
def layer_norm_kernel(X, Gamma, Beta, eps: float = 1e-5, block_m: int = 1,
                      threads: int = 256):
    M, N = T.const("M, N")

    input_dtype = T.float16
    accumulation_dtype = T.float32

    X: T.Tensor((M, N), input_dtype)
    Gamma: T.Tensor((N,), input_dtype)
    Beta: T.Tensor((N,), input_dtype)

    Y = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as block:
        x_shared = T.alloc_shared((block_m, N), input_dtype)
        gamma_shared = T.alloc_shared((N,), input_dtype)
        beta_shared = T.alloc_shared((N,), input_dtype)

        x = T.alloc_fragment((block_m, N), accumulation_dtype)
        x_squared = T.alloc_fragment((block_m, N), accumulation_dtype)

        row_sum = T.alloc_fragment((block_m,), accumulation_dtype)
        row_square_sum = T.alloc_fragment((block_m,), accumulation_dtype)
        row_mean = T.alloc_fragment((block_m,), accumulation_dtype)
        row_inverse_std = T.alloc_fragment((block_m,), accumulation_dtype)

        T.copy(X[block * block_m, 0], x_shared)
        T.copy(Gamma, gamma_shared)
        T.copy(Beta, beta_shared)

        for i, j in T.Parallel(block_m, N):
            value = T.Cast(accumulation_dtype, x_shared[i, j])

            x[i, j] = value
            x_squared[i, j] = value * value

        T.reduce_sum(x, row_sum, dim=1, clear=True)
        T.reduce_sum(x_squared, row_square_sum, dim=1, clear=True)

        inverse_width = T.float32(1.0) / T.Cast(accumulation_dtype, N)

        for i in T.Parallel(block_m):
            mean = row_sum[i] * inverse_width
            variance = row_square_sum[i] * inverse_width - mean * mean

            row_mean[i] = mean
            row_inverse_std[i] = T.rsqrt(variance + eps)

        for i, j in T.Parallel(block_m, N):
            normalized = (x[i, j] - row_mean[i]) * row_inverse_std[i]

            result = (
                normalized * T.Cast(accumulation_dtype, gamma_shared[j])
                + T.Cast(accumulation_dtype, beta_shared[j])
            )

            x_shared[i, j] = T.Cast(input_dtype, result)

        T.copy(x_shared, Y[block * block_m, 0])

    return Y


@tilelab.jit
def layer_norm_in_registers_kernel(X, Gamma, Beta, eps: float = 1e-5, block_m: int = 1,
                                   threads: int = 256):
    """The same LayerNorm without the shared-memory stops: every thread reads its own
    elements of X straight into registers (16 bytes at a time), and gamma and beta come
    from global memory inside the loop, where the cache keeps them for the other rows.
    Nothing is shared between threads except the two row reductions, so the kernel moves
    X and Y once and waits at fewer barriers."""
    M, N = T.const("M, N")

    input_dtype = T.float16
    accumulation_dtype = T.float32

    X: T.Tensor((M, N), input_dtype)
    Gamma: T.Tensor((N,), input_dtype)
    Beta: T.Tensor((N,), input_dtype)

    Y = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as block:
        x = T.alloc_fragment((block_m, N), accumulation_dtype)
        x_squared = T.alloc_fragment((block_m, N), accumulation_dtype)
        y = T.alloc_fragment((block_m, N), input_dtype)

        row_sum = T.alloc_fragment((block_m,), accumulation_dtype)
        row_square_sum = T.alloc_fragment((block_m,), accumulation_dtype)

        T.copy(X[block * block_m, 0], x)

        for i, j in T.Parallel(block_m, N):
            x_squared[i, j] = x[i, j] * x[i, j]

        T.reduce_sum(x, row_sum, dim=1, clear=True)
        T.reduce_sum(x_squared, row_square_sum, dim=1, clear=True)

        for i, j in T.Parallel(block_m, N):
            mean = row_sum[i] / N
            inverse_std = T.rsqrt(row_square_sum[i] / N - mean * mean + eps)
            y[i, j] = T.Cast(input_dtype, (x[i, j] - mean) * inverse_std
                             * T.Cast(accumulation_dtype, Gamma[j])
                             + T.Cast(accumulation_dtype, Beta[j]))

        T.copy(y, Y[block * block_m, 0])

    return Y


def reference(x, gamma, beta, eps: float = 1e-5) -> torch.Tensor:
    return F.layer_norm(x.float(), normalized_shape=(x.shape[-1],), weight=gamma.float(),
                        bias=beta.float(), eps=eps).to(x.dtype)


def random_inputs(m: int, n: int, device: str):
    x = torch.randn(m, n, device=device, dtype=torch.float16)
    gamma = torch.randn(n, device=device, dtype=torch.float16)
    beta = torch.randn(n, device=device, dtype=torch.float16)
    return x, gamma, beta


def check(device: str) -> None:
    """Fresh random inputs; (30, 100) with block_m=4 leaves a partial last block."""
    for (m, n), block_m in [((64, 256), 1), ((64, 256), 4), ((30, 100), 4)]:
        x, gamma, beta = random_inputs(m, n, device)
        for kernel in (layer_norm_kernel, layer_norm_in_registers_kernel):
            actual = kernel(x, gamma, beta, block_m=block_m)
            torch.testing.assert_close(actual, reference(x, gamma, beta), rtol=1e-2,
                                       atol=1e-2)


def main() -> None:
    sizes = {"m": "rows", "n": "normalized width"}
    args = common.parser(__doc__, sizes, block_m=1).parse_args()
    m = common.pick_size(args.m, args.device, gpu=8192, cpu=2048)
    n = common.pick_size(args.n, args.device, gpu=4096, cpu=1024)

    check(args.device)
    print("layer_norm: check passed (including a partial last block)")

    x, gamma, beta = random_inputs(m, n, args.device)
    kernel = layer_norm_kernel.compile(x, gamma, beta, block_m=args.block_m)
    torch.testing.assert_close(kernel(x, gamma, beta), reference(x, gamma, beta),
                               rtol=1e-2, atol=1e-2)

    tilelab_ms, torch_ms = common.time_against(
        lambda: kernel(x, gamma, beta),
        lambda: F.layer_norm(x, (n,), weight=gamma, bias=beta, eps=1e-5),
        args.device,
    )
    common.report(f"M = {m}, N = {n}, float16, block_m = {args.block_m}, on {args.device}",
                  tilelab_ms, torch_ms,
                  gigabytes=(2 * m * n + 2 * n) * 2 / 1e9)  # read X, gamma, beta, write Y


if __name__ == "__main__":
    main()
