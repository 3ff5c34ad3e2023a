"""The rotated split loop (passes/pipeline_loops.py: Rotation, _rotated), asked for with
`tl.enable_intra_warpgroup_overlap`.

FlashAttention's key loop is A (S = Q Kᵀ), B (the softmax), C (O += P V). Rotated, the
consumers issue iteration k+1's A before iteration k's C, wait for A alone
(wgmma.wait_group 1), run the part of B that C does not need while C's MMAs run, then
wait for C, release its slot and finish B. Statements move only where they commute.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tests import test_warpgroup_turns as turns
from tests.cuda_source import loop_text
from tests.test_warpgroup_turns import SPLIT, TURNS, _hopper
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
ROTATE = {**SPLIT, PassConfigKey.TL_ENABLE_INTRA_WARPGROUP_OVERLAP.value: True}


def _attention(shape=(2, 4, 1000, 128), configs=None, target="cuda:sm_90a", **options):
    """The example's attention, split and rotated (and `configs`)."""
    return turns._attention(shape, {**ROTATE, **(configs or {})}, target, **options)


@needs_nvcc
def test_the_next_tiles_scores_are_issued_before_this_tiles_product():
    kernel = _attention()
    source = kernel.get_kernel_source()
    plan = kernel.trace.pipelines[0]
    assert "warp_specialized" in plan and plan["rotated"].startswith("iteration k+1's first")
    loop = loop_text(source, "key_block")
    # the prologue (tile 0's scores and softmax) stands before the loop
    before = source.split("for (int key_block = ")[0].split("tl::registers_up<240>();")[1]
    assert "wgmma_f16_ss" in before and "wgmma_f16_rs" not in before
    assert "exp2" in before
    # in the loop: S = Q K[k+1]ᵀ, then O += P[k] V[k], both in flight; wait for S alone,
    # the row maxima while the product runs; wait for it, release the slot, rescale O
    order = ["tl::mbar_wait", "wgmma_f16_ss", "wgmma_f16_rs", "wait_group_sync_aligned_1()",
             "running_max_partial", "wait_group_sync_aligned_0()", "tl::mbar_arrive_warp",
             "output_ptr[0] = (output_ptr[0] * rescale_ptr[0]);"]
    at = [loop.index(text) for text in order]
    assert at == sorted(at)
    assert loop.count("wait_group_sync_aligned_0()") == 1  # no other wait for C
    # the epilogue multiplies the last tile's P V and releases the last slot
    after = source.split(loop)[1]
    assert after.index("wgmma_f16_rs") < after.index("tl::mbar_arrive_warp")
    assert "(key_block + 1)" in loop  # slot and phase of the next tile


@needs_nvcc
def test_the_pipeline_view_says_the_loop_is_rotated():
    from tilelab.viz.pipeline import pipeline_view

    view = pipeline_view(_attention().trace)
    assert "  rotated: iteration k+1's first T.gemm" in view.text()
    assert "<br>rotated: iteration k+1&#x27;s first T.gemm" in view.body_html()


@needs_nvcc
def test_with_turns_a_turn_is_both_products_issued():
    source = _attention(configs=TURNS).get_kernel_source()
    loop = loop_text(source, "key_block")
    order = ["tl::turn_wait()", "wgmma_f16_ss", "wgmma_f16_rs", "tl::turn_pass()",
             "wait_group_sync_aligned_1()"]
    at = [loop.index(text) for text in order]
    assert at == sorted(at) and loop.count("tl::turn_") == 2
    before, after = source.split(loop)
    # both compute tile 0 at once, after the barrier that publishes Q (a warpgroup waiting
    # for a turn there would never reach it); then the second hands the first turn over
    assert "tl::turn_first()" not in source and "turn_pass" not in before.split("for (int")[-1]
    assert before.rindex("consumer_sync") < before.rindex("wgmma_f16_ss") < \
        before.rindex("tl::turn_start()")
    # the second warpgroup's last wait has its hand-over: the first's, after the epilogue
    assert after.index("tl::turn_wait()") < after.index("wgmma_f16_rs") < \
        after.index("tl::turn_last()") < after.index("wait_group_sync_aligned_0()")


