"""TVM's thread all-reduce as TileLang's hand-written GEMV spells it:

    with T.attr(T.comm_reducer(lambda x, y: x + y, [T.cast(0, T.float32)]),
                "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, out[0], tk,
                                          dtype="handle"))

Each thread's `out[0]` becomes the fold of `acc[0]` over the threads that differ from it
only in the listed thread indices. tilelab writes it as code for one thread (each value
to a shared exchange, a barrier, each thread folds its group's), so the CPU and the GPU
run it the way they run any such code.
"""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@tilelab.jit(out_idx=[-1])
def gemv(N, K, block_n=8, reduce_threads=16, reducer="sum"):
    """y[n] = sum_k B[n, k] * x[k] (or the max of the products): thread (tn, tk) of a block
    folds every reduce_threads-th product of row tn, then the all-reduce over tk combines
    the reduce_threads partial results; N and K need not be multiples of the block."""
    combine = (lambda a, b: a + b) if reducer == "sum" else (lambda a, b: T.max(a, b))
    identity = 0.0 if reducer == "sum" else -3.0e38

    @T.prim_func
    def kernel(x: T.Tensor((K,), T.float16), B: T.Tensor((N, K), T.float16),
               y: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block_n), threads=(block_n, reduce_threads)) as bn:
            tn = T.get_thread_binding(0)
            tk = T.get_thread_binding(1)
            acc = T.alloc_local((1,), T.float32)
            total = T.alloc_local((1,), T.float32)
            acc[0] = identity
            for k in T.serial(T.ceildiv(K, reduce_threads)):
                col = k * reduce_threads + tk
                if col < K and bn * block_n + tn < N:
                    acc[0] = combine(acc[0], x[col].astype(T.float32) *
                                     B[bn * block_n + tn, col].astype(T.float32))
            with T.attr(T.comm_reducer(combine, [T.cast(identity, T.float32)]),
                        "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                T.evaluate(T.tvm_thread_allreduce(T.uint32(1), acc[0], True, total[0], tk,
                                                  dtype="handle"))
            if tk == 0 and bn * block_n + tn < N:
                y[bn * block_n + tn] = total[0]
    return kernel


@tilelab.jit(out_idx=[-1])
def block_sums_twice(n, threads=(4, 8)):
    """out[b, 0] = the sum of a block's values over both thread dimensions; out[b, 1] the
    same of their squares, by a second all-reduce reusing the exchange after the first."""
    size = threads[0] * threads[1]

    @T.prim_func
    def kernel(a: T.Tensor((n,), T.float32), out: T.Tensor((T.ceildiv(n, size), 2), T.float32)):
        with T.Kernel(T.ceildiv(n, size), threads=threads) as bx:
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            v = T.alloc_local((1,), T.float32)
            r = T.alloc_local((1,), T.float32)
            i = bx * size + ty * threads[0] + tx
            v[0] = T.if_then_else(i < n, a[i], 0.0)
            for step in T.serial(2):
                with T.attr(T.comm_reducer(lambda p, q: p + q, [T.cast(0, T.float32)]),
                            "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
                    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), v[0], True, r[0], tx, ty,
                                                      dtype="handle"))
                if tx == 0 and ty == 0:
                    out[bx, step] = r[0]
                v[0] = v[0] * v[0]
    return kernel


def check_gemv(kernel, device, n=37, k=203, reducer="sum"):
    x = torch.randn(k, device=device).half()
    b = torch.randn(n, k, device=device).half()
    products = b.float() * x.float()
    expected = products.sum(1) if reducer == "sum" else products.max(1).values
    torch.testing.assert_close(kernel(x, b), expected, rtol=1e-4, atol=1e-4)


def check_block_sums(kernel, device, n=70, size=32):
    a = torch.randn(n, device=device)
    padded = torch.nn.functional.pad(a, (0, -n % size)).view(-1, size)
    expected = torch.stack([padded.sum(1), (padded * padded).sum(1)], dim=1)
    torch.testing.assert_close(kernel(a), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reducer", ["sum", "max"])
def test_cpu_allreduce_gemv_matches_torch(reducer):
    check_gemv(gemv.compile(37, 203, reducer=reducer, target="cpu"), "cpu", reducer=reducer)


def test_cpu_allreduce_over_two_thread_dims_twice():
    check_block_sums(block_sums_twice.compile(70, target="cpu"), "cpu")


@needs_nvcc
def test_cuda_allreduce_exchanges_through_shared_memory():
    source = gemv.compile(37, 203, target="cuda:sm_90a").get_kernel_source()
    body = source[source.rindex("__global__"):]
    assert "allreduce_exchange" in body and "__syncthreads()" in body
    twice = block_sums_twice.compile(70, target="cuda:sm_90a").get_kernel_source()
    # the second all-reduce writes the exchange only after every thread has read the first
    assert twice.count("__syncthreads()") >= 2


@pytest.mark.gpu
def test_gpu_allreduce_matches_torch():
    for reducer in ("sum", "max"):
        check_gemv(gemv.compile(37, 203, reducer=reducer, target="cuda"), "cuda",
                   reducer=reducer)
    check_block_sums(block_sums_twice.compile(70, target="cuda"), "cuda")


def _kernel_with(body):
    @tilelab.jit(out_idx=[-1])
    def bad():
        @T.prim_func
        def kernel(a: T.Tensor((8,), T.float32), out: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=8):
                tx = T.get_thread_binding(0)
                r = T.alloc_local((1,), T.float32)
                body(a, r, tx)
                out[tx] = r[0]
        return kernel
    return bad


def _outside_attr(a, r, tx):
    T.evaluate(T.tvm_thread_allreduce(T.uint32(1), a[tx], True, r[0], tx, dtype="handle"))


def _other_attr(a, r, tx):
    with T.attr(T.comm_reducer(lambda p, q: p + q, [T.cast(0, T.float32)]), "pragma_unroll",
                0):
        r[0] = a[tx]


def _evaluate_a_value(a, r, tx):
    T.evaluate(a[tx] + 1)


def _not_a_thread(a, r, tx):
    with T.attr(T.comm_reducer(lambda p, q: p + q, [T.cast(0, T.float32)]), "reduce_scope",
                T.reinterpret(T.uint64(0), dtype="handle")):
        T.evaluate(T.tvm_thread_allreduce(T.uint32(1), a[tx], True, r[0], 3, dtype="handle"))


@T.macro
def _under_a_thread_own_if(a, r, tx):
    if a[tx] > 0:  # the threads that skip it would never store their values
        with T.attr(T.comm_reducer(lambda p, q: p + q, [T.cast(0, T.float32)]),
                    "reduce_scope", T.reinterpret(T.uint64(0), dtype="handle")):
            T.evaluate(T.tvm_thread_allreduce(T.uint32(1), a[tx], True, r[0], tx,
                                              dtype="handle"))


@pytest.mark.parametrize("body, match", [
    (_outside_attr, "needs its reducer"),
    (_other_attr, "T.attr.*'pragma_unroll'.*does not have"),
    (_evaluate_a_value, "T.evaluate takes a T.tvm_thread_allreduce"),
    (_not_a_thread, "reduces over thread indices"),
    (_under_a_thread_own_if, "thread all-reduce.* under an `if` or loop on a thread's own"),
])
def test_misuse_is_refused_at_the_line(body, match):
    with pytest.raises(TileLabError, match=match) as info:
        _kernel_with(body).compile(target="cpu")
    assert "test_thread_allreduce.py" in str(info.value)
