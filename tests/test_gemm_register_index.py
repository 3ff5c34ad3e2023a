"""A T.gemm whose operand is the part of a tile a register picks (`K_shared[stage]`, stage
computed from a T.alloc_var, as MInference's vertical-slash attention writes it):
on the CPU it multiplies that part; for CUDA it compiled not at all before (the lowering
looked the GEMM's warp grid up under the op as traced, not as its register reads became)."""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc


def picked_stage(M=64, N=64, K=64, stages=2):
    @T.prim_func
    def kernel(A: T.Tensor((M, K), "float16"), B: T.Tensor((stages, N, K), "float16"),
               count: T.Tensor((1,), "int32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((M, K), "float16")
            b = T.alloc_shared((stages, N, K), "float16")
            n = T.alloc_var("int32")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, a)
            T.copy(B, b)
            n = count[0]
            T.clear(acc)
            T.gemm(a, b[(n + 63) // 64 % stages, :, :], acc, transpose_B=True)
            T.copy(acc, C)

    return kernel


def _inputs(device, count):
    a = torch.randn(64, 64, dtype=torch.float16, device=device)
    b = torch.randn(2, 64, 64, dtype=torch.float16, device=device)
    return a, b, torch.tensor([count], dtype=torch.int32, device=device)


@pytest.mark.parametrize("count", [50, 100])  # stage 1, then stage 0
def test_the_register_picks_the_part_on_the_cpu(count):
    a, b, n = _inputs("cpu", count)
    c = torch.zeros(64, 64)
    tilelab.compile(picked_stage(), target="cpu")(a, b, n, c)
    stage = (count + 63) // 64 % 2
    torch.testing.assert_close(c, a.float() @ b[stage].float().T, rtol=1e-3, atol=1e-3)


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("target", ["cuda:sm_90a", "cuda:sm_80"])
def test_it_compiles_for_cuda(target):
    tilelab.compile(picked_stage(), target=target)


@pytest.mark.gpu
@pytest.mark.parametrize("count", [50, 100])
def test_the_register_picks_the_part_on_the_gpu(count):
    a, b, n = _inputs("cuda", count)
    c = torch.zeros(64, 64, device="cuda")
    tilelab.compile(picked_stage(), target="cuda")(a, b, n, c)
    stage = (count + 63) // 64 % 2
    torch.testing.assert_close(c, a.float() @ b[stage].float().T, rtol=1e-3, atol=1e-3)