@needs_nvcc
def test_the_softmax_statements_that_need_not_wait_run_beside_the_product():
    """The example's key loop: between the products, the mask, the row maxima, the
    exponentials and the sums (8 statements) run beside O += P V; the rescale of O (it
    touches C's accumulator) and P's conversion (C reads P) wait for it."""
    plan = _attention().trace.pipelines[0]
    assert "8 statement(s) of the computation between them" in plan["rotated"]
    assert plan["rotated"].endswith("then 2 statement(s) that wait for them")


@tilelab.jit
def cleared_after_use(Q, K, V, block_m: int = 128, block_n: int = 64, threads: int = 256):
    """S's row sums kept, S converted to P, then S cleared for the next tile's product:
    the clearing writes what the conversion reads, so it waits with it although it
    touches none of C's operands."""
    M, N, D = T.const("M, N, D")
    Q: T.Tensor((M, D), T.float16)
    K: T.Tensor((N, D), T.float16)
    V: T.Tensor((N, D), T.float16)
    O = T.empty((M, D), T.float32)  # noqa: E741
    first = T.empty((M,), T.float32)
    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
        q = T.alloc_shared((block_m, D), T.float16)
        k = T.alloc_shared((block_n, D), T.float16)
        v = T.alloc_shared((block_n, D), T.float16)
        s = T.alloc_fragment((block_m, block_n), T.float32)
        p = T.alloc_fragment((block_m, block_n), T.float16)
        o = T.alloc_fragment((block_m, D), T.float32)
        kept = T.alloc_fragment((block_m,), T.float32)
        tile_sums = T.alloc_fragment((block_m,), T.float32)
        T.copy(Q[bx * block_m, 0], q)
        T.clear(o)
        T.clear(kept)
        T.clear(s)
        for j in T.Pipelined(T.ceildiv(N, block_n), num_stages=2):
            T.copy(K[j * block_n, 0], k)
            T.copy(V[j * block_n, 0], v)
            T.gemm(q, k, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.reduce_sum(s, tile_sums, dim=1)
            for i in T.Parallel(block_m):
                kept[i] += tile_sums[i]
            T.copy(s, p)
            for i, c in T.Parallel(block_m, block_n):
                s[i, c] = 0.0
            T.gemm(p, v, o, policy=T.GemmWarpPolicy.FullRow)
        T.copy(o, O[bx * block_m, 0])
        T.copy(kept, first[bx * block_m])


def _cleared_reference(q, k, v):
    s = q.float() @ k.float().T  # each tile's S starts from the zeros the last one left
    return s.half().float() @ v.float(), s.sum(1)


@needs_nvcc
def test_a_statement_that_overwrites_what_a_waiting_one_reads_waits_too():
    kernel = cleared_after_use.compile(M=256, N=256, D=64, target="cuda:sm_90a",
                                       pass_configs=ROTATE)
    rotated = kernel.trace.pipelines[0]["rotated"]
    assert "2 statement(s) of the computation" in rotated and "then 2 statement(s)" in rotated


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_cleared_after_use_matches_torch(device):
    if device == "cuda":
        _hopper()
    q, k, v = _scaled_after_inputs(device)
    out, first = cleared_after_use(q, k, v, pass_configs=ROTATE,
                                   **({"target": "cpu"} if device == "cpu" else {}))
    want, want_first = _cleared_reference(q.cpu(), k.cpu(), v.cpu())
    torch.testing.assert_close(out.cpu(), want, rtol=1e-2, atol=2e-2)
    torch.testing.assert_close(first.cpu(), want_first, rtol=1e-2, atol=1e-2)


@tilelab.jit
def scaled_after(Q, K, V, block_m: int = 128, block_n: int = 64, threads: int = 256):
    """O += S V, then O scaled after the product: a statement after the last T.gemm, which
    the rotation does not move (it keeps the loop as written)."""
    M, N, D = T.const("M, N, D")
    Q: T.Tensor((M, D), T.float16)
    K: T.Tensor((N, D), T.float16)
    V: T.Tensor((N, D), T.float16)
    O = T.empty((M, D), T.float32)  # noqa: E741
    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
        q = T.alloc_shared((block_m, D), T.float16)
        k = T.alloc_shared((block_n, D), T.float16)
        v = T.alloc_shared((block_n, D), T.float16)
        s = T.alloc_fragment((block_m, block_n), T.float32)
        p = T.alloc_fragment((block_m, block_n), T.float16)
        o = T.alloc_fragment((block_m, D), T.float32)
        T.copy(Q[bx * block_m, 0], q)
        T.clear(o)
        for j in T.Pipelined(T.ceildiv(N, block_n), num_stages=2):
            T.copy(K[j * block_n, 0], k)
            T.copy(V[j * block_n, 0], v)
            T.clear(s)
            T.gemm(q, k, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(s, p)
            T.gemm(p, v, o, policy=T.GemmWarpPolicy.FullRow)
            for i, d in T.Parallel(block_m, D):
                o[i, d] = o[i, d] * 0.5
        T.copy(o, O[bx * block_m, 0])


def _scaled_after_reference(q, k, v):
    out = torch.zeros(q.shape[0], v.shape[1])
    for j in range(0, k.shape[0], 64):
        s = (q.float() @ k[j:j + 64].float().T).half().float()
        out = (out + s @ v[j:j + 64].float()) * 0.5
    return out


def _scaled_after_inputs(device):
    torch.manual_seed(2)
    return (torch.randn(300, 64, dtype=torch.float16, device=device) / 4,
            torch.randn(200, 64, dtype=torch.float16, device=device) / 4,
            torch.randn(200, 64, dtype=torch.float16, device=device))


@needs_nvcc
def test_a_statement_after_the_last_product_keeps_the_loop_as_written():
    kernel = scaled_after.compile(M=256, N=256, D=64, target="cuda:sm_90a",
                                  pass_configs=ROTATE)
    plan = kernel.trace.pipelines[0]
    assert "warp_specialized" in plan and "rotated" not in plan
    assert "wait_group_sync_aligned_1()" not in kernel.get_kernel_source()


def test_the_cpu_ignores_the_key():
    q, k, v = _scaled_after_inputs("cpu")
    out = scaled_after(q, k, v, target="cpu", pass_configs=ROTATE)
    torch.testing.assert_close(out, _scaled_after_reference(q, k, v), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("options, configs", [
    ({}, {}),
    ({}, TURNS),
    ({"causal": True}, {}),
    ({"causal": True}, TURNS),
    ({"block_n": 128}, TURNS),
    ({}, {PassConfigKey.TL_DISABLE_SETMAXNREG.value: True}),
])
def test_rotated_attention_matches_torch_on_the_gpu(options, configs):
    """Shapes with partial tiles, one key tile (the rotated loop runs no iteration) and
    head dimension 64 (its registers stay where the launch puts them)."""
    turns.attention_matches_torch({**ROTATE, **configs}, options, "rotated", shapes=(
        (1, 4, 777, 128), (2, 3, 1000, 64), (1, 2, 64, 128), (1, 2, 130, 128)))


@pytest.mark.gpu
def test_a_loop_kept_as_written_matches_torch_on_the_gpu():
    _hopper()
    q, k, v = _scaled_after_inputs("cuda")
    out = scaled_after(q, k, v, pass_configs=ROTATE)
    want = _scaled_after_reference(q.cpu(), k.cpu(), v.cpu())
    torch.testing.assert_close(out.cpu(), want, rtol=1e-2, atol=2e-2)
