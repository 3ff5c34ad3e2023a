"""Every key of PassConfigKey does what its name says; unknown keys are errors.

Each key is compiled with and without, and the difference is found in the
generated code (and the kernel still computes the right thing on the CPU).
TileLang's keys that tilelab does not implement are accepted with one warning.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def staged_copy(X):
    """Y = X + 1 through a shared tile: the copies move 16 bytes per thread when vectorized."""
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 256), threads=64) as block:
        tile = T.alloc_shared((256,), T.float32)
        T.copy(X[block * 256], tile)
        for i in T.Parallel(256):
            tile[i] = tile[i] + 1.0
        T.copy(tile, Y[block * 256])
    return Y


@tilelab.jit
def exponentials(X):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as block:
        for i in T.Parallel(128):
            if block * 128 + i < N:
                Y[block * 128 + i] = T.exp(X[block * 128 + i]) / (X[block * 128 + i] + 3.0)
    return Y


@tilelab.jit
def tile_product(A, B):
    """One 64x64x32 tile product: warpgroup MMA on sm_90a unless the key says no."""
    A: T.Tensor((64, 32), T.float16)
    B: T.Tensor((32, 64), T.float16)
    C = T.empty((64, 64), T.float32)
    with T.Kernel(1, threads=128):
        a, b = T.alloc_shared((64, 32), T.float16), T.alloc_shared((32, 64), T.float16)
        acc = T.alloc_fragment((64, 64), T.float32)
        T.copy(A, a)
        T.copy(B, b)
        T.gemm(a, b, acc, clear_accum=True)
        T.copy(acc, C)
    return C


def test_every_key_is_tested_here():
    tested = {"TL_ENABLE_FAST_MATH", "TL_DISABLE_VECTORIZE", "TL_INSTRUMENT_PIPELINE",
              "TL_DISABLE_WGMMA", "TL_DISABLE_COARSEN", "TL_DISABLE_WGMMA_OVERLAP",
              "TL_DISABLE_TMA_LOWER", "TL_DISABLE_WARP_SPECIALIZED",
              "TL_FORCE_WARP_SPECIALIZED", "TL_DISABLE_HEAVY_FIRST", "TL_DISABLE_STAGE_STORES",
              "TL_DISABLE_SETMAXNREG", "TL_ENABLE_WARPGROUP_TURNS",
              "TL_DISABLE_UNIFORM_SELECTS", "TL_SAFE_GLOBAL_ACCESS",
              "TL_ENABLE_INTRA_WARPGROUP_OVERLAP", "TL_DISABLE_THREAD_STORAGE_SYNC",
              "TL_DISABLE_ALIGNMENT_CHECK_ONCE", "TL_DISABLE_DEFERRED_ROW_SUMS",
              "TL_ENABLE_TMA_STORES", "TL_DISABLE_STMATRIX", "TL_DISABLE_TMA_MULTICAST"}
    assert {k.name for k in PassConfigKey} == tested


@needs_nvcc
def test_disable_tma_multicast_keeps_a_copy_of_the_tiles_per_block():
    """FlashAttention's neighbouring query blocks share K and V as a cluster unless asked
    not to (tests/test_clusters.py)."""
    from tests.test_clusters import _attention

    paired = _attention(1, 2, 512, 128).get_kernel_source()
    apart = _attention(1, 2, 512, 128, configs={
        PassConfigKey.TL_DISABLE_TMA_MULTICAST.value: True}).get_kernel_source()
    assert "__cluster_dims__(2, 1, 1)" in paired and "tl::tma_load_multicast" in paired
    assert "__cluster_dims__" not in apart and "tl::tma_load_multicast" not in apart


def test_safe_global_access_reads_zero_outside_a_tensor():
    from tests.test_safe_global_access import expected, gather_rows, inputs

    x, idx = inputs("cpu")
    program = gather_rows(tilelab.jit,
                          pass_configs={PassConfigKey.TL_SAFE_GLOBAL_ACCESS: True})
    torch.testing.assert_close(program(x, idx), expected(x, idx))


@needs_nvcc
def test_intra_warpgroup_overlap_rotates_the_split_attention_loop():
    from tests.test_warpgroup_turns import _attention

    assert "rotated" not in _attention().trace.pipelines[0]
    key = PassConfigKey.TL_ENABLE_INTRA_WARPGROUP_OVERLAP.value
    assert "wait_group_sync_aligned_1()" in _attention(configs={key: True}).get_kernel_source()


@needs_nvcc
def test_disable_stmatrix_stores_each_threads_accumulators_itself():
    """More in tests/test_stmatrix.py."""
    from tests.test_stmatrix import _gemm_through_shared

    a, b = torch.empty(128, 64, dtype=torch.float16), torch.empty(64, 128, dtype=torch.float16)
    on = _gemm_through_shared.compile(a, b, target="cuda:sm_90a").get_kernel_source()
    off = _gemm_through_shared.compile(
        a, b, target="cuda:sm_90a",
        pass_configs={PassConfigKey.TL_DISABLE_STMATRIX.value: True}).get_kernel_source()
    assert "tl::stmatrix_x4" in on and "tl::stmatrix_x4" not in off
    assert "*(half2*)" in off


@needs_nvcc
def test_disable_alignment_check_once_checks_before_every_gemm():
    """More in tests/test_aligned_tiles_once.py."""
    from tests.test_warpgroup_turns import _attention

    once = _attention().get_kernel_source()
    key = PassConfigKey.TL_DISABLE_ALIGNMENT_CHECK_ONCE.value
    every = _attention(configs={key: True}).get_kernel_source()
    assert every.count("tl::wgmma_check_aligned<") > once.count("tl::wgmma_check_aligned<") == 1


@needs_nvcc
@pytest.mark.parametrize("spelling", [PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC,
                                      "tl.disable_thread_storage_sync"])
def test_disable_thread_storage_sync_leaves_thread_code_the_programs_barriers(spelling):
    """More in tests/test_user_barriers.py."""
    from tests.test_user_barriers import REFUSED, exchange

    with pytest.raises(tilelab.TileLabCompileError, match=REFUSED):
        exchange.compile(2, target="cuda:sm_90a")
    source = exchange.compile(2, target="cuda:sm_90a", pass_configs={spelling: True}) \
        .get_kernel_source()
    assert source.count("__syncthreads()") == 2  # the two the program wrote


@needs_nvcc
def test_disable_heavy_first_starts_blocks_in_the_order_written():
    from tests.test_heavy_blocks_first import _attention

    assert "tl::backwards" in _attention(causal=True).get_kernel_source()
    source = _attention(True, configs={PassConfigKey.TL_DISABLE_HEAVY_FIRST: True}) \
        .get_kernel_source()
    assert "tl::backwards" not in source


@needs_nvcc
def test_disable_uniform_selects_masks_every_tile_at_every_element():
    from tests.test_heavy_blocks_first import _attention

    def uniform(kernel):
        return any(p.name == "tilelab.UniformSelects" and p.changed
                   for p in kernel.trace.passes)

    assert uniform(_attention(causal=True))
    assert not uniform(_attention(True, configs={PassConfigKey.TL_DISABLE_UNIFORM_SELECTS:
                                                 True}))


@needs_nvcc
def test_disable_stage_stores_stores_gemm_sums_from_registers():
    from tests.test_stage_stores import _course, _staged_tiles

    assert _staged_tiles(_course({}))
    direct = _course({}, {PassConfigKey.TL_DISABLE_STAGE_STORES.value: True})
    assert all(p.name != "tilelab.StageStores" for p in direct.trace.passes)
    assert "acc_staged" not in direct.get_kernel_source()


@needs_nvcc
def test_warpgroup_turns_are_asked_for_and_setmaxnreg_turned_off():
    from tests.test_warpgroup_turns import TURNS, _attention

    split = _attention().get_kernel_source()
    assert "tl::registers_up" in split and "tl::turn_" not in split
    assert "tl::turn_wait" in _attention(configs=TURNS).get_kernel_source()
    kept = _attention(configs={PassConfigKey.TL_DISABLE_SETMAXNREG.value: True})
    assert "tl::registers_" not in kept.get_kernel_source()


@needs_nvcc
def test_fast_math_uses_the_approximate_division():
    exact = exponentials.compile(N=1000, target="cuda:sm_90a").trace.code["ptx"]
    fast = exponentials.compile(N=1000, target="cuda:sm_90a", pass_configs={
        PassConfigKey.TL_ENABLE_FAST_MATH: True}).trace.code["ptx"]
    assert "div.rn.f32" in exact and "div.approx" not in exact
    assert "div.approx.ftz.f32" in fast and "div.rn.f32" not in fast


@needs_nvcc
@pytest.mark.parametrize("spelling", [PassConfigKey.TL_DISABLE_VECTORIZE, "tl.disable_vectorize",
                                      "tirx.disable_vectorize"])
def test_disable_vectorize_keeps_copies_scalar(spelling):
    vectorized = staged_copy.compile(N=1000, target="cuda:sm_90a").trace.code["cuda"]
    scalar = staged_copy.compile(N=1000, target="cuda:sm_90a",
                                 pass_configs={spelling: True}).trace.code["cuda"]
    assert re.search(r"\bfloat4\b", vectorized)
    assert not re.search(r"\bfloat[248]\b", scalar)


def test_disable_vectorize_on_the_cpu_computes_the_same():
    x = torch.randn(1000)
    kernel = staged_copy.compile(x, pass_configs={PassConfigKey.TL_DISABLE_VECTORIZE: True})
    torch.testing.assert_close(kernel(x), x + 1)
    assert "<4 x float>" not in kernel.trace.code["llvm"]


def test_instrument_pipeline_adds_the_timeline_output():
    from examples.gemm import gemm_kernel

    kernel = gemm_kernel.compile(M=64, N=64, K=64, target="cpu", pass_configs={
        PassConfigKey.TL_INSTRUMENT_PIPELINE: 1})
    assert [p["name"] for p in kernel.trace.params][-1] == "pipeline_timeline"
    a, b = (torch.randn(64, 64, dtype=torch.float16) for _ in range(2))
    c, timeline = kernel(a, b)  # `return C` names one output; the timeline comes with it
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)
    assert timeline.shape == (1, 2, 4) and timeline.dtype == torch.int64


def test_an_unknown_key_is_an_error_naming_the_known_ones():
    with pytest.raises(tilelab.TileLabCompileError) as info:
        staged_copy.compile(N=1000, pass_configs={"tl.enable_fast_maths": True})
    message = str(info.value)
    assert "unknown pass config 'tl.enable_fast_maths'" in message
    assert "TL_ENABLE_FAST_MATH" in message and "test_pass_configs.py" in message


def test_tilelang_keys_warn_once_and_compile():
    from tilelab import compiler

    compiler._warned_configs.discard("tl.disable_shuffle_elect")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        staged_copy.compile(N=1000, pass_configs={"tl.disable_shuffle_elect": True})
        staged_copy.compile(N=1001, pass_configs={"tl.disable_shuffle_elect": True})
    said = [str(w.message) for w in caught if "disable_shuffle_elect" in str(w.message)]
    assert len(said) == 1 and "no effect" in said[0]


@needs_nvcc
@pytest.mark.parametrize("spelling", [PassConfigKey.TL_DISABLE_WGMMA, "tl.disable_wgmma"])
def test_disable_wgmma_keeps_the_ampere_gemm(spelling):
    a, b = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    hopper = tile_product.compile(a, b, target="cuda:sm_90a").trace
    ampere = tile_product.compile(a, b, target="cuda:sm_90a", pass_configs={spelling: True}).trace
    assert "wgmma.mma_async" in hopper.code["ptx"] and "mma.sync" not in hopper.code["ptx"]
    assert "mma.sync" in ampere.code["ptx"] and "wgmma" not in ampere.code["ptx"]
    assert ampere.instructions[0]["why"] == "not wgmma: turned off by " \
        "PassConfigKey.TL_DISABLE_WGMMA"


@needs_nvcc
def test_disable_wgmma_overlap_waits_for_every_gemm():
    """The course GEMM's main loop only multiplies: on sm_90a each iteration leaves its MMAs
    in flight (wait_group 1), copies run num_stages - 2 tiles ahead, and one wait after the
    loop ends them; with the key, every T.gemm waits for its own (wait_group 0)."""
    from examples.gemm import gemm_kernel

    a = torch.empty(512, 256).half()
    b = torch.empty(256, 384).half()
    overlapped = gemm_kernel.compile(a, b, block_k=64, target="cuda:sm_90a").trace
    plain = gemm_kernel.compile(a, b, block_k=64, target="cuda:sm_90a", pass_configs={
        PassConfigKey.TL_DISABLE_WGMMA_OVERLAP: True}).trace
    assert "wgmma.wait_group.sync.aligned 1" in overlapped.code["ptx"]
    assert "wgmma.wait_group.sync.aligned 1" not in plain.code["ptx"]
    assert (overlapped.pipelines[0]["ahead"], plain.pipelines[0]["ahead"]) == (1, 2)
    assert "in flight" in overlapped.instructions[0]["why"]
    assert "in flight" not in plain.instructions[0]["why"]
    one_role = gemm_kernel.compile(a, b, block_k=64, target="cuda:sm_90a", pass_configs={
        PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}).trace
    assert one_role.pipelines[0]["ahead"] == 1
    loop = one_role.code["cuda"].split("for (int reduction_block")[1].split("\n  }\n")[0]
    assert loop.count("__syncthreads()") == 1  # the pipeline's own; the refill needs no other
    assert "wait_group_sync_aligned_0" not in loop


@needs_nvcc
def test_disable_warp_specialized_keeps_one_role():
    """On sm_90a the course GEMM's TMA loop, in 4 stages of 128x64 tiles (alone on its
    SM), is split between a producer warpgroup and the consumers
    (tests/test_warp_specialize.py): 128 threads more, no block-wide barrier in the loop.
    With the key, every thread waits for the copies and multiplies."""
    from examples.gemm import gemm_kernel

    a = torch.empty(512, 256).half()
    b = torch.empty(256, 384).half()
    split = gemm_kernel.compile(a, b, block_k=64, num_stages=4, target="cuda:sm_90a")
    one = gemm_kernel.compile(a, b, block_k=64, num_stages=4, target="cuda:sm_90a",
                              pass_configs={PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True})
    assert (split.launch["block"][0], one.launch["block"][0]) == (256, 128)
    assert split.trace.pipelines[0]["warp_specialized"]["consumer_threads"] == 128
    assert "warp_specialized" not in one.trace.pipelines[0]
    assert "tl::consumer_sync" in split.get_kernel_source()
    assert "tl::consumer_sync" not in one.get_kernel_source()


@needs_nvcc
def test_force_warp_specialized_splits_where_it_was_not_measured_to_pay():
    """The course GEMM's 128x128x32 tiles in 3 stages leave room for more blocks per SM, so
    by default its loop keeps one role; with the key a producer warpgroup is added anyway."""
    from examples.gemm import gemm_kernel

    a = torch.empty(512, 256).half()
    b = torch.empty(256, 384).half()
    default = gemm_kernel.compile(a, b, target="cuda:sm_90a")
    forced = gemm_kernel.compile(a, b, target="cuda:sm_90a", pass_configs={
        PassConfigKey.TL_FORCE_WARP_SPECIALIZED: True})
    assert (default.launch["block"][0], forced.launch["block"][0]) == (128, 256)
    assert "warp_specialized" in forced.trace.pipelines[0]


@needs_nvcc
def test_disable_tma_lower_copies_with_every_thread():
    """The course GEMM's main loop copies with TMA on sm_90a (tests/test_tma.py); with the
    key, every thread copies 16 bytes at a time with cp.async, as on Ampere."""
    from examples.gemm import gemm_kernel

    a = torch.empty(512, 256).half()
    b = torch.empty(256, 384).half()
    tma = gemm_kernel.compile(a, b, block_k=64, target="cuda:sm_90a")
    plain = gemm_kernel.compile(a, b, block_k=64, target="cuda:sm_90a", pass_configs={
        PassConfigKey.TL_DISABLE_TMA_LOWER: True})
    assert "cp.async.bulk.tensor" in tma.trace.code["ptx"] and "tensor_maps" in tma.launch
    assert "cp.async.bulk.tensor" not in plain.trace.code["ptx"]
    assert "cp.async.cg.shared.global" in plain.trace.code["ptx"]
    assert "tensor_maps" not in plain.launch


@needs_nvcc
def test_disable_coarsen_keeps_one_element_per_thread():
    from examples.vector_add import vector_add_kernel

    a = torch.empty(1 << 23)
    coarse = vector_add_kernel.compile(a, a, target="cuda:sm_90a").trace
    plain = vector_add_kernel.compile(a, a, target="cuda:sm_90a", pass_configs={
        PassConfigKey.TL_DISABLE_COARSEN: True}).trace
    assert coarse.resources["grid"] == [8192, 1, 1] and "float4" in coarse.code["cuda"]
    assert plain.resources["grid"] == [32768, 1, 1] and "float4" not in plain.code["cuda"]
    assert "tilelab.CoarsenBlocks" not in [p.name for p in plain.passes]


def test_disable_wgmma_on_the_cpu_computes_the_same():
    a, b = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    out = tile_product(a, b, target="cpu", pass_configs={PassConfigKey.TL_DISABLE_WGMMA: True})
    torch.testing.assert_close(out, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
