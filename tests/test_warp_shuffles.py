"""Warp shuffles in code written for one thread: TVM's `T.tvm_warp_shuffle(mask, value,
src_lane, width, warp_size)` and TileLang's `T.shfl_sync`, `T.shfl_xor`, `T.shfl_down`,
`T.shfl_up`. Each thread stores its value into a shared exchange tile at its flat thread
index; the shuffle's value is the load of its source lane's entry, a barrier between
(language/tilelang_names.py). Lanes follow CUDA's rules: `width` cuts the warp of 32 into
segments, a source outside the caller's segment gives the caller its own value (a
shfl_xor's in an earlier segment excepted). Each kernel runs on the CPU against torch,
compiles for sm_90a and sm_80, and runs on a GPU where there is one."""

import math

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.cuda_source import loop_text
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
ARCHS = ["sm_90a", "sm_80"]


# ---------------------------------------------------------------- kernels


@tilelab.jit(out_idx=[-1])
def warp_sums(n, threads=96, dtype=T.float32):
    """out[i] = the sum of the values of i's warp, by a butterfly of shfl_xor: after the
    rounds with 16, 8, 4, 2, 1 every lane holds its warp's total. n need not fill the last
    block (its missing threads add 0); the rounds are a loop, so each round's store into
    the exchange must wait for the previous round's reads."""
    @T.prim_func
    def kernel(a: T.Tensor((n,), dtype), out: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), dtype)
            i = bx * threads + tx
            v[0] = T.if_then_else(i < n, a[i], T.cast(0, dtype))
            for k in T.serial(5):
                v[0] = v[0] + T.shfl_xor(v[0], 16 >> k)
            if i < n:
                out[i] = v[0]
    return kernel


@tilelab.jit(out_idx=[-1])
def warp_totals_down(n, threads=(16, 4)):
    """out[w] = the sum of warp w's values, by shfl_down: lane 0 ends with the total. The
    block is 16 x 4 threads, so a warp is two rows of x (lanes count the flat index)."""
    size = threads[0] * threads[1]

    @T.prim_func
    def kernel(a: T.Tensor((n,), T.float32), out: T.Tensor((T.ceildiv(n, 32),), T.float32)):
        with T.Kernel(T.ceildiv(n, size), threads=threads) as bx:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            t = ty * threads[0] + tx
            v = T.alloc_local((1,), T.float32)
            v[0] = T.if_then_else(bx * size + t < n, a[bx * size + t], 0.0)
            for k in T.unroll(5):
                v[0] = v[0] + T.shfl_down(v[0], 16 >> k)
            if t % 32 == 0 and bx * size + t < n:
                out[(bx * size + t) // 32] = v[0]
    return kernel


@tilelab.jit(out_idx=[-1])
def prefix_sums_up(n, threads=64):
    """out[i] = the inclusive prefix sum of i's segment of 16 lanes (int32), by shfl_up:
    a lane takes the value `d` below only if that lane is in its segment."""
    @T.prim_func
    def kernel(a: T.Tensor((n,), T.int32), out: T.Tensor((n,), T.int32)):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), T.int32)
            i = bx * threads + tx
            v[0] = T.if_then_else(i < n, a[i], 0)
            for k in T.serial(4):
                d = 1 << k
                up = T.shfl_up(v[0], d, width=16)
                v[0] = v[0] + T.if_then_else(tx % 16 >= d, up, 0)
            if i < n:
                out[i] = v[0]
    return kernel


@tilelab.jit(out_idx=[-1])
def broadcasts(n, width, src_lane, threads=(16, 6)):
    """out[i] = the value lane `src_lane` (modulo width) of i's segment of `width` lanes
    holds: TVM's tvm_warp_shuffle, in a block of 16 x 6 threads (three warps)."""
    size = threads[0] * threads[1]

    @T.prim_func
    def kernel(a: T.Tensor((n,), T.float32), out: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, size), threads=threads) as bx:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            i = bx * size + ty * threads[0] + tx
            v = T.alloc_local((1,), T.float32)
            v[0] = T.if_then_else(i < n, a[i], 0.0)
            b = T.alloc_local((1,), T.float32)
            b[0] = T.tvm_warp_shuffle(0xFFFFFFFF, v[0], src_lane, width, 32)
            if i < n:
                out[i] = b[0]
    return kernel


