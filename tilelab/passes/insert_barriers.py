"""Insert block-wide barriers between shared-memory writes and reads.

Threads of a block share a tile in shared memory, so one thread may read what
another wrote only after a barrier (`__syncthreads`), and may overwrite what
others still read only after one too. At the tile level the accesses are
plain: a copy into `A_shared` writes it, a GEMM reads it, a `T.Parallel` loop
reads and writes what its body touches. This pass walks each statement list
keeping the shared buffers written and read since the last barrier, and puts
a barrier before any statement that would race with them. A loop whose next
iteration would race with the end of the previous one gets a barrier at the
end of its body. (TVM's own ThreadSync pass runs later too, but it cannot see
the accesses that tensor-core instructions make through pointers.)
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.keys import KERNEL, WARP_ROLE
from ..ir.tile_ops import config, is_buffer, is_load
from ..ir.visit import rewrite_pre, walk, with_block_body
from ..ops import effects
from ..ops._lowering import is_sync, sync


def _shared(buffer) -> bool:
    return is_buffer(buffer) and buffer.scope().startswith("shared")


def accesses(stmt, keep=_shared) -> tuple[set, set]:
    """Names of shared buffers (those `keep` takes) a statement reads and writes
    (anywhere inside it)."""
    reads, writes = set(), set()

    def visit(node):
        if isinstance(node, TilePrimitiveCall):
            if config(node).get("asynchronous"):
                return  # the pipeline that issued it waits and synchronizes for it
            if config(node).get("by_barrier"):
                return  # T.tma_copy: the program's own mbarriers order it (ops/barrier.py)
            done = effects(node)  # as the op's module declares them
            reads.update(r.buffer.name for r in done.reads if keep(r.buffer))
            writes.update(w.buffer.name for w in done.writes if keep(w.buffer))
        elif isinstance(node, tirx.BufferStore) and keep(node.buffer):
            writes.add(node.buffer.name)
        elif is_load(node) and keep(node.source):
            reads.add(node.source.name)

    walk(stmt, object, visit)
    return reads, writes


class _State:
    def __init__(self):
        self.reads: set = set()
        self.writes: set = set()

    def conflicts(self, reads: set, writes: set) -> bool:
        return bool(reads & self.writes or writes & self.reads or writes & self.writes)

    def add(self, reads: set, writes: set):
        self.reads |= reads
        self.writes |= writes

    def clear(self):
        self.reads, self.writes = set(), set()


def _is_loop_body_container(stmt) -> bool:
    return isinstance(stmt, tirx.While) or isinstance(stmt, tirx.For) and stmt.kind in (
        tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED)


def _sequence(stmts: list, state: _State) -> list:
    out = []
    for stmt in stmts:
        if isinstance(stmt, tirx.SeqStmt):
            out.extend(_sequence(list(stmt), state))
            continue
        if _is_loop_body_container(stmt):
            out.extend(_loop(stmt, state))
            continue
        if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == WARP_ROLE:
            out.extend(_role(stmt, state))
            continue
        if is_sync(stmt):
            state.clear()
            out.append(stmt)
            continue
        reads, writes = accesses(stmt)
        if state.conflicts(reads, writes):
            out.append(sync())
            state.clear()
        out.append(stmt)
        state.add(reads, writes)
    return out


def _loop(loop, state: _State) -> list:
    """A loop is its body repeated: check entry, the body, and the wrap-around."""
    reads, writes = accesses(loop.body)
    if not reads and not writes:
        return [loop]
    out = []
    if state.conflicts(reads, writes):
        out.append(sync())
        state.clear()
    inner = _State()
    inner.reads, inner.writes = set(state.reads), set(state.writes)
    body = _sequence(list(loop.body) if isinstance(loop.body, tirx.SeqStmt) else [loop.body],
                     inner)
    # the next iteration starts with the accesses before the body's first barrier
    head = _State()
    for stmt in body:
        if is_sync(stmt):
            break
        head.add(*accesses(stmt))
    if inner.conflicts(head.reads, head.writes):
        body.append(sync())
        inner.clear()
    body = tirx.SeqStmt(body) if len(body) > 1 else body[0]
    out.append(tirx.While(loop.condition, body) if isinstance(loop, tirx.While) else
               tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body,
                        annotations=loop.annotations))
    state.reads, state.writes = inner.reads | reads, inner.writes | writes
    return out


def _role(attr, state: _State) -> list:
    """A T.ws role is one statement to the rest of the block (a barrier of the whole
    block before it, where it races with what came before); inside, its own statements
    get barriers as a block of their own (passes/warp_roles.py makes them the role's)."""
    reads, writes = accesses(attr.body)
    out = []
    if state.conflicts(reads, writes):
        out.append(sync())
        state.clear()
    inner = _sequence(list(attr.body) if isinstance(attr.body, tirx.SeqStmt) else [attr.body],
                      _State())
    body = tirx.SeqStmt(inner) if len(inner) > 1 else inner[0]
    out.append(tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body))
    state.add(reads, writes)
    return out


def insert_barriers(body):
    stmts = _sequence([body], _State())
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def InsertBarriers():  # noqa: N802
    """Expects tile ops inside kernels; adds `tvm_storage_sync("shared")` where threads race."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.InsertBarriers")
    def _pass(func, _mod, _ctx):
        def on_kernel(loop):
            if KERNEL not in loop.annotations:
                return loop
            return with_block_body(loop, insert_barriers)

        return func.with_body(rewrite_pre(func.body, tirx.For, on_kernel))

    return _pass
