"""Keep integer negations apart from the min/max that ptxas fuses.

On sm_90 ptxas fuses two signed 32-bit min/max into one three-input instruction
(`VIMNMX3`) and folds negated operands into it. ptxas of CUDA 12.9 to 13.3 (13.4
and later are right) then loses the negation of the instruction's second operand:
`max(max(a, -b), c)` runs as `max(max(a, b), c)`. The PTX it is given is right;
only the machine code is wrong. A `T.reduce_max` over a negated int tile showed
it (difftest seed 1, program 7548): of every three values a thread combined, the
middle one went in unnegated.

This pass writes each negation of a signed integer of 32 bits or fewer (`x * -1`,
`0 - x`: how `-x` reaches TIR) as a call of `tl::negate` (tilelab.cuh), which
follows the negation with an identity byte permute. ptxas keeps the permute, so a
min/max receives a plain register and nothing is folded. The price is one ALU
instruction per negation, in kernels that negate integers at all. A vector
negation is kept the same way, lane by lane.
"""

from __future__ import annotations

import re

import tvm
from tvm import tirx

from ..ir.visit import rewrite


def _negated(expr):
    """The `x` of `x * -1`, `-1 * x` or `0 - x` over a signed integer of ≤ 32 bits."""
    kind = re.fullmatch(r"int(\d+)(?:x\d+)?", str(expr.ty))
    if not (kind and int(kind[1]) <= 32):
        return None

    def constant(e, value):
        if isinstance(e, tirx.Broadcast):
            e = e.value
        return isinstance(e, tirx.IntImm) and e.value == value

    if isinstance(expr, tirx.Mul):
        if constant(expr.b, -1):
            return expr.a
        if constant(expr.a, -1):
            return expr.b
    elif isinstance(expr, tirx.Sub) and constant(expr.a, 0):
        return expr.b
    return None


def _negate(x):
    scalar, _, lanes = str(x.ty).partition("x")
    if not lanes:
        return tirx.call_extern(scalar, "tl::negate", x)
    # lane by lane, in 32 bits: TVM's CUDA code rebuilds int32 vectors (make_int4)
    negated = [tirx.call_extern("int32", "tl::negate", tirx.Cast("int32", _lane(x, i)))
               for i in range(int(lanes))]
    whole = tirx.Shuffle(negated, list(range(int(lanes))))
    return whole if scalar == "int32" else tirx.Cast(str(x.ty), whole)


def _lane(x, i):
    return tirx.Shuffle([x], [tirx.const(i, "int32")])


def _keep(expr):
    x = _negated(expr)
    return expr if x is None else _negate(x)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.KeepIntegerNegations")
def KeepIntegerNegations(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    body = func.body
    for node_type in (tirx.Mul, tirx.Sub):
        body = rewrite(body, node_type, _keep)
    return func.with_body(body)
