"""The CPU backend: tile ops become loops, TVM's LLVM target makes machine code.

It exists so that anyone can write, check and study tile programs without a
GPU. Blocks run in parallel over the cores; tensors are passed zero-copy
through DLPack (torch CPU tensors or numpy arrays).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from tvm import tirx

from ...ir.dtypes import is_float8
from ...ops._lowering import where_text
from ...passes.check_bounds import MARKER, CheckAccesses
from ...passes.check_fragment_reads import CheckFragmentReads
from ...passes.check_loop_bounds import CheckLoopBounds
from ...passes.float8_as_bytes import Float8AsBytes
from ...passes.kernel_to_cpu_loops import KernelToCPULoops
from ...passes.lower_tile_ops_to_loops import LowerTileOpsToLoops
from ...passes.packed_int4 import PackedInt4, has_packed
from ...passes.role_turns import RoleTurns, has_waits
from ...passes.round_bfloat16 import RoundBFloat16
from ...passes.safe_global_access import SafeGlobalAccess
from ...passes.thread_code import MarkThreadCode, ThreadLoops, takes_thread_index
from .. import Backend, CompiledArtifact, register_pipeline, run_pipeline

PIPELINE_NAME = "tilelab_cpu"


def passes(program, vectorize: bool = True, safe_global: bool = False) -> list:
    """The CPU pipeline, in order: tilelab's tile-level passes, then TVM's lowering.
    `safe_global`: global tensors read as 0 and are not written outside their shapes."""
    T = tirx.transform  # noqa: N806
    threads = takes_thread_index(program.func)  # code written for one thread
    return [
        *([PackedInt4] if has_packed(program.func) else []),  # int4: tensors in bytes
        *([SafeGlobalAccess()] if safe_global else []),  # TileLang's rule for edges
        CheckLoopBounds(program.source.location(program.source.node)),  # past a tile's end
        *([MarkThreadCode()] if threads else []),  # code each thread runs for itself
        # fragments and outputs read before written?
        CheckFragmentReads(program.buffer_locations,
                           {p.name: p.location for p in program.params if p.output}),
        *([RoleTurns] if has_waits(program.func) else []),  # warp roles that wait: by turns
        LowerTileOpsToLoops,              # each tile op -> the loop nest that defines it
        *([ThreadLoops()] if threads else []),  # ... and thread code: a loop over threads
        *([Float8AsBytes] if _has_float8(program) else []),  # float8 kept as bytes
        CheckAccesses(_where(program)),   # out-of-bounds accesses, division by zero: errors
        KernelToCPULoops(program.has_atomics),  # blocks -> a parallel loop over the cores
        RoundBFloat16,                    # bfloat16 rounded after each operation, as on a GPU
        T.StmtSimplify(),                 # drop bounds checks that always hold
        T.FlattenBuffer(),                # n-d buffers -> 1-d arrays
        T.BF16ComputeLegalize(),          # bfloat16 arithmetic in float32 (rounded above)
        T.NarrowDataType(32),
        T.VectorizeLoop(vectorize),       # False: vector loops become scalar loops
        T.UnrollLoop(),
        T.StmtSimplify(),
        T.CommonSubexprElim(),
        T.VerifyMemory(),
        T.AnnotateEntryFunc(),
        T.SplitHostDevice(),
        T.MakePackedAPI(),                # the calling convention TVM's runtime uses
        T.BF16StorageLegalize(),
    ]


def _has_float8(program) -> bool:
    """Does the program have a float8 tensor or tile (passes/float8_as_bytes.py)?"""
    from ...ir.visit import walk

    found = [str(p.dtype) for p in program.params]
    walk(program.func.body, tirx.AllocBuffer, lambda node: found.append(str(node.buffer.dtype)))
    return any(is_float8(dtype) for dtype in found)


def _where(program) -> str:
    """The kernel's definition, for checks of accesses that carry no line of their own."""
    return where_text(program.source.location(program.source.node))


def host_target():
    """LLVM for this machine's CPU, so that its vector and fp16-conversion instructions are
    used (the compile cache is per machine; the key includes this CPU's name).

    Without AVX-512 on x86: LLVM 22 (TVM 0.27's) miscompiles a vectorized loop whose
    tail stores one narrowed element (bf16 outputs of 8k+1 elements): the AVX-512
    truncating masked store of one lane becomes a 4-byte scalar store, and the
    element after the tensor is overwritten (tests/test_cpu_backend_stores.py). AVX2
    has no such store; the CPU backend is there for right answers first."""
    import tvm
    from tvm.target import codegen

    return tvm.target.Target({"kind": "llvm", "mcpu": codegen.llvm_get_system_cpu(),
                              "mattr": _cpu_features()})


def _cpu_features() -> list[str]:
    import platform

    return ["-avx512f"] if platform.machine() in ("x86_64", "AMD64") else []


def llvm_ir(executable) -> str:
    try:
        return executable.inspect_source("ll")
    except Exception:  # noqa: BLE001 - source text is optional
        return ""


def export(executable, path: Path) -> None:
    executable.export_library(str(path))


