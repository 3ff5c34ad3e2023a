"""Vectors the CUDA code generator can write: no booleans, at most 16 bytes.

Tile ops and parallel loops mark their innermost loops *vectorized* so that a
thread moves 16 bytes with one instruction, and TVM's VectorizeLoop turns such a
loop into vector loads, stores and arithmetic. A program can mark loops itself
(`for i in T.vectorized(16)`), and three kinds of vector have no CUDA spelling in
TVM's code generator:

- *booleans*: it has no vector type for `bool` (`boolx16` is refused outright) and
  writes four of them as a `ushort4`, eight bytes for four, which reads past the
  tile and faults on a four-byte-aligned address. A mask is small, so a vectorized
  loop that touches a `bool` buffer goes back to the unroller: one byte per access,
  each where it belongs.
- *more than 16 bytes*: sixteen floats (`float32x16`), sixteen halves or eight
  doubles are refused ("Cannot convert type"), and eight int32 became a
  `longlong4` made from eight numbers, which nvcc rejects. No thread moves more
  than 16 bytes with one instruction anyway, so such a loop is split: an unrolled
  loop over vectorized loops of 16 bytes, `for i in T.vectorized(16)` over float32
  becoming `for o in T.unroll(4): for v in T.vectorized(4): ... i = 4 * o + v`.
  The widest element the loop's body loads or stores decides; a value it converts
  to a wider type may take up to 32 bytes (eight float16 become a `float32x8`, which
  prints).
- *gathers*: where an index does not move by one element per iteration (`src[(e * 5
  + 3) % 512]`), or the loop variable is in a value (`T.cast(e % 3, ...)`), TVM builds
  vectors of int32 indices and values, and wrote eight of them as a `longlong4` made
  from eight numbers and eight gathered bfloat16 as a `uint4` from eight. Such a loop
  counts 4 bytes a lane: it is split into loops of four.
"""

from __future__ import annotations

import tvm
from tvm import sym, tirx

from ..ir.expr import dtype_of
from ..ir.tile_ops import _const_int
from ..ir.visit import rewrite, substitute, walk

MAX_ACCESS_BYTES = 16  # one ld/st.v4.b32: the widest access of a thread
MAX_VALUE_BYTES = 32  # a converted value in registers: float32x8 prints, float32x16 not


def _moved_and_converted(body) -> tuple[set, set]:
    """The element types the body loads or stores, and those it converts values to."""
    moved, converted = set(), set()

    def visit(node):
        if isinstance(node, tirx.BufferStore):
            moved.add(str(node.buffer.dtype))
        elif isinstance(node, tvm.ir.TensorLoad):
            moved.add(str(node.source.dtype))
        elif isinstance(node, tirx.Cast):
            converted.add(dtype_of(node))

    walk(body, object, visit)
    return moved, converted


def _addresses_only(loop) -> bool:
    """Whether the loop variable only addresses memory, element after element: each index
    moves by 1 from one iteration to the next (or stays), and the variable is in no value.
    (It may be in an `if`'s condition, an edge guard: VectorizeLoop makes such a loop a
    scalar loop itself.)"""
    var, analyzer = loop.loop_var, sym.Analyzer()
    indices, conditions = [], []

    def visit(node):
        if isinstance(node, tirx.IfThenElse):
            conditions.append(node.condition)
        elif isinstance(node, (tirx.BufferStore, tvm.ir.TensorLoad)):
            indices.extend(node.indices)

    walk(loop.body, object, visit)
    for index in indices:
        step = sym.detect_linear_equation(analyzer.simplify(index), [var])
        if not step or _const_int(step[0]) not in (0, 1):
            return False
    return _mentions(loop.body, var) == sum(_mentions(e, var) for e in indices + conditions)


def _mentions(node, var) -> int:
    found = []
    walk(node, tirx.Var, lambda v: found.append(v) if v.same_as(var) else None)
    return len(found)


def _bytes(dtypes: set) -> int:
    """Bytes of the widest of `dtypes` (1 at least: a bool, or none)."""
    return max([1, *(tvm.DataType(d).bits // 8 for d in dtypes)])


def _unrolled(loop):
    return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.UNROLLED, loop.body,
                    annotations=loop.annotations)


def _legal(loop):
    if loop.kind != tirx.ForKind.VECTORIZED:
        return loop
    moved, converted = _moved_and_converted(loop.body)
    if "bool" in moved:
        return _unrolled(loop)
    extent = _const_int(loop.extent)
    access, value = _bytes(moved), _bytes(converted)
    if not _addresses_only(loop):  # vectors of int32 indices or values: 4 bytes a lane
        access = max(access, 4)

    def fits(lanes):
        return lanes * access <= MAX_ACCESS_BYTES and lanes * value <= MAX_VALUE_BYTES

    if extent is None or fits(extent):
        return loop
    lanes = 1  # the most lanes that fit: a power of two dividing the extent
    while extent % (lanes * 2) == 0 and fits(lanes * 2):
        lanes *= 2
    if lanes == 1:  # an odd extent: one element at a time
        return _unrolled(loop)
    var = loop.loop_var
    outer = tirx.Var(f"{var.name}_o", dtype_of(var))
    inner = tirx.Var(f"{var.name}_v", dtype_of(var))
    body = substitute(loop.body, {var: loop.min + outer * lanes + inner})
    return tirx.For(outer, 0, extent // lanes, tirx.ForKind.UNROLLED,
                    tirx.For(inner, 0, lanes, tirx.ForKind.VECTORIZED, body),
                    annotations=loop.annotations)


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.CudaVectors")
def CudaVectors(func, _mod, _ctx):  # noqa: N802
    """Expects thread-level code (before VectorizeLoop): vectorized loops over booleans
    become unrolled ones, and those wider than the code generator writes unrolled loops
    of narrower ones."""
    return func.with_body(rewrite(func.body, tirx.For, _legal))
