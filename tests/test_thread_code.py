"""Code written for one thread (`T.get_thread_binding`, passes/thread_code.py): the CPU runs
it once per thread, in step between statements, the GPU on every thread; both agree with
torch, and what one thread cannot do is refused at its line."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabTypeError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@tilelab.jit(out_idx=[-1])
def splitk_gemv(N, K, block_n=32, reduce_threads=8):
    """y = B @ x: thread (tn, tk) of a block sums every reduce_threads-th element of row
    tn; the partial sums meet in shared memory through atomics. N and K need not be
    multiples of the block (the guards are the program's)."""
    @T.prim_func
    def kernel(x: T.Tensor((K,), T.float16), B: T.Tensor((N, K), T.float16),
               y: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block_n), threads=(block_n, reduce_threads)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), T.float32)
            sums = T.alloc_shared((block_n,), T.float32)
            if tk == 0:
                sums[tn] = 0
            T.clear(acc)
            for k in T.serial(T.ceildiv(K, reduce_threads)):
                col = k * reduce_threads + tk
                if col < K and bn * block_n + tn < N:
                    acc[0] += x[col].astype(T.float32) * B[bn * block_n + tn, col].astype(
                        T.float32)
            T.atomic_add(sums[tn], acc[0])
            if tk == 0 and bn * block_n + tn < N:
                y[bn * block_n + tn] = sums[tn]
    return kernel