class CPURunner:
    """Calls a built CPU kernel with torch CPU tensors or numpy arrays, zero-copy. Float8
    tensors go in as their bytes (passes/float8_as_bytes.py)."""

    def __init__(self, module, name: str, params=()):
        self.function = module[name]
        self.as_bytes = [is_float8(p.dtype) for p in params]

    @staticmethod
    def load(path: Path, name: str, params=()) -> CPURunner:
        import tvm

        return CPURunner(tvm.runtime.load_module(str(path)), name, params)

    def __call__(self, *arrays) -> None:
        import tvm_ffi

        if any(self.as_bytes):
            import torch

            arrays = [a.view(torch.uint8) if i < len(self.as_bytes) and self.as_bytes[i] else a
                      for i, a in enumerate(arrays)]
        try:
            self.function(*(tvm_ffi.from_dlpack(a) for a in arrays))
        except Exception as err:  # noqa: BLE001 - only our own checks' reports are converted
            report = next((line for line in str(err).splitlines() if MARKER in line), None)
            if report is None:
                raise
            raise _check_error(report) from None


def _check_error(report: str):
    """The TileLabError of a failed access check: `tilelab-check|file|line|col|message`."""
    from ...errors import SourceLocation, TileLabError

    _, filename, line, col, message = report[report.index(MARKER):].split("|", 4)
    location = SourceLocation(filename, int(line), int(col))
    if message.startswith("T.device_assert"):  # ops/device_assert.py
        hint = ("the condition was false where this reports it first; the kernel ran on "
                "(on a GPU each thread that finds it false prints the message)")
    elif message.startswith("T.barrier_wait: every"):  # passes/role_turns.py
        hint = ("the roles took turns, each running until it waited, and each now waits "
                "for a phase no arrival completes: check the parities (a fresh barrier's "
                "wait for parity 1 returns at once, for parity 0 after the first phase) "
                "and the arrival counts")
    elif message.startswith("T.barrier"):  # ops/barrier.py
        hint = ("a wait outside side-by-side T.ws roles (every thread's, or a role alone) "
                "must find its phase complete when it is reached; and a phase takes as "
                "many arrivals as the barrier expects, no more")
    else:
        hint = "the kernel skipped this statement; " + (
            "fix the index or its guard (TILELAB_CHECK_BOUNDS=0 turns bounds checks off)"
            if message.startswith("index") else "guard the division")
    return TileLabError(message, location, hint=hint)


def warn_about_shared_memory(program) -> None:
    """The CPU runs a block of any size; a GPU block has at most 227 KB of shared memory.
    Tiles whose uses do not overlap share memory on the GPU, so a larger sum may still fit:
    a warning, and the CUDA compile decides."""
    import warnings

    from ...errors import TileLabWarning
    from ...ir.dtypes import itemsize
    from ...ir.visit import walk
    from ...language.primitives import MAX_SHARED_BYTES

    tiles = []
    walk(program.func.body, tirx.AllocBuffer, lambda node: tiles.append(node.buffer)
         if node.buffer.scope().startswith("shared") else None)
    total = sum(math.prod(int(n) for n in b.shape) * itemsize(str(b.dtype)) for b in tiles)
    if total > MAX_SHARED_BYTES:
        warnings.warn(TileLabWarning(
            f"{program.source.location(program.source.node)}: the shared tiles of "
            f"{program.name} add up to {total // 1024} KB, more than a GPU block has "
            f"({MAX_SHARED_BYTES // 1024} KB) unless tiles whose uses do not overlap share "
            "memory; compile for CUDA to know (it checks the block's real total)"),
            stacklevel=2)


class CPUBackend(Backend):
    """Loops built by LLVM for this machine; the reference semantics of every kernel."""

    kind = "cpu"

    def cache_target(self, target: str) -> str:
        import platform

        from tvm.target import codegen

        from ...passes.check_bounds import bounds_checks_enabled

        # CPU code is built for this machine's processor, with or without bounds checks
        return (f"cpu:{platform.machine()}:{codegen.llvm_get_system_cpu()}:"
                f"{','.join(_cpu_features())}:"
                f"checks={bounds_checks_enabled()}")

    def build(self, mod, program, target: str, configs: dict, trace):
        warn_about_shared_memory(program)
        vectorize = not configs.get("tl.disable_vectorize", False)
        safe_global = bool(configs.get("tl.safe_global_access", False))
        return run_pipeline(PIPELINE_NAME, passes(program, vectorize, safe_global), mod,
                            host_target())

    def finish(self, program, trace, executable, recorder, target: str, configs: dict):
        from ..cuda import plans_without_code

        # show what the GPU backend would choose, so CPU users see it too
        trace.layouts, trace.pipelines, trace.instructions = plans_without_code(
            program, stage_stores=not configs.get("tl.disable_stage_stores", False))
        trace.code["llvm"] = llvm_ir(executable)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "kernel.so"
            export(executable, path)
            files = {"kernel.so": path.read_bytes(),
                     "meta.json": json.dumps({"name": program.name, "target": target}).encode()}
        return CompiledArtifact(CPURunner(executable, program.name, program.params), trace), files

    def load(self, entry, program, trace) -> CompiledArtifact:
        return CompiledArtifact(CPURunner.load(entry / "kernel.so", program.name, program.params),
                                trace)


def _register() -> CPUBackend:
    from tvm.tirx.compilation_pipeline import finalize_device_passes, finalize_host_passes

    register_pipeline(PIPELINE_NAME, finalize_host_passes, finalize_device_passes)
    return CPUBackend()


BACKEND = _register()
