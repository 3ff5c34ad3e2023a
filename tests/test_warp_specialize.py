"""Warp-specialized TMA pipelines on sm_90a (passes/specialize_warps.py).

A pipelined loop whose tiles come by TMA is split between a producer warpgroup, added
after the block's threads (one of its threads issues every copy), and the consumer
warpgroups, which wait on a `full` mbarrier per slot and release the slot on an `empty`
one: no block-wide barrier is left in the loop. Loops the producer cannot run from the
top of the block keep one role; `tl.disable_warp_specialized` keeps every loop so.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.cuda_source import loop_text
from tests.test_wgmma import _inputs, _reference, matmul
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.viz.pipeline import replay

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
ONE_ROLE = {"tl.disable_warp_specialized": True}
SPLIT = {"tl.force_warp_specialized": True}


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


@needs_nvcc
def test_the_block_gains_a_producer_warpgroup_and_the_loop_its_barriers_go():
    cfg = {"block_k": 64, "stages": 4}  # 128 KB: alone on an SM; one warpgroup
    a, b = _inputs(cfg, 1000, 776, 520)
    kernel = matmul.compile(a.to("meta"), b.to("meta"), target="cuda:sm_90a", **cfg)
    source = kernel.get_kernel_source()
    assert kernel.launch["block"] == [128 + 128, 1, 1]
    assert "__launch_bounds__(256" in source
    assert "if (128 <= ((int)threadIdx.x))" in source  # the producer's side
    assert "if (((int)threadIdx.x) == 128)" in source  # one thread of it issues the copies
    assert source.count("__syncthreads()") == 1  # after the mbarriers' initialization
    consumers = loop_text(source, "ko")
    assert "__syncthreads" not in consumers and "consumer_sync" not in consumers
    assert "tl::mbar_wait" in consumers and "tl::mbar_arrive_warp" in consumers
    assert "tl::tma_load" not in consumers
    plan = kernel.trace.pipelines[0]
    assert plan["warp_specialized"] == {"consumer_threads": 128, "producer_threads": 128}
    assert plan["copies"].startswith("TMA, issued by a producer warp")


@tilelab.jit
def staged_epilogue(A, B, block_m: int = 128, block_n: int = 128, block_k: int = 64):
    """The result leaves through shared memory: barriers after the loop, among consumers."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=128) as (bx, by):
        a = T.alloc_shared((block_m, block_k), T.float16)
        b = T.alloc_shared((block_k, block_n), T.float16)
        c = T.alloc_shared((block_m, block_n), T.float16)
        acc = T.alloc_fragment((block_m, block_n), T.float32)
        T.clear(acc)
        for ko in T.Pipelined(T.ceildiv(K, block_k), num_stages=3):
            T.copy(A[by * block_m, ko * block_k], a)
            T.copy(B[ko * block_k, bx * block_n], b)
            T.gemm(a, b, acc)
        T.copy(acc, c)
        T.copy(c, C[by * block_m, bx * block_n])
    return C


@needs_nvcc
@pytest.mark.parametrize("dimension, block_n, causal, split", [
    (128, 128, False, True), (128, 128, True, True),  # Q, K and V slots: 160 KB, alone
    (128, 64, False, False), (64, 128, False, False),  # 96 and 80 KB: room for a second
])
def test_attention_splits_where_its_block_has_the_sm_to_itself(dimension, block_n, causal,
                                                                split):
    """Two consumer warpgroups (128-row query tiles, 256 threads) of FlashAttention: split
    where the tiles in use up to the key loop's end, with its slots, keep a second block off
    the SM (the output's shared tile, used after the loop, does not count: it takes the
    slots' bytes then). H200, d128: 128x128 split x0.90-0.93 of SDPA, one role x0.88-0.90;
    128x64 one role x0.89, split x0.86; d64 128x128 one role x1.07-1.10, split x0.89."""
    from examples.flash_attention import flash_attention_kernel as fa

    kernel = tilelab.compile(fa.fn(2, 4, 1000, dimension, block_m=128, block_n=block_n,
                                   threads=256, causal=causal),
                             out_idx=fa.out_idx, target="cuda:sm_90a",
                             pass_configs=fa.pass_configs)
    assert ("warp_specialized" in kernel.trace.pipelines[0]) is split


