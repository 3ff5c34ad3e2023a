"""The names under which facts travel with the IR, and the pass settings users give.

Facts the front end or a pass records for later passes are attributes of the IR
itself (loop annotations, PrimFunc attributes, tile-op config), under these keys,
so that every pass, the Trace and the cache see the same program.
"""

from __future__ import annotations

import enum
import itertools
import math
import threading

# loop annotations
KERNEL = "tilelab.kernel"  # the outermost block loop of a T.Kernel
THREADS = "tilelab.threads"  # on that loop: the block's thread extents
NUM_STAGES = "num_stages"  # a T.Pipelined loop's stages (TileLang's name)
PIPELINED = "tilelab.pipelined"  # a loop PipelineLoops has already rewritten
PIPELINE_PLAN = "tilelab.pipeline_plan"  # on it: the schedule it was given (a fact, below)
REFILL = "tilelab.pipeline_refill"  # around a pipelined loop's refill copies (its own barriers)
# a warp-specialized loop's producer (value: the consumers' threads; node: 1 where they take
# the producer's registers, passes/specialize_warps.py)
WARP_PRODUCER = "tilelab.warp_producer"
WARP_ROLE = "tilelab.warp_role"  # AttrStmt of `with T.ws(...)`: node = first thread, value = end
CLUSTER = "tilelab.cluster"  # AttrStmt around a cluster's first barrier: value = its dims (JSON)
SWIZZLE = "tilelab.swizzle"  # a T.Kernel loop: T.use_swizzle's [panel, order, enable]
LAYOUT_PLAN = "tilelab.layout_plan"  # a T.Kernel loop: InferLayouts' LayoutPlan (a fact)
COARSENED = "tilelab.coarsened"  # a T.Kernel loop: program blocks per launched block
# a T.Kernel loop: the variables T.get_thread_binding(0), (1), (2) gave the program
THREAD_INDEX = "tilelab.thread_index"
PER_THREAD = "tilelab.per_thread"  # AttrStmt: statements each thread runs for itself
# PrimFunc attr (CPU): the registers given a copy per thread, first index the thread's
THREAD_COPIES = "tilelab.thread_copies"
# AllocBuffer: a shared tile through which thread code hands values between threads (a warp
# shuffle's, a thread all-reduce's): each thread stores into it, then reads others' entries
EXCHANGE = "tilelab.exchange"
# AttrStmt (CUDA, tl.disable_thread_storage_sync): the lowered code of a piece of thread
# code or a T.Parallel loop that touches shared memory, whose barriers the program places;
# from LowerTileOpsToThreads to the shared-memory merge (hide_from_thread_sync.py)
OWN_BARRIERS = "tilelab.own_barriers"
# AttrStmt (CUDA): the lowered code of a T.Parallel loop that touches shared memory, which
# TVM's ThreadSync sees as one statement touching its tiles (hide_from_thread_sync.py)
AS_ONE = "tilelab.as_one_statement"
FACTS = (PIPELINE_PLAN, LAYOUT_PLAN)

# PrimFunc attributes
SOURCE_FILE = "tilelab.source_file"  # the kernel's file; a tile op's `loc` is relative to it
PROGRAM_CONFIGS = "tilelab.pass_configs"  # pass configs the program asks for itself (a hint
# such as T.disable_warp_group_reg_alloc()); those given to compile() win over them

# tile-op config
LOC = "loc"  # "line:col" (or "file:line:col") of the statement that wrote the op
ASYNCHRONOUS = "asynchronous"  # a copy issued by a software pipeline (cp.async)


# A fact is a Python value (a LayoutPlan, a schedule) that a pass leaves in the IR for
# later passes and the Trace. TVM hashes and compares IR, which it cannot do with an
# arbitrary Python object, so the annotation holds a handle ("tilelab.fact 3"), and the
# value waits here until the compile that made it is done. The pass that uses a fact
# last removes it (`without_facts`), so TVM's own passes never see one.
_FACTS: dict = {}
_FACTS_KEPT = 256  # a compile makes a few, used within it; the oldest go first
_facts_lock = threading.Lock()
_fact_numbers = itertools.count()