@tilelab.jit(out_idx=[-1])
def each_shuffle(width, src_lane, delta, lane_mask, threads=96):
    """out[k, t] = what thread t gets from shuffle k of the values a[t], all with the same
    width, in each spelling: shfl_sync (TileLang's, and its older one with the mask first)
    and TVM's tvm_warp_shuffle; shfl_up, shfl_down, shfl_xor and TVM's names of them."""
    @T.prim_func
    def kernel(a: T.Tensor((threads,), T.float32), out: T.Tensor((9, threads), T.float32)):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            v = T.alloc_local((1,), T.float32)
            v[0] = a[tx]
            out[0, tx] = T.shfl_sync(v[0], src_lane, width)
            out[1, tx] = T.shfl_sync(0xFFFFFFFF, v[0], src_lane, width)
            out[2, tx] = T.tvm_warp_shuffle(0xFFFFFFFF, v[0], src_lane, width, 32)
            out[3, tx] = T.shfl_up(v[0], delta, width)
            out[4, tx] = T.tvm_warp_shuffle_up(0xFFFFFFFF, v[0], delta, width, 32)
            out[5, tx] = T.shfl_down(v[0], delta, width=width)
            out[6, tx] = T.tvm_warp_shuffle_down(0xFFFFFFFF, v[0], delta, width, 32)
            out[7, tx] = T.shfl_xor(v[0], lane_mask, width, 0xFFFFFFFF)
            out[8, tx] = T.tvm_warp_shuffle_xor(0xFFFFFFFF, v[0], lane_mask, width, 32)
    return kernel


@T.macro
def warp_butterflies(local, other, elems, warp_size, rounds):
    """TileLang's Hadamard example's `warp_shfl`: in round i each thread meets the thread
    whose index differs in bit i; the lower one keeps the sum, the upper the difference."""
    tx = T.get_thread_binding(0)
    for i in T.serial(rounds):
        partner = tx ^ (1 << i)
        sign = (tx >> i) & 1
        for j in T.Pipelined(elems, num_stages=1):
            other[j] = T.tvm_warp_shuffle(0xFFFFFFFF, local[j], partner % warp_size,
                                          warp_size, warp_size)
            local[j] = T.if_then_else(sign == 0, local[j] + other[j], other[j] - local[j])