@needs_nvcc
def test_barriers_outside_the_loop_wait_for_the_consumers_only():
    """The epilogue's barriers (between the register tile's copy into shared memory and the
    copy out) must not wait for the producer warpgroup, which never gets there."""
    kernel = staged_epilogue.compile(_meta(512, 512), _meta(512, 512), target="cuda:sm_90a",
                                     pass_configs=SPLIT)  # (96 KB in the loop: room for two)
    source = kernel.get_kernel_source()
    assert kernel.launch["block"] == [128 + 128, 1, 1]
    assert source.count("__syncthreads()") == 1 and "tl::consumer_sync(128)" in source
    assert "consumer_sync" not in loop_text(source, "ko")


@needs_nvcc
@pytest.mark.parametrize("which", ["course", "attention", "two_warpgroups"])
def test_loops_where_the_split_measured_slower_keep_one_role(which):
    """Measured on the H200: the course GEMM (128x128x32, 3 stages: 48 KB, room for four
    blocks) ran at 296 TFLOP/s split, its registers letting one block share an SM instead
    of three; FlashAttention's key loop in 64x64 tiles on one warpgroup, which waits for its
    MMAs (softmax in between), ran 6-10% slower split; a 128x256x64 GEMM on two warpgroups
    3-5% slower. All keep one role."""
    from examples.flash_attention import flash_attention_kernel as fa
    from examples.gemm import gemm_kernel

    if which == "course":
        kernel = gemm_kernel.compile(_meta(512, 256), _meta(256, 384), target="cuda:sm_90a")
    elif which == "two_warpgroups":
        kernel = gemm_kernel.compile(_meta(512, 256), _meta(256, 512), target="cuda:sm_90a",
                                     block_n=256, block_k=64, num_stages=4, threads=256)
    else:
        kernel = tilelab.compile(fa.fn(2, 4, 1000, 128), out_idx=fa.out_idx,
                                 target="cuda:sm_90a", pass_configs=fa.pass_configs)
    plan = kernel.trace.pipelines[0]
    assert plan["tma"] and "warp_specialized" not in plan
    assert "consumer_sync" not in kernel.get_kernel_source()


BIG = {"bm": 128, "bn": 128, "bk": 64, "stages": 4, "threads": 128}  # alone on an SM


@tilelab.jit
def two_halves(A, B, bm: int = 64, bn: int = 64, bk: int = 64, stages: int = 3,
               threads: int = 128):
    """A pipelined loop inside another loop of the block: split, the producer walks both."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
        a = T.alloc_shared((bm, bk), T.float16)
        b = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        T.clear(acc)
        half = T.ceildiv(K, 2 * bk)
        for h in T.serial(2):
            for ko in T.Pipelined(half, num_stages=stages):
                T.copy(A[by * bm, (h * half + ko) * bk], a)
                T.copy(B[(h * half + ko) * bk, bx * bn], b)
                T.gemm(a, b, acc)
        T.copy(acc, C[by * bm, bx * bn])
    return C


@tilelab.jit
def counted(A, B, Count, bm: int = 64, bn: int = 64, bk: int = 64, stages: int = 3,
            threads: int = 128):
    """The trip count is read into a register first: the producer could not know it."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    Count: T.Tensor((1,), T.int32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
        a = T.alloc_shared((bm, bk), T.float16)
        b = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        n = T.alloc_var(T.int32)
        n = T.min(Count[0], T.ceildiv(K, bk))
        T.clear(acc)
        for ko in T.Pipelined(n, num_stages=stages):
            T.copy(A[by * bm, ko * bk], a)
            T.copy(B[ko * bk, bx * bn], b)
            T.gemm(a, b, acc)
        T.copy(acc, C[by * bm, bx * bn])
    return C


