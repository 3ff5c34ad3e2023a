"""Give an op its operands where its GPU lowering takes them, if the program put them elsewhere.

On the CPU every tile is memory, and `T.gemm(a, b, c_shared)`, a fragment reduced
into a shared vector or `T.cumsum` of a fragment run as written. On the GPU an op's
lowering takes some operands from one place only: the tensor cores add into
registers and read B from shared memory; threads that hold parts of a row combine
them in registers; a scan walks lines of a shared tile. Such a program is still
well formed, so the GPU runs it too: this pass gives the operand a tile of its own
in the place the op wants (a fragment or a shared tile, of the region's shape) and
moves the data through it,

    c_in_registers = T.alloc_fragment(shape of the region)
    T.copy(c_shared[region], c_in_registers)   # if the op reads the old values
    T.gemm(a, b, c_in_registers)
    T.copy(c_in_registers, c_shared[region])   # if the op writes them

which is what a user would write by hand. Layout inference then treats the new
tile like any other, and the barrier pass orders the copies with the rest. Where
an op takes each operand, and whether it reads or writes it, its module says
(`TileOp.gpu_operands`).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.tile_ops import Region, is_tile_call, regions, tile_call
from ..ir.visit import keep_user_errors, rewrite, walk
from ..ops import lookup
from ..ops._lowering import is_fragment

SCOPES = {"fragment": ("local.fragment", "in_registers"), "shared": ("shared.dyn", "in_shared")}


def place(region: Region) -> str:
    """"fragment", "shared", or the memory scope of any other tile ("global", "local")."""
    if is_fragment(region.buffer):
        return "fragment"
    return "shared" if region.scope.startswith("shared") else region.scope


def _staged(call, names: set):
    rule = lookup(call).gpu_operands
    operands = regions(call)
    moves = [(position, places[0], read, written)
             for position, places, read, written in (rule(call) if rule else [])
             if place(operands[position]) not in places]
    if not moves:
        return call
    where = {"loc": call.config["loc"]} if "loc" in call.config else {}  # the user's line
    args, before, after = list(call.args), [], []
    region_args = [i for i, a in enumerate(args) if isinstance(a, tvm.ir.TensorRegion)]
    for position, target, read, written in moves:
        region = operands[position]
        scope, suffix = SCOPES[target]
        name = f"{region.buffer.name}_{suffix}"
        while name in names:
            name += "_"
        names.add(name)
        tile = tirx.decl_buffer([int(e) for e in region.extents], region.dtype, name=name,
                                scope=scope)
        whole = Region.whole(tile)
        before.append(tirx.AllocBuffer(tile))
        if read:
            before.append(tile_call("copy", region, whole, **where))
        if written:
            after.append(tile_call("copy", whole, region, **where))
        args[region_args[position]] = whole.to_tir()
    staged = TilePrimitiveCall(*args, op=call.op, config=dict(call.config))
    return tirx.SeqStmt([*before, staged, *after])


def stage_operands(body):
    """`body` with every tile op's operands where its CUDA lowering takes them."""
    names = set()
    walk(body, tirx.AllocBuffer, lambda a: names.add(str(a.buffer.name)))
    return rewrite(body, TilePrimitiveCall,
                   lambda call: _staged(call, names) if is_tile_call(call) else call)


def StageOperands():  # noqa: N802
    """Expects tile ops; moves operands to where their op's CUDA lowering takes them."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.StageOperands")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        return func.with_body(stage_operands(func.body))

    return _pass
