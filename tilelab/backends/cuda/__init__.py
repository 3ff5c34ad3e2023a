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
import json
import re
import threading

from tvm import tirx

from ...errors import RoleConflict, TileLabCompileError, TileLabError
from ...ir.keys import CLUSTER, KERNEL, PIPELINE_PLAN, PassConfigKey, block_threads, facts_in
from ...ops._lowering import GRID_SYNC, calls_grid_sync
from ...ops.copy import TENSOR_MAP
from ...passes.aligned_tiles_once import AlignedTilesOnce
from ...passes.check_fragment_reads import CheckFragmentReads
from ...passes.check_loop_bounds import CheckLoopBounds
from ...passes.coarsen_blocks import CoarsenBlocks
from ...passes.cuda_vectors import CudaVectors
from ...passes.deferred_row_sums import DeferredRowSums
from ...passes.fresh_vector_loads import FreshVectorLoads
from ...passes.heavy_blocks_first import HeavyBlocksFirst
from ...passes.hide_from_thread_sync import hidden_from_thread_sync
from ...passes.infer_layouts import InferLayouts, warn_unapplied_layouts
from ...passes.insert_barriers import InsertBarriers
from ...passes.keep_negations import KeepIntegerNegations
from ...passes.keep_wgmma_operands import KeepWgmmaOperands
from ...passes.lower_tile_ops_to_threads import LowerTileOpsToThreads
from ...passes.packed_int4 import PackedInt4, has_packed
from ...passes.pipeline_loops import PipelineLoops
from ...passes.prepare_shared_merge import PrepareSharedMerge
from ...passes.safe_global_access import SafeGlobalAccess
from ...passes.scoped_bindings import ScopedBindings
from ...passes.separate_shared_lifetimes import (
    DropLifetimeMarkers,
    DropOwnBarrierMarks,
    PartLifetimes,
    SeparateSharedLifetimes,
)
from ...passes.shared_conditions import BindSharedConditions
from ...passes.specialize_warps import PRODUCER_THREADS, SpecializeWarps
from ...passes.specialize_warps import TURNS as TURN_CALLS
from ...passes.spill_fragments import SpillFragments
from ...passes.stage_operands import StageOperands
from ...passes.stage_stores import StageStores
from ...passes.tensor_views import DropTensorViews
from ...passes.thread_code import MarkThreadCode, takes_thread_index
from ...passes.tma_stores import TmaStores
from ...passes.typed_access_pointers import TypedAccessPointers
from ...passes.uniform_branches import HideUniformBranches, RestoreUniformBranches
from ...passes.uniform_selects import UniformSelects
from ...passes.warp_roles import WarpRoles
from .. import Backend, CompiledArtifact, register_pipeline, run_pipeline
from . import nvcc

PIPELINE_NAME = "tilelab_cuda"


