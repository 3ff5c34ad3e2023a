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
(`passes/hide_refills.py`), which would otherwise put a second barrier
between it and the consumers, not knowing that they use another slot.

On Hopper, a body that only multiplies (`T.gemm`s of float16/bfloat16 tiles:
the main loop of a GEMM) can do better. A warpgroup MMA runs asynchronously,
so each `T.gemm` leaves its instructions in flight and waits only for the
previous iteration's (`wgmma.wait_group 1`): the tensor cores multiply while
the threads go on to the next iteration's wait, barrier and copies; a
`gemm_wait` after the loop waits for the last. The slot being refilled must
then be one that no multiplication in flight still reads, so copies run S-2
iterations ahead instead of S-1 (the slot read at k-2 is refilled at k).

The plan (which statement runs in which stage, the slots) goes into the Trace
so that the notebook can replay the schedule.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.builder import seq
from ..ir.keys import PIPELINE_PLAN, PIPELINED, REFILL, fact
from ..ir.tile_ops import Region, is_buffer, is_load, op_name, regions, tile_call
from ..ir.visit import keep_user_errors, rewrite, substitute


def _extern(name: str):
    return tirx.Evaluate(tirx.call_extern("void", name))


def _barrier():
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))


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


def _describe(stmt) -> str:
    if isinstance(stmt, TilePrimitiveCall):
        names = ", ".join(r.buffer.name for r in regions(stmt))
        return f"{op_name(stmt)}({names})"
    if isinstance(stmt, tirx.For):
        return f"loop over {stmt.loop_var.name}"
    return type(stmt).__name__


class _Staging:
    """Shared tiles that get S slots: the new buffers and how to rewrite accesses."""

    def __init__(self, stages: int):
        self.stages = stages
        self.buffers: dict = {}  # old buffer name -> (old buffer, staged buffer)

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

    from ..ir.visit import walk

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

    walk(node, object, visit)
    return counts


def pipeline_loop(loop, timeline=None, block=None, uses=None, overlap_gemms=False):
    """`uses`: buffer use counts of the whole kernel. A tile also used outside the loop keeps
    its single slot (its copy stays synchronous): other code may expect its last contents.
    `overlap_gemms`: the target's T.gemm can stay in flight (sm_90a's warpgroup MMA)."""
    stages = int(loop.annotations["num_stages"])
    body = list(loop.body) if isinstance(loop.body, tirx.SeqStmt) else [loop.body]
    inside = buffer_uses(loop.body)
    producers = [s for s in body if _is_producer(s) and
                 (uses or inside).get(regions(s)[1].buffer.name, 0) ==
                 inside.get(regions(s)[1].buffer.name, 0)]
    if stages < 2 or not producers:
        return loop, None
    consumers = [s for s in body if not any(s.same_as(p) for p in producers)]
    staging = _Staging(stages)
    for p in producers:
        staging.add(regions(p)[1].buffer)
    k, n = loop.loop_var, loop.extent

    def issue(iteration, slot):
        stmts = []
        for p in producers:
            src, dst = regions(p)
            src = Region(src.buffer, tuple(substitute(s, {k: iteration}) if not isinstance(s, int)
                                           else s for s in src.starts), src.extents)
            where = {"loc": p.config["loc"]} if "loc" in p.config else {}  # the user's line
            stmts.append(tile_call("copy", src, staging.region(dst, slot), asynchronous=True,
                                   **where))
        return seq(stmts)

    def guarded(iteration, stmt):
        if isinstance(n, tirx.IntImm) and isinstance(iteration, int) and iteration < int(n.value):
            return stmt
        return tirx.IfThenElse(tirx.LT(iteration, n), stmt, None)

    overlap = overlap_gemms and stages >= 3 and _only_multiplies(consumers)
    ahead = stages - 2 if overlap else stages - 1  # iterations a copy runs ahead of its use
    commit = _extern("tl::cp_async_commit")
    prologue = []
    for s in range(ahead):
        prologue += [guarded(s, issue(s, s)), commit]
    later = k + ahead
    refill = tirx.AttrStmt(tirx.const(0, "int32"), REFILL, tirx.const(1, "int32"),
                           guarded(later, issue(later, tirx.floormod(later, stages))))
    computed = [staging.retarget(c, tirx.floormod(k, stages)) for c in consumers]
    drain = []
    if overlap:  # after the loop, wait for the last iteration's MMAs
        computed = [_in_flight(c) for c in computed]
        accumulators = {regions(c)[2].buffer.name: regions(c)[2] for c in consumers}
        drain = [tile_call("gemm_wait", Region.whole(r.buffer)) for r in accumulators.values()]
    new_body = [
        _extern(f"tl::cp_async_wait<{ahead - 1}>"),
        _barrier(),
        refill,
        commit,
    ] + computed
    if timeline is not None:  # an instrumented build: stamp the four points of an iteration
        new_body = [_stamp(timeline, block, k, 0)] + new_body[:2] + \
            [_stamp(timeline, block, k, 1)] + new_body[2:4] + \
            [_stamp(timeline, block, k, 2)] + new_body[4:] + [_stamp(timeline, block, k, 3)]
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
        "waits": f"cp.async.wait_group {ahead - 1} then a barrier, at the top of each "
                 "iteration" + ("; each T.gemm leaves its MMAs in flight until the next "
                                "iteration's (wgmma.wait_group 1)" if overlap else ""),
    }
    new_loop = tirx.For(k, loop.min, loop.extent, loop.kind, seq(new_body),
                        annotations={"num_stages": stages, PIPELINED: True,
                                     PIPELINE_PLAN: fact(plan)})
    return seq(prologue + [new_loop] + drain), staging


