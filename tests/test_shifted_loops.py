"""A T.Parallel loop that reads a fragment a fixed distance away, `acc[i + s * half, j]`, and
a kernel whose tiles fit a block only if the epilogue's take the main loop's bytes.

Both come from TileLang's sparse MLA backward (deepseek_v32): it stores a GEMM accumulator
in two halves through a shared tile half its size, reading row i + s * 16 in a loop over
(i, j) with `if i < 16` - and its tiles need 288 KB, 216 KB once the dQ staging tiles after
the key loop reuse the loop's. The CPU ran it; CUDA kept the accumulator in shared memory
(the read is another thread's register under the accumulator's layout) and then refused
the 360 KB. Now the loop runs where what it reads lives - iteration (i, j) on the thread
that holds acc[(i + s * half) % rows, j] (passes/infer_layouts.py, `_nest_layout`) - and
where a kernel's tiles exceed the block, a barrier after the loop lets the merge give the
epilogue's tiles the loop's bytes (passes/separate_shared_lifetimes.py, `PartLifetimes`)."""

import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@tilelab.jit(out_idx=[-1])
def halves(M=64, N=64, K=32, parts=2, shift=None, threads=128):
    """C = 2 (A @ B), stored in `parts` row bands through a shared tile one band tall (the
    band index a serial loop's variable); with `shift`, row i of C is row i + shift of the
    product (rows past the end stay 0), read at a constant offset."""
    band = M // parts

    @T.prim_func
    def kernel(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
               C: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, K), T.float16)
            B_s = T.alloc_shared((K, N), T.float16)
            acc = T.alloc_fragment((M, N), T.float32)
            staged = T.alloc_shared((band, N), T.float32)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            if shift is None:
                for s in range(parts):
                    for i, j in T.Parallel(M, N):
                        if i < band:
                            staged[i, j] = acc[i + s * band, j] * 2.0
                    T.copy(staged, C[s * band, 0])
            else:
                T.clear(C)
                for i, j in T.Parallel(M, N):
                    if i < M - shift:
                        C[i, j] = acc[i + shift, j] * 2.0
    return kernel


@tilelab.jit(out_idx=[-1])
def shifted_copy(M=64, N=64, K=32, shift=8, threads=128):
    """A fragment the loop writes unshifted beside the shifted read takes the loop's
    layout: moved[i, j] = (A @ B)[i + shift, j] (0 past the end), then copied out."""
    @T.prim_func
    def kernel(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
               C: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=threads):
            A_s = T.alloc_shared((M, K), T.float16)
            B_s = T.alloc_shared((K, N), T.float16)
            acc = T.alloc_fragment((M, N), T.float32)
            moved = T.alloc_fragment((M, N), T.float32)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            for i, j in T.Parallel(M, N):
                moved[i, j] = T.if_then_else(i < M - shift, acc[i + shift, j], 0.0)
            T.copy(moved, C)
    return kernel


@tilelab.jit(out_idx=[-1])
def loop_then_epilogue(R=64, W=256, steps=3):
    """Out = [S, 2 S] with S = sum_k (A_k + B_k): the loop's two 64 KB tiles and the
    epilogue's 128 KB tile need 256 KB together, 128 KB when the epilogue reuses."""
    @T.prim_func
    def kernel(A: T.Tensor((steps * R, W), T.float32), B: T.Tensor((steps * R, W), T.float32),
               Out: T.Tensor((R, 2 * W), T.float32)):
        with T.Kernel(1, threads=256):
            A_s = T.alloc_shared((R, W), T.float32)
            B_s = T.alloc_shared((R, W), T.float32)
            out_s = T.alloc_shared((R, 2 * W), T.float32)
            acc = T.alloc_fragment((R, W), T.float32)
            T.clear(acc)
            for k in T.serial(steps):
                T.copy(A[k * R, 0], A_s)
                T.copy(B[k * R, 0], B_s)
                for i, j in T.Parallel(R, W):
                    acc[i, j] += A_s[i, j] + B_s[i, j]
            for i, j in T.Parallel(R, W):
                out_s[i, j] = acc[i, j]
                out_s[i, W + j] = acc[i, j] * 2.0
            T.copy(out_s, Out)
    return kernel


