"""The course kernels compiled for CUDA, without a GPU (CI has nvcc but no GPU).

Each course kernel of `examples/` is compiled the way bench/gpu_suite.py
compiles it (the course's own block sizes), for an Ampere (`cuda:sm_80`) and a
Hopper (`cuda:sm_90a`) target, on small shapes whose sizes are not multiples
of the block sizes. Nothing is launched: the tests check what the compiler
produced - CUDA C with a `__global__` kernel, a cubin, ptxas' resource report
(registers, no spills), the launch configuration, the tensor-core and
async-copy instructions of the GEMMs, the layouts and pipeline plans in the
Trace - and that the kernel survives export to a `.tilelab` file and back.

Each kernel is compiled once per architecture (a module-level cache), so the
module costs about a minute on two cores.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tilelab
import tilelab.language as T
from examples.flash_attention import flash_attention_kernel
from examples.gemm import gemm_kernel
from examples.gemm_bias_relu import gemm_bias_relu_kernel
from examples.layer_norm import layer_norm_kernel
from examples.online_softmax import online_softmax_kernel
from examples.rms_norm import rms_norm_kernel
from examples.row_sum import row_sum_kernel
from examples.softmax import softmax_kernel
from examples.vector_add import vector_add_kernel
from tests.cuda_source import loop_text
from tilelab.backends.cuda import SMALL_SPILL
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.runtime.artifact import load_artifact

if find_nvcc() is None:
    pytest.skip("compiling for CUDA needs nvcc, which was not found", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = ["cuda:sm_80", "cuda:sm_90a"]


def _flash_attention(shape, target):
    """The factory style, compiled as bench/gpu_suite.py does (with the jit's pass configs)."""
    program = flash_attention_kernel.fn(*shape)
    return tilelab.compile(program, out_idx=flash_attention_kernel.out_idx, target=target,
                           pass_configs=flash_attention_kernel.pass_configs)


# name -> (compile for a target, the shapes of the tensors it takes, in signature order).
# Row kernels (softmax, layer_norm, rms_norm) use N = 1024: with N = 1000 they do not
# compile for CUDA yet (see test_row_kernels_compile_with_a_partial_row).
KERNELS = {
    "vector_add": (lambda t: vector_add_kernel.compile(N=1000, target=t),
                   [(1000,), (1000,)]),
    "row_sum": (lambda t: row_sum_kernel.compile(M=77, N=1000, target=t), [(77, 1000)]),
    "softmax": (lambda t: softmax_kernel.compile(M=33, N=1024, target=t), [(33, 1024)]),
    "layer_norm": (lambda t: layer_norm_kernel.compile(M=33, N=1024, target=t),
                   [(33, 1024), (1024,), (1024,)]),
    "rms_norm": (lambda t: rms_norm_kernel.compile(M=33, N=1024, target=t),
                 [(33, 1024), (1024,)]),
    "gemm_fp16": (lambda t: gemm_kernel.compile(M=200, N=136, K=100, target=t),
                  [(200, 100), (100, 136)]),
    "gemm_bf16": (lambda t: gemm_kernel.compile(M=200, N=136, K=100, input_dtype=T.bfloat16,
                                                target=t),
                  [(200, 100), (100, 136)]),
    "gemm_bias_relu": (lambda t: gemm_bias_relu_kernel.compile(M=200, N=136, K=100, target=t),
                       [(200, 100), (100, 136), (136,)]),
    "online_softmax": (lambda t: online_softmax_kernel.compile(M=33, N=1000, target=t),
                       [(33, 1000)]),
    "flash_attention_d64": (lambda t: _flash_attention((1, 2, 100, 64), t),
                            [(1, 2, 100, 64)] * 3),
    "flash_attention_d128": (lambda t: _flash_attention((1, 2, 100, 128), t),
                             [(1, 2, 100, 128)] * 3),
}
GEMMS = ["gemm_fp16", "gemm_bf16", "gemm_bias_relu"]
TENSOR_CORE_KERNELS = GEMMS + ["flash_attention_d64", "flash_attention_d128"]


@functools.cache
def compiled(name: str, target: str) -> tilelab.Kernel:
    """Each kernel once per target for the whole module."""
    return KERNELS[name][0](target)


def cases(names):
    return [pytest.param(name, target, id=f"{name}-{target.partition(':')[2]}")
            for name in names for target in ARCHS]


@pytest.mark.parametrize("name, target", cases(KERNELS))
def test_course_kernel_compiles_for_cuda(name, target):
    kernel = compiled(name, target)
    arch = target.partition(":")[2]
    assert kernel.target == "cuda"
    assert [list(p.shape) for p in kernel.inputs] == [list(s) for s in KERNELS[name][1]]

    source = kernel.trace.code["cuda"]
    assert "__global__" in source
    assert kernel.get_kernel_source() == source
    assert isinstance(kernel.cubin, bytes) and len(kernel.cubin) > 0

    resources = kernel.trace.resources
    assert resources["registers"] > 0, resources
    assert resources["spill_stores_bytes"] == 0, f"{name} spills registers: {resources}"
    assert resources["arch"] == arch

    launch = kernel.launch
    assert launch["arch"] == arch
    assert len(launch["grid"]) == 3 and all(g >= 1 for g in launch["grid"])
    assert len(launch["block"]) == 3 and launch["block"][0] in (128, 256)
    assert isinstance(launch["dynamic_smem"], int) and launch["dynamic_smem"] >= 0
    # every tensor reaches the kernel: as a pointer, or only through its TMA descriptor
    by_tma = {m["tensor"] for m in launch.get("tensor_maps", [])}
    assert set(launch["arg_order"]) | by_tma == set(range(len(kernel.params)))
    assert resources["grid"] == launch["grid"] and resources["block"] == launch["block"]


@pytest.mark.parametrize("name, switches", [
    ("vector_add", []), ("gemm_fp16", ["TILELAB_FP16"]), ("gemm_bf16", ["TILELAB_BF16"])])
def test_the_header_brings_only_the_types_the_kernel_uses(name, switches):
    """tilelab.cuh includes cuda_fp16.h / cuda_bf16.h only behind a switch the source defines
    where TVM's code includes the header (nvcc parses them in 0.05 s and 0.1 s): an fp32
    kernel compiles without either."""
    source = compiled(name, "cuda:sm_90a").get_kernel_source()
    defined = [line.split()[1] for line in source.split('#include "tilelab.cuh"')[0].splitlines()]
    assert defined == switches


@pytest.mark.parametrize("name, target", cases(TENSOR_CORE_KERNELS))
def test_tensor_core_kernels_use_mma_and_ldmatrix(name, target):
    """Ampere: ldmatrix + mma.sync; Hopper: warpgroup MMA straight from shared memory."""
    kernel = compiled(name, target)
    source = kernel.trace.code["cuda"]
    if target.endswith("sm_90a"):
        assert "wgmma.mma_async" in kernel.trace.code["ptx"] and "tl::ldmatrix" not in source
    else:
        assert "tl::mma_m16n8k16" in source
        assert "tl::ldmatrix" in source


@pytest.mark.parametrize("name, target", cases(GEMMS))
def test_gemm_is_pipelined_with_cp_async(name, target):
    kernel = compiled(name, target)
    assert "tl::cp_async" in kernel.trace.code["cuda"]
    plans = kernel.trace.pipelines
    assert len(plans) == 1, plans
    plan = plans[0]
    assert plan["num_stages"] == 3 and plan["loop"] == "reduction_block"
    assert plan["slots"] == {"a_shared": 3, "b_shared": 3}
    # the two tile copies form one cp.async group, loaded ahead of the gemm
    assert len(plan["async_groups"]) == 1 and len(plan["async_groups"][0]) == 2
    assert launch_smem_holds_the_stages(kernel)


def launch_smem_holds_the_stages(kernel) -> bool:
    """3 stages of a 128×32 A tile and a 32×128 B tile, 2 bytes an element."""
    return kernel.launch["dynamic_smem"] >= 3 * 2 * (128 * 32 + 32 * 128)


@pytest.mark.parametrize("name, target", cases(GEMMS))
def test_gemm_accumulator_fragment_is_recorded(name, target):
    layouts = compiled(name, target).trace.layouts
    accumulator = layouts["c_fragment"]
    assert accumulator["kind"] == "fragment"
    assert accumulator["recipe"]["kind"] == ("wgmma_accumulator" if target == "cuda:sm_90a"
                                             else "accumulator")
    assert accumulator["shape"] == [128, 128] and accumulator["threads"] == 128


@pytest.mark.parametrize("name, target", cases(["flash_attention_d64", "flash_attention_d128"]))
def test_flash_attention_layouts_and_pipeline(name, target):
    trace = compiled(name, target).trace
    kinds = {buffer: layout["recipe"]["kind"] for buffer, layout in trace.layouts.items()
             if layout.get("kind") == "fragment"}
    hopper = "wgmma_" if target == "cuda:sm_90a" else ""
    assert kinds["scores"] == kinds["output"] == f"{hopper}accumulator"
    assert kinds["probabilities"] == f"{hopper}operand_a"
    assert [p["num_stages"] for p in trace.pipelines] == [2]


@pytest.mark.parametrize("name, target", cases(["flash_attention_d64", "gemm_fp16"]))
def test_a_pipelined_iteration_has_one_barrier(name, target):
    """The barrier at the top of each iteration orders the refill of a slot against both
    the reads of the iteration that used it and those of the one that will; TVM's
    ThreadSync does not see the refill (passes/hide_from_thread_sync.py) and adds none of
    its own."""
    source = compiled(name, target).trace.code["cuda"]
    loop = "key_block" if name.startswith("flash") else "reduction_block"
    body = loop_text(source, loop)
    assert "tl::cp_async<16>" in body or "tl::tma_load(" in body  # the refill is back in place
    assert body.count("__syncthreads()") == 1


def test_gemm_loop_keeps_one_iteration_of_mmas_in_flight():
    """sm_90a: wait_group 1 in the loop, wait_group 0 once after it (gemm_wait)."""
    source = compiled("gemm_fp16", "cuda:sm_90a").trace.code["cuda"]
    body = loop_text(source, "reduction_block")
    after = source.split(body)[1]
    assert "wait_group_sync_aligned_1();" in body and "aligned_0();" not in body
    assert after.index("wait_group_sync_aligned_0();") < after.index("C_ptr")


@pytest.mark.parametrize("name, target", cases(KERNELS))
def test_export_and_load_back(name, target, tmp_path):
    kernel = compiled(name, target)
    path = tmp_path / f"{name}.tilelab"
    kernel.export(path)
    artifact = load_artifact(path)
    assert artifact.name == kernel.name
    assert artifact.kernel_name == kernel.launch["kernel_name"]
    assert artifact.cubin == kernel.cubin
    assert list(artifact.grid) == kernel.launch["grid"]
    assert list(artifact.block) == kernel.launch["block"]
    assert artifact.dynamic_smem == kernel.launch["dynamic_smem"]
    assert artifact.arch == kernel.launch["arch"]
    assert artifact.arg_order == kernel.launch["arg_order"]
    assert [(p["name"], list(p["shape"]), p["dtype"], p["output"]) for p in artifact.params] == \
        [(p.name, list(p.shape), p.dtype, p.output) for p in kernel.params]
    assert artifact.source == kernel.trace.code["cuda"]
    trace = artifact.trace()
    assert trace.resources == kernel.trace.resources
    assert trace.layouts == kernel.trace.layouts and trace.pipelines == kernel.trace.pipelines


def test_cuda_kernel_rejects_cpu_tensors():
    """Calling a CUDA kernel with CPU tensors is a TileLabError, not a crash in the driver."""
    kernel = compiled("vector_add", "cuda:sm_80")
    a, b = torch.randn(1000), torch.randn(1000)
    with pytest.raises(tilelab.TileLabError, match="must be a CUDA tensor"):
        kernel(a, b)


def test_loaded_cuda_kernel_rejects_cpu_tensors(tmp_path):
    kernel = compiled("gemm_fp16", "cuda:sm_80")
    kernel.export(tmp_path / "gemm.tilelab")
    loaded = tilelab.load(tmp_path / "gemm.tilelab")
    assert loaded.target == "cuda" and loaded.trace.code["cuda"] == kernel.trace.code["cuda"]
    a, b = torch.randn(200, 100).half(), torch.randn(100, 136).half()
    with pytest.raises(tilelab.TileLabError, match="must be a CUDA tensor"):
        loaded(a, b)


NO_GPU_SCRIPT = textwrap.dedent("""
    import torch
    import tilelab
    from examples.vector_add import vector_add_kernel

    assert not torch.cuda.is_available()
    kernel = vector_add_kernel.compile(N=1000, target="cuda")
    assert kernel.target == "cuda" and kernel.launch["arch"] == "sm_90a", kernel.launch
    assert kernel.cubin and "__global__" in kernel.trace.code["cuda"]
    try:
        kernel(torch.randn(1000), torch.randn(1000))
    except tilelab.TileLabError as err:
        assert "must be a CUDA tensor" in str(err), err
    else:
        raise AssertionError("a CPU tensor was accepted")
    print("ok")
""")


def test_compiling_for_cuda_needs_no_gpu(tmp_path):
    """With every GPU hidden, target='cuda' still compiles (for Hopper, sm_90a)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TILELAB_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", NO_GPU_SCRIPT], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


@pytest.mark.parametrize("kernel", [softmax_kernel, layer_norm_kernel, rms_norm_kernel],
                         ids=["softmax", "layer_norm", "rms_norm"])
def test_row_kernels_compile_with_a_partial_row(kernel):
    compiled_kernel = kernel.compile(M=33, N=1000, target="cuda:sm_80")
    assert compiled_kernel.trace.resources["spill_stores_bytes"] == 0


@pytest.mark.parametrize("kernel, sizes", [
    (row_sum_kernel, dict(M=29, N=50, block_m=8)),
    (softmax_kernel, dict(M=21, N=77, block_m=4)),
    (layer_norm_kernel, dict(M=13, N=96, block_m=4)),
    (rms_norm_kernel, dict(M=19, N=72, block_m=8)),
], ids=["row_sum", "softmax", "layer_norm", "rms_norm"])
def test_row_kernels_compile_with_several_rows_per_block(kernel, sizes):
    compiled_kernel = kernel.compile(**sizes, target="cuda:sm_80")
    assert compiled_kernel.trace.resources["spill_stores_bytes"] == 0


def make_two_loops_one_tile(M, N):
    """Two pipelined loops over the columns share one shared tile (as online softmax might)."""

    @T.prim_func
    def two_passes(X: T.Tensor((M, N), T.float32), Y: T.Tensor((M, N), T.float32)):
        with T.Kernel(M, threads=128) as row:
            tile = T.alloc_shared((1, 128), T.float32)
            total = T.alloc_fragment((1,), T.float32)
            part = T.alloc_fragment((1,), T.float32)
            values = T.alloc_fragment((1, 128), T.float32)
            T.clear(total)
            for c in T.Pipelined(T.ceildiv(N, 128), num_stages=2):
                T.copy(X[row, c * 128], tile)
                T.copy(tile, values)
                T.reduce_sum(values, part, dim=1)
                total[0] = total[0] + part[0]
            for c in T.Pipelined(T.ceildiv(N, 128), num_stages=2):
                T.copy(X[row, c * 128], tile)
                T.copy(tile, values)
                for i, j in T.Parallel(1, 128):
                    values[i, j] = values[i, j] / total[0]
                T.copy(values, Y[row, c * 128])

    return two_passes


def test_a_tile_shared_by_two_pipelined_loops_keeps_one_slot():
    """Staging a tile into slots is only safe when no other code uses it: here it stays put."""
    kernel = tilelab.compile(make_two_loops_one_tile(3, 300), out_idx=[1], target="cuda:sm_90a")
    assert kernel.cubin
    for plan in kernel.trace.pipelines:
        assert "tile" not in plan["slots"]
        assert all(s["role"] == "compute" for s in plan["statements"])
    x = torch.randn(3, 300)
    cpu = tilelab.compile(make_two_loops_one_tile(3, 300), out_idx=[1], target="cpu")
    # a float32 sum of 300 terms: the loop's order and PyTorch's differ by ~1e-5 relative
    torch.testing.assert_close(cpu(x), x / x.sum(-1, keepdim=True), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- who compiles the CUDA C


def test_tvm_compiles_no_cuda_during_tilelab_builds():
    """On a GPU machine TVM would compile the CUDA source itself (its callback, its
    options) the moment the code generator returns it; tilelab's builds answer that
    callback with a marker, so only tilelab's nvcc step compiles."""
    import tvm_ffi

    from tilelab.backends.cuda import source_only

    with source_only():
        answer = tvm_ffi.get_global_func("tvm_callback_cuda_compile")("this is not CUDA")
    assert answer.startswith(b"tilelab:")
    # outside tilelab's builds the callback is TVM's again (it would try to compile)
    outside = tvm_ffi.get_global_func("tvm_callback_cuda_compile")
    with pytest.raises(Exception):  # noqa: B017 - TVM's compiler rejects the text
        outside("this is not CUDA")


def test_a_rejected_device_compile_shows_the_first_error_and_the_generated_line():
    from tilelab.backends.cuda.nvcc import first_errors

    source = "#include <x.h>\n__global__ void k(float* a) {\n  a[0] = undefined_name;\n}\n"
    log = ("/usr/local/cuda/include/cuda_fp16.hpp(1): warning #20: a header warning\n" * 40 +
           "kernel.cu(3): error: identifier \"undefined_name\" is undefined\n\n"
           "1 error detected in the compilation of \"kernel.cu\".\n")
    shown = first_errors(log, source)
    assert shown.splitlines() == ['  kernel.cu:3: error: identifier "undefined_name" is undefined',
                                  "      a[0] = undefined_name;"]


def test_fragments_too_large_for_the_threads_say_so():
    """ptxas' failed register allocation is the program's fragments outgrowing its
    threads (a 128 x 256 float32 accumulator on 128 threads: 256 registers each), said in
    those words with ptxas' own line (difftest --family hopper, seed 0, program 640)."""
    from tilelab.backends.cuda.nvcc import _too_many_registers, first_errors

    log = ("ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions "
           "are serialized\nptxas fatal   : (C7600) Register allocation failed with register "
           "count of '255'. Compile the program with a higher register target\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    assert first_errors(log, "").splitlines() == [
        "  ptxas fatal   : (C7600) Register allocation failed with register count of '255'. "
        "Compile the program with a higher register target"]
    assert "more threads" in _too_many_registers(log) and not _too_many_registers("other")
    from tilelab.errors import TileLabCompileError

    # with a check before each T.gemm, as when difftest found it; checked once per kernel
    # (the default) ptxas fits the program by spilling 5 KB a thread
    every = {"tl.disable_alignment_check_once": True}
    with pytest.raises(TileLabCompileError, match="needs more registers than a GPU thread"):
        tilelab.compile(_wider_than_its_threads(), target="cuda:sm_90a", pass_configs=every)


def _wider_than_its_threads():
    """difftest --family hopper, seed 0, program 640, shrunk: 128 x 256 float32 results on
    128 threads, twice, with A from registers."""
    @T.prim_func
    def wide(X0: T.Tensor((280, 56), T.bfloat16), X1: T.Tensor((512, 56), T.bfloat16),
             X2: T.Tensor((512,), T.bfloat16), Y1: T.Tensor((280, 512), T.float32),
             Y2: T.Tensor((280, 512), T.float32)):
        with T.Kernel(2, 3, threads=128) as (bx, by):
            s0 = T.alloc_shared((128, 32), T.bfloat16)
            s1 = T.alloc_shared((256, 32), T.bfloat16)
            f0 = T.alloc_fragment((128, 256), T.float32)
            f1 = T.alloc_fragment((128, 32), T.bfloat16)
            s2 = T.alloc_shared((256,), T.bfloat16)
            f2 = T.alloc_fragment((128, 256), T.float32)
            for k in T.Pipelined(2, num_stages=4):
                T.copy(X0[by * 128, k * 32], s0)
                T.copy(X1[bx * 256, k * 32], s1)
                T.copy(s0, f1)
                T.gemm(f1, s1, f0, transpose_B=True, policy=T.GemmWarpPolicy.FullCol,
                       clear_accum=True)
            T.copy(X2[bx * 256], s2)
            for i, j in T.Parallel(128, 256):
                f2[i, j] = f0[i, j] * 0.5 + s2[j]
            T.copy(f0, Y1[by * 128, bx * 256])
            T.copy(f2, Y2[by * 128, bx * 256])

    return wide


def test_nvcc_errors_reach_the_user_at_the_kernel(monkeypatch):
    """A device compile failure names the user's kernel and nvcc's first error, never a
    blank or NUL message."""
    from tilelab.backends.cuda import nvcc

    real = nvcc.compile_cuda

    def broken(source, arch, fast_math=False):
        return real(source.replace("extern \"C\" __global__", "extern \"C\" __global__ oops",
                                   1), arch, fast_math)

    monkeypatch.setattr(nvcc, "compile_cuda", broken)
    monkeypatch.setenv("TILELAB_DISABLE_CACHE", "1")
    with pytest.raises(tilelab.TileLabCompileError) as info:  # sizes no other test compiles
        vector_add_kernel.compile(N=1237, target="cuda:sm_90a")
    message = str(info.value)
    assert "vector_add.py" in message and "nvcc rejected the generated CUDA code" in message
    assert "kernel.cu:" in message and "error" in message and "\x00" not in message


def test_shared_tiles_that_meet_in_one_statement_get_their_own_bytes():
    """`flipped[j, i] = tile[i, j]` reads one tile for the last time and writes the other
    for the first: the merged shared memory must keep them at different offsets."""
    import re

    from tests.kernels.transpose_shared import transpose_through_shared

    kernel = transpose_through_shared.compile(M=100, N=77, target="cuda:sm_90a")
    cuda = kernel.trace.code["cuda"]
    assert "__tilelab_lifetime_marker" not in cuda
    assert kernel.launch["dynamic_smem"] == 2 * 32 * 32 * 4  # two tiles, side by side
    # the transposed stores land 1024 floats past the loads they copy
    assert re.search(r"\+ 1024\)\)", cuda)
    a = torch.randn(100, 77)
    torch.testing.assert_close(transpose_through_shared(a), a.T.contiguous())  # the CPU too


def test_swizzled_columns_of_the_first_chunks_flatten():
    """Differential tester, seeds 4311 #140 and 4301 #118: TVM's FlattenBuffer divided by
    zero on a swizzled column written as `chunk - chunk % 8` (c * 8 - c % 8 * 8, c < 8); both
    layouts now write the chunk's group as `chunk // 8 * 8`. On the CPU, against torch."""
    from tests.kernels import small_swizzle_groups as k

    transposed = k.transposed_through_a_register.compile(
        torch.empty(64, 64, dtype=torch.float16, device="meta"), target="cuda:sm_90a")
    assert transposed.trace.layouts["s0"]["kind"] == "swizzled"
    panels = k.part_of_a_float32_tile.compile(
        torch.empty(64, 8, device="meta"), target="cuda:sm_90a",
        pass_configs={"tl.enable_tma_stores": True})
    assert panels.trace.layouts["s2"]["kind"] == "wgmma_panels"
    x = torch.randn(64, 64).half()
    torch.testing.assert_close(k.transposed_through_a_register(x), k.expected_transposed(x))
    x = torch.randn(64, 8)
    torch.testing.assert_close(k.part_of_a_float32_tile(x), k.expected_part(x))


def test_copies_to_and_from_part_of_a_fragment_compile_and_run_on_the_cpu():
    """The CUDA lowering copies only the region (it once copied the whole fragment,
    writing past the shared tile); the CPU backend agrees with torch."""
    from tests.kernels import fragment_regions as k

    for kernel, expected in ((k.fragment_region_to_shared, k.expected_to_shared),
                             (k.fragment_regions_between_fragments,
                              k.expected_between_fragments)):
        compiled = kernel.compile(M=100, N=77, target="cuda:sm_90a")
        assert compiled.launch["dynamic_smem"] <= 2 * 32 * 32 * 4
        a = torch.randn(100, 77)
        torch.testing.assert_close(kernel(a), expected(a))
    cuda = k.fragment_region_to_shared.compile(M=100, N=77, target="cuda:sm_90a").trace.code[
        "cuda"]
    # thread t keeps row t // 4 of the fragment: only rows 4..27 (threads 16..111) store
    assert "(16 <= ((int)threadIdx.x)) && (((int)threadIdx.x) < 112)" in cuda, cuda


def test_a_branch_on_a_read_only_tensor_holds_barriers():
    """`if Flags[bx] > 0:` around a loop over shared tiles is taken by whole blocks (the
    kernel never writes Flags): TVM's ThreadSync may put its barrier inside."""
    from tests.kernels import fragment_regions as k

    compiled = k.reverse_flagged_tiles.compile(N=100, G=4, target="cuda:sm_90a")
    assert "__syncthreads" in compiled.trace.code["cuda"]
    a, flags = torch.randn(100), torch.tensor([1, 0, 2, -1], dtype=torch.int32)
    torch.testing.assert_close(k.reverse_flagged_tiles(a, flags),
                               k.expected_reverse_flagged(a, flags))


def test_register_spills_are_a_warning_at_the_kernel(monkeypatch):
    """ptxas keeps what does not fit in registers in local memory: the user is told why,
    at the kernel, and the warning stays with the Trace (it comes again from the cache)."""
    import warnings

    from tests.kernels.fragment_regions import wide_softmax

    monkeypatch.setenv("TILELAB_DISABLE_CACHE", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = wide_softmax.compile(M=64, target="cuda:sm_90a")
    assert kernel.trace.resources["spill_stores_bytes"] > 0
    (message,) = [str(w.message) for w in caught if "spills, slow" in str(w.message)]
    assert "use more threads or smaller fragments" in message
    assert message in kernel.trace.warnings
    a = torch.randn(64, 512)
    torch.testing.assert_close(wide_softmax(a), torch.softmax(a, dim=1))  # the CPU: no spill


@tilelab.jit
def ignores_its_second_input(X, Unused):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    Unused: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as block:
        for i in T.Parallel(128):
            if block * 128 + i < N:
                Y[block * 128 + i] = X[block * 128 + i] * 2.0
    return Y


def test_a_tensor_the_kernel_never_touches_is_left_out_of_the_launch(tmp_path):
    """The code generator drops parameters a kernel does not use (an exercise's skeleton
    often ignores one); the launch passes only the tensors the kernel takes."""
    kernel = ignores_its_second_input.compile(N=1000, target="cuda:sm_90a")
    assert kernel.launch["arg_order"] == [0, 2]  # X and the output Y; not Unused
    kernel.export(tmp_path / "k.tilelab")
    loaded = load_artifact(tmp_path / "k.tilelab")
    assert loaded.arg_order == [0, 2]
    x = torch.randn(1000)
    torch.testing.assert_close(ignores_its_second_input(x, x), x * 2)  # and on the CPU


def test_two_warpgroups_carry_a_128x256_gemm_tile_without_spills():
    """256 threads: each warpgroup takes half of the 128×256 accumulator (128 columns,
    two m64n128 MMAs per k-step), as one warpgroup's registers could not hold it all."""
    kernel = gemm_kernel.compile(M=1000, N=1000, K=1000, block_n=256, block_k=64,
                                 num_stages=3, threads=256, target="cuda:sm_90a")
    assert "m64n128k16" in kernel.trace.code["cuda"]
    resources = kernel.trace.resources
    assert resources["spill_stores_bytes"] == 0 and resources["registers"] <= 168, resources
    assert kernel.launch["block"][0] == 256
    assert kernel.trace.layouts["c_fragment"]["threads"] == 256


# ---------------------------------------------------------------- occupancy


def test_blocks_per_sm_counts_each_resource():
    from tilelab.backends.cuda import blocks_per_sm

    # 132 registers a thread: 17 units of 8, 4352 a warp, 34816 a block of 8 warps
    assert blocks_per_sm("sm_90a", 256, 99328, 132) == {
        "registers": 1, "shared memory": 2, "threads": 8}
    assert blocks_per_sm("sm_90a", 256, 99328, 128)["registers"] == 2
    assert blocks_per_sm("sm_86", 128, 0, 32)["threads"] == 12


def test_a_few_registers_too_many_are_trimmed_for_a_second_block():
    """Causal attention at 128x64 with 8 warps: 140 registers would leave one block per SM
    where shared memory has room for two; compiled again with __launch_bounds__(256, 2),
    ptxas fits 128, spilling 8 bytes - few enough to be worth the second block (0.71x ->
    0.85x SDPA causal on the H200 when it first fitted without spills; with the mask decided
    per tile, 1.250 ms against 1.292 ms with no spills and the mask tested everywhere)."""
    program = flash_attention_kernel.fn(4, 32, 4096, 128, causal=True, block_m=128,
                                        threads=256)
    kernel = tilelab.compile(program, out_idx=flash_attention_kernel.out_idx,
                             target="cuda:sm_90a",
                             pass_configs=flash_attention_kernel.pass_configs)
    resources = kernel.trace.resources
    assert "__launch_bounds__(256, 2)" in kernel.get_kernel_source()
    assert resources["registers"] <= 128
    assert resources.get("spill_stores_bytes", 0) <= SMALL_SPILL
    assert "__launch_bounds__(256, 2)" in resources["occupancy"]
    small = gemm_kernel.compile(M=200, N=136, K=100, target="cuda:sm_90a")  # fits already
    assert "occupancy" not in small.trace.resources
    assert ", 2)" not in small.get_kernel_source().split("__launch_bounds__")[1][:12]


def test_the_occupancy_repair_keeps_the_first_build_unless_the_second_fits():
    """A second build that ptxas refuses (too few registers for an instruction) or that
    spills more than a few bytes is dropped; one that fits replaces the first."""
    from tilelab.backends.cuda import fit_registers
    from tilelab.errors import TileLabCompileError

    source = ('extern "C" __global__ void __launch_bounds__(256) k();\n'
              'extern "C" __global__ void __launch_bounds__(256) k() {}\n')
    first = {"resources": {"registers": 132}}
    config = {"threads": 256, "dynamic_smem": 99328, "static_smem": 0}

    def refused(_source):
        raise TileLabCompileError("ptxas: insufficient registers (56) to compile an instruction")

    def spills(_source):
        return {"resources": {"registers": 128, "spill_stores_bytes": 1268}}

    def spills_a_little(_source):  # FlashAttention d128, 128x64, 8 warps
        return {"resources": {"registers": 128, "spill_stores_bytes": 32,
                              "spill_loads_bytes": 40}}

    def fits(bounded):
        assert bounded.count("__launch_bounds__(256, 2)") == 2  # the declaration too
        return {"resources": {"registers": 128}}

    assert fit_registers(source, first, config, "sm_90a", refused) == (source, first, None)
    assert fit_registers(source, first, config, "sm_90a", spills) == (source, first, None)
    kept = fit_registers(source, first, config, "sm_90a", spills_a_little)
    assert "32 bytes spilled" in kept[2] and "__launch_bounds__(256, 2)" in kept[0]
    bounded, second, why = fit_registers(source, first, config, "sm_90a", fits)
    assert second["resources"]["registers"] == 128 and "at most 128 registers" in why
    small = dict(first, resources={"registers": 120})  # two blocks fit already
    assert fit_registers(source, small, config, "sm_90a", fits)[2] is None
    # more shared memory than an SM has (the check before the repair stops such a block,
    # but the repair must not divide by its zero blocks either)
    large = dict(config, dynamic_smem=300 * 1024)
    assert fit_registers(source, first, large, "sm_90a", fits) == (source, first, None)
