"""Keep TVM's barrier pass away from statements whose barriers are placed already.

TVM's ThreadSync puts a barrier between any shared-memory write and a read (or a
read and a write) of other threads that it cannot prove apart. Three kinds of
statements have their barriers from elsewhere, or need none inside, and ThreadSync
must not see them as they are.

The refills of pipelined loops. A pipelined loop (`passes/pipeline_loops.py`)
refills the slot of a shared tile that an earlier iteration read, while this
iteration reads another slot. The barrier at the top of each iteration already
orders both hazards: everyone finished reading the refilled slot before it (a
write after read), and the copies of a slot have landed before the iteration that
reads it passes its own (a read after write). ThreadSync cannot know that: slot
`(k + 2) % 3` and slot `k % 3` are to it just two indices of one buffer (and, in
dynamic shared memory, all tiles are one buffer), so it puts a second barrier
between the refill and the first read of the iteration - one more wait for every
thread in every iteration of the hottest loop of a GEMM or an attention kernel.
Only the refills inside the loop are hidden (marked `REFILL` by the pipeline): the
prologue's copies may land on bytes that tiles used before the loop occupy (shared
memory is merged by lifetime later), and ThreadSync must see them.

T.Parallel loops (marked `AS_ONE` by LowerTileOpsToThreads where they touch shared
memory). A loop's iterations are independent, so it needs no barrier inside; but
ThreadSync, which takes all dynamic shared memory for one buffer, puts one between
unrolled elements that read one tile and write another (the tutorial's layer_norm had
38 barriers, 7 now). ThreadSync is shown each such loop as one statement: a call whose
pointers touch each of the loop's shared tiles whole, read, written or both. So it
still orders the loop against the statements around it, and against another tile
taking its bytes in the shared-memory merge, as before.

The program's own per-thread code where it places its barriers itself
(`tl.disable_thread_storage_sync`, TileLang's key), marked `OWN_BARRIERS`: code
written for one thread (`tx = T.get_thread_binding()`, passes/thread_code.py), and
T.Parallel loops then too. A top-k selector that keeps its candidates in two halves
of one shared tile, reading half `r` and appending to half `r ^ 1` under an `if` on
each thread's own value, needs no barrier inside that `if`; ThreadSync cannot tell the
halves apart, wants one there, and cannot put one where some threads would not reach
it. What such code needs against tile ops, InsertBarriers gives at the tile level;
that the shared-memory planners give a tile's bytes to another tile only across a
barrier, since ThreadSync no longer orders such a reuse,
passes/separate_shared_lifetimes.py sees to.

`hide` replaces each such statement with a call (touching no memory, or a loop's tiles
whole), just before ThreadSync; `restore`, right after it, puts the statement back: a
refill or a loop without its mark, which nothing reads after, the program's code with
its mark, which SeparateSharedLifetimes reads for the merge (DropOwnBarrierMarks
removes it then).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..ir.keys import AS_ONE, OWN_BARRIERS, REFILL
from ..ir.visit import rewrite

PLACEHOLDER = "__tilelab_hidden_from_thread_sync"
HIDDEN = (REFILL, OWN_BARRIERS, AS_ONE)


def _shared_accesses(stmt) -> list:
    """Pointers to the whole of each shared tile `stmt` touches, read (1), written (2) or
    both (3): what ThreadSync is shown of a statement it sees as one."""
    masks, buffers = {}, {}

    def note(buffer, mask):
        if buffer.scope().startswith("shared"):
            key = str(buffer.data)
            buffers.setdefault(key, buffer)
            masks[key] = masks.get(key, 0) | mask

    def visit(node):
        if isinstance(node, tirx.BufferStore):
            note(node.buffer, 2)
        elif isinstance(node, tvm.ir.TensorLoad):
            note(node.source, 1)
        elif isinstance(node, tvm.ir.Call) and node.op.name == "tirx.address_of":
            load = node.args[0]  # an atomic's address: it reads and writes there
            if isinstance(load, tvm.ir.TensorLoad):
                note(load.source, 3)
        return None

    tvm_ffi.structural_walk(stmt, (object, visit), order="pre")
    return [buffers[key].access_ptr(masks[key]) for key in buffers]


def hidden_from_thread_sync():
    """The pair of passes (hide, restore) of one compile; they share the hidden statements."""
    hidden: list = []

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.HideFromThreadSync")
    def hide(func, _mod, _ctx):
        def on_attr(attr):
            if attr.attr_key not in HIDDEN:
                return attr
            hidden.append(attr if attr.attr_key == OWN_BARRIERS else attr.body)
            shown = _shared_accesses(attr.body) if attr.attr_key == AS_ONE else []
            return tirx.Evaluate(tirx.call_extern(
                "void", PLACEHOLDER, tirx.const(len(hidden) - 1, "int32"), *shown))

        return func.with_body(rewrite(func.body, tirx.AttrStmt, on_attr))

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.RestoreAfterThreadSync")
    def restore(func, _mod, _ctx):
        def on_evaluate(stmt):
            call = stmt.value
            if isinstance(call, tvm.ir.Call) and len(call.args) >= 2 and \
                    getattr(call.args[0], "value", None) == PLACEHOLDER:
                return hidden[int(call.args[1].value)]
            return stmt

        return func.with_body(rewrite(func.body, tirx.Evaluate, on_evaluate))

    return hide, restore
