"""Tensor views after flattening: only the viewed tensor is left.

`T.Tensor(shape, dtype, X.data)` inside a kernel declares a view, another shape over
X's memory (language/primitives.py: a `DeclBuffer` whose data is X's). Tile ops and
indexing use the view like any tensor; TMA descriptors of a view describe its own
shape over X's memory (pipeline_loops.tma_spec). Once buffers are flattened, every
access through the view is an offset from X's pointer and the declaration says
nothing more; left in place beside X's own declaration, the code generator would
make the view's data a parameter of its own (a second `X_ptr`). Where X itself is
declared too, this pass points the view's accesses at X (both are flat by now,
element i of one is element i of the other) and removes the view's declaration.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.tile_ops import is_buffer
from ..ir.visit import rewrite, walk


def _viewed(decl):
    """The tensor whose data `decl` declares a view of (None: it declares its own)."""
    data = decl.data
    viewed = data.args[0] if isinstance(data, tvm.ir.Call) and data.args and \
        getattr(data.op, "name", "") == "tirx.buffer_data" else None
    if decl.buffer.scope() != "global" or viewed is None or \
            str(viewed.name) == str(decl.buffer.name):  # (flattening re-declares X as X)
        return None
    return viewed


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.DropTensorViews")
def DropTensorViews(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    flat: dict = {}  # tensor name -> its flattened declaration
    views: dict = {}  # view name -> (view, the tensor's flattened buffer, or None)

    def collect(decl):
        viewed = _viewed(decl)
        if viewed is None:
            flat[str(decl.buffer.name)] = decl.buffer
        else:
            views[str(decl.buffer.name)] = (decl.buffer, str(viewed.name))

    walk(func.body, tirx.DeclBuffer, collect)
    # both flat, same dtype, offset 0: element i of the view is element i of the tensor
    into = {name: flat[base] for name, (_, base) in views.items() if base in flat}
    if not views:
        return func

    def on_store(store):
        target = into.get(str(store.buffer.name))
        return store if target is None else \
            tirx.BufferStore(target, store.value, list(store.indices))

    def on_load(load):
        target = into.get(str(load.source.name)) if is_buffer(load.source) else None
        return load if target is None else tirx.BufferLoad(target, list(load.indices))

    def on_decl(decl):
        return tirx.Evaluate(tirx.const(0, "int32")) if _viewed(decl) is not None and \
            str(decl.buffer.name) in into else decl

    body = rewrite(rewrite(func.body, tirx.BufferStore, on_store), tvm.ir.TensorLoad, on_load)
    return func.with_body(rewrite(body, tirx.DeclBuffer, on_decl))