def passes(program, vectorize: bool = True, wgmma_off: str | None = "no sm_90a target",
           coarsen: bool = True, overlap_gemms: bool = True, tma: bool = True,
           specialize: str = "measured", heavy_first: bool = True,
           arch: str | None = None, stage_stores: bool = True, reallocate: bool = True,
           turns: bool | None = None, uniform_selects: bool = True,
           safe_global: bool = False, rotate: bool = False, own_barriers: bool = False,
           align_once: bool = True, defer_sums: bool = True,
           tma_stores: bool | None = None, stmatrix: bool = True,
           multicast: bool = True) -> list:
    """The CUDA pipeline, in order: tilelab's tile-level passes, then TVM's lowering.
    What a pass decides for a later one (a layout plan, a pipeline schedule) rides on
    the IR as a fact (ir/keys.py); the Trace reads the facts from the IR as well.
    `overlap_gemms`: with wgmma, pipelined T.gemms keep one iteration's MMAs in flight;
    `tma`: and their tiles are copied by TMA; `specialize`: by a producer warp ("off",
    "measured": where it was measured to pay, "always"); `heavy_first`: blocks whose loops
    run longest are launched first; `arch`: a pipelined loop whose slots alone need more
    shared memory than its block has is refused at once; `stage_stores`: GEMM sums go to
    global memory through a shared tile where one is free; `reallocate`: a producer warp
    gives its registers to the consumers; `turns`: two consumer warpgroups take turns at
    the tensor cores (asked for); `uniform_selects`: a select a whole tile decides alike is
    decided once for the tile; `safe_global`: global tensors read as 0 and are not written
    outside their shapes (TileLang's rule); `rotate`: such a loop issues its next
    iteration's first T.gemm before this one's last (asked for); `own_barriers`: the
    program places the barriers of its thread code and T.Parallel bodies itself;
    `align_once`: wgmma tiles proven aligned are checked once per kernel; `defer_sums`: a
    loop's row sums that only feed running totals combine across threads after it;
    `tma_stores`: whole shared tiles go to global tensors by TMA (sm_90a) - in walks over
    tiles (None), everywhere (True) or nowhere (False); `stmatrix`: fragments go into 16-bit
    shared tiles by stmatrix where they hold 8x8 matrices (sm_90a); `multicast`: pairs of
    blocks whose split loops copy the same tiles share them, as a cluster (sm_90a)."""
    import tvm.s_tir as s_tir

    T = tirx.transform  # noqa: N806
    hide, restore = hidden_from_thread_sync()
    warn_unapplied_layouts(program.layouts, program.buffer_locations)
    return [
        *([PackedInt4] if has_packed(program.func) else []),  # int4: tensors in bytes
        *([SafeGlobalAccess()] if safe_global else []),  # TileLang's rule for edges
        CheckLoopBounds(program.source.location(program.source.node)),  # past a tile's end
        *([MarkThreadCode()] if takes_thread_index(program.func) else []),  # one thread's code
        *([CoarsenBlocks] if coarsen else []),  # elementwise kernels: F elements per thread
        CheckFragmentReads(program.buffer_locations,
                           {p.name: p.location for p in program.params if p.output}),
        *([UniformSelects] if uniform_selects else []),  # a tile-wide select decided once
        # fragments no register layout serves are kept in shared memory
        SpillFragments(program.layouts, wgmma_off, program.buffer_locations),
        StageOperands(),                       # operands where the ops' lowerings take them
        *([DeferredRowSums] if defer_sums else []),  # running sums' shuffles after the loop
        # T.Pipelined: load ahead with cp.async (or TMA)
        PipelineLoops(wgmma_off, overlap_gemms=overlap_gemms, tma=tma,
                      annotated=program.layouts, specialize=specialize, turns=turns, rotate=rotate,
                      multicast=multicast),
        *([SlotsFit(program, arch)] if arch else []),  # refused now, not after the lowering
        # T.gemm sums leave in rows of 16 bytes a thread
        *([StageStores(shared_memory_limit(arch))] if arch and stage_stores else []),
        # shared tiles go to global memory by TMA (sm_90a)
        *([TmaStores(program.layouts, everywhere=bool(tma_stores))]
          if tma_stores is not False and arch == "sm_90a" else []),
        InsertBarriers(own_barriers),          # __syncthreads where threads share a tile
        # a Fragment for every fragment buffer
        InferLayouts(program.layouts, wgmma_off, stmatrix and arch == "sm_90a"),
        LowerTileOpsToThreads(own_barriers),   # tile ops -> per-thread code
        s_tir.transform.LowerOpaqueBlock(),    # thread-bound loops -> kernel launch attributes
        T.FlattenBuffer(),
        DropTensorViews,                       # views' accesses now use the tensor's pointer
        T.BF16ComputeLegalize(),
        T.NarrowDataType(32),
        T.StmtSimplify(),                      # drop edge guards that always hold
        CudaVectors,                           # no vectors of bool, none over 16 bytes
        T.VectorizeLoop(vectorize),            # 16-byte loads and stores (or scalar loops)
        SeparateSharedLifetimes,               # tiles that meet in a statement stay apart
        ScopedBindings,                        # `A_data = ptrs[i]` (i a register): a scope
        T.StorageRewrite(),                    # (it plans shared memory too)
        TypedAccessPointers,                   # a reused tile's pointers keep their type
        DropLifetimeMarkers,                   # it renames tiles; the markers would go stale
        T.UnrollLoop(),
        T.StmtSimplify(),
        T.RemoveNoOp(),
        T.CommonSubexprElim(),
        T.VerifyMemory(),
        KeepIntegerNegations,                  # ptxas 12.9-13.3 drops some inside min/max
        T.AnnotateEntryFunc(),
        BindSharedConditions,                      # `if tile[i] > 0:` reads into a bool
        HideUniformBranches,                       # `if bx ...`: barriers may go inside
        hide,                                      # refills, the program's own barriers
        s_tir.transform.ThreadSync("shared"),      # __syncthreads between write and read
        s_tir.transform.ThreadSync("shared.dyn"),
        restore,
        RestoreUniformBranches,
        WarpRoles,                                 # T.ws: each role's `if`, its own barriers
        PrepareSharedMerge,                        # room for 4-byte tiles, 1 KiB starts
        PartLifetimes(shared_memory_limit(arch) if arch else None),  # over the limit: reuse
        SeparateSharedLifetimes,                   # again, for the merge
        s_tir.transform.MergeSharedMemoryAllocations(),
        DropLifetimeMarkers,
        *([DropOwnBarrierMarks] if own_barriers else []),  # (read by SeparateSharedLifetimes)
        SpecializeWarps(reallocate),               # producer warpgroup + consumers (if planned)
        *([HeavyBlocksFirst] if heavy_first else []),  # the longest-running blocks start first
        T.SplitHostDevice(),
        T.MakePackedAPI(),
        T.BF16StorageLegalize(),
        FreshVectorLoads,                          # no C temporary reused after a store
        KeepWgmmaOperands,                         # ptxas 13.0: a loop's unchanging register A
        *([AlignedTilesOnce] if align_once else []),  # wgmma tiles' alignment: checked once
    ]


