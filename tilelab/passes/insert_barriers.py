"""Insert block-wide barriers between shared-memory writes and reads.

Threads of a block share a tile in shared memory, so one thread may read what
another wrote only after a barrier (`__syncthreads`), and may overwrite what
others still read only after one too. At the tile level the accesses are
plain: a copy into `A_shared` writes it, a GEMM reads it, a `T.Parallel` loop
reads and writes what its body touches. This pass walks each statement list
keeping the shared buffers written and read since the last barrier, and puts
a barrier before any statement that would race with them. A loop whose next
iteration would race with the end of the previous one gets a barrier at the
end of its body; an `if` of the block's on values that read no memory (every
thread takes it alike) is walked into, each branch a statement list of its own.
(TVM's own ThreadSync pass runs later too, on the code tile ops lower to, but it
cannot see the accesses that tensor-core instructions make through pointers, and
it sees each T.Parallel loop as one statement: passes/hide_from_thread_sync.py.)
A TMA store (passes/tma_stores.py) brings its own barrier, after every thread's proxy
fence, so none is put before it. TMA then reads the tile while the block goes on, so the
tile is not free again at the next barrier: the pass keeps it among the tiles read *late*
until a statement writes it (a copy landing asynchronously too: a pipeline's load, a
T.tma_copy), and there every thread first waits for TMA's reads
(`tl::tma_store_wait_read`: only the thread that issued the store has any to wait for),
then the block synchronizes. (The wait names the tiles, so that the shared-memory merge
gives their bytes to no other tile before it; what is still read at the kernel's end is
waited for there.) A loop's body is walked twice: what TMA still reads at the end of one
iteration is waited for where the next iteration writes it. In a persistent GEMM that is
the next tile's store, so the tensor cores start on the next tile while TMA reads this one.

A program may place the barriers of its own thread code itself
(`tl.disable_thread_storage_sync`; code written for one thread is marked by
passes/thread_code.py): then the accesses inside those marks are kept apart, and
two of them never call for a barrier - the program's `T.sync_threads()` stands
between them where one is needed, and it knows where none is (two halves of one
tile that threads read and append to). An access of thread code and one of a tile
op (or of the block's own statements) still do, as two tile ops' do.
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from ..ir.keys import KERNEL, PER_THREAD, WARP_ROLE
from ..ir.tile_ops import config, is_buffer, is_load, loaded, shared_views
from ..ir.visit import rewrite, rewrite_pre, walk, with_block_body
from ..ops import effects
from ..ops._lowering import address, extern, is_sync, seq, sync
from .thread_code import exchange_tiles, hands_over


def _shared(buffer) -> bool:
    return is_buffer(buffer) and buffer.scope().startswith("shared")


def _tile_name(buffer, aliases: dict) -> str:
    """A buffer's name, a view's being the tile's it sees (`aliases`: view -> tile)."""
    return aliases.get(str(buffer.name), str(buffer.name))


def accesses(stmt, keep=_shared, aliases=None) -> tuple[set, set]:
    """Names of shared buffers (those `keep` takes) a statement reads and writes
    (anywhere inside it); a view is named as the tile it sees (`aliases`: view -> tile)."""
    reads, writes = set(), set()
    aliases = aliases or {}

    def name(buffer) -> str:
        return _tile_name(buffer, aliases)

    def visit(node):
        if isinstance(node, TilePrimitiveCall):
            if config(node).get("asynchronous"):
                return  # the pipeline that issued it waits and synchronizes for it
            if config(node).get("by_barrier"):
                return  # T.tma_copy: the program's own mbarriers order it (ops/barrier.py)
            done = effects(node)  # as the op's module declares them
            reads.update(name(r.buffer) for r in done.reads if keep(r.buffer))
            writes.update(name(w.buffer) for w in done.writes if keep(w.buffer))
        elif isinstance(node, tirx.BufferStore) and keep(node.buffer):
            writes.add(name(node.buffer))
        elif is_load(node) and keep(node.source):
            reads.add(name(node.source))

    walk(stmt, (TilePrimitiveCall, tirx.BufferStore, tvm.ir.TensorLoad), visit)
    return reads, writes


def written_asynchronously(stmt, aliases=None) -> set:
    """Names of the shared tiles that copies landing asynchronously write inside `stmt`
    (a pipeline's loads, T.tma_copy): `accesses` leaves their order to mbarriers, but one
    must not land on a tile that TMA is still reading."""
    aliases = aliases or {}
    names = set()

    def visit(node):
        if config(node).get("asynchronous") or config(node).get("by_barrier"):
            names.update(_tile_name(w.buffer, aliases)
                         for w in effects(node).writes if _shared(w.buffer))

    walk(stmt, TilePrimitiveCall, visit)
    return names


