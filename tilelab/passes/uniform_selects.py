"""Decide a select once per tile where every element would decide it alike.

A causal FlashAttention masks its scores in every iteration of the key loop:

    for i, j in T.Parallel(bm, bn):
        S[i, j] = T.if_then_else(k * bn + j <= by * bm + i, S[i, j], -inf)

Each thread compares and selects for each of its elements, yet only the tiles
on the diagonal mix kept and masked keys: in every earlier tile all of them
are kept. The condition is linear in the tile's indices, so whether it holds
for the whole tile is one comparison at the tile's worst corner - here
`k * bn + (bn - 1) <= by * bm + 0`. This pass versions such a `T.Parallel`:

    if (the condition holds at every element):  the loop with the select's true side
    else:                                        the loop as written

and where the true side leaves every element as it was (a mask that keeps
the score), the first branch is empty and only the `if` remains. The
condition depends on loop and block indices only, so all threads of a block
take the same branch. The program's meaning is unchanged; the tiles that
need no mask skip it.

Conditions taken: comparisons (`<`, `<=`, `>`, `>=`) of integer expressions
linear in the loop's indices with constant coefficients, and `and` of such.
Anything else - a condition reading memory or an index bound inside the loop (a
`T.serial` within it), `==`, `or` - leaves the loop as written. Only loops that
store into register tiles (fragments, locals) are versioned: their copies need
no barrier, whichever branch a block takes.
`tl.disable_uniform_selects` turns the pass off.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import sym, tirx

from ..ir.expr import dtype_of
from ..ir.tile_ops import is_load, is_select, loaded
from ..ir.visit import rewrite, rewrite_pre, substitute, uses, walk

_COMPARE = {tirx.LT: ("max", lambda e: tirx.LT(e, 0)), tirx.LE: ("max", lambda e: tirx.LE(e, 0)),
            tirx.GT: ("min", lambda e: tirx.GT(e, 0)), tirx.GE: ("min", lambda e: tirx.GE(e, 0))}


def _everywhere(cond, nest: list):
    """A condition free of the nest's indices that holds exactly when `cond` holds for
    every index of the nest (`nest`: (var, extent) pairs); None where that is not known."""
    if isinstance(cond, tirx.And):
        a, b = _everywhere(cond.a, nest), _everywhere(cond.b, nest)
        return None if a is None or b is None else tirx.And(a, b)
    rule = _COMPARE.get(type(cond))
    if rule is None or not str(cond.a.ty).startswith("int"):
        return None
    corner, holds = rule
    coefficients = sym.detect_linear_equation(cond.a - cond.b, [v for v, _ in nest])
    if not coefficients or not all(isinstance(c, tirx.IntImm) for c in coefficients[:-1]):
        return None
    extreme = coefficients[-1]  # the part without the nest's indices
    for c, (_, extent) in zip(coefficients[:-1], nest):
        c = int(c.value)
        if (c > 0) == (corner == "max"):  # the index at its far end makes `e` extreme
            extreme = extreme + c * (extent - 1)
    return holds(extreme)


def _keeps_everything(stmt) -> bool:
    """Is every store of `stmt` `X[idx] = X[idx]`?"""
    stores = []
    walk(stmt, tirx.BufferStore, stores.append)
    return bool(stores) and all(
        is_load(s.value) and s.value.source.same_as(s.buffer) and
        len(s.value.indices) == len(s.indices) and
        all(tvm_ffi.structural_equal(a, b) for a, b in zip(s.value.indices, s.indices))
        for s in stores)


def _register_stores_only(stmt) -> bool:
    stores = []
    walk(stmt, tirx.BufferStore, stores.append)
    return bool(stores) and all(s.buffer.scope().startswith("local") for s in stores)


def _nest(loop):
    """The T.Parallel loops of a nest from the outside in, and the innermost body."""
    loops = []
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.PARALLEL:
        loops.append(loop)
        loop = loop.body
    return loops, loop


def _copy(loops, body):
    """The nest around `body` again, with index variables of its own (the copy sits beside
    the original, and a variable is bound by one loop only)."""
    new = {loop.loop_var: tirx.Var(loop.loop_var.name, dtype_of(loop.loop_var))
           for loop in loops}
    body = substitute(body, new)
    for loop in reversed(loops):
        body = tirx.For(new[loop.loop_var], loop.min, loop.extent, loop.kind, body,
                        annotations=loop.annotations)
    return body


def version(loop):
    """The versioned form of the T.Parallel nest `loop`, or `loop` itself."""
    loops, body = _nest(loop)
    if not loops or not all(isinstance(lp.extent, tirx.IntImm) and
                            isinstance(lp.min, tirx.IntImm) and int(lp.min) == 0
                            for lp in loops) or not _register_stores_only(body):
        return loop
    nest = [(lp.loop_var, int(lp.extent)) for lp in loops]
    inner = []  # variables bound inside the nest (a T.serial loop's index): no use outside
    walk(body, tirx.For, lambda f: inner.append(f.loop_var))
    walk(body, tirx.LetStmt, lambda let: inner.append(let.var))
    selects = []
    walk(body, tvm.ir.Call, lambda c: selects.append(c) if is_select(c) else None)
    for select in selects:
        cond = select.args[0]
        if loaded(cond) or any(uses(cond, v) for v in inner):
            continue
        everywhere = _everywhere(cond, nest)
        if everywhere is None:
            continue
        everywhere = sym.Analyzer().simplify(everywhere)
        if isinstance(everywhere, tirx.IntImm):
            continue  # decided already: the simplifier keeps or drops the select itself
        kept = rewrite(body, tvm.ir.Call, lambda c, s=select: c.args[1] if c.same_as(s) else c)
        if _keeps_everything(kept):
            return tirx.IfThenElse(tirx.Not(everywhere), loop, None)
        return tirx.IfThenElse(everywhere, _copy(loops, kept), loop)
    return loop


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.UniformSelects")
def UniformSelects(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects tile-level IR (T.Parallel loops not yet lowered)."""
    # loops inside a T.Parallel loop are versioned with their nest, never alone; and the
    # map goes on into what it returned, so loops already looked at are not looked at again
    seen: list = []
    walk(func.body, tirx.For, lambda loop: walk(loop.body, tirx.For, seen.append)
         if loop.kind == tirx.ForKind.PARALLEL else None)

    def outermost(loop):
        if loop.kind != tirx.ForKind.PARALLEL or any(loop.same_as(s) for s in seen):
            return loop
        versioned = version(loop)
        walk(versioned, tirx.For, seen.append)
        return versioned

    return func.with_body(rewrite_pre(func.body, tirx.For, outermost))
