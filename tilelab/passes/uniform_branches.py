"""Let TVM's barrier pass see that a branch is taken by the whole block.

`if bx % 2 == 0:` around a `T.Parallel` loop is a branch every thread of a
block takes the same way: its condition depends on block indices only, or on
an element, at such an index, of a tensor the kernel only reads (`if
BlockIndices[b, i] >= 0`), of a shared tile (`if tile[0] < 1`: ThreadSync orders
the read after every write to it, so all threads read the same value), or of a
register array every thread fills the same way from such places (`if
block_mask[k] != 0`, a small mask each thread keeps whole; the state a `break`
leaves in a loop's register). A barrier inside it is legal CUDA. TVM's
ThreadSync pass cannot tell: it refuses to put a barrier inside any `if`
("Cannot insert syncs inside condition"), and it wants one there more often
than needed, because it treats all dynamic shared tiles as one buffer (they
are merged later) and so sees a loop that reads one tile and writes another as
racing with itself.

`HideUniformBranches` rewrites such a branch, before ThreadSync, as a loop that
runs once or not at all (`for _ in range(select(cond, 1, 0))`), which ThreadSync
handles like any loop; `RestoreUniformBranches`, right after it, turns the loop
back into the `if`, keeping the barriers ThreadSync put inside. A `while` loop
whose condition the whole block sees alike (a cursor every thread advances the
same way) is hidden and restored the same way. Branches whose condition depends
on a thread index, or on data threads may see differently, are left alone.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.tile_ops import by_address, is_buffer, touches_shared
from ..ir.visit import rewrite, walk

ANNOTATION = "tilelab.uniform_branch"


def _block_uniform_vars(func) -> tuple[list, list]:
    """Variables with one value per block, and the buffers every thread reads alike:
    block indices, scalar parameters, and (in program order) lets whose values and
    loops whose bounds use only those and loads of such buffers. Those buffers are the
    read-only tensors (below) and the register arrays every thread fills the same way
    (a small tile each thread keeps whole, copied from a read-only tensor at a
    block-uniform place: TileLang's block masks, `if block_mask[k] != 0`; a loop cursor
    advanced from its own value, `cursor = cursor + 1`). The registers are found from
    above: all are assumed alike, and those with a store that proves otherwise are
    dropped until none is left to drop, so that a register may feed its own update."""
    readonly = _read_only_tensors(func)
    stores = _register_stores(func.body)
    alike = [b for b in stores if not any(b.same_as(r) for r in readonly)]
    while True:
        assumed = readonly + alike
        uniform = _uniform_vars(func, assumed)
        kept = [b for b in alike if all(
            all(_is_uniform(e, uniform, assumed) for e in [s.value, *s.indices, *conditions])
            for s, conditions in stores[b])]
        if len(kept) == len(alike):
            return uniform, assumed
        alike = kept


def _register_stores(body) -> dict:
    """Register buffer -> its stores, each with the conditions it runs under (of the
    enclosing ifs and while loops, and the bounds of enclosing serial loops)."""
    stores: dict = {}

    def visit(node, conditions):
        if isinstance(node, tirx.BufferStore):
            if node.buffer.scope() == "local":
                stores.setdefault(node.buffer, []).append((node, conditions))
        elif isinstance(node, tirx.SeqStmt):
            for stmt in node:
                visit(stmt, conditions)
        elif isinstance(node, tirx.IfThenElse):
            visit(node.then_case, conditions + [node.condition])
            if node.else_case is not None:
                visit(node.else_case, conditions + [node.condition])
        elif isinstance(node, tirx.While):
            visit(node.body, conditions + [node.condition])
        elif isinstance(node, tirx.For):
            bounds = [] if node.kind == tirx.ForKind.THREAD_BINDING else [node.min, node.extent]
            visit(node.body, conditions + bounds)
        elif hasattr(node, "body"):  # attributes, lets, allocations
            visit(node.body, conditions)

    visit(body, [])
    return stores


def _uniform_vars(func, readonly: list) -> list:
    uniform = [p for p in func.params if str(p.dtype) != "handle"]

    def note(node):
        if isinstance(node, tirx.AttrStmt) and node.attr_key == "thread_extent":
            iv = node.node
            if str(iv.thread_tag).startswith("blockIdx"):
                uniform.append(iv.var)
        elif isinstance(node, tirx.Bind | tirx.LetStmt) and \
                _is_uniform(node.value, uniform, readonly):
            uniform.append(node.var)
        elif isinstance(node, tirx.For) and node.kind != tirx.ForKind.THREAD_BINDING and \
                _is_uniform(node.min, uniform, readonly) and \
                _is_uniform(node.extent, uniform, readonly):
            uniform.append(node.loop_var)  # every thread runs the same trips

    walk(func.body, tirx.Stmt, note)
    return uniform


def _read_only_tensors(func) -> list:
    """Global tensors the kernel never writes: every thread that reads one element reads
    the same value (`i_s = BlockIndices[b, 0, h, i]` is the same for the whole block)."""
    # buffers themselves are compared: `buffer.data` is a new expression at each access
    written = by_address(func.body)  # an atomic, say, may write through an address
    loaded = []
    walk(func.body, tirx.BufferStore, lambda store: written.append(store.buffer))
    walk(func.body, tvm.ir.TensorLoad, lambda load: loaded.append(load.source))
    return [b for b in loaded if b.scope() == "global"
            and not any(b.same_as(w) for w in written)]


def _is_uniform(expr, uniform: list, readonly: list) -> bool:
    """Does `expr` use only block-uniform variables and loads of read-only tensors and
    shared tiles (at such indices)?"""
    ok = True

    def visit(node):
        nonlocal ok
        if isinstance(node, tvm.ir.TensorLoad):
            if not (any(node.source.same_as(b) for b in readonly) or
                    node.source.scope().startswith("shared")):
                ok = False
        elif isinstance(node, tirx.Var) and not is_buffer(node):
            if not any(node.same_as(u) for u in uniform):
                ok = False

    walk(expr, (tvm.ir.TensorLoad, tirx.Var), visit)
    return ok


IF, WHILE = 1, 2  # what a hidden loop stands for (its annotation's value)


def _once_if(cond, body, kind: int = IF):
    """A serial loop whose extent holds the condition: 0 or 1 trips for an `if`; for a
    `while`, ThreadSync sees a loop of several trips (it puts a barrier at the end of the
    body where the next round's accesses race with this round's)."""
    trips = tirx.const(1 if kind == IF else 2, "int32")
    extent = tirx.Select(cond, trips, tirx.const(0, "int32"))
    return tirx.For(tirx.Var("uniform", "int32"), tirx.const(0, "int32"), extent,
                    tirx.ForKind.SERIAL, body, annotations={ANNOTATION: tirx.const(kind, "int32")})


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.HideUniformBranches")
def HideUniformBranches(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    uniform, readonly = _block_uniform_vars(func)

    def hide(branch):
        if not (_is_uniform(branch.condition, uniform, readonly) and touches_shared(branch)):
            return branch
        loops = [_once_if(branch.condition, branch.then_case)]
        if branch.else_case is not None:
            loops.append(_once_if(tirx.Not(branch.condition), branch.else_case))
        return loops[0] if len(loops) == 1 else tirx.SeqStmt(loops)

    def hide_while(loop):
        if not (_is_uniform(loop.condition, uniform, readonly) and touches_shared(loop)):
            return loop
        return _once_if(loop.condition, loop.body, WHILE)

    body = rewrite(func.body, tirx.IfThenElse, hide)
    return func.with_body(rewrite(body, tirx.While, hide_while))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.RestoreUniformBranches")
def RestoreUniformBranches(func, mod, ctx):  # noqa: N802
    def restore(loop):
        if ANNOTATION not in loop.annotations:
            return loop
        if int(loop.annotations[ANNOTATION]) == WHILE:
            return tirx.While(loop.extent.condition, loop.body)
        return tirx.IfThenElse(loop.extent.condition, loop.body, None)

    return func.with_body(rewrite(func.body, tirx.For, restore))
