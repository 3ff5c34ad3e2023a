"""Run a kernel's blocks as a parallel loop on the CPU.

On a GPU, `T.Kernel(gx, gy)` launches gx*gy blocks at once. On the CPU the
blocks become iterations of one flat loop over `gx * gy * gz`, spread over
the cores, and each iteration recovers its block indices from the flat one:
`bx = f % gx`, `by = f // gx % gy`, `bz = f // (gx * gy)`. A kernel that uses
`T.atomic_add` runs its blocks one after another instead, so that updates of
shared elements cannot race.

Inside a block, tile-level parallelism (`T.Parallel`) turns into ordinary
loops that LLVM vectorizes, and shared memory, fragments and thread-local
scalars all become block-private arrays. One thread runs a block's statements
in order, so a barrier the program wrote (`T.sync_threads()`) has nothing to
wait for and goes.

`T.sync_grid()` splits the block's statements into phases that all blocks finish
before any starts the next: each phase is a loop over all blocks of its own. A tile
that several phases use (a fragment a block fills before the barrier and reads after
it) is an array with a copy per block, indexed by the block.

A tile allocated inside a `while` loop is allocated once, before the loop: TVM
frees a CPU array at the end of the loop or block around it, and a `while` is not
one of those, so each turn would have taken a new array and the last one alone
been freed (LLVM refuses the program).
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.builder import seq
from ..ir.keys import KERNEL
from ..ir.tile_ops import accessed_buffers, data_of, is_buffer
from ..ir.visit import rewrite, rewrite_pre, substitute
from ..ops._lowering import is_grid_sync, is_sync


def _block_loops(loop):
    loops = []
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.THREAD_BINDING:
        loops.append(loop)
        loop = loop.body
    return loops, loop


def _flatten_blocks(kernel_loop, run_serially: bool):
    loops, body = _block_loops(kernel_loop)
    total = 1
    for loop in loops:
        total = total * loop.extent
    kind = tirx.ForKind.SERIAL if run_serially else tirx.ForKind.PARALLEL
    phases, kept, views = _phases(body, total)
    block_loops = []
    for phase in phases:
        flat = tirx.Var("block", "int32")
        mapping, stride = {}, 1
        # nesting order is x, y, z from the outside; x varies fastest
        for loop in loops:
            index = flat if stride == 1 else tirx.floordiv(flat, stride)
            mapping[loop.loop_var] = tirx.floormod(index, loop.extent) \
                if loop is not loops[-1] else index
            stride = stride * loop.extent
        phase = _per_block(phase, kept, flat)
        block_loops.append(tirx.For(flat, 0, total, kind, substitute(phase, mapping)))
    arrays = [b for name, b in kept.items() if name not in views]
    return seq([tirx.AllocBuffer(b) for b in arrays] +
               [tirx.DeclBuffer(kept[v], data=kept[base].data) for v, base in views.items()] +
               block_loops)


def _phases(body, blocks):
    """The block's statements between its T.sync_grid barriers, each phase with the
    allocations (and views, `T.reshape`) of the tiles it alone uses; the tiles more than
    one phase uses, each now an array with a copy per block (name -> the array), and
    which of those are views (name -> the viewed tile's name)."""
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    phases = [[]]
    for stmt in stmts:
        if is_grid_sync(stmt):
            phases.append([])
        else:
            phases[-1].append(stmt)
    if len(phases) == 1:
        return [body], {}, {}
    declared = [s for p in phases for s in p if isinstance(s, (tirx.AllocBuffer, tirx.DeclBuffer))]
    views = {str(d.buffer.name): str(data_of(d.data).name) for d in declared
             if isinstance(d, tirx.DeclBuffer) and data_of(d.data) is not None}
    used = []  # per phase, the tiles it touches (through a view: the viewed tile too)
    for phase in phases:
        names = {str(b.name) for b in accessed_buffers(seq(phase))}
        used.append(names | {views[n] for n in names if n in views})
    users = {str(d.buffer.name): [i for i, names in enumerate(used) if str(d.buffer.name) in names]
             for d in declared}
    kept = {}
    for decl in declared:
        name, buffer = str(decl.buffer.name), decl.buffer
        if len(users[views.get(name, name)]) > 1:
            kept[name] = tirx.decl_buffer((blocks, *buffer.shape), buffer.dtype,
                                          name=f"{name}_of_blocks")
    phases = [[s for s in p if not any(s.same_as(d) for d in declared)] for p in phases]
    for decl in reversed(declared):  # (a view after the tile it views)
        name = str(decl.buffer.name)
        if name not in kept:
            for i in users[name] or [0]:
                phases[i].insert(0, decl)
    return [seq(p) for p in phases], kept, {v: base for v, base in views.items() if v in kept}


def _per_block(stmt, kept: dict, flat):
    """`stmt` with each tile in `kept` read and written in the block's own copy."""
    if not kept:
        return stmt

    def on_store(store):
        array = kept.get(str(store.buffer.name))
        return store if array is None else \
            tirx.BufferStore(array, store.value, [flat, *store.indices])

    def on_load(load):
        array = kept.get(str(load.source.name)) if is_buffer(load.source) else None
        return load if array is None else tirx.BufferLoad(array, [flat, *load.indices])

    return rewrite(rewrite(stmt, tirx.BufferStore, on_store), tvm.ir.TensorLoad, on_load)


def _serialize(loop):
    if loop.kind in (tirx.ForKind.PARALLEL, tirx.ForKind.VECTORIZED):
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body,
                        annotations=loop.annotations)
    return loop


def _take_allocations(stmt, taken: list):
    """`stmt` without the allocations its own statements make (not those inside its
    loops, which free their arrays themselves); they are appended to `taken`."""
    if isinstance(stmt, tirx.AllocBuffer):
        taken.append(stmt)
        return tirx.Evaluate(0)
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_take_allocations(s, taken) for s in stmt.seq])
    if isinstance(stmt, tirx.IfThenElse):
        return tirx.IfThenElse(stmt.condition, _take_allocations(stmt.then_case, taken),
                               _take_allocations(stmt.else_case, taken)
                               if stmt.else_case is not None else None)
    if isinstance(stmt, tirx.AttrStmt):
        return tirx.AttrStmt(stmt.node, stmt.attr_key, stmt.value,
                             _take_allocations(stmt.body, taken))
    if isinstance(stmt, tirx.While):
        return tirx.While(stmt.condition, _take_allocations(stmt.body, taken))
    return stmt


def _allocate_before(loop):
    taken = []
    body = _take_allocations(loop.body, taken)
    if not taken:
        return loop
    return tirx.SeqStmt([*taken, tirx.While(loop.condition, body)])


def kernel_to_cpu_loops(func, has_atomics: bool):
    body = rewrite(func.body, tirx.While, _allocate_before)
    body = rewrite(body, tirx.For, _serialize)
    body = rewrite(body, tirx.Evaluate, lambda node: tirx.Evaluate(0) if is_sync(node) else node)

    def lower_kernel(loop):
        if KERNEL in loop.annotations:
            return _flatten_blocks(loop, has_atomics)
        return loop

    return func.with_body(rewrite_pre(body, tirx.For, lower_kernel))


def KernelToCPULoops(has_atomics: bool = False):  # noqa: N802
    """Expects block loops from T.Kernel; leaves one flat (parallel) loop over blocks."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.KernelToCPULoops")
    def _pass(func, _mod, _ctx):
        return kernel_to_cpu_loops(func, has_atomics)

    return _pass
