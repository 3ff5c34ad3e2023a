"""`T.print`: print a scalar or a tile from inside a kernel, prefixed by a message.

Loop semantics: one `printf` per value, or per element of a region with its index.

Thread lowering: thread 0 of block 0 prints values and shared or global tiles; a
fragment is printed by every thread of block 0, each element with the thread that
holds it.
"""

from __future__ import annotations

from tvm import tirx

from ..ir.builder import current
from ..ir.expr import to_expr
from ..ir.tile_ops import Region, config, is_buffer, regions, scalars, tile_call
from ..ir.visit import loop_nest
from . import Effects, TileOp, register
from ._lowering import all_of, format_spec, is_fragment, printf, seq


def print(value, msg=""):  # noqa: A001 - T.print
    """Print a scalar or a buffer from inside the kernel, prefixed by `msg`."""
    builder = current("print")
    if is_buffer(value):
        builder.emit(tile_call("print", Region.whole(value), msg=str(msg)))
    elif isinstance(value, Region):
        builder.emit(tile_call("print", value, msg=str(msg)))
    else:
        builder.emit(tile_call("print", to_expr(value), msg=str(msg)))


def _target(call):
    regs = regions(call)
    return regs[0] if regs else scalars(call)[0]


def effects(call) -> Effects:
    return Effects(reads=tuple(regions(call)))


# ---------------------------------------------------------------- loop semantics (CPU)


def c_string_body(text: str) -> str:
    """`text` as the inside of a C string literal, every byte of it data.

    CUDA's code generator prints a string argument between quotes exactly as it is,
    so quotes, backslashes, `?` (trigraphs), newlines and every byte that is not
    printable ASCII become escapes here. Octal escapes have at most three digits,
    so the character after one can never extend it.
    """
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\?':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return "".join(out)


def message_format(msg: str, c_source: bool) -> tuple[str, list]:
    """The format prefix and the argument that print a user's message: always through
    `%s`, so a `%` in it is text and never a conversion (the message is data, not code)."""
    if not msg:
        return "", []
    return "%s: ", [c_string_body(msg) if c_source else msg]


def print_loops(target, msg, c_source: bool = False):
    """`c_source`: the format goes into CUDA C source, where TVM's code generator prints
    strings raw, so a newline is the two characters backslash-n and the message is escaped;
    for LLVM the strings are the bytes themselves."""
    newline = "\\n" if c_source else "\n"
    as_text = not c_source  # the CPU: floats go to printf as text (see `printf`)
    prefix, message = message_format(msg, c_source)
    if not isinstance(target, Region):
        return printf(f"{prefix}{format_spec(target, as_text)}{newline}", *message, target,
                      floats_as_text=as_text)
    extents = list(target.extents)

    def body(loop_vars):
        idx = [s + v for s, v in zip(target.starts, loop_vars)]
        value = tirx.BufferLoad(target.buffer, idx)
        where = ", ".join(["%d"] * len(idx))
        fmt = (f"{prefix}{target.buffer.name}[{where}] = {format_spec(value, as_text)}"
               f"{newline}")
        return printf(fmt, *message, *[tirx.Cast("int32", v) for v in idx], value,
                      floats_as_text=as_text)

    return loop_nest(extents, body)


def lower_loops(call):
    return print_loops(_target(call), config(call).get("msg", ""))


# ---------------------------------------------------------------- thread lowering (CUDA)


def lower_threads(call, ctx):
    return print_threads(ctx, _target(call), config(call).get("msg", ""))


def print_threads(ctx, target, msg):
    """Thread 0 of block 0 prints values and shared/global tiles; a fragment is printed
    by every thread of block 0, each element with the thread that holds it."""
    first_block = all_of([tirx.EQ(b, 0) for b in ctx.block_vars])
    if isinstance(target, Region) and is_fragment(target.buffer):
        stmts = print_fragment(ctx, target.buffer, msg)
        return tirx.IfThenElse(first_block, stmts, None) if first_block is not None \
            else stmts
    first = all_of([tirx.EQ(ctx.tx, 0)] + [tirx.EQ(b, 0) for b in ctx.block_vars])
    value = target if isinstance(target, Region) else ctx.fragment_scalars(target)
    return tirx.IfThenElse(first, print_loops(value, msg, c_source=True), None)

def print_fragment(ctx, buffer, msg):
    frag = ctx.layout_of(buffer)
    local = ctx.local(buffer)
    rank = len(frag.shape)
    prefix, message = message_format(msg, c_source=True)  # the message is data
    stmts = []
    for reg in range(frag.local_size):
        index = ctx.inverse(frag, reg)
        value = tirx.BufferLoad(local, [reg])
        where = ", ".join(["%d"] * rank)
        fmt = f"{prefix}{buffer.name}[{where}] = {format_spec(value)} (thread %d)\\n"
        stmt = printf(fmt, *message, *[tirx.Cast("int32", i) for i in index[:rank]], value,
                      tirx.Cast("int32", ctx.tx))
        if frag.replicate > 1:
            stmt = tirx.IfThenElse(tirx.EQ(index[rank], 0), stmt, None)
        stmts.append(ctx.only_if_valid(frag, reg, stmt))
    return seq(stmts)


register(TileOp("print", primitives=(print,), effects=effects,
                lowerings={"cpu": lower_loops, "cuda": lower_threads}))
