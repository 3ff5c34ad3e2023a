"""Keep the registers of a loop's unchanging wgmma operand A until the loop is over.

`wgmma.mma_async` may take its A operand from the threads' registers (the `rs` form,
tilelab's T.gemm with A a fragment). When a loop multiplies by the same registers in
every iteration - a query tile kept in registers, `T.copy(q_shared, q_regs)` before
the key loop and `T.gemm(q_regs, k_shared, scores)` in it - and nothing after the loop
reads them, ptxas of CUDA 13.0 counts them dead after their last MMA inside the loop:
it gives their registers to another value of the loop body (FlashAttention's P, the
second MMA's register operand), and the next iteration multiplies by P instead of Q.
The PTX it is given keeps Q in registers of its own; only the machine code is wrong
(seen on an H100: FlashAttention d128 with Q in registers off by 0.3-0.8 from the
second key tile on, right on the CPU; in the SASS the first MMA's A registers were
rewritten by the exponentials). With any read of the registers after the loop, ptxas
keeps them for the whole loop.

This pass, after the tile ops are lowered, finds each loop whose body feeds registers
it never writes to a `wgmma.mma_async` as operand A, and puts such a read after the
loop: `tl::keep_registers` (tilelab.cuh) stores the registers to shared memory in a
branch no launch takes (taken only on a GPU of zero SMs). It costs a few instructions
after the loop and nothing inside it. A fragment the loop writes in part counts as
written, and its unchanged part is not kept: no program known writes its A that way.
"""

from __future__ import annotations

import math
import re

import tvm
from tvm import tirx
from tvm_ffi import WalkResult

from ..ir.dtypes import itemsize
from ..ir.tile_ops import ADDRESS_CALLS, by_address, is_load
from ..ir.visit import rewrite, walk
from ..ops._lowering import address, extern, extern_name

KEEP = "tl::keep_registers"


def _register_operands(loop) -> list:
    """The buffers whose registers the loop's wgmma instructions take as operand A."""
    found: list = []

    def on_call(call):
        if not re.fullmatch(r"tirx\.ptx\.wgmma_\w+_rs", getattr(call.op, "name", "")):
            return
        for arg in call.args:  # A in registers: reinterpret("uint32", regs[ramp])
            if isinstance(arg, tvm.ir.Call) and getattr(arg.op, "name", "") == "tirx.reinterpret" \
                    and is_load(arg.args[0]):
                buffer = arg.args[0].source
                if not any(buffer.same_as(b) for b in found):
                    found.append(buffer)

    walk(loop.body, tvm.ir.Call, on_call)
    return found


def _written(loop, buffer) -> bool:
    """Whether the loop stores to the buffer or hands out its address (a callee may write
    through it); the reads this pass put after the loop's inner loops do not count."""
    hit = False

    def visit(node):
        nonlocal hit
        if extern_name(node).startswith(KEEP):
            return WalkResult.SKIP
        if isinstance(node, tirx.BufferStore):
            hit = hit or node.buffer.same_as(buffer)
        elif isinstance(node, tvm.ir.Call) and getattr(node.op, "name", "") in ADDRESS_CALLS:
            hit = hit or any(b.same_as(buffer) for b in by_address(node))
        return None

    walk(loop.body, object, visit)
    return hit


def _keep(buffer):
    words = math.prod(int(s) for s in buffer.shape) * itemsize(str(buffer.dtype)) // 4
    return extern(f"{KEEP}<{words}>", address(buffer, [0] * len(buffer.shape)))


def _after_loop(loop):
    kept = [b for b in _register_operands(loop) if not _written(loop, b)]
    if not kept:
        return loop
    return tirx.SeqStmt([loop, *(_keep(b) for b in kept)])


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.KeepWgmmaOperands")
def KeepWgmmaOperands(func, _mod, _ctx):  # noqa: N802
    return func.with_body(rewrite(func.body, tirx.For, _after_loop))
