"""FlashAttention with Q kept in registers: S = Q Kᵀ takes A from the same registers in every
key tile. ptxas of CUDA 13.0 gave those registers to P inside the loop, and from the second
tile on the kernel multiplied by P instead of Q (passes/keep_wgmma_operands.py)."""

from __future__ import annotations

import re

import pytest
import torch

import tilelab
from examples.flash_attention import flash_attention_kernel, reference
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
    loop_end = body.index("}", body.rindex("wgmma_wait_group"))
    assert body.index("tl::keep_registers<32>((&(queries_ptr[0])))") > loop_end
    # P, written in every iteration, needs nothing; nor does a kernel without Q in registers
    assert body.count("keep_registers") == 1
    assert "keep_registers" not in _source(q_in_registers=False).split("__global__")[-1]


@pytest.mark.gpu
@pytest.mark.parametrize("sequence,dimension,causal", [(1000, 128, False), (1037, 128, True),
                                                      (515, 64, False)])
def test_q_in_registers_is_right_on_the_gpu(sequence, dimension, causal):
    _check("cuda", sequence, dimension, causal)
