"""Warp roles written by hand: `with T.ws(k)`, mbarriers (`T.alloc_barrier`,
`T.barrier_arrive`, `T.barrier_wait`) and `T.tma_copy` (language/primitives.py,
ops/barrier.py, passes/warp_roles.py), as TileLang's warp-specialized GEMMs use them.

The CPU runs side-by-side roles by turns, each until it waits (passes/role_turns.py),
and checks every wait and arrival; the CUDA backend gives each role its `if`, lowers its tile ops for its own
threads and makes the barriers inside it the role's own.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from examples.ws_gemm import ws_gemm_kernel
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


def ws_gemm(M, N, K, bm=128, bn=128, bk=64, producer=1, consumer=0, consumer_first=False,
            arrive_count=128, dtype=T.float16):
    """TileLang's copy/gemm split: the producer role copies both tiles and arrives at
    `ready`; the consumer waits, multiplies and arrives at `done`, which the producer waits
    for before it overwrites the tiles."""

    @T.prim_func
    def ws_mm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
              C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared((bk, bn), dtype)
            C_l = T.alloc_fragment((bm, bn), T.float32)
            ready = T.alloc_barrier(arrive_count=arrive_count)
            done = T.alloc_barrier(arrive_count=128)
            with T.ws(consumer):
                T.clear(C_l)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                if consumer_first:
                    with T.ws(consumer):
                        T.barrier_wait(ready, ko % 2)
                        T.gemm(A_s, B_s, C_l)
                        T.barrier_arrive(done)
                with T.ws(producer):
                    T.barrier_wait(done, (ko + 1) % 2)
                    T.tma_copy(A[by * bm, ko * bk], A_s, barrier=ready)
                    T.tma_copy(B[ko * bk, bx * bn], B_s, barrier=ready)
                    T.barrier_arrive(ready)
                if not consumer_first:
                    with T.ws(consumer):
                        T.barrier_wait(ready, ko % 2)
                        T.gemm(A_s, B_s, C_l)
                        T.barrier_arrive(done)
            with T.ws(consumer):
                T.copy(C_l, C[by * bm, bx * bn])

    return ws_mm


def two_consumers(M, N, K, bm=128, bn=128, bk=32):
    """No mbarriers: all threads copy A, each role copies its half of B and multiplies it
    (TileLang's gemm_copy_gemm_0_1); the barriers inside each role are the role's own."""

    @T.prim_func
    def halves(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
               C: T.Tensor((M, N), T.float16)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            A_s = T.alloc_shared((bm, bk), T.float16)
            B0 = T.alloc_shared((bk, bn // 2), T.float16)
            B1 = T.alloc_shared((bk, bn // 2), T.float16)
            C0 = T.alloc_fragment((bm, bn // 2), T.float32)
            C1 = T.alloc_fragment((bm, bn // 2), T.float32)
            with T.ws(1):
                T.clear(C1)
            with T.ws(0):
                T.clear(C0)
            for ko in T.Pipelined(T.ceildiv(K, bk), num_stages=0):
                T.copy(A[by * bm, ko * bk], A_s)
                with T.ws(1):
                    T.copy(B[ko * bk, bx * bn], B1)
                    T.gemm(A_s, B1, C1)
                with T.ws(0):
                    T.copy(B[ko * bk, bx * bn + bn // 2], B0)
                    T.gemm(A_s, B0, C0)
            with T.ws(1):
                T.copy(C1, C[by * bm, bx * bn])
            with T.ws(0):
                T.copy(C0, C[by * bm, bx * bn + bn // 2])

    return halves


def _check(kernel, M, N, K, device="cpu", seeds=(0, 1)):
    for seed in seeds:
        torch.manual_seed(seed)
        a = torch.randn(M, K, dtype=torch.float16, device=device)
        b = torch.randn(K, N, dtype=torch.float16, device=device)
        c = torch.full((M, N), float("nan"), dtype=torch.float16, device=device)
        kernel(a, b, c)
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("producer,consumer", [(1, 0), (0, 1)])
def test_a_hand_split_gemm_runs_on_the_cpu(producer, consumer):
    M, N, K = 200, 136, 192  # tails in M and N; three steps of K
    kernel = tilelab.compile(ws_gemm(M, N, K, producer=producer, consumer=consumer),
                             target="cpu")
    _check(kernel, M, N, K)


def _slotted(stages, target):
    """examples/ws_gemm.py: `stages` slots, a `full` and an `empty` barrier each (TileLang's
    barrierpipe GEMM), T.gemm on one 2-d tile of the slotted buffers."""
    def run(a, b, c):
        c.copy_(ws_gemm_kernel(a, b, num_stages=stages, target=target))
    return run


@pytest.mark.parametrize("stages", [2, 3])
def test_slotted_tiles_and_barrier_lists_on_the_cpu(stages):
    M, N, K = 136, 200, 320  # five steps of K over two or three slots
    _check(_slotted(stages, "cpu"), M, N, K)


def test_roles_without_barriers_run_on_the_cpu():
    M, N, K = 136, 256, 96
    _check(tilelab.compile(two_consumers(M, N, K), target="cpu"), M, N, K)


def test_roles_written_consumer_first_take_turns_on_the_cpu():
    """Written consumer first, the consumer's wait comes before the producer's arrival:
    the CPU runs the consumer until it waits, then the producer (passes/role_turns.py)."""
    M, N, K = 128, 128, 192
    _check(tilelab.compile(ws_gemm(M, N, K, consumer_first=True), target="cpu"), M, N, K)


def test_a_wait_no_arrival_completes_is_an_error_at_the_wait():
    """Waiting for the other parity, both roles wait for each other from the start."""
    M, K = 128, 64

    @T.prim_func
    def stuck(A: T.Tensor((M, K), T.float16), C: T.Tensor((M, K), T.float16)):
        with T.Kernel(1, threads=256):
            ready = T.alloc_barrier(arrive_count=128)
            done = T.alloc_barrier(arrive_count=128)
            with T.ws(1):
                T.barrier_wait(done, 0)  # phase 0 of `done` is the consumer's, still to come
                T.barrier_arrive(ready)
            with T.ws(0):
                T.barrier_wait(ready, 0)
                T.copy(A, C)
                T.barrier_arrive(done)

    kernel = tilelab.compile(stuck, target="cpu")
    with pytest.raises(TileLabError) as info:
        kernel(torch.randn(M, K, dtype=torch.float16), torch.empty(M, K, dtype=torch.float16))
    err = info.value
    assert "every warp role waits for another" in str(err) and "parities" in err.hint
    assert "T.barrier_wait(done, 0)" in str(err)


def test_more_arrivals_than_a_barrier_expects_is_an_error():
    M, N, K = 128, 128, 64
    kernel = tilelab.compile(ws_gemm(M, N, K, arrive_count=64), target="cpu")
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    with pytest.raises(TileLabError, match="more threads arrived"):
        kernel(a, b, torch.empty(M, N, dtype=torch.float16))


def _traced(body_fn, threads=256):
    @T.prim_func
    def k(A: T.Tensor((128, 128), T.float16)):
        with T.Kernel(1, threads=threads):
            body_fn(A)

    return k


def test_mistakes_with_roles_are_errors_at_the_users_line():
    """(The helpers are plain Python - T.ws is a context manager too - or a T.macro.)"""

    def beyond(A):
        with T.ws(2):
            T.clear(A)

    with pytest.raises(TileLabError, match="threads 256..383"):
        _traced(beyond)

    def gap(A):
        with T.ws(0, 2):
            T.clear(A)

    with pytest.raises(TileLabError, match="consecutive"):
        _traced(gap)

    def nested(A):
        with T.ws(0):
            with T.ws(1):
                T.clear(A)

    with pytest.raises(TileLabError, match="cannot be nested"):
        _traced(nested)

    @T.macro
    def late_barrier(A):
        for _ in T.serial(2):
            T.alloc_barrier(128)

    with pytest.raises(TileLabError, match="top of the kernel"):
        _traced(late_barrier)


def test_a_fragment_shared_by_two_roles_is_refused():
    @T.prim_func
    def shared_frag(A: T.Tensor((128, 128), T.float32)):
        with T.Kernel(1, threads=256):
            f = T.alloc_fragment((128, 128), T.float32)
            with T.ws(0):
                T.clear(f)
            with T.ws(1):
                T.copy(f, A)

    with pytest.raises(TileLabError, match="one role"):
        tilelab.compile(shared_frag, target="cuda:sm_90a")


@needs_nvcc
def test_each_role_gets_its_if_and_its_own_barriers():
    kernel = tilelab.compile(two_consumers(256, 256, 128), target="cuda:sm_90a")
    source = kernel.get_kernel_source()
    assert "if (128 <= ((int)threadIdx.x))" in source and "< 128)" in source
    assert "tl::role_sync(3, 128)" in source and "tl::role_sync(2, 128)" in source
    for configs, copies in (({}, "tl::tma_load"), ({"tl.disable_tma_lower": True}, "*(uint4*)")):
        hand = tilelab.compile(ws_gemm(256, 256, 128), target="cuda:sm_90a",
                               pass_configs=configs).get_kernel_source()
        loop = hand[hand.index("for (int ko"):]
        loop = loop[:loop.index("\n  }\n")]
        assert "__syncthreads" not in loop  # the mbarriers order the roles
        assert "tl::mbar_wait" in loop and "tl::mbar_arrive" in loop and copies in loop
        # TMA: the producer's first thread announces the bytes; its arrivals are the program's
        assert ("tl::mbar_expect_tx" in loop) == (copies == "tl::tma_load")
        assert "mbar_arrive_expect_tx" not in loop


def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")


@needs_nvcc
def test_a_tile_tma_cannot_copy_is_copied_by_the_producers_threads():
    """K = 330: A's rows are 660 bytes apart, not a multiple of 16 as TMA asks, so the
    producer's threads copy A; B's (272 bytes) go by TMA, into the same barrier's phase."""
    source = tilelab.compile(ws_gemm(200, 136, 330), target="cuda:sm_90a").get_kernel_source()
    loop = source[source.index("for (int ko"):]
    producer = loop[:loop.index("if (((int)threadIdx.x) < 128)")]
    assert producer.count("tl::mbar_expect_tx") == 1 and producer.count("tl::tma_load") == 2
    assert "A_ptr +" in producer  # A, by the threads


@pytest.mark.gpu
@pytest.mark.parametrize("sizes", [(200, 136, 192), (1024, 1024, 1024), (64, 512, 1000),
                                   (200, 136, 330)])  # the last: A by threads, B by TMA
def test_hand_split_gemms_on_the_gpu(sizes):
    """With TMA where the tiles allow it (the default) and with the roles' own copies."""
    _hopper()
    for producer, consumer in ((1, 0), (0, 1)):
        for configs in ({}, {"tl.disable_tma_lower": True}):
            kernel = tilelab.compile(ws_gemm(*sizes, producer=producer, consumer=consumer),
                                     target="cuda:sm_90a", pass_configs=configs)
            _check(kernel, *sizes, device="cuda")
    _check(tilelab.compile(two_consumers(*sizes), target="cuda:sm_90a"), *sizes,
           device="cuda")
    for stages in (2, 3):
        _check(_slotted(stages, "cuda:sm_90a"), *sizes, device="cuda")
