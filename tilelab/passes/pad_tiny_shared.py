"""Give every shared tile more than one 32-bit word.

TVM's MergeSharedMemoryAllocations plans tiles of 32 bits or less apart from
the others and then never gives them an offset: a kernel with such a tile -
two bfloat16 values, one float, or the scratch tile a two-element fragment copy
passes through - fails to compile ("buffer_byte_offsets"). This pass, run on
flat buffers just before the merge, enlarges those tiles to 16 bytes (the width
of the widest vector access, which alignment takes anyway) and points every
access at the enlarged tile; indices do not change.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir.dtypes import itemsize
from ..ir.visit import walk

MIN_BYTES = 16


def _tiny_shared(func) -> dict:
    """Old tile (and its data variable) -> the enlarged tile (and its data variable)."""
    mapping: dict = {}

    def visit(alloc):
        buffer = alloc.buffer
        if not buffer.scope().startswith("shared") or len(buffer.shape) != 1 or \
                not isinstance(buffer.shape[0], tirx.IntImm):
            return
        size = itemsize(str(buffer.dtype))
        if int(buffer.shape[0]) * size * 8 > 32:
            return
        padded = tirx.decl_buffer([-(-MIN_BYTES // size)], str(buffer.dtype), buffer.name,
                                  scope=buffer.scope())
        mapping[buffer] = padded
        mapping[buffer.data] = padded.data

    walk(func.body, tirx.AllocBuffer, visit)
    return mapping


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.PadTinySharedTiles")
def PadTinySharedTiles(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects flat buffers (after FlattenBuffer)."""
    mapping = _tiny_shared(func)
    if not mapping:
        return func
    olds = list(mapping)

    def replace(var):
        for old in olds:
            if var.same_as(old):
                return mapping[old]
        return var

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Var, replace), order="post"))
