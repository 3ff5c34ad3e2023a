"""Give every `tvm_access_ptr` a tile of its own element type.

TVM's StorageRewrite lets a shared tile whose life has ended lend its bytes to a
later tile, whatever their element types: a float32 row of gates may move into
the bytes of a bfloat16 tile an earlier loop finished with. Loads and stores of
the newcomer then go through a declaration of the right type over the lender's
memory, but a pointer taken with `tvm_access_ptr(float32, tile, offset, ...)`
(cp.async's destination, an MMA operand's address) keeps naming the lender
itself - a bfloat16 tile - and a later TVM pass rejects a pointer whose element
type is not its tile's ("tvm_access_ptr element type must match the source
buffer"). The program was right and its CUDA compile failed: TileLang's KDA
`wy_fast` with two or more stages, where the float32 gate row reuses a bfloat16
tile of the loop before.

This pass, run right after StorageRewrite, declares such a lender again with the
pointer's element type (same bytes: `decl_buffer(..., data=lender.data)`, placed
right after the lender's allocation so that it holds wherever the lender does)
and points the pointer at that declaration. Offsets and extents are already
counted in the pointer's element type; nothing else changes.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.dtypes import itemsize
from ..ir.tile_ops import access_ptr_tile, is_buffer
from ..ir.visit import rewrite, walk


def _retyped(func) -> list:
    """(lender, element type, a declaration of the lender's bytes in that type), for each
    allocated tile that some pointer takes in a type not its own."""
    allocated = []
    walk(func.body, tirx.AllocBuffer, lambda alloc: allocated.append(alloc.buffer))
    found: list = []

    def visit(call):
        tile, dtype = access_ptr_tile(call)
        if tile is None or str(tile.dtype) == dtype or \
                not any(tile.same_as(a) for a in allocated) or \
                any(tile.same_as(t) and dtype == d for t, d, _ in found):
            return
        nbytes = int(tile.shape[0]) * itemsize(str(tile.dtype))  # flat by now
        found.append((tile, dtype, tirx.decl_buffer(
            (nbytes // itemsize(dtype),), dtype, name=f"{tile.name}_as_{dtype}",
            data=tile.data, scope=tile.scope())))

    walk(func.body, tvm.ir.Call, visit)
    return found


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.TypedAccessPointers")
def TypedAccessPointers(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    retyped = _retyped(func)
    if not retyped:
        return func

    def on_call(call):
        tile, dtype = access_ptr_tile(call)
        new = next((new for t, d, new in retyped if tile is not None and t.same_as(tile) and
                    d == dtype), None)
        if new is None:
            return call
        source = new if is_buffer(call.args[1]) else new.data  # named as it was
        return tvm.ir.Call(call.op, [call.args[0], source, *call.args[2:]], call.attrs,
                           call.ty_args, ret_ty=call.ty)

    def on_seq(seq):  # each new declaration right after its lender's allocation
        stmts = []
        for stmt in seq.seq:
            stmts.append(stmt)
            if isinstance(stmt, tirx.AllocBuffer):
                stmts += [tirx.DeclBuffer(new, data=tile.data) for tile, _, new in retyped
                          if tile.same_as(stmt.buffer)]
        return tirx.SeqStmt(stmts) if len(stmts) != len(seq.seq) else seq

    body = rewrite(rewrite(func.body, tvm.ir.Call, on_call), tirx.SeqStmt, on_seq)
    return func.with_body(body)
