"""wgmma's operand tiles: their alignment proven from the offsets shared memory planning chose
and checked once, at the kernel's start, instead of before every T.gemm of every iteration
(passes/aligned_tiles_once.py)."""

from __future__ import annotations

import pytest
import tvm
from tvm import tirx

import tilelab
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.passes.aligned_tiles_once import AlignedTilesOnce


def _check(buffer, offset, bytes_=1024):
    pointer = tirx.tvm_access_ptr("float16", buffer, offset, 8, 1)
    return tirx.Evaluate(tirx.call_extern("void", f"tl::wgmma_check_aligned<{bytes_}>",
                                          pointer))


def test_a_proven_offset_loses_its_check_and_an_unknown_one_keeps_it():
    shared = tirx.decl_buffer((65536,), "uint8", name="buf_dyn_shmem", scope="shared.dyn")
    k, row = tirx.Var("k", "int32"), tirx.Var("row", "int32")
    slot = tirx.bitwise_and(k, 1) * 16384 + 512  # halves: a slot of 32768 bytes, 1024 in
    body = tirx.For(k, 0, 8, tirx.ForKind.SERIAL, tirx.SeqStmt([
        _check(shared, slot), _check(shared, row * 8 + 512, 128)]))
    func = tirx.PrimFunc([row], tirx.SeqStmt([tirx.AllocBuffer(shared), body]))
    out = AlignedTilesOnce(tvm.IRModule({"main": func}))["main"].script()
    before_loop, loop = out.split("for k in range(8):")
    # the slot's check is gone from the loop; the start is checked once, for its 1024 bytes
    assert "wgmma_check_aligned<1024>" not in loop
    assert before_loop.count("wgmma_check_aligned<1024>") == 1
    assert "buf_dyn_shmem, 0, 8, 1" in before_loop
    # `row * 16` bytes may be any multiple of 16: that check stays where it was
    assert loop.count("wgmma_check_aligned<128>") == 1


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("which", ["flash_attention", "gemm"])
def test_the_course_kernels_check_alignment_once_before_their_loops(which):
    if which == "gemm":
        from examples.gemm import gemm_kernel

        kernel = gemm_kernel.compile(M=1024, N=1024, K=1024, block_m=128, block_n=256,
                                     block_k=64, threads=256, target="cuda:sm_90a")
    else:
        from examples.flash_attention import flash_attention_kernel as factory

        program = factory.fn(2, 2, 1000, 128, block_m=128, block_n=128, threads=256)
        kernel = tilelab.compile(program, out_idx=factory.out_idx, target="cuda:sm_90a",
                                 pass_configs=factory.pass_configs)
    source = kernel.get_kernel_source()
    body = source[source.rindex("__global__"):]
    assert body.count("tl::wgmma_check_aligned<") == 1
    assert body.index("tl::wgmma_check_aligned<1024>((&(buf_dyn_shmem_ptr[0])))") < \
        body.index("for (")
