"""Fragments that no register layout serves: the CPU ran these programs, CUDA refused them
with a layout error. The CUDA pipeline now keeps such a fragment in shared memory and warns
at its line (passes/spill_fragments.py); the programs compile for sm_80 and sm_90a and agree
with torch on the GPU. Three kinds, each from a TileLang example: a write at a computed
index; a tile read with one computed and one loop index (mhc_post); a row vector whose rows
sit where one GEMM left them, used beside another GEMM's accumulator (sparse attention)."""

import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabWarning

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


def reversed_copy(n=64):
    """Y = X reversed, written through a fragment at a computed index."""
    @T.prim_func
    def kernel(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((n,), T.float32)
            g = T.alloc_fragment((n,), T.float32)
            T.copy(X, f)
            for i in T.Parallel(n):
                g[n - 1 - i] = f[i] * 3.0
            T.copy(g, Y)

    return kernel


def mix_rows(rows=4, width=256, blocks=3):
    """Per block: Y[k, j] = c[k] * D[j] + sum_r A[r, k] * B[r, j] (TileLang's mhc_post):
    B's fragment is read at [r, j], r from a serial loop inside the T.Parallel body."""
    @T.prim_func
    def kernel(A: T.Tensor((blocks, rows, rows), T.float32),
               B: T.Tensor((blocks, rows, width), T.float32),
               C: T.Tensor((blocks, rows), T.float32), D: T.Tensor((blocks, width), T.float32),
               Y: T.Tensor((blocks, rows, width), T.float32)):
        with T.Kernel(blocks, threads=128) as bx:
            a = T.alloc_fragment((rows, rows), T.float32)
            b = T.alloc_fragment((rows, width), T.float32)
            c = T.alloc_fragment((rows,), T.float32)
            d = T.alloc_fragment((width,), T.float32)
            y = T.alloc_fragment((rows, width), T.float32)
            T.copy(A[bx, 0, 0], a)
            T.copy(B[bx, 0, 0], b)
            T.copy(C[bx, 0], c)
            T.copy(D[bx, 0], d)
            for k, j in T.Parallel(rows, width):
                y[k, j] = c[k] * d[j]
                for r in T.serial(rows):
                    y[k, j] += a[r, k] * b[r, j]
            T.copy(y, Y[bx, 0, 0])

    return kernel


def scaled_by_row_max(m=64, n=64, k=64, threads=256):
    """Out = (S @ K) * rowmax(S) / 2 with S = Q @ K^T (K is B of both GEMMs, as in sparse
    attention, where K and V are one tensor). On sm_90a the first GEMM is a warpgroup MMA
    and the second, whose B tile fits no wgmma swizzle atom once the first chose K's, an
    mma.sync: the row maxima sit where the first left them, which is not where the second
    keeps its rows. On sm_80 both are mma.sync with one warp grid, and nothing moves."""
    @T.prim_func
    def kernel(Q: T.Tensor((m, k), T.bfloat16), K: T.Tensor((n, k), T.bfloat16),
               Out: T.Tensor((m, k), T.float32)):
        with T.Kernel(1, threads=threads):
            q = T.alloc_shared((m, k), T.bfloat16)
            kv = T.alloc_shared((n, k), T.bfloat16)
            p = T.alloc_shared((m, n), T.bfloat16)
            s = T.alloc_fragment((m, n), T.float32)
            o = T.alloc_fragment((m, k), T.float32)
            top = T.alloc_fragment((m,), T.float32)
            scale = T.alloc_fragment((m,), T.float32)
            T.copy(Q, q)
            T.copy(K, kv)
            T.gemm(q, kv, s, transpose_B=True, clear_accum=True,
                   policy=T.GemmWarpPolicy.FullRow)
            T.reduce_max(s, top, dim=1)
            for i in T.Parallel(m):
                scale[i] = top[i] * 0.5
            T.copy(s, p)
            T.gemm(p, kv, o, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(m, k):
                o[i, j] *= scale[i]
            T.copy(o, Out)

    return kernel


def mix_rows_inputs(device, rows=4, width=256, blocks=3):
    return (torch.randn(blocks, rows, rows, device=device),
            torch.randn(blocks, rows, width, device=device),
            torch.randn(blocks, rows, device=device), torch.randn(blocks, width, device=device))


def mix_rows_expected(a, b, c, d):
    return c[:, :, None] * d[:, None, :] + a.mT @ b


def attention_inputs(device):
    return (torch.randn(64, 64, device=device).bfloat16(),
            torch.randn(64, 64, device=device).bfloat16())


def assert_near(actual, expected):
    """Within 1% of the largest value (|O| reaches thousands; bf16 has 8 bits)."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-2 * expected.abs().max().item())


def attention_expected(q, k):
    s = q.float() @ k.float().T
    return (s.bfloat16().float() @ k.float()) * (s.amax(1, keepdim=True) * 0.5)


def spilled(program, arch, compile_it=None):
    """The fragments the CUDA compile moved to shared memory, from its warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if compile_it is None:
            tilelab.compile(program, target=f"cuda:{arch}")
        else:
            compile_it(f"cuda:{arch}")
    return sorted(str(w.message).split("'")[1] for w in caught
                  if issubclass(w.category, TileLabWarning) and "kept in shared memory" in
                  str(w.message))


def test_on_the_cpu():
    x = torch.randn(64)
    y = torch.empty(64)
    tilelab.compile(reversed_copy(), target="cpu")(x, y)
    torch.testing.assert_close(y, 3 * x.flip(0))
    args = mix_rows_inputs("cpu")
    y = torch.empty(3, 4, 256)
    tilelab.compile(mix_rows(), target="cpu")(*args, y)
    torch.testing.assert_close(y, mix_rows_expected(*args), rtol=1e-4, atol=1e-4)
    args = attention_inputs("cpu")
    o = torch.empty(64, 64)
    tilelab.compile(scaled_by_row_max(), target="cpu")(*args, o)
    assert_near(o, attention_expected(*args))


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_each_compiles_with_one_fragment_in_shared_memory(arch):
    assert spilled(reversed_copy(), arch) == ["g"]
    assert spilled(mix_rows(), arch) == ["b"]
    assert spilled(scaled_by_row_max(), arch) == ([] if arch == "sm_80" else ["scale"])


@needs_nvcc
def test_the_warning_names_the_line_and_the_reason():
    with pytest.warns(TileLabWarning, match=r"test_spill_fragments.py:\d+:\d+: fragment 'g' is "
                      r"kept in shared memory on the GPU .*written at \[63 - i\]"):
        tilelab.compile(reversed_copy(), target="cuda:sm_90a")


@needs_nvcc
def test_programs_that_fit_registers_are_unchanged():
    """A fragment kept in registers today is never moved: the course's FlashAttention."""
    from examples.flash_attention import flash_attention_kernel

    for causal in (False, True):
        def compile_it(target, causal=causal):
            flash_attention_kernel.compile(1, 2, 256, 128, block_m=128, threads=256,
                                           causal=causal, target=target)

        assert spilled(None, "sm_90a", compile_it) == []


@needs_nvcc
def test_a_fragment_every_thread_writes_stays_an_error():
    """A plain statement outside T.Parallel runs on every thread: in shared memory their
    read-modify-writes would race, so such a fragment is not moved."""
    @T.prim_func
    def kernel(X: T.Tensor((64,), T.float32), Y: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((64,), T.float32)
            g = T.alloc_fragment((1024,), T.float32)
            T.copy(X, f)
            for i in T.Parallel(1024):
                g[i] = 1.0
            g[0] = g[0] + 1.0
            for i in T.Parallel(64):
                f[i] = f[i] + g[1023 - i * 16]
            T.copy(f, Y)

    with pytest.raises(tilelab.TileLabError, match=r"'g' is read at \[1023 - i \* 16\]"):
        tilelab.compile(kernel, target="cuda:sm_90a")


@pytest.mark.gpu
def test_on_the_gpu():
    x = torch.randn(64, device="cuda")
    y = torch.empty(64, device="cuda")
    tilelab.compile(reversed_copy(), target="cuda")(x, y)
    torch.testing.assert_close(y, 3 * x.flip(0))
    for _ in range(3):  # fresh inputs each time
        args = mix_rows_inputs("cuda")
        y = torch.empty(3, 4, 256, device="cuda")
        tilelab.compile(mix_rows(), target="cuda")(*args, y)
        torch.testing.assert_close(y, mix_rows_expected(*args), rtol=1e-4, atol=1e-4)
        args = attention_inputs("cuda")
        o = torch.empty(64, 64, device="cuda")
        tilelab.compile(scaled_by_row_max(), target="cuda")(*args, o)
        assert_near(o, attention_expected(*args))


def sums_read_one_by_one(rows=64, cols=48):
    """Row sums read outside T.Parallel: one by one in a serial loop (a variable index) and
    one element at a constant index. Every thread runs those statements, and the sums sit on
    the threads that hold their rows: CUDA refused it at lowering; now `sums` goes to shared
    memory. Out[i] = the sum of row i plus the sum of row 3."""
    @T.prim_func
    def kernel(X: T.Tensor((rows, cols), T.float32), Y: T.Tensor((rows,), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((rows, cols), T.float32)
            sums = T.alloc_fragment((rows,), T.float32)
            T.copy(X, tile)
            T.reduce_sum(tile, sums, dim=1)
            third = sums[3]
            for i in T.serial(rows):
                Y[i] = sums[i] + third

    return kernel


def sums_expected(x):
    return x.sum(1) + x.sum(1)[3]


def test_sums_read_one_by_one_on_the_cpu():
    x = torch.randn(64, 48)
    y = torch.empty(64)
    tilelab.compile(sums_read_one_by_one(), target="cpu")(x, y)
    torch.testing.assert_close(y, sums_expected(x), rtol=1e-5, atol=1e-4)


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_sums_read_one_by_one_compile_with_the_sums_in_shared_memory(arch):
    assert spilled(sums_read_one_by_one(), arch) == ["sums"]


@pytest.mark.gpu
def test_sums_read_one_by_one_on_the_gpu():
    kernel = tilelab.compile(sums_read_one_by_one(), target="cuda")
    for _ in range(3):
        x = torch.randn(64, 48, device="cuda")
        y = torch.empty(64, device="cuda")
        kernel(x, y)
        torch.testing.assert_close(y, sums_expected(x), rtol=1e-5, atol=1e-4)

