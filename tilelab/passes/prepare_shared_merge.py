"""Tell TVM's shared-memory merge what each tile needs: room, and where it may start.

MergeSharedMemoryAllocations packs every shared tile of a kernel into one
dynamic buffer. Two of its habits would break tilelab's kernels, so this pass,
run on flat buffers just before the merge, gives each tile a new declaration
(same name, same indices, every access pointed at it):

- *room*: the merge plans tiles of 32 bits or less apart from the others and
  then never gives them an offset ("buffer_byte_offsets") - two bfloat16 values,
  one float, the scratch tile of a two-element fragment copy. Such tiles are
  enlarged to 16 bytes (the widest vector access, which alignment takes anyway).
- *where it starts*: the merge aligns a tile to its element size only. The
  hardware's swizzled shared layouts (wgmma's matrix descriptors, TMA's swizzle
  modes) repeat every 8 rows of the swizzle width - 256, 512 or 1024 bytes - and
  read the pattern from address bits, so a tile's layout is the one tilelab
  planned only when its first byte sits on a multiple of that period. A tile
  holds whole periods, so a tile of 256 bytes or more starts on a multiple of the
  largest power of two not above its size, up to 1 KiB. Without it a GEMM tile
  placed after a 256-byte bias vector ran on the wrong rows, and a 512-byte B tile
  after a 32-byte vector stopped the kernel (wgmma_check_aligned).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir.dtypes import itemsize
from ..ir.visit import walk

MIN_BYTES = 16
MIN_PERIOD, MAX_PERIOD = 256, 1024  # bytes: 8 rows of the 32- and the 128-byte swizzle


def _start(nbytes: int) -> int:
    """What a tile of `nbytes` starts on a multiple of: the largest swizzle period it holds."""
    return min(MAX_PERIOD, 1 << (nbytes.bit_length() - 1))


def _redeclared(func) -> dict:
    """Old tile -> its new declaration. (Keyed by the tile itself: TVM builds a tile's
    `.data` anew on each access, so a `.data` key would never be met again.)"""
    mapping: dict = {}

    def visit(alloc):
        buffer = alloc.buffer
        if not buffer.scope().startswith("shared") or len(buffer.shape) != 1 or \
                not isinstance(buffer.shape[0], tirx.IntImm):
            return
        size = itemsize(str(buffer.dtype))
        nbytes = int(buffer.shape[0]) * size
        if nbytes * 8 <= 32:
            new = tirx.decl_buffer([-(-MIN_BYTES // size)], str(buffer.dtype), buffer.name,
                                   scope=buffer.scope())
        elif nbytes >= MIN_PERIOD and buffer.data_alignment < _start(nbytes):
            new = tirx.decl_buffer(buffer.shape, str(buffer.dtype), buffer.name,
                                   scope=buffer.scope(), data_alignment=_start(nbytes))
        else:
            return
        mapping[buffer] = new

    walk(func.body, tirx.AllocBuffer, visit)
    return mapping


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.PrepareSharedMerge")
def PrepareSharedMerge(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects flat buffers (after FlattenBuffer)."""
    mapping = _redeclared(func)
    if not mapping:
        return func
    olds = list(mapping)

    def replace(var):
        for old in olds:
            if var.same_as(old):
                return mapping[old]
        return var

    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.Var, replace), order="post"))
