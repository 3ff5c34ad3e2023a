"""TileLang's hand-written warp-specialized kernels (FlashMLA, sparse MLA, DeepSeek's MLA
decode): warp roles that each run a whole loop - the producer copies every tile, the
consumer multiplies every tile - and hand slots over through mbarriers. The CPU runs such
roles by turns, each until it waits for a phase not yet complete (passes/role_turns.py);
a producer's threads copy with T.ptx_cp_async; T.gemm on parts of tiles at a T.unroll
loop's offsets; T.fence_proxy_async. The results agree with torch, edge tiles included,
and the same programs compile for sm_90a, where the roles run at once."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@T.macro
def produce(A, B, a_slots, b_slots, full, empty, bx, by):
    """Copy every K tile into its slot once the consumer has freed it."""
    stages, bm, bk = a_slots.shape
    bn = b_slots.shape[2]
    for k in T.serial(T.ceildiv(A.shape[1], bk)):
        slot = k % stages
        T.barrier_wait(empty[slot], (k // stages) % 2 ^ 1)  # the first round: free already
        T.copy(A[by * bm, k * bk], a_slots[slot, :, :])
        T.copy(B[k * bk, bx * bn], b_slots[slot, :, :])
        T.barrier_arrive(full[slot])


@T.macro
def consume(A, C, a_slots, b_slots, acc, full, empty, bx, by):
    """Multiply every K tile once it is there, then store the sum."""
    stages, bm, bk = a_slots.shape
    bn = b_slots.shape[2]
    T.clear(acc)
    for k in T.serial(T.ceildiv(A.shape[1], bk)):
        T.barrier_wait(full[k % stages], (k // stages) % 2)
        T.gemm(a_slots[k % stages, :, :], b_slots[k % stages, :, :], acc)
        T.barrier_arrive(empty[k % stages])
    T.copy(acc, C[by * bm, bx * bn])


@tilelab.jit(out_idx=-1)
def whole_role_gemm(M, N, K, bm=64, bn=64, bk=32, stages=2, split_by_if=False):
    """C = A B with a producer role (warpgroup 1) and a consumer role (warpgroup 0), each
    looping over every K tile; `split_by_if`: the roles are the branches of
    `if tx >= 128:` instead of `with T.ws(...)`."""
    @T.prim_func
    def kernel(A: T.Tensor((M, K), T.float32), B: T.Tensor((K, N), T.float32),
               C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            a_slots = T.alloc_shared((stages, bm, bk), T.float32)
            b_slots = T.alloc_shared((stages, bk, bn), T.float32)
            acc = T.alloc_fragment((bm, bn), T.float32)
            full = T.alloc_barrier([128] * stages)
            empty = T.alloc_barrier([128] * stages)
            if split_by_if:
                tx = T.get_thread_binding()
                if tx >= 128:
                    produce(A, B, a_slots, b_slots, full, empty, bx, by)
                else:
                    consume(A, C, a_slots, b_slots, acc, full, empty, bx, by)
            else:
                with T.ws(1):
                    produce(A, B, a_slots, b_slots, full, empty, bx, by)
                with T.ws(0):
                    consume(A, C, a_slots, b_slots, acc, full, empty, bx, by)
    return kernel


@pytest.mark.parametrize("split_by_if", [False, True])
def test_whole_loop_roles_take_turns_on_the_cpu(split_by_if):
    torch.manual_seed(1)
    for (M, N, K), stages in [((128, 64, 256), 2), ((100, 72, 200), 3)]:
        a, b = torch.randn(M, K), torch.randn(K, N)
        c = whole_role_gemm(M, N, K, stages=stages, split_by_if=split_by_if)(a, b)
        torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


@tilelab.jit(out_idx=-1)
def handshake(n=64, rounds=5):
    """Two roles alternate on one shared row: the first writes round r's values and waits
    for the second to have added them into its sum; a value the first computes before a
    wait (`base`) is used after it, and the loop bound is a value read from memory."""
    @T.prim_func
    def kernel(X: T.Tensor((rounds, n), T.float32), R: T.Tensor((1,), T.int32),
               Y: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=256):
            row = T.alloc_shared((n,), T.float32)
            sums = T.alloc_fragment((n,), T.float32)
            written = T.alloc_barrier(128)
            taken = T.alloc_barrier(128)
            with T.ws(0):
                for r in T.serial(R[0]):
                    base = r * 2
                    T.barrier_wait(taken, r % 2 ^ 1)
                    for i in T.Parallel(n):
                        row[i] = X[r, i] + T.cast(base, T.float32)
                    T.barrier_arrive(written)
            with T.ws(1):
                T.clear(sums)
                for r in T.serial(R[0]):
                    T.barrier_wait(written, r % 2)
                    for i in T.Parallel(n):
                        sums[i] += row[i]
                    T.barrier_arrive(taken)
                T.copy(sums, Y)
    return kernel


def test_values_and_loop_bounds_carry_across_waits():
    torch.manual_seed(2)
    x = torch.randn(5, 64)
    for rounds in (0, 1, 5):
        y = handshake()(x, torch.tensor([rounds], dtype=torch.int32))
        expected = (x[:rounds] + 2 * torch.arange(rounds)[:, None]).sum(0)
        torch.testing.assert_close(y, expected)


def test_a_producer_that_stops_early_leaves_the_consumer_waiting_at_its_line():
    @T.prim_func
    def short(A: T.Tensor((64,), T.float32), C: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=256):
            full = T.alloc_barrier(128)
            with T.ws(1):
                for _ in T.serial(2):
                    T.barrier_arrive(full)
            with T.ws(0):
                for k in T.serial(3):
                    T.barrier_wait(full, k % 2)
                T.copy(A, C)

    kernel = tilelab.compile(short, target="cpu")
    with pytest.raises(TileLabError) as info:
        kernel(torch.randn(64), torch.empty(64))
    assert "every warp role waits for another" in str(info.value)
    assert "T.barrier_wait(full, k % 2)" in str(info.value)


@needs_nvcc
def test_the_same_program_compiles_for_cuda():
    for split_by_if in (False, True):
        source = whole_role_gemm.compile(100, 72, 200, split_by_if=split_by_if,
                                         target="cuda").get_kernel_source()
        assert "tl::mbar_wait" in source and "tl::mbar_arrive" in source


@pytest.mark.gpu
def test_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(3)
    for split_by_if in (False, True):
        a, b = torch.randn(100, 200, device="cuda"), torch.randn(200, 72, device="cuda")
        c = whole_role_gemm.compile(100, 72, 200, split_by_if=split_by_if, target="cuda")(a, b)
        torch.testing.assert_close(c, a @ b, rtol=1e-3, atol=1e-3)
    x = torch.randn(5, 64, device="cuda")
    y = handshake.compile(target="cuda")(x, torch.tensor([5], dtype=torch.int32,
                                                          device="cuda"))
    torch.testing.assert_close(y, (x + 2 * torch.arange(5, device="cuda")[:, None]).sum(0))
    x = torch.randn(80, 128, dtype=torch.float16, device="cuda")
    assert torch.equal(copied_by_threads.compile(target="cuda")(x), x)
    x = torch.randn(4 * 64, 64, device="cuda")
    torch.testing.assert_close(two_consumers.compile(target="cuda")(x), two_consumers_expected(x))
    q, k = (torch.randn(64, 128, dtype=torch.float16, device="cuda") for _ in range(2))
    torch.testing.assert_close(split_k_parts.compile(target="cuda")(q, k),
                               q.float() @ k.float().T, rtol=1e-3, atol=1e-3)


@tilelab.jit(out_idx=-1)
def copied_by_threads(n=16, d=128, stages=2, rounds=5):
    """TileLang's hand-written producer (sparse MLA's): each of 128 threads copies 8
    elements of a row with T.ptx_cp_async, and T.cp_async_barrier_noinc tells the
    consumer role the slot is full."""
    @T.prim_func
    def kernel(X: T.Tensor((rounds * n, d), T.float16), Y: T.Tensor((rounds * n, d), T.float16)):
        with T.Kernel(1, threads=256):
            slots = T.alloc_shared((stages, n, d), T.float16)
            full = T.alloc_barrier([128] * stages)
            free = T.alloc_barrier([128] * stages)
            tx = T.get_thread_binding()
            if tx < 128:
                for r in T.serial(rounds):
                    T.barrier_wait(full[r % stages], (r // stages) & 1)
                    T.copy(slots[r % stages, :, :], Y[r * n, 0])
                    T.barrier_arrive(free[r % stages])
            else:
                for r in T.serial(rounds):
                    T.barrier_wait(free[r % stages], ((r // stages) & 1) ^ 1)
                    row = (tx - 128) // 8
                    for u in T.serial(d // 64):
                        column = 64 * u + (tx - 128) % 8 * 8
                        T.ptx_cp_async(T.access_ptr(slots[r % stages, row, column], "w", 8),
                                       T.access_ptr(X[r * n + row, column], "r", 8), 8)
                    T.cp_async_barrier_noinc(full[r % stages])
    return kernel


def test_copies_by_single_threads_hand_slots_over():
    x = torch.randn(80, 128, dtype=torch.float16)
    assert torch.equal(copied_by_threads()(x), x)


@tilelab.jit(out_idx=-1)
def two_consumers(rounds=4, n=64, d=64, stages=2):
    """A producer and two consumer roles in an `if / elif / else` on the thread index (as
    DeepSeek's sparse MLA "seesaw" kernel): the consumers compute the same indices from
    the thread number, which TVM binds once, before both roles."""
    @T.prim_func
    def kernel(X: T.Tensor((rounds * n, d), T.float32), Y: T.Tensor((2, n, d), T.float32)):
        with T.Kernel(1, threads=384):
            slots = T.alloc_shared((stages, n, d), T.float32)
            full = T.alloc_barrier([128] * stages)
            free = T.alloc_barrier([256] * stages)
            first = T.alloc_fragment((n, d), T.float32)
            second = T.alloc_fragment((n, d), T.float32)
            tx = T.get_thread_binding()
            if tx >= 256:
                for r in T.serial(rounds):
                    T.barrier_wait(free[r % stages], ((r // stages) & 1) ^ 1)
                    T.copy(X[r * n, 0], slots[r % stages, :, :])
                    T.barrier_arrive(full[r % stages])
            elif tx < 128:
                T.clear(first)
                for r in T.serial(rounds):
                    T.barrier_wait(full[r % stages], (r // stages) & 1)
                    for i, j in T.Parallel(n, d):
                        first[i, j] += slots[r % stages, i, j]
                    T.barrier_arrive(free[r % stages])
                T.copy(first, Y[0, 0, 0])
            else:
                T.clear(second)
                for r in T.serial(rounds):
                    T.barrier_wait(full[r % stages], (r // stages) & 1)
                    for i, j in T.Parallel(n, d):
                        second[i, j] += 2 * slots[r % stages, i, j]
                    T.barrier_arrive(free[r % stages])
                T.copy(second, Y[1, 0, 0])
    return kernel


def two_consumers_expected(x):
    total = x.view(4, 64, 64).sum(0)
    return torch.stack([total, 2 * total])


def test_two_consumer_roles_share_the_producers_slots():
    x = torch.randn(4 * 64, 64)
    torch.testing.assert_close(two_consumers()(x), two_consumers_expected(x))


def test_a_fragment_of_two_roles_is_refused_on_the_cpu_as_on_the_gpu():
    """A fragment lives in the registers of one role's threads. The CPU, which keeps every
    fragment whole, would run such a program (the roles taking turns on one array) and
    return what no GPU computes; it refuses it at the same line as the CUDA compile."""
    @T.prim_func
    def shared_accumulator(X: T.Tensor((64, 64), T.float32), Y: T.Tensor((2, 64, 64), T.float32)):
        with T.Kernel(1, threads=256):
            acc = T.alloc_fragment((64, 64), T.float32)
            with T.ws(0):
                T.copy(X, acc)
                T.copy(acc, Y[0, 0, 0])
            with T.ws(1):
                T.clear(acc)
                T.copy(acc, Y[1, 0, 0])

    with pytest.raises(TileLabError) as info:
        tilelab.compile(shared_accumulator, target="cpu")
    assert "fragment 'acc' is used by T.ws threads 0..127 and by T.ws threads 128..255" \
        in str(info.value)
    assert "T.clear(acc)" in str(info.value)


@needs_nvcc
def test_roles_of_different_threads_meet_no_barrier_of_the_whole_block():
    """The roles run side by side and hand slots over by mbarriers alone: a __syncthreads
    between them would hold the consumer until the producer ends its loop, and the producer
    waits for slots the consumer frees (a hang on the GPU)."""
    kernels = [whole_role_gemm.compile(100, 72, 200, split_by_if=s, target="cuda")
               for s in (False, True)]
    kernels += [handshake.compile(target="cuda"), copied_by_threads.compile(target="cuda"),
                two_consumers.compile(target="cuda")]
    for kernel in kernels:
        source = kernel.get_kernel_source()
        assert source.rindex("__syncthreads()") < source.index("tl::mbar_wait")


@needs_nvcc
def test_copies_by_single_threads_fence_before_they_arrive_on_the_gpu():
    source = copied_by_threads.compile(target="cuda").get_kernel_source()
    fence = source.index("fence.proxy.async")
    assert source.index("tl::mbar_arrive", fence) > fence


def test_ptx_cp_async_takes_access_pointers_from_global_to_shared():
    with pytest.raises(TileLabError, match="copies from global to shared memory; its "
                                           "destination X is in global memory"):
        @T.prim_func
        def backwards(X: T.Tensor((8,), T.float32), Y: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((8,), T.float32)
                T.ptx_cp_async(T.access_ptr(X[0], "w", 4), T.access_ptr(s[0], "r", 4), 4)


@tilelab.jit(out_idx=-1)
def split_k_parts(m=64, n=64, d=128, part=64):
    """S = Q Kᵀ as FlashMLA writes it: a T.unroll loop over parts of the head dimension, each
    T.gemm on a part of the shared tiles at the loop's offset (written out while tracing,
    so each part's offset is a constant); a role's stores fenced for the tensor cores."""
    @T.prim_func
    def kernel(Q: T.Tensor((m, d), T.float16), K: T.Tensor((n, d), T.float16),
               S: T.Tensor((m, n), T.float32)):
        with T.Kernel(1, threads=128):
            q = T.alloc_shared((m, d), T.float16)
            k = T.alloc_shared((n, d), T.float16)
            acc = T.alloc_fragment((m, n), T.float32)
            T.copy(Q, q)
            T.copy(K, k)
            T.fence_proxy_async()
            T.clear(acc)
            for j in T.unroll(d // part):
                T.gemm(q[:, j * part:(j + 1) * part], k[:, j * part:(j + 1) * part], acc,
                       transpose_B=True)
            T.copy(acc, S)
    return kernel


def test_gemm_on_parts_at_an_unrolled_loops_offsets():
    q, k = torch.randn(64, 128, dtype=torch.float16), torch.randn(64, 128, dtype=torch.float16)
    torch.testing.assert_close(split_k_parts()(q, k), q.float() @ k.float().T, rtol=1e-3,
                               atol=1e-3)
    if find_nvcc() is not None:
        source = split_k_parts.compile(target="cuda:sm_90a").get_kernel_source()
        assert "fence.proxy.async" in source


@tilelab.jit(out_idx=-1)
def gathered_async(n=64, d=32, count=48):
    """MInference's prefetch as TileLang writes it: rows gathered by index into a shared tile
    by a T.Parallel copy asked to run as cp.async (`prefer_async`), the program committing
    and waiting for the group itself; rows past `count` are zeros."""
    @T.prim_func
    def kernel(X: T.Tensor((n, d), T.float16), index: T.Tensor((n,), T.int32),
               Y: T.Tensor((n, d), T.float16)):
        with T.Kernel(1, threads=128):
            rows = T.alloc_shared((n,), T.int32)
            s = T.alloc_shared((n, d), T.float16)
            T.copy(index, rows)
            for i, j in T.Parallel(n, d, prefer_async=True,
                                   annotations={"parallel_async_without_async_commit_wait": True}):
                s[i, j] = T.if_then_else(i < count, X[rows[i], j], 0)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            T.sync_threads()
            for i, j in T.Parallel(n, d):
                Y[i, j] = s[i, j] * 2
    return kernel


def test_a_copy_loop_asked_to_run_async_computes_as_written():
    x = torch.randn(64, 32, dtype=torch.float16)
    index = torch.randperm(64, dtype=torch.int32)
    want = torch.where(torch.arange(64)[:, None] < 48, x[index.long()], 0) * 2
    torch.testing.assert_close(gathered_async.compile(target="cpu")(x, index), want)


@needs_nvcc
def test_a_copy_loop_asked_to_run_async_compiles_for_the_gpu():
    assert "__global__" in gathered_async.compile(target="cuda:sm_90a").get_kernel_source()


def test_scheduling_annotations_tilelab_lacks_are_named():
    with pytest.raises(TileLabError, match="T.Parallel annotations ws_id") as info:
        @T.prim_func
        def annotated(X: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(8, annotations={"ws_id": "x"}):  # @ws-id
                    X[i] = 0.0
    assert "@ws-id" in info.value.location.excerpt()
