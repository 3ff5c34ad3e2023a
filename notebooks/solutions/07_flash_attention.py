"""Solutions to chapter 7's exercises. In the notebook: %load solutions/07_flash_attention.py"""

import torch

import tilelab
import tilelab.language as T

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# Exercise 07.1: each query sees itself and the window - 1 keys before it
@tilelab.jit(out_idx=[3], target=DEVICE)
def sliding_window_attention(batch: int, heads: int, sequence: int, dimension: int,
                             window: int, block_m: int = 64, block_n: int = 64,
                             num_stages: int = 2, threads: int = 128):
    scale = (1.0 / dimension) ** 0.5 * 1.4426950408889634  # log2(e) / sqrt(D), for exp2
    shape = (batch, heads, sequence, dimension)

    @T.prim_func
    def sliding_window_kernel(
        Q: T.Tensor(shape, T.float16),
        K: T.Tensor(shape, T.float16),
        V: T.Tensor(shape, T.float16),
        O: T.Tensor(shape, T.float16),  # noqa: E741
    ):
        with T.Kernel(T.ceildiv(sequence, block_m), heads, batch, threads=threads) as (
            query_block,
            head,
            batch_id,
        ):
            q_shared = T.alloc_shared((block_m, dimension), T.float16)
            k_shared = T.alloc_shared((block_n, dimension), T.float16)
            v_shared = T.alloc_shared((block_n, dimension), T.float16)
            scores = T.alloc_fragment((block_m, block_n), T.float32)
            probabilities = T.alloc_fragment((block_m, block_n), T.float16)
            output = T.alloc_fragment((block_m, dimension), T.float32)
            running_max = T.alloc_fragment((block_m,), T.float32)
            previous_max = T.alloc_fragment((block_m,), T.float32)
            safe_max = T.alloc_fragment((block_m,), T.float32)
            rescale = T.alloc_fragment((block_m,), T.float32)
            tile_sum = T.alloc_fragment((block_m,), T.float32)
            running_sum = T.alloc_fragment((block_m,), T.float32)

            T.copy(Q[batch_id, head, query_block * block_m, 0], q_shared)
            T.fill(output, 0)
            T.fill(running_sum, 0)
            T.fill(running_max, -T.infinity(T.float32))

            key_blocks = T.min(T.ceildiv(sequence, block_n),
                               T.ceildiv((query_block + 1) * block_m, block_n))

            for key_block in T.Pipelined(key_blocks, num_stages=num_stages):
                T.copy(K[batch_id, head, key_block * block_n, 0], k_shared)
                T.clear(scores)
                T.gemm(q_shared, k_shared, scores, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullRow)

                for i, j in T.Parallel(block_m, block_n):
                    key = key_block * block_n + j
                    query = query_block * block_m + i
                    visible = key < sequence and key <= query and key > query - window
                    scores[i, j] = T.if_then_else(visible, scores[i, j],
                                                  -T.infinity(T.float32))

                T.copy(running_max, previous_max)
                T.reduce_max(scores, running_max, dim=1, clear=False)

                # a row whose keys so far were all masked still has the maximum -inf, and
                # exp2(-inf - -inf) is NaN: subtract 0 instead, exp2(-inf) is a clean 0
                for i in T.Parallel(block_m):
                    safe_max[i] = T.if_then_else(running_max[i] == -T.infinity(T.float32), 0,
                                                 running_max[i])
                    rescale[i] = T.exp2(previous_max[i] * scale - safe_max[i] * scale)
                for i, j in T.Parallel(block_m, dimension):
                    output[i, j] *= rescale[i]
                for i, j in T.Parallel(block_m, block_n):
                    scores[i, j] = T.exp2(scores[i, j] * scale - safe_max[i] * scale)

                T.reduce_sum(scores, tile_sum, dim=1, clear=True)
                for i in T.Parallel(block_m):
                    running_sum[i] = running_sum[i] * rescale[i] + tile_sum[i]

                T.copy(scores, probabilities)
                T.copy(V[batch_id, head, key_block * block_n, 0], v_shared)
                T.gemm(probabilities, v_shared, output, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_m, dimension):
                output[i, j] /= running_sum[i]
            T.copy(output, O[batch_id, head, query_block * block_m, 0])

    return sliding_window_kernel


# Exercise 07.2: batch 1, 32 heads, sequence 4096, float16; block_m = 64
score_bytes = 32 * 4096 * 4096 * 2  # S = Q K^T for every head: 1 GiB
key_tile_loads = 4096 // 64  # each of the 64 query blocks of a head reads all of K once
