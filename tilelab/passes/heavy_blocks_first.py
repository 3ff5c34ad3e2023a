"""Launch the blocks with the most work first.

In causal attention the block of query rows `bx` walks over the keys up to its own
rows only:

    for k in T.Pipelined(T.min(T.ceildiv(seq, bn), T.ceildiv((bx + 1) * bm, bn)), ...):

so block 0 runs one iteration and the last block of a head runs them all. The GPU
starts blocks in the order of their index, `blockIdx.x` fastest. Numbered as
written, each head's longest block comes last, and the grid ends with the very
longest block of all still running while the SMs around it have nothing left:
the tail of the launch.

Blocks of a tile program share nothing but the tensors they read and the
disjoint parts they write, so the order in which they run is the compiler's to
choose. Where every loop whose trip count depends on a block index grows with
that one index, this pass numbers that index backwards: the block the hardware
starts as number `b` does the work the program wrote for number `n - 1 - b`.
The heaviest blocks start first; the light ones fill the gaps at the end.

The pass stays away from programs whose blocks might wait for one another or
whose result could depend on the order of the blocks: those with atomics or
`while` loops. Blocks renumbered by `T.use_swizzle` keep the user's order (their
loops then depend on two indices), and grids too small to have a tail (two waves
or less) keep theirs.
`PassConfigKey.TL_DISABLE_HEAVY_FIRST` turns it off.
"""

from __future__ import annotations

import tvm
from tvm import sym, tirx

from ..ir.expr import dtype_of
from ..ir.visit import rewrite_pre, substitute, uses, walk

SAMPLES = 64  # block indices at which a trip count is evaluated (beyond that, spread)
MIN_BLOCKS = 256  # grids smaller than about two waves of a big GPU have no tail to speak of


def _order_matters(body) -> bool:
    """Atomics or `while` loops: blocks may see each other's writes."""
    found = False

    def visit(node):
        nonlocal found
        if isinstance(node, tirx.While):
            found = True
        elif isinstance(node, tvm.ir.Call):
            name = node.op.name if hasattr(node.op, "name") else ""
            if "atomic" in name or (name == "tirx.call_extern" and node.args and
                                    "atomic" in str(node.args[0]).lower()):
                found = True

    walk(body, object, visit)
    return found


def _grows_with(extents: list, var, count: int) -> bool:
    """Do these trip counts, as functions of `var` over 0..count-1, never shrink and
    end larger than they start? (False where one is not a function of `var` alone.)"""
    analyzer = sym.Analyzer()
    points = range(count) if count <= SAMPLES else \
        sorted({round(i * (count - 1) / (SAMPLES - 1)) for i in range(SAMPLES)})
    grew = False
    for extent in extents:
        values = []
        for point in points:
            value = analyzer.simplify(substitute(extent, {var: point}))
            if not isinstance(value, tirx.IntImm):
                return False  # it depends on something else too (a size known at launch)
            values.append(int(value.value))
        if any(b < a for a, b in zip(values, values[1:])):
            return False
        grew = grew or values[-1] > values[0]
    return grew


def _expanded(expr, bound: dict, rounds: int = 8):
    """`expr` with the names in `bound` replaced by their values, to a fixed point."""
    for _ in range(rounds):
        named: list = []
        walk(expr, tirx.Var, lambda v, named=named: named.append(v) if v in bound else None)
        if not named:
            break
        expr = substitute(expr, {v: bound[v] for v in named})
    return expr


def _launches(body) -> list:
    """The `thread_extent` attributes of the blocks' indices (blockIdx.x, .y, .z)."""
    found = []
    walk(body, tirx.AttrStmt, lambda a: found.append(a)
         if a.attr_key == "thread_extent" and str(a.node.thread_tag).startswith("blockIdx")
         else None)
    return found


def heavy_index(body):
    """The block index to number backwards (module doc), as its launch attribute, or None."""
    blocks = _launches(body)
    if not blocks or not all(isinstance(b.value, tirx.IntImm) for b in blocks):
        return None
    total = 1
    for b in blocks:
        total *= int(b.value)
    if total < MIN_BLOCKS:
        return None
    bound: dict = {}  # the values of the names common subexpressions were given
    walk(body, tirx.Bind, lambda b: bound.__setitem__(b.var, b.value))
    extents = []
    walk(body, tirx.For, lambda loop: extents.append(_expanded(loop.extent, bound))
         if not isinstance(loop.extent, tirx.IntImm) else None)
    varying = [b for b in blocks if any(uses(e, b.node.var) for e in extents)]
    if len(varying) != 1 or _order_matters(body):
        return None
    block = varying[0]
    mine = [e for e in extents if uses(e, block.node.var)]
    return block if _grows_with(mine, block.node.var, int(block.value)) else None


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.HeavyBlocksFirst")
def HeavyBlocksFirst(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    """After lowering and simplification: the index is renumbered once, at the top of
    the block (`first = tl::backwards(n - 1, blockIdx)`, a call the simplifier does not
    fold into the addresses), so that the code shaped around the index stays as it was."""
    block = heavy_index(func.body)
    if block is None:
        return func
    index = block.node.var
    first = tirx.Var(f"{index.name.split('.')[-1]}_heaviest_first", dtype_of(index))

    def on_attr(attr):
        if not attr.same_as(block):
            return attr
        renumber = tirx.Bind(first, tirx.call_extern(
            dtype_of(index), "tl::backwards", tirx.const(int(block.value) - 1, dtype_of(index)),
            index))
        return tirx.AttrStmt(attr.node, attr.attr_key, attr.value,
                             tirx.SeqStmt([renumber, substitute(attr.body, {index: first})]))

    return func.with_body(rewrite_pre(func.body, tirx.AttrStmt, on_attr))
