"""Warp specialization: a producer warp copies, the consumer warpgroups compute.

In a pipelined loop where every thread both waits for copies and computes
(passes/pipeline_loops.py), each iteration starts with a block-wide barrier:
everyone must have finished reading the slot that thread 0 is about to refill.
The slowest warp sets the pace of all, and the refill is issued from the same
instruction stream as the MMAs. On Hopper the copies need no threads at all
(TMA), so the block can be split by role instead:

    threads 0..T-1     consumers: wait for a slot's `full` mbarrier, multiply,
                       arrive (one arrival per warp) at its `empty` mbarrier
    threads T..T+127   producer warpgroup: one thread waits for a slot's `empty`
                       phase and asks TMA to refill it, S slots ahead

No barrier of the whole block remains in the loop: each side waits only for
the other's signal on the slot it needs. The consumers keep the thread numbers
0..T-1 that layout inference gave them, so fragments, wgmma warpgroups and
every view are unchanged; the producer warpgroup is added after them.

The split is prepared at the tile level (PipelineLoops puts the producer's
loop, marked `WARP_PRODUCER`, at the top of the block, right after the
mbarriers are initialized) and finished here, after the code is lowered to
threads and TVM has placed its barriers:

    init mbarriers; __syncthreads()            (all T+128 threads)
    if threadIdx.x >= T:
        if threadIdx.x == T: producer loop     (written for "thread 0")
    else:
        the rest of the block                  (every __syncthreads among the
                                                consumers only: bar.sync 1, T)

and the block is launched with T+128 threads.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import TileLabCompileError
from ..ir.keys import WARP_PRODUCER
from ..ir.visit import rewrite, statements, substitute, walk
from ..ops._lowering import extern, narrow_barriers

PRODUCER_THREADS = 128  # one warpgroup: setmaxnreg and warpgroup-wide rules act per warpgroup


def _split(launch):
    """The block of this `threadIdx.x` launch, split between its roles (module doc)."""
    producers = []
    walk(launch.body, tirx.AttrStmt,
         lambda a: producers.append(a) if a.attr_key == WARP_PRODUCER else None)
    if not producers:
        return launch
    marker = producers[0]
    threads, tx = int(marker.value), launch.node.var
    stmts = statements(launch.body)
    at = next((i for i, s in enumerate(stmts) if s.same_as(marker)), None)
    if len(producers) > 1 or at is None or int(launch.value) != threads:
        raise TileLabCompileError(
            "internal: the warp-specialized loop's producer is no longer at the top of its "
            "block", hint="compile with pass_configs={'tl.disable_warp_specialized': True} "
                          "meanwhile")
    producer = substitute(marker.body, {tx: 0})  # one thread, written as thread 0
    roles = tirx.IfThenElse(
        tirx.GE(tx, threads),
        tirx.IfThenElse(tirx.EQ(tx, threads), producer, None),
        narrow_barriers(tirx.SeqStmt(stmts[at + 1:]) if len(stmts) > at + 2 else stmts[at + 1],
                        extern("tl::consumer_sync", tirx.const(threads, "int32"))))
    total = threads + PRODUCER_THREADS
    iv = launch.node
    wider = tirx.IterVar(tvm.ir.Range(0, total), iv.var, iv.iter_type, iv.thread_tag)
    return tirx.AttrStmt(wider, launch.attr_key, tirx.const(total, "int32"),
                         tirx.SeqStmt(stmts[:at] + [roles]))


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.SpecializeWarps")
def SpecializeWarps(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    def on_attr(attr):
        if attr.attr_key == "thread_extent" and str(attr.node.thread_tag) == "threadIdx.x":
            return _split(attr)
        return attr

    return func.with_body(rewrite(func.body, tirx.AttrStmt, on_attr))
