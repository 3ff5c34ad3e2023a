"""4-bit integers: tensors come in bytes, two values to a byte; tiles hold one to a byte.

torch has no 4-bit tensors, so a kernel's `T.Tensor((M, K), T.int4)` is passed in as the
bytes that hold it: an int8 (or, for uint4, uint8) tensor of shape (M, K / 2), value k of
a row in the low four bits of byte k // 2 when k is even and in the high four when it is
odd - `(a[..., 0::2] & 15) | (a[..., 1::2] << 4)`, as TileLang and CUTLASS pack them.
A tile is the program's own and needs no packing: a 4-bit tile becomes a byte tile, one
value a byte, which every tile op already handles (packed, the two threads that write the
two halves of a byte would race).

This pass runs first in both pipelines, so no later pass meets a 4-bit type:

* a load of a 4-bit tensor reads its byte and takes the value out - shift right by
  4 * (k mod 2), keep four bits and, for int4, take 16 from values of 8 and up (the sign);
* a `T.copy` from a 4-bit tensor becomes the `T.Parallel` loop that copies element by
  element with those loads (a copy of regions cannot split bytes);
* 4-bit tiles become byte tiles, and 4-bit arithmetic is done in 8 bits.

Nothing writes a 4-bit tensor: the front end refuses a store, an output or a `T.copy` into
one when it is traced (two threads writing the halves of one byte would race).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..errors import TileLabTypeError
from ..ir.dtypes import PACKED
from ..ir.expr import to_expr
from ..ir.tile_ops import Region, is_buffer, is_select, is_tile_call, op_name, regions
from ..ir.visit import rewrite, walk
from ..ops import at_user_line, effects
from ..ops._lowering import all_of, guard, in_bounds, index_map

_BINARY = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
           tirx.Min, tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE)


def is_packed(dtype) -> bool:
    return str(dtype) in PACKED


def has_packed(func) -> bool:
    """Does the program have a 4-bit tensor or tile?"""
    found = [str(p.dtype) for p in func.params if is_buffer(p)]
    walk(func.body, tirx.AllocBuffer, lambda node: found.append(str(node.buffer.dtype)))
    return any(is_packed(d) for d in found)


def unpack(byte, k, dtype: str):
    """Value k of a row from `byte`, the byte that holds values k // 2 * 2 and the next."""
    bits = tirx.bitwise_and(tirx.shift_right(tirx.Cast("int32", byte),
                                             tirx.floormod(k, 2) * 4), tirx.const(15, "int32"))
    if dtype == "int4":  # four bits in two's complement
        bits = tirx.Select(tirx.GE(bits, 8), bits - 16, bits)
    return tirx.Cast(PACKED[dtype], bits)


class _Bytes:
    """The byte buffer standing for each 4-bit one, and the expression rewrite."""

    def __init__(self, func):
        self.buffers: dict = {}  # 4-bit buffer -> its byte buffer
        for param in func.params:
            if is_buffer(param) and is_packed(param.dtype):
                *rows, last = (int(e) for e in param.shape)
                self.buffers[param] = tirx.decl_buffer((*rows, last // 2), PACKED[str(
                    param.dtype)], name=param.name)

    def of(self, buffer):
        for old, new in self.buffers.items():
            if old.same_as(buffer):
                return new
        new = tirx.decl_buffer(buffer.shape, PACKED[str(buffer.dtype)], name=buffer.name,
                               scope=buffer.scope())
        self.buffers[buffer] = new
        return new

    def value(self, expr):
        """`expr` with its 4-bit loads unpacked, computed in 8 bits where it was 4-bit."""
        if isinstance(expr, tvm.ir.TensorLoad):
            return self._load(expr)
        if isinstance(expr, tirx.IntImm) and is_packed(expr.ty):
            return tirx.const(int(expr.value), PACKED[str(expr.ty)])
        if isinstance(expr, tirx.Cast):
            ty = str(expr.ty)
            return tirx.Cast(PACKED.get(ty, ty), self.value(expr.value))
        if isinstance(expr, tirx.Select):
            return tirx.Select(self.value(expr.condition), self.value(expr.true_value),
                               self.value(expr.false_value))
        if is_select(expr):
            return tirx.if_then_else(*(self.value(a) for a in expr.args))
        if isinstance(expr, _BINARY):
            return type(expr)(self.value(expr.a), self.value(expr.b))
        if isinstance(expr, (tirx.And, tirx.Or)):
            return type(expr)(self.value(expr.a), self.value(expr.b))
        if isinstance(expr, tirx.Not):
            return tirx.Not(self.value(expr.a))
        # anything else: the loads inside (a call's arguments, an index)
        return tvm_ffi.structural_map(expr, (tvm.ir.TensorLoad, self._load), order="post")

    def _load(self, load):
        indices = [self.value(i) for i in load.indices]
        dtype = str(load.source.dtype)
        if not is_packed(dtype):
            return tirx.BufferLoad(load.source, indices)
        if load.source.scope() != "global":  # a tile: one value a byte
            return tirx.BufferLoad(self.of(load.source), indices)
        *rows, k = indices
        return unpack(tirx.BufferLoad(self.of(load.source), [*rows, tirx.floordiv(k, 2)]), k,
                      dtype)


