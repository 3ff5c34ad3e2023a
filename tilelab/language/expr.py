"""Scalar expressions: arithmetic with C-like type rules, and the math functions.

TVM refuses to add a float16 to a float32; C promotes. Kernels are easier to
write with C's rules, so every binary operation goes through `binary()`:
Python numbers take the type of the other operand, integers meet floats as
floats, and two floats of different widths meet at the wider one.
"""

from __future__ import annotations

import builtins
import operator
import sys
from contextlib import contextmanager
from pathlib import Path

import tvm
from tvm import tirx
from tvm.ir import expr as _ir_expr
from tvm.tirx.expr import EqualOp, NotEqualOp

from ..errors import TileLabTypeError
from ..ir import dtypes
from ..ir.expr import (  # noqa: F401
    Expr,
    as_ir,
    common_dtype,
    dtype_of,
    is_expr,
    to_expr,
    unify,
)


def _div(a, b):
    if dtypes.as_dtype(str(a.ty)).is_float:
        return tirx.Div(a, b)
    return tirx.truncdiv(a, b)


_BINARY = {
    "+": tirx.Add, "-": tirx.Sub, "*": tirx.Mul, "/": _div,
    "//": tirx.floordiv, "%": tirx.floormod,
    "<": tirx.LT, "<=": tirx.LE, ">": tirx.GT, ">=": tirx.GE, "==": tirx.EQ, "!=": tirx.NE,
    "&": tirx.bitwise_and, "|": tirx.bitwise_or, "^": tirx.bitwise_xor,
    "<<": tirx.shift_left, ">>": tirx.shift_right,
}
_PYTHON = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne, "&": operator.and_, "|": operator.or_,
    "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
}


def binary(op: str, a, b):
    """Apply a Python operator symbol; stays in Python when neither side is an expression."""
    a, b = as_ir(a), as_ir(b)
    if not is_expr(a) and not is_expr(b):
        return _PYTHON[op](a, b)
    if op not in _BINARY and op != "**":
        raise TileLabTypeError(f"operator {op} is not supported on kernel values")
    a, b = unify(a, b)
    dtype = str(a.ty)
    if dtype == "bool" and op in ("<", "<=", ">", ">=", "==", "!="):
        # TVM's LLVM code generator compares bools as floats (and fails): compare them
        # as the integers 0 and 1
        a, b = tirx.Cast("int32", a), tirx.Cast("int32", b)
        dtype = "int32"
    is_float = dtypes.as_dtype(dtype).is_float
    # TVM checks operand types deep inside; say what is wrong at the user's line instead
    if op == "**":
        if not is_float:
            raise TileLabTypeError(f"** needs floating-point values, got {dtype}",
                                   hint="convert first: T.Cast(T.float32, x) ** y")
        return tirx.pow(a, b)
    if op in ("&", "|", "^", "<<", ">>") and not (dtype.startswith(("int", "uint")) or
                                                  dtype == "bool" and op in "&|^"):
        raise TileLabTypeError(f"operator {op} needs integer values, got {dtype}")
    if op in ("<<", ">>") and isinstance(b, tirx.IntImm) and \
            not 0 <= int(b.value) < dtypes.as_dtype(dtype).bits:
        raise TileLabTypeError(f"cannot shift a {dtype} by {int(b.value)} bits")
    if op in ("<<", ">>") and not isinstance(b, tirx.IntImm):
        # A shift by the width or more, or by a negative amount, is undefined in C and
        # LLVM (the compiler may then assume anything, bounds checks included). Defined
        # here as NVIDIA GPUs do it (PTX clamps the amount to the width): every bit is
        # shifted out, leaving 0, or the sign for >> of a signed value.
        bits = dtypes.as_dtype(dtype).bits
        amount = str(b.ty)
        fits = tirx.And(tirx.GE(b, tirx.const(0, amount)), tirx.LT(b, tirx.const(bits, amount)))
        if op == ">>" and dtype.startswith("int"):
            out = tirx.shift_right(a, tirx.const(bits - 1, dtype))
        else:
            out = tirx.const(0, dtype)
        return tirx.if_then_else(fits, _BINARY[op](a, b), out)
    if op in ("//", "%", "/") and not is_float and isinstance(b, tirx.IntImm) and \
            int(b.value) == 0:
        raise TileLabTypeError("integer division by zero")
    if is_float and op in ("//", "%"):  # Python's meaning: floor(a / b), a - floor(a / b) * b
        quotient = tirx.floor(tirx.Div(a, b))
        return quotient if op == "//" else a - quotient * b
    return _BINARY[op](a, b)


def logical(op: str, values: list):
    """`a and b` / `a or b` of device values. As in Python (and CUDA's `&&`), the right
    side is evaluated only where the left does not decide: where it reads memory, it is
    a `T.if_then_else` (`if i < n and x[i] > 0` reads no x[n] on the CPU either); plain
    arithmetic stays an And/Or the simplifier can take apart."""
    values = [as_ir(v) for v in values]
    result = values[0]
    for v in values[1:]:
        if _reads_memory(v) and str(v.ty) == "bool" and str(result.ty) == "bool":
            result = tirx.if_then_else(result, v, tirx.const(False, "bool")) if op == "and" \
                else tirx.if_then_else(result, tirx.const(True, "bool"), v)
        else:
            result = tirx.And(result, v) if op == "and" else tirx.Or(result, v)
    return result