def wgmma_unavailable(arch: str, configs: dict) -> str | None:
    """Why T.gemm cannot use warpgroup MMA for this target and these settings (None: it can)."""
    if arch != "sm_90a":
        return f"the target is {arch}; wgmma needs sm_90a"
    if configs.get(PassConfigKey.TL_DISABLE_WGMMA.value, False):
        return "turned off by PassConfigKey.TL_DISABLE_WGMMA"
    return None


def cuda_target(arch: str):
    import tvm

    return tvm.target.Target({"kind": "cuda", "arch": arch}, host="llvm")


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
    """The CUDA C that TVM printed, with tilelab's header included, and the header's parts
    that need more headers switched on where the kernel needs them: float16 and bfloat16
    (where TVM's code includes their headers), the grid barrier (cooperative groups) where
    a kernel calls T.sync_grid."""
    source = executable.imports[0].inspect_source()
    switches = [name for name, used in (("TILELAB_FP16", "cuda_fp16.h"),
                                        ("TILELAB_BF16", "cuda_bf16.h"),
                                        ("TILELAB_SYNC_GRID", f"{GRID_SYNC}("))
                if used in source]
    return "".join(f"#define {name}\n" for name in switches) + '#include "tilelab.cuh"\n' + source


def launch_config(device_mod) -> list[dict]:
    """Per kernel of the device module, in program order (SplitHostDevice names them
    `f_kernel`, `f_kernel_1`, ...): symbol, grid, threads, shared memory, parameter names
    and the TMA descriptors it takes."""

    def order(item):
        name = str(item[0].name_hint)
        suffix = name.rpartition("_")[2]
        return int(suffix) if suffix.isdigit() else 0

    kernels = sorted(((gv, f) for gv, f in device_mod.functions.items()
                      if f.attrs is not None and "calling_conv" in f.attrs), key=order)
    return [_kernel_config(gv, func) for gv, func in kernels]


def _kernel_config(gv, func) -> dict:
    from ...ir.dtypes import buffer_bytes
    from ...ir.tile_ops import is_buffer
    from ...ir.visit import walk

    smem = {"shared.dyn": 0, "shared": 0}
    grid, threads = [1, 1, 1], 1  # as the passes left it (CoarsenBlocks launches fewer blocks)

    def visit(node):
        nonlocal threads
        if isinstance(node, tirx.AllocBuffer) and node.buffer.scope() in smem:
            # (a lone tile may have been given a vector type, float32x4, by StorageRewrite)
            smem[node.buffer.scope()] += buffer_bytes(node.buffer)
        elif isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
            tag = str(node.node.thread_tag)
            if tag.startswith("blockIdx."):
                grid["xyz".index(tag[-1])] = int(node.value)
            elif tag == "threadIdx.x":
                threads = int(node.value)

    walk(func.body, tirx.Stmt, visit)  # after merging: one dynamic allocation
    specs = {}  # TMA descriptors: parameter name -> what the launcher encodes
    cluster = [1, 1, 1]  # blocks launched together (pipeline_loops.Cluster)

    def attribute(node):
        nonlocal cluster
        if node.attr_key == TENSOR_MAP:
            specs[str(node.node.name)] = json.loads(str(node.value.value))
        elif node.attr_key == CLUSTER:
            cluster = json.loads(str(node.value.value))

    walk(func.body, tirx.AttrStmt, attribute)
    params = [str(p.name) for p in func.params if not is_buffer(p)]
    return {"kernel_name": str(gv.name_hint), "dynamic_smem": smem["shared.dyn"], "grid": grid,
            "threads": threads, "static_smem": smem["shared"], "param_names": params,
            "tensor_maps": specs, "cooperative": calls_grid_sync(func.body),
            "cluster": cluster}


