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

Two more things happen here, where the lowered code can be read:

- Registers move from the producer to the consumers (`setmaxnreg`) in a loop
  that computes between its MMAs (pipeline_loops marks it). A block of two
  consumer warpgroups and the producer has 384 threads: 168 registers each at
  launch, which FlashAttention's S, P and O fragments outgrow. The producer,
  which only issues TMA copies, gives all but 24 back and each consumer takes
  240 (128 x 24 + 256 x 240 fits the SM's 65,536). `tl.disable_setmaxnreg`
  keeps the launch's counts; GEMM loops (their accumulators fit) keep them too.
  Where registers move, the consumers' branch comes first in the code: in the
  other order ptxas compiled them within the launch's 168 all the same.
- Two consumer warpgroups that take turns at the tensor cores
  (pipeline_loops._take_turns) wait for each other on named barriers; a loop
  that also needs a barrier of all consumers would deadlock there (one
  warpgroup waits for its turn, the other at the barrier), so such a loop
  keeps no turns.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..errors import TileLabCompileError
from ..ir.keys import WARP_PRODUCER
from ..ir.visit import rewrite, statements, substitute, walk
from ..ops._lowering import extern, extern_name, narrow_barriers

PRODUCER_THREADS = 128  # one warpgroup: setmaxnreg and warpgroup-wide rules act per warpgroup
PRODUCER_REGISTERS = 24  # setmaxnreg's least: the producer holds a few indices
REGISTERS_PER_SM = 65536
TURNS = ("tl::turn_first", "tl::turn_pass", "tl::turn_wait", "tl::turn_last", "tl::turn_start")


def _without_deadlocking_turns(body):
    """`body` without the turns of warpgroups (module doc), the hand-over after the loop
    included, where the loop that takes them also holds a barrier of all consumers."""
    def deadlocks(loop) -> bool:
        names = []
        walk(loop.body, tirx.Evaluate, lambda e: names.append(extern_name(e)))
        return "tl::turn_pass" in names and "tl::consumer_sync" in names

    loops = []
    walk(body, tirx.For, lambda loop: loops.append(loop) if deadlocks(loop) else None)
    if not loops:
        return body
    return rewrite(body, tirx.Evaluate,
                   lambda e: tirx.Evaluate(0) if extern_name(e) in TURNS else e)


def _registers(consumer_threads: int) -> int | None:
    """Registers each consumer thread may take once the producer kept 24 (None: no more
    than the launch gave it; one consumer warpgroup already has 255)."""
    launch = REGISTERS_PER_SM // (consumer_threads + PRODUCER_THREADS) // 8 * 8
    more = (REGISTERS_PER_SM - PRODUCER_THREADS * PRODUCER_REGISTERS) // consumer_threads
    more = min(more // 8 * 8, 256)
    return more if more > launch and launch < 255 else None


def _split(launch, reallocate: bool):
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
    producer = tirx.IfThenElse(tirx.EQ(tx, threads),
                               substitute(marker.body, {tx: 0}), None)  # written as thread 0
    consumers = _without_deadlocking_turns(narrow_barriers(
        tirx.SeqStmt(stmts[at + 1:]) if len(stmts) > at + 2 else stmts[at + 1],
        extern("tl::consumer_sync", tirx.const(threads, "int32"))))
    more = _registers(threads) if reallocate and int(marker.node) == 1 else None
    if more is not None:
        producer = tirx.SeqStmt([extern(f"tl::registers_down<{PRODUCER_REGISTERS}>"), producer])
        consumers = tirx.SeqStmt([extern(f"tl::registers_up<{more}>"), consumers])
        # the consumers' branch first: with the producer's first, ptxas (CUDA 13.0)
        # compiled the consumers within the launch's registers despite their setmaxnreg
        # (the producer's setmaxnreg.dec alone in its branch was enough), spilling
        # FlashAttention d128's 128x128 tiles and serializing its MMAs (H200: x0.95 of SDPA
        # split with turns, x0.99 consumers first). Blocks that move no registers keep the
        # producer's first: the split GEMMs measured 10-15% slower the other way round
        roles = tirx.IfThenElse(tirx.LT(tx, threads), consumers, producer)
    else:
        roles = tirx.IfThenElse(tirx.GE(tx, threads), producer, consumers)
    total = threads + PRODUCER_THREADS
    iv = launch.node
    wider = tirx.IterVar(tvm.ir.Range(0, total), iv.var, iv.iter_type, iv.thread_tag)
    return tirx.AttrStmt(wider, launch.attr_key, tirx.const(total, "int32"),
                         tirx.SeqStmt(stmts[:at] + [roles]))


def SpecializeWarps(reallocate: bool = True):  # noqa: N802 - a pass, named like TVM's
    """`reallocate`: move registers from the producer to the consumers (module doc)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.SpecializeWarps")
    def _pass(func, _mod, _ctx):
        def on_attr(attr):
            if attr.attr_key == "thread_extent" and str(attr.node.thread_tag) == "threadIdx.x":
                return _split(attr, reallocate)
            return attr

        return func.with_body(rewrite(func.body, tirx.AttrStmt, on_attr))

    return _pass