def _operands(device="cpu", seed=0):
    torch.manual_seed(seed)
    return (torch.randn(64, 32, dtype=torch.float16, device=device),
            torch.randn(32, 64, dtype=torch.float16, device=device))


def _shifted_product(a, b, shift):
    full = 2 * (a.float() @ b.float())
    out = torch.zeros_like(full)
    out[:full.shape[0] - shift] = full[shift:]
    return out


def _epilogue_inputs(device="cpu", seed=0):
    torch.manual_seed(seed)
    return torch.randn(192, 256, device=device), torch.randn(192, 256, device=device)


def _epilogue_expected(a, b):
    s = (a + b).reshape(3, 64, 256).sum(0)
    return torch.cat([s, 2 * s], dim=1)


def test_the_cpu_runs_them():
    a, b = _operands()
    torch.testing.assert_close(halves()(a, b), 2 * (a.float() @ b.float()),
                               rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(halves(parts=4)(a, b), 2 * (a.float() @ b.float()),
                               rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(halves(shift=16)(a, b), _shifted_product(a, b, 16),
                               rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(shifted_copy()(a, b), _shifted_product(a, b, 8) / 2,
                               rtol=1e-3, atol=1e-3)
    x, y = _epilogue_inputs()
    torch.testing.assert_close(loop_then_epilogue()(x, y), _epilogue_expected(x, y),
                               rtol=1e-4, atol=1e-4)


def _cuda(factory, arch="sm_90a", **sizes):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = factory.compile(target=f"cuda:{arch}", **sizes)
    kept = [str(w.message) for w in caught if "kept in shared memory" in str(w.message)]
    return kernel, kept


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_accumulator_stays_in_registers(arch):
    for factory, sizes in ((halves, {}), (halves, {"parts": 4}), (halves, {"shift": 16}),
                           (shifted_copy, {})):
        kernel, kept = _cuda(factory, arch, **sizes)
        assert not kept, (factory, sizes, kept)
        trace = kernel.trace
        assert trace is not None


@needs_nvcc
def test_a_read_the_loop_cannot_line_up_still_moves_to_shared_memory():
    """Two fragments read at offsets that differ by a loop variable: no one layout serves
    both, so one of them goes to shared memory, as before (fragments too large for every
    thread to keep whole)."""
    @T.prim_func
    def apart(X: T.Tensor((512,), T.float32), Y: T.Tensor((256,), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((512,), T.float32)
            g = T.alloc_fragment((512,), T.float32)
            T.copy(X, f)
            T.copy(X, g)
            for s in T.serial(2):
                for i in T.Parallel(512):
                    if i < 256:
                        Y[i] = f[i + s * 256] + g[i + 256 - s * 256]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tilelab.compile(apart, target="cuda:sm_90a")
    assert any("kept in shared memory" in str(w.message) for w in caught)


@needs_nvcc
def test_tiles_over_the_limit_share_bytes_after_a_barrier():
    for rows in (64, 96):  # 256 KB and 384 KB of tiles; 128 KB and 192 KB at once
        kernel = loop_then_epilogue.compile(target="cuda:sm_90a", R=rows)
        assert kernel.launch["dynamic_smem"] <= (2 * rows * 256 * 4) + 1024


@pytest.mark.gpu
def test_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for seed in (0, 1):
        a, b = _operands("cuda", seed)
        product = 2 * (a.float() @ b.float())
        torch.testing.assert_close(halves.compile(target="cuda")(a, b), product,
                                   rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(halves.compile(target="cuda", parts=4)(a, b), product,
                                   rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(halves.compile(target="cuda", shift=16)(a, b),
                                   _shifted_product(a, b, 16), rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(shifted_copy.compile(target="cuda")(a, b),
                                   _shifted_product(a, b, 8) / 2, rtol=1e-3, atol=1e-3)
        x, y = _epilogue_inputs("cuda", seed)
        torch.testing.assert_close(loop_then_epilogue.compile(target="cuda")(x, y),
                                   _epilogue_expected(x, y), rtol=1e-4, atol=1e-4)
