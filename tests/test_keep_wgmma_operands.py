"""FlashAttention with Q kept in registers: S = Q Kᵀ takes A from the same registers in every
key tile. ptxas of CUDA 13.0 gave those registers to P inside the loop, and from the second
tile on the kernel multiplied by P instead of Q (passes/keep_wgmma_operands.py)."""

from __future__ import annotations

import re

import pytest
import torch

import tilelab
import tilelab.language as T
from examples.flash_attention import flash_attention_kernel, reference
from tests.cuda_source import loop_end
from tilelab.backends.cuda.nvcc import find_nvcc


def _program(sequence, dimension, causal, q_in_registers=True):
    return flash_attention_kernel.fn(2, 2, sequence, dimension, block_m=128, block_n=128,
                                     threads=256, causal=causal, q_in_registers=q_in_registers)


def _check(device, sequence, dimension, causal):
    torch.manual_seed(sequence + dimension)
    q, k, v = (torch.randn(2, 2, sequence, dimension, dtype=torch.float16, device=device)
               for _ in range(3))
    kernel = tilelab.compile(_program(sequence, dimension, causal),
                             out_idx=flash_attention_kernel.out_idx,
                             target="cpu" if device == "cpu" else "cuda",
                             pass_configs=flash_attention_kernel.pass_configs)
    torch.testing.assert_close(kernel(q, k, v), reference(q, k, v, causal), rtol=2e-2, atol=2e-2)


def test_q_in_registers_is_right_on_the_cpu():
    _check("cpu", 300, 64, causal=True)


def _source(q_in_registers):
    kernel = tilelab.compile(_program(1000, 128, False, q_in_registers),
                             out_idx=flash_attention_kernel.out_idx, target="cuda:sm_90a",
                             pass_configs=flash_attention_kernel.pass_configs)
    return kernel.get_kernel_source()


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_the_registers_of_q_are_read_after_the_key_loop():
    source = _source(q_in_registers=True)
    body = source[source.rindex("__global__"):]
    # Q's 64 halves a thread, as 32 words, read once the loop is over (the loop's own MMAs
    # take them from registers: the rs form)
    assert "wgmma_f16_rs" in body and re.search(r"half2 v_\w* = queries_ptr\[\d+\];", body)
    assert body.index("tl::keep_registers<32>((&(queries_ptr[0])))") > \
        loop_end(body, "key_block")
    # P, written in every iteration, needs nothing; nor does a kernel without Q in registers
    assert body.count("keep_registers") == 1
    assert "keep_registers" not in _source(q_in_registers=False).split("__global__")[-1]


def products_of_one_tile(rounds=3, tiles=4):
    """C[r] = A @ (B[r, 0:64] + ... + B[r, 192:256])ᵀ: A copied into registers once, then
    multiplied in a pipelined loop inside another loop, each round into C[r]."""

    @T.prim_func
    def kernel(A: T.Tensor((64, 64), "float16"), B: T.Tensor((rounds, 64 * tiles, 64), "float16"),
               C: T.Tensor((rounds, 64, 64), "float32")):
        with T.Kernel(1, threads=128):
            a_shared = T.alloc_shared((64, 64), "float16")
            b_shared = T.alloc_shared((64, 64), "float16")
            a_regs = T.alloc_fragment((64, 64), "float16")
            c_regs = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a_shared)
            T.copy(a_shared, a_regs)
            for r in T.serial(rounds):
                T.clear(c_regs)
                for k in T.Pipelined(tiles, num_stages=2):
                    T.copy(B[r, k * 64, 0], b_shared)
                    T.gemm(a_regs, b_shared, c_regs, transpose_B=True)
                T.copy(c_regs, C[r, 0, 0])

    return kernel


def _check_products(device):
    torch.manual_seed(7)
    a = torch.randn(64, 64, dtype=torch.float16, device=device)
    b = torch.randn(3, 256, 64, dtype=torch.float16, device=device)
    c = torch.zeros(3, 64, 64, device=device)
    tilelab.compile(products_of_one_tile(), target="cpu" if device == "cpu" else "cuda")(a, b, c)
    expected = torch.stack([a.float() @ b[r].float().view(4, 64, 64).sum(0).T for r in range(3)])
    torch.testing.assert_close(c, expected, rtol=1e-2, atol=5e-2)


def test_a_register_operand_unchanged_by_two_loops_is_right_on_the_cpu():
    _check_products("cpu")


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_each_loop_around_the_product_reads_the_registers_after_it():
    body = tilelab.compile(products_of_one_tile(), target="cuda:sm_90a").get_kernel_source()
    body = body[body.rindex("__global__"):]
    keeps = [m.start() for m in re.finditer(r"tl::keep_registers<16>\(\(&\(a_regs", body)]
    inner = body.index("for (int k = 0")
    assert len(keeps) == 2
    assert loop_end(body, "k") < keeps[0] < loop_end(body, "r") < \
        keeps[1]
    assert inner < keeps[0]


@pytest.mark.gpu
def test_a_register_operand_unchanged_by_two_loops_is_right_on_the_gpu():
    _check_products("cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("sequence,dimension,causal", [(1000, 128, False), (1037, 128, True),
                                                      (515, 64, False)])
def test_q_in_registers_is_right_on_the_gpu(sequence, dimension, causal):
    _check("cuda", sequence, dimension, causal)
