"""A shared tile whose bytes StorageRewrite gives to a tile of another element type keeps
pointers of its own type (passes/typed_access_pointers.py). Without the pass the CUDA
compile of this program failed inside TVM ("tvm_access_ptr element type must match the
source buffer") while the CPU ran it correctly: a float32 row loaded by cp.async into bytes
a bfloat16 tile of the loop before had finished with (TileLang's KDA wy_fast)."""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@tilelab.jit(out_idx=[-2, -1])
def two_loops(S, D, stages, bs=64, bd=32):
    """Per block of `bs` rows: U = A @ V (bfloat16 tiles, a column block at a time), then
    KG = exp2(G[last row] - G) with the last row loaded into a float32 tile."""
    @T.prim_func
    def kernel(A: T.Tensor((S, bs), T.bfloat16), V: T.Tensor((S, D), T.bfloat16),
               G: T.Tensor((S, D), T.float32), U: T.Tensor((S, D), T.bfloat16),
               KG: T.Tensor((S, D), T.float32)):
        with T.Kernel(S // bs, threads=128) as b:
            A_s = T.alloc_shared((bs, bs), T.bfloat16)
            V_s = T.alloc_shared((bs, bd), T.bfloat16)
            U_f = T.alloc_fragment((bs, bd), T.float32)
            G_s = T.alloc_shared((bs, bd), T.float32)
            last = T.alloc_shared((bd,), T.float32)
            T.copy(A[b * bs:(b + 1) * bs, :], A_s)
            for k in T.Pipelined(D // bd, num_stages=stages):
                T.copy(V[b * bs:(b + 1) * bs, k * bd:(k + 1) * bd], V_s)
                T.gemm(A_s, V_s, U_f, clear_accum=True)
                T.copy(U_f, U[b * bs:(b + 1) * bs, k * bd:(k + 1) * bd])
            for k in T.Pipelined(D // bd, num_stages=stages):
                T.copy(G[b * bs:(b + 1) * bs, k * bd:(k + 1) * bd], G_s)
                T.copy(G[(b + 1) * bs - 1, k * bd:(k + 1) * bd], last)
                for i, j in T.Parallel(bs, bd):
                    G_s[i, j] = T.exp2(last[j] - G_s[i, j])
                T.copy(G_s, KG[b * bs:(b + 1) * bs, k * bd:(k + 1) * bd])
    return kernel


def inputs(S, D, device):
    A = torch.randn(S, 64, device=device).to(torch.bfloat16)
    V = torch.randn(S, D, device=device).to(torch.bfloat16)
    G = torch.randn(S, D, device=device)
    return A, V, G


def reference(A, V, G):
    blocks = A.shape[0] // 64
    a = A.float().view(blocks, 64, 64)
    u = torch.bmm(a, V.float().view(blocks, 64, -1)).view(A.shape[0], -1)
    g = G.view(blocks, 64, -1)
    return u, torch.exp2(g[:, -1:, :] - g).view(G.shape)


def check(kernel, device):
    A, V, G = inputs(192, 96, device)
    U, KG = kernel(A, V, G)
    u, kg = reference(A, V, G)
    torch.testing.assert_close(U.float(), u, rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(KG, kg, rtol=1e-5, atol=1e-5)


def test_cpu_runs_it():
    check(two_loops.compile(192, 96, 2, target="cpu"), "cpu")


@needs_nvcc
def test_it_compiles_for_cuda_with_pointers_of_the_right_type():
    kernel = two_loops.compile(192, 96, 2, target="cuda")  # two stages: the bytes are shared
    retyped = [p for p in kernel.trace.passes if p.name == "tilelab.TypedAccessPointers"]
    assert retyped and retyped[0].changed and "_as_float32" in retyped[0].ir
    assert "cp_async" in kernel.get_kernel_source()  # the float32 row still comes by cp.async


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_gpu_matches_torch(stages):
    check(two_loops.compile(192, 96, stages, target="cuda"), "cuda")
