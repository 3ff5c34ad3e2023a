"""The CUDA backend: tile programs to kernels for NVIDIA GPUs.

The pipeline: tilelab infers a layout for every fragment, lowers tile ops to
per-thread code (vectorized copies, warp-shuffle reductions, tensor-core
`mma.sync`), then TVM's passes flatten buffers, insert barriers between shared
memory writes and reads, merge shared allocations and split host from device
code. TVM's CUDA code generator prints the kernel as CUDA C; nvcc compiles it
with tilelab's device header (`include/tilelab.cuh`) into a cubin, which the
runtime (`tilelab.runtime`, no TVM needed) launches.
"""

from __future__ import annotations

import contextlib
import threading

from tvm import tirx

from ...passes.check_fragment_reads import CheckFragmentReads
from ...passes.insert_barriers import InsertBarriers
from ...passes.lower_tile_ops_to_threads import InferLayouts, LowerTileOpsToThreads
from ...passes.pipeline_loops import PipelineLoops
from ...passes.separate_shared_lifetimes import DropLifetimeMarkers, SeparateSharedLifetimes

PIPELINE_NAME = "tilelab_cuda"


def passes(program, on_plan, pipelines: list, vectorize: bool = True) -> list:
    """The CUDA pipeline, in order: tilelab's tile-level passes, then TVM's lowering."""
    import tvm.s_tir as s_tir

    T = tirx.transform  # noqa: N806
    plans: dict = {"swizzle": program.swizzle, "annotated": program.layouts}
    return [
        CheckFragmentReads(program.buffer_locations),
        PipelineLoops(pipelines),              # T.Pipelined: load ahead with cp.async
        InsertBarriers(),                      # __syncthreads where threads share a tile
        InferLayouts(plans, on_plan),          # a Fragment for every fragment buffer
        LowerTileOpsToThreads(plans),          # tile ops -> per-thread code
        s_tir.transform.LowerOpaqueBlock(),    # thread-bound loops -> kernel launch attributes
        T.FlattenBuffer(),
        T.BF16ComputeLegalize(),
        T.NarrowDataType(32),
        T.StmtSimplify(),                      # drop edge guards that always hold
        T.VectorizeLoop(vectorize),            # 16-byte loads and stores (or scalar loops)
        T.StorageRewrite(),
        T.UnrollLoop(),
        T.StmtSimplify(),
        T.RemoveNoOp(),
        T.CommonSubexprElim(),
        T.VerifyMemory(),
        T.AnnotateEntryFunc(),
        s_tir.transform.ThreadSync("shared"),      # __syncthreads between write and read
        s_tir.transform.ThreadSync("shared.dyn"),
        SeparateSharedLifetimes,                   # tiles that meet in a statement stay apart
        s_tir.transform.MergeSharedMemoryAllocations(),
        DropLifetimeMarkers,
        T.SplitHostDevice(),
        T.MakePackedAPI(),
        T.BF16StorageLegalize(),
    ]


def target(arch: str):
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")


def build(mod, program, arch: str, on_plan=None, pipelines: list | None = None,
          vectorize: bool = True):
    """Run the CUDA pipeline and TVM's code generator; returns the executable."""
    import tvm
    from tvm.s_tir.pipeline import finalize_device_passes, finalize_host_passes

    def factory():
        plans = pipelines if pipelines is not None else []
        return tvm.transform.Sequential(passes(program, on_plan, plans, vectorize),
                                        name=PIPELINE_NAME), \
            finalize_host_passes, finalize_device_passes

    tirx.compilation_pipeline.register_tir_pipeline(PIPELINE_NAME, factory)
    with source_only():
        return tvm.tirx.build(mod, target=target(arch), pipeline=PIPELINE_NAME)


# ---------------------------------------------------------------- who compiles the CUDA C
#
# On a machine with a GPU, TVM's CUDA runtime compiles the generated source the
# moment the code generator hands it over: it calls the global function
# `tvm_callback_cuda_compile` (NVRTC with TVM's own options), before tilelab
# ever sees the source. tilelab compiles the source itself (nvcc.py: its header,
# its flags, its error messages), so during tilelab's builds that callback answers
# with a marker instead of a binary. TVM keeps the source for `inspect_source()`
# and loads a module's binary only when one of its functions is called, which
# tilelab never does. Outside tilelab's builds the callback does what TVM's would.

_NOT_COMPILED = b"tilelab: this module's CUDA C is compiled by tilelab (backends/cuda/nvcc.py)"
_state = threading.local()
_guard_lock = threading.Lock()
_guard_installed = False


def _install_compile_guard() -> None:
    global _guard_installed
    with _guard_lock:
        if _guard_installed:
            return
        import tvm_ffi

        try:  # TVM's own callback registers itself when this module is imported
            import tvm.support.nvcc  # noqa: F401
        except ImportError:
            pass
        tvm_compile = tvm_ffi.get_global_func("tvm_callback_cuda_compile", allow_missing=True)

        def tvm_callback_cuda_compile(code):
            if getattr(_state, "source_only", False):
                return _NOT_COMPILED
            if tvm_compile is None:
                raise RuntimeError("no CUDA compiler registered with TVM")
            return tvm_compile(code)

        tvm_ffi.register_global_func("tvm_callback_cuda_compile", tvm_callback_cuda_compile,
                                     override=True)
        _guard_installed = True


@contextlib.contextmanager
def source_only():
    """Inside this block, TVM's CUDA builds produce source and compile nothing."""
    _install_compile_guard()
    previous = getattr(_state, "source_only", False)
    _state.source_only = True
    try:
        yield
    finally:
        _state.source_only = previous


def cuda_source(executable) -> str:
    """The CUDA C that TVM printed, with tilelab's header included."""
    source = executable.imports[0].inspect_source()
    return '#include "tilelab.cuh"\n' + source


def launch_config(device_mod) -> dict:
    """Kernel symbol, dynamic shared memory and parameter names of the device function."""
    import math

    from ...ir.tile_ops import is_buffer
    from ...language.dtypes import itemsize
    from ...passes._util import walk

    kernels = [(gv, f) for gv, f in device_mod.functions.items()
               if f.attrs is not None and "calling_conv" in f.attrs]
    if len(kernels) > 1:  # the launcher runs one kernel per program; never drop the others
        from ...errors import TileLabCompileError

        raise TileLabCompileError(
            f"this program launches {len(kernels)} kernels (one per `with T.Kernel`); the "
            "CUDA backend runs one kernel per program",
            hint="write each `with T.Kernel` block as its own @T.prim_func and call them in turn")
    gv, func = kernels[0]
    name = str(gv.name_hint)
    smem = [0]

    def visit(node):
        if isinstance(node, tirx.AllocBuffer) and node.buffer.scope() == "shared.dyn":
            # a lone tile may have been given a vector type (float32x4) by StorageRewrite
            base, _, lanes = str(node.buffer.dtype).partition("x")
            smem[0] += math.prod(int(s) for s in node.buffer.shape) * \
                itemsize(base) * int(lanes or 1)

    walk(func.body, tirx.AllocBuffer, visit)  # after merging: the one dynamic allocation
    params = [str(p.name) for p in func.params if not is_buffer(p)]
    return {"kernel_name": name, "dynamic_smem": smem[0], "param_names": params}
