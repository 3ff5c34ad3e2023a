"""Shared tiles leave for global memory by TMA on sm_90a: by default in walks over tiles
(T.Persistent), everywhere where asked for (`tl.enable_tma_stores`, passes/tma_stores.py).

The compile tests read the generated CUDA and the launch: which stores TMA makes (a
descriptor for the tensor, the tile in panels of its swizzle, one barrier before the
store, the wait for TMA's reads just before the tile is written again, and at the
kernel's end) and which it leaves to the threads, with the reason the source view shows. The GPU tests compare the results
with PyTorch's and with the threads' stores, edge tiles included.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.kernels.transpose_shared import transpose_through_shared
from tests.test_wgmma import CONFIGS, _inputs, _reference, matmul
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
ON = {"tl.enable_tma_stores": True}


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _gemm(target="cuda:sm_90a", pass_configs=ON, **cfg):
    return matmul.compile(_meta(1000, 520), _meta(520, 776), target=target,
                          pass_configs=pass_configs, **cfg)


def _stores(kernel) -> list[dict]:
    return [m for m in kernel.launch.get("tensor_maps", []) if m.get("store")]


@tilelab.jit
def scale_rows(X, block: int = 64):
    """Reads X's tile and writes it back doubled: TMA's asynchronous writes could land
    after another block's reads of X, so the store stays the threads'."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float16)
    with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
        tile = T.alloc_shared((block, N), T.float16)
        T.copy(X[bx * block, 0], tile)
        for i, j in T.Parallel(block, N):
            tile[i, j] = tile[i, j] * 2
        T.copy(tile, X[bx * block, 0])


@tilelab.jit
def copy_out(X, block: int = 64, disable_tma: bool = False):
    """A tile through shared memory, possibly told to keep the threads' copy."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        tile = T.alloc_shared((block, block), T.float32)
        T.copy(X[by * block, bx * block], tile)
        T.copy(tile, Y[by * block, bx * block], disable_tma=disable_tma)
    return Y


WRITE = "tl::stmatrix_x4_float_as_half("  # the accumulators into the tile (ops/copy.py)


@needs_nvcc
def test_the_staged_gemm_sums_leave_by_tma():
    kernel = _gemm()
    source = kernel.get_kernel_source()
    (spec,) = _stores(kernel)
    # C (tensor 2) is described, not passed: 128x128 half tiles in two parts of 64 columns,
    # each one 128-byte panel
    assert spec["tensor"] == 2 and spec["shape"] == [1000, 776]
    assert spec["box"] == [64, 128] and spec["swizzle"] == 128 and spec["panels"] == 1
    assert "C_ptr" not in source and "C_store_tma" in source
    assert kernel.trace.layouts["acc_staged"]["kind"] == "wgmma_panels"
    # every thread fences and the block synchronizes once, after the last stmatrix; thread
    # 0 waits for its earlier stores' writes, stores and commits - and goes on, without
    # waiting for TMA to have read the tile
    first = source.index("tl::tma_store_wait();")
    issue = source[source.rindex("fence_proxy", 0, first):]
    assert issue.index("__syncthreads()") < issue.index("tl::tma_store(") < \
        issue.index("tl::tma_store_commit()")
    thread_0 = issue[:issue.index("}")]
    assert "tma_store_wait_read" not in thread_0
    assert source[source.rindex(WRITE, 0, first):first].count("__syncthreads()") == 1


@needs_nvcc
def test_the_next_part_waits_for_tma_to_have_read_the_tile():
    """Two parts through one tile: between the first part's store and the second part's
    writes, every thread waits for TMA's reads of the tile (the wait names it), then the
    block synchronizes; the kernel ends with the wait for the second part's."""
    source = _gemm().get_kernel_source()
    assert source.count("tl::tma_store(") == 2
    committed = source.index("tl::tma_store_commit()")
    read = source.index("tl::tma_store_wait_read((&(((half*)buf_dyn_shmem_ptr)", committed)
    again = source.index(WRITE, read)
    assert source[committed:read].count("__syncthreads()") == 0
    assert source[read:again].count("__syncthreads()") == 1
    last = source.rindex("tl::tma_store_commit()")
    assert "tl::tma_store_wait_read((&" in source[last:]