def _linear_block(body):
    """The block's number in launch order, from the kernel's block loops."""
    from ..ir.visit import walk

    loops = []
    walk(body, tirx.For, lambda loop: loops.append(loop)
         if loop.kind == tirx.ForKind.THREAD_BINDING else None)
    linear, stride = 0, 1
    for loop in loops:
        linear = linear + loop.loop_var * stride
        stride = stride * int(loop.extent)
    return linear


def PipelineLoops(overlap_gemms: bool = False):  # noqa: N802
    """Expects tile ops; rewrites T.Pipelined loops with num_stages >= 2 (see module doc).
    Each rewritten loop carries its schedule (`PIPELINE_PLAN`) for the Trace.
    `overlap_gemms`: T.gemm may leave its MMAs in flight (sm_90a, wgmma on)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.PipelineLoops")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        stagings = []
        timeline = next((p for p in func.params if str(p.name) == "pipeline_timeline"), None)
        uses = buffer_uses(func.body)
        block = _linear_block(func.body) if timeline is not None else None

        def on_seq(seq_stmt):
            stmts, changed = [], False
            for stmt in seq_stmt:
                if isinstance(stmt, tirx.For) and "num_stages" in stmt.annotations and \
                        PIPELINED not in stmt.annotations:
                    new, staging = pipeline_loop(stmt, timeline, block, uses, overlap_gemms)
                    if staging is not None:
                        stagings.append(staging)
                        changed = True
                    stmts.extend(list(new) if isinstance(new, tirx.SeqStmt) else [new])
                else:
                    stmts.append(stmt)
            return tirx.SeqStmt(stmts) if changed else seq_stmt

        body = rewrite(func.body, tirx.SeqStmt, on_seq)
        for staging in stagings:
            def on_alloc(alloc, staging=staging):
                if is_buffer(alloc.buffer) and alloc.buffer.name in staging.buffers:
                    return tirx.AllocBuffer(staging.buffers[alloc.buffer.name][1])
                return alloc

            body = rewrite(body, tirx.AllocBuffer, on_alloc)
        return func.with_body(body)

    return _pass

