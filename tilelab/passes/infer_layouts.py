"""Layout inference: decide where every fragment element lives.

A fragment (`T.alloc_fragment`) is one tile spread over the block's threads;
before any thread-level code can be written, each fragment needs a `Fragment`
layout. Some operations insist on one: a GEMM's accumulator must sit exactly
where the tensor-core instruction leaves its results. Others merely pass
layouts along: a reduction's result lives where its rows lived, a
fragment-to-fragment copy keeps the layout, and an elementwise `T.Parallel`
loop wants all the fragments it touches to agree.

So inference runs by priority:

1. GEMMs fix their accumulators (and register A operands) from the warp policy;
2. reductions, fragment copies and parallel loops propagate known layouts to
   their neighbours until nothing changes;
3. a fragment still free gets a default (block-cyclic, vectorized where the
   size allows; fully replicated when it is too small to share), and step 2
   runs again.

Finally every parallel loop is checked: each fragment it reads or writes must
be held by the thread that runs the iteration. If not, the error names the
buffers and the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall
from tvm_ffi import WalkResult

from ..errors import TileLabTypeError
from ..ir.layout import Fragment, Layout
from ..ir.tile_ops import config, is_buffer, is_load, op_name, regions
from ._util import walk


def warp_grid(policy: str, m: int, n: int, warps: int) -> tuple[int, int]:
    """Split `warps` into a warps_m x warps_n grid over an MxN tile (16x8 tensor-core tiles)."""
    candidates = []
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if m % (16 * wm) or n % (8 * wn):
            continue
        candidates.append((wm, wn))
    if not candidates:
        raise TileLabTypeError(
            f"a {m}x{n} GEMM tile cannot be split among {warps} warps in 16x8 pieces",
            hint="use tile sizes that are multiples of 16 (M) and 8 (N) per warp")
    if policy == "FullRow":
        return max(candidates, key=lambda c: c[0])
    if policy == "FullCol":
        return max(candidates, key=lambda c: c[1])
    return min(candidates, key=lambda c: (abs(m / c[0] - n / c[1]), -c[0]))


@dataclass
class ParallelNest:
    """A nest of T.Parallel loops and the fragment accesses in its body."""

    loop: tirx.For
    loop_vars: list
    extents: list
    accesses: list = field(default_factory=list)  # (buffer, positions)

    def positions(self, indices) -> tuple | None:
        """Map an access's indices to loop-dimension numbers (or None for a constant 0)."""
        out = []
        for index in indices:
            match = [d for d, v in enumerate(self.loop_vars) if index.same_as(v)]
            if match:
                out.append(match[0])
            elif isinstance(index, tirx.IntImm) and int(index.value) == 0:
                out.append(None)
            else:
                return None
        return tuple(out)


@dataclass
class LayoutPlan:
    """The result: a Fragment per fragment buffer and the warp grid of each GEMM."""

    fragments: dict = field(default_factory=dict)  # buffer name -> Fragment
    gemm_warps: dict = field(default_factory=dict)  # the gemm node -> (wm, wn)
    nests: list = field(default_factory=list)
    loop_layouts: dict = field(default_factory=dict)  # the outer T.Parallel loop -> Fragment
    shared_layouts: dict = field(default_factory=dict)  # shared tile name -> swizzled Layout

    def to_json(self) -> dict:
        out = {name: frag.to_json() for name, frag in self.fragments.items()}
        out.update({name: dict(layout.to_json(), scope="shared")
                    for name, layout in self.shared_layouts.items()})
        return out


def _parallel_nest(loop) -> ParallelNest:
    loop_vars, extents, node = [], [], loop
    while isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
        loop_vars.append(node.loop_var)
        extents.append(int(node.extent))
        node = node.body
    return ParallelNest(loop, loop_vars, extents)


def _is_fragment(buffer) -> bool:
    return is_buffer(buffer) and buffer.scope() == "local.fragment"