@needs_nvcc
def test_a_walk_of_one_tile_keeps_its_k_loop_rolled():
    """1000x776 in 128x256 tiles is 32 tiles: 32 blocks walk one each, the walk folds away
    and its K loop of nine constant steps would be unrolled whole - 76 bytes spilled past
    the 168 registers of a 384-thread block. `#pragma unroll 1` keeps it rolled."""
    from examples.persistent_gemm import persistent_gemm_kernel

    kernel = persistent_gemm_kernel.compile(_meta(1000, 520), _meta(520, 776),
                                            target="cuda:sm_90a")
    assert kernel.trace.resources["grid"] == [32, 1, 1]
    assert "#pragma unroll 1\n" in kernel.get_kernel_source()
    assert kernel.trace.resources["spill_stores_bytes"] == 0


@needs_nvcc
def test_a_persistent_walk_stores_by_tma_among_its_consumers():
    """The walk's consumers synchronize among themselves (the producer warpgroup is not
    there): the store's barrier is theirs."""
    from examples.persistent_gemm import persistent_gemm_kernel

    kernel = persistent_gemm_kernel.compile(_meta(1000, 520), _meta(520, 776),
                                            target="cuda:sm_90a", pass_configs=ON)
    source = kernel.get_kernel_source()
    issue = source[:source.index("tl::tma_store(")]
    assert issue.rstrip().endswith("tl::tma_store_wait();")
    assert issue[issue.rindex("fence_proxy"):].count("tl::consumer_sync(256)") == 1
    assert [m["tensor"] for m in _stores(kernel)] == [2]
    # the wait for TMA's reads of the last part comes in the next tile, after its K loop:
    # the tensor cores start on the next tile while TMA reads this one
    loop = source.index("for (int k = 0;")
    first_wait = source.index("tl::tma_store_wait_read(")
    first_write = source.index(WRITE)
    assert loop < first_wait < first_write


@tilelab.jit
def two_tiles_out(X, block: int = 64):
    """Two shared tiles, each stored by TMA, the second written after the first's store."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M, N), T.float32)
    Z = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
        first = T.alloc_shared((block, block), T.float32)
        T.copy(X[by * block, bx * block], first)
        T.copy(first, Y[by * block, bx * block])
        second = T.alloc_shared((block, block), T.float32)
        T.copy(X[by * block, bx * block], second)
        for i, j in T.Parallel(block, block):
            second[i, j] = second[i, j] * 2
        T.copy(second, Z[by * block, bx * block])
    return Y, Z


@tilelab.jit
def load_by_barrier_then_store(X, block: int = 64):
    """Each iteration T.tma_copy loads the tile (ordered by the program's mbarrier, not by
    the barrier pass) and a TMA store sends it on."""
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float16)
    Y = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
        tile = T.alloc_shared((block, 64), T.float16)
        loaded = T.alloc_barrier([128])
        for k in T.serial(T.ceildiv(N, 64)):
            T.tma_copy(X[bx * block, k * 64], tile, barrier=loaded[0])
            T.barrier_arrive(loaded[0])
            T.barrier_wait(loaded[0], k % 2)
            T.copy(tile, Y[bx * block, k * 64])
    return Y


@needs_nvcc
def test_a_copy_landing_asynchronously_waits_for_tma_to_have_read_the_tile():
    """The next iteration's T.tma_copy must not land on the tile before TMA has read it:
    the wait stands at the top of the loop, before the copy, though the barrier pass leaves
    the copy's own order to the mbarrier."""
    source = load_by_barrier_then_store.compile(_meta(1000, 776), target="cuda:sm_90a",
                                                pass_configs=ON).get_kernel_source()
    loop = source[source.index("for (int k = 0;"):]
    assert loop.index("tl::tma_store_wait_read((&") < loop.index("tl::mbar_arrive(") < \
        loop.index("tl::tma_store(")