@needs_nvcc
@tilelab.jit
def counted_walk(A, B, Count, bm: int = 128, bn: int = 128, bk: int = 64, stages: int = 4):
    """A walk over row tiles whose count is read into a register first: a producer at the
    top of the block would walk before the count is there."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    Count: T.Tensor((1,), T.int32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, bn), threads=128) as bx:
        a = T.alloc_shared((bm, bk), T.float16)
        b = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        rows = T.alloc_var(T.int32)
        rows = T.min(Count[0], T.ceildiv(M, bm))
        for by in T.serial(rows):
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, ko * bk], a)
                T.copy(B[ko * bk, bx * bn], b)
                T.gemm(a, b, acc)
            T.copy(acc, C[by * bm, bx * bn])
    return C


@pytest.mark.parametrize("which", ["counted", "counted_walk", "key"])
def test_loops_the_producer_cannot_run_keep_one_role(which):
    """Each with 128 KB of tiles and one warpgroup: split but for the reason named."""
    a, b = _meta(256, 512), _meta(512, 512)
    if which == "counted":
        kernel = counted.compile(a, b, _meta(1, dtype=torch.int32), target="cuda:sm_90a",
                                 **BIG)
    elif which == "counted_walk":
        kernel = counted_walk.compile(a, b, _meta(1, dtype=torch.int32),
                                      target="cuda:sm_90a")
    else:
        kernel = matmul.compile(a, b, target="cuda:sm_90a", pass_configs=ONE_ROLE,
                                block_k=64, stages=4)
    plan = kernel.trace.pipelines[0]
    assert plan["tma"] and "warp_specialized" not in plan
    assert kernel.launch["block"] == [128, 1, 1]
    assert "consumer_sync" not in kernel.get_kernel_source()


@needs_nvcc
def test_a_pipelined_loop_in_a_loop_of_the_block_is_split_and_walked():
    """The outer loop is a walk (pipeline_loops.TileWalk): the producer walks it too and
    its copies run ahead from the first half of K into the second."""
    kernel = two_halves.compile(_meta(256, 512), _meta(512, 512), target="cuda:sm_90a", **BIG)
    plan = kernel.trace.pipelines[0]
    assert plan["warp_specialized"] and "loop over h around it" in plan["across_tiles"]
    assert kernel.launch["block"] == [256, 1, 1]
    assert "for (int h_load = 0; h_load < 2; ++h_load)" in kernel.get_kernel_source()


@needs_nvcc
def test_an_instrumented_split_loop_stamps_both_roles():
    """The measured replay of a split loop: the consumers' thread 0 stamps waiting, tiles
    there and compute done (events 0, 1, 3); the producer thread stamps when it issued
    each iteration's copies (event 2), inside its own loop."""
    kernel = matmul.compile(_meta(256, 512), _meta(512, 512), target="cuda:sm_90a",
                            pass_configs={"tl.instrument_pipeline": 2}, block_k=64, stages=4)
    assert kernel.trace.pipelines[0]["warp_specialized"]
    assert kernel.launch["block"] == [256, 1, 1]
    source = kernel.get_kernel_source()
    producer = source.split("for (int ko_load = ")[1].split("} else {")[0]
    consumers = loop_text(source, "ko")
    assert producer.count("tl::globaltimer()") == 1 and "* 4)) + 2)] = " in producer
    assert consumers.count("tl::globaltimer()") == 3


def test_measured_rows_of_a_split_loop_put_the_producer_on_its_own_lane():
    import numpy as np

    from tilelab.instrument import measured_rows
    from tilelab.viz import pipeline_view

    # one block, three iterations, two slots: the producer issued 0 and 1 at once (ns 100),
    # iteration 2 after the consumers released slot 0 (during iteration 1)
    stamps = np.array([[[110, 150, 100, 250], [250, 260, 100, 360], [360, 400, 300, 500]]])
    rows = measured_rows(stamps, specialized=True)
    issues = [r for r in rows if r["kind"] == "issue"]
    assert [(r["iteration"], r["start_ns"], r["role"]) for r in issues] == \
        [(0, 0, "producer"), (1, 0, "producer"), (2, 200, "producer")]
    assert all(r["end_ns"] == r["start_ns"] for r in issues)  # an instant
    computes = [(r["start_ns"], r["end_ns"]) for r in rows if r["kind"] == "compute"]
    assert computes == [(50, 150), (160, 260), (300, 400)]  # from the tiles' arrival
    plan = {"loop": "ko", "num_stages": 2, "extent": 3, "slots": {"a": 2}, "tma": True,
            "ahead": 0, "warp_specialized": {"consumer_threads": 128, "producer_threads": 128},
            "statements": [{"text": "copy(A, a)", "stage": 0, "order": 0, "role": "copy"},
                           {"text": "gemm(a, b, c)", "stage": 0, "order": 1,
                            "role": "compute"}],
            "async_groups": [["copy(A, a)"]], "waits": ""}
    svg = pipeline_view(plan, iterations=3, measured=rows).scene().to_svg()
    assert 'data-role="producer"' in svg and 'data-role="consumer"' in svg
    assert "producer thread and consumer warps" in svg


