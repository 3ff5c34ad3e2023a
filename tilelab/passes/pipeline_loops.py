"""Software pipelining of `T.Pipelined` loops: load ahead while computing.

In `for k in T.Pipelined(n, num_stages=S)`, the copies from global memory
into shared tiles in the body (the *producers*) do not depend on the rest of
the body (the *consumers*). So the copies for iteration k + S - 1 can be
issued while iteration k computes, if every shared tile they fill has S
slots. The loop becomes:

    prologue:  for s < S-1:  copy tiles of iteration s into slot s; commit
    loop k:    wait until iteration k's copies landed; barrier
               copy tiles of iteration k+S-1 into slot (k+S-1) % S; commit
               consumers, reading slot k % S

The copies are asynchronous (`cp.async`: global to shared without passing
through registers); `commit` closes a group of them and `wait` lets at most
S-2 groups stay in flight. The barrier both publishes the landed tile to all
threads and proves that everyone finished reading the slot about to be
refilled (it was read in iteration k-1). So the refill needs no barrier of
its own: it is marked (`REFILL`) and TVM's barrier pass does not see it
(`passes/hide_from_thread_sync.py`), which would otherwise put a second barrier
between it and the consumers, not knowing that they use another slot.

On Hopper, a body that only multiplies (`T.gemm`s of float16/bfloat16 tiles:
the main loop of a GEMM) can do better. A warpgroup MMA runs asynchronously,
so each `T.gemm` leaves its instructions in flight and waits only for the
previous iteration's (`wgmma.wait_group 1`): the tensor cores multiply while
the threads go on to the next iteration's wait, barrier and copies; a
`gemm_wait` after the loop waits for the last. The slot being refilled must
then be one that no multiplication in flight still reads, so copies run S-2
iterations ahead instead of S-1 (the slot read at k-2 is refilled at k).

Such a loop also stops copying with every thread. Hopper's Tensor Memory
Accelerator (TMA) copies a whole tile on one thread's request: the tile is a
*box* of a global tensor described by a descriptor (a `CUtensorMap`, encoded
on the host at launch and passed to the kernel), and TMA writes it into shared
memory already swizzled the way warpgroup MMA reads it. Completion is counted
by an *mbarrier* in shared memory, one per slot: thread 0 announces the bytes
to come (`arrive.expect_tx`) and issues the copies; the barrier's phase
completes when the bytes have landed, and every thread waits for the phase
of the slot it is about to read (its parity flips each time the slot is
reused) instead of `cp.async.wait_group`. TMA is used where layout inference
will give every copied tile the wgmma layout (a trial inference answers that
here) and the tensor's strides suit it (multiples of 16 bytes); TMA's own
bounds handling zero-fills edge tiles. The mbarriers live in the dynamic
allocation with the tiles: static shared memory would be placed before it and
move every tile off the 1 KiB its swizzle needs. `tl.disable_tma_lower`
(TileLang's key) keeps such loops on cp.async.

With TMA the copies need one thread, so the roles can also be split: a
producer warpgroup added to the block issues every copy of the loop from the
start of the block, S slots ahead, and the consumers (the block's own threads)
wait for a slot's `full` mbarrier and release it on an `empty` one - no
block-wide barrier is left in the loop (`passes/specialize_warps.py` finishes
the split after lowering). The extra warpgroup's registers cost a block per SM
where shared memory would let several share it, so a loop is split only where
the block's shared memory (the tiles in use up to the loop's end, with its
slots) keeps it alone on its SM, and where it keeps its MMAs in flight on one
warpgroup or computes between two T.gemm (FlashAttention's softmax) on two -
the cases the H200 measured it to pay (`Roles.pays`);
`tl.disable_warp_specialized` (TileLang's key) keeps every loop one-role,
`tl.force_warp_specialized` splits every loop that allows it. In a loop that
computes between its T.gemm, each T.gemm then waits for its MMAs and an
iteration releases its own slot at its end; two consumer warpgroups may take
turns at the tensor cores (`_take_turns`, `tl.enable_warpgroup_turns`), and the
loop may be rotated so that each warpgroup computes while its own MMAs run
(`_rotated`, `tl.enable_intra_warpgroup_overlap`).

Neighbouring blocks often copy the same tiles: FlashAttention's query blocks
of one head all walk the same K and V. Where a split loop computes between its
T.gemm and blocks 2c and 2c+1 along one block axis run it alike and copy the
same tiles of an operand (`Roles.pair`), the two run as a *cluster*, launched
together on neighbouring SMs: each producer asks TMA for half of the tile's
boxes with `.multicast::cluster`, which writes them into both blocks' slots and
counts their bytes on both blocks' `full` mbarriers, so the tile crosses from
L2 once instead of twice. A slot may then be refilled only once the consumers
of both blocks are done with it: each consumer warp releases it in both blocks.
(H200, d128: 1.009x the kernel without clusters, 1.015x SDPA; `tl.disable_tma_multicast`.)

A persistent block (`T.Persistent`: a loop over output tiles around the
pipelined loop, a `TileWalk`) is always split where the loop allows: the
producer walks the same tiles and refills slots across the end of a tile, so
the next tile's first operands load while the consumers store this one's
result. Both roles count the iterations of the tiles done so far, and slots
and phases go by that count. The slots are read inside the walk, as is the
epilogue's tile, so the merge of shared memory keeps them apart.

The plan (which statement runs in which stage, the slots) goes into the Trace
so that the notebook can replay the schedule.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import tvm
from tvm import sym, tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.builder import seq
from ..ir.dtypes import buffer_bytes, itemsize
from ..ir.keys import (
    CLUSTER,
    KERNEL,
    PIPELINE_PLAN,
    PIPELINED,
    REFILL,
    SWIZZLE,
    THREADS,
    WARP_PRODUCER,
    block_threads,
    fact,
)
from ..ir.tile_ops import (
    Region,
    fragment_views,
    is_buffer,
    is_load,
    op_name,
    regions,
    shared_views,
    tile_call,
)
from ..ir.visit import UserErrors, keep_user_errors, rewrite, rewrite_pre, substitute, walk
from ..ops._gemm_wgmma import proxy_fence
from ..ops._lowering import address, extern, sync
from .insert_barriers import accesses
from .tensor_views import tensor_views
from .warp_roles import has_roles


def _is_producer(stmt) -> bool:
    if not (isinstance(stmt, TilePrimitiveCall) and op_name(stmt) == "copy"):
        return False
    src, dst = regions(stmt)
    return src.scope == "global" and dst.scope.startswith("shared")


def _only_multiplies(consumers) -> bool:
    """Is the body after the copies only T.gemms that warpgroup MMA may take, each adding
    to its accumulator (one that clears it would write registers an MMA in flight writes)?"""
    return bool(consumers) and all(
        isinstance(c, TilePrimitiveCall) and op_name(c) == "gemm" and
        not c.config.get("clear_accum") and
        all(r.dtype in ("float16", "bfloat16") for r in regions(c)[:2]) for c in consumers)


def _in_flight(call):
    """The T.gemm `call`, told to leave its MMAs in flight (a `gemm_wait` follows the loop)."""
    return TilePrimitiveCall(*call.args, op=call.op, config={**call.config, "in_flight": True})


def _fenced_once(computed: list, staging, tma: bool) -> tuple[list, list]:
    """The loop's T.gemms told which of them need no `fence.proxy.async` before their MMAs
    (`proxy_fenced`), and the fence to put before the loop for them (or none).
    Warpgroup MMA reads shared memory through the async proxy; ordinary stores write it
    through the generic one, and a fence between the two makes the stores visible. Tiles
    that TMA filled (`tma`: the loop's staged ones) were written through the async proxy
    already; tiles the loop does not write (FlashAttention's Q, copied before the loop)
    need a fence once, before the loop, not one per iteration."""
    _, written = accesses(seq(computed), keep=is_buffer)  # (the TMA copies are not in it)
    once = False

    def fenced(call):
        nonlocal once
        if not (isinstance(call, TilePrimitiveCall) and op_name(call) == "gemm"):
            return call
        shared = [r.buffer.name for r in regions(call)[:2] if r.scope.startswith("shared")]
        by_tma = {name for name in shared if tma and name in staging.buffers}
        if any(name in written or name in staging.buffers and name not in by_tma
               for name in shared):
            return call  # written in the loop (cp.async too): a fence every iteration
        once = once or len(by_tma) < len(shared)
        return TilePrimitiveCall(*call.args, op=call.op,
                                 config={**call.config, "proxy_fenced": True})

    computed = [fenced(c) for c in computed]
    return computed, [proxy_fence()] if once else []


def _describe(stmt) -> str:
    if isinstance(stmt, TilePrimitiveCall):
        names = ", ".join(r.buffer.name for r in regions(stmt))
        return f"{op_name(stmt)}({names})"
    if isinstance(stmt, tirx.For):
        return f"loop over {stmt.loop_var.name}"
    return type(stmt).__name__


# ---------------------------------------------------------------- TMA


def _tensor_map(maps: dict, key: str, name: str):
    """The descriptor variable of a TMA spec (`key`, its JSON): one per distinct spec."""
    if key not in maps:
        maps[key] = tirx.Var(f"{name}_tma", tensor_map_type())
    return maps[key]


def tensor_map_type():
    """TVM's type of a CUtensorMap kernel parameter (`const __grid_constant__ CUtensorMap`)."""
    from tvm.script import tirx as T

    return T.handle("tensormap").ty


def bind_tensor_maps(body, maps: list):
    """`body` with its descriptor variables defined. A descriptor is a kernel parameter, so
    the host code that TVM splits off must define it: storage on the host's stack.
    tilelab's launcher (runtime/cuda.py) is what encodes and passes it; TVM's host function
    is never run."""
    if not maps:
        return body
    return seq([tirx.Bind(m, tirx.tvm_stack_alloca("tensormap", 1)) for m in maps] + [body])


def tma_spec(producer, layouts: dict, views: dict | None = None) -> dict | str:
    """How TMA copies this producer's tile, or why it cannot: the global tensor's shape,
    the box of one copy (innermost dimension first) and the swizzle, taken from the wgmma
    layout `layouts` (a trial layout inference) gives the shared tile. A view's descriptor
    describes its own shape over the viewed tensor's memory (`views`:
    passes/tensor_views.tensor_views)."""
    src, dst = regions(producer)
    layout = layouts.get(dst.buffer.name)
    if producer.config.get("disable_tma"):
        return "T.copy(..., disable_tma=True)"
    if layout is None or layout.recipe.get("kind") != "wgmma_panels":
        return f"{dst.buffer.name} is not a warpgroup MMA operand tile"
    return tma_box(dst, src, int(layout.recipe["swizzle_bytes"]), views)


def tma_box(tile: Region, tensor: Region, swizzle: int, views: dict | None = None) -> dict | str:
    """The descriptor's spec for TMA to move the whole shared `tile` from or to the box
    `tensor` of a global tensor, the tile laid out in panels of `swizzle`-byte rows
    (`Layout.wgmma_panels`), or why TMA cannot: the tensor's shape, the box of one copy
    (innermost dimension first: one panel's columns, the tile's rows), the panels and the
    bytes they hold. Loads (tma_spec) and stores (passes/tma_stores.py) ask alike."""
    from ..runtime.cuda import TENSOR_MAP_DTYPES

    name = str(tensor.buffer.name)
    if tensor.dtype not in TENSOR_MAP_DTYPES:
        return f"{name} is {tensor.dtype}: the launcher encodes descriptors of " \
            f"{', '.join(TENSOR_MAP_DTYPES)}"
    if name in (views or {}) and views[name] is None:
        return f"{name} is made from an address in the kernel (T.make_tensor); a TMA " \
            "descriptor is made on the host, for a tensor of the launch"
    if tensor.dtype != tile.dtype or len(tile.buffer.shape) < 2 or \
            [int(e) for e in tile.extents[-2:]] != [int(e) for e in tile.buffer.shape[-2:]] or \
            any(int(e) != 1 for e in tile.extents[:-2]):
        return "the copy converts its dtype or moves less than one whole 2-D tile"
    if not all(isinstance(s, (int, tirx.IntImm)) for s in tensor.buffer.shape):
        return f"{name} has a symbolic shape (descriptors are encoded for one shape)"
    shape = [int(s) for s in tensor.buffer.shape]
    rows, cols = (int(s) for s in tile.buffer.shape[-2:])
    extents = tensor.static_extents()
    if not 2 <= len(shape) <= 4 or extents is None or \
            list(extents[-2:]) != [rows, cols] or any(e != 1 for e in extents[:-2]):
        return f"the region of {name} is not one 2-D box of a 2- to 4-D tensor"
    nbytes = itemsize(tensor.dtype)
    strides = [math.prod(shape[d + 1:]) * nbytes for d in range(len(shape) - 1)]
    if any(st % 16 or st >= 1 << 40 for st in strides):
        return f"rows of {name} are {strides[-1]} bytes apart: TMA strides are " \
               "multiples of 16"
    if rows > 256:
        return f"{rows} rows: a TMA box has at most 256"
    width = swizzle // nbytes  # elements of one panel's row
    view = {"view": name} if name in (views or {}) else {}  # (names the descriptor)
    return {"tensor": (views or {}).get(name, name), **view, "dtype": tensor.dtype,
            "shape": shape, "box": [width, rows] + [1] * (len(shape) - 2), "swizzle": swizzle,
            "panels": cols // width, "bytes": rows * cols * nbytes}


def predicted_shared_layouts(kernel, annotated: dict, wgmma_off) -> dict:
    """The layouts InferLayouts will give the kernel's shared tiles (a trial run here;
    the staging of pipelined tiles adds a slot dimension and changes no layout)."""
    from .infer_layouts import infer_layouts

    pending = len(UserErrors.pending)
    try:
        plan = infer_layouts(kernel, block_threads(kernel), annotated, None, wgmma_off)
    except Exception:  # noqa: BLE001 - the real inference reports it, later and in full
        del UserErrors.pending[pending:]
        return {}
    return plan.shared_layouts


class _Staging:
    """Shared tiles that get S slots: the new buffers and how to rewrite accesses."""

    def __init__(self, stages: int):
        self.stages = stages
        self.buffers: dict = {}  # old buffer name -> (old buffer, staged buffer)
        self.tensor_maps: list = []  # the TMA descriptors the loop's copies read

    def add(self, buffer):
        shape = [self.stages] + [int(s) for s in buffer.shape]
        staged = tirx.decl_buffer(shape, buffer.dtype, name=buffer.name, scope=buffer.scope())
        self.buffers[buffer.name] = (buffer, staged)

    def region(self, region: Region, slot) -> Region:
        _, staged = self.buffers[region.buffer.name]
        return Region(staged, (slot, *region.starts), (1, *region.extents))

    def retarget(self, stmt, slot):
        """Point every use of a staged tile in `stmt` at `slot`."""
        def on_tile_op(op):
            regs = [a for a in op.args]
            changed = False
            new_args = []
            for a in regs:
                if _is_region(a) and a.source.name in self.buffers:
                    new_args.append(self.region(Region.from_tir(a), slot).to_tir())
                    changed = True
                else:
                    new_args.append(a)
            if not changed:
                return op
            return TilePrimitiveCall(*new_args, op=op.op, config=dict(op.config))

        def on_load(load):
            if is_load(load) and load.source.name in self.buffers:
                return tirx.BufferLoad(self.buffers[load.source.name][1],
                                       [slot, *load.indices])
            return load

        def on_store(store):
            if store.buffer.name in self.buffers:
                return tirx.BufferStore(self.buffers[store.buffer.name][1], store.value,
                                        [slot, *store.indices])
            return store

        import tvm

        stmt = rewrite(stmt, TilePrimitiveCall, on_tile_op)
        stmt = rewrite(stmt, tvm.ir.TensorLoad, on_load)
        return rewrite(stmt, tirx.BufferStore, on_store)


def _is_region(arg) -> bool:
    import tvm

    return isinstance(arg, tvm.ir.TensorRegion)


def _stamp(timeline, block, k, event: int):
    """timeline[block, k, event] = %globaltimer, by thread 0 of the first few blocks."""
    now = tirx.call_extern("int64", "tl::globaltimer")
    store = tirx.BufferStore(timeline, now, [block, k, tirx.const(event, "int32")])
    return tirx.IfThenElse(tirx.LT(block, int(timeline.shape[0])), store, None)


def buffer_uses(node) -> dict:
    """How many times each buffer is read or written (tile ops, loads, stores) in `node`."""
    import tvm

    counts: dict = {}

    def visit(n):
        names = []
        if isinstance(n, TilePrimitiveCall):
            names = [r.buffer.name for r in regions(n)]
        elif isinstance(n, tirx.BufferStore):
            names = [n.buffer.name]
        elif isinstance(n, tvm.ir.TensorLoad) and is_buffer(n.source):
            names = [n.source.name]
        for name in names:
            counts[str(name)] = counts.get(str(name), 0) + 1

    walk(node, (TilePrimitiveCall, tirx.BufferStore, tvm.ir.TensorLoad), visit)
    return counts


def pipeline_loop(loop, timeline=None, block=None, uses=None, overlap_gemms=False,
                  shared_layouts=None, no_tma="no TMA on this target", specialize=None,
                  views=None, tiles=None):
    """`uses`: buffer use counts of the whole kernel. A tile also used outside the loop keeps
    its single slot (its copy stays synchronous): other code may expect its last contents.
    `overlap_gemms`: the target's T.gemm can stay in flight (sm_90a's warpgroup MMA).
    `shared_layouts`: a function giving the predicted layouts of the kernel's shared tiles
    where TMA may copy them (None: cp.async only, because of `no_tma`).
    `specialize`: a `Roles` where a TMA loop may be warp-specialized.
    `tiles`: the `TileWalk` around the loop, whose producer may then run ahead across
    tiles; the loop is split there or left alone, and what replaces it replaces the walk.
    Returns (front, new, staging): what replaces the loop, its staged tiles (None: the loop
    is left as it was), and, where the loop is warp-specialized, the statements for the top
    of the block, the producer among them (otherwise none)."""
    stages = int(loop.annotations["num_stages"])
    written, loop = loop, _from_zero(loop)
    body = list(loop.body) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
    # tiles allocated in the body (`a_s = T.alloc_shared(...)` inside the loop) are
    # allocated before it: the prologue fills their first slots before the loop runs
    allocs = [s for s in body if isinstance(s, tirx.AllocBuffer)]
    if allocs:
        body = [s for s in body if not isinstance(s, tirx.AllocBuffer)]
        loop = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, seq(body),
                        thread_binding=loop.thread_binding, annotations=loop.annotations)
    inside = buffer_uses(loop.body)
    producers = [s for s in body if _is_producer(s) and
                 (uses or inside).get(regions(s)[1].buffer.name, 0) ==
                 inside.get(regions(s)[1].buffer.name, 0)]
    if stages < 2 or not producers:
        return [], written, None
    staging = _Staging(stages)
    for p in producers:
        staging.add(regions(p)[1].buffer)
    k, n = loop.loop_var, loop.extent
    consumers = [s for s in body if not any(s.same_as(p) for p in producers)]

    overlap = overlap_gemms and stages >= 3 and _only_multiplies(consumers)
    specs = [tma_spec(p, shared_layouts(), views) for p in producers] \
        if shared_layouts is not None else [no_tma]
    tma = all(isinstance(spec, dict) for spec in specs)
    if not tma:
        no_tma = next(spec for spec in specs if isinstance(spec, str))
    threads = None  # the consumers' threads, where a producer warp issues the copies
    gemms = sum(isinstance(c, TilePrimitiveCall) and op_name(c) == "gemm" for c in consumers)
    allowed = [k] + ([] if specialize is None else specialize.allowed) + \
        ([] if tiles is None else [tiles.loop.loop_var])
    cluster = None  # where neighbouring blocks copy the same tiles and share them
    if tma and specialize is not None and \
            _may_hoist([loop.min, loop.extent] + ([] if tiles is None else tiles.bounds),
                       producers, allowed, specialize.written) and \
            (tiles is not None and overlap or specialize.pays(staging, overlap, gemms)):
        threads = specialize.threads
        # measured to pay where it computes between T.gemm, not rotated (H200, d128:
        # 1.009x; rotated 0.98x, and loops that only multiply lost in ab61249)
        if not overlap and tiles is None and not specialize.rotate:
            cluster = specialize.pair(loop, producers, specs)
    elif tiles is not None:
        return [], written, None
    if tma:
        maps: dict = {}  # one descriptor per tensor and box
        for spec in specs:
            key = json.dumps(spec, sort_keys=True)
            name = spec.get("view", spec["tensor"])  # a view's own name: its own descriptor
            spec["map"] = _tensor_map(maps, key, name)
        staging.tensor_maps = list(maps.values())
        # in the dynamic allocation with the tiles: static shared memory would come first
        # in the block's window and move the tiles off the alignment TMA and wgmma need
        full = tirx.decl_buffer((stages,), "uint64", name="tma_full", scope="shared.dyn")
        empty = tirx.decl_buffer((stages,), "uint64", name="tma_empty", scope="shared.dyn")

    def barrier_of(slot, rw_mask=None, which=None):
        """The slot's mbarrier (`full`, or `which`). Where all threads reach it, a
        `tvm_access_ptr` tells TVM's liveness analysis that the memory is in use
        (`rw_mask`: read 1, written 2); thread 0's own accesses (inside an `if`) are plain
        addresses, which TVM's barrier pass would otherwise want to guard with a
        __syncthreads inside that `if`."""
        which = full if which is None else which
        if rw_mask is None:
            return tirx.address_of(tirx.BufferLoad(which, [slot]))
        return address(which, [slot], rw_mask=rw_mask)

    def issue(iteration, slot):
        stmts = []
        for i, p in enumerate(producers):
            src, dst = regions(p)
            src = Region(src.buffer, tuple(substitute(s, {k: iteration}) if not isinstance(s, int)
                                           else s for s in src.starts), src.extents)
            where = {"loc": p.config["loc"]} if "loc" in p.config else {}  # the user's line
            if tma:
                spec = specs[i]
                where.update(tma=spec["map"], barrier=barrier_of(slot), tma_spec=json.dumps(
                    {key: value for key, value in spec.items() if key != "map"}))
                if cluster is not None and cluster.shared[i]:
                    where.update(multicast=CLUSTER_BLOCKS)
            else:  # for the instruction record (`--source`)
                where.update(not_tma=no_tma)
            stmts.append(tile_call("copy", src, staging.region(dst, slot), asynchronous=True,
                                   **where))
        return seq(stmts)

    def guarded(iteration, stmt):
        if isinstance(n, tirx.IntImm) and isinstance(iteration, int) and iteration < int(n.value):
            return stmt
        return tirx.IfThenElse(tirx.LT(iteration, n), stmt, None)

    if threads is not None:
        front, new, staging = _specialized(
            loop, producers, consumers, staging, issue, barrier_of, full, empty, threads,
            [_describe(s) for s in body], [any(s.same_as(p) for p in producers) for s in body],
            overlap, specialize.turns_pay(staging, loop, gemms), timeline, block, tiles,
            specialize.rotate, cluster)
        return allocs + front, new, staging  # (the producer, at the top, writes them too)
    ahead = stages - 2 if overlap else stages - 1  # iterations a copy runs ahead of its use
    # cp.async: a group per iteration, and at most ahead-1 groups left in flight at the top
    # of an iteration; TMA: wait for the phase of this iteration's slot
    commit = [] if tma else [extern("tl::cp_async_commit")]
    wait = extern("tl::mbar_wait", barrier_of(tirx.floormod(k, stages), 1),
                   tirx.floormod(tirx.floordiv(k, stages), 2)) if tma else \
        extern(f"tl::cp_async_wait<{ahead - 1}>")
    prologue = []
    if tma:  # one arrival (thread 0's expect_tx) per copy and slot
        prologue = [tirx.AllocBuffer(full)] + \
            [extern("tl::mbar_init", barrier_of(s, 2), len(producers)) for s in range(stages)] + \
            [extern("tl::mbar_init_fence"), sync()]
    for s in range(ahead):
        prologue += [guarded(s, issue(s, s))] + commit
    later = k + ahead
    refill = tirx.AttrStmt(tirx.const(0, "int32"), REFILL, tirx.const(1, "int32"),
                           guarded(later, issue(later, tirx.floormod(later, stages))))
    computed, fence = _fenced_once(
        [staging.retarget(c, tirx.floormod(k, stages)) for c in consumers], staging, tma)
    drain = []
    if overlap:  # after the loop, wait for the last iteration's MMAs - before the barrier:
        # past it the tiles they read may hold other tiles (the merge of shared memory)
        computed = [_in_flight(c) for c in computed]
        accumulators = {regions(c)[2].buffer.name: regions(c)[2] for c in consumers}
        drain = [tile_call("gemm_wait", Region.whole(r.buffer)) for r in accumulators.values()]
    if tma:  # every thread is past its last wait: the barriers' memory may be reused
        drain += [sync()] + [extern("tl::mbar_inval", barrier_of(s, 2)) for s in range(stages)]
    new_body = [wait, sync(), refill] + commit + computed
    if timeline is not None:  # an instrumented build: stamp the four points of an iteration
        top = 3 + len(commit)
        new_body = [_stamp(timeline, block, k, 0)] + new_body[:2] + \
            [_stamp(timeline, block, k, 1)] + new_body[2:top] + \
            [_stamp(timeline, block, k, 2)] + new_body[top:] + [_stamp(timeline, block, k, 3)]
    plan = {
        "loop": str(k.name), "num_stages": stages,
        "extent": int(n.value) if isinstance(n, tirx.IntImm) else str(n),
        "statements": [{"text": _describe(s),
                        "stage": 0 if any(s.same_as(p) for p in producers) else ahead,
                        "order": i,
                        "role": "copy" if any(s.same_as(p) for p in producers) else "compute"}
                       for i, s in enumerate(body)],
        "slots": {name: stages for name in staging.buffers},
        "async_groups": [[_describe(p) for p in producers]],
        "ahead": ahead,
        "tma": tma,
        "copies": "TMA (thread 0 issues one box copy per panel of a tile), completion counted "
                  "by an mbarrier per slot" if tma else
                  f"cp.async, 16 bytes per thread (not TMA: {no_tma})",
        "waits": (f"mbarrier wait for the slot's phase (parity (k / {stages}) % 2)" if tma else
                  f"cp.async.wait_group {ahead - 1}") + " then a barrier, at the top of each "
                 "iteration" + ("; each T.gemm leaves its MMAs in flight until the next "
                                "iteration's (wgmma.wait_group 1)" if overlap else ""),
    }
    new_loop = tirx.For(k, loop.min, loop.extent, loop.kind, seq(new_body),
                        annotations={"num_stages": stages, PIPELINED: True,
                                     PIPELINE_PLAN: fact(plan)})
    return [], seq(allocs + prologue + fence + [new_loop] + drain), staging


SHARED_PER_SM = 228 * 1024  # sm_90 (TMA implies it); the runtime keeps 1 KB per block


@dataclass
class Roles:
    """What the choice of a producer warp needs to know about the block."""

    threads: int  # the block's threads: the consumers
    allowed: list  # variables a producer may read: block indices, scalar parameters
    written: set  # names of the tensors the kernel writes (a producer must not read them)
    shared_bytes: int  # the block's shared tiles in use up to the loop's end, one slot each
    always: bool = False  # split wherever the loop allows (tl.force_warp_specialized)
    turns: bool | None = None  # two consumer warpgroups take turns at the MMAs (_take_turns;
    # None: where measured to pay, `turns_pay`)
    rotate: bool = False  # the next iteration's first T.gemm before this one's last (_rotated)
    blocks: tuple = ()  # the kernel's block loops
    multicast: bool = True  # pairs of blocks may share tiles (not tl.disable_tma_multicast)

    def pays(self, staging, overlap: bool = True, gemms: int = 0) -> bool:
        """Where a split was measured to pay (H200): a block whose shared memory, with the
        loop's slots, keeps a second block off the SM - otherwise the producer's registers
        cost blocks (GEMM 8192^3, 128x128x32 in 3 stages, room for four blocks: 296
        TFLOP/s split, 469 not) - and
        - a loop that only multiplies (`overlap`) on one consumer warpgroup (128 threads;
          128x128x64 tiles in 4 stages: 588 TFLOP/s split, 548-556 not; with two, 128x256x64,
          the split measured 3-5% slower);
        - a loop that computes between two T.gemm (`gemms`: FlashAttention's softmax) on
          two consumer warpgroups (d128, 128x128 tiles: x0.90-0.93 of SDPA split, x0.88-0.90
          not; causal x0.94-0.96 against x0.84-0.87; where a second block fits, one role
          won: 128x64 tiles x0.89 against x0.86, d64 128x128 x1.07-1.10 against x0.89).
        Other loops split only where asked (tl.force_warp_specialized)."""
        return self.always or self._measured_to_pay(staging, overlap, gemms)

    def _measured_to_pay(self, staging, overlap: bool, gemms: int) -> bool:
        slots = sum((staging.stages - 1) * buffer_bytes(old) for old, _ in staging.buffers.values())
        alone = 2 * (self.shared_bytes + slots + 1024) > SHARED_PER_SM
        measured = self.threads == 128 if overlap else self.threads == 256 and gemms >= 2
        return alone and measured

    def turns_pay(self, staging, loop, gemms: int) -> bool:
        """Whether the two consumer warpgroups of a split loop take turns at the tensor cores:
        where asked (tl.enable_warpgroup_turns), else where measured to pay (H200, d128,
        128x128 tiles, four runs: x0.97-1.00 of SDPA with turns, x0.90-0.95 without): a loop
        split by measurement (`pays`) whose trip count is the same in every block. With the
        causal bound (a block-dependent count) they measured x0.88-0.97 against x0.94; with
        128x64 tiles (not split by measurement) x0.81 against x0.86."""
        if self.turns is not None:
            return self.turns
        names = []  # the variables the trip count reads (block indices, sizes)
        walk(loop.extent, tirx.Var, names.append)
        return not names and self._measured_to_pay(staging, False, gemms)

    def pair(self, loop, producers, specs) -> Cluster | None:
        """Two neighbouring blocks, 2c and 2c+1 along one block axis, that run the loop
        alike (the same bounds) and copy the same tiles of some operand at every iteration:
        they may run as a cluster and each ask TMA for half of those tiles' boxes, for
        both. None where no block axis of an even, static extent has such an operand with
        an even number of boxes. (Blocks renumbered later keep their pairs: HeavyBlocksFirst
        reverses an axis, which maps pairs of an even extent to pairs; T.use_swizzle's
        panels would not, so its blocks are not paired.)"""
        if not self.multicast or not self.blocks:
            return None
        for block in self.blocks:
            tag = str(block.thread_binding.thread_tag) if block.thread_binding is not None \
                else ""
            if not tag.startswith("blockIdx.") or not isinstance(block.extent, tirx.IntImm) \
                    or int(block.extent) % CLUSTER_BLOCKS:
                continue
            analyzer = sym.Analyzer()
            for other in self.blocks:
                analyzer.bind(other.loop_var, tvm.ir.Range(0, other.extent))
            c = tirx.Var("c", block.loop_var.ty)
            analyzer.bind(c, tvm.ir.Range(0, int(block.extent) // CLUSTER_BLOCKS))

            def alike(expr, block=block, c=c, analyzer=analyzer) -> bool:
                if isinstance(expr, int):
                    return True
                first = substitute(expr, {block.loop_var: c * CLUSTER_BLOCKS})
                return all(analyzer.can_prove_equal(
                    first, substitute(expr, {block.loop_var: c * CLUSTER_BLOCKS + rank}))
                    for rank in range(1, CLUSTER_BLOCKS))

            if not (alike(loop.min) and alike(loop.extent)):
                continue
            shared = [spec["panels"] % CLUSTER_BLOCKS == 0 and
                      all(alike(start) for start in regions(p)[0].starts)
                      for p, spec in zip(producers, specs)]
            if any(shared):
                return Cluster("xyz".index(tag[-1]), shared)
        return None


CLUSTER_BLOCKS = 2  # blocks that share tiles: a pair


@dataclass
class Cluster:
    """Blocks 2c and 2c+1 along block axis `axis` run as one cluster. For producer i with
    `shared[i]`, each block asks TMA for every other box of the tile (`multicast`): a box
    lands in both blocks' slots and completes both blocks' `full` mbarriers. Each block's
    producer refills a slot only when the consumer warps of both have released it."""

    axis: int  # 0: blockIdx.x
    shared: list

    def dims(self) -> list:
        return [CLUSTER_BLOCKS if d == self.axis else 1 for d in range(3)]


def _may_hoist(bounds, producers, allowed, written) -> bool:
    """May a producer warp run this loop's copies from the start of the block? Their
    places, and the `bounds` that decide which run (the loop's, a tile walk's guards), may
    use only the loop's counter, block indices and the kernel's parameters (`allowed`) and
    read tensors the kernel does not write (`written`): nothing the block computes first."""
    import tvm

    ok = all(regions(p)[0].buffer.name not in written for p in producers)

    def visit(node):
        nonlocal ok
        if isinstance(node, tirx.Var) and not is_buffer(node) and \
                not any(node.same_as(a) for a in allowed):
            ok = False
        elif isinstance(node, tvm.ir.TensorLoad) and is_buffer(node.source) and \
                (node.source.scope() != "global" or node.source.name in written):
            ok = False

    for expr in list(bounds) + [s for p in producers for s in regions(p)[0].starts
                                if not isinstance(s, int)]:
        walk(expr, object, visit)
    return ok


def _written_tensors(kernel) -> set:
    """Names of the global tensors a kernel writes (stores, tile ops' destinations)."""
    from ..ops import effects

    names: set = set()

    def visit(node):
        if isinstance(node, TilePrimitiveCall):
            names.update(str(w.buffer.name) for w in effects(node).writes
                         if w.buffer.scope() == "global")
        elif isinstance(node, tirx.BufferStore) and node.buffer.scope() == "global":
            names.add(str(node.buffer.name))

    walk(kernel, object, visit)
    return names


@dataclass
class TileWalk:
    """A loop over output tiles whose body, inside `if`s without `else` (its `guards`), lists
    one pipelined loop among other statements (`stmts`, the loop at `at`): T.Persistent
    writes one. Split between roles, its producer walks the same tiles and runs ahead
    across them - it fills the next tile's slots while the consumers finish this one."""

    loop: tirx.For
    guards: list
    stmts: list
    at: int

    @property
    def inner(self):
        return self.stmts[self.at]

    @property
    def bounds(self) -> list:
        """What decides the tiles walked: the loop's range and the guards."""
        return [self.loop.min, self.loop.extent, *self.guards]

    @staticmethod
    def find(stmt):
        """The walk `stmt` is, or None."""
        if not (isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.SERIAL and
                "num_stages" not in stmt.annotations):
            return None
        guards, node = [], stmt.body
        while isinstance(node, tirx.IfThenElse) and node.else_case is None:
            guards.append(node.condition)
            node = node.then_case
        stmts = list(node) if isinstance(node, tirx.SeqStmt) else [node]
        at = [i for i, s in enumerate(stmts) if isinstance(s, tirx.For) and
              "num_stages" in s.annotations and PIPELINED not in s.annotations]
        return TileWalk(stmt, guards, stmts, at[0]) if len(at) == 1 else None

    def around(self, stmts: list, loop_var=None):
        """`stmts` in the walk's loop and guards (over `loop_var`, a fresh name for it)."""
        var = self.loop.loop_var
        body = seq(stmts)
        for cond in reversed(self.guards):
            body = tirx.IfThenElse(cond, body, None)
        if loop_var is not None:
            body = substitute(body, {var: loop_var})
            var = loop_var
        return tirx.For(var, self.loop.min, self.loop.extent, self.loop.kind, body,
                        annotations=self.loop.annotations)

    def replacing(self, stmts: list):
        """The walk with its pipelined loop replaced by `stmts`."""
        return self.around(self.stmts[:self.at] + stmts + self.stmts[self.at + 1:])


def _specialized(loop, producers, consumers, staging, issue, barrier_of, full, empty,
                 threads: int, texts: list, is_copy: list, overlap: bool, turns: bool,
                 timeline=None, block=None, tiles=None, rotate: bool = False,
                 cluster: Cluster | None = None):
    """The loop split between a producer warp and the consumer warpgroups (module doc).
    Where it only multiplies (`overlap`), its MMAs stay in flight and each iteration
    releases the slot of the one before, whose MMAs wgmma.wait_group 1 has just waited
    for; otherwise every T.gemm waits for its MMAs and an iteration releases its own slot
    at its end, after all its reads. Returns (front, consumer loop + drain, staging).
    Instrumented (`timeline`), the consumers stamp events 0, 1 and 3 of each iteration
    (waiting, tiles there, compute done) and the producer event 2, when it issued that
    iteration's copies (instrument.py).
    In a `TileWalk` (`tiles`) both roles walk the tiles and count the iterations done in
    earlier tiles (`done`, a register of each thread): slots and phases go by the count,
    so the producer refills across the end of a tile as within one. The consumers wait
    for a tile's last MMAs and release its last slot before the statements after the
    loop (the tile's epilogue) run; the barriers are dropped after the walk.
    In a `cluster` a producer's copies also fill the other block's slot, so each consumer
    warp releases a slot in both blocks (whose `empty` mbarriers count the warps of
    both), the blocks start together once both have initialized their mbarriers, and
    before a block drops its mbarriers its consumers wait for both blocks' releases of
    the last slots: no arrival from the other block comes later."""
    stages = staging.stages
    ahead = stages - 2 if overlap else stages - 1  # iterations the producer runs ahead
    k, n = loop.loop_var, loop.extent
    done = None if tiles is None else \
        tirx.decl_buffer((1,), "int32", name="pipeline_done", scope="local")
    before = 0 if done is None else tirx.BufferLoad(done, [0])  # iterations of earlier tiles
    count_tile = [] if done is None else [tirx.BufferStore(done, before + n, [0])]
    at = k + before
    # producer: before refilling slot s, wait until every consumer warp released it (the
    # phase of `empty` that the consumers of iteration k - stages completed)
    j = tirx.Var(f"{k.name}_load", k.ty)
    g = j + before
    refill_wait = tirx.IfThenElse(
        tirx.GE(g, stages), extern("tl::mbar_wait", barrier_of(
            tirx.floormod(g, stages), which=empty),
            1 - tirx.floormod(tirx.floordiv(g, stages), 2)), None)
    stamped = [] if timeline is None else [_stamp(timeline, block, j, 2)]
    producer = tirx.For(j, loop.min, loop.extent, tirx.ForKind.SERIAL,
                        seq([refill_wait, issue(j, tirx.floormod(g, stages))] + stamped))
    if tiles is not None:  # the same walk, under a name of its own
        walk_var = tiles.loop.loop_var
        producer = tiles.around([producer] + count_tile,
                                tirx.Var(f"{walk_var.name}_load", walk_var.ty))
    counter = [] if done is None else [tirx.AllocBuffer(done), tirx.BufferStore(done, 0, [0])]
    front = [tirx.AllocBuffer(full), tirx.AllocBuffer(empty)] + counter + \
        [extern("tl::mbar_init", barrier_of(s, 2), len(producers)) for s in range(stages)] + \
        [extern("tl::mbar_init", barrier_of(s, 2, empty),
                threads // 32 * (CLUSTER_BLOCKS if cluster else 1)) for s in range(stages)] + \
        [extern("tl::mbar_init_fence"), sync()] + \
        ([tirx.AttrStmt(tirx.const(0, "int32"), CLUSTER, tvm.ir.StringImm(
            json.dumps(cluster.dims())), extern("tl::cluster_sync"))] if cluster else []) + [
         # hidden from TVM's barrier pass like a refill: the mbarriers order its copies
         # (a loop that computes between its MMAs gives the consumers the producer's
         # registers: FlashAttention's fragments outgrow what 384 threads get at launch)
         tirx.AttrStmt(tirx.const(0, "int32"), REFILL, tirx.const(1, "int32"),
                       tirx.AttrStmt(tirx.const(0 if overlap else 1, "int32"), WARP_PRODUCER,
                                     tirx.const(threads, "int32"), producer))]
    # consumers: wait for the slot's bytes; multiply, leaving the MMAs in flight; release
    # the previous iteration's slot, whose MMAs wgmma.wait_group 1 has just waited for
    rotation = Rotation.find(consumers) if rotate and not overlap and tiles is None else None
    computed, fence = _fenced_once(
        [staging.retarget(c, tirx.floormod(at, stages)) for c in consumers], staging, True)
    if overlap:
        computed = [_in_flight(c) for c in computed]
    two_groups = turns and not overlap and tiles is None and threads == 256
    last_turn = []
    if two_groups and rotation is None:  # (a rotated loop takes turns its own way)
        computed, last_turn = _take_turns(computed, k)

    def release(iteration):
        return extern("tl::mbar_arrive_warp_pair" if cluster else "tl::mbar_arrive_warp",
                      barrier_of(tirx.floormod(iteration, stages), 1, empty))

    def wait_for(iteration):  # until the slot of `iteration` (counted from 0) is full
        return extern("tl::mbar_wait", barrier_of(tirx.floormod(iteration, stages), 1),
                      tirx.floormod(tirx.floordiv(iteration, stages), 2))

    def stamp(iteration, event):
        return [] if timeline is None else [_stamp(timeline, block, iteration, event)]

    accumulators = {regions(c)[2].buffer.name: regions(c)[2] for c in consumers} \
        if overlap else {}  # (only multiplies: each consumer is a T.gemm)
    waited = [tile_call("gemm_wait", Region.whole(r.buffer)) for r in accumulators.values()]
    drain = [sync()] + [extern("tl::mbar_inval", barrier_of(s, 2, b))
                        for b in (full, empty) for s in range(stages)]
    if cluster:  # both blocks' releases of the last slots, before the barriers go
        last = tirx.Var(f"{k.name}_released", k.ty)
        drain = [tirx.For(last, tirx.max(n - stages, 0), tirx.min(n, stages),
                          tirx.ForKind.SERIAL, extern(
                              "tl::mbar_wait", barrier_of(tirx.floormod(last, stages), 1, empty),
                              tirx.floormod(tirx.floordiv(last, stages), 2)))] + drain
    plan = {
        "loop": str(k.name), "num_stages": stages,
        "extent": int(n.value) if isinstance(n, tirx.IntImm) else str(n),
        "statements": [{"text": text, "stage": 0 if copy else ahead, "order": i,
                        "role": "copy" if copy else "compute"}
                       for i, (text, copy) in enumerate(zip(texts, is_copy))],
        "slots": {name: stages for name in staging.buffers},
        "async_groups": [[_describe(p) for p in producers]],
        # at the top of iteration k the slots released so far let the producer be this far
        # ahead (with MMAs in flight, iteration k - 1's slot is released during k)
        "ahead": ahead,
        "tma": True,
        "cluster": cluster.dims() if cluster else None,
        "warp_specialized": {"consumer_threads": threads, "producer_threads": 128},
        "copies": f"TMA, issued by a producer warp (an extra warpgroup, threads {threads}.."
                  f"{threads + 127}; one thread issues), completion counted by a `full` "
                  "mbarrier per slot" + (
                      f"; blocks run in clusters of {CLUSTER_BLOCKS} along blockIdx."
                      f"{'xyz'[cluster.axis]}, which copy the same tiles of " +
                      ", ".join(regions(p)[0].buffer.name
                                for p, shared in zip(producers, cluster.shared) if shared) +
                      ": each block asks for every other box of those, for both (multicast), "
                      "and a slot is refilled once the consumers of both released it"
                      if cluster else ""),
        "waits": "mbarriers only: consumers wait for the slot's `full` phase (parity (k / "
                 f"{stages}) % 2); each consumer warp arrives at the slot's `empty` mbarrier "
                 "when its reads are done (" + ("after the next iteration's wgmma.wait_group "
                                                "1" if overlap else "at the iteration's end") +
                 "); the producer waits for `empty` before refilling; no block-wide barrier in "
                 "the loop",
    }
    if tiles is not None:
        plan["across_tiles"] = (
            f"the loop over {tiles.loop.loop_var.name} around it (a walk over tiles): the "
            "producer walks it too and refills slots for the next trip while the consumers "
            "finish this one; slots and phases count the iterations of all trips so far")
    released = tirx.IfThenElse(tirx.GE(k, 1), release(at - 1), None) if overlap else release(at)
    if rotation is not None:
        plan["rotated"] = (
            "iteration k+1's first T.gemm is issued before iteration k's last, both in flight; "
            "wgmma.wait_group 1 waits for the first, " + (
                f"{len(rotation.early)} statement(s) of the computation between them run "
                "while the last one's MMAs do" if rotation.early else "nothing runs beside "
                "the last one's MMAs") + "; wgmma.wait_group 0, the slot released, then " +
            f"{len(rotation.late)} statement(s) that wait for them")

        def at_iteration(stmts, i):
            return [staging.retarget(substitute(c, {k: i}), tirx.floormod(i, stages))
                    for c in stmts]

        rotated = _rotated(rotation, k, n, at_iteration, wait_for, release, stamp,
                           {"num_stages": stages, PIPELINED: True, PIPELINE_PLAN: fact(plan)},
                           turns=two_groups)
        return front, seq(fence + rotated + drain), staging
    # in a walk over tiles the K loop stays rolled, as CUTLASS keeps its mainloop: where
    # each block walks one tile the walk's loop folds away and nvcc unrolled a short K loop
    # whole - nine iterations of eight MMAs at K=520 spilled 76 bytes past the 168
    # registers a thread of a 384-thread block may hold
    rolled = {} if tiles is None else {"disable_unroll": True}  # `#pragma unroll 1`
    new_loop = tirx.For(k, loop.min, loop.extent, loop.kind,
                        seq(stamp(k, 0) + [wait_for(at)] + stamp(k, 1) + computed +
                            stamp(k, 3) + [released]),
                        annotations={"num_stages": stages, PIPELINED: True,
                                     PIPELINE_PLAN: fact(plan), **rolled})
    if tiles is None:
        return front, seq(fence + [new_loop] + last_turn + waited + drain), staging
    # the tile's last slot is released once its MMAs are done; the epilogue follows
    last = [tirx.IfThenElse(tirx.GE(n, 1), release(before + n - 1), None)] if overlap else []
    return front, seq([tiles.replacing(fence + [new_loop] + waited + last + count_tile)] +
                      drain), \
        staging


def _waits_later(gemm):
    """The T.gemm, told to leave its MMAs in flight for a `gemm_wait` further on."""
    return gemm.replace(config={**gemm.config, "wait_later": True})


def _take_turns(computed, k):
    """Two consumer warpgroups that each multiply, compute in registers, then multiply
    again (FlashAttention: S = Q Kᵀ, the softmax, O += P V) take turns at the tensor
    cores, as in FlashAttention-3: a warpgroup's turn is its last T.gemm of one
    iteration and its first of the next, and while one takes its turn the other computes
    its softmax. Two named barriers order the turns (tilelab.cuh `turn_*`): a warpgroup
    waits for its turn before its last T.gemm and hands the turn over once its first is
    issued (it waits for that product after the hand-over, so that the other's MMAs
    queue behind it and the tensor cores do not run dry at the turn);
    in the first iteration (`k` 0) the second warpgroup first waits for the first's
    first T.gemm, after the loop the first hands over once more, so each wait has its
    hand-over. The barriers only order the warpgroups, they guard no memory; a loop whose
    statements need a barrier of all consumers (passes/specialize_warps.py checks after
    lowering) keeps no turns. Where measured to pay (`Roles.turns_pay`) or asked for
    (`tl.enable_warpgroup_turns`): on the H200 they paid only for 128x128 tiles of
    non-causal attention (d128: x0.98 of SDPA against x0.95 side by side); 128x64 tiles ran
    x0.82 against x0.86, causal ones x0.58 against x0.82
    (docs/PERFORMANCE.md), and waiting for the last T.gemm in the next iteration instead
    (so that the tensor cores never drain at a turn) made every case slower
    (bench/results/notes.md).
    Returns (loop statements, after the loop); unchanged where the loop has fewer than
    two T.gemm."""
    gemms = [i for i, c in enumerate(computed)
             if isinstance(c, TilePrimitiveCall) and op_name(c) == "gemm"]
    if len(gemms) < 2:
        return computed, []
    one, last = gemms[0], gemms[-1]
    first = computed[one]
    issued = _waits_later(first)
    stmts = [tirx.IfThenElse(tirx.EQ(k, 0), extern("tl::turn_first"), None)] + \
        computed[:one] + [issued, extern("tl::turn_pass"),
                          tile_call("gemm_wait", Region.whole(regions(first)[2].buffer))] + \
        computed[one + 1:last] + [extern("tl::turn_wait")] + computed[last:]
    return stmts, [extern("tl::turn_last")]


@dataclass
class Rotation:
    """A loop body `A; B; C` cut for `_rotated`: `A` ends with the body's first T.gemm
    (FlashAttention: S = Q Kᵀ), `C` is its last (O += P V), the body's last statement; `B`
    (the softmax) split into `early`, which neither C nor anything of `late` needs to wait
    for, and `late`, what touches C's operands or depends on such a statement."""

    first: list  # A: the statements up to the first T.gemm, it included
    early: list  # B's statements that may run while C's MMAs do
    late: list  # B's statements that wait for C's MMAs, in their order
    last: TilePrimitiveCall  # C

    @staticmethod
    def find(consumers):
        """The rotation of a consumer list, or None where its order forbids one."""
        def names(stmt):
            return accesses(stmt, keep=is_buffer)

        def gemms(stmt):
            found = []
            walk(stmt, TilePrimitiveCall, lambda c: found.append(c)
                 if op_name(c) == "gemm" else None)
            return found

        at = [i for i, c in enumerate(consumers) if gemms(c)]
        if len(at) != 2 or at[1] != len(consumers) - 1 or \
                any(not (isinstance(consumers[i], TilePrimitiveCall) and
                         op_name(consumers[i]) == "gemm") for i in at):
            return None
        first, middle, last = consumers[:at[0] + 1], consumers[at[0] + 1:at[1]], consumers[-1]
        last_reads, last_writes = names(last)
        touched = last_reads | last_writes

        def commutes(stmts) -> bool:  # with C: neither writes what the other touches
            reads, writes = set(), set()
            for stmt in stmts:
                r, w = names(stmt)
                reads, writes = reads | r, writes | w
            return not (writes & touched or reads & last_writes)

        if not commutes(first) or \
                regions(consumers[at[0]])[2].buffer.same_as(regions(last)[2].buffer):
            return None
        early, late, late_reads, late_writes = [], [], set(), set()
        for stmt in middle:
            reads, writes = names(stmt)
            if not commutes([stmt]) or writes & (late_reads | late_writes) or \
                    reads & late_writes:
                late.append(stmt)
                late_reads, late_writes = late_reads | reads, late_writes | writes
            else:
                early.append(stmt)
        return Rotation(first, early, late, last)


def _rotated(rotation, k, n, at_iteration, wait_for, release, stamp, annotations,
             turns: bool = False):
    """The consumers' loop rotated (FlashAttention-3's intra-warpgroup overlap): the
    T.gemm that starts iteration k + 1 (S = Q K[k+1]ᵀ) is issued before the one that ends
    iteration k (O += P[k] V[k]), both left in flight; `wgmma.wait_group 1` then waits
    for the first only, the statements of the softmax that C does not need to wait for run
    while C's MMAs do, `wait_group 0` waits for C, its slot is released, and the rest of
    the softmax follows:

        A(0); B(0)
        for k < n - 1:  A(k+1) C(k)  |  B.early(k+1)  |  wait C; release k; B.late(k+1)
        C(n-1); release n-1

    The order of the program's statements changes only where they commute (Rotation.find).
    `at_iteration(stmts, i)`: the statements of iteration i (slots and the loop's
    counter); `wait_for(i)`: wait for iteration i's tiles; `release(i)`: its slot;
    `stamp(i, event)`: timeline stamps of an instrumented build; `annotations`: the
    rotated loop's (its plan). With `turns`, two consumer warpgroups take turns (as in
    `_take_turns`): a turn is what one issues at once, A(k+1) and C(k), and C(n-1) after
    the loop. Both compute iteration 0 at once; then the second hands the first turn to
    the first (`turn_start`), and after the last turn the first hands one back
    (`turn_last`), so that each wait has its hand-over. No turn is waited for before
    iteration 0: the barrier of all consumers that publishes tiles written before the
    loop stands there, and a warpgroup waiting for its turn would never reach it.
    Returns the statements."""
    r = rotation
    j = k + 1

    def turn(name):
        return [extern(f"tl::turn_{name}")] if turns else []

    s_acc = Region.whole(regions(r.first[-1])[2].buffer)
    o_acc = Region.whole(regions(r.last)[2].buffer)
    first_next = at_iteration(r.first, j)
    first_next[-1] = _waits_later(first_next[-1])
    body = stamp(j, 0) + [wait_for(j)] + stamp(j, 1) + turn("wait") + first_next + \
        [_waits_later(at_iteration([r.last], k)[0])] + turn("pass") + \
        [tile_call("gemm_wait", s_acc, pending=1)] + at_iteration(r.early, j) + \
        [tile_call("gemm_wait", o_acc), release(k)] + at_iteration(r.late, j) + stamp(j, 3)
    zero = tirx.const(0, k.ty)
    loop = tirx.For(k, zero, n - 1, tirx.ForKind.SERIAL, seq(body), annotations=annotations)
    last = at_iteration([r.last], n - 1)
    if turns:  # hand the turn over once the MMAs are issued, then wait for them
        last = [_waits_later(last[0])] + turn("last") + [tile_call("gemm_wait", o_acc)]
    stmts = stamp(zero, 0) + [wait_for(zero)] + stamp(zero, 1) + \
        at_iteration(r.first + r.early + r.late, zero) + stamp(zero, 3) + turn("start") + \
        [loop] + turn("wait") + last + [release(n - 1)]
    if isinstance(n, tirx.IntImm) and n.value >= 1:
        return stmts
    return [tirx.IfThenElse(tirx.GE(n, 1), seq(stmts), None)]


def _program_tma(kernel, shared_layouts, views, stagings):
    """Each T.tma_copy (a copy the program's own mbarriers order, `by_barrier`) that TMA
    can make (`tma_spec`) is given its descriptor, as a pipeline's copies are."""
    staging = _Staging(1)  # no staged tiles: only the descriptors, for the launch
    maps: dict = {}

    def on_copy(call):
        if not (op_name(call) == "copy" and call.config.get("by_barrier")):
            return call
        spec = tma_spec(call, shared_layouts(), views)
        if not isinstance(spec, dict):
            return call.replace(config={**call.config, "not_tma": spec})
        key = json.dumps(spec, sort_keys=True)
        tensor_map = _tensor_map(maps, key, spec.get("view", spec["tensor"]))
        return call.replace(config={**call.config, "tma": tensor_map, "tma_spec": key})

    kernel = rewrite(kernel, TilePrimitiveCall, on_copy)
    if maps:
        staging.tensor_maps = list(maps.values())
        stagings.append(staging)
    return kernel


def _from_zero(loop):
    """`for k in T.Pipelined(start, stop)` as a loop over k' = k - start from 0: slots,
    phases and the prologue count iterations, not values of k."""
    if isinstance(loop.min, tirx.IntImm) and loop.min.value == 0:
        return loop
    k = tirx.Var(loop.loop_var.name, loop.loop_var.ty)
    body = substitute(loop.body, {loop.loop_var: k + loop.min})
    return tirx.For(k, tirx.const(0, "int32"), loop.extent, loop.kind, body,
                    annotations=loop.annotations)


def _linear_block(body):
    """The block's number in launch order, from the kernel's block loops."""
    loops = []
    walk(body, tirx.For, lambda loop: loops.append(loop)
         if loop.kind == tirx.ForKind.THREAD_BINDING else None)
    linear, stride = 0, 1
    for loop in loops:
        linear = linear + loop.loop_var * stride
        stride = stride * int(loop.extent)
    return linear


def _specialize_one(kernel, func, uses, overlap_gemms, shared_layouts, stagings,
                    always: bool = False, turns: bool | None = None, rotate: bool = False,
                    timeline=None, block=None, views=None, multicast: bool = True):
    """Pipeline the loops of the block's own statement list (not inside another loop or
    branch), warp-specializing the first that copies with TMA, keeps its MMAs in flight,
    whose copies a producer warp may issue from the start and where the split pays
    (`Roles.pays`): its `front` goes to the top of the block, after the block's
    allocations. A pipelined loop in a walk over tiles (`TileWalk`, a loop of the block's
    list) is split wherever it may be: that is what a persistent block is for. The
    block's threads must be whole warpgroups (a 1-D block)."""
    threads = [int(t) for t in kernel.annotations[THREADS]]
    if len(threads) != 1 or threads[0] % 128 or threads[0] + 128 > 1024:
        return kernel
    blocks, body = [], kernel
    while isinstance(body, tirx.For) and body.kind == tirx.ForKind.THREAD_BINDING:
        blocks.append(body)
        body = body.body
    stmts = list(body) if isinstance(body, tirx.SeqStmt) else [body]
    allowed = [b.loop_var for b in blocks] + [p for p in func.params if not is_buffer(p)]
    shared: list = []
    walk(body, tirx.AllocBuffer, lambda a: shared.append(a.buffer)
         if a.buffer.scope().startswith("shared") else None)
    written = _written_tensors(kernel)
    swizzle = kernel.annotations.get(SWIZZLE)  # T.use_swizzle renumbers the blocks later
    swizzled = swizzle is not None and bool(swizzle[2])

    def roles(at: int) -> Roles:
        """The block as the loop `stmts[at]` sees it: its shared tiles are those in use up
        to the loop's end (a tile only later statements use, an epilogue's, takes the
        slots' bytes once the loop is done: the merge of shared memory)."""
        used = buffer_uses(seq(stmts[:at + 1]))
        return Roles(threads[0], allowed, written,
                     sum(buffer_bytes(b) for b in shared if used.get(b.name)),
                     always, turns, rotate, tuple(blocks), multicast and not swizzled)

    before, after, front = [], [], []  # the statements before the split loop, and after
    for at, stmt in enumerate(stmts):
        # a walk over tiles (not in an instrumented build: its timeline counts one tile)
        tiles = TileWalk.find(stmt) if not front and timeline is None else None
        if tiles is None and not (isinstance(stmt, tirx.For) and
                                  "num_stages" in stmt.annotations and
                                  PIPELINED not in stmt.annotations):
            (after if front else before).append(stmt)
            continue
        loop_front, new, staging = pipeline_loop(stmt if tiles is None else tiles.inner,
                                                 timeline, block, uses, overlap_gemms,
                                                 shared_layouts,
                                                 specialize=None if front else roles(at),
                                                 views=views, tiles=tiles)
        if tiles is not None and staging is None:  # not split: pipelined on its own later
            before.append(stmt)
            continue
        if staging is not None:
            stagings.append(staging)
        front = front or loop_front
        (after if front else before).extend(list(new) if isinstance(new, tirx.SeqStmt)
                                            else [new])
    allocs = [s for s in before if isinstance(s, tirx.AllocBuffer)]
    body = seq(allocs + front + [s for s in before if not isinstance(s, tirx.AllocBuffer)] +
               after) if front else seq(before)
    for block in reversed(blocks):
        body = tirx.For(block.loop_var, block.min, block.extent, block.kind, body,
                        thread_binding=block.thread_binding, annotations=block.annotations)
    return body


def PipelineLoops(wgmma_off: str | None = "no sm_90a target",  # noqa: N802
                  overlap_gemms: bool = False, tma: bool = False, annotated: dict | None = None,
                  specialize: str = "off", turns: bool | None = None, rotate: bool = False,
                  multicast: bool = True):
    """Expects tile ops; rewrites T.Pipelined loops with num_stages >= 2 (see module doc).
    Each rewritten loop carries its schedule (`PIPELINE_PLAN`) for the Trace.
    `wgmma_off`: why T.gemm is not warpgroup MMA here (None: it is, sm_90a). With wgmma,
    `overlap_gemms`: T.gemm may leave its MMAs in flight; `tma`: loops whose tiles feed
    wgmma may copy them with TMA (`annotated`: the program's T.annotate_layout layouts);
    `specialize`: whether such a loop is split between a producer warp and consumer
    warpgroups (passes/specialize_warps.py finishes the split after lowering): "off",
    "measured" (where `Roles.pays`) or "always" (wherever the loop allows); `turns`: two
    consumer warpgroups of a split loop may take turns at the tensor cores (_take_turns);
    `rotate`: a split loop that computes between its T.gemm issues the next iteration's
    first before this one's last (_rotated); `multicast`: neighbouring blocks of such a
    loop that copy the same tiles may share them (`Roles.pair`)."""
    no_tma = f"no warpgroup MMA ({wgmma_off})" if wgmma_off is not None else \
        "tl.disable_tma_lower" if not tma else ""
    overlap_gemms = overlap_gemms and wgmma_off is None
    tma = tma and wgmma_off is None

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.PipelineLoops")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        stagings = []
        timeline = next((p for p in func.params if str(p.name) == "pipeline_timeline"), None)
        uses = buffer_uses(func.body)
        for base in shared_views(func.body).values():  # (a viewed tile keeps one slot:
            uses[base] = uses.get(base, 0) + 1         # its view sees that one's bytes)
        views = tensor_views(func.body)
        viewed = bool(fragment_views(func.body))
        block = _linear_block(func.body) if timeline is not None else None

        def on_kernel(kernel):
            if KERNEL not in kernel.annotations:
                return kernel
            predicted: list = []

            def shared_layouts():  # asked for by loops that may use TMA, at most once
                if not predicted:
                    predicted.append(predicted_shared_layouts(kernel, annotated or {}, wgmma_off))
                return predicted[0]

            if has_roles(kernel):  # T.ws roles order their own copies; T.tma_copy: TMA
                return _program_tma(kernel, shared_layouts, views, stagings) if tma else kernel

            if specialize != "off" and tma:
                kernel = _specialize_one(kernel, func, uses, overlap_gemms, shared_layouts,
                                         stagings, always=specialize == "always",
                                         # (its statements' accesses are compared by
                                         # buffer: a T.reshape view would hide some)
                                         turns=turns, rotate=rotate and not viewed,
                                         timeline=timeline,
                                         block=block,
                                         views=views, multicast=multicast)

            def pipelined(stmt) -> list:
                """The statements that replace `stmt` (itself, if it is no pipelined loop)."""
                if not (isinstance(stmt, tirx.For) and "num_stages" in stmt.annotations and
                        PIPELINED not in stmt.annotations):
                    return [stmt]
                _, new, staging = pipeline_loop(stmt, timeline, block, uses, overlap_gemms,
                                                shared_layouts if tma else None, no_tma,
                                                views=views)
                if staging is None:
                    return [stmt]
                stagings.append(staging)
                return list(new) if isinstance(new, tirx.SeqStmt) else [new]

            def on_seq(seq_stmt):
                stmts = [new for stmt in seq_stmt for new in pipelined(stmt)]
                return tirx.SeqStmt(stmts) if len(stmts) != len(seq_stmt) or \
                    any(not a.same_as(b) for a, b in zip(stmts, seq_stmt)) else seq_stmt

            def on_loop(loop):  # a pipelined loop that is the whole body of another loop
                stmts = pipelined(loop.body)
                if len(stmts) == 1 and stmts[0].same_as(loop.body):
                    return loop
                return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, seq(stmts),
                                thread_binding=loop.thread_binding, annotations=loop.annotations)

            return rewrite(rewrite(kernel, tirx.SeqStmt, on_seq), tirx.For, on_loop)

        body = rewrite_pre(func.body, tirx.For, on_kernel)
        for staging in stagings:
            def on_alloc(alloc, staging=staging):
                if is_buffer(alloc.buffer) and alloc.buffer.name in staging.buffers:
                    return tirx.AllocBuffer(staging.buffers[alloc.buffer.name][1])
                return alloc

            body = rewrite(body, tirx.AllocBuffer, on_alloc)
        return func.with_body(bind_tensor_maps(
            body, [m for staging in stagings for m in staging.tensor_maps]))

    return _pass

