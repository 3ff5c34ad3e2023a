"""Keep shared tiles that meet in one statement in separate memory.

A kernel's shared tiles all live in one block of dynamic shared memory, and
TVM's MergeSharedMemoryAllocations lets two tiles share bytes when their
lifetimes do not overlap. It measures lifetimes in statements: a tile is born
at the first statement that touches it and dies after the last one. When one
statement both reads a tile for the last time and writes another for the first
time - `flipped[j, i] = tile[i, j]`, a transpose through shared memory, once
its loop is vectorized into one store - the planner frees the first tile before
it places the second, so both land at the same address and threads overwrite
what others have yet to read.

The fix works on the planner's input, not on TVM: before every statement that
touches two or more shared tiles, this pass puts a marker statement that
touches the same tiles. The tiles are then all born at the marker (or earlier)
and die at the real statement (or later), so none of them can take another's
place. `DropLifetimeMarkers`, right after the merge, removes the markers; the
generated code never sees them.

The planner also trusts that a tile's bytes may go to the next tile right after
its last access; TVM's ThreadSync, run before the merge, decides where barriers
go as if each tile had addresses of its own (thread t reading `s0[t]`, then
writing `scratch[t]`, races with no one - until the merge puts the float
`scratch` over the half `s0`, where `scratch[t]` is other threads' `s0[2t]`).
So a tile is kept alive up to the next barrier of its statement list: a marker
touching every tile accessed since the last barrier goes just before each
barrier, and another tile may take their bytes only after it, where every
thread has finished with them.

Where the program places the barriers of its own per-thread code itself
(`tl.disable_thread_storage_sync`), ThreadSync does not see that code (marked
`OWN_BARRIERS`, passes/hide_from_thread_sync.py), so it cannot put the barrier that
a reuse would need where one tile's last reads and another tile's first writes meet
in a run of statements that no barrier closes (a `T.copy` reading one tile, then the
program's thread code writing another in its place). A run that holds such code and
reaches the end of its statement list without a barrier gets a marker there too:
its tiles share bytes only with tiles used after a barrier, or in another list.
`DropOwnBarrierMarks`, after the merge, removes the marks.

Keeping tiles alive to the next barrier can cost a kernel its launch: a tile the
main loop uses last and one the epilogue uses first (FlashAttention backward's
key tiles and its dQ staging tile) share bytes only if a barrier parts them, and
nothing needs one there. Where the kernel's tiles together need more shared memory
than a block has, `PartLifetimes` puts a barrier of the block after each statement
of its top level that ends some tiles' lives, before a statement that begins
others' - one barrier a block, where the kernel would not run at all without it.

A tile whose last access is a write (it is written and never read again: a
result nobody uses) has the same problem in another form: the planner frees it
after that write, the next tile takes its bytes, and its first writes race with
the late writes of slow threads to the dead tile - no barrier orders two writes
to different tiles. Such tiles get a marker at the end of the kernel, so their
bytes are never reused.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir.dtypes import buffer_bytes
from ..ir.keys import OWN_BARRIERS, WARP_PRODUCER
from ..ir.tile_ops import is_access_ptr, loaded
from ..ir.visit import rewrite, statements, walk
from ..ops._lowering import extern_name, is_sync, sync

MARKER = "__tilelab_lifetime_marker"


# the nodes the walks below look at (the walk calls Python for these only: a kernel has
# tens of thousands of other nodes); a Call may be a tvm_access_ptr
_ACCESSES = (tirx.SeqStmt, tirx.AllocBuffer, tirx.BufferStore, tvm.ir.TensorLoad, tvm.ir.Call)


def _is_shared(var) -> bool:
    return var.scope().startswith("shared")


def _name(data) -> str:
    """The tile a data pointer belongs to. TVM 0.27 writes some tiles' pointer as
    `buffer_data(tile)` in loads and stores but as a plain variable in `tvm_access_ptr`
    (ldmatrix, wgmma descriptors, TMA); both name the tile the same way here."""
    if isinstance(data, tvm.ir.Call) and data.op.name == "tirx.buffer_data":
        return str(data.args[0])
    return str(data)


def _shared_buffers(stmt) -> list:
    """The shared buffers a leaf statement reads or writes, in first-seen order."""
    found: dict = {}

    def note(buffer):
        if _is_shared(buffer):
            found.setdefault(_name(buffer.data), buffer.data)

    def visit(load):  # TVM 0.27 calls a buffer read a TensorLoad; `.source` is the buffer
        note(load.source)

    if isinstance(stmt, tirx.BufferStore):
        note(stmt.buffer)
    tvm_ffi.structural_walk(stmt, (tvm.ir.TensorLoad, visit), order="pre")
    return list(found.values())


def _is_marker(stmt) -> bool:
    return extern_name(stmt) == MARKER


def _mark(store):
    tiles = _shared_buffers(store)
    if len(tiles) < 2:
        return store
    marker = tirx.Evaluate(tirx.call_extern("int32", MARKER, *tiles))
    return tirx.SeqStmt([marker, store])


def _last_written(body) -> list:
    """Shared tiles whose last access in program order is a write (conservative in loops:
    a read earlier in the loop body, run again after the write, is not seen)."""
    last: dict = {}  # name -> "read" | "write"
    tiles: dict = {}  # name -> the tile's data variable

    def note(buffer, kind):
        if _is_shared(buffer):
            tiles[_name(buffer.data)] = buffer.data
            last[_name(buffer.data)] = kind

    def visit(node):
        if isinstance(node, tirx.BufferStore):
            for index in [node.value, *node.indices]:
                for buffer in loaded(index):
                    note(buffer, "read")
            note(node.buffer, "write")
            return tvm_ffi.WalkResult.SKIP
        if isinstance(node, tvm.ir.TensorLoad):
            note(node.source, "read")
        elif is_access_ptr(node):
            name = _name(node.args[1])  # the tile's data variable, read (1) or written (2)
            if name in tiles:
                last[name] = "write" if int(node.args[4].value) == 2 else "read"
        return None

    tvm_ffi.structural_walk(body, (_ACCESSES, visit), order="pre")
    return [tiles[name] for name, kind in last.items() if kind == "write"]


class _TilesOf:
    """The shared tiles a statement accesses anywhere inside it, and those it allocates
    (an AllocBuffer holds for the rest of its statement list, so a tile allocated inside
    a statement is out of scope after it): name -> data variable, each. Kept for every
    statement list asked about, so an enclosing list's walk skips what it already knows
    (each list of the kernel is asked once, innermost first)."""

    def __init__(self):
        self.known: dict = {}  # SeqStmt -> (touched, allocated)

    def __call__(self, stmt) -> tuple[dict, dict]:
        if stmt in self.known:
            return self.known[stmt]
        touched: dict = {}
        allocated: dict = {}

        def note(var):
            touched.setdefault(_name(var), var)

        def visit(node):
            if isinstance(node, tirx.SeqStmt) and node in self.known:  # (not `stmt`: above)
                inner_touched, inner_allocated = self.known[node]
                for name, var in inner_touched.items():
                    touched.setdefault(name, var)
                for name, var in inner_allocated.items():
                    allocated.setdefault(name, var)
                return tvm_ffi.WalkResult.SKIP
            if isinstance(node, tirx.AllocBuffer):
                allocated.setdefault(_name(node.buffer.data), node.buffer.data)
            elif isinstance(node, tirx.BufferStore):
                if _is_shared(node.buffer):
                    note(node.buffer.data)
            elif isinstance(node, tvm.ir.TensorLoad):
                if _is_shared(node.source):
                    note(node.source.data)
            elif is_access_ptr(node):
                var = node.args[1]
                if isinstance(var, tirx.Var) and "shared" in str(
                        getattr(var.ty, "storage_scope", "")):
                    note(var)
            return None

        tvm_ffi.structural_walk(stmt, (_ACCESSES, visit), order="pre")
        if isinstance(stmt, tirx.SeqStmt):
            self.known[stmt] = (touched, allocated)
        return touched, allocated


def _holds_own_code(stmt) -> bool:
    """Does `stmt` hold code whose barriers the program places (an OWN_BARRIERS mark)?"""
    found = []
    tvm_ffi.structural_walk(stmt, (tirx.AttrStmt, lambda attr: found.append(attr)
                                   if attr.attr_key == OWN_BARRIERS else None), order="pre")
    return bool(found)


def _keep_until_barrier(seq, own_code: bool = True, tiles_of: _TilesOf | None = None):
    """Before each barrier of a statement list, a marker touching the tiles accessed since
    the previous one (see the module doc) that are still in scope there; after the list's
    last statement too, where the run since the last barrier holds the program's own code
    (`own_code`: does the function hold any?; `tiles_of`: the pass's summaries, else
    fresh ones)."""
    if not own_code and not any(is_sync(stmt) for stmt in seq.seq):
        return seq  # no marker to place: spare the walks over each statement
    tiles_of = tiles_of or _TilesOf()
    stmts, pending, own, changed = [], {}, False, False
    touched_here: dict = {}  # the list's own summary, for lists around it
    allocated_here: dict = {}

    def keep():
        nonlocal changed
        if pending:
            stmts.append(tirx.Evaluate(tirx.call_extern("int32", MARKER, *pending.values())))
            changed = True

    for stmt in seq.seq:
        if is_sync(stmt):
            keep()
            pending, own = {}, False
        elif not _is_marker(stmt):
            touched, inner = tiles_of(stmt)
            pending.update({k: v for k, v in touched.items() if k not in inner})
            own = own or (own_code and _holds_own_code(stmt))
            for name, var in touched.items():  # (the first seen of a name, as a walk has it)
                touched_here.setdefault(name, var)
            for name, var in inner.items():
                allocated_here.setdefault(name, var)
        stmts.append(stmt)
    if own:
        keep()
    result = tirx.SeqStmt(stmts) if changed else seq
    tiles_of.known[result] = (touched_here, allocated_here)  # markers touch no memory
    return result


def _keep_to_the_end(body, tiles):
    """A marker touching `tiles` at the end of the statement list that allocates each (the
    end of its scope); tiles allocated nowhere in `body` at the end of the block."""
    names = {_name(t): t for t in tiles}
    placed: set = set()

    def at_scope_end(seq):
        here = [_name(s.buffer.data) for s in seq.seq if isinstance(s, tirx.AllocBuffer)]
        mine = [names[k] for k in here if k in names and k not in placed]
        if not mine:
            return seq
        placed.update(_name(t) for t in mine)
        return tirx.SeqStmt([*seq.seq, tirx.Evaluate(tirx.call_extern("int32", MARKER, *mine))])

    body = tvm_ffi.structural_map(body, (tirx.SeqStmt, at_scope_end), order="post")
    rest = [t for k, t in names.items() if k not in placed]
    if not rest:
        return body
    marker = tirx.Evaluate(tirx.call_extern("int32", MARKER, *rest))

    def at_threads(attr):
        if attr.attr_key == "thread_extent" and str(attr.node.thread_tag) == "threadIdx.x":
            return tirx.AttrStmt(attr.node, attr.attr_key, attr.value,
                                 tirx.SeqStmt([attr.body, marker]))
        return attr

    return tvm_ffi.structural_map(body, (tirx.AttrStmt, at_threads), order="post")


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.SeparateSharedLifetimes")
def SeparateSharedLifetimes(func, mod, ctx):  # noqa: N802 - a pass, named like TVM's
    """Expects flat buffers (after FlattenBuffer), before MergeSharedMemoryAllocations."""
    body = tvm_ffi.structural_map(func.body, (tirx.BufferStore, _mark), order="post")
    own_code, tiles_of = _holds_own_code(body), _TilesOf()
    body = tvm_ffi.structural_map(body, (tirx.SeqStmt, lambda seq: _keep_until_barrier(
        seq, own_code, tiles_of)), order="post")
    dead = _last_written(body)
    if dead:
        body = _keep_to_the_end(body, dead)
    return func.with_body(body)


def _parted(launch):
    """The block of this `threadIdx.x` launch with a barrier after each top-level statement
    whose tiles no later statement touches, where a statement before the next barrier
    touches tiles that no earlier one did - unless a producer warpgroup will take part of
    its threads."""
    producers = []
    walk(launch.body, tirx.AttrStmt, lambda a: producers.append(a)
         if a.attr_key == WARP_PRODUCER else None)
    if producers:
        return launch
    stmts = statements(launch.body)
    tiles_of = _TilesOf()
    touched = [set(tiles_of(s)[0]) for s in stmts]
    out, changed = [], False
    for k, stmt in enumerate(stmts):
        out.append(stmt)
        before, after = set().union(*touched[:k + 1]), set().union(*touched[k + 1:])
        if is_sync(stmt) or not touched[k] - after:
            continue  # no tile's life ends here
        born = set()
        for later, names in zip(stmts[k + 1:], touched[k + 1:]):
            if is_sync(later):
                break
            born |= names - before
        if born:
            out.append(sync())
            changed = True
    if not changed:
        return launch
    return tirx.AttrStmt(launch.node, launch.attr_key, launch.value, tirx.SeqStmt(out))


def PartLifetimes(limit: int | None):  # noqa: N802 - a pass, named like TVM's
    """Barriers that let tiles share bytes where the kernel needs more shared memory than a
    block has (`limit` bytes; None: no limit known, nothing to do); see the module doc.
    Expects the block's barriers placed (after ThreadSync), before SeparateSharedLifetimes
    and the merge."""

    @tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.PartLifetimes")
    def _pass(func, mod, ctx):
        tiles = []  # (allocated outside the blocks' code by now)
        walk(func.body, tirx.AllocBuffer, lambda a: tiles.append(a.buffer)
             if _is_shared(a.buffer) else None)
        if limit is None or sum(buffer_bytes(t) for t in tiles) <= limit:
            return func
        return func.with_body(rewrite(
            func.body, tirx.AttrStmt, lambda attr: _parted(attr)
            if attr.attr_key == "thread_extent" and
            str(attr.node.thread_tag) == "threadIdx.x" else attr))

    return _pass


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.DropLifetimeMarkers")
def DropLifetimeMarkers(func, mod, ctx):  # noqa: N802
    """Removes what SeparateSharedLifetimes added, once shared memory is planned."""

    def drop(seq):
        kept = [s for s in seq.seq if not _is_marker(s)]
        if len(kept) == len(seq.seq):
            return seq
        return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)

    body = tvm_ffi.structural_map(func.body, (tirx.SeqStmt, drop), order="post")
    return func.with_body(body)


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="tilelab.DropOwnBarrierMarks")
def DropOwnBarrierMarks(func, mod, ctx):  # noqa: N802
    """Removes the marks of the program's own code, once shared memory is merged (their
    last reader)."""
    body = tvm_ffi.structural_map(func.body, (tirx.AttrStmt, lambda attr: attr.body
                                              if attr.attr_key == OWN_BARRIERS else attr),
                                  order="post")
    return func.with_body(body)
