"""A plain-data summary of a tile program: its buffers and tile operations.

The dataflow view draws the kernel as a graph (global -> shared -> fragment ->
global); it needs which ops read and write which buffers, in which loop. This
module walks the front end's IR once and writes that down as JSON-ready
dicts, so that views never look at TVM objects.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.tile_ops import config, is_buffer, is_load, op_name
from ..ops import effects


def _buffer(buffer) -> dict:
    return {"name": str(buffer.name), "scope": buffer.scope(), "dtype": str(buffer.dtype),
            "shape": [int(s) if isinstance(s, tirx.IntImm) else str(s) for s in buffer.shape]}


def summarize(func, params) -> dict:
    """{"buffers": [...], "ops": [...]} for a front-end PrimFunc."""
    buffers: dict = {}
    for p in func.params:
        buffers[str(p.name)] = _buffer(p)
    ops: list = []
    loops: list = []

    def add_buffer(buffer):
        buffers.setdefault(str(buffer.name), _buffer(buffer))

    def visit(node, loop_stack):
        if isinstance(node, tirx.SeqStmt):
            for s in node:
                visit(s, loop_stack)
        elif isinstance(node, tirx.AllocBuffer):
            add_buffer(node.buffer)
        elif isinstance(node, tirx.For):
            if node.kind == tirx.ForKind.THREAD_BINDING:
                visit(node.body, loop_stack)
                return
            kind = "parallel" if node.kind == tirx.ForKind.PARALLEL else "serial"
            if "num_stages" in node.annotations:
                kind = "pipelined"
            if kind == "parallel":
                ops.append(_parallel(node, loop_stack))
                return
            loop = {"var": str(node.loop_var.name), "kind": kind,
                    "num_stages": int(node.annotations["num_stages"])
                    if "num_stages" in node.annotations else None}
            loops.append(loop)
            visit(node.body, loop_stack + [loop["var"]])
        elif isinstance(node, tirx.IfThenElse):
            visit(node.then_case, loop_stack)
            if node.else_case is not None:
                visit(node.else_case, loop_stack)
        elif isinstance(node, TilePrimitiveCall):
            done = effects(node)  # each op's module declares what it reads and writes
            reads = list(dict.fromkeys(r.buffer.name for r in done.reads))
            writes = list(dict.fromkeys(w.buffer.name for w in done.writes))
            name = op_name(node)
            cfg = {k: v for k, v in config(node).items() if isinstance(v, (bool, int, str))}
            ops.append({"op": name, "reads": [str(r) for r in reads],
                        "writes": [str(w) for w in writes], "loops": list(loop_stack),
                        "config": cfg})
        elif isinstance(node, tirx.BufferStore):
            ops.append(_store(node, loop_stack))

    visit(func.body, [])
    return {"buffers": list(buffers.values()), "ops": ops, "loops": loops,
            "params": [{"name": p.name, "output": p.output} for p in params]}


def _accesses(node):
    from ..ir.visit import walk

    reads, writes = [], []

    def on(n):
        if isinstance(n, tirx.BufferStore) and str(n.buffer.name) not in writes:
            writes.append(str(n.buffer.name))
        elif is_load(n) and is_buffer(n.source) and str(n.source.name) not in reads:
            reads.append(str(n.source.name))

    walk(node, object, on)
    return reads, writes


def _parallel(loop, loop_stack) -> dict:
    reads, writes = _accesses(loop)
    extents = []
    node = loop
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
        extents.append(int(node.extent) if isinstance(node.extent, tirx.IntImm)
                       else str(node.extent))
        node = node.body
    return {"op": "parallel", "reads": reads, "writes": writes, "loops": list(loop_stack),
            "config": {"extents": extents}}


def _store(store, loop_stack) -> dict:
    reads, _ = _accesses(store.value)
    return {"op": "store", "reads": reads, "writes": [str(store.buffer.name)],
            "loops": list(loop_stack), "config": {}}
