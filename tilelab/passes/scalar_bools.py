"""Move booleans one at a time.

Tile ops and parallel loops mark their innermost loops *vectorized* so that a
thread moves 16 bytes with one instruction, and TVM's VectorizeLoop turns such a
loop into vector loads and stores. For `bool` it must not: TVM's CUDA code
generator has no vector type for booleans (`boolx16` is refused outright) and
writes four of them as a `ushort4`, eight bytes for four, which reads past the
tile and faults on a four-byte-aligned address. A mask is small, so this pass
gives every vectorized loop that touches a `bool` buffer back to the unroller:
one byte per access, each where it belongs.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.visit import rewrite, walk


def _touches_bools(body) -> bool:
    found = []

    def visit(node):
        if isinstance(node, tirx.BufferStore) and str(node.buffer.dtype) == "bool":
            found.append(node)
        elif isinstance(node, tvm.ir.TensorLoad) and str(node.source.dtype) == "bool":
            found.append(node)

    walk(body, object, visit)
    return bool(found)


def _unrolled(loop):
    if loop.kind != tirx.ForKind.VECTORIZED or not _touches_bools(loop.body):
        return loop
    return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.UNROLLED, loop.body,
                    annotations=loop.annotations)


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.ScalarBools")
def ScalarBools(func, _mod, _ctx):  # noqa: N802
    """Expects thread-level code (before VectorizeLoop): vectorized loops over booleans
    become unrolled ones."""
    return func.with_body(rewrite(func.body, tirx.For, _unrolled))
