"""Refuse, when compiling, a tile access that runs past the tile's end on every run.

In `for i in T.Parallel(128): logsum[i] += sinks[i]`, with `sinks` a fragment of 8
elements, the read is past the end for i = 8..127 whatever the inputs are. The CPU
backend's bounds checks (check_bounds.py) stop such a read while the kernel runs; on
a GPU nothing does: a fragment index past the end names another register, a shared
index another tile, and the kernel computes on what it finds there - sometimes even
the right answer, by luck.

This pass finds the accesses whose indices are built from constants and the
variables of loops with constant bounds alone, that run whenever their loops do (no
`if` or `T.if_then_else` between a loop and the access; `break` and `continue` are
such `if`s by now, on a register of their loop - language/frontend.py), and
refuses each whose index range reaches outside the tile's shape - for every target
and before any lowering, with the CPU check's message at the user's line. What it
cannot decide (an index read from memory, a symbolic size, a guarded access) is left
to the run-time checks. Tensors in global memory are left to them too: their shapes
are often symbolic, and `tl.safe_global_access` gives reads past their edge a meaning.
"""

from __future__ import annotations

import tvm
from tvm import sym, tirx

from ..errors import SourceLocation, TileLabError
from ..ir.tile_ops import is_load, is_select, span_location
from ..ir.visit import keep_user_errors, walk
from .check_bounds import out_of_bounds_message

# loops that count (block and thread indices are For loops too, of another kind)
COUNTED = (tirx.ForKind.SERIAL, tirx.ForKind.PARALLEL, tirx.ForKind.UNROLLED,
           tirx.ForKind.VECTORIZED)
ARITHMETIC = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
              tirx.Min, tirx.Max, tirx.Cast, tirx.IntImm)


class _Overruns:
    """One walk over a kernel: the counted loops around each statement, and the bounds of
    their variables, as it goes down."""

    def __init__(self):
        self.analyzer = sym.Analyzer()
        self.counted: set = set()  # loop variables every iteration of which reaches here

    def stmt(self, node, where) -> None:
        where = span_location(node) or where
        if isinstance(node, tirx.For):
            self.loop(node, where)
        elif isinstance(node, tirx.IfThenElse):
            self.expr(node.condition, where)
            self.guarded(node.then_case, where)
            if node.else_case is not None:
                self.guarded(node.else_case, where)
        elif isinstance(node, tirx.BufferStore):
            self.expr(node.value, where)
            for index in node.indices:
                self.expr(index, where)
            self.access(node.buffer, node.indices, where)
        elif isinstance(node, tirx.SeqStmt):
            for child in node.seq:
                self.stmt(child, where)
        elif isinstance(node, tirx.Evaluate):
            self.expr(node.value, where)
        elif isinstance(node, tirx.While):  # runs as long as its condition says
            self.guarded(node.body, where)
        elif getattr(node, "body", None) is not None:  # an attribute's scope, say
            self.stmt(node.body, where)

    def loop(self, node, where) -> None:
        if node.kind not in COUNTED:  # a block or thread index: the body runs for each
            self.stmt(node.body, where)
        elif isinstance(node.min, tirx.IntImm) and isinstance(node.extent, tirx.IntImm) and \
                int(node.extent) > 0:
            self.analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min,
                                                                            node.extent))
            self.counted.add(node.loop_var)
            self.stmt(node.body, where)
            self.counted.discard(node.loop_var)
        else:  # a trip count known at run time (perhaps 0)
            self.guarded(node.body, where)

    def guarded(self, body, where) -> None:
        """Statements that run for some iterations only: the loops around them don't count
        for them (the loops inside them do)."""
        outer, self.counted = self.counted, set()
        self.stmt(body, where)
        self.counted = outer

    def expr(self, node, where) -> None:
        if is_select(node) or isinstance(node, tirx.Select):
            self.expr(node.args[0] if is_select(node) else node.condition, where)
            return  # each branch is read only where the condition says
        if isinstance(node, (tirx.And, tirx.Or)):
            self.expr(node.a, where)  # the right side may be skipped
            return
        if is_load(node):
            for index in node.indices:
                self.expr(index, where)
            self.access(node.source, node.indices, where)
            return
        for name in ("a", "b", "value", "args"):
            child = getattr(node, name, None)
            for item in child if isinstance(child, (list, tuple, tvm.ir.Array)) else [child]:
                if isinstance(item, tvm.ir.Expr):
                    self.expr(item, where)

    def access(self, buffer, indices, where) -> None:
        if buffer.scope() in ("global", "local.var"):
            return
        for dim, (index, extent) in enumerate(zip(indices, buffer.shape)):
            if not isinstance(extent, tirx.IntImm) or not self.decidable(index):
                continue
            bound = self.analyzer.const_int_bound(index)
            if 0 <= bound.min_value and bound.max_value < int(extent):
                continue
            runs = " and ".join(f"{v} runs from {self.analyzer.const_int_bound(v).min_value} "
                                f"to {self.analyzer.const_int_bound(v).max_value}"
                                for v in _variables(index))
            reach = bound.max_value if bound.max_value >= int(extent) else bound.min_value
            which = f"index {dim}" if len(indices) > 1 else "the index"
            raise TileLabError(
                out_of_bounds_message(buffer, indices), where,
                hint=f"{runs} here, so {which} reaches {reach} on every run; on a GPU "
                     "nothing checks it, and the access lands in another register or tile. "
                     "Guard it with an `if`, or size the tile (or the loop) to match")

    def decidable(self, index) -> bool:
        """Is `index` made of constants and counted loop variables only (one at least)?"""
        seen = {"variable": False, "other": False}

        def visit(node):
            if isinstance(node, tirx.Var):
                seen["variable"] = True
                seen["other"] |= not any(node.same_as(v) for v in self.counted)
            elif not isinstance(node, ARITHMETIC):
                seen["other"] = True

        walk(index, tvm.ir.Expr, visit)
        return seen["variable"] and not seen["other"]


def _variables(index) -> list:
    found = []
    walk(index, tirx.Var, lambda v: found.append(v)
         if not any(v.same_as(f) for f in found) else None)
    return found


def CheckLoopBounds(fallback: SourceLocation):  # noqa: N802
    """Expects tile ops not yet lowered; returns the function unchanged, or refuses it."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.CheckLoopBounds")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        _Overruns().stmt(func.body, fallback)
        return func

    return _pass
