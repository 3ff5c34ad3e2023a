"""Give a binding that reads a register a scope of its own, for TVM's StorageRewrite.

StorageRewrite plans registers and shared memory from the order of the statements that
touch them, and it expects each read of an allocated buffer to sit inside a statement
that opens a scope of its own: a store, an evaluation, a loop, a branch. A binding opens
none, so a binding read at the level where its register was allocated stops it with an
internal check ("Load memory in places other than store"). TileLang's grouped GEMM binds
such a value: `A = T.make_tensor(A_ptrs[group], ...)`, where `group` is a `T.alloc_var`
the block computed, binds A's address to `A_ptrs[group]`.

This pass puts each binding that reads a register or a shared tile, together with the
statements after it (where its variable is in scope), under an `extern_scope`
attribute: the planner treats it as a scope and the code generator prints its body.
"""

from __future__ import annotations

from tvm import tirx

from ..ir.builder import seq
from ..ir.tile_ops import loaded
from ..ir.visit import rewrite

SCOPE = "extern_scope"


def _reads_allocated(stmt) -> bool:
    return isinstance(stmt, tirx.Bind) and \
        any(buffer.scope() != "global" for buffer in loaded(stmt.value))


def _scoped(stmts: list) -> list:
    for i, stmt in enumerate(stmts):
        if _reads_allocated(stmt):
            rest = seq([stmt, *_scoped(stmts[i + 1:])])
            return [*stmts[:i], tirx.AttrStmt(tirx.const(0, "int32"), SCOPE,
                                              tirx.const(0, "int32"), rest)]
    return stmts


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.ScopedBindings")
def ScopedBindings(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects flat buffers, before StorageRewrite."""
    return func.with_body(rewrite(func.body, tirx.SeqStmt,
                                  lambda node: seq(_scoped(list(node.seq)))))
