"""bfloat16 tiles on the CPU hold bfloat16 numbers.

LLVM computes bfloat16 in float32 (TVM's BF16ComputeLegalize), and that pass also gives
each bfloat16 tile, fragment and local of a kernel the storage of a float32: a value stored
there keeps all of its float32 bits, where a GPU rounds it to bfloat16. A kernel that rounds
on purpose - probabilities or a decay-weighted score matrix written to a bfloat16 tile
before a `T.gemm`, as FlashAttention and flash-linear-attention's kernels do - then computed
other numbers on the CPU than on the GPU, and failed checks against references that round
as the GPU does (a float32 value copied into a bfloat16 shared tile came back unchanged).

This pass, run just before TVM's, rounds every value stored into a bfloat16 buffer the
kernel allocates: to nearest, ties to even, as `tensor.to(torch.bfloat16)` and the GPU's
`cvt.rn.bf16.f32`, spelled out on the float32 bits (add 0x7FFF plus the lowest kept bit,
clear the low 16 bits; NaN stays itself). Stores into the kernel's bfloat16 tensors TVM
rounds itself. Arithmetic between stores stays in float32, as before: only what a tile
holds is rounded.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.visit import rewrite


def round_to_bfloat16(value):
    """A float32 expression rounded to the nearest bfloat16, kept as a float32."""
    lanes = value.ty.lanes if hasattr(value.ty, "lanes") else 1

    def u32(number):
        const = tirx.const(number, "uint32")
        return const if lanes == 1 else tirx.Broadcast(const, lanes)

    bits = tirx.reinterpret(f"uint32x{lanes}" if lanes > 1 else "uint32", value)
    odd = tirx.bitwise_and(tirx.shift_right(bits, u32(16)), u32(1))
    kept = tirx.bitwise_and(bits + u32(0x7FFF) + odd, u32(0xFFFF0000))
    return tirx.Select(tirx.isnan(value), value, tirx.reinterpret(value.ty, kept))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.RoundBFloat16Tiles")
def RoundBFloat16Tiles(func, _mod, _ctx):  # noqa: N802 - a pass, named like TVM's
    """Stores into allocated bfloat16 buffers round their values (see the module doc)."""
    tensors = [param.data for param in func.params if hasattr(param, "data")]

    def on_store(store):
        buffer = store.buffer
        if str(buffer.dtype).split("x")[0] != "bfloat16" or \
                any(buffer.data.same_as(data) for data in tensors):
            return store
        lanes = store.value.ty.lanes if hasattr(store.value.ty, "lanes") else 1
        as_float = tirx.Cast(f"float32x{lanes}" if lanes > 1 else "float32", store.value)
        return tirx.BufferStore(buffer, tirx.Cast(store.value.ty, round_to_bfloat16(as_float)),
                                store.indices)

    return func.with_body(rewrite(func.body, tirx.BufferStore, on_store))
