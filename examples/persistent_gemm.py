"""Persistent GEMM: one block per multiprocessor walks over the tiles of C.

`examples/gemm.py` launches one block per output tile; each block fills its
pipeline, multiplies, stores its tile and exits, and the next block on that
multiprocessor starts from an empty pipeline. Here the grid is `blocks` blocks
(at most one per multiprocessor: 132 on an H100 or H200) and `T.Persistent`
hands each block tile after tile. The tile's K loop is the same `T.Pipelined`
loop; on sm_90a its producer warp walks the tiles too, so it loads the first
slices of the next tile while the consumer warpgroups still store this one: the
tensor cores find their operands waiting when they start the next tile. The
tiles are numbered in groups of `group` columns, so the blocks of one wave share
rows of A and columns of B in the L2 cache.

How many blocks: the 512 tiles of a 4096×4096 C take 132 blocks four turns (116
blocks walk four tiles, 16 walk three); 128 blocks take four turns too, each
walking four, and ran 1% faster on an H100. So by default (`blocks=0`) the kernel
launches the fewest blocks that need no more turns than 132 would.

The two consumer warpgroups split the 128×256 tile by rows (`GemmWarpPolicy.FullRow`):
each owns 64 whole rows and issues one m64n256k16 per 16-wide step of K, reading its
slice of A and all of B once. Split by columns instead (two m64n128k16 each), a warpgroup
reads B's half twice per step, and shared memory - which the producer's TMA writes fill
too - serves 20% more bytes per multiply; FullRow ran 0.3-0.4% faster on an H100.

The result leaves through shared memory. Stored straight from the accumulator
fragment, each thread writes two values (4 bytes) at a time, scattered over
eight rows per warp instruction; on the H200 that took about 7 µs a tile, while
the tensor cores waited. Copied into a shared tile first, it goes out in rows of
16 bytes per thread, about 1 µs. The four 48 KB slots of the pipeline leave
room for half of the 128×256 tile, so C goes out in `parts` parts of columns, each
written by both consumer warpgroups (each holds 64 of the 128 rows). On
sm_90a the shared tile goes to C by TMA (passes/tma_stores.py): thread 0 asks,
and TMA reads the tile while the block goes on - to the next tile's K loop after
the last part, the only place the block waits for TMA being just before it
writes the tile again.

    python examples/persistent_gemm.py --device cpu --m 300 --n 520 --k 256
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:
    from . import common
else:
    import common

MULTIPROCESSORS = 132  # an H100's or H200's


@tilelab.jit
def persistent_gemm_kernel(
    A,
    B,
    blocks: int = 0,
    block_m: int = 128,
    block_n: int = 256,
    block_k: int = 64,
    num_stages: int = 4,
    threads: int = 256,
    group: int = 8,
    parts: int = 2,
    input_dtype=T.float16,
):
    M, N, K = T.const("M, N, K")

    A: T.Tensor((M, K), input_dtype)
    B: T.Tensor((K, N), input_dtype)
    C = T.empty((M, N), input_dtype)

    tiles = T.ceildiv(M, block_m) * T.ceildiv(N, block_n)
    if not blocks:  # the fewest blocks that take no more turns than 132 would
        blocks = T.ceildiv(tiles, T.ceildiv(tiles, MULTIPROCESSORS))

    with T.Kernel(blocks, threads=threads) as block:
        a_shared = T.alloc_shared((block_m, block_k), input_dtype)
        b_shared = T.alloc_shared((block_k, block_n), input_dtype)
        c_fragment = T.alloc_fragment((block_m, block_n), T.float32)
        width = block_n // parts  # the columns of C one part stores
        c_shared = T.alloc_shared((block_m, width), input_dtype)

        for tile_y, tile_x in T.Persistent([T.ceildiv(M, block_m), T.ceildiv(N, block_n)],
                                           blocks, block, group):
            T.clear(c_fragment)
            for k in T.Pipelined(T.ceildiv(K, block_k), num_stages=num_stages):
                T.copy(A[tile_y * block_m, k * block_k], a_shared)
                T.copy(B[k * block_k, tile_x * block_n], b_shared)
                T.gemm(a_shared, b_shared, c_fragment, policy=T.GemmWarpPolicy.FullRow)
            for part in T.unroll(parts):
                T.copy(c_fragment[0:block_m, part * width:(part + 1) * width], c_shared)
                T.copy(c_shared, C[tile_y * block_m, tile_x * block_n + part * width])

    return C


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(a.dtype)


def check(device: str) -> None:
    """Fresh random matrices, edge tiles included; fewer blocks than tiles, so that each
    block walks several tiles, and a group wider than what is left of the columns."""
    small = {"block_m": 64, "block_n": 64, "block_k": 32, "num_stages": 3, "threads": 128}
    for dtype in (torch.float16, torch.bfloat16):
        for m, n, k, blocks in [(256, 256, 128, 3), (300, 520, 200, 7), (64, 1000, 90, 5)]:
            a = torch.randn(m, k, device=device, dtype=dtype)
            b = torch.randn(k, n, device=device, dtype=dtype)
            tilelab_dtype = T.float16 if dtype == torch.float16 else T.bfloat16
            actual = persistent_gemm_kernel(a, b, blocks=blocks, input_dtype=tilelab_dtype,
                                            **small)
            torch.testing.assert_close(actual, reference(a, b), rtol=1e-2, atol=1e-2)


def main() -> None:
    parser = common.parser(__doc__, sizes={"m": None, "n": None, "k": None})
    parser.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    args = parser.parse_args()
    m, n, k = (common.pick_size(size, args.device, gpu=8192, cpu=256)
               for size in (args.m, args.n, args.k))
    dtype = getattr(torch, args.dtype)

    check(args.device)
    print("persistent_gemm: check passed (float16 and bfloat16, including edge tiles)")

    a = torch.randn(m, k, device=args.device, dtype=dtype)
    b = torch.randn(k, n, device=args.device, dtype=dtype)
    options = {} if args.device == "cuda" else {
        "blocks": 4, "block_m": 64, "block_n": 64, "block_k": 32, "threads": 128}
    kernel = persistent_gemm_kernel.compile(a, b, input_dtype=getattr(T, args.dtype), **options)
    torch.testing.assert_close(kernel(a, b), reference(a, b), rtol=1e-2, atol=1e-2)
    tilelab_ms, torch_ms = common.time_against(lambda: kernel(a, b), lambda: a @ b,
                                               args.device, cpu_runs=(2, 5))
    common.report(f"M = {m}, N = {n}, K = {k}, {args.dtype}, persistent blocks, on "
                  f"{args.device}", tilelab_ms, torch_ms, flop=2.0 * m * n * k)


if __name__ == "__main__":
    main()
