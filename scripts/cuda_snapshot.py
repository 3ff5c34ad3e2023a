"""Write the generated CUDA of every course and suite kernel to a folder, to diff refactors.

    python scripts/cuda_snapshot.py OUT_DIR [--nvcc]

Compiles, for "cuda:sm_90a" and with the compile cache off, every kernel of
bench/gpu_suite.py (its checks and benchmarks), the course kernels of
examples/*.py at the shapes tests/test_cuda_compile.py uses, and every kernel of
notebooks/solutions/*.py; writes `NAME.cu` (trace.code["cuda"]) and `NAME.json`
(the layouts and pipeline plans of the Trace, the grid, block and shared memory)
for each. A compiler change that
should not change the generated code is checked with `diff -r BEFORE AFTER`.

Without --nvcc the CUDA source is not assembled (nvcc takes most of the time and
does not change the source); --nvcc runs it as a compile does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ["TILELAB_DISABLE_CACHE"] = "1"
TARGET = "cuda:sm_90a"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def suite_kernels():
    """bench/gpu_suite.py's build list, each compiled as its `compile_kernel` does."""
    import gpu_suite

    import tilelab

    real_compile, real_jit_compile = tilelab.compile, tilelab.JITFunction.compile

    def with_target(fn):
        def call(*args, **kwargs):
            kwargs["target"] = TARGET if kwargs.get("target") == "cuda" else kwargs["target"]
            return fn(*args, **kwargs)
        return call

    for section, cases in (("check", gpu_suite.CHECKS), ("bench", gpu_suite.BENCH)):
        for case in cases:
            name, kind, sizes = case[:3]
            tilelab.compile = with_target(real_compile)
            tilelab.JITFunction.compile = with_target(real_jit_compile)
            try:
                yield f"suite_{section}_{name}", lambda k=kind, s=sizes: \
                    gpu_suite.compile_kernel(k, s, {})
            finally:
                tilelab.compile, tilelab.JITFunction.compile = real_compile, real_jit_compile


def example_kernels():
    """The course kernels at the small shapes with tails of tests/test_cuda_compile.py."""
    import tilelab
    import tilelab.language as T
    from examples.flash_attention import flash_attention_kernel as fa
    from examples.gemm import gemm_kernel
    from examples.gemm_bias_relu import gemm_bias_relu_kernel
    from examples.layer_norm import layer_norm_in_registers_kernel, layer_norm_kernel
    from examples.online_softmax import online_softmax_kernel
    from examples.rms_norm import rms_norm_kernel
    from examples.row_sum import row_sum_kernel
    from examples.softmax import softmax_kernel
    from examples.vector_add import vector_add_kernel

    t = TARGET
    yield "ex_vector_add", lambda: vector_add_kernel.compile(N=1000, target=t)
    yield "ex_row_sum", lambda: row_sum_kernel.compile(M=77, N=1000, target=t)
    yield "ex_row_sum_bm4", lambda: row_sum_kernel.compile(M=77, N=1000, block_m=4, target=t)
    yield "ex_softmax", lambda: softmax_kernel.compile(M=33, N=1024, target=t)
    yield "ex_layer_norm", lambda: layer_norm_kernel.compile(M=33, N=1024, target=t)
    yield "ex_layer_norm_registers", lambda: layer_norm_in_registers_kernel.compile(
        M=33, N=1024, target=t)
    yield "ex_rms_norm", lambda: rms_norm_kernel.compile(M=33, N=1024, target=t)
    yield "ex_gemm_fp16", lambda: gemm_kernel.compile(M=200, N=136, K=100, target=t)
    yield "ex_gemm_bf16", lambda: gemm_kernel.compile(M=200, N=136, K=100,
                                                      input_dtype=T.bfloat16, target=t)
    yield "ex_gemm_bias_relu", lambda: gemm_bias_relu_kernel.compile(M=200, N=136, K=100,
                                                                     target=t)
    yield "ex_online_softmax", lambda: online_softmax_kernel.compile(M=33, N=1000, target=t)
    for d in (64, 128):
        yield f"ex_flash_attention_d{d}", lambda d=d: tilelab.compile(
            fa.fn(1, 2, 100, d), out_idx=fa.out_idx, target=t, pass_configs=fa.pass_configs)
    yield "ex_flash_attention_causal", lambda: tilelab.compile(
        fa.fn(1, 2, 100, 64, causal=True), out_idx=fa.out_idx, target=t,
        pass_configs=fa.pass_configs)


