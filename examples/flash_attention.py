"""FlashAttention forward: O = softmax(Q Kᵀ / sqrt(D)) V without the score matrix (chapter 13).

Each block owns `block_m` query rows of one (batch, head). It walks over the
keys in tiles of `block_n`: S = Q Kᵀ for the tile (a `T.gemm` with
`transpose_B`), an online-softmax update of the running row max and row sum
(the same idea as `online_softmax.py`), then `O += P V` with a second
`T.gemm`. The full sequence × sequence score matrix never exists.

Scores are scaled by log2(e)/sqrt(D) so that exp2 can replace exp. Two masks
make the tile program exact for any sequence length and for causal attention:
keys past the end of the sequence (the zero-filled rows of the last K tile),
and with `causal=True` keys after the query, get the score -inf, so their
probability is exactly 0.

    python examples/flash_attention.py --device cpu --seq 256 --dim 64 --causal
"""

# (no `from __future__ import annotations`: the kernel's annotations name the factory's
# own variables, and TileLang, which bench/peer_tilelang.py runs this source through,
# evaluates string annotations without them)

import torch
import torch.nn.functional as F

import tilelab
import tilelab.language as T

if __package__:  # imported, as in `from examples.flash_attention import flash_attention_kernel`
    from . import common
else:  # run as a script, as in `python examples/flash_attention.py`
    import common

default_device = common.default_device  # still importable from this module


@tilelab.jit(
    out_idx=[3],
    pass_configs={tilelab.PassConfigKey.TL_ENABLE_FAST_MATH: True},
)
def flash_attention_kernel(
    batch: int,
    heads: int,
    sequence: int,
    dimension: int,
    block_m: int = 64,
    block_n: int = 64,
    num_stages: int = 2,
    threads: int = 128,
    causal: bool = False,
    q_in_registers: bool = False,
):
    input_dtype = T.float16
    accumulation_dtype = T.float32

    qkv_shape = (batch, heads, sequence, dimension)

    softmax_scale = (1.0 / dimension) ** 0.5 * 1.4426950408889634  # log2(e) / sqrt(D)

    @T.prim_func
    def kernel(
        Q: T.Tensor(qkv_shape, input_dtype),
        K: T.Tensor(qkv_shape, input_dtype),
        V: T.Tensor(qkv_shape, input_dtype),
        O: T.Tensor(qkv_shape, input_dtype),  # noqa: E741 - the tutorial's name
    ):
        with T.Kernel(T.ceildiv(sequence, block_m), heads, batch, threads=threads) as (
            query_block,
            head,
            batch_id,
        ):
            q_shared = T.alloc_shared((block_m, dimension), input_dtype)
            k_shared = T.alloc_shared((block_n, dimension), input_dtype)
            v_shared = T.alloc_shared((block_n, dimension), input_dtype)
            o_shared = T.alloc_shared((block_m, dimension), input_dtype)

            scores = T.alloc_fragment((block_m, block_n), accumulation_dtype)
            probabilities = T.alloc_fragment((block_m, block_n), input_dtype)
            output = T.alloc_fragment((block_m, dimension), accumulation_dtype)

            running_max = T.alloc_fragment((block_m,), accumulation_dtype)
            previous_max = T.alloc_fragment((block_m,), accumulation_dtype)
            rescale = T.alloc_fragment((block_m,), accumulation_dtype)
            tile_sum = T.alloc_fragment((block_m,), accumulation_dtype)
            running_sum = T.alloc_fragment((block_m,), accumulation_dtype)

            T.copy(Q[batch_id, head, query_block * block_m, 0], q_shared)
            queries = q_shared
            if q_in_registers:  # S = Q Kᵀ takes Q from the threads' registers, not shared memory
                queries = T.alloc_fragment((block_m, dimension), input_dtype)
                T.copy(q_shared, queries)

            T.fill(output, 0)
            T.fill(running_sum, 0)
            T.fill(running_max, -T.infinity(accumulation_dtype))

            # causal: key tiles that start after this block's last query are all masked
            key_blocks = T.ceildiv(sequence, block_n)
            if causal:
                key_blocks = T.min(key_blocks, T.ceildiv((query_block + 1) * block_m, block_n))

            for key_block in T.Pipelined(key_blocks, num_stages=num_stages):
                T.copy(K[batch_id, head, key_block * block_n, 0], k_shared)

                T.clear(scores)

                T.gemm(queries, k_shared, scores, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullRow)

                # keys past the end of the sequence (and, if causal, after the query) are out
                for i, j in T.Parallel(block_m, block_n):
                    key = key_block * block_n + j
                    visible = key < sequence
                    if causal:
                        visible = visible and key <= query_block * block_m + i
                    scores[i, j] = T.if_then_else(
                        visible, scores[i, j], -T.infinity(accumulation_dtype))

                T.copy(running_max, previous_max)

                T.fill(running_max, -T.infinity(accumulation_dtype))

                T.reduce_max(scores, running_max, dim=1, clear=False)

                for i in T.Parallel(block_m):
                    running_max[i] = T.max(running_max[i], previous_max[i])

                    rescale[i] = T.exp2(
                        previous_max[i] * softmax_scale - running_max[i] * softmax_scale
                    )

                for i, j in T.Parallel(block_m, dimension):
                    output[i, j] *= rescale[i]

                for i, j in T.Parallel(block_m, block_n):
                    scores[i, j] = T.exp2(
                        scores[i, j] * softmax_scale - running_max[i] * softmax_scale
                    )

                T.reduce_sum(scores, tile_sum, dim=1, clear=True)

                for i in T.Parallel(block_m):
                    running_sum[i] = running_sum[i] * rescale[i] + tile_sum[i]

                T.copy(scores, probabilities)

                T.copy(V[batch_id, head, key_block * block_n, 0], v_shared)

                T.gemm(probabilities, v_shared, output, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_m, dimension):
                output[i, j] /= running_sum[i]

            T.copy(output, o_shared)

            T.copy(o_shared, O[batch_id, head, query_block * block_m, 0])

    return kernel