@needs_nvcc
def test_a_tile_tma_still_reads_keeps_its_bytes():
    """The first tile's last statement is its store, but TMA reads it after: the wait at
    the kernel's end names it, so the shared-memory merge does not give its bytes to the
    second tile (which, with the wait right after the store, it did)."""
    kernel = two_tiles_out.compile(_meta(1000, 776, dtype=torch.float32),
                                   target="cuda:sm_90a", pass_configs=ON)
    source = kernel.get_kernel_source()
    assert len(_stores(kernel)) == 2
    places = {tensor: set() for tensor in ("Y", "Z")}  # each tile's panels' offsets
    for line in source.splitlines():
        if "tl::tma_store(" in line:
            tensor = line.split("tl::tma_store(")[1].split("_store_tma")[0]
            places[tensor].add(int(line.split("buf_dyn_shmem_ptr)[")[1].split("]")[0]))
    assert places["Y"] and places["Z"] and not places["Y"] & places["Z"], places
    assert "tl::tma_store_wait_read((&" in source[source.rindex("tl::tma_store_commit()"):]


@needs_nvcc
def test_other_stores_stay_with_the_threads_and_say_why():
    from tilelab.notebook.views import source_views

    def why(kernel, outputs=("X", "Y")) -> str:
        (row,) = [r for r in source_views(kernel)[0].ops
                  if any(r["op"].endswith(f"-> {name})") for name in outputs)]
        return row["why"]

    kept = scale_rows.compile(_meta(1000, 256), target="cuda:sm_90a", pass_configs=ON)
    assert not _stores(kept) and "also reads or writes X" in why(kept)
    told = copy_out.compile(_meta(1000, 776, dtype=torch.float32), disable_tma=True,
                            target="cuda:sm_90a", pass_configs=ON)
    assert not _stores(told) and "disable_tma=True" in why(told)
    assert _stores(copy_out.compile(_meta(1000, 776, dtype=torch.float32),
                                    target="cuda:sm_90a", pass_configs=ON))
    # one block per tile, not asked for (the default), Ampere, or TMA turned off: the
    # threads store
    default = _gemm(pass_configs=None)
    threads = default.get_kernel_source()
    assert "tl::tma_store(" not in threads and "tl::tma_load(" in threads
    assert "T.Persistent" in why(default, ["C"])
    assert "tma_store" not in _gemm(target="cuda:sm_80").get_kernel_source()
    assert "tma_store" not in _gemm(pass_configs={**ON, "tl.disable_tma_lower": True}) \
        .get_kernel_source()


@needs_nvcc
def test_stores_in_a_walk_over_tiles_are_tmas_by_default():
    """Unasked, a store in a persistent walk goes by TMA - its tile is written again only
    after the next tile's K loop, so its reads are waited for there; False keeps the
    threads' stores there too."""
    from examples.persistent_gemm import persistent_gemm_kernel

    def walk(configs):
        return persistent_gemm_kernel.compile(_meta(1000, 520), _meta(520, 776), blocks=7,
                                              target="cuda:sm_90a", pass_configs=configs)

    (spec,) = _stores(walk(None))
    assert spec["tensor"] == 2 and spec["box"] == [64, 128]  # C, the third tensor
    source = walk(None).get_kernel_source()
    assert source.count("tl::tma_store(") == 4  # 2 parts of 2 panels
    assert not _stores(walk({"tl.enable_tma_stores": False}))
    assert "tl::tma_store(" not in walk({"tl.enable_tma_stores": False}).get_kernel_source()