def solution_kernels():
    """Every kernel of the course's solutions, at shapes with tails."""
    import tilelab

    folder = ROOT / "notebooks" / "solutions"
    s = {path.stem: _load(path, f"solution_{path.stem}") for path in sorted(folder.glob("*.py"))}
    t = TARGET
    yield "sol_make_scale", lambda: s["00_setup"].make_scale.compile(1000, 3.0, target=t)
    yield "sol_add_relu_scale", lambda: s["01_vector_add"].add_relu_scale.compile(N=1000,
                                                                                 target=t)
    yield "sol_row_max", lambda: s["02_reduce"].row_max.compile(M=77, N=1000, target=t)
    yield "sol_row_sum_tiled", lambda: s["02_reduce"].row_sum_tiled.compile(M=77, N=1000,
                                                                           target=t)
    yield "sol_stable_softmax", lambda: s["03_softmax"].stable_softmax.compile(M=33, N=1024,
                                                                              target=t)
    yield "sol_online_softmax", lambda: s["03_softmax"].online_softmax.compile(M=33, N=1000,
                                                                              target=t)
    yield "sol_gemm_residual", lambda: s["04_gemm"].gemm_residual.compile(M=200, N=136, K=100,
                                                                         target=t)
    yield "sol_add_layer_norm", lambda: s["05_layer_norm"].add_layer_norm.compile(
        M=33, N=1024, target=t)
    yield "sol_layer_norm_two_pass", lambda: s["05_layer_norm"].layer_norm_two_pass.compile(
        M=33, N=1024, target=t)
    yield "sol_add_rms_norm", lambda: s["06_rms_norm"].add_rms_norm.compile(M=33, N=1024,
                                                                           target=t)
    yield "sol_sliding_window", lambda: s["07_flash_attention"].sliding_window_attention.compile(
        1, 2, 100, 64, 32, target=t)
    yield "sol_make_clamp", lambda: s["08_debugging"].make_clamp.compile(1000, -1.0, 1.0,
                                                                        target=t)
    yield "sol_linear", lambda: s["08_debugging"].linear.compile(M=200, N=136, K=100, target=t)
    yield "sol_long_row_softmax", lambda: s["08_debugging"].long_row_softmax.compile(
        M=33, N=1000, target=t)
    del tilelab


def extra_kernels():
    """Tile ops the course uses little: prints, scalar atomics, fills of shared tiles."""
    import tilelab
    import tilelab.language as T
    from tests.kernels.transpose_shared import transpose_through_shared

    yield "extra_transpose_shared", lambda: transpose_through_shared.compile(M=100, N=77,
                                                                             target=TARGET)

    @T.prim_func
    def misc(X: T.Tensor((100, 64), T.float16), W: T.Tensor((64, 32), T.float16),
             Y: T.Tensor((100, 32), T.float32), S: T.Tensor((8,), T.float32)):
        with T.Kernel(T.ceildiv(100, 32), threads=128) as bx:
            x = T.alloc_shared((32, 64), T.float16)
            w = T.alloc_shared((64, 32), T.float16)
            acc = T.alloc_fragment((32, 32), T.float32)
            best = T.alloc_fragment((32,), T.float32)
            staged = T.alloc_shared((32, 32), T.float32)
            T.copy(X[bx * 32, 0], x)
            T.copy(W, w)
            T.fill(acc, 1.0)
            T.gemm(x, w, acc)
            T.fill(best, -1e30)
            T.reduce_max(acc, best, dim=1, clear=False)
            T.print(best, msg="best")
            T.print(bx, msg="block")
            T.copy(acc, staged)
            T.print(staged[0:2, 0:2], msg="staged")
            T.clear(staged)
            T.atomic_add(S[bx], 1.0)
            T.atomic_add(Y[bx * 32, 0], acc)

    yield "extra_misc_ops", lambda: tilelab.compile(misc, target=TARGET)


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.cu"), *out.glob("*.json"), *out.glob("*.error")]:
        old.unlink()
    if "--nvcc" not in sys.argv:
        from tilelab.backends.cuda import nvcc

        nvcc.compile_cuda = lambda source, arch, fast_math=False: {
            "cubin": b"\0", "ptx": "", "ptxas": "", "resources": {}}
    failures = 0
    for group in (suite_kernels, example_kernels, solution_kernels, extra_kernels):
        for name, build in group():
            started = time.perf_counter()
            try:
                kernel = build()
            except Exception as err:  # noqa: BLE001 - record it and go on
                failures += 1
                (out / f"{name}.error").write_text(f"{type(err).__name__}: {err}\n")
                print(f"{name:40} ERROR {type(err).__name__}: {str(err)[:200]}")
                continue
            trace = kernel.trace
            (out / f"{name}.cu").write_text(trace.code["cuda"])
            launch = {k: trace.resources.get(k) for k in ("grid", "block", "dynamic_smem_bytes")}
            (out / f"{name}.json").write_text(json.dumps(
                {"layouts": trace.layouts, "pipelines": trace.pipelines, "launch": launch},
                indent=1, sort_keys=True))
            print(f"{name:40} {time.perf_counter() - started:5.2f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