def _shape(buffer) -> tuple:
    return tuple(int(s) for s in buffer.shape)


def default_fragment(shape, threads: int, dtype_bits: int) -> Fragment:
    """Tiles at least as large as the block are dealt out in 16-byte vectors; smaller ones
    (per-row statistics) are kept whole by every thread."""
    total = 1
    for s in shape:
        total *= s
    if total < threads:
        return Fragment.replicated(shape, threads)
    vector = max(128 // dtype_bits, 1)
    while vector > 1 and (shape[-1] % vector or total < threads * vector):
        vector //= 2
    return Fragment.row_spread(shape, threads, vector)


def _swizzle(plan: LayoutPlan, buffer) -> None:
    """Swizzle a 16-bit shared tile, unless its rows are too narrow to have chunks to
    permute (then `Layout.swizzled` gives plain row-major, and nothing is recorded)."""
    layout = Layout.swizzled(_shape(buffer)[-2:], 16)
    if getattr(layout, "column", None) is not None:
        plan.shared_layouts[buffer.name] = layout


def infer_layouts(body, threads: int, annotated: dict | None = None) -> LayoutPlan:
    plan = LayoutPlan()
    for name, layout in (annotated or {}).items():  # the user's word comes first
        if isinstance(layout, Fragment):
            if layout.threads > threads:
                raise TileLabTypeError(f"the T.Fragment of {name!r} uses {layout.threads} "
                                       f"threads but the kernel has {threads}")
            plan.fragments[name] = layout
        elif getattr(layout, "column", None) is not None:
            plan.shared_layouts[name] = layout
        else:
            raise TileLabTypeError(
                f"the layout annotated for {name!r} is not supported for shared memory yet",
                hint="use a swizzle that permutes 16-byte chunks within rows (Layout.swizzled)")
    fragments: dict = {}  # name -> buffer, in order of allocation
    gemms, reduces, copies = [], [], []

    def collect(node):
        if isinstance(node, tirx.AllocBuffer) and _is_fragment(node.buffer):
            fragments[node.buffer.name] = node.buffer
        elif isinstance(node, TilePrimitiveCall):
            name = op_name(node)
            if name == "gemm":
                gemms.append(node)
            elif name == "reduce":
                reduces.append(node)
            elif name == "copy":
                copies.append(node)
        elif isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
            nest = _parallel_nest(node)
            innermost = node
            for _ in nest.loop_vars[1:]:
                innermost = innermost.body

            def access(n):
                if isinstance(n, tirx.BufferStore) and _is_fragment(n.buffer):
                    nest.accesses.append((n.buffer, n.indices))
                elif is_load(n) and _is_fragment(n.source):
                    nest.accesses.append((n.source, n.indices))

            walk(innermost.body, object, access)
            plan.nests.append(nest)
            return WalkResult.SKIP
        return None

    walk(body, object, collect)
    layouts = plan.fragments
    warps = threads // 32

    def assign(buffer, frag: Fragment, why: str):
        known = layouts.get(buffer.name)
        if known is not None:
            if not known.same_as(frag):
                raise TileLabTypeError(
                    f"fragment {buffer.name!r} needs two different layouts: {known} and {frag} "
                    f"(from {why})",
                    hint="copy it into a second fragment, or change the GEMM warp policy")
            return False
        if tuple(frag.shape) != _shape(buffer):
            return False
        layouts[buffer.name] = frag
        return True

    # Shared tiles written from fragments (an epilogue staging its result) are swizzled
    # too: each thread stores a few elements per row, which row-major would send to
    # one bank from all eight rows a warp writes at once.
    for c in copies:
        src, dst = regions(c)
        if _is_fragment(src.buffer) and dst.buffer.scope().startswith("shared") and \
                tirx_dtype_bits(dst.buffer.dtype) == 16 and dst.buffer.name not in \
                plan.shared_layouts and len(dst.buffer.shape) >= 2:
            _swizzle(plan, dst.buffer)

    # 1. GEMMs fix their accumulators and register operands.
    for g in gemms:
        a, b, c = regions(g)
        cfg = config(g)
        m, n = _shape(c.buffer)[-2:]
        if warps < 1:
            raise TileLabTypeError("T.gemm needs at least one warp (32 threads)")
        wm, wn = warp_grid(cfg["policy"], m, n, warps)
        plan.gemm_warps[g] = (wm, wn)
        if _is_fragment(c.buffer):
            assign(c.buffer, Fragment.accumulator(m, n, wm, wn), "T.gemm accumulator")
        for operand in (a, b):  # tensor cores read 16-byte rows: swizzle against conflicts
            buf = operand.buffer
            if buf.scope().startswith("shared") and tirx_dtype_bits(buf.dtype) == 16 and \
                    buf.name not in plan.shared_layouts:
                _swizzle(plan, buf)
        if _is_fragment(a.buffer):
            if cfg["transpose_A"]:
                raise TileLabTypeError("a register A operand of T.gemm cannot be transposed")
            k = _shape(a.buffer)[-1]
            assign(a.buffer, Fragment.operand_a(m, k, wm, wn), "T.gemm A operand")

    def propagate():
        changed = True
        while changed:
            changed = False
            for r in reduces:
                src, dst = regions(r)
                if src.buffer.name in layouts and _is_fragment(dst.buffer) and \
                        dst.buffer.name not in layouts:
                    dim = int(config(r)["dim"])
                    try:
                        reduced = layouts[src.buffer.name].reduce(dim)
                    except NotImplementedError:
                        raise TileLabTypeError(
                            f"reducing fragment {src.buffer.name!r} over dimension {dim} is "
                            f"not supported for its layout {layouts[src.buffer.name]}",
                            hint="reduce over the last dimension, or annotate the fragment "
                                 "with a layout that keeps the reduced dimension in a "
                                 "thread group") from None
                    changed |= assign(dst.buffer, _reshaped(reduced, _shape(dst.buffer)),
                                      "T.reduce")
            for c in copies:
                src, dst = regions(c)
                if _is_fragment(src.buffer) and _is_fragment(dst.buffer):
                    for x, y in ((src, dst), (dst, src)):
                        if x.buffer.name in layouts and y.buffer.name not in layouts:
                            changed |= assign(y.buffer, layouts[x.buffer.name], "T.copy")
            for nest in plan.nests:
                changed |= _propagate_nest(nest, layouts, assign, plan)

    propagate()
    for name, buffer in fragments.items():
        if name not in layouts:
            bits = tirx_dtype_bits(buffer.dtype)
            layouts[name] = default_fragment(_shape(buffer), threads, bits)
            propagate()
    for nest in plan.nests:
        _check_nest(nest, layouts, plan, threads)
    return plan


def tirx_dtype_bits(dtype) -> int:
    from ..language.dtypes import as_dtype

    return as_dtype(str(dtype)).bits


def _reshaped(frag: Fragment, shape: tuple) -> Fragment:
    if tuple(frag.shape) == tuple(shape):
        return frag
    squeezed = tuple(s for s in shape if s != 1) or (1,)
    if (tuple(s for s in frag.shape if s != 1) or (1,)) == squeezed and \
            frag.recipe.get("kind") == "replicated":
        return Fragment.replicated(shape, frag.threads)
    return frag


def _nest_layout(nest: ParallelNest, layouts: dict, plan: LayoutPlan):
    known = plan.loop_layouts.get(nest.loop)
    if known is not None:
        return known
    for buffer, indices in nest.accesses:
        pos = nest.positions(indices)
        if pos is None or buffer.name not in layouts:
            continue
        if _full(pos, nest) and tuple(layouts[buffer.name].shape) == tuple(nest.extents):
            plan.loop_layouts[nest.loop] = layouts[buffer.name]
            return layouts[buffer.name]
    return None


def _full(pos, nest) -> bool:
    """Does an access index every loop dimension in order (constants on unit dims)?"""
    if len(pos) != len(nest.extents):
        return False
    return all(p == d or (p is None and nest.extents[d] == 1) for d, p in enumerate(pos))


def _propagate_nest(nest, layouts, assign, plan) -> bool:
    layout = _nest_layout(nest, layouts, plan)
    if layout is None:
        return False
    changed = False
    for buffer, indices in nest.accesses:
        if buffer.name in layouts:
            continue
        pos = nest.positions(indices)
        if pos is None:
            continue
        if _full(pos, nest):
            changed |= assign(buffer, layout, "a T.Parallel loop")
            continue
        used = {p for p in pos if p is not None}
        missing = [d for d in range(len(nest.extents)) if d not in used and nest.extents[d] > 1]
        if len(missing) == 1:
            try:
                reduced = layout.reduce(missing[0])
            except NotImplementedError:
                continue
            changed |= assign(buffer, _reshaped(reduced, _shape(buffer)), "a T.Parallel loop")
    return changed


def _check_nest(nest, layouts, plan, threads):
    """Every fragment element a parallel iteration touches must live on its thread."""
    layout = _nest_layout(nest, layouts, plan)
    if layout is None:
        if any(True for _ in nest.accesses):
            layout = default_fragment(tuple(nest.extents), threads, 32)
            plan.loop_layouts[nest.loop] = layout
        else:
            return
    table = thread_elements(layout)
    for buffer, indices in nest.accesses:
        pos = nest.positions(indices)
        if pos is None:
            raise TileLabTypeError(
                f"fragment {buffer.name!r} is indexed with an expression inside T.Parallel; "
                "index fragments with the loop variables themselves")
        owners = owner_table(layouts[buffer.name])
        for t, elements in enumerate(table):
            for element in elements:
                if element is None:  # a padding slot of this thread
                    continue
                wanted = tuple(0 if p is None else element[p] for p in pos)
                if t not in owners.get(wanted, {}):
                    raise TileLabTypeError(
                        f"in a T.Parallel loop over {tuple(nest.extents)}, thread {t} works on "
                        f"element {element} but fragment {buffer.name!r} keeps element "
                        f"{wanted} on another thread",
                        hint="make the fragments of one loop share a layout, e.g. by copying "
                             "through shared memory")


_TABLE_CACHE: dict = {}
_KEEP_ALIVE: list = []


def _key(kind: str, frag: Fragment):
    """Fragments from a recipe are rebuilt identically; a custom one is only itself."""
    if frag.recipe.get("kind") == "custom":
        return (kind, "custom", id(frag.forward))
    return (kind, repr(frag.recipe), frag.shape)


def thread_elements(frag: Fragment) -> list[list[tuple]]:
    """For each thread, the index held in each of its local registers."""
    key = _key("elements", frag)
    if key not in _TABLE_CACHE:
        table = [[None] * frag.local_size for _ in range(frag.threads)]
        thread, local = frag.tables()
        import numpy as np

        for flat in range(thread[0].size):
            idx = np.unravel_index(flat, frag.shape)
            for r in range(frag.replicate):
                t, loc = int(thread[(r, *idx)]), int(local[(r, *idx)])
                table[t][loc] = tuple(int(i) for i in idx)
        _TABLE_CACHE[key] = table
        _KEEP_ALIVE.append(frag.forward)  # so that id() keys stay unique
    return _TABLE_CACHE[key]


def owner_table(frag: Fragment) -> dict:
    """element index -> {thread: local register} over all copies."""
    key = _key("owners", frag)
    if key not in _TABLE_CACHE:
        owners: dict = {}
        for t, elements in enumerate(thread_elements(frag)):
            for loc, idx in enumerate(elements):
                if idx is not None:
                    owners.setdefault(idx, {})[t] = loc
        _TABLE_CACHE[key] = owners
    return _TABLE_CACHE[key]

