"""`T.device_assert(condition, msg)`: a condition the program states about its own values.

Loop semantics (the CPU, the reference): where the condition is false the kernel notes
it and runs on; once it has run, the first failure is a TileLabError at the assertion's
line with its message (the report of passes/check_bounds.py).

Thread lowering (CUDA): each thread that finds it false prints the message with the
assertion's line, its block and its thread (`printf`) and goes on. TileLang asserts with
CUDA's `assert`, which traps: the process's CUDA context is lost and every later call in
it fails - the notebook with it. The CPU stops at the first failure; the GPU tells where
they were.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import TileLabError, TileLabTypeError
from ..ir.builder import current
from ..ir.expr import as_ir, dtype_of, is_expr, to_expr
from ..ir.tile_ops import config, scalars, tile_call
from . import Effects, TileOp, register
from ._lowering import check, printf, where_text
from .print import message_format


def device_assert(condition, msg=""):
    """Stop with `msg` (on the CPU; on a GPU, print it) where `condition` is false."""
    builder = current("device_assert")
    condition = as_ir(condition)
    if isinstance(condition, bool):  # known while compiling
        if not condition:
            raise TileLabError(f"T.device_assert: {msg or 'the condition is False'}")
        return
    if not is_expr(condition) or dtype_of(condition) != "bool":
        raise TileLabTypeError(f"T.device_assert takes a condition (a comparison of kernel "
                               f"values), got {condition!r}")
    builder.emit(tile_call("device_assert", to_expr(condition, "bool"), msg=str(msg),
                           where=where_text(builder.location)))


def effects(call) -> Effects:
    return Effects()


def _message(call) -> str:
    msg = config(call).get("msg", "")
    return f"T.device_assert failed: {msg}" if msg else "T.device_assert failed"


def lower_loops(call):
    return check(scalars(call)[0], _message(call), str(config(call).get("where", "")))


def lower_threads(call, ctx):
    condition = scalars(call)[0] if ctx.in_parallel else ctx.fragment_scalars(scalars(call)[0])
    where = str(config(call).get("where", ""))
    filename, _, rest = where.partition("|")
    line = rest.partition("|")[0] or "?"
    prefix, message = message_format(f"{filename}:{line}: {_message(call)}", c_source=True)
    blocks = list(ctx.block_vars) + [tirx.const(0, "int32")] * (3 - len(ctx.block_vars))
    report = printf(f"{prefix}block (%d, %d, %d), thread %d\\n", *message, *blocks, ctx.tx)
    failed = tirx.IfThenElse(tirx.Not(condition), report, None)
    if not ctx.in_parallel:  # a statement of the block: one thread asks for all
        failed = tirx.IfThenElse(tirx.EQ(ctx.tx, 0), failed, None)
    return failed


register(TileOp("device_assert", primitives=(device_assert,), effects=effects,
                in_parallel=True, in_thread_code=True,
                lowerings={"cpu": lower_loops, "cuda": lower_threads}))
