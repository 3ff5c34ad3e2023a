"""Store shared tiles to global memory with TMA, on Hopper.

A tile leaves shared memory for a global tensor by `T.copy(c_shared, C[...])` - the
program's own, or the one passes/stage_stores.py writes for a GEMM's sums. Copied by
the threads, every thread loads its 16-byte pieces from shared memory and stores them
to global memory: 16 loads and 16 stores a thread for a 128x128 half tile, issued
while the tensor cores could be busy. Hopper's Tensor Memory Accelerator does it on
one thread's request, the way it loads the pipelines' tiles (passes/pipeline_loops.py)
with the arrows reversed: a descriptor of the global tensor (encoded on the host at
launch) and a box of it; TMA reads the box from shared memory and writes the tensor,
dropping what falls outside it, so edge tiles need no guard.

TMA reads shared memory laid out as warpgroup MMA reads it: panels of 128-byte rows
(64, 32), the 16-byte chunks of a row turned by the row (`Layout.wgmma_panels`). A tile
that only the threads write (from a fragment, say) may take that layout, which spreads
a warp's stores over the banks as well as the layout they would otherwise get; each
such store is given a descriptor here (`tma`, `tma_spec`), and T.copy's layout rule
gives the tile its panels. The copy then lowers (ops/copy.py, tma_store) to

    every thread:  fence.proxy.async     its stores seen by the async proxy
                   barrier               the whole tile written
    thread 0:      wait for its earlier stores' writes; a box per panel; commit

and the block goes on while TMA reads the tile. The copy's barrier is its own, and
passes/insert_barriers.py has every thread wait for TMA's reads (only thread 0 has any)
just before the barrier ahead of the tile's next write - in a persistent GEMM, after the
next tile's K loop - and at the kernel's end. Only stores that cannot race with
other memory accesses are made so: a tile of the program's (not a T.gemm operand, not
laid out by the program, not seen through a view) into a tensor the kernel touches in no
other way, from code the whole block runs (not a T.ws role's, not thread code).
`T.copy(..., disable_tma=True)` keeps the threads' copy.

Where it pays is decided by where the tile is written next. In a walk over tiles
(T.Persistent: a loop whose body runs a pipelined K loop and then stores), the next write
is the next tile's epilogue, a whole K loop later: TMA reads the tile while the tensor cores
start on the next tile, and the threads' part of the store is one barrier. So stores in such
a loop go by TMA by default. On an H100, paired with cuBLAS over 12-16 rounds, the persistent
GEMM at 4096^3 went from 0.980-0.981 of cuBLAS with the threads' stores to 0.986-0.988
(bench/results/persistent_4096_variants_h100.json); with the wait for TMA's reads right
after the store, as before, it was 0.973-0.980. Elsewhere a block's tile is stored once,
at its end, and the block waits there for TMA's reads: paired on an H100 with the threads'
stores, the suite's GEMMs ran 0.994-1.006 of their time and causal FlashAttention 1.04
(bench/results/tma_stores_ab_h100.json) - the threads' stores are already whole 16-byte
rows. `tl.enable_tma_stores` asks for TMA stores everywhere (False: nowhere);
`tl.disable_tma_lower` turns them off with TMA's loads.
"""

from __future__ import annotations

import json

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall
from tvm_ffi import WalkResult

from ..ir.dtypes import itemsize
from ..ir.keys import KERNEL, PER_THREAD, PIPELINED
from ..ir.tile_ops import (
    by_address,
    is_buffer,
    is_load,
    is_tile_call,
    op_name,
    regions,
    shared_views,
)
from ..ir.visit import keep_user_errors, rewrite, rewrite_pre, walk
from .pipeline_loops import bind_tensor_maps, tensor_map_type, tma_box
from .tensor_views import tensor_views
from .warp_roles import has_roles

SWIZZLES = (128, 64, 32)  # bytes of a panel's row, widest first


def _block_copies(kernel) -> list:
    """The T.copy statements the whole block runs: not in T.Parallel bodies or thread code."""
    found = []

    def visit(node):
        if isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL or \
                isinstance(node, tirx.AttrStmt) and node.attr_key == PER_THREAD:
            return WalkResult.SKIP
        if is_tile_call(node, "copy"):
            found.append(node)
        return None

    walk(kernel, object, visit)
    return found


def _touches(kernel) -> dict:
    """How many statements or expressions of the kernel touch each buffer (tile ops, loads,
    stores, and calls that take an address: atomics, the program's own externs)."""
    counts: dict = {}

    def count(names):
        for name in names:
            counts[name] = counts.get(name, 0) + 1

    def visit(node):
        if isinstance(node, TilePrimitiveCall):
            count({str(r.buffer.name) for r in regions(node)})
        elif isinstance(node, tirx.BufferStore):
            count({str(node.buffer.name)})
        elif is_load(node) and is_buffer(node.source):
            count({str(node.source.name)})

    walk(kernel, (TilePrimitiveCall, tirx.BufferStore, tvm.ir.TensorLoad), visit)
    count(str(b.name) for b in by_address(kernel))
    return counts


def _panels(rows: int, cols: int, dtype: str) -> int | None:
    """The widest swizzle whose panels the tile splits into (None: none)."""
    row_bytes = cols * itemsize(dtype)
    return next((s for s in SWIZZLES if row_bytes % s == 0 and rows % 8 == 0), None)