def _copy_loop(src: Region, dst: Region):
    """A T.copy as the T.Parallel loop that copies element by element (copy_loops' nest,
    with parallel loops)."""
    extents = dst.squeezed_extents() or [1]
    src_at, dst_at = index_map(src), index_map(dst)
    loop_vars = [tirx.Var(f"i{d}", "int32") for d in range(len(extents))]
    si, di = src_at(loop_vars), dst_at(loop_vars)
    value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
    inside = all_of(in_bounds(src, si))
    if inside is not None:
        value = tirx.if_then_else(inside, value, to_expr(0, dst.dtype))
    body = guard(in_bounds(dst, di), tirx.BufferStore(dst.buffer, value, di))
    for var, extent in reversed(list(zip(loop_vars, extents))):
        body = tirx.For(var, 0, extent, tirx.ForKind.PARALLEL, body)
    return body


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.PackedInt4")
def PackedInt4(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """4-bit tensors read from their bytes, 4-bit tiles held in bytes (the module doc)."""
    bytes_ = _Bytes(func)

    def is_tensor(buffer) -> bool:
        return is_packed(buffer.dtype) and buffer.scope() == "global"

    def on_call(call):
        touched = [r for r in regions(call) if is_tensor(r.buffer)]
        if not touched:
            return call
        with at_user_line(call, func):
            if any(is_tensor(r.buffer) for r in effects(call).writes):
                raise TileLabTypeError(
                    f"T.{op_name(call)} writes {touched[0].buffer.name}, a tensor of "
                    f"{touched[0].dtype} values; tilelab reads {touched[0].dtype} tensors "
                    "but does not write them",
                    hint="write int8 values and pack them with torch")
            if not is_tile_call(call, "copy"):
                raise TileLabTypeError(
                    f"T.{op_name(call)} reads {touched[0].buffer.name}, a tensor of "
                    f"{touched[0].dtype} values, which come two to a byte",
                    hint="T.copy it into a tile first")
        return _copy_loop(*regions(call))

    func = func.with_body(rewrite(func.body, TilePrimitiveCall, on_call))

    def on_store(store):
        value = bytes_.value(store.value)
        indices = [bytes_.value(i) for i in store.indices]
        buffer = bytes_.of(store.buffer) if is_packed(store.buffer.dtype) else store.buffer
        return tirx.BufferStore(buffer, value, indices)

    def on_if(branch):
        return tirx.IfThenElse(bytes_.value(branch.condition), branch.then_case,
                               branch.else_case)

    def on_loop(loop):
        return tirx.For(loop.loop_var, bytes_.value(loop.min), bytes_.value(loop.extent),
                        loop.kind, loop.body, thread_binding=loop.thread_binding,
                        annotations=loop.annotations)

    body = rewrite(func.body, tirx.BufferStore, on_store)
    body = rewrite(body, tirx.IfThenElse, on_if)
    body = rewrite(body, tirx.For, on_loop)
    for alloc in _allocations(body):
        if is_packed(alloc.buffer.dtype):
            bytes_.of(alloc.buffer)
    # a buffer is a variable in TVM 0.27: one substitution reaches the parameters,
    # allocations, tile ops' regions and every remaining access
    func = tvm_ffi.structural_map(func.with_body(body), (tirx.Var, lambda var: next(
        (new for old, new in bytes_.buffers.items() if var.same_as(old)), var)), order="post")
    _check_no_4_bit(func)
    return func


def _allocations(body) -> list:
    found = []
    walk(body, tirx.AllocBuffer, found.append)
    return found


def _check_no_4_bit(func) -> None:
    """A 4-bit value this pass does not reach (in an expression it does not rebuild) is an
    error here, not a wrong number later."""
    left = []
    walk(func.body, object, lambda node: left.append(node) if isinstance(
        node, tvm.ir.Expr) and is_packed(getattr(node, "ty", "")) else None)
    if left:
        raise TileLabTypeError(f"4-bit values are computed here only in loads, stores, "
                               f"casts and arithmetic; this kernel uses one in {left[0]}")
