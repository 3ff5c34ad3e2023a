"""Read a branch's shared-memory condition into a register before the branch.

TVM's barrier pass (`ThreadSync`) records the shared-memory reads of each
statement it can place a barrier before: stores, evaluations and bindings. A
condition of an `if` is none of those, and a shared load met there stops the
pass with an internal check ("allow_append_"). Programs write such branches
naturally, inside `T.Parallel` loops: `if tile[i] > tile[j]:` to swap two
elements of a shared tile (a bitonic sort), `if indices[i] > limit:` to mask one.

This pass binds each such condition to a boolean first:

    cond = tile[i] > tile[j]
    if cond: ...

so that the read belongs to a binding, which ThreadSync orders against the
stores around it like any other read. It runs before HideUniformBranches, which
then sees `cond` as uniform where its value is (a shared element every thread
reads at the same index).
"""

from __future__ import annotations

from tvm import tirx

from ..ir.builder import seq
from ..ir.tile_ops import loaded
from ..ir.visit import rewrite


def _reads_shared(expr) -> bool:
    return any(buffer.scope().startswith("shared") for buffer in loaded(expr))


def bind_shared_conditions(body):
    def on_if(node):
        if not _reads_shared(node.condition):
            return node
        cond = tirx.Var("cond", "bool")
        return seq([tirx.Bind(cond, node.condition),
                    tirx.IfThenElse(cond, node.then_case, node.else_case)])

    return rewrite(body, tirx.IfThenElse, on_if)


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.BindSharedConditions")
def BindSharedConditions(func, _mod, _ctx):  # noqa: N802
    """Expects lowered per-thread code; each `if` on a shared load reads it into a bool."""
    return func.with_body(bind_shared_conditions(func.body))
