"""Blocks with the most loop trips start first (passes/heavy_blocks_first.py).

Causal attention's block of query rows `bx` walks over keys up to its own rows: the
later the block, the longer it runs. The pass numbers such a block index backwards
through `tl::backwards`, so the GPU, which starts blocks in index order, starts the
longest ones first. Kernels whose blocks might see each other (atomics), whose trip
counts do not grow with one index, or whose grids are small keep the order written.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from examples.flash_attention import flash_attention_kernel, reference
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.passes.heavy_blocks_first import _grows_with

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
ORDER_AS_WRITTEN = {"tl.disable_heavy_first": True}


def _attention(causal: bool, seq: int = 2048, configs: dict | None = None, target="cuda"):
    program = flash_attention_kernel.fn(2, 4, seq, 64, block_m=64, block_n=64, causal=causal)
    return tilelab.compile(program, out_idx=flash_attention_kernel.out_idx, target=target,
                           pass_configs={**flash_attention_kernel.pass_configs, **(configs or {})})


@tilelab.jit
def triangle_sums(X, block: int = 32, atomic: bool = False):
    """Row-block i sums the blocks 0..i of X's rows (a loop that grows with the block).
    `atomic`: the sums are added to Out instead of stored (only compiled here: Out starts
    as garbage)."""
    N, D = T.const("N, D")
    X: T.Tensor((N, D), T.float32)
    Out = T.empty((N // block, D), T.float32)
    with T.Kernel(N // block, threads=128) as bx:
        acc = T.alloc_fragment((D,), T.float32)
        tile = T.alloc_fragment((block, D), T.float32)
        part = T.alloc_fragment((D,), T.float32)
        T.clear(acc)
        for k in T.serial(bx + 1):
            T.copy(X[k * block, 0], tile)
            T.reduce_sum(tile, part, dim=0)
            for j in T.Parallel(D):
                acc[j] += part[j]
        if atomic:
            T.atomic_add(Out[bx, 0], acc)
        else:
            T.copy(acc, Out[bx, 0])
    return Out


def _expected_triangle(x, block):
    sums = x.reshape(-1, block, x.shape[1]).sum(1)
    return sums.cumsum(0)


def test_a_trip_count_grows_with_the_index_only_if_it_never_shrinks():
    from tvm import tirx

    bx = tirx.Var("bx", "int32")
    assert _grows_with([tirx.Min(tirx.const(64, "int32"), bx * 2 + 2)], bx, 32)
    assert not _grows_with([tirx.const(40, "int32") - bx], bx, 32)  # shrinks
    assert not _grows_with([tirx.floormod(bx, 4) + 1], bx, 32)  # up and down
    assert not _grows_with([bx * 0 + 3], bx, 32)  # the same for all
    n = tirx.Var("n", "int32")
    assert not _grows_with([bx + n], bx, 32)  # also a size known only at launch


@needs_nvcc
def test_causal_attention_starts_its_longest_blocks_first():
    source = _attention(causal=True).get_kernel_source()
    assert "= tl::backwards(31, ((int)blockIdx.x));" in source
    assert "tl::backwards" not in _attention(causal=False).get_kernel_source()
    assert "tl::backwards" not in _attention(True, configs=ORDER_AS_WRITTEN).get_kernel_source()


@needs_nvcc
def test_small_grids_and_atomics_keep_the_order_written():
    meta = torch.empty(64 * 32, 64, device="meta")  # 64 blocks: no tail to speak of
    assert "tl::backwards" not in triangle_sums.compile(
        meta, target="cuda:sm_90a").get_kernel_source()
    meta = torch.empty(512 * 32, 64, device="meta")
    assert "tl::backwards" in triangle_sums.compile(
        meta, target="cuda:sm_90a").get_kernel_source()
    assert "tl::backwards" not in triangle_sums.compile(
        meta, atomic=True, target="cuda:sm_90a").get_kernel_source()


@pytest.mark.gpu
def test_renumbered_blocks_compute_what_the_program_says():
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    torch.manual_seed(0)
    x = torch.randn(512 * 32, 64, device="cuda")
    torch.testing.assert_close(triangle_sums(x), _expected_triangle(x, 32),
                               rtol=1e-4, atol=1e-3)
    q, k, v = (torch.randn(2, 4, 2000, 64, dtype=torch.float16, device="cuda")
               for _ in range(3))
    for configs in [{}, ORDER_AS_WRITTEN]:
        program = flash_attention_kernel.fn(2, 4, 2000, 64, causal=True)
        kernel = tilelab.compile(program, out_idx=flash_attention_kernel.out_idx,
                                 target="cuda",
                                 pass_configs={**flash_attention_kernel.pass_configs, **configs})
        torch.testing.assert_close(kernel(q, k, v), reference(q, k, v, causal=True),
                                   rtol=1e-2, atol=1e-2)