class _Touched:
    """Names of the shared tiles some statements read and write."""

    def __init__(self, reads=(), writes=()):
        self.reads, self.writes = set(reads), set(writes)

    def races(self, later) -> bool:
        """Would the accesses `later` race with these, without a barrier between?"""
        return bool(later.reads & self.writes or later.writes & self.reads or
                    later.writes & self.writes)

    def __or__(self, other):
        return _Touched(self.reads | other.reads, self.writes | other.writes)

    def __bool__(self) -> bool:
        return bool(self.reads or self.writes)


class _State:
    """What was touched since the last barrier: by tile ops and the block's own statements
    (`block`), and by thread code where the program orders that itself (`own`); and the
    tiles TMA stores may still be reading (`late`: name -> tile), whatever barriers came
    since."""

    def __init__(self):
        self.block, self.own = _Touched(), _Touched()
        self.late: dict = {}

    def conflicts(self, block: _Touched, own: _Touched) -> bool:
        """Two accesses of the program's thread code never call for a barrier here."""
        return self.block.races(block) or self.block.races(own) or self.own.races(block)

    def add(self, block: _Touched, own: _Touched):
        self.block, self.own = self.block | block, self.own | own

    def clear(self):
        self.block, self.own = _Touched(), _Touched()

    def copy(self) -> _State:
        copied = _State()
        copied.add(self.block, self.own)
        copied.late = dict(self.late)
        return copied


def _wait_for_late_reads(state: _State) -> list:
    """Every thread waits until TMA has read the tiles still read late (the thread that
    issued the stores waits; the others pass), then the block synchronizes."""
    tiles = [address(tile, [0] * len(tile.shape), rw_mask=0)  # (ThreadSync: no access)
             for _, tile in sorted(state.late.items())]
    state.clear()
    state.late = {}
    return [extern("tl::tma_store_wait_read", *tiles), sync()]


def _synchronizes(stmt) -> bool:
    """Does the tile op `stmt` lower to a barrier of the block before its accesses?"""
    return isinstance(stmt, TilePrimitiveCall) and effects(stmt).synchronizes


def _reads_late(stmt) -> bool:
    """Does the tile op `stmt` go on reading its tiles after the block has gone on?"""
    return isinstance(stmt, TilePrimitiveCall) and effects(stmt).reads_late


def _is_loop_body_container(stmt) -> bool:
    return isinstance(stmt, tirx.While) or isinstance(stmt, tirx.For) and stmt.kind in (
        tirx.ForKind.SERIAL, tirx.ForKind.UNROLLED)


def _statements(body) -> list:
    return list(body) if isinstance(body, tirx.SeqStmt) else [body]


def _runs_through(loop) -> bool:
    """Does `loop` run at least one whole iteration, and leave only at its end?"""
    extent = getattr(loop, "extent", None)
    if not isinstance(extent, tirx.IntImm) or extent.value < 1:
        return False
    breaks = []
    walk(loop.body, tirx.Break, breaks.append)
    return not breaks