def with_cluster_dims(source: str, config: dict) -> str:
    """The kernel declared with its cluster shape (`__cluster_dims__`) where its blocks run
    in clusters: a plain launch then starts them so (TVM's code generator has no attribute
    for it)."""
    if config["cluster"] == [1, 1, 1]:
        return source
    dims = ", ".join(str(d) for d in config["cluster"])
    name = re.escape(config["kernel_name"])
    declared, count = re.subn(rf"(__global__ void )(__launch_bounds__\(\d+\) )?({name}\()",
                              rf"\1__cluster_dims__({dims}) \2\3", source)
    if not count:
        raise TileLabCompileError(f"internal: kernel {config['kernel_name']} runs in clusters "
                                  "but its declaration was not found in the CUDA source")
    return declared


def global_scratch(program) -> list[dict]:
    """The program's T.alloc_global tensors: the launcher allocates them for each call."""
    from ...ir.visit import walk

    found = []
    walk(program.func.body, tirx.AllocBuffer, lambda a: found.append(a.buffer)
         if a.buffer.scope() == "global" else None)
    return [{"name": str(b.name), "shape": [int(n) for n in b.shape], "dtype": str(b.dtype)}
            for b in found]


# Shared memory one block may use (KB, with the opt-in for more than 48 KB), by architecture.
SHARED_KB = {"sm_70": 96, "sm_72": 96, "sm_75": 64, "sm_80": 163, "sm_86": 99, "sm_87": 163,
             "sm_89": 99, "sm_90": 227, "sm_100": 227, "sm_101": 227, "sm_103": 227,
             "sm_110": 227, "sm_120": 99, "sm_121": 99}


def shared_memory_limit(arch: str) -> int | None:
    """Bytes of shared memory a block may use on `arch` (`sm_90a` reads as `sm_90`)."""
    kb = SHARED_KB.get(arch.rstrip("af"))
    return None if kb is None else kb * 1024


