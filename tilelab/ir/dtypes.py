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

    def as_torch(self):
        """The matching torch dtype."""
        return torch_dtype(self)

    def __repr__(self) -> str:
        return f"T.{str(self)}"


float16 = DType("float16")
bfloat16 = DType("bfloat16")
float32 = DType("float32")
float64 = DType("float64")
float8_e4m3fn = DType("float8_e4m3fn")
float8_e5m2 = DType("float8_e5m2")
int8 = DType("int8")
int16 = DType("int16")
int32 = DType("int32")
int64 = DType("int64")
uint8 = DType("uint8")
uint16 = DType("uint16")
uint32 = DType("uint32")
uint64 = DType("uint64")
boolean = DType("bool")

# 4-bit integers: a global tensor of them is passed in as bytes, two values to a byte (the
# first in the low four bits: `(a[..., 0::2] & 15) | (a[..., 1::2] << 4)`), a torch int8 or
# uint8 tensor whose last dimension is half the kernel's; tiles of them hold one value to a
# byte (passes/packed_int4.py). float4 is only named (TileLang's dequantization helpers
# keep tables keyed by it); a tensor or tile of it is refused (`as_dtype` below).
int4 = DType("int4")
uint4 = DType("uint4")
float4_e2m1fn = DType("float4_e2m1fn")
NAMED_ONLY = {str(d): d for d in (float4_e2m1fn,)}
PACKED = {"int4": "int8", "uint4": "uint8"}  # a 4-bit type -> the byte that holds two

ALL = {str(d): d for d in (float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2,
                           int8, int16, int32, int64, uint8, uint16, uint32, uint64, boolean,
                           int4, uint4)}
_BITS = {name: (8 if name == "bool" else int("".join(c for c in name.split("_")[0]
                                                     if c.isdigit())))
         for name in [*ALL, *NAMED_ONLY]}

# Other spellings of the same types: C's names (TileLang's `T.float`, "float"), and Python's
# own types (`dtype=float`). Each maps to one of the types above.
ALIASES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32",
           "uint": "uint32", "long": "int64", "short": "int16", "ulong": "uint64",
           "float8_e4m3": "float8_e4m3fn", "tfloat32": "float32", "<class 'float'>": "float32",
           "<class 'int'>": "int32", "<class 'bool'>": "bool"}


def as_dtype(value) -> DType:
    """Accept a DType, a name ("float16", "float"), a torch/numpy dtype or Python's float/int."""
    if isinstance(value, DType) and str(value) in ALL:
        return value
    name = str(value)
    for prefix in ("torch.", "<class 'numpy.", "dtype('"):
        if name.startswith(prefix):
            name = name[len(prefix):].rstrip("'>)")
    name = ALIASES.get(name, name)
    if name in ALL:
        return ALL[name]
    from ..errors import TileLabTypeError

    if name in NAMED_ONLY:
        raise TileLabTypeError(f"tilelab has no {name} tensors or tiles (torch has no {name} "
                               "tensors to pass in either)",
                               hint="store the values packed in uint8, two to a byte, and "
                                    "unpack them with shifts and masks")
    known = ", ".join(sorted(ALL))
    hint = "int4 and fp4 have no torch tensor type; store them packed in uint8 and unpack " \
        "with shifts" if name.startswith(("int4", "uint4", "float4")) else ""
    raise TileLabTypeError(f"unknown dtype {value!r}; tilelab knows {known}", hint=hint)


def torch_dtype(dtype: DType):
    import torch

    return getattr(torch, str(dtype))


def buffer_bytes(buffer) -> int:
    """Bytes of a buffer of static shape (a shared tile, a merged allocation)."""
    import math

    return math.prod(int(s) for s in buffer.shape) * itemsize(str(buffer.dtype))


def is_float8(dtype) -> bool:
    """One of the 8-bit float types (GPUs compute with them in float32; the CPU backend
    keeps them as bytes, passes/float8_as_bytes.py)."""
    return str(dtype).startswith("float8")


def itemsize(dtype: str) -> int:
    """Bytes of one value; a vector type such as `int32x2` (TVM may give a merged shared
    allocation one) counts all its lanes."""
    name, lanes = str(dtype), 1
    if "x" in name and name.rpartition("x")[2].isdigit():
        name, _, count = name.rpartition("x")
        lanes = int(count)
    return max(_BITS[name] // 8, 1) * lanes