class _Barriers:
    """The walk over a kernel's statement lists. `own_barriers`: the accesses of thread
    code are the program's to order (`touched` keeps them apart)."""

    def __init__(self, own_barriers: bool, exchanges: set = frozenset(), aliases=None):
        self.own_barriers = own_barriers
        self.exchanges = exchanges  # exchange tiles: their pieces stay the block's
        self.aliases = aliases or {}  # a shared view's name -> its tile's (T.view)

    def touched(self, stmt) -> tuple[_Touched, _Touched]:
        """(block, own): what `stmt` touches outside and inside thread code's marks; all of
        it counts as the block's unless the program orders its thread code itself."""
        if not self.own_barriers:
            return _Touched(*accesses(stmt, aliases=self.aliases)), _Touched()
        pieces = []

        def take(attr):
            if attr.attr_key != PER_THREAD or hands_over(attr.body, self.exchanges):
                return attr  # (a shuffle's exchange: tilelab places its barriers)
            pieces.append(attr.body)
            return tirx.Evaluate(tirx.const(0, "int32"))

        block = _Touched(*accesses(rewrite(stmt, tirx.AttrStmt, take), aliases=self.aliases))
        own = _Touched()
        for piece in pieces:
            own = own | _Touched(*accesses(piece, aliases=self.aliases))
        return block, own

    def sequence(self, stmts: list, state: _State) -> list:
        out = []
        for stmt in stmts:
            if isinstance(stmt, tirx.SeqStmt):
                out.extend(self.sequence(list(stmt), state))
                continue
            if _is_loop_body_container(stmt):
                out.extend(self.loop(stmt, state))
                continue
            if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == WARP_ROLE:
                out.extend(self.role(stmt, state))
                continue
            if isinstance(stmt, tirx.IfThenElse) and not loaded(stmt.condition):
                out.extend(self.branches(stmt, state))
                continue
            if is_sync(stmt):
                state.clear()
                out.append(stmt)
                continue
            if _synchronizes(stmt):
                state.clear()  # a TMA store: its lowering has a barrier before it reads
            block, own = self.touched(stmt)
            late = {}
            if _reads_late(stmt):  # its reads are waited for later, before a write
                late = {_tile_name(r.buffer, self.aliases): r.buffer
                        for r in effects(stmt).reads if _shared(r.buffer)}
                block = _Touched(block.reads - set(late), block.writes)
                stmt = stmt.replace(config={**stmt.config, "read_waited_later": True})
            if state.late and (block.writes | own.writes |
                               written_asynchronously(stmt, self.aliases)) & set(state.late):
                out.extend(_wait_for_late_reads(state))
            elif state.conflicts(block, own):
                out.append(sync())
                state.clear()
            out.append(stmt)
            state.add(block, own)
            state.late.update(late)
        return out

    def loop(self, loop, state: _State) -> list:
        """A loop is its body repeated: check entry, the body, and the wrap-around."""
        block, own = self.touched(loop.body)
        if not block and not own:
            return [loop]
        out = []
        if state.conflicts(block, own):
            out.append(sync())
            state.clear()
        entering, inner = state.copy(), state.copy()
        # a first walk learns what TMA may still be reading when an iteration ends: the
        # next iteration waits for it before its first write of those tiles
        stores = []
        walk(loop.body, TilePrimitiveCall, lambda c: stores.append(c) if _reads_late(c) else None)
        if stores:
            first = state.copy()
            self.sequence(_statements(loop.body), first)
            inner.late.update(first.late)
        body = self.sequence(_statements(loop.body), inner)
        # the next iteration starts with the accesses before the body's first barrier
        head = _State()
        for stmt in body:
            if is_sync(stmt) or _synchronizes(stmt):
                break
            head.add(*self.touched(stmt))
        if inner.conflicts(head.block, head.own):
            body.append(sync())
            inner.clear()
        body = seq(body)
        out.append(tirx.While(loop.condition, body) if isinstance(loop, tirx.While) else
                   tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, body,
                            annotations=loop.annotations))
        # after it stands what the last iteration left; a loop that may run no iteration,
        # or leave one at a `break`, may also leave what came before or what its body touched
        state.clear()
        state.add(inner.block, inner.own)
        state.late = dict(inner.late)
        if not _runs_through(loop):
            state.add(entering.block | block, entering.own | own)
            state.late.update(entering.late)
        return out

    def branches(self, stmt, state: _State) -> list:
        """An `if` of the block's on values that read no memory (block indices, loop
        counters, sizes) is taken alike by every thread (MarkThreadCode keeps a branch on
        the thread index inside its marks), so a barrier may stand inside it: each branch
        is a statement list entered with what came before, and after the `if` stands what
        either branch may have left. (An `if` on a loaded value is one statement here:
        whether threads see it alike is the CUDA backend's to check, where ThreadSync asks
        for a barrier inside it.)"""
        other = state.copy()
        then_case = self.sequence(_statements(stmt.then_case), state)
        else_case = None
        if stmt.else_case is not None:
            else_case = seq(self.sequence(_statements(stmt.else_case), other))
        state.add(other.block, other.own)
        state.late.update(other.late)
        return [tirx.IfThenElse(stmt.condition, seq(then_case), else_case)]

    def role(self, attr, state: _State) -> list:
        """A T.ws role is one statement to the rest of the block (a barrier of the whole
        block before it, where it races with what came before); inside, its own statements
        get barriers as a block of their own (passes/warp_roles.py makes them the role's)."""
        touched = self.touched(attr.body)
        out = []
        if state.conflicts(*touched):
            out.append(sync())
            state.clear()
        body = seq(self.sequence(_statements(attr.body), _State()))
        out.append(tirx.AttrStmt(attr.node, attr.attr_key, attr.value, body))
        state.add(*touched)
        return out


def insert_barriers(body, own_barriers: bool = False):
    exchanges = exchange_tiles(body) if own_barriers else set()
    state = _State()
    stmts = _Barriers(own_barriers, exchanges, shared_views(body)).sequence([body], state)
    if state.late:  # the block's shared memory must outlive TMA's reads of it
        stmts.append(_wait_for_late_reads(state)[0])
    return seq(stmts)


def InsertBarriers(own_barriers: bool = False):  # noqa: N802
    """Expects tile ops inside kernels; adds `tvm_storage_sync("shared")` where threads race.
    `own_barriers` (tl.disable_thread_storage_sync): none between two pieces of thread code."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.InsertBarriers")
    def _pass(func, _mod, _ctx):
        def on_kernel(loop):
            if KERNEL not in loop.annotations:
                return loop
            return with_block_body(loop, lambda body: insert_barriers(body, own_barriers))

        return func.with_body(rewrite_pre(func.body, tirx.For, on_kernel))

    return _pass