def _reads_memory(expr) -> bool:
    from ..ir.visit import walk

    found = []
    walk(expr, tvm.ir.TensorLoad, lambda load: found.append(load))
    return bool(found)


# ---- math primitives (T.exp, T.max, ...) ----

def _float_unary(fn):
    def apply(x):
        x = to_expr(x)
        if not dtypes.as_dtype(str(x.ty)).is_float:
            x = tirx.Cast("float32", x)
        return fn(x)

    apply.__name__ = fn.__name__
    apply.__doc__ = f"Elementwise {fn.__name__} of a floating-point value."
    return apply


exp = _float_unary(tirx.exp)
exp2 = _float_unary(tirx.exp2)
log = _float_unary(tirx.log)
log2 = _float_unary(tirx.log2)
sqrt = _float_unary(tirx.sqrt)
rsqrt = _float_unary(tirx.rsqrt)
sin = _float_unary(tirx.sin)
cos = _float_unary(tirx.cos)
tanh = _float_unary(tirx.tanh)
sigmoid = _float_unary(tirx.sigmoid)
floor = _float_unary(tirx.floor)
ceil = _float_unary(tirx.ceil)
erf = _float_unary(tirx.erf)


def abs(x):  # noqa: A001 - mirrors T.abs
    """Absolute value."""
    return tirx.abs(to_expr(x))


def max(a, b):  # noqa: A001
    """The larger of two values (types promote as in C)."""
    a, b = as_ir(a), as_ir(b)
    if not is_expr(a) and not is_expr(b):
        return a if a >= b else b
    return tirx.max(*unify(a, b))


def min(a, b):  # noqa: A001
    """The smaller of two values (types promote as in C)."""
    a, b = as_ir(a), as_ir(b)
    if not is_expr(a) and not is_expr(b):
        return a if a <= b else b
    return tirx.min(*unify(a, b))


def pow(a, b):  # noqa: A001
    return binary("**", a, b)


def Cast(dtype, value):  # noqa: N802 - TileLang's spelling
    """Convert a value to `dtype`."""
    return to_expr(value, str(dtypes.as_dtype(dtype)))


def if_then_else(cond, then_value, else_value):
    """`then_value` where `cond` holds, else `else_value` (both evaluated)."""
    cond = as_ir(cond)
    if not is_expr(cond):
        return then_value if cond else else_value
    a, b = unify(then_value, else_value)
    return tirx.if_then_else(cond, a, b)


def infinity(dtype):
    """+inf of a floating-point dtype (negate it for -inf)."""
    return tirx.infinity(str(dtypes.as_dtype(dtype)))


def ceildiv(a, b):
    """ceil(a / b) for integers; stays a Python int when both are."""
    if not is_expr(a) and not is_expr(b):
        return -(-a // b)
    a, b = unify(a, b)
    return tirx.floordiv(a + b - 1, b)


# ---- kernel values used as Python truth values

# Plain Python helpers called while a kernel is traced run as Python: an `if`, `and`,
# `or` or `not` there asks a kernel value for a compile-time bool. TVM's answers are
# wrong for a kernel (`bool(i == 1)` is object identity: always False) or an internal
# ValueError. While tracing, the answer is the compiler's: a value it can prove
# (`N % 64 == 0` with N known) is that bool; anything decided only at run time is a
# TileLabError at the line that asked.

_TVM_DIRS = tuple(str(Path(m.__file__).resolve().parent) for m in (tvm, sys.modules["tvm_ffi"]))


def _compile_time_bool(value, tvm_answer):
    caller = sys._getframe(2).f_code.co_filename
    if caller.startswith(_TVM_DIRS):  # TVM's own code keeps TVM's meaning
        return tvm_answer(value)
    from tvm import sym

    from ..ir.builder import _caller_location, in_tilelab

    decided = sym.Analyzer().simplify(as_ir(value))
    if isinstance(decided, tirx.IntImm):
        return builtins.bool(decided.value)
    # asked by a helper of the user's: its line; by a builtin the kernel's code called
    # (sorted, any), whose frame is tilelab's interpreter: the statement's (None here)
    raise TileLabTypeError(
        f"`{as_ir(value)}` is a kernel value: it has no True/False while the kernel is compiled",
        None if in_tilelab(caller) else _caller_location(),
        hint="choose between values with T.if_then_else(cond, a, b), or make the helper a "
             "@T.macro so that its `if` becomes a branch in the kernel; use `&`/`|` for "
             "and/or of kernel conditions")


_TRUTH_OWNERS = (_ir_expr.ExprOperand, EqualOp, NotEqualOp)


@contextmanager
def kernel_truth_values():
    """While a kernel is traced, `bool()` of a kernel value is decided or refused."""
    saved = [owner.__dict__["__bool__"] for owner in _TRUTH_OWNERS]

    def guard(tvm_answer):
        return lambda value: _compile_time_bool(value, tvm_answer)

    for owner, answer in zip(_TRUTH_OWNERS, saved):
        owner.__bool__ = guard(answer)
    try:
        yield
    finally:
        for owner, answer in zip(_TRUTH_OWNERS, saved):
            owner.__bool__ = answer