def test_the_replay_lets_the_producer_fill_every_slot():
    """The producer copies S tiles at once and refills each slot as it is released: with
    MMAs in flight the slot of iteration k - 1 is refilled during iteration k."""
    statements = [{"text": "copy(A, a)", "stage": 0, "order": 0, "role": "copy"},
                  {"text": "gemm(a, b, acc)", "stage": 2, "order": 1, "role": "compute"}]
    plan = {"loop": "k", "num_stages": 4, "extent": 12, "statements": statements, "tma": True,
            "ahead": 2, "warp_specialized": {"consumer_threads": 256, "producer_threads": 128}}
    rows, _ = replay(plan, iterations=12, copy_time=2.0, compute_time=1.0)
    issued = {r["iteration"]: r["start"] for r in rows if r["kind"] == "copy"}
    computed = {r["iteration"]: r["start"] for r in rows if r["kind"] == "compute"}
    assert [issued[i] for i in range(4)] == [0.0] * 4
    for i in range(4, 12):  # slot of i - 4 released after iteration i - 3's compute
        assert issued[i] == computed[i - 3] + 1.0
    assert not [r for r in rows if r["kind"] == "wait" and r["iteration"] > 0]


@pytest.mark.gpu
@pytest.mark.parametrize("configs", [{}, ONE_ROLE, SPLIT])
def test_kept_and_split_loops_compute_the_same_on_the_gpu(configs):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    torch.manual_seed(0)
    a = torch.randn(300, 520, dtype=torch.float16, device="cuda")
    b = torch.randn(520, 200, dtype=torch.float16, device="cuda")
    expected = a.float() @ b.float()
    count = torch.tensor([5], dtype=torch.int32, device="cuda")
    for sizes in [{}, BIG]:
        out = two_halves(a, b, pass_configs=configs, **sizes)
        torch.testing.assert_close(out, expected, rtol=2e-2, atol=5e-2)
        out = counted(a, b, count, pass_configs=configs, **sizes)
        bk = sizes.get("bk", 64)
        want = a[:, :5 * bk].float() @ b[:5 * bk].float()
        torch.testing.assert_close(out, want, rtol=2e-2, atol=5e-2)
    out = staged_epilogue(a, b, pass_configs=configs)
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=5e-2)
    for cfg in [{}, {"block_k": 64, "stages": 4}, {"block_k": 64, "stages": 4, "block_m": 64}]:
        a2, b2 = _inputs(cfg, 1000, 776, 520, device="cuda")
        out = matmul(a2, b2, pass_configs=configs, **cfg)
        torch.testing.assert_close(out.float(), _reference(cfg, a2, b2), rtol=2e-2, atol=5e-2)
    # instrumented: the same result, and the stamps follow the protocol
    cfg = {"block_k": 64, "stages": 4}
    a2, b2 = _inputs(cfg, 1000, 776, 1024, device="cuda")
    kernel = matmul.compile(a2, b2, pass_configs={**configs, "tl.instrument_pipeline": 2}, **cfg)
    out, timeline = kernel(a2, b2)
    torch.testing.assert_close(out.float(), _reference(cfg, a2, b2), rtol=2e-2, atol=5e-2)
    _check_stamps(timeline.cpu(), kernel.trace.pipelines[0], stages=4)


