"""Lower tile operations to plain loop nests: what each tile op *means*.

A tile op names whole regions: `copy(A[r0:r0+64, c0:c0+32], A_shared)`. On
the CPU there are no threads to share the work, so each op becomes the
obvious loop nest over its region, one element at a time:

* copy    - `dst[i, j] = src[i, j]`; elements past the edge of a global
            tensor read as 0 and are never written (this is how partial tiles
            at the borders stay correct);
* fill    - `dst[i, j] = value`;
* gemm    - `C[i, j] += A[i, k] * B[k, j]`, products in C's type;
* reduce  - fold one dimension with +, max, min (or of absolute values);
* atomic_add - `dst[i, j] += src[i, j]`;
* print   - `printf` of a value or of every element of a region.

These loops are the reference semantics of tilelab: the CUDA backend
distributes the same iterations over threads and must agree with them. Each
op's loops are written in its own module (`tilelab/ops/<op>.py`, its "cpu"
rule); this pass only looks them up and puts them in place of the op.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.visit import rewrite
from ..ops import at_user_line, lookup


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.LowerTileOpsToLoops")
def LowerTileOpsToLoops(func, _mod, _ctx):  # noqa: N802 - TVM pass naming
    """Expects tile-op nodes anywhere in the body; leaves none."""

    def lower(stmt):
        with at_user_line(stmt, func):
            return lookup(stmt).lowering("cpu")(stmt)

    return func.with_body(rewrite(func.body, TilePrimitiveCall, lower))
