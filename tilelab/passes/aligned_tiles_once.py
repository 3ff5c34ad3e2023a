"""Check the alignment of wgmma's operand tiles once per kernel, where it can be proven.

The tensor cores apply a matrix descriptor's swizzle to the address bits, so a swizzled
operand tile must start on a multiple of its swizzle pattern (1024 bytes for 128-byte rows).
The wgmma lowering (ops/_gemm_wgmma.py) puts `tl::wgmma_check_aligned<B>(tile)` before
each T.gemm: a trap rather than a product read permuted. In a pipelined loop that is a
test and a branch per operand per iteration, and a branch to a trap between an MMA and its
wait is a divergent path to ptxas: it then serializes every MMA of the kernel (warning
C7518/C7520) wherever a loop keeps MMAs in flight across such a check.

After shared memory is planned every tile is a view of the one dynamic shared buffer at
an offset the compiler chose: `slot * 32768 + 33792` bytes for a pipelined K tile, say.
This pass asks TVM's analyzer for the offset's modular set (what it is a multiple of,
plus what) with the kernel's bound values substituted; where it is a multiple of B, the
tile is aligned exactly when the buffer's start is. Those checks go, and one check of the
buffer's start (for the largest B) stands where the buffer is allocated, before any MMA.
A check whose offset the analyzer cannot pin down (an index read from memory) stays.
"""

from __future__ import annotations

import re

import tvm
from tvm import sym, tirx

from ..ir.tile_ops import is_buffer
from ..ir.visit import rewrite, walk
from ..ops._lowering import address

_CHECK = re.compile(r"tl::wgmma_check_aligned<(\d+)>")


def _check_of(stmt):
    """(B, pointer) of a `tl::wgmma_check_aligned<B>(pointer)` statement, or None."""
    if not isinstance(stmt, tirx.Evaluate) or not isinstance(stmt.value, tvm.ir.Call):
        return None
    call = stmt.value
    if getattr(call.op, "name", "") != "tirx.call_extern":
        return None
    match = _CHECK.fullmatch(str(call.args[0].value))
    return (int(match[1]), call.args[1]) if match else None


def _dynamic_offset(pointer, analyzer):
    """The modular set of the pointer's byte offset from the dynamic shared buffer's start,
    or None where it does not point into that buffer."""
    if getattr(pointer.op, "name", "") != "tirx.tvm_access_ptr":
        return None
    dtype, data, offset = pointer.args[0].ty, pointer.args[1], pointer.args[2]
    buffer = data if is_buffer(data) else \
        data.args[0] if getattr(data.op, "name", "") == "tirx.buffer_data" else None
    if buffer is None or buffer.scope() != "shared.dyn":
        return None
    return analyzer.modular_set(offset * (tvm.DataType(str(dtype)).bits // 8))


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.AlignedTilesOnce")
def AlignedTilesOnce(func, _mod, _ctx):  # noqa: N802
    analyzer = sym.Analyzer()
    walk(func.body, tirx.Bind, lambda b: analyzer.bind(b.var, b.value)
         if re.fullmatch(r"u?int\d+", str(b.var.ty)) else None)  # (the integers: offsets)
    dropped = []

    def on_evaluate(stmt):
        check = _check_of(stmt)
        if check is None:
            return stmt
        bytes_, pointer = check
        offset = _dynamic_offset(pointer, analyzer)
        if offset is None or offset.coeff % bytes_ or offset.base % bytes_:
            return stmt
        dropped.append(bytes_)
        return tirx.Evaluate(tirx.const(0, "int32"))

    body = rewrite(func.body, tirx.Evaluate, on_evaluate)
    if not dropped:
        return func

    def after_allocation(seq_stmt):
        stmts = list(seq_stmt.seq)
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, tirx.AllocBuffer) and stmt.buffer.scope() == "shared.dyn":
                check = tirx.Evaluate(tirx.call_extern(
                    "void", f"tl::wgmma_check_aligned<{max(dropped)}>",
                    address(stmt.buffer, [0])))
                return tirx.SeqStmt(stmts[:i + 1] + [check] + stmts[i + 1:])
        return seq_stmt

    return func.with_body(rewrite(body, tirx.SeqStmt, after_allocation))
