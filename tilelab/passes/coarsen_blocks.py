"""Give each thread of an elementwise kernel several elements: block coarsening.

The tutorial's first kernels take one element per thread:

    with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
        for i in T.Parallel(256):
            C[bx * 256 + i] = A[bx * 256 + i] + B[bx * 256 + i]

That is right, and slow on a big GPU: a thread has one load of 4 bytes in flight,
and the threads an SM holds cannot keep enough bytes in the air to reach the
memory's bandwidth (the H200: 0.78x `a + b` for this vector add). With four
elements per thread the same kernel runs at `a + b`'s speed.

Such a kernel's blocks share nothing: no shared or fragment tiles, no barriers,
no tile ops, only loads and stores of global tensors, one `T.Parallel` loop as
wide as the block's threads. So a launched block may run F neighbouring blocks
of the program, one after the other in each thread's registers:

    with T.Kernel(T.ceildiv(G, F), threads=256) as bx:
        for e in T.Parallel(F * 256):          # thread t: elements F*t .. F*t+F-1
            if bx * F + e // 256 < G:          # (only when F does not divide G)
                <body, with bx -> bx * F + e // 256 and i -> e % 256>

which the layout pass maps as any loop wider than the block (each thread takes F
neighbouring elements, in 16-byte accesses where it can), and in which
`(bx * F + e // 256) * 256 + e % 256` simplifies to `bx * F * 256 + e`. F fills 16
bytes of the narrowest element the kernel touches. Grids too small to fill the GPU
several times over keep one element per thread, and
`PassConfigKey.TL_DISABLE_COARSEN` turns the pass off.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.dtypes import itemsize
from ..ir.expr import dtype_of
from ..ir.keys import COARSENED, KERNEL, THREADS
from ..ir.visit import rewrite_pre, substitute, walk

VECTOR_BYTES = 16
MIN_LAUNCHED_BLOCKS = 2048  # after coarsening: about two waves of a 132-SM GPU


def _elementwise_loop(kernel):
    """The kernel's `T.Parallel` loop when the kernel is elementwise (see above), else None."""
    loop = kernel.body
    threads = list(kernel.annotations.get(THREADS, []))
    if not isinstance(loop, tirx.For) or loop.kind != tirx.ForKind.PARALLEL or \
            not isinstance(loop.extent, tirx.IntImm) or len(threads) != 1 or \
            int(threads[0]) != int(loop.extent) or not isinstance(loop.min, tirx.IntImm) or \
            int(loop.min) != 0:
        return None
    ok = True

    def visit(node):
        nonlocal ok
        if isinstance(node, tirx.For) and node.kind != tirx.ForKind.SERIAL:
            ok = False  # a nested T.Parallel or a second grid dimension
        elif isinstance(node, tirx.Evaluate | tirx.AllocBuffer | tirx.DeclBuffer |
                        tirx.AttrStmt):
            ok = False  # tile ops, prints, atomics, allocations, barriers
        elif isinstance(node, tirx.BufferStore | tvm.ir.TensorLoad):
            buffer = node.buffer if isinstance(node, tirx.BufferStore) else node.source
            ok = ok and buffer.scope() == "global"
        elif isinstance(node, tvm.ir.Call) and not node.op.name.startswith("tirx."):
            ok = False

    walk(loop.body, object, visit)
    return loop if ok else None


def _factor(loop) -> int:
    """Elements per thread: 16 bytes of the narrowest element loaded or stored."""
    sizes = []

    def visit(node):
        if isinstance(node, tirx.BufferStore):
            sizes.append(itemsize(dtype_of(node.value)))
        elif isinstance(node, tvm.ir.TensorLoad):
            sizes.append(itemsize(dtype_of(node)))

    walk(loop.body, object, visit)
    return VECTOR_BYTES // min(sizes) if sizes else 1


def _coarsened(kernel):
    loop = _elementwise_loop(kernel)
    if loop is None or not isinstance(kernel.extent, tirx.IntImm):
        return kernel
    blocks, width, factor = int(kernel.extent), int(loop.extent), _factor(loop)
    if factor <= 1 or blocks < factor * MIN_LAUNCHED_BLOCKS:
        return kernel
    bx = kernel.loop_var
    element = tirx.Var(loop.loop_var.name, dtype_of(loop.loop_var))
    program_block = bx * factor + tirx.floordiv(element, width)
    body = substitute(loop.body, {bx: program_block,
                                  loop.loop_var: tirx.floormod(element, width)})
    if blocks % factor:
        body = tirx.IfThenElse(program_block < blocks, body, None)
    wide = tirx.For(element, 0, width * factor, tirx.ForKind.PARALLEL, body,
                    annotations=loop.annotations)
    launched = -(-blocks // factor)
    binding = kernel.thread_binding
    binding = tirx.IterVar(tvm.ir.Range(0, launched), bx, binding.iter_type, binding.thread_tag)
    return tirx.For(bx, kernel.min, launched, kernel.kind, wide, binding,
                    dict(kernel.annotations, **{COARSENED: factor}))


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.CoarsenBlocks")
def CoarsenBlocks(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    def visit(loop):
        if KERNEL in loop.annotations:
            return _coarsened(loop)
        return loop

    return func.with_body(rewrite_pre(func.body, tirx.For, visit))
