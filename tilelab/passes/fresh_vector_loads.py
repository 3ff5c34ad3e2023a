"""Name each vector load of a stored value, so the CUDA code reads memory where the program does.

TVM's CUDA code generator prints a vector expression lane by lane through a temporary,

    float4 v_ = *(float4*)(f + 0);        // the load, once
    out.x = (nv_bfloat16)(v_.x);  ...     // then each lane

and it remembers such temporaries by the printed text of the expression, for the rest of
the enclosing C scope. The same text later in that scope reuses the temporary - even when
the program has written the memory since. A fragment copied to a bfloat16 tile, scaled,
and copied again (TileLang's gdn/example_chunk_delta_h with one pipeline stage) stored
its old values the second time, on the GPU only.

This pass, among the last before the code generator, binds every vector load inside a
stored value to a variable of its own just before the store (`v = A[ramp]`, a `Bind`):
the expression printed is then `v`, different at every store, and each store reads memory
afresh. A load under a `T.if_then_else` stays where it is (hoisted, it would be read
where the program guards it off); a value that is a bare load is printed as one
vector move and needs nothing.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm_ffi import WalkResult

from ..ir.tile_ops import is_load, is_select
from ..ir.visit import rewrite, walk


def _vector_loads(expr) -> list:
    """The vector loads `expr` always evaluates (not those under a select), each once."""
    found: list = []

    def visit(node):
        if is_select(node) or isinstance(node, tirx.Select):
            return WalkResult.SKIP
        if is_load(node):
            if "x" in str(node.ty) and not any(load.same_as(node) for load in found):
                found.append(node)
            return WalkResult.SKIP
        return None

    walk(expr, object, visit)
    return found


def _bind_loads(store):
    if is_load(store.value):
        return store
    loads = _vector_loads(store.value)
    if not loads:
        return store
    names = [tirx.Var("v", str(load.ty)) for load in loads]

    def named(load):
        return next((name for seen, name in zip(loads, names) if seen.same_as(load)), load)

    stmt = tirx.BufferStore(store.buffer, rewrite(store.value, tvm.ir.TensorLoad, named),
                            list(store.indices), span=store.span)
    return tirx.SeqStmt([*(tirx.Bind(name, load) for load, name in zip(loads, names)), stmt])


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.FreshVectorLoads")
def FreshVectorLoads(func, _mod, _ctx):  # noqa: N802
    return func.with_body(rewrite(func.body, tirx.BufferStore, _bind_loads))