def fact(value) -> str:
    """A handle to `value`, to put in the IR."""
    with _facts_lock:
        handle = f"tilelab.fact {next(_fact_numbers)}"
        _FACTS[handle] = value
        while len(_FACTS) > _FACTS_KEPT:
            del _FACTS[next(iter(_FACTS))]
    return handle


def fact_value(handle):
    """The value behind a handle that `fact` made."""
    with _facts_lock:
        return _FACTS[str(handle)]


def without_facts(annotations) -> dict:
    """A loop's annotations, less the facts tilelab's passes left on it."""
    return {k: v for k, v in annotations.items() if k not in FACTS}


def facts_in(node) -> dict:
    """Every fact on the loops of `node` (an IRModule or a statement): key -> values."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    found: dict = {}

    def visit(loop):
        for key in FACTS:
            if key in loop.annotations:
                found.setdefault(key, []).append(fact_value(loop.annotations[key]))

    roots = [f.body for f in node.functions.values() if hasattr(f, "body")] \
        if isinstance(node, tvm.ir.IRModule) else [node]
    for root in roots:
        tvm_ffi.structural_walk(root, (tirx.For, visit), order="pre")
    return found


def role_threads(stmt):
    """The threads [first, end) of a `with T.ws(...)` mark (a WARP_ROLE AttrStmt); None
    for any other statement."""
    if getattr(stmt, "attr_key", None) != WARP_ROLE:
        return None
    return int(stmt.node.value), int(stmt.value.value)


def block_threads(kernel_loop) -> int:
    """The number of threads of the block a T.Kernel loop launches."""
    return math.prod(int(t) for t in kernel_loop.annotations[THREADS])


class PassConfigKey(str, enum.Enum):
    """Settings that change how a kernel is compiled (`pass_configs={...}`)."""

    # nvcc --use_fast_math: exp, log, division by the GPU's fast approximate instructions
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    # keep loops scalar: no 16-byte vector loads and stores (VectorizeLoop makes them serial)
    TL_DISABLE_VECTORIZE = "tl.disable_vectorize"
    # record %globaltimer in the first N blocks' pipelined loops (see tilelab/instrument.py)
    TL_INSTRUMENT_PIPELINE = "tl.instrument_pipeline"
    # CUDA: keep one element per thread in elementwise kernels (passes/coarsen_blocks.py)
    TL_DISABLE_COARSEN = "tl.disable_coarsen"
    # sm_90a: keep T.gemm on the Ampere path (mma.sync + ldmatrix) instead of warpgroup MMA
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    # sm_90a: wait for each pipelined T.gemm at once instead of keeping one in flight
    TL_DISABLE_WGMMA_OVERLAP = "tl.disable_wgmma_overlap"
    # sm_90a: pipelined GEMM loops copy their tiles with cp.async on every thread, as on
    # Ampere, instead of TMA + mbarriers (passes/pipeline_loops.py). TileLang's name
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    # sm_90a: TMA pipelines keep every thread on both the copies' waits and the MMAs
    # instead of a producer warp and consumer warpgroups (passes/specialize_warps.py).
    # TileLang's name
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    # sm_90a: split every TMA loop that keeps its MMAs in flight and allows a producer
    # warp, also where it was not measured to pay (to try it, and to test the split)
    TL_FORCE_WARP_SPECIALIZED = "tl.force_warp_specialized"
    # sm_90a: a split loop that computes between its T.gemm (FlashAttention) keeps a copy
    # of its tiles per block where neighbouring blocks copy the same ones, instead of
    # running the two as a cluster in which each asks TMA for half of them, for both
    TL_DISABLE_TMA_MULTICAST = "tl.disable_tma_multicast"
    # CUDA: number blocks as written, instead of the ones with the most loop trips first
    # (passes/heavy_blocks_first.py: causal attention)
    TL_DISABLE_HEAVY_FIRST = "tl.disable_heavy_first"
    # CUDA: keep a T.Parallel's T.if_then_else per element even where a whole tile decides
    # it alike (passes/uniform_selects.py: causal attention masks only diagonal tiles)
    TL_DISABLE_UNIFORM_SELECTS = "tl.disable_uniform_selects"
    # both: a read of a global tensor outside its shape gives 0 and a write there is
    # skipped, as TileLang defines it (passes/safe_global_access.py); programs compiled
    # through tilelab.compat.tilelang ask for it, tilelab's own report such accesses
    TL_SAFE_GLOBAL_ACCESS = "tl.safe_global_access"
    # CUDA: store T.gemm sums straight from registers to global memory instead of through
    # a shared tile where one costs no block on the multiprocessor (passes/stage_stores.py)
    TL_DISABLE_STAGE_STORES = "tl.disable_stage_stores"
    # sm_90a: a copy of a whole shared tile into a global tensor goes by TMA, one thread's
    # request, instead of every thread's loads and stores (passes/tma_stores.py). Unset,
    # only stores in walks over tiles (T.Persistent) do, where TMA reads the tile while the
    # next tile's K loop runs (H100: persistent GEMM 4096^3 0.981 -> 0.987 of cuBLAS); True:
    # every store that can (one block per tile: GEMMs level, causal FlashAttention 1.04
    # slower); False: none. tl.disable_tma_lower overrides it
    TL_ENABLE_TMA_STORES = "tl.enable_tma_stores"
    # sm_90a: a copy from an accumulator fragment into a 16-bit shared tile stores each
    # thread's elements itself (4 bytes at a time) instead of by stmatrix, four 8x8
    # matrices a warp instruction (ops/copy.py)
    TL_DISABLE_STMATRIX = "tl.disable_stmatrix"
    # sm_90a: a warp-specialized block keeps the registers its launch gives each thread
    # instead of moving them from the producer warpgroup to the consumers (setmaxnreg)
    TL_DISABLE_SETMAXNREG = "tl.disable_setmaxnreg"
    # sm_90a: two consumer warpgroups of a warp-specialized loop that multiplies, computes
    # and multiplies again take turns at the tensor cores (FlashAttention-3's ping-pong)
    # instead of running side by side; measured to pay only for 128x128 attention tiles
    # without the causal bound, where they are the default (False turns them off there)
    TL_ENABLE_WARPGROUP_TURNS = "tl.enable_warpgroup_turns"
    # sm_90a: a warp-specialized loop that multiplies, computes and multiplies again issues
    # the next iteration's first T.gemm before this iteration's last, and computes while
    # the last one's MMAs run (FlashAttention-3's intra-warpgroup overlap); measured to pay
    # only for head dimension 64 with 128x128 tiles (d128: x0.88 of SDPA, x0.95 without)
    TL_ENABLE_INTRA_WARPGROUP_OVERLAP = "tl.enable_intra_warpgroup_overlap"
    # sm_90a: check that wgmma's operand tiles start on their swizzle period before every
    # T.gemm of every iteration, as the wgmma lowering writes it, instead of once at the
    # dynamic shared buffer's start where their offsets are proven multiples of it
    # (passes/aligned_tiles_once.py, the default: FlashAttention 1-5% faster, GEMM level)
    TL_DISABLE_ALIGNMENT_CHECK_ONCE = "tl.disable_alignment_check_once"
    # CUDA: a loop's row sum that only feeds a running total is combined across the threads
    # of each row once, after the loop, not in every iteration (passes/deferred_row_sums.py,
    # the default: FlashAttention 0.3-1.2% faster, paired on an H100); this key keeps the
    # warp shuffles in every iteration
    TL_DISABLE_DEFERRED_ROW_SUMS = "tl.disable_deferred_row_sums"
    # CUDA: the program places the barriers of its own per-thread code - code written for
    # one thread (`T.get_thread_binding`) and the bodies of T.Parallel loops: tilelab puts none
    # inside such code nor between two pieces of thread code; tile ops keep theirs
    # (passes/hide_from_thread_sync.py). TileLang's name
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"
