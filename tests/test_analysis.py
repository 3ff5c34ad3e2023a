"""The static count of a program's work and traffic (tilelab/analysis.py), TileLang's
`tilelang.tools.Analyzer` on top of it, and `%%tilekernel --bench` using it."""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.analysis import work


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_a_gemm_counts_2mnk_and_the_tiles_it_reads():
    from examples.gemm import gemm_kernel

    m, n, k = 1024, 768, 512
    done = work(gemm_kernel.compile(_meta(m, k), _meta(k, n), target="cpu"))
    assert done.flops == 2 * m * n * k
    grid = (m // 128) * (n // 128)
    # every block reads a 128-row panel of A and a 128-column panel of B, writes its C tile
    assert done.global_bytes == grid * (128 * k + k * 128) * 2 + m * n * 2
    gemm = next(o for o in done.ops if o.op == "gemm")
    assert gemm.runs == grid * (k // 32) and gemm.buffers == ("a_shared", "b_shared",
                                                              "c_fragment")


def test_edge_tiles_count_whole_and_causal_loops_count_block_by_block():
    """Tiles are counted as the program states them (a 128-row tile past the edge still
    counts 128 rows); a key loop that stops at each query block's diagonal runs
    1 + 2 + ... + blocks times per (batch, head)."""
    from examples.flash_attention import flash_attention_kernel as fa

    batch, heads, seq, dim = 2, 3, 512, 64
    full = work(tilelab.compile(fa.fn(batch, heads, seq, dim), out_idx=fa.out_idx,
                                target="cpu"))
    causal = work(tilelab.compile(fa.fn(batch, heads, seq, dim, causal=True),
                                  out_idx=fa.out_idx, target="cpu"))
    blocks = seq // 64  # the example's 64x64 blocks
    gemms = [o for o in full.ops if o.op == "gemm"]
    assert len(gemms) == 2
    assert full.flops == 4 * batch * heads * seq * seq * dim
    causal_runs = batch * heads * sum(range(1, blocks + 1))
    assert [o.runs for o in causal.ops if o.op == "gemm"] == [causal_runs, causal_runs]
    edge = work(tilelab.compile(fa.fn(1, 1, 100, 64), out_idx=fa.out_idx, target="cpu"))
    assert edge.flops == 4 * 128 * 128 * 64  # two 64-row blocks, two 64-key blocks each


def test_a_loop_bounded_by_a_runtime_value_is_named():
    @T.prim_func
    def counted(X: T.Tensor((4, 256), T.float32), N: T.Tensor((1,), T.int32),
                Y: T.Tensor((4, 256), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((4, 64), T.float32)
            n = T.alloc_var(T.int32)
            n = N[0]
            for i in T.serial(n):
                T.copy(X[0, i * 64], tile)
                T.copy(tile, Y[0, i * 64])

    with pytest.raises(tilelab.TileLabError, match="known only while the kernel runs"):
        work(counted)


def test_tilelang_analyzer_reads_a_get_tir_result():
    import tilelab.compat.tilelang as tilelang
    from examples.gemm import gemm_kernel

    tilelang.install()
    from tilelang.tools import Analyzer  # noqa: PLC0415 - the compat module's import hook

    tir = gemm_kernel.get_tir(_meta(256, 256), _meta(256, 256))
    device = tilelang.carver.arch.CUDA("H200")  # a named device: no GPU needed
    result = Analyzer.analysis(tir, device)
    assert result.total_flops == 2 * 256 ** 3
    assert result.expected_bandwidth_GBps == pytest.approx(4800)
    assert result.expected_tflops == pytest.approx(989.4)
    assert result.estimated_time == pytest.approx(
        max(result.total_global_bytes / 4.8e12, result.total_flops / 989.4e12))


def test_cuda_of_the_visible_gpu_says_how_to_name_one_without_it():
    import tilelab.compat.tilelang as tilelang

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(tilelab.TileLabError, match="there is none here") as info:
        tilelang.CUDA("cuda")
    assert "CUDA('H200')" in info.value.hint


def test_the_bench_magic_counts_the_gemm_work_itself():
    """`%%tilekernel --bench` without `--flops` reports TFLOP/s from the counted work; a
    kernel without T.gemm keeps reporting bandwidth only."""
    from examples.gemm import gemm_kernel
    from examples.vector_add import vector_add_kernel
    from tilelab.notebook.magics import _counted_flops

    gemm = gemm_kernel.compile(_meta(256, 128), _meta(128, 384), target="cpu")
    assert _counted_flops(gemm) == 2 * 256 * 384 * 128
    # a tile past the edge counts whole: the work the hardware does, not the useful part
    tail = gemm_kernel.compile(_meta(256, 128), _meta(128, 64), target="cpu")
    assert _counted_flops(tail) == 2 * 256 * 128 * 128
    add = vector_add_kernel.compile(torch.empty(1000), torch.empty(1000), target="cpu")
    assert _counted_flops(add) is None
