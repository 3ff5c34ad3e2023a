"""Measuring a software pipeline on the GPU, to replay it beside the plan.

Compiled with `pass_configs={PassConfigKey.TL_INSTRUMENT_PIPELINE: blocks}`, a
kernel with a `T.Pipelined` loop gains one more output, `pipeline_timeline`
(int64, blocks x iterations x 4): thread 0 of the first `blocks` blocks reads
the GPU's nanosecond clock (`%globaltimer`) at four points of every iteration:

    0 before waiting for this iteration's tiles
    1 after the barrier: the tiles are there
    2 after issuing the copies for a later iteration
    3 after the compute

A warp-specialized loop (passes/specialize_warps.py) has no thread that does all
four: its consumer warps stamp 0, 1 and 3, and its producer thread stamps 2 when it
issued the copies *of that iteration* - S iterations or more before the consumers
find them landed.

`measured_rows` turns that array into timeline rows (the `measured` part of the
pipeline view in docs/MIME.md).
"""

from __future__ import annotations

TIMELINE = "pipeline_timeline"
EVENTS = ("wait", "ready", "issued", "done")


def instrument_program(program, blocks: int):
    """The program with the timeline output added (see the module docstring)."""
    from tvm import tirx

    from .errors import TileLabTypeError
    from .ir.builder import ParamInfo
    from .ir.visit import walk

    extents = []

    def visit(loop):
        if "num_stages" in loop.annotations:
            extents.append(loop.extent)

    walk(program.func.body, tirx.For, visit)
    if not extents:
        raise TileLabTypeError(f"{program.name} has no T.Pipelined loop to instrument")
    if any(not isinstance(e, tirx.IntImm) for e in extents):
        raise TileLabTypeError("only pipelined loops with a fixed trip count can be instrumented")
    iterations = max(int(e.value) for e in extents)
    shape = (int(blocks), iterations, len(EVENTS))
    timeline = tirx.decl_buffer(shape, "int64", name=TIMELINE)
    # an eager kernel returns the outputs its `return` names, which come first among its
    # outputs: the timeline goes right after them and is returned too
    params, buffers = list(program.params), list(program.func.params)
    at, returned = len(params), program.returned
    if returned is not None:
        flags = [p.output for p in params]
        at = flags.index(True) + returned if True in flags else at
        returned += 1
    params.insert(at, ParamInfo(TIMELINE, shape, "int64", True, None))
    buffers.insert(at, timeline)
    func = tirx.PrimFunc(buffers, program.func.body).with_attr("global_symbol", program.name)
    from dataclasses import replace

    return replace(program, func=func, params=params, returned=returned)


def measured_rows(timeline, specialized: bool = False) -> list[dict]:
    """Rows {block, iteration, kind, start_ns, end_ns, role} from a timeline array (ns since
    the block's first stamp): "wait" until the tiles land, "issue" of copies, "compute".
    One role (`specialized` False): thread 0 issues the copies of a later iteration between
    its wait and its compute. A warp-specialized loop (`specialized`, the plan's
    `warp_specialized`): the producer's "issue" of each iteration's copies is an instant
    on its own lane, the consumers wait and compute."""
    import numpy as np

    data = np.asarray(timeline.cpu() if hasattr(timeline, "cpu") else timeline, dtype=np.int64)
    rows = []
    for block, stamps in enumerate(data):
        recorded = stamps[stamps != 0]
        if not recorded.size:
            continue
        origin = int(recorded.min())
        for iteration, (wait, ready, issued, done) in enumerate(stamps):
            if wait == 0 and done == 0:
                continue
            if specialized:
                spans = (("wait", wait, ready, "consumer"), ("issue", issued, issued, "producer"),
                         ("compute", ready, done, "consumer"))
            else:
                spans = (("wait", wait, ready, "thread 0"), ("issue", ready, issued, "thread 0"),
                         ("compute", issued, done, "thread 0"))
            for kind, start, end, role in spans:
                rows.append({"block": block, "iteration": iteration, "kind": kind,
                             "start_ns": int(start) - origin, "end_ns": int(end) - origin,
                             "role": role})
    return rows
