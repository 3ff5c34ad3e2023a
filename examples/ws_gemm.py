"""GEMM with warp roles written by hand: a producer warpgroup copies, a consumer multiplies.

The block has 256 threads, two warpgroups. Warpgroup 1 (`T.ws(1)`) fills the slots of
`num_stages`-deep tiles of A and B; warpgroup 0 (`T.ws(0)`) multiplies them into its
accumulator. They hand each slot over through mbarriers: the producer waits until
the consumer has released a slot (`empty`), copies into it and arrives at `full`; the
consumer waits for `full`, multiplies and arrives at `empty`. The parities count the
rounds through the slots. This is what `T.Pipelined` with a producer warp does on its
own on sm_90a (passes/pipeline_loops.py); here the program says it, as TileLang's
warp-specialized examples do. The CPU runs the two roles by turns, each until it waits
(passes/role_turns.py), and checks each wait and arrival.

    python examples/ws_gemm.py --device cpu --m 300 --n 264 --k 520
"""

from __future__ import annotations

import torch

import tilelab
import tilelab.language as T

if __package__:
    from . import common
else:
    import common


@tilelab.jit
def ws_gemm_kernel(A, B, block_m: int = 128, block_n: int = 128, block_k: int = 64,
                   num_stages: int = 2):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)

    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=256) as (bx, by):
        a_slots = T.alloc_shared((num_stages, block_m, block_k), T.float16)
        b_slots = T.alloc_shared((num_stages, block_k, block_n), T.float16)
        acc = T.alloc_fragment((block_m, block_n), T.float32)
        full = T.alloc_barrier([128] * num_stages)  # the producer's 128 threads arrive
        empty = T.alloc_barrier([128] * num_stages)  # the consumer's 128 threads arrive

        with T.ws(0):
            T.clear(acc)
        for k in T.serial(T.ceildiv(K, block_k)):
            slot, rounds = k % num_stages, k // num_stages
            with T.ws(1):  # producer
                T.barrier_wait(empty[slot], rounds % 2 ^ 1)  # first round: free already
                T.tma_copy(A[by * block_m, k * block_k], a_slots[slot, :, :],
                           barrier=full[slot])
                T.tma_copy(B[k * block_k, bx * block_n], b_slots[slot, :, :],
                           barrier=full[slot])
                T.barrier_arrive(full[slot])
            with T.ws(0):  # consumer
                T.barrier_wait(full[slot], rounds % 2)
                T.gemm(a_slots[slot, :, :], b_slots[slot, :, :], acc)
                T.barrier_arrive(empty[slot])
        with T.ws(0):
            T.copy(acc, C[by * block_m, bx * block_n])

    return C


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float()).to(a.dtype)


def check(device: str) -> None:
    """Fresh random matrices, with and without edge tiles, through two and three slots."""
    for stages in (2, 3):
        for m, n, k in [(128, 128, 256), (100, 200, 330)]:
            a = torch.randn(m, k, device=device, dtype=torch.float16)
            b = torch.randn(k, n, device=device, dtype=torch.float16)
            actual = ws_gemm_kernel(a, b, num_stages=stages)
            torch.testing.assert_close(actual, reference(a, b), rtol=1e-2, atol=1e-2)


def main() -> None:
    parser = common.parser(__doc__, sizes={"m": None, "n": None, "k": None})
    args = parser.parse_args()
    check(args.device)
    print("ws_gemm: check passed (two and three slots, including edge tiles)")
    m, n, k = (common.pick_size(size, args.device, gpu=4096, cpu=256)
               for size in (args.m, args.n, args.k))
    a = torch.randn(m, k, device=args.device, dtype=torch.float16)
    b = torch.randn(k, n, device=args.device, dtype=torch.float16)
    kernel = ws_gemm_kernel.compile(a, b)
    torch.testing.assert_close(kernel(a, b), reference(a, b), rtol=1e-2, atol=1e-2)
    tilelab_ms, torch_ms = common.time_against(lambda: kernel(a, b), lambda: a @ b,
                                               args.device, cpu_runs=(2, 5))
    common.report(f"M = {m}, N = {n}, K = {k}, float16, two warp roles, on {args.device}",
                  tilelab_ms, torch_ms, flop=2.0 * m * n * k)


if __name__ == "__main__":
    main()