def _check_stamps(timeline, plan, stages: int):
    from tilelab.instrument import measured_rows

    split = bool(plan.get("warp_specialized"))
    rows = measured_rows(timeline, specialized=split)
    at = {(r["block"], r["iteration"], r["kind"]): r for r in rows}
    iterations = 1 + max(r["iteration"] for r in rows)
    for block in range(2):
        for k in range(iterations):
            wait, compute = at[block, k, "wait"], at[block, k, "compute"]
            assert wait["start_ns"] <= wait["end_ns"] <= compute["end_ns"]
            if split:  # copies issued before the consumers saw them land; refills only
                # after the consumers released the slot (during iteration k - S + 1)
                assert at[block, k, "issue"]["start_ns"] <= wait["end_ns"]
                if k >= stages:
                    assert at[block, k, "issue"]["start_ns"] >= \
                        at[block, k - stages + 1, "wait"]["end_ns"]


def test_the_fallback_kernels_are_right_on_the_cpu():
    torch.manual_seed(1)
    a, b = torch.randn(100, 260).half(), torch.randn(260, 72).half()
    torch.testing.assert_close(two_halves(a, b, target="cpu"), a.float() @ b.float(),
                               rtol=1e-2, atol=1e-2)
    count = torch.tensor([2], dtype=torch.int32)
    torch.testing.assert_close(counted(a, b, count, target="cpu"),
                               a[:, :128].float() @ b[:128].float(), rtol=1e-2, atol=1e-2)
    a2 = torch.randn(300, 260).half()  # three row tiles; the count lets two run
    out = counted_walk(a2, b, count, target="cpu")
    torch.testing.assert_close(out[:256], a2[:256].float() @ b.float(), rtol=1e-2, atol=1e-2)


@tilelab.jit
def tiles_in_the_loop(A, B, bm: int = 128, bn: int = 128, bk: int = 64, stages: int = 3):
    """The shared tiles allocated inside the T.Pipelined body (TileLang's mhc_pre GEMM):
    their slots are filled before the loop, so the pipeline allocates them before it."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
        acc = T.alloc_fragment((bm, bn), T.float32)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
            a_s = T.alloc_shared((bm, bk), T.float16)
            b_s = T.alloc_shared((bk, bn), T.float16)
            T.copy(A[by * bm, k * bk], a_s)
            T.copy(B[k * bk, bx * bn], b_s)
            T.gemm(a_s, b_s, acc)
        T.copy(acc, C[by * bm, bx * bn])
    return C


IN_LOOP_CONFIGS = [("cuda:sm_80", {}), ("cuda:sm_90a", ONE_ROLE),
                   ("cuda:sm_90a", {"tl.force_warp_specialized": True})]


@needs_nvcc
@pytest.mark.parametrize("target, configs", IN_LOOP_CONFIGS)
def test_tiles_allocated_inside_a_pipelined_loop_compile(target, configs):
    kernel = tiles_in_the_loop.compile(_meta(300, 520), _meta(520, 200), target=target,
                                       pass_configs=configs)
    plan = kernel.trace.pipelines[0]
    assert plan["num_stages"] == 3
    assert ("warp_specialized" in plan) == ("tl.force_warp_specialized" in configs)
    a = torch.randn(300, 520, dtype=torch.float16)
    b = torch.randn(520, 200, dtype=torch.float16)
    out = tiles_in_the_loop(a, b, target="cpu")
    torch.testing.assert_close(out, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("target, configs", IN_LOOP_CONFIGS[1:] + [
    ("cuda:sm_90a", {"tl.disable_tma_lower": True})])  # cp.async on the H200
def test_tiles_allocated_inside_a_pipelined_loop_on_the_gpu(target, configs):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    torch.manual_seed(0)
    a = torch.randn(300, 520, dtype=torch.float16, device="cuda")
    b = torch.randn(520, 200, dtype=torch.float16, device="cuda")
    kernel = tiles_in_the_loop.compile(a, b, target=target, pass_configs=configs)
    torch.testing.assert_close(kernel(a, b), a.float() @ b.float(), rtol=2e-2, atol=5e-2)
