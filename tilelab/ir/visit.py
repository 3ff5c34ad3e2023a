"""Visiting and rewriting TIR: walks, post-order rewrites, variable substitution, loop nests,
and carrying user errors out of passes run by TVM's C++ pass manager."""

from __future__ import annotations

import tvm_ffi
from tvm import tirx

from ..ir.tile_ops import is_buffer


def loop_nest(extents, body_fn, prefix="i", kind=tirx.ForKind.SERIAL):
    """`for i0 in range(e0): for i1 in ...: body_fn([i0, i1, ...])`."""
    loop_vars = [tirx.Var(f"{prefix}{d}", "int32") for d in range(len(extents))]
    body = body_fn(loop_vars)
    for var, extent in reversed(list(zip(loop_vars, extents))):
        body = tirx.For(var, 0, extent, kind, body)
    return body


def substitute(node, mapping: dict):
    """Replace scalar variables (not buffers) by expressions."""
    if not mapping:
        return node
    by_id = {id(k): tirx.const(v, "int32") if isinstance(v, int) else v
             for k, v in mapping.items()}
    keys = list(mapping)

    def replace(var):
        if is_buffer(var):
            return var
        for k in keys:
            if var.same_as(k):
                return by_id[id(k)]
        return var

    return tvm_ffi.structural_map(node, (tirx.Var, keep_user_errors(replace)), order="post")


def rewrite(node, node_type, fn):
    """Rewrite every node of `node_type`, innermost first."""
    return tvm_ffi.structural_map(node, (node_type, keep_user_errors(fn)), order="post")


def rewrite_pre(node, node_type, fn):
    """Rewrite every node of `node_type`, outermost first (the result is not revisited)."""
    return tvm_ffi.structural_map(node, (node_type, keep_user_errors(fn)), order="pre")


def walk(node, node_type, fn):
    """Call `fn` on every node of `node_type`, in program order."""
    tvm_ffi.structural_walk(node, (node_type, keep_user_errors(fn)), order="pre")


def block_body(kernel_loop):
    """The statements of a kernel inside its block-index loops."""
    while isinstance(kernel_loop, tirx.For) and kernel_loop.kind == tirx.ForKind.THREAD_BINDING:
        kernel_loop = kernel_loop.body
    return kernel_loop


def with_block_body(kernel_loop, fn):
    """`kernel_loop` with the statements inside its block-index loops replaced by `fn` of
    them."""
    if isinstance(kernel_loop, tirx.For) and kernel_loop.kind == tirx.ForKind.THREAD_BINDING:
        return tirx.For(kernel_loop.loop_var, kernel_loop.min, kernel_loop.extent,
                        kernel_loop.kind, with_block_body(kernel_loop.body, fn),
                        thread_binding=kernel_loop.thread_binding,
                        annotations=kernel_loop.annotations)
    return fn(kernel_loop)


def statements(body) -> list:
    """A statement list, nested sequences flattened."""
    if isinstance(body, tirx.SeqStmt):
        return [s for stmt in body.seq for s in statements(stmt)]
    return [body]


def uses(node, var) -> bool:
    """Does `node` mention the variable `var`?"""
    found = []
    walk(node, tirx.Var, lambda v: found.append(v) if v.same_as(var) else None)
    return bool(found)


class UserErrors:
    """Carries a TileLabError raised inside a pass across TVM's C++ pass manager.

    TVM re-raises Python exceptions from passes as its own error type, losing
    the location; passes wrapped with `keep_user_errors` park the original
    here and `tilelab.compile` raises it again unchanged.
    """

    pending: list = []

    @classmethod
    def take(cls):
        error = cls.pending[-1] if cls.pending else None
        cls.pending.clear()
        return error


def keep_user_errors(fn):
    import functools

    from ..errors import TileLabError

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TileLabError as err:
            UserErrors.pending.append(err)
            raise

    return wrapper
