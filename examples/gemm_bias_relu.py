"""GEMM with a fused epilogue: C = relu(A @ B + bias) (course chapter 10.8).

The GEMM is the one of `gemm.py`; the difference is what happens before the
result leaves the block. While the accumulator tile is still in registers,
a `T.Parallel` loop adds the bias and applies ReLU, so the product is never
written to memory and read back by a second and third kernel. The bias slice
of the block goes through shared memory with `T.copy`, which reads zeros past
the end of the bias when N is not a multiple of `block_n`.

    python examples/gemm_bias_relu.py --device cpu --m 256 --n 256 --k 256
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.gemm_bias_relu import gemm_bias_relu_kernel`
    from . import common
else:  # run as a script, as in `python examples/gemm_bias_relu.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit
def gemm_bias_relu_kernel(
    A,
    B,
    Bias,
    block_m: int = 128,
    block_n: int = 128,
    block_k: int = 32,
    num_stages: int = 3,
    input_dtype=T.float16,
):
    M, N, K = T.const("M, N, K")

    accumulation_dtype = T.float32

    A: T.Tensor((M, K), input_dtype)
    B: T.Tensor((K, N), input_dtype)
    Bias: T.Tensor((N,), input_dtype)

    C = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=128) as (
        block_x,
        block_y,
    ):
        a_shared = T.alloc_shared((block_m, block_k), input_dtype)
        b_shared = T.alloc_shared((block_k, block_n), input_dtype)
        bias_shared = T.alloc_shared((block_n,), input_dtype)
        c_fragment = T.alloc_fragment((block_m, block_n), accumulation_dtype)

        T.clear(c_fragment)

        for reduction_block in T.Pipelined(T.ceildiv(K, block_k), num_stages=num_stages):
            T.copy(A[block_y * block_m, reduction_block * block_k], a_shared)
            T.copy(B[reduction_block * block_k, block_x * block_n], b_shared)

            T.gemm(a_shared, b_shared, c_fragment)

        # the epilogue: bias and ReLU on the tile while it is still in registers
        T.copy(Bias[block_x * block_n], bias_shared)

        for i, j in T.Parallel(block_m, block_n):
            c_fragment[i, j] = T.max(c_fragment[i, j] + bias_shared[j], 0)

        T.copy(c_fragment, C[block_y * block_m, block_x * block_n])

    return C


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(a.float() @ b.float() + bias.float()).to(a.dtype)


def check(device: str) -> None:
    """Fresh random inputs in float16 and bfloat16, with and without edge tiles."""
    blocks = {"block_m": 64, "block_n": 64, "block_k": 32}
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k in [(128, 128, 64), (100, 90, 50)]:
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            bias = torch.randn(n, device=device, dtype=dtype)
            tilelab_dtype = T.float16 if dtype == torch.float16 else T.bfloat16
            actual = gemm_bias_relu_kernel(a, b, bias, input_dtype=tilelab_dtype, **blocks)
            torch.testing.assert_close(actual, reference(a, b, bias), rtol=1e-2, atol=1e-2)


def main() -> None:
    parser = common.parser(__doc__, sizes={"m": None, "n": None, "k": None})
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    args = parser.parse_args()
    m, n, k = (common.pick_size(size, args.device, gpu=4096, cpu=256)
               for size in (args.m, args.n, args.k))
    dtype = getattr(torch, args.dtype)

    check(args.device)
    print("gemm_bias_relu: check passed (float16 and bfloat16, including edge tiles)")

    a = torch.randn(m, k, device=args.device, dtype=dtype)
    b = torch.randn(k, n, device=args.device, dtype=dtype)
    bias = torch.randn(n, device=args.device, dtype=dtype)
    kernel = gemm_bias_relu_kernel.compile(a, b, bias, input_dtype=getattr(T, args.dtype))
    torch.testing.assert_close(kernel(a, b, bias), reference(a, b, bias), rtol=1e-2, atol=1e-2)

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(a, b, bias),
                                               lambda: torch.relu(a @ b + bias),
                                               args.device, cpu_runs=(2, 5))
    common.report(f"M = {m}, N = {n}, K = {k}, {args.dtype}, on {args.device}",
                  tilelab_ms, torch_ms, labels=("tilelab (fused)", "PyTorch (three kernels)"))


if __name__ == "__main__":
    main()
