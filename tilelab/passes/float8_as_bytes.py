"""float8 on the CPU: bytes in memory, float32 in arithmetic, rounded as torch rounds.

LLVM has no float8 type, and TVM's float8 legalization keeps a float8 tile's values in
float32 without rounding them, so a CPU kernel would compute other numbers than a GPU.
This pass gives every float8 tensor and tile a uint8 buffer of the same shape, and spells
out the two conversions where the program meets one:

* a **load** decodes the byte: sign, exponent and mantissa fields placed into a float32
  (float8 values are all exact in float32), subnormals and NaN (and e5m2's infinities)
  handled apart;
* a **store** encodes the float32 value with the same rounding as torch's own conversion
  (`tensor.to(torch.float8_e4m3fn)`): round to nearest even on the float32 bits, the
  subnormal range rounded by one float addition that lets the hardware round, overflow
  saturating to ±448 for e4m3fn (which has no infinity) and becoming ±inf for e5m2.

The kernel's float8 tensors are passed in as their bytes (the CPU runner views them as
uint8), so nothing else changes. It runs after the tile ops became loops, where every
float8 access is a load or a store; arithmetic on float8 values already happens in float32
(`ir/expr.common_dtype`).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir.dtypes import is_float8
from ..ir.tile_ops import is_buffer, is_select
from ..ir.visit import rewrite

# e4m3fn: bias 7, no infinity, NaN = S.1111.111; e5m2: bias 15, IEEE-like
_FORMATS = {
    "float8_e4m3fn": {"mantissa": 3, "bias": 7, "max_bits": 1087 << 20, "min_normal": 121 << 23,
                      "denorm": 141 << 23},
    "float8_e5m2": {"mantissa": 2, "bias": 15, "max_bits": 143 << 23, "min_normal": 113 << 23,
                    "denorm": 134 << 23},
}
_INF_BITS = 255 << 23


def _u32(value: int):
    return tirx.const(value & 0xFFFFFFFF, "uint32")


def encode(value, dtype: str):
    """The float8 byte (uint8) nearest to a float32 `value`, ties to even, as torch."""
    fmt = _FORMATS[dtype]
    shift = 23 - fmt["mantissa"]
    bits = tirx.reinterpret("uint32", tirx.Cast("float32", value))
    sign = tirx.bitwise_and(bits, _u32(0x80000000))
    magnitude = tirx.bitwise_xor(bits, sign)
    # subnormal results: adding 2^k (k picked per format) makes the float unit round the
    # value at the float8 subnormal step; the low bits left are the float8 byte
    denorm = _u32(fmt["denorm"])
    subnormal = tirx.reinterpret("float32", magnitude) + tirx.reinterpret("float32", denorm)
    subnormal = tirx.reinterpret("uint32", subnormal) - denorm
    # normal results: rebias the exponent, round the dropped mantissa bits to even (written
    # without unsigned wrap-around, which TVM's simplifier assumes never happens)
    odd = tirx.bitwise_and(tirx.shift_right(magnitude, _u32(shift)), _u32(1))
    rebiased = magnitude - _u32((127 - fmt["bias"]) << 23)
    normal = tirx.shift_right(rebiased + _u32((1 << (shift - 1)) - 1) + odd, _u32(shift))
    nan = tirx.GT(magnitude, _u32(_INF_BITS))
    if dtype == "float8_e4m3fn":  # no infinity: finite overflow saturates to 448
        normal = tirx.Min(normal, _u32(0x7E))
        overflow = tirx.Select(nan, _u32(0x7F), _u32(0x7E))
    else:
        overflow = tirx.Select(nan, _u32(0x7F), _u32(0x7C))
    result = tirx.Select(tirx.GE(magnitude, _u32(fmt["max_bits"])), overflow,
                         tirx.Select(tirx.LT(magnitude, _u32(fmt["min_normal"])),
                                     subnormal, normal))
    return tirx.Cast("uint8", tirx.bitwise_or(result, tirx.shift_right(sign, _u32(24))))


def decode(byte, dtype: str):
    """The float32 value of a float8 byte (a uint8 expression)."""
    fmt = _FORMATS[dtype]
    m_bits = fmt["mantissa"]
    e_bits = 7 - m_bits
    b = tirx.Cast("uint32", byte)
    negative = tirx.NE(tirx.bitwise_and(b, _u32(0x80)), _u32(0))
    exponent = tirx.bitwise_and(tirx.shift_right(b, _u32(m_bits)), _u32((1 << e_bits) - 1))
    mantissa = tirx.bitwise_and(b, _u32((1 << m_bits) - 1))
    normal = tirx.reinterpret("float32", tirx.bitwise_or(
        tirx.shift_left(tirx.bitwise_and(b, _u32(0x80)), _u32(24)),
        tirx.bitwise_or(tirx.shift_left(exponent + _u32(127 - fmt["bias"]), _u32(23)),
                        tirx.shift_left(mantissa, _u32(23 - m_bits)))))
    step = 2.0 ** (1 - fmt["bias"] - m_bits)  # the subnormal step: 2^-9 or 2^-16
    subnormal = tirx.Cast("float32", mantissa) * tirx.const(step, "float32")
    subnormal = tirx.reinterpret("float32", tirx.bitwise_or(  # the sign bit, -0.0 included
        tirx.reinterpret("uint32", subnormal), tirx.shift_left(tirx.bitwise_and(
            b, _u32(0x80)), _u32(24))))
    top = (1 << e_bits) - 1
    nan = tirx.const(float("nan"), "float32")
    if dtype == "float8_e4m3fn":
        special = tirx.And(tirx.EQ(exponent, _u32(top)), tirx.EQ(mantissa, _u32(7)))
        special_value = nan
    else:
        special = tirx.EQ(exponent, _u32(top))
        inf = tirx.Select(negative, tirx.const(float("-inf"), "float32"),
                          tirx.const(float("inf"), "float32"))
        special_value = tirx.Select(tirx.EQ(mantissa, _u32(0)), inf, nan)
    return tirx.Select(special, special_value,
                       tirx.Select(tirx.EQ(exponent, _u32(0)), subnormal, normal))


class _Bytes:
    """The uint8 buffer standing for each float8 buffer, and the expression rewrite."""

    def __init__(self):
        self.buffers: dict = {}  # float8 buffer -> its uint8 buffer

    def of(self, buffer):
        for old, new in self.buffers.items():
            if old.same_as(buffer):
                return new
        new = tirx.decl_buffer(buffer.shape, "uint8", name=buffer.name, scope=buffer.scope())
        self.buffers[buffer] = new
        return new

    def value(self, expr):
        """`expr` with its float8 loads decoded, computed in float32 where it was float8."""
        if isinstance(expr, tvm.ir.TensorLoad) and is_float8(expr.source.dtype):
            return self._load(expr)
        if isinstance(expr, tirx.FloatImm) and is_float8(expr.ty):
            return tirx.const(float(expr.value), "float32")
        if isinstance(expr, tirx.Cast):
            inner = self.value(expr.value)
            return inner if is_float8(expr.ty) else tirx.Cast(str(expr.ty), inner)
        if isinstance(expr, tirx.Select):
            return tirx.Select(self.value(expr.condition), self.value(expr.true_value),
                               self.value(expr.false_value))
        if is_select(expr):
            return tirx.if_then_else(*(self.value(a) for a in expr.args))
        if isinstance(expr, (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Min, tirx.Max)) and \
                is_float8(expr.ty):
            return type(expr)(self.value(expr.a), self.value(expr.b))
        # anything else: rewrite the float8 loads inside (their values are not float8 here)
        return tvm_ffi.structural_map(expr, (tvm.ir.TensorLoad, self._load), order="post")

    def _load(self, load):
        """A float8 load as the float32 its byte encodes (its indices rewritten too)."""
        if is_float8(load.source.dtype):
            indices = [self.value(i) for i in load.indices]
            return decode(tirx.BufferLoad(self.of(load.source), indices), str(load.source.dtype))
        return load


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.Float8AsBytes")
def Float8AsBytes(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """float8 buffers become uint8, their loads and stores convert (see the module doc)."""
    bytes_ = _Bytes()

    def on_store(store):
        value = bytes_.value(store.value)
        indices = [bytes_.value(i) for i in store.indices]
        if is_float8(store.buffer.dtype):
            return tirx.BufferStore(bytes_.of(store.buffer),
                                    encode(value, str(store.buffer.dtype)), indices)
        return tirx.BufferStore(store.buffer, value, indices)

    def on_if(branch):
        return tirx.IfThenElse(bytes_.value(branch.condition), branch.then_case,
                               branch.else_case)

    body = rewrite(func.body, tirx.BufferStore, on_store)
    body = rewrite(body, tirx.IfThenElse, on_if)
    for param in func.params:  # a float8 tensor nothing reads or writes keeps its bytes too
        if is_buffer(param) and is_float8(param.dtype):
            bytes_.of(param)
    if not bytes_.buffers:
        return func
    # a buffer is a variable in TVM 0.27: one substitution reaches the parameters,
    # allocations and every remaining access
    func = func.with_body(body)
    return tvm_ffi.structural_map(func, (tirx.Var, lambda var: next(
        (new for old, new in bytes_.buffers.items() if var.same_as(old)), var)), order="post")
