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

from ..ir.tile_ops import data_of, is_buffer
from ..ir.visit import rewrite, walk


def viewed_tensor(decl):
    """The tensor whose data the DeclBuffer `decl` declares a view of (None: it declares
    a tensor over its own data)."""
    viewed = data_of(decl.data)
    if decl.buffer.scope() != "global" or viewed is None or \
            str(viewed.name) == str(decl.buffer.name):  # (flattening re-declares X as X)
        return None
    return viewed


def tensor_views(body) -> dict:
    """The tensors declared in `body` over other memory than their own parameter's: view
    name -> the viewed tensor's name; a tensor made from an address (`T.make_tensor`, its
    data bound in the kernel) -> None, as no tensor of the launch holds it."""
    views: dict = {}
    bound = set()
    walk(body, tirx.Bind, lambda b: bound.add(b.var))

    def visit(decl):
        viewed = viewed_tensor(decl)
        if viewed is not None:
            views[str(decl.buffer.name)] = str(viewed.name)
        elif decl.buffer.scope() == "global" and decl.data in bound:
            views[str(decl.buffer.name)] = None

    walk(body, tirx.DeclBuffer, visit)
    return views


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.DropTensorViews")
def DropTensorViews(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    flat: dict = {}  # tensor name -> its flattened declaration
    walk(func.body, tirx.DeclBuffer, lambda decl: flat.__setitem__(str(decl.buffer.name),
                                                                   decl.buffer)
         if viewed_tensor(decl) is None else None)
    # both flat, same dtype, offset 0: element i of the view is element i of the tensor
    into = {name: flat[base] for name, base in tensor_views(func.body).items() if base in flat}
    if not into:
        return func

    def on_store(store):
        target = into.get(str(store.buffer.name))
        return store if target is None else \
            tirx.BufferStore(target, store.value, list(store.indices))

    def on_load(load):
        target = into.get(str(load.source.name)) if is_buffer(load.source) else None
        return load if target is None else tirx.BufferLoad(target, list(load.indices))

    def on_decl(decl):
        return tirx.Evaluate(tirx.const(0, "int32")) if str(decl.buffer.name) in into and \
            viewed_tensor(decl) is not None else decl

    body = rewrite(rewrite(func.body, tirx.BufferStore, on_store), tvm.ir.TensorLoad, on_load)
    return func.with_body(rewrite(body, tirx.DeclBuffer, on_decl))