def reference(q, k, v, causal: bool = False) -> torch.Tensor:
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                          is_causal=causal).to(q.dtype)


def random_inputs(batch: int, heads: int, sequence: int, dimension: int, device: str):
    shape = (batch, heads, sequence, dimension)
    return tuple(torch.randn(shape, device=device, dtype=torch.float16) for _ in range(3))


def check(device: str) -> None:
    """Fresh random Q, K, V; a sequence of 100 leaves partial query and key tiles."""
    for batch, heads, sequence, dimension in [(1, 2, 128, 64), (2, 2, 100, 64),
                                              (1, 2, 100, 128)]:
        for causal in (False, True):
            q, k, v = random_inputs(batch, heads, sequence, dimension, device)
            kernel = flash_attention_kernel(batch, heads, sequence, dimension, causal=causal)
            torch.testing.assert_close(kernel(q, k, v), reference(q, k, v, causal),
                                       rtol=2e-2, atol=2e-2)


def main() -> None:
    sizes = {"batch": None, "heads": None, "seq": "sequence length"}
    parser = common.parser(__doc__, sizes)
    parser.add_argument("--dim", type=int, default=64, help="head dimension")
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    batch = common.pick_size(args.batch, args.device, gpu=1, cpu=1)
    heads = common.pick_size(args.heads, args.device, gpu=8, cpu=2)
    sequence = common.pick_size(args.seq, args.device, gpu=4096, cpu=256)

    check(args.device)
    print("flash_attention: check passed (head dims 64 and 128, causal and not, "
          "including partial tiles)")

    q, k, v = random_inputs(batch, heads, sequence, args.dim, args.device)
    kernel = flash_attention_kernel(batch, heads, sequence, args.dim, causal=args.causal)
    torch.testing.assert_close(kernel(q, k, v), reference(q, k, v, args.causal),
                               rtol=2e-2, atol=2e-2)

    tilelab_ms, torch_ms = common.time_against(
        lambda: kernel(q, k, v),
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=args.causal),
        args.device, cpu_runs=(2, 5),
    )
    # Q @ K^T and P @ V: two matrix products of 2 * sequence² * dim operations per head;
    # a causal mask skips about half of them.
    flop = 4.0 * batch * heads * sequence * sequence * args.dim * (0.5 if args.causal else 1.0)
    common.report(f"batch = {batch}, heads = {heads}, seq = {sequence}, dim = {args.dim}, "
                  f"causal = {args.causal}, float16, on {args.device}",
                  tilelab_ms, torch_ms, flop=flop, labels=("tilelab", "PyTorch SDPA"))


if __name__ == "__main__":
    main()
