"""Warn when a fragment, a shared tile, an output or a view is read before anything wrote it.

A fragment lives in registers and starts out holding garbage; a shared tile holds
whatever the block's shared memory held before (on a GPU, what another block or kernel
left there). Reading one before `T.clear`, `T.fill`, `T.copy` or a store wrote it is
almost always a bug (a forgotten `T.clear(acc)` before a GEMM loop; a state tile that
a loop writes at the end of each iteration and reads at the start of the next, never
written before the first). A tile handed to an instruction by address (cp.async, a
descriptor) counts as written. A kernel's outputs (`T.empty`,
`out_idx`) are allocated for each call without being initialized, as `torch.empty`
allocates: a `T.atomic_add` into one that nothing wrote first adds to whatever the
memory held - on a GPU often zeros, on the CPU anything. A view of a shared tile in
another type (`T.view(tile, shape, dtype)`) is scratch space: read before it is
written through, it holds the tile's bytes as the GPU laid them out (swizzled, where
the CPU's are not). This pass walks the kernel in program order, remembers what has
been written, and warns at the declaration of anything read too early. It changes
nothing.
"""

from __future__ import annotations

import warnings

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall
from tvm_ffi import WalkResult

from ..errors import TileLabWarning
from ..ir.tile_ops import ADDRESS_CALLS, by_address, fragment_views, shared_views
from ..ir.visit import walk
from ..ops import effects

TILE_SCOPES = ("local.fragment", "shared", "shared.dyn")  # tiles that start out as garbage


def unwritten_fragment_reads(func, outputs=()) -> list:
    """Fragments and shared tiles (and the `outputs`, kernel tensors the kernel allocates,
    and views of shared tiles in another type) read before any write, in program order,
    each buffer once. Shared tiles only where program order is the order of the block's
    work: warp roles that wait at mbarriers for each other's tiles run in the barriers'
    order (a consumer role written first reads what the producer below it writes)."""
    from .role_turns import has_waits

    written: set[str] = set()
    early: dict = {}  # name -> the buffer, in the order first read

    views = fragment_views(func.body)  # a view's writes and reads are its fragment's
    other_types = shared_views(func.body)  # a shared tile's bytes in another type
    scopes = TILE_SCOPES[:1] if has_waits(func) else TILE_SCOPES

    def is_fragment(buffer) -> bool:
        return buffer.scope() in scopes or buffer.name in outputs or \
            buffer.name in other_types

    def name(buffer) -> str:
        return str(views[buffer.name].name) if buffer.name in views else buffer.name

    def read(buffer):
        if is_fragment(buffer) and name(buffer) not in written:
            early.setdefault(buffer.name, buffer)

    def write(buffer):
        written.add(name(buffer))
        if buffer.name in other_types:  # written through a view: its tile holds values too
            written.add(other_types[buffer.name])

    def visit(node):
        if isinstance(node, TilePrimitiveCall):  # what the op's module declares
            done = effects(node)
            for region in done.reads:
                read(region.buffer)
            for region in done.writes:
                write(region.buffer)
        elif isinstance(node, tirx.BufferStore):
            walk(node.value, object, visit)
            write(node.buffer)
            return WalkResult.SKIP
        elif isinstance(node, tvm.ir.Call) and getattr(node.op, "name", "") in ADDRESS_CALLS:
            for buffer in by_address(node):  # handed to an instruction that may write it
                write(buffer)
            return WalkResult.SKIP
        elif isinstance(node, tvm.ir.TensorLoad):
            read(node.source)
        return None

    walk(func.body, object, visit)
    return list(early.values())


def CheckFragmentReads(buffer_locations: dict, outputs: dict | None = None):  # noqa: N802
    """Expects tile ops (before lowering); warns, returns the function unchanged.
    `outputs`: the tensors the kernel allocates and returns (name -> where declared)."""
    outputs = outputs or {}

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.CheckFragmentReads")
    def _pass(func, _mod, _ctx):
        scratch = shared_views(func.body)
        for buffer in unwritten_fragment_reads(func, set(outputs)):
            name = str(buffer.name)
            where = buffer_locations.get(name) or outputs.get(name)
            prefix = f"{where}: " if where else ""
            if name in outputs:
                warnings.warn(f"{prefix}output {name!r} is read before anything writes it; "
                              "an output is allocated uninitialized (as torch.empty), so "
                              "this reads (or T.atomic_add adds to) whatever the memory "
                              "held: write it first, or take it as a parameter the caller "
                              "zeroes", TileLabWarning, stacklevel=2)
            elif name in scratch:
                warnings.warn(f"{prefix}{name!r}, a view of a shared tile in another type, is "
                              "read before anything writes it through the view: what it "
                              "reads are the tile's bytes in the tile's layout, which the GPU "
                              "may swizzle - a view of another type is scratch space, not a "
                              "reinterpretation", TileLabWarning, stacklevel=2)
            elif buffer.scope() in TILE_SCOPES[1:]:
                warnings.warn(f"{prefix}shared tile {name!r} is read before anything writes "
                              "it: shared memory holds whatever was there before (on a GPU, "
                              "what another block or kernel left), so what is read differs "
                              "from run to run - write it first (T.copy, T.fill, T.clear)",
                              TileLabWarning, stacklevel=2)
            else:
                warnings.warn(f"{prefix}fragment {name!r} is read before anything writes it "
                              "(did you forget T.clear or T.fill?)", TileLabWarning,
                              stacklevel=2)
        return func

    return _pass