def SlotsFit(program, arch: str):  # noqa: N802 - a pass, named like TVM's
    """The slots of a pipelined loop are in use together for the whole loop, so their bytes
    are a lower bound of the block's shared memory: where they alone exceed what `arch`
    gives a block, the kernel is refused right after pipelining, not at the end of the
    lowering (an autotuner's sweep has many such candidates)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.SlotsFit")
    def _pass(func, _mod, _ctx):
        from ...ir.dtypes import buffer_bytes
        from ...ir.visit import walk

        def check(kernel):
            if KERNEL not in kernel.annotations:
                return
            sizes: dict = {}  # this kernel's shared tiles (another may reuse a name)
            walk(kernel, tirx.AllocBuffer, lambda a: sizes.setdefault(
                str(a.buffer.name), buffer_bytes(a.buffer))
                if a.buffer.scope().startswith("shared") else None)
            for plan in facts_in(kernel).get(PIPELINE_PLAN, []):
                check_shared_memory(program, sum(sizes.get(name, 0) for name in plan["slots"]),
                                    arch, at_least=True)

        walk(func.body, tirx.For, check)
        return func

    return _pass


def check_shared_memory(program, nbytes: int, arch: str, at_least: bool = False) -> None:
    """A block that needs more shared memory than `arch` has would fail at launch: say so
    now, before nvcc, at the line of the kernel's largest shared tile (`at_least`: `nbytes`
    is a lower bound)."""
    from ...ir.dtypes import buffer_bytes
    from ...ir.visit import walk

    limit = shared_memory_limit(arch)
    if limit is None or nbytes <= limit:
        return
    tiles = []
    walk(program.func.body, tirx.AllocBuffer, lambda node: tiles.append(node.buffer)
         if node.buffer.scope().startswith("shared") else None)
    largest = max(tiles, key=buffer_bytes, default=None)
    where = program.buffer_locations.get(str(largest.name)) if largest is not None else None
    need = f"at least {nbytes / 1024:.1f} KB of shared memory per block for the slots of " \
        "its pipelined loop" if at_least else \
        f"{nbytes / 1024:.1f} KB of shared memory per block"
    raise TileLabCompileError(
        f"{program.name} needs {need}; an {arch} block has at most {limit // 1024} KB",
        where or program.source.location(program.source.node),
        hint="use smaller tiles or fewer pipeline stages (num_stages), or compile for a GPU "
             "with more shared memory")


# ---------------------------------------------------------------- registers and occupancy

REGISTERS_PER_SM = 65536  # every architecture from sm_70 on
THREADS_PER_SM = {"sm_75": 1024, "sm_86": 1536, "sm_87": 1536, "sm_89": 1536, "sm_120": 1536,
                  "sm_121": 1536}  # others: 2048


def blocks_per_sm(arch: str, threads: int, shared_bytes: int, registers: int) -> dict:
    """How many blocks fit on one SM by each resource. Registers are given to a warp in
    units of 256 (8 a thread); the runtime keeps 1 KB of shared memory per block."""
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // 256) * 256
    shared_kb = SHARED_KB.get(arch.rstrip("af"), 99) + 1  # an SM has 1 KB more than a block
    return {"registers": REGISTERS_PER_SM // max(per_warp * warps, 1),
            "shared memory": shared_kb * 1024 // (shared_bytes + 1024),
            "threads": THREADS_PER_SM.get(arch.rstrip("af"), 2048) // threads}


SMALL_SPILL = 64  # bytes a thread may spill for another block on the SM (fit_registers)
SMALL_CUT = 0.15  # the share of a thread's registers fit_registers may ask ptxas to give up


def fit_registers(source: str, compiled: dict, config: dict, arch: str, compile_again):
    """Occupancy repair: a block whose shared memory would let k blocks share an SM but
    whose registers, a few too many, let fewer, is compiled again with
    `__launch_bounds__(threads, k)`, asking ptxas for at most the registers k blocks
    leave each thread. Tried only where the cut is small (at most SMALL_CUT) and kept
    only where ptxas spills at most SMALL_SPILL bytes a thread: FlashAttention d128 at
    128x64 with 8 warps went from 132 registers and one block per SM to 128 registers, 32
    bytes spilled and two blocks, 443 -> 511 TFLOP/s on the H200 (the other block's MMAs
    run while one computes its softmax). Returns the source, the compile result and what
    was done (or None)."""
    threads = config["threads"]
    registers = compiled["resources"].get("registers", 0)
    fits = blocks_per_sm(arch, threads, config["dynamic_smem"] + config["static_smem"],
                         registers)
    wanted = min(fits["shared memory"], fits["threads"], 32)
    if wanted < 1:  # more shared memory than this table knows the SM to have: no repair
        return source, compiled, None
    cap = REGISTERS_PER_SM // (wanted * -(-threads // 32) * 32) // 8 * 8
    bounds = f"__launch_bounds__({threads})"
    if fits["registers"] >= wanted or cap < (1 - SMALL_CUT) * registers or bounds not in source:
        return source, compiled, None
    # the kernel's definition and its declaration
    bounded = source.replace(bounds, f"__launch_bounds__({threads}, {wanted})")
    try:
        again = compile_again(bounded)
    except TileLabCompileError:  # ptxas cannot fit an instruction in so few registers
        return source, compiled, None
    used = again["resources"]
    spilled = max(used.get("spill_stores_bytes", 0), used.get("spill_loads_bytes", 0))
    if spilled > SMALL_SPILL or used.get("registers", cap + 1) > cap:
        return source, compiled, None
    return bounded, again, (f"__launch_bounds__({threads}, {wanted}): {registers} registers a "
                            f"thread let {fits['registers']} block(s) share an SM, its shared "
                            f"memory {wanted}; compiled again for at most {cap} registers, "
                            f"ptxas used {used.get('registers')}, " +
                            (f"{used.get('spill_stores_bytes', 0)} bytes spilled (at most "
                             f"{SMALL_SPILL} are worth another block)" if spilled else
                             "no spills"))


MOVES = re.compile(r"\n\s*tl::registers_(down|up)<(\d+)>\(\);")
TURNS = re.compile(r"\n\s*(" + "|".join(TURN_CALLS) + r")\(\);")  # (their calls' lines)


def keep_register_moves(source: str, compiled: dict, threads: int | None, compile_again):
    """A warp-specialized block moves registers from its producer warpgroup to its
    consumers (passes/specialize_warps.py): `setmaxnreg.inc` waits until the block's pool,
    filled by the producer's `setmaxnreg.dec`, holds what the consumers ask for. The pool
    is what the launch gave the producer beyond its new count, so the moves hold only where
    ptxas gave every thread enough at launch: it does where the consumers' code needs more
    (FlashAttention d128: 168 registers a thread, 128 x (168 - 24) = 256 x (240 - 168)).
    Where it needs fewer (d64: 107), the consumers would wait forever; the kernel is
    compiled again without the moves, which it does not need, and without turns at the
    tensor cores (pipeline_loops._take_turns): on the launch's registers they measured
    twice as slow (H200, FlashAttention d128, 128x64 tiles: 4.53 ms against 2.25 ms
    without turns). `threads`: the block's (None: several kernels, which keep no moves).
    Returns (source, compiled, what was done or None)."""
    moves = {kind: int(count) for kind, count in MOVES.findall(source)}
    if not moves:
        return source, compiled, None
    registers = -(-compiled["resources"].get("registers", 0) // 8) * 8  # given by eights
    producer = PRODUCER_THREADS * (registers - moves["down"])
    consumers = (threads - PRODUCER_THREADS) * (moves["up"] - registers) if threads else None
    if consumers is not None and producer >= consumers:
        return source, compiled, None
    plain = TURNS.sub("", MOVES.sub("", source))
    return plain, compile_again(plain), (
        f"no register moves: ptxas gave each thread {registers} registers at launch, so the "
        f"producer's {moves['down']} would leave too few for the consumers' {moves['up']}" +
        ("; no turns at the tensor cores either" if TURNS.search(source) else ""))


# ---------------------------------------------------------------- from the source to a kernel


def finish_cuda(program, trace, executable, recorder, arch: str, configs: dict):
    """nvcc the generated source; record code, resources and the launch configuration."""
    if recorder.device_module is None:  # TVM removed a device function with no effect
        raise TileLabCompileError(
            f"{program.name} has no effect on the GPU: it writes no tensor and prints "
            "nothing, so no GPU code is left to run",
            program.source.location(program.source.node),
            hint="copy a result into one of the kernel's tensors (T.copy(tile, Out[...]))")
    configs_of_kernels = launch_config(recorder.device_module)
    check_shared_memory(program, max(c["dynamic_smem"] + c["static_smem"]
                                     for c in configs_of_kernels), arch)
    source = cuda_source(executable)
    for config in configs_of_kernels:
        source = with_cluster_dims(source, config)
    fast_math = bool(configs.get(PassConfigKey.TL_ENABLE_FAST_MATH.value, False))
    compiled = nvcc.compile_cuda(source, arch, fast_math=fast_math)
    occupancy = None
    again = lambda changed: nvcc.compile_cuda(changed, arch, fast_math=fast_math)  # noqa: E731
    source, compiled, moves = keep_register_moves(
        source, compiled, configs_of_kernels[0]["threads"] if len(configs_of_kernels) == 1
        else None, again)
    if len(configs_of_kernels) == 1:
        source, compiled, occupancy = fit_registers(source, compiled, configs_of_kernels[0],
                                                    arch, again)
    scratch = global_scratch(program)
    names = [str(b.name) for b in program.func.params] + [s["name"] for s in scratch]
    kernels = [_launch_of(program, config, names) for config in configs_of_kernels]
    launch = dict(kernels[0], arch=arch)
    if len(kernels) > 1:  # the program's other `with T.Kernel` blocks, in order
        launch["next_kernels"] = kernels[1:]
    if scratch:
        launch["scratch"] = scratch
    trace.code.update(cuda=source, ptx=compiled["ptx"], ptxas=compiled["ptxas"])
    trace.resources = dict(compiled["resources"], dynamic_smem_bytes=launch["dynamic_smem"],
                           grid=launch["grid"], block=launch["block"], arch=arch)
    if occupancy:
        trace.resources["occupancy"] = occupancy
    if moves:
        trace.resources["register_moves"] = moves
    if len(kernels) > 1:
        trace.resources["kernels"] = [{"name": k["kernel_name"], "grid": k["grid"],
                                       "block": k["block"],
                                       "dynamic_smem_bytes": k["dynamic_smem"]}
                                      for k in kernels]
    _warn_about_spills(program, trace)
    files = {"kernel.cubin": compiled["cubin"], "launch.json": json.dumps(launch).encode()}
    runner = cuda_runner(program, launch, compiled["cubin"])
    return CompiledArtifact(runner, trace, launch, compiled["cubin"]), files


def _launch_of(program, config: dict, names: list) -> dict:
    """One kernel's launch: its parameters as positions among the program's tensors and
    scratch tensors (`names`), its TMA descriptors, grid and block."""
    order, tensor_maps = [], []
    for position, pname in enumerate(config["param_names"]):
        if pname in config["tensor_maps"]:  # a TMA descriptor of one of the tensors
            spec = dict(config["tensor_maps"][pname], param=position)
            spec["tensor"] = names.index(spec["tensor"])
            tensor_maps.append(spec)
            continue
        base = pname.removesuffix("_ptr")
        if base not in names:
            raise TileLabCompileError(f"kernel parameter {pname} matches no tensor of "
                                      f"{program.name}")
        order.append(names.index(base))
    launch = {"kernel_name": config["kernel_name"], "grid": config["grid"],
              "block": [config["threads"], 1, 1], "dynamic_smem": config["dynamic_smem"],
              "arg_order": order}
    if tensor_maps:
        launch["tensor_maps"] = tensor_maps
    if config["cluster"] != [1, 1, 1]:  # (the cubin's own launch attribute; for readers)
        launch["cluster"] = config["cluster"]
    if config["cooperative"]:
        launch["cooperative"] = True
    return launch


def _warn_about_spills(program, trace) -> None:
    """Registers ptxas could not find become local memory: a warning in the Trace (the
    compiler shows the Trace's new warnings at the kernel)."""
    spilled = trace.resources.get("spill_stores_bytes", 0)
    if not spilled or "occupancy" in trace.resources:  # (a few bytes for another block)
        return
    message = (f"{program.name}: each thread needs more than its "
               f"{trace.resources.get('registers', '?')} registers, so ptxas keeps "
               f"{spilled} bytes per thread in local memory (spills, slow); every thread "
               "holds its share of every fragment: use more threads or smaller fragments")
    trace.warnings.append(message)


def cuda_runner(program, launch: dict, cubin: bytes):
    """The program's launcher, called with the tensors in signature order."""
    from ...runtime.cuda import launcher_for

    return launcher_for(cubin, launch, [p.dtype for p in program.params])


def plans_without_code(program, stage_stores: bool = True) -> tuple[dict, list, list]:
    """Layouts, pipeline plans and instruction records the CUDA backend would choose for
    an sm_80 GPU (analyses only, no code)."""
    import tvm
    from tvm import tirx

    from ...ir.visit import walk
    from ...passes.infer_layouts import infer_layouts
    from ...passes.pipeline_loops import PipelineLoops

    try:
        mod = PipelineLoops()(tvm.IRModule({program.name: program.func}))
        if stage_stores:
            mod = StageStores(shared_memory_limit("sm_80"))(mod)
        pipelines = facts_in(mod).get(PIPELINE_PLAN, [])
        layouts: dict = {}
        instructions: list = []

        def visit(loop):
            if KERNEL in loop.annotations:
                threads = block_threads(loop)
                plan = infer_layouts(loop, threads, program.layouts, func=mod[program.name])
                layouts.update(plan.to_json())
                instructions.extend(plan.instructions)

        walk(mod[program.name].body, tirx.For, visit)
    except Exception as err:  # noqa: BLE001 - a CPU-only kernel need not fit the GPU's rules
        from ...ir.visit import UserErrors

        parked = UserErrors.take()
        for error in (err, parked):
            if isinstance(error, RoleConflict):  # the language's rule: the CPU's too
                raise error from None
        return {}, [], []
    return layouts, pipelines, instructions


class CUDABackend(Backend):
    """CUDA C from TVM's code generator, compiled by tilelab's nvcc step into a cubin."""

    kind = "cuda"

    def cache_target(self, target: str) -> str:
        return f"{target}:{nvcc.toolchain_version()}"  # the toolchain that makes the cubin

    def build(self, mod, program, target: str, configs: dict, trace):
        arch = target.partition(":")[2] or nvcc.default_arch()
        vectorize = not configs.get(PassConfigKey.TL_DISABLE_VECTORIZE.value, False)

        coarsen = not configs.get(PassConfigKey.TL_DISABLE_COARSEN.value, False)
        overlap = not configs.get(PassConfigKey.TL_DISABLE_WGMMA_OVERLAP.value, False)
        tma = not configs.get(PassConfigKey.TL_DISABLE_TMA_LOWER.value, False)
        specialize = "off" if configs.get(PassConfigKey.TL_DISABLE_WARP_SPECIALIZED.value) \
            else "always" if configs.get(PassConfigKey.TL_FORCE_WARP_SPECIALIZED.value) \
            else "measured"
        heavy_first = not configs.get(PassConfigKey.TL_DISABLE_HEAVY_FIRST.value, False)
        stage = not configs.get(PassConfigKey.TL_DISABLE_STAGE_STORES.value, False)
        tma_stores = configs.get(PassConfigKey.TL_ENABLE_TMA_STORES.value)  # None: in walks
        tma_stores = False if not tma else None if tma_stores is None else bool(tma_stores)
        reallocate = not configs.get(PassConfigKey.TL_DISABLE_SETMAXNREG.value, False)
        turns = configs.get(PassConfigKey.TL_ENABLE_WARPGROUP_TURNS.value)  # None: measured
        turns = None if turns is None else bool(turns)
        rotate = bool(configs.get(PassConfigKey.TL_ENABLE_INTRA_WARPGROUP_OVERLAP.value, False))
        uniform = not configs.get(PassConfigKey.TL_DISABLE_UNIFORM_SELECTS.value, False)
        safe_global = bool(configs.get(PassConfigKey.TL_SAFE_GLOBAL_ACCESS.value, False))
        own_barriers = bool(configs.get(PassConfigKey.TL_DISABLE_THREAD_STORAGE_SYNC.value,
                                        False))
        align_once = not configs.get(PassConfigKey.TL_DISABLE_ALIGNMENT_CHECK_ONCE.value, False)
        defer_sums = not configs.get(PassConfigKey.TL_DISABLE_DEFERRED_ROW_SUMS.value, False)
        stmatrix = not configs.get(PassConfigKey.TL_DISABLE_STMATRIX.value, False)
        multicast = not configs.get(PassConfigKey.TL_DISABLE_TMA_MULTICAST.value, False)
        if calls_grid_sync(program.func.body):  # every thread of every block reaches it:
            specialize, coarsen = "off", False  # no producer warpgroup, no merged blocks
        pass_list = passes(program, vectorize, wgmma_unavailable(arch, configs), coarsen,
                           overlap, tma, specialize, heavy_first, arch, stage, reallocate,
                           turns, uniform, safe_global, rotate, own_barriers, align_once,
                           defer_sums, tma_stores, stmatrix, multicast)
        with source_only():
            return run_pipeline(PIPELINE_NAME, pass_list, mod, cuda_target(arch))

    def finish(self, program, trace, executable, recorder, target: str, configs: dict):
        arch = target.partition(":")[2] or nvcc.default_arch()
        try:
            return finish_cuda(program, trace, executable, recorder, arch, configs)
        except TileLabError as err:  # nvcc's complaint, at the kernel the user wrote
            raise err.with_location(program.source.location(program.source.node)) from None

    def load(self, entry, program, trace) -> CompiledArtifact:
        launch = json.loads((entry / "launch.json").read_text())
        cubin = (entry / "kernel.cubin").read_bytes()
        return CompiledArtifact(cuda_runner(program, launch, cubin), trace, launch, cubin)


def _register() -> CUDABackend:
    from tvm.s_tir.pipeline import finalize_device_passes, finalize_host_passes

    register_pipeline(PIPELINE_NAME, finalize_host_passes, finalize_device_passes)
    return CUDABackend()


BACKEND = _register()
