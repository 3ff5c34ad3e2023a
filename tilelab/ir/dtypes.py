"""Data types of tile programs.

`T.float16`, `T.float32`, ... are `DType` objects. A dtype is a name TVM
understands ("float16"), a constructor of constants (`T.float32(1.0)`), and it
knows the matching torch and numpy dtypes so tensors can be checked at call time.
"""

from __future__ import annotations


class DType(str):
    """A scalar type; a `str` subclass so it can be passed wherever TVM wants a dtype name."""

    def __call__(self, value=0):
        from tvm import tirx

        return tirx.const(value, str(self))

    @property
    def bits(self) -> int:
        return _BITS[str(self)]

    @property
    def is_float(self) -> bool:
        return str(self).startswith(("float", "bfloat"))

    def __repr__(self) -> str:
        return f"T.{str(self)}"


float16 = DType("float16")
bfloat16 = DType("bfloat16")
float32 = DType("float32")
float64 = DType("float64")
int8 = DType("int8")
int16 = DType("int16")
int32 = DType("int32")
int64 = DType("int64")
uint8 = DType("uint8")
boolean = DType("bool")

ALL = {str(d): d for d in (float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8)}
ALL["bool"] = boolean
_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8, "int16": 16,
         "int32": 32, "int64": 64, "uint8": 8, "bool": 8}

_TORCH_NAMES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32",
                "float64": "float64", "int8": "int8", "int16": "int16", "int32": "int32",
                "int64": "int64", "uint8": "uint8", "bool": "bool"}


def as_dtype(value) -> DType:
    """Accept a DType, a name ("float16", "fp16" is not accepted), or a torch/numpy dtype."""
    if isinstance(value, DType):
        return value
    name = str(value)
    for prefix in ("torch.", "<class 'numpy.", "dtype('"):
        if name.startswith(prefix):
            name = name[len(prefix):].rstrip("'>)")
    if name in ALL:
        return ALL[name]
    from ..errors import TileLabTypeError

    known = ", ".join(sorted(ALL))
    raise TileLabTypeError(f"unknown dtype {value!r}; tilelab knows {known}")


def torch_dtype(dtype: DType):
    import torch

    return getattr(torch, _TORCH_NAMES[str(dtype)])


def itemsize(dtype: str) -> int:
    return max(_BITS[str(dtype)] // 8, 1)