class _Store:
    """Why a copy from shared to global memory cannot be TMA's, or its descriptor's spec."""

    def __init__(self, kernel, annotated: dict, views: dict):
        self.views = views
        self.touches = _touches(kernel)
        self.operands = set()  # tiles a T.gemm reads: they keep the gemm's layout
        walk(kernel, TilePrimitiveCall, lambda c: self.operands.update(
            str(r.buffer.name) for r in regions(c)[:2]) if op_name(c) == "gemm" else None)
        self.annotated = set(annotated)
        viewed = shared_views(kernel)
        self.viewed = set(viewed) | set(viewed.values())

    def base(self, tensor: str) -> str:
        """The tensor whose memory `tensor` is (itself, or the one it is a view of)."""
        return self.views.get(tensor) or tensor

    def spec(self, call, copies: dict) -> dict | str:
        tile, out = regions(call)
        name, tensor = str(tile.buffer.name), str(out.buffer.name)
        if call.config.get("disable_tma"):
            return "T.copy(..., disable_tma=True)"
        if name in self.operands:
            return f"{name} is a T.gemm operand: it keeps the layout the tensor cores read"
        if name in self.annotated or name in self.viewed:
            return f"{name} has a layout of the program's (T.annotate_layout) or a view"
        if len(tile.buffer.shape) != 2:
            return f"{name} is not a 2-D tile"
        base = self.base(tensor)
        others = sum(n for t, n in self.touches.items()
                     if self.base(t) == base) - copies.get(base, 0)
        if others:
            return f"the kernel also reads or writes {base} otherwise: TMA's writes land " \
                "asynchronously, after the threads' accesses"
        rows, cols = (int(s) for s in tile.buffer.shape)
        swizzle = _panels(rows, cols, tile.dtype)
        if swizzle is None:
            return f"a {rows}x{cols} tile splits into no panels of 32-byte rows"
        box = tma_box(tile, out, swizzle, self.views)
        return {**box, "store": True} if isinstance(box, dict) else box


def _in_walks(kernel) -> list:
    """The tile ops inside loops over tiles: serial loops whose body also runs a pipelined
    loop (PipelineLoops has lowered it), so that a tile stored in one iteration is written
    again only after that loop in the next."""
    found = []

    def visit(node):
        if isinstance(node, tirx.For) and node.kind == tirx.ForKind.SERIAL and \
                PIPELINED not in node.annotations:
            inner = []
            walk(node.body, tirx.For, lambda f: inner.append(f) if PIPELINED in f.annotations
                 else None)
            if inner:
                walk(node.body, TilePrimitiveCall, found.append)
                return WalkResult.SKIP
        return None

    walk(kernel, tirx.For, visit)
    return found


NOT_IN_A_WALK = "stored once, at the block's end, where the block would wait for TMA's " \
    "reads at once: by default only stores in a walk over tiles (T.Persistent) are TMA's; " \
    "tl.enable_tma_stores asks for them everywhere"


def tma_stores(kernel, annotated: dict, views: dict, maps: dict, everywhere: bool = False):
    """`kernel` with its copies of whole shared tiles into global tensors given TMA
    descriptors (`maps`: spec JSON -> descriptor variable, shared by the function's
    kernels) - those in walks over tiles, or `everywhere`; a copy that cannot be TMA's
    says why (`not_tma`, shown by --source)."""
    candidates = [c for c in _block_copies(kernel)
                  if regions(c)[0].scope.startswith("shared") and regions(c)[1].scope == "global"
                  and not c.config.get("by_barrier")]
    if not candidates or has_roles(kernel):
        return kernel
    walked = [] if everywhere else _in_walks(kernel)
    store = _Store(kernel, annotated, views)
    copies: dict = {}  # tensor -> candidate copies that store into it
    for call in candidates:
        base = store.base(str(regions(call)[1].buffer.name))
        copies[base] = copies.get(base, 0) + 1
    decided = []  # (copy, what its config gains)
    for call in candidates:
        wanted = everywhere or any(call.same_as(w) for w in walked)
        spec = store.spec(call, copies) if wanted else NOT_IN_A_WALK
        if isinstance(spec, dict):
            key = json.dumps(spec, sort_keys=True)
            if key not in maps:
                taken = {str(v.name) for v in maps.values()}
                name = f"{spec.get('view', spec['tensor'])}_store_tma"
                while name in taken:
                    name += "_"
                maps[key] = tirx.Var(name, tensor_map_type())
            decided.append((call, {"tma": maps[key], "tma_spec": key}))
        else:
            decided.append((call, {"not_tma": spec}))

    def on_copy(call):
        for candidate, extra in decided:
            if call.same_as(candidate):
                return call.replace(config={**call.config, **extra})
        return call

    return rewrite(kernel, TilePrimitiveCall, on_copy)


def TmaStores(annotated: dict | None = None, everywhere: bool = False):  # noqa: N802
    """Expects tile ops after StageStores (sm_90a); gives copies of whole shared tiles into
    global tensors TMA descriptors (`annotated`: the program's T.annotate_layout layouts) -
    in walks over tiles, or `everywhere`."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.TmaStores")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        views = tensor_views(func.body)
        maps: dict = {}

        def on_kernel(loop):
            if KERNEL not in loop.annotations:
                return loop
            return tma_stores(loop, annotated or {}, views, maps, everywhere)

        body = rewrite_pre(func.body, tirx.For, on_kernel)
        return func.with_body(bind_tensor_maps(body, list(maps.values())))

    return _pass
