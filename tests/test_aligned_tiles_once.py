"""wgmma's operand tiles: their alignment proven from the offsets shared memory planning chose
and checked once, at the kernel's start, instead of before every T.gemm of every iteration
(passes/aligned_tiles_once.py; `tl.disable_alignment_check_once` keeps a check before each)."""

from __future__ import annotations

import pytest
import tvm
from tvm import tirx

import tilelab
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.passes.aligned_tiles_once import AlignedTilesOnce


def _check(pointer_to, offset, bytes_=1024):
    pointer = tirx.tvm_access_ptr("float16", pointer_to, offset, 8, 1)
    return tirx.Evaluate(tirx.call_extern("void", f"tl::wgmma_check_aligned<{bytes_}>",
                                          pointer))


def _run(*stmts) -> str:
    func = tirx.PrimFunc([], tirx.SeqStmt(list(stmts)))
    return AlignedTilesOnce(tvm.IRModule({"main": func}))["main"].script()


SHARED = tirx.decl_buffer((65536,), "uint8", name="buf_dyn_shmem", scope="shared.dyn")


def test_a_proven_offset_loses_its_check_and_others_keep_theirs():
    view = tirx.decl_buffer((32768,), "float16", name="k_tile", scope="shared.dyn")
    shifted = tirx.decl_buffer((32768,), "float16", name="shifted", scope="shared.dyn")
    k, slot, row = (tirx.Var(name, "int32") for name in ("k", "slot", "row"))
    out = _run(tirx.AllocBuffer(SHARED), tirx.DeclBuffer(view, data=SHARED.data),
               tirx.DeclBuffer(shifted, data=tirx.address_of(tirx.BufferLoad(SHARED, [512]))),
               tirx.For(k, 0, 8, tirx.ForKind.SERIAL, tirx.SeqStmt([
                   tirx.Bind(slot, tirx.bitwise_and(k, 1) * 16384),  # halves: 32768 bytes
                   tirx.Bind(row, tirx.Var("loaded", "int32")),
                   _check(view.data, slot + 512),       # a view from the first byte: proven
                   _check(view.data, row * 8 + 512, 128),  # 16 * row bytes: unknown
                   _check(shifted.data, slot)])))       # a view 512 bytes in: not the start
    before_loop, loop = out.split("for k in range(8):")
    assert before_loop.count("wgmma_check_aligned<1024>") == 1  # the start, once
    assert "buf_dyn_shmem, 0, 8, 1" in before_loop
    kept = [line.strip() for line in loop.splitlines() if "wgmma_check_aligned" in line]
    assert len(kept) == 2
    assert "<128>" in kept[0] and "k_tile.data, row * 8 + 512" in kept[0]
    assert "<1024>" in kept[1] and "shifted.data, slot, 8, 1" in kept[1]


def test_an_allocation_with_nothing_after_it_keeps_every_check():
    out = _run(tirx.AllocBuffer(SHARED), _check(SHARED, 512))
    assert "buf_dyn_shmem, 512, 8, 1" in out and "buf_dyn_shmem, 0, 8, 1" not in out


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("which", ["flash_attention", "gemm"])
def test_the_course_kernels_check_alignment_once_before_their_loops(which):
    def body(once: bool) -> str:
        asked = {} if once else {"tl.disable_alignment_check_once": True}
        if which == "gemm":
            from examples.gemm import gemm_kernel

            gemm_kernel._kernels.clear()  # the factory's own memo of compiled kernels
            kernel = gemm_kernel.compile(M=1024, N=1024, K=1024, block_m=128, block_n=256,
                                         block_k=64, threads=256, target="cuda:sm_90a",
                                         pass_configs=asked)
        else:
            from examples.flash_attention import flash_attention_kernel as factory

            program = factory.fn(2, 2, 1000, 128, block_m=128, block_n=128, threads=256)
            kernel = tilelab.compile(program, out_idx=factory.out_idx, target="cuda:sm_90a",
                                     pass_configs={**factory.pass_configs, **asked})
        source = kernel.get_kernel_source()
        return source[source.rindex("__global__"):]

    once = body(once=True)
    assert once.count("tl::wgmma_check_aligned<") == 1
    assert once.index("tl::wgmma_check_aligned<1024>((&(buf_dyn_shmem_ptr[0])))") < \
        once.index("for (")
    every = body(once=False)
    assert every.count("tl::wgmma_check_aligned<") >= 2 and "buf_dyn_shmem_ptr[0]" not in every