@tilelab.jit(out_idx=[-1])
def hadamard(batch, n):
    """y = x @ H for the n x n Hadamard matrix H (Sylvester's order), one row of x a
    block, as TileLang's example_hadamard does it: each thread transforms its run of
    `elems` values in registers, warp shuffles combine the lanes of a warp, and where a
    row needs several warps a transpose through shared memory lets the shuffles combine
    the warps too (then transposes back)."""
    threads = [0, 1, 1, 1, 2, 4, 8, 16, 32, 32, 128, 256, 256, 256, 256, 256][int(math.log2(n))]
    elems = n // threads
    warps = max(threads // 32, 1)
    warp_size = threads // warps

    @T.prim_func
    def kernel(x: T.Tensor((batch, n), T.float32), y: T.Tensor((batch, n), T.float32)):
        with T.Kernel(batch, threads=threads) as bx:
            local = T.alloc_local((elems,), T.float32)
            other = T.alloc_local((elems,), T.float32)
            swap = T.alloc_shared((threads, elems), T.float32)
            tx = T.get_thread_binding()
            for i in T.vectorized(elems):
                local[i] = x[bx, tx * elems + i]
            for i in T.serial(int(math.log2(elems))):  # within the thread
                chunk = 1 << (i + 1)
                for j in T.serial(elems // chunk):
                    for k in T.serial(chunk // 2):
                        lo = j * chunk + k
                        local[lo] = local[lo] + local[lo + chunk // 2]
                        local[lo + chunk // 2] = local[lo] - 2 * local[lo + chunk // 2]
            warp_butterflies(local, other, elems, warp_size, int(math.log2(warp_size)))
            if warps > 1:  # across warps: thread (w, l) trades places with thread (l, w)
                here = tx
                there = (tx % warps) * warp_size + tx // warps
                for j in T.vectorized(elems):
                    swap[here, j] = local[j]
                for j in T.vectorized(elems):
                    local[j] = swap[there, j]
                warp_butterflies(local, other, elems, warp_size, int(math.log2(warps)))
                for j in T.vectorized(elems):
                    swap[there, j] = local[j]
                for j in T.vectorized(elems):
                    local[j] = swap[here, j]
            for i in T.vectorized(elems):
                y[bx, tx * elems + i] = local[i]
    return kernel


# ---------------------------------------------------------------- what torch says


def expected_warp_sums(a, threads=96):
    padded = torch.nn.functional.pad(a, (0, -len(a) % threads)).view(-1, 32)
    return padded.sum(1, keepdim=True).expand(-1, 32).flatten()[:len(a)]


def expected_prefix_sums(a, threads=64):
    padded = torch.nn.functional.pad(a, (0, -len(a) % threads)).view(-1, 16)
    return padded.cumsum(1, dtype=torch.int32).flatten()[:len(a)]


def expected_broadcasts(a, width, src_lane, threads=96):
    padded = torch.nn.functional.pad(a, (0, -len(a) % threads)).view(-1, width)
    return padded[:, src_lane % width:src_lane % width + 1].expand(-1, width).flatten()[:len(a)]


def cuda_shuffles(a, width, src_lane, delta, lane_mask):
    """What each_shuffle's rows are on CUDA - __shfl_sync (three rows), __shfl_up_sync,
    __shfl_down_sync, __shfl_xor_sync (two each), full mask - lane by lane as the CUDA
    programming guide and PTX's shfl.sync say: lanes and offsets count by their low five
    bits, a source outside the caller's segment of `width` lanes is the caller itself
    (for xor, only one in a later segment)."""
    out = torch.empty(9, len(a))
    for t in range(len(a)):
        base, lane = t - t % 32, t % 32
        first = lane - lane % width
        last = first + width - 1
        read = first + src_lane % width
        up = lane - delta % 32
        down = lane + delta % 32
        xor = lane ^ (lane_mask % 32)
        sources = [read] * 3 + [up if up >= first else lane] * 2 + \
            [down if down <= last else lane] * 2 + [xor if xor <= last else lane] * 2
        for k, j in enumerate(sources):
            out[k, t] = a[base + j]
    return out


def hadamard_matrix(n):
    """Sylvester's construction: H(2m) = [[H, H], [H, -H]]."""
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.kron(torch.tensor([[1.0, 1.0], [1.0, -1.0]]), h)
    return h


# ---------------------------------------------------------------- the checks, on a device

SHUFFLE_CASES = [  # width, src_lane, delta, lane_mask
    (32, 5, 1, 1), (16, 19, 3, 6), (8, -1, 33, 12), (4, 2, 2, 21), (1, 0, 1, 1)]
HADAMARD_SIZES = [64, 256, 2048]  # threads 8 (part of a warp), 32, 256 (eight warps)


def check_warp_sums(device, n=250):
    a = torch.randn(n, device=device)
    got = warp_sums.compile(n, target=_target(device))(a)
    torch.testing.assert_close(got, expected_warp_sums(a), rtol=1e-5, atol=1e-5)
    h = torch.randn(n, device=device).half()
    got = warp_sums.compile(n, threads=64, dtype=T.float16, target=_target(device))(h)
    torch.testing.assert_close(got, expected_warp_sums(h.float(), 64).half(), rtol=2e-2,
                               atol=2e-2)


def check_warp_totals(device, n=200):
    a = torch.randn(n, device=device)
    padded = torch.nn.functional.pad(a, (0, -n % 32)).view(-1, 32)
    got = warp_totals_down.compile(n, target=_target(device))(a)
    torch.testing.assert_close(got, padded.sum(1), rtol=1e-5, atol=1e-5)


def check_prefix_sums(device, n=150):
    a = torch.randint(-100, 100, (n,), dtype=torch.int32, device=device)
    got = prefix_sums_up.compile(n, target=_target(device))(a)
    assert torch.equal(got, expected_prefix_sums(a))


def check_broadcasts(device, width, src_lane, n=170):
    a = torch.randn(n, device=device)
    got = broadcasts.compile(n, width, src_lane, target=_target(device))(a)
    assert torch.equal(got, expected_broadcasts(a, width, src_lane))


def check_each_shuffle(device, case):
    a = torch.randn(96, device=device)
    got = each_shuffle.compile(*case, target=_target(device))(a)
    assert torch.equal(got.cpu(), cuda_shuffles(a.cpu(), *case))


def check_hadamard(device, n, batch=5):
    x = torch.randn(batch, n, device=device)
    got = hadamard.compile(batch, n, target=_target(device))(x)
    expected = x.double() @ hadamard_matrix(n).double().to(device)
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-3)


def _target(device):
    return "cpu" if device == "cpu" else "cuda"


# ---------------------------------------------------------------- on the CPU


def test_cpu_butterfly_gives_every_lane_its_warps_sum():
    check_warp_sums("cpu")


def test_cpu_shfl_down_leaves_the_warps_sum_in_lane_0():
    check_warp_totals("cpu")


def test_cpu_shfl_up_prefix_sums_within_segments_of_16():
    check_prefix_sums("cpu")


@pytest.mark.parametrize("width, src_lane", [(16, 3), (16, 21), (8, 5), (32, 31)])
def test_cpu_tvm_warp_shuffle_broadcasts_within_segments(width, src_lane):
    check_broadcasts("cpu", width, src_lane)


@pytest.mark.parametrize("case", SHUFFLE_CASES)
def test_cpu_shuffles_read_the_lanes_cuda_reads(case):
    check_each_shuffle("cpu", case)


@pytest.mark.parametrize("n", HADAMARD_SIZES)
def test_cpu_hadamard_transform_matches_torch(n):
    check_hadamard("cpu", n)


# ---------------------------------------------------------------- CUDA, compiled only


def _source(kernel, *args, arch, **kwargs):
    source = kernel.compile(*args, target=f"cuda:{arch}", **kwargs).get_kernel_source()
    return source[source.rindex("__global__"):]


def fenced_both_ways(body: str) -> bool:
    """A barrier between a round's store into the exchange and its reads, and one after the
    reads: the next round's store overwrites entries the partners are reading."""
    store = body.index("shfl_exchange_ptr[((int)threadIdx.x)] = ")
    read = body.index("+ shfl_exchange_ptr[")
    return store < body.index("__syncthreads()", store) < read and \
        "__syncthreads()" in body[read:]


# the program places the barriers of its own thread code (tl.disable_thread_storage_sync);
# a shuffle's exchange is tilelab's, so its barriers stay
warp_sums_own_barriers = tilelab.jit(
    out_idx=[-1], pass_configs={"tl.disable_thread_storage_sync": True})(warp_sums.fn)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("own_barriers", [False, True])
def test_cuda_shuffle_in_a_loop_is_fenced_both_ways(arch, own_barriers):
    kernel = warp_sums_own_barriers if own_barriers else warp_sums
    body = loop_text(_source(kernel, 250, arch=arch), "k")
    assert fenced_both_ways(body)
    assert "__shfl" not in body  # no register shuffle: the exchange is shared memory


def test_cpu_shuffle_with_the_programs_own_barriers():
    a = torch.randn(250)
    got = warp_sums_own_barriers.compile(250, target="cpu")(a)
    torch.testing.assert_close(got, expected_warp_sums(a), rtol=1e-5, atol=1e-5)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_shuffle_kernels_compile(arch):
    for kernel, args, kwargs in [
            (warp_sums, (250,), {"threads": 64, "dtype": T.float16}),
            (warp_sums, (250,), {"threads": 32}),  # one warp: FlattenBuffer's `tx - tx % 32`
            (warp_totals_down, (200,), {}), (prefix_sums_up, (150,), {}),
            (broadcasts, (170, 16, 3), {}), (broadcasts, (170, 8, 5), {}),
            (each_shuffle, SHUFFLE_CASES[2], {}), (hadamard, (5, 256), {}),
            (hadamard, (5, 2048), {})]:
        body = _source(kernel, *args, arch=arch, **kwargs)  # nvcc compiled it
        assert "__syncthreads()" in body and "__shfl" not in body


# ---------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_gpu_shuffles_match_torch():
    check_warp_sums("cuda")
    check_warp_totals("cuda")
    check_prefix_sums("cuda")
    for width, src_lane in [(16, 3), (16, 21), (8, 5)]:
        check_broadcasts("cuda", width, src_lane)
    for case in SHUFFLE_CASES:
        check_each_shuffle("cuda", case)
    for n in HADAMARD_SIZES:
        check_hadamard("cuda", n)
    a = torch.randn(250, device="cuda")
    torch.testing.assert_close(warp_sums_own_barriers.compile(250, target="cuda")(a),
                               expected_warp_sums(a), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- refused at the line


def _kernel_with(body, threads=128):
    @tilelab.jit(out_idx=[-1])
    def bad():
        @T.prim_func
        def kernel(a: T.Tensor((threads,), T.float32), out: T.Tensor((threads,), T.float32)):
            with T.Kernel(1, threads=threads):
                tx = T.get_thread_binding()
                v = T.alloc_local((1,), T.float32)
                v[0] = a[tx]
                body(a, out, v, tx)
                out[tx] = v[0]
        return kernel
    return bad


@T.macro
def _in_parallel(a, out, v, tx):
    for i in T.Parallel(128):
        out[i] = T.shfl_xor(a[i], 1)


@T.macro
def _width_3(a, out, v, tx):
    v[0] = T.shfl_xor(v[0], 1, width=3)


@T.macro
def _width_64(a, out, v, tx):
    v[0] = T.shfl_down(v[0], 1, 64)


@T.macro
def _width_at_run_time(a, out, v, tx):
    v[0] = T.shfl_sync(v[0], 0, tx % 4 * 8)


@T.macro
def _warp_of_64(a, out, v, tx):
    v[0] = T.tvm_warp_shuffle(0xFFFFFFFF, v[0], 0, 32, 64)


@T.macro
def _a_python_number(a, out, v, tx):
    v[0] = T.shfl_up(1.5, 1)


@T.macro
def _under_a_thread_own_if(a, out, v, tx):
    if v[0] > 0:
        v[0] = v[0] + T.shfl_xor(v[0], 1)


@T.macro
def _in_a_ws_role(a, out, v, tx):
    with T.ws(0):
        out[0] = T.shfl_xor(a[0], 1)


@T.macro
def _in_a_while_condition(a, out, v, tx):
    while T.shfl_down(v[0], 1) > 0:
        v[0] = v[0] - 1


@pytest.mark.parametrize("body, match", [
    (_in_parallel, "T.shfl_xor inside a T.Parallel loop"),
    (_width_3, "width=3.*power of two"),
    (_width_64, "width=64.*power of two"),
    (_width_at_run_time, "width=.*constant power of two"),
    (_warp_of_64, "warp_size=64"),
    (_a_python_number, "T.shfl_up shuffles a kernel value"),
    (_under_a_thread_own_if, "warp shuffle .* under an `if` or loop on a thread's own"),
    (_in_a_ws_role, "T.shfl_xor inside a T.ws role"),
    (_in_a_while_condition, "while condition stores as well as reads"),
])
def test_misuse_is_refused_at_the_line(body, match):
    with pytest.raises(TileLabError, match=match) as info:
        _kernel_with(body).compile(target="cpu")
    assert "test_warp_shuffles.py" in str(info.value)
    assert "shfl" in info.value.location.excerpt() or "tvm_warp" in \
        info.value.location.excerpt()
