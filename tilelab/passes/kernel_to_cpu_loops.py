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
from ..ir.visit import rewrite, rewrite_pre, substitute, uses
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
    """The block's statements between its T.sync_grid barriers. A declaration (an
    allocation, a view, a binding such as T.make_tensor's address) stays where it is and
    is repeated at the head of each later phase that uses it, in program order; the
    block's own tiles that more than one phase uses become arrays with a copy per block.
    Returns the phases, those arrays (name -> the array) and which of them are views of
    another (name -> the viewed tile's name)."""
    stmts = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    phases, home = [[]], {}
    for stmt in stmts:
        if is_grid_sync(stmt):
            phases.append([])
        else:
            phases[-1].append(stmt)
    if len(phases) == 1:
        return [body], {}, {}
    declarations = []
    for i, phase in enumerate(phases):
        for stmt in phase:
            if isinstance(stmt, (tirx.AllocBuffer, tirx.DeclBuffer, tirx.Bind)):
                declarations.append(stmt)
                home[id(stmt)] = i
    is_declaration = {id(d) for d in declarations}
    work = [seq([s for s in phase if id(s) not in is_declaration]) for phase in phases]
    tiles = [d for d in declarations if not isinstance(d, tirx.Bind) and
             d.buffer.scope() != "global"]  # the block's own (a global tensor is the grid's)
    views = {str(d.buffer.name): str(data_of(d.data).name) for d in tiles
             if isinstance(d, tirx.DeclBuffer) and data_of(d.data) is not None}
    used = []  # per phase, the buffers its work touches (through a view: the viewed tile too)
    for part in work:
        names = {str(b.name) for b in accessed_buffers(part)}
        used.append(names | {views[n] for n in names if n in views})

    def tensor_users(decl) -> set:
        name = str(decl.buffer.name)
        return {i for i, names in enumerate(used) if views.get(name, name) in names}

    users = {}
    for decl in reversed(declarations):  # a binding's readers come after it
        if not isinstance(decl, tirx.Bind):
            continue
        readers = {i for i, part in enumerate(work) if uses(part, decl.var)}
        for later in declarations:
            if isinstance(later, tirx.DeclBuffer) and later.data.same_as(decl.var):
                readers |= tensor_users(later)
            elif isinstance(later, tirx.Bind) and id(later) in users and \
                    uses(later.value, decl.var):
                readers |= users[id(later)]
        users[id(decl)] = readers
        for i in readers:  # the binding is evaluated there: what its value reads is used
            used[i] |= {str(b.name) for b in accessed_buffers(tirx.Evaluate(decl.value))}
    for decl in declarations:
        if not isinstance(decl, tirx.Bind):
            users[id(decl)] = tensor_users(decl)
    kept = {str(d.buffer.name): tirx.decl_buffer((blocks, *d.buffer.shape), d.buffer.dtype,
                                                 name=f"{d.buffer.name}_of_blocks")
            for d in tiles if len(users[id(d)]) > 1}

    def stays(decl, i) -> bool:
        if not isinstance(decl, tirx.Bind) and str(decl.buffer.name) in kept:
            return False  # declared once, before the phases
        return i in users[id(decl)] or (not users[id(decl)] and i == home[id(decl)])

    result = []
    for i, phase in enumerate(phases):
        head = [d for d in declarations if home[id(d)] < i and stays(d, i)]
        own = [s for s in phase if id(s) not in is_declaration or stays(s, i)]
        result.append(seq(head + own))
    return result, kept, {v: base for v, base in views.items() if v in kept}


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
