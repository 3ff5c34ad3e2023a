"""bfloat16 on the CPU computes what the GPU computes.

LLVM has no bfloat16 arithmetic, and TVM's BF16ComputeLegalize carries each bfloat16
expression out in float32, rounding only where it is stored into one of the kernel's
tensors; it also gives the kernel's own bfloat16 tiles, fragments and locals the storage
of a float32. So a CPU kernel kept float32 precision wherever the program said bfloat16:
a value copied into a bfloat16 shared tile came back unchanged, and `a * b + c` of
bfloat16 values rounded once instead of after each operation. A GPU rounds bfloat16
operations as torch does, each one (nvcc may fuse a multiply and an add into one, rounded
once: the last bit of such a result can differ), and kernels that round on purpose (scores
written to a bfloat16 tile before a `T.gemm`, as FlashAttention and flash-linear-attention's
kernels do) computed other numbers on the CPU and failed checks against references that
round as the GPU does.

This pass, run before TVM's passes, rounds each bfloat16 value the kernel computes as it is
computed - every arithmetic result, conversion and math call of bfloat16 type - to
nearest, ties to even (as `tensor.to(torch.bfloat16)` and the GPU's `cvt.rn.bf16.f32`),
spelled out on the float32 bits: add 0x7FFF plus the lowest kept bit, clear the low 16
bits; NaN stays itself. Constants are rounded here too. Loads need nothing: what a
bfloat16 buffer holds is then always a bfloat16 number.
"""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ..ir.visit import keep_user_errors

# the nodes that make a new value; loads, variables, selects and lets pass one on
_COMPUTED = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod,
             tirx.Min, tirx.Max, tirx.Cast, tvm.ir.Call)


def _is_bfloat16(dtype) -> bool:
    return str(dtype).split("x")[0] == "bfloat16"


def _lanes(expr) -> int:
    return getattr(expr.ty, "lanes", 1)


def round_to_bfloat16(value):
    """A float32 expression rounded to the nearest bfloat16, kept as a float32."""
    lanes = _lanes(value)

    def u32(number):
        const = tirx.const(number, "uint32")
        return const if lanes == 1 else tirx.Broadcast(const, lanes)

    bits = tirx.reinterpret(f"uint32x{lanes}" if lanes > 1 else "uint32", value)
    odd = tirx.bitwise_and(tirx.shift_right(bits, u32(16)), u32(1))
    kept = tirx.bitwise_and(bits + u32(0x7FFF) + odd, u32(0xFFFF0000))
    return tirx.Select(tirx.isnan(value), value, tirx.reinterpret(value.ty, kept))


def _rounded(expr):
    if not _is_bfloat16(expr.ty):
        return expr
    lanes = _lanes(expr)
    as_float = tirx.Cast(f"float32x{lanes}" if lanes > 1 else "float32", expr)
    return tirx.Cast(expr.ty, round_to_bfloat16(as_float))


def _rounded_constant(const):
    if not _is_bfloat16(const.ty):
        return const
    value = np.float32(const.value).view(np.uint32)
    value = (value + np.uint32(0x7FFF) + ((value >> 16) & 1)) & np.uint32(0xFFFF0000)
    return tirx.FloatImm(const.ty, float(value.view(np.float32)))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.RoundBFloat16")
def RoundBFloat16(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """Every bfloat16 value computed is rounded as it is computed (see the module doc)."""
    body = tvm_ffi.structural_map(func.body, [(_COMPUTED, keep_user_errors(_rounded)),
                                              (tirx.FloatImm, _rounded_constant)],
                                  order="post")
    return func.with_body(body)
