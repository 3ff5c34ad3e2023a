"""Scalar values as TIR expressions: Python numbers and expressions to one type.

Shared by the front end (user arithmetic), the tile ops (values they store) and
the passes; the user-facing math functions are in `tilelab/language/expr.py`.
"""

from __future__ import annotations

import builtins

from tvm import tirx
from tvm.tirx.expr import EqualOp, NotEqualOp

from ..errors import TileLabTypeError
from . import dtypes
from .tile_ops import is_buffer

Expr = tirx.Expr


def is_expr(value) -> bool:
    return isinstance(value, (tirx.Expr, EqualOp, NotEqualOp)) and not is_buffer(value)


def as_ir(value):
    """TVM answers `a == b` on expressions with a deferred `EqualOp` (and `a != b` with a
    `NotEqualOp`) that is either an IR comparison or, as a Python bool, object identity.
    In a kernel it always means the comparison; this turns it into one."""
    return value.asobject() if isinstance(value, (EqualOp, NotEqualOp)) else value


def dtype_of(value) -> str:
    value = as_ir(value)
    if is_expr(value):
        return str(value.ty)
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int32"
    if isinstance(value, float):
        return "float32"
    raise TileLabTypeError(f"expected a number or a scalar expression, got {type(value).__name__}")


def to_expr(value, dtype: str | None = None):
    """A Python number or an expression as an expression (of `dtype` if given)."""
    value = as_ir(value)
    if is_expr(value):
        if dtype is not None and str(value.ty) != dtype:
            return tirx.Cast(dtype, value)
        return value
    if isinstance(value, (bool, int, float)):
        if dtype is None:
            dtype = dtype_of(value)
        if isinstance(value, float) and not dtypes.as_dtype(dtype).is_float:
            dtype = "float32"
        if isinstance(value, int) and not isinstance(value, bool) and \
                not dtypes.as_dtype(dtype).is_float:
            bits = dtypes.as_dtype(dtype).bits
            low, high = (0, 2**bits) if dtype.startswith("uint") else \
                (-(2**(bits - 1)), 2**(bits - 1))
            if not low <= value < high:
                raise TileLabTypeError(f"the constant {value} does not fit in {dtype}")
        return tirx.const(value, dtype)
    raise TileLabTypeError(f"expected a number or a scalar expression, got {type(value).__name__}")


def _rank(dtype: str) -> tuple[int, int]:
    d = dtypes.as_dtype(dtype)
    return (2 if d.is_float else (0 if dtype == "bool" else 1), d.bits)


def common_dtype(a, b) -> str:
    """The type two operands meet at. float8 has no arithmetic of its own (GPUs convert
    it, CUDA C has no operators for it): its values meet others as float32, and a store
    into a float8 tile rounds the result back."""
    da, db = dtype_of(a), dtype_of(b)
    if not is_expr(a):  # a Python number follows the expression's type
        dtype = db if not (isinstance(a, float) and not dtypes.as_dtype(db).is_float) \
            else "float32"
    elif not is_expr(b):
        dtype = da if not (isinstance(b, float) and not dtypes.as_dtype(da).is_float) \
            else "float32"
    else:
        dtype = builtins.max(da, db, key=_rank)
    return "float32" if dtypes.is_float8(dtype) else dtype


def unify(a, b):
    dtype = common_dtype(a, b)
    return to_expr(a, dtype), to_expr(b, dtype)