@needs_nvcc
def test_a_transposed_tile_and_attention_output_leave_by_tma():
    """A tile T.Parallel writes, and FlashAttention's O tile into a 4-D tensor (a box of
    one batch and head)."""
    from examples.flash_attention import flash_attention_kernel as fa

    flipped = transpose_through_shared.compile(M=100, N=77, target="cuda:sm_90a",
                                               pass_configs=ON)
    (spec,) = _stores(flipped)
    assert spec["box"] == [32, 32] and spec["shape"] == [77, 100]  # float32: 32 a panel
    attention = tilelab.compile(fa.fn(2, 4, 1000, 128), out_idx=fa.out_idx,
                                target="cuda:sm_90a", pass_configs=ON)
    (out,) = _stores(attention)
    assert out["shape"] == [2, 4, 1000, 128] and out["box"][2:] == [1, 1]
    assert out["panels"] == 2  # 128 columns of half: two 128-byte panels


def test_cpu_programs_are_unchanged():
    x = torch.randn(100, 77)
    torch.testing.assert_close(transpose_through_shared(x), x.T.contiguous())
    kernel = copy_out.compile(x, pass_configs=ON)
    assert all(p.name != "tilelab.TmaStores" for p in kernel.trace.passes)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["course", "two_groups_cols", "bf16", "trans_a"])
def test_gemm_results_stored_by_tma(name):
    """Edge tiles (1000 x 776) clipped by TMA's bounds, against PyTorch and the threads."""
    cfg = CONFIGS[name]
    a, b = _inputs(cfg, 1000, 776, 520, device="cuda")
    kernel = matmul.compile(a, b, pass_configs=ON, **cfg)
    assert _stores(kernel)
    out = kernel(a, b)
    torch.testing.assert_close(out.float(), _reference(cfg, a, b).float(), rtol=2e-2,
                               atol=2e-2)
    threads = matmul.compile(a, b, **cfg)
    assert not _stores(threads)
    torch.testing.assert_close(out, threads(a, b), rtol=0, atol=0)


@pytest.mark.gpu
def test_persistent_transposed_and_attention_results_stored_by_tma():
    from examples.flash_attention import flash_attention_kernel as fa
    from examples.persistent_gemm import persistent_gemm_kernel

    a = torch.randn(1000, 520, dtype=torch.float16, device="cuda")
    b = torch.randn(520, 776, dtype=torch.float16, device="cuda")
    walk = persistent_gemm_kernel.compile(a, b, blocks=7, pass_configs=ON)
    assert _stores(walk)
    torch.testing.assert_close(walk(a, b), (a.float() @ b.float()).half(), rtol=2e-2,
                               atol=2e-2)
    x = torch.randn(100, 77, device="cuda")
    flip = transpose_through_shared.compile(x, pass_configs=ON)
    assert _stores(flip)
    torch.testing.assert_close(flip(x), x.T.contiguous(), rtol=0, atol=0)
    y = torch.randn(1000, 776, device="cuda")
    torch.testing.assert_close(copy_out.compile(y, pass_configs=ON)(y), y, rtol=0, atol=0)
    x = torch.randn(1000, 776, dtype=torch.float16, device="cuda")
    torch.testing.assert_close(load_by_barrier_then_store.compile(x, pass_configs=ON)(x), x,
                               rtol=0, atol=0)
    twice = two_tiles_out.compile(y, pass_configs=ON)
    assert len(_stores(twice)) == 2
    same, doubled = twice(y)
    torch.testing.assert_close(same, y, rtol=0, atol=0)
    torch.testing.assert_close(doubled, y * 2, rtol=0, atol=0)
    q, k, v = (torch.randn(2, 4, 1000, 128, dtype=torch.float16, device="cuda")
               for _ in range(3))
    attention = tilelab.compile(fa.fn(2, 4, 1000, 128), out_idx=fa.out_idx, pass_configs=ON)
    assert _stores(attention)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(attention(q, k, v), expected, rtol=1e-2, atol=1e-2)