@tilelab.jit(out_idx=[-1])
def neighbours(n, threads=64):
    """out[i] = a[i] + a[i + 1] within each block's run of `threads`, the neighbour's value
    read from shared memory another thread wrote (a barrier between, which the compiler
    puts); thread t also counts its way up to t in a private T.alloc_var."""
    @T.prim_func
    def kernel(a: T.Tensor((n,), T.float32), out: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            tx = T.thread_binding(0, threads, thread="threadIdx.x")
            s = T.alloc_shared((threads,), T.float32)
            steps = T.alloc_var(T.int32)
            steps = 0
            for _ in T.serial(tx):  # a loop as long as the thread's index
                steps = steps + 1
            s[tx] = T.if_then_else(bx * threads + tx < n, a[bx * threads + tx], 0.0)
            if bx * threads + tx < n:
                out[bx * threads + tx] = s[tx] + s[(tx + 1) % threads] + T.cast(
                    steps - tx, T.float32)
    return kernel


def expected_neighbours(a, threads=64):
    padded = torch.nn.functional.pad(a, (0, -len(a) % threads)).view(-1, threads)
    return (padded + padded.roll(-1, dims=1)).flatten()[:len(a)]


def check_gemv(kernel, device, n=100, k=77):
    x = torch.randn(k, device=device).half()
    b = torch.randn(n, k, device=device).half()
    torch.testing.assert_close(kernel(x, b), b.float() @ x.float(), rtol=1e-4, atol=1e-4)


def test_cpu_gemv_by_thread_matches_torch():
    check_gemv(splitk_gemv.compile(100, 77, target="cpu"), "cpu")


def test_cpu_threads_read_what_others_wrote():
    a = torch.randn(150)
    torch.testing.assert_close(neighbours.compile(150, target="cpu")(a), expected_neighbours(a))


def test_cpu_runs_each_piece_of_thread_code_for_every_thread():
    trace = neighbours.compile(150, target="cpu").trace
    marked = trace.ir_after("tilelab.MarkThreadCode")
    assert marked.count('"tilelab.per_thread"') >= 3
    looped = trace.ir_after("tilelab.ThreadLoops")
    assert "for thread in range(64)" in looped and "tilelab.per_thread" not in looped
    assert "steps = T.alloc_local((64, 1)" in looped.replace('"int32"', "").replace(", )", ")")


@needs_nvcc
def test_cuda_every_thread_runs_its_own_stores():
    source = neighbours.compile(150, target="cuda:sm_90a").get_kernel_source()
    body = source[source.rindex("__global__"):]
    assert "threadIdx.x" in body and "__syncthreads()" in body
    assert "== 0)" not in body  # no store left to thread 0 alone



def test_tile_ops_on_the_thread_index_are_refused_at_the_line():
    with pytest.raises(TileLabTypeError, match="condition is no range of the thread") as info:
        @tilelab.jit
        def copy_by_thread(A):
            A: T.Tensor((64, 64), T.float32)
            B = T.empty((64, 64), T.float32)
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                s = T.alloc_shared((64, 64), T.float32)
                if tx % 2 == 0:  # no range of whole warps: no role either
                    T.copy(A, s)
                T.copy(s, B)
            return B

        copy_by_thread(torch.randn(64, 64))
    assert "test_thread_code.py" in str(info.value.location.filename)


@pytest.mark.parametrize("what, match", [
    ("parallel", "a T.Parallel loop in code each thread"),
    ("barrier", "a barrier .T.sync_threads. inside"),
    ("fragment", "fragment 'f' in code each thread"),
])
def test_what_one_thread_cannot_do_is_refused(what, match):
    @tilelab.jit
    def program(A, what: str):
        A: T.Tensor((64,), T.float32)
        B = T.empty((64,), T.float32)
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            f = T.alloc_fragment((64,), T.float32)
            T.clear(f)
            if what == "parallel":
                for i in T.Parallel(64):
                    B[i] = A[i] + tx
            elif what == "barrier":
                if tx < 32:
                    T.sync_threads()
                    B[tx] = A[tx]
            else:
                B[tx] = f[tx]
        return B

    with pytest.raises(TileLabTypeError, match=match) as info:
        program(torch.randn(64), what)
    assert info.value.location is not None and info.value.location.line > 0


def test_thread_binding_must_cover_the_block():
    with pytest.raises(TileLabTypeError, match="covers threads other than"):
        @tilelab.jit
        def partial(A):
            A: T.Tensor((64,), T.float32)
            with T.Kernel(1, threads=64):
                tx = T.thread_binding(0, 32, thread="threadIdx.x")
                A[tx] = 0

        partial(torch.randn(64))


@pytest.mark.gpu
def test_gpu_matches_torch():
    check_gemv(splitk_gemv.compile(100, 77, target="cuda"), "cuda")
    a = torch.randn(150, device="cuda")
    torch.testing.assert_close(neighbours.compile(150, target="cuda")(a),
                               expected_neighbours(a))
    a = torch.randn(40, 64, device="cuda")
    torch.testing.assert_close(split_by_warps.compile(40, target="cuda")(a), expected_split(a))


@tilelab.jit(out_idx=[-1])
def split_by_warps(n, threads=128):
    """`if tx < 32: ... else: ...` with tile ops in both branches: warp 0 sums each row,
    warps 1-3 scale the rows, each branch a role over its threads."""
    @T.prim_func
    def kernel(a: T.Tensor((n, 64), T.float32), out: T.Tensor((n, 65), T.float32)):
        with T.Kernel(T.ceildiv(n, 16), threads=threads) as bx:
            tx = T.get_thread_binding()
            tile = T.alloc_shared((16, 64), T.float32)
            T.copy(a[bx * 16, 0], tile)
            if tx < 32:
                row = T.alloc_fragment((16, 64), T.float32)
                sums = T.alloc_fragment((16,), T.float32)
                T.copy(tile, row)
                T.reduce_sum(row, sums, dim=1)
                for i in T.Parallel(16):
                    if bx * 16 + i < n:
                        out[bx * 16 + i, 64] = sums[i]
            else:
                for i, j in T.Parallel(16, 64):
                    if bx * 16 + i < n:
                        out[bx * 16 + i, j] = tile[i, j] * 2.0
    return kernel


def expected_split(a):
    return torch.cat([a * 2, a.sum(1, keepdim=True)], dim=1)


def test_an_if_on_the_thread_index_with_tile_ops_splits_the_block():
    kernel = split_by_warps.compile(40, target="cpu")
    a = torch.randn(40, 64)
    torch.testing.assert_close(kernel(a), expected_split(a))
    marked = kernel.trace.ir_after("tilelab.MarkThreadCode")
    assert marked.count('"tilelab.warp_role"') == 2


@needs_nvcc
def test_roles_by_thread_index_compile_for_their_threads():
    source = split_by_warps.compile(40, target="cuda:sm_90a").get_kernel_source()
    assert "if (((int)threadIdx.x) < 32) {" in source
    assert "if (32 <= ((int)threadIdx.x)) {" in source and "c * 96" in source


def test_a_branch_must_take_whole_warps():
    with pytest.raises(TileLabTypeError, match="a branch so takes whole warps"):
        @tilelab.jit
        def odd(A):
            A: T.Tensor((64,), T.float32)
            B = T.empty((64,), T.float32)
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                if tx < 16:
                    for i in T.Parallel(64):
                        B[i] = A[i]
            return B

        odd(torch.randn(64))


@tilelab.jit(out_idx=[-1])
def role_with_thread_code(threads=128):
    """Thread code inside a role: only the role's threads run it (on the CPU too)."""
    @T.prim_func
    def kernel(a: T.Tensor((128,), T.float32), out: T.Tensor((128,), T.float32)):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            s = T.alloc_shared((128,), T.float32)
            T.copy(a, s)
            for i in T.Parallel(128):
                out[i] = 0.0
            if tx >= 64:
                total = T.alloc_fragment((1,), T.float32)
                row = T.alloc_fragment((1, 128), T.float32)
                for i in T.Parallel(128):
                    row[0, i] = s[i]
                T.reduce_sum(row, total, dim=1)
                total_s = T.alloc_shared((1,), T.float32)
                T.copy(total, total_s)
                out[tx] = out[tx] + s[tx] + total_s[0]  # each of threads 64..127 its own
    return kernel


@pytest.mark.parametrize("target", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_thread_code_in_a_role_runs_on_the_roles_threads(target):
    a = torch.randn(128, device=target)
    expected = torch.zeros(128, device=target)
    expected[64:] = a[64:] + a.sum()
    torch.testing.assert_close(role_with_thread_code.compile(target=target)(a), expected)


@tilelab.jit
def exchange_in_an_if(A):
    """Threads 0..63 swap through shared memory inside one `if`: the condition goes down to
    each statement, so a barrier stands between them (on the GPU) and the CPU runs them in
    step."""
    A: T.Tensor((128,), T.float32)
    B = T.empty((128,), T.float32)
    with T.Kernel(1, threads=128):
        tx = T.get_thread_binding()
        s = T.alloc_shared((128,), T.float32)
        B[tx] = 0.0
        if tx < 64:
            s[tx] = A[tx]
            B[tx] = s[(tx + 1) % 64]
    return B


def expected_exchange(a):
    out = torch.zeros_like(a)
    out[:64] = a[(torch.arange(64, device=a.device) + 1) % 64]
    return out


@tilelab.jit
def each_thread_adds_a_row(A):
    """T.atomic_add of a region in thread code: each thread adds its whole row."""
    A: T.Tensor((32, 4), T.float32)
    B = T.empty((4,), T.float32)
    with T.Kernel(1, threads=32):
        tx = T.get_thread_binding()
        acc = T.alloc_shared((4,), T.float32)
        T.clear(acc)
        rows = T.alloc_shared((32, 4), T.float32)
        T.copy(A, rows)
        T.atomic_add(acc[0:4], rows[tx, 0:4])
        T.copy(acc, B)
    return B


@tilelab.jit
def by_warp_number(A):
    """`warp = tx // 32; if warp == 1:` - a role over warp 1's threads."""
    A: T.Tensor((64,), T.float32)
    B = T.empty((64,), T.float32)
    with T.Kernel(1, threads=128):
        tx = T.get_thread_binding()
        warp = tx // 32
        if warp == 1:
            for i in T.Parallel(64):
                B[i] = A[i] * 2.0
    return B


@pytest.mark.parametrize("target", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_conditions_atomics_and_warp_numbers(target):
    a = torch.randn(128, device=target)
    torch.testing.assert_close(exchange_in_an_if(a), expected_exchange(a))
    rows = torch.randn(32, 4, device=target)
    torch.testing.assert_close(each_thread_adds_a_row(rows), rows.sum(0), rtol=1e-5, atol=1e-5)
    a = torch.randn(64, device=target)
    torch.testing.assert_close(by_warp_number(a), a * 2)


@needs_nvcc
def test_an_if_on_the_thread_index_compiles_as_guarded_statements():
    source = exchange_in_an_if.compile(target="cuda:sm_90a").get_kernel_source()
    body = source[source.rindex("__global__"):]
    assert body.count("< 64)") >= 2 and "__syncthreads()" in body


def test_roles_do_not_nest():
    @tilelab.jit
    def nested(A):
        A: T.Tensor((64,), T.float32)
        B = T.empty((3, 64), T.float32)
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            if tx < 64:
                if tx < 32:
                    for i in T.Parallel(64):
                        B[0, i] = A[i]
                else:
                    for i in T.Parallel(64):
                        B[1, i] = A[i]
            else:
                for i in T.Parallel(64):
                    B[2, i] = A[i]
        return B

    with pytest.raises(TileLabTypeError, match="roles do not nest") as info:
        nested(torch.randn(64))
    assert "if tx < 32" in info.value.location.excerpt()


@tilelab.jit(out_idx=[-1])
def guarded_by_and(n):
    """`if tx < n and x[b, tx] > 0:` reads x only where tx < n, as in Python and CUDA's
    `&&` (frontend `and`/`or` whose right side reads memory are T.if_then_else); `or` alike."""
    @T.prim_func
    def kernel(x: T.Tensor((4, n), T.float32), out: T.Tensor((4, 128), T.float32)):
        with T.Kernel(4, threads=128) as b:
            tx = T.get_thread_binding()
            out[b, tx] = 0.0
            if tx < n and x[b, tx] > 0:
                out[b, tx] = x[b, tx]
            if tx >= n or x[b, tx] < -1:
                out[b, tx] = out[b, tx] - 1.0
    return kernel


def _check_guarded_by_and(target, device, n=100):
    x = torch.randn(4, n, device=device)
    expected = torch.full((4, 128), -1.0)
    expected[:, :n] = torch.where(x.cpu() > 0, x.cpu(), torch.zeros(())) - (x.cpu() < -1).float()
    torch.testing.assert_close(guarded_by_and.compile(n, target=target)(x).cpu(), expected)


def test_cpu_and_or_read_their_right_side_only_where_needed():
    _check_guarded_by_and("cpu", "cpu")


@pytest.mark.gpu
def test_gpu_and_or_read_their_right_side_only_where_needed():
    _check_guarded_by_and("cuda", "cuda")


@tilelab.jit
def prefetched(A):
    """A fragment no tile op or T.Parallel loop touches, read and written by code for one
    thread (TileLang's seesaw producer keeps its prefetched indices so): each thread has
    the whole fragment, as T.alloc_local would give it."""
    A: T.Tensor((256,), T.float32)
    B = T.empty((64,), T.float32)
    with T.Kernel(1, threads=64):
        tx = T.get_thread_binding()
        ahead = T.alloc_fragment((4,), T.float32)
        for j in T.serial(4):
            ahead[j] = A[tx * 4 + j]
        B[tx] = ahead[0] * ahead[3] + ahead[1] - ahead[2]
    return B


def test_a_fragment_only_one_thread_code_touches_is_each_threads_own():
    a = torch.randn(256)
    rows = a.view(64, 4)
    torch.testing.assert_close(prefetched(a), rows[:, 0] * rows[:, 3] + rows[:, 1] - rows[:, 2])
    if find_nvcc() is not None:
        source = prefetched.compile(torch.randn(256), target="cuda").get_kernel_source()
        assert "ahead_ptr[4]" in source or "ahead[4]" in source
