"""Global tensors read and written past their edges, as TileLang defines it.

In tilelab an access outside a tensor is the program's mistake: the CPU stops at
it and names the line (passes/check_bounds.py). TileLang's compiler defines it
instead (its LegalizeSafeMemoryAccess, on unless `tl.disable_safe_memory_legalize`):
a read of a global tensor outside its shape gives 0 and a write there is skipped.
TileLang programs rely on that - a sparse attention gathers key rows at a
sentinel index one past the end and masks their scores afterwards; a kernel
writes a block of 4096 columns into a row of fewer.

Programs compiled through TileLang's API (`tilelang.jit`, `tilelang.compile`;
tilelab/compat/tilelang.py) ask for `tl.safe_global_access`, and this pass gives
them TileLang's rule, on both backends. Each load of a global tensor outside tile
ops becomes `T.if_then_else(inside, load, 0)` and each store `if inside: store`,
where `inside` keeps the index bounds not already known to hold: an analyzer that
knows the ranges of the block indices, the thread indices and the loops, and the
`if`s around the access (those that read no memory), drops the others. Tile ops guard
their regions' edges themselves; loads in their scalars and region starts are guarded
here.
"""

from __future__ import annotations

import tvm
from tvm import sym, tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.keys import KERNEL, THREAD_INDEX, THREADS
from ..ir.tile_ops import is_load, loaded
from ..ir.visit import rewrite, rewrite_pre, with_block_body
from ..ops._lowering import all_of, seq


def _global(buffer) -> bool:
    return buffer.scope() == "global"


class _Guards:
    def __init__(self):
        self.analyzer = sym.Analyzer()

    def bind(self, var, start, extent):
        try:
            self.analyzer.bind(var, tvm.ir.Range.from_min_extent(start, extent))
        except RuntimeError:  # bound before (a variable reused): known less well
            pass

    def outside(self, buffer, indices) -> list:
        """The conditions an access needs that the analyzer cannot prove."""
        conditions = []
        for index, extent in zip(indices, buffer.shape):
            for condition in (tirx.GE(index, 0), tirx.LT(index, extent)):
                if not self.analyzer.can_prove(condition):
                    conditions.append(condition)
        return conditions

    def expr(self, expr):
        def guard(load):
            if not is_load(load) or not _global(load.source):
                return load
            conditions = self.outside(load.source, load.indices)
            if not conditions:
                return load
            return tirx.if_then_else(all_of(conditions), load,
                                     tirx.const(0, str(load.source.dtype)))

        return rewrite(expr, tvm.ir.TensorLoad, guard)

    def stmt(self, stmt):
        if isinstance(stmt, tirx.SeqStmt):
            return seq([self.stmt(s) for s in stmt])
        if isinstance(stmt, TilePrimitiveCall):
            # its lowering guards its regions' edges; loads in its scalars and in its
            # regions' starts (a gathered row's index) are guarded here
            return self.expr(stmt)
        if isinstance(stmt, tirx.For):
            start, extent = self.expr(stmt.min), self.expr(stmt.extent)
            self.bind(stmt.loop_var, start, extent)
            return tirx.For(stmt.loop_var, start, extent, stmt.kind, self.stmt(stmt.body),
                            thread_binding=stmt.thread_binding, annotations=stmt.annotations)
        if isinstance(stmt, tirx.IfThenElse):
            condition = self.expr(stmt.condition)
            # a condition that reads memory is no fact: the branch may change what it read
            known = not loaded(condition)
            with self.analyzer.constraint_scope(condition if known else tirx.const(True)):
                then_case = self.stmt(stmt.then_case)
            else_case = None
            if stmt.else_case is not None:
                with self.analyzer.constraint_scope(tirx.Not(condition) if known
                                                    else tirx.const(True)):
                    else_case = self.stmt(stmt.else_case)
            return tirx.IfThenElse(condition, then_case, else_case, span=stmt.span)
        if isinstance(stmt, tirx.While):
            return tirx.While(self.expr(stmt.condition), self.stmt(stmt.body), span=stmt.span)
        if isinstance(stmt, tirx.AttrStmt):
            return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value, self.stmt(stmt.body))
        if isinstance(stmt, tirx.BufferStore):
            indices = [self.expr(i) for i in stmt.indices]
            store = tirx.BufferStore(stmt.buffer, self.expr(stmt.value), indices,
                                     span=stmt.span)
            conditions = self.outside(stmt.buffer, indices) if _global(stmt.buffer) else []
            return tirx.IfThenElse(all_of(conditions), store, None, span=stmt.span) \
                if conditions else store
        if isinstance(stmt, tirx.Evaluate):
            return tirx.Evaluate(self.expr(stmt.value), span=stmt.span)
        return stmt


def safe_global_access(kernel):
    """One T.Kernel loop with its global accesses guarded."""
    guards = _Guards()
    node = kernel
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.THREAD_BINDING:
        guards.bind(node.loop_var, node.min, node.extent)  # the block indices' ranges
        node = node.body
    for var, extent in zip(kernel.annotations.get(THREAD_INDEX, []),
                           kernel.annotations[THREADS]):
        guards.bind(var, 0, extent)
    return with_block_body(kernel, guards.stmt)


def SafeGlobalAccess():  # noqa: N802
    """Expects tile ops; guards plain accesses of global tensors (`tl.safe_global_access`)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.SafeGlobalAccess")
    def _pass(func, _mod, _ctx):
        return func.with_body(rewrite_pre(
            func.body, tirx.For,
            lambda loop: safe_global_access(loop) if KERNEL in loop.annotations else loop))

    return _pass
