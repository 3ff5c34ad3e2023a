"""Keep a fragment in shared memory when no register layout serves all its uses.

A fragment is a tile spread over the block's threads: each element lives in
the registers of the thread(s) that use it. That works when every use of the
fragment agrees on who holds what. Some well-formed programs ask for more:

    for i in T.Parallel(64):
        g[63 - i] = f[i]                  # iteration i writes another thread's element
    for h, j in T.Parallel(4, 256):
        for k in T.serial(4):
            x[h, j] += a[k, h] * b[k, j]  # every thread reads all four rows of b
    for i, d in T.Parallel(64, 128):
        acc_o[i, d] *= scale[i]           # scale's rows sit where another GEMM left them
    for i in T.serial(64):
        Y[i] = sums[i]                    # every thread runs it, each row on a few threads

The CPU runs them as written: there every tile is memory. For the GPU, layout
inference (passes/infer_layouts.py) reports such a fragment as a
`LayoutConflict`. Instead of refusing the program, this pass does what a
kernel engineer would do by hand: it keeps that fragment in shared memory,
where every thread can reach every element, and tries again. The block's
barriers then order its writes and reads like any shared tile's, and ops that
take the tile only in registers (a GEMM's accumulator, a reduction's result)
get a register copy around them from StageOperands. Registers are faster than
shared memory, so the compiler warns at the fragment's line which fragment it
moved and why; the fix, if speed matters, is the layout the warning names.

A fragment that a statement outside any T.Parallel loop or tile op writes is
not moved: every thread runs such a statement, and on a shared tile their
writes would race. Nor is a fragment whose layout the program annotated.

One conflict has another remedy. A loop that folds into a fragment over one of
its dimensions,

    for i, j in T.Parallel(64, 64):
        acc[i] += s[i, j]                 # s's columns dealt to four threads a row

leaves each thread that runs some of row i's iterations with its own part of
acc[i] (and on a shared tile their adds would race). The loop is what
`T.reduce_sum(s, acc, dim=1, clear=False)` computes, so it becomes that: a
register tile of the values, `acc_parts[i, j] = s[i, j]`, and the reduction,
which combines the threads' parts (max and min likewise). The CPU runs the loop
as written.
"""

from __future__ import annotations

import warnings

import tvm_ffi
from tvm import tirx
from tvm_ffi import WalkResult

from ..errors import LayoutConflict, TileLabWarning
from ..ir.keys import KERNEL, block_threads
from ..ir.tile_ops import Region, fragment_views, is_load, tile_call
from ..ir.visit import UserErrors, keep_user_errors, rewrite_pre, walk
from .infer_layouts import NO_WGMMA, infer_layouts, parallel_nest
from .stage_operands import stage_operands


def _allocation(body, name: str):
    found = []

    def visit(node):
        if node.buffer.name == name:
            found.append(node.buffer)

    walk(body, tirx.AllocBuffer, visit)
    return found[0] if found else None


def _written_by_every_thread(body, buffer) -> bool:
    """Does a plain statement outside T.Parallel loops store into `buffer`?"""
    found = []

    def visit(node):
        if isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
            return WalkResult.SKIP
        if isinstance(node, tirx.BufferStore) and node.buffer.same_as(buffer):
            found.append(node)
        return None

    walk(body, object, visit)
    return bool(found)


def in_shared(body, buffer):
    """`body` with fragment `buffer` replaced by a shared tile of the same name and shape."""
    tile = tirx.decl_buffer(buffer.shape, buffer.dtype, name=buffer.name, scope="shared.dyn")
    # A buffer is a variable in TVM 0.27: one substitution reaches its allocation, its
    # loads and stores, and the regions that tile ops take.
    return tvm_ffi.structural_map(
        body, (tirx.Var, lambda var: tile if var.same_as(buffer) else var), order="post")


_FOLDS = {tirx.Add: "sum", tirx.Max: "max", tirx.Min: "min"}


def _folded(store):
    """(reduction kind, the value folded in) of `x[I] = x[I] + v` (or max, min, either
    operand order), v not reading x; (None, None) for any other store."""
    kind = _FOLDS.get(type(store.value))
    if kind is None:
        return None, None
    here = tirx.BufferLoad(store.buffer, store.indices)

    def reads_x(value) -> bool:
        found = []
        walk(value, object, lambda n: found.append(n)
             if is_load(n) and n.source.same_as(store.buffer) else None)
        return bool(found)

    for mine, value in ((store.value.a, store.value.b), (store.value.b, store.value.a)):
        if tvm_ffi.structural_equal(mine, here) and not reads_x(value):
            return kind, value
    return None, None


