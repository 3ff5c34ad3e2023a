"""GEMM: C = A @ B with shared-memory tiles and a float32 accumulator (course chapter 10).

Each block computes one `block_m × block_n` tile of C. It walks along K in
steps of `block_k`: copy a tile of A and a tile of B into shared memory,
multiply them into the register accumulator with `T.gemm`, repeat. On a GPU
`T.Pipelined` overlaps the copies of step k+1 with the multiply of step k.
Tiles that stick out of A, B or C at the edges read zeros and write nothing,
so any M, N, K work. `threads` sets the block's threads: on Hopper 256 (two
warpgroups) carry a 128×256 tile that one warpgroup's registers cannot hold;
`policy` says how the warps share the tile (`T.GemmWarpPolicy`: Square, FullRow,
FullCol).

    python examples/gemm.py --device cpu --m 512 --n 512 --k 512 --dtype bfloat16
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.gemm import gemm_kernel`
    from . import common
else:  # run as a script, as in `python examples/gemm.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit
def gemm_kernel(
    A,
    B,
    block_m: int = 128,
    block_n: int = 128,
    block_k: int = 32,
    num_stages: int = 3,
    input_dtype=T.float16,
    panel: int = 0,
    threads: int = 128,
    policy=T.GemmWarpPolicy.Square,
):
    M, N, K = T.const("M, N, K")

    accumulation_dtype = T.float32

    A: T.Tensor((M, K), input_dtype)
    B: T.Tensor((K, N), input_dtype)

    C = T.empty((M, N), input_dtype)

    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=threads) as (
        block_x,
        block_y,
    ):
        a_shared = T.alloc_shared((block_m, block_k), input_dtype)
        b_shared = T.alloc_shared((block_k, block_n), input_dtype)
        c_fragment = T.alloc_fragment((block_m, block_n), accumulation_dtype)

        if panel:  # visit the blocks in panels of `panel` rows, so tiles are reused from L2
            T.use_swizzle(panel)

        T.clear(c_fragment)

        for reduction_block in T.Pipelined(T.ceildiv(K, block_k), num_stages=num_stages):
            T.copy(A[block_y * block_m, reduction_block * block_k], a_shared)
            T.copy(B[reduction_block * block_k, block_x * block_n], b_shared)

            T.gemm(a_shared, b_shared, c_fragment, policy=policy)

        T.copy(c_fragment, C[block_y * block_m, block_x * block_n])

    return C


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float32 products and sums, rounded to the input type once at the end."""
    return (a.float() @ b.float()).to(a.dtype)


def check(device: str) -> None:
    """Fresh random matrices in float16 and bfloat16, with and without edge tiles."""
    blocks = {"block_m": 64, "block_n": 64, "block_k": 32}
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k in [(128, 128, 64), (100, 130, 70), (1, 65, 33)]:
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            tilelab_dtype = T.float16 if dtype == torch.float16 else T.bfloat16
            actual = gemm_kernel(a, b, input_dtype=tilelab_dtype, **blocks)
            torch.testing.assert_close(actual, reference(a, b), rtol=1e-2, atol=1e-2)


def main() -> None:
    parser = common.parser(__doc__, sizes={"m": None, "n": None, "k": None})
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    parser.add_argument("--block-m", type=int, default=128)
    parser.add_argument("--block-n", type=int, default=128)
    parser.add_argument("--block-k", type=int, default=32)
    args = parser.parse_args()
    m, n, k = (common.pick_size(size, args.device, gpu=4096, cpu=256)
               for size in (args.m, args.n, args.k))
    dtype = getattr(torch, args.dtype)

    check(args.device)
    print("gemm: check passed (float16 and bfloat16, including edge tiles)")

    a = torch.randn(m, k, device=args.device, dtype=dtype)
    b = torch.randn(k, n, device=args.device, dtype=dtype)
    kernel = gemm_kernel.compile(a, b, block_m=args.block_m, block_n=args.block_n,
                                 block_k=args.block_k, input_dtype=getattr(T, args.dtype))
    torch.testing.assert_close(kernel(a, b), reference(a, b), rtol=1e-2, atol=1e-2)

    tilelab_ms, torch_ms = common.time_against(lambda: kernel(a, b), lambda: a @ b,
                                               args.device, cpu_runs=(2, 5))
    common.report(f"M = {m}, N = {n}, K = {k}, {args.dtype}, blocks {args.block_m}×"
                  f"{args.block_n}×{args.block_k}, on {args.device}",
                  tilelab_ms, torch_ms, flop=2.0 * m * n * k)  # a multiply and an add per m, n, k


if __name__ == "__main__":
    main()