def as_reduction(kernel, outer_var, name: str):
    """`kernel` with the T.Parallel nest over `outer_var` that folds into fragment `name`
    at every dimension but one (`acc[i] = acc[i] + v` in a loop over i, j) made a register
    tile of the values and a T.reduce_* over that dimension; None where the nest is
    anything else (then the conflict stands)."""
    found = []
    walk(kernel, tirx.For, lambda f: found.append(f) if f.loop_var.same_as(outer_var)
         else None)
    if len(found) != 1:
        return None
    nest, loops = parallel_nest(found[0]), [found[0]]
    while isinstance(loops[-1].body, tirx.For) and loops[-1].body.kind == tirx.ForKind.PARALLEL:
        loops.append(loops[-1].body)
    store = loops[-1].body
    if not isinstance(store, tirx.BufferStore) or str(store.buffer.name) != name:
        return None
    positions = nest.positions(store.indices)
    dims = range(len(nest.extents))
    left_out = [d for d in dims if positions is None or d not in positions]
    kind, value = _folded(store)
    if kind is None or positions is None or len(left_out) != 1 or \
            list(positions) != [d for d in dims if d != left_out[0]]:
        return None
    parts = tirx.decl_buffer(tuple(nest.extents), store.buffer.dtype, name=f"{name}_parts",
                             scope="local.fragment")
    body = tirx.BufferStore(parts, value, list(nest.loop_vars))
    for loop in reversed(loops):
        body = tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body,
                        thread_binding=loop.thread_binding, annotations=loop.annotations)
    folded = tirx.SeqStmt([
        tirx.AllocBuffer(parts), body,
        tile_call("reduce", Region.whole(parts), Region.whole(store.buffer), kind=kind,
                  dim=left_out[0], clear=False)])
    return rewrite_pre(kernel, tirx.For, lambda f: folded if f.same_as(found[0]) else f)


def spill(kernel, threads: int, annotated: dict, func, wgmma_off, locations: dict):
    """The kernel loop with every fragment that no register layout serves moved to shared
    memory; a conflict that moving cannot resolve is raised as it is."""
    moved = set()
    while True:
        pending = len(UserErrors.pending)
        try:
            infer_layouts(stage_operands(kernel), threads, annotated, func, wgmma_off)
            return kernel
        except LayoutConflict as conflict:
            name, why = conflict.fragment, conflict.message
            folded = None if conflict.spillable else \
                as_reduction(kernel, getattr(conflict, "loop_var", None), name)
            if folded is not None:
                del UserErrors.pending[pending:]
                kernel = folded
                where = locations.get(name)
                warnings.warn(f"{str(where) + ': ' if where else ''}on the GPU, the T.Parallel "
                              f"loop that folds into fragment {name!r} is done as a T.reduce "
                              f"of a register tile of its values, {name}_parts: {why}",
                              TileLabWarning, stacklevel=2)
                continue
            buffer = _allocation(kernel, name)
            views = fragment_views(kernel)
            if name in views or name in {str(base.name) for base in views.values()}:
                conflict = LayoutConflict(  # the view would still name registers
                    name, f"{why} ({name!r} is a T.reshape view or has one: a fragment "
                    "named with two shapes stays in registers, so it cannot move to shared "
                    "memory, where the GPU keeps fragments no register layout serves)",
                    hint=conflict.hint, spillable=False)
            if not conflict.spillable or buffer is None or \
                    buffer.scope() != "local.fragment" or name in annotated or \
                    name in moved or _written_by_every_thread(kernel, buffer):
                if conflict.location is None and locations.get(name) is not None:
                    conflict.with_location(locations[name])
                raise conflict from None
            del UserErrors.pending[pending:]  # resolved here, not the user's to see
        moved.add(name)
        kernel = in_shared(kernel, buffer)
        where = locations.get(name)
        warnings.warn(f"{str(where) + ': ' if where else ''}fragment {name!r} is kept in "
                      "shared memory on the GPU (no register layout serves all its uses): "
                      f"{why}", TileLabWarning, stacklevel=2)


def SpillFragments(annotated: dict | None = None, wgmma_off: str | None = NO_WGMMA,  # noqa: N802
                   locations: dict | None = None):
    """Expects tile ops; fragments that no register layout serves become shared tiles.
    `locations`: where the program allocated each buffer (for the warning)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.SpillFragments")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        def on_kernel(loop):
            if KERNEL not in loop.annotations:
                return loop
            return spill(loop, block_threads(loop), annotated or {}, func, wgmma_off,
                         locations or {})

        return func.with_body(rewrite_pre(func.body, tirx.For, on_kernel))

    return _pass
