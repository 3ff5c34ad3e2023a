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
   runs again. The largest free fragment goes first: tiles decide, and the
   row and column vectors reduced from them follow (a vector given a default
   first could not be the result of reducing a tile).

Finally every parallel loop is checked: each fragment it reads or writes must
be held by the thread that runs the iteration. If not, the error names the
buffers and the loop.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall
from tvm_ffi import WalkResult

from ..errors import LayoutConflict, RoleConflict, TileLabTypeError
from ..ir.dtypes import as_dtype
from ..ir.expr import to_expr
from ..ir.keys import KERNEL, LAYOUT_PLAN, PER_THREAD, block_threads, fact, role_threads
from ..ir.layout import (
    Fragment,
    kept_alike,
    kept_whole_alike,
    owner_table,
    reshaped,
    thread_elements,
)
from ..ir.tile_ops import _const_int, fragment_view_buffers, is_buffer, is_load, regions
from ..ir.visit import keep_user_errors, rewrite_pre, uses, walk
from ..ops import at_user_line, lookup
from ..ops._lowering import simplify

KEPT_WHOLE_LIMIT = 256  # elements of a fragment every thread may keep whole (registers)


@dataclass
class ParallelNest:
    """A nest of T.Parallel loops and the fragment accesses in its body."""

    loop: tirx.For
    loop_vars: list
    extents: list
    accesses: list = field(default_factory=list)  # (buffer, indices, written)
    # per fragment store: (buffer, indices, the loop variables its value reads, whether
    # its value reads the buffer it stores to); and the variables any `if` inside tests
    stores: list = field(default_factory=list)
    tested: set = field(default_factory=set)
    _known: dict = field(default_factory=dict)  # index -> what _shifted found (it simplifies)

    def positions(self, indices) -> tuple | None:
        """Map an access's indices to loop-dimension numbers (or None for a constant 0)."""
        shifts = self.shifts(indices)
        return shifts[0] if shifts is not None and \
            all(is_zero_offset(o) for o in shifts[1]) else None

    def shifts(self, indices) -> tuple | None:
        """(positions, offsets) of an access whose every index is a loop variable plus an
        offset that is the same in every iteration of the nest (`f[i + 16, j]`, or
        `f[i + s * 16, j]` in a loop over s around it) or the constant 0 (position None).
        An offset is an int where it is a constant (0 for the variable itself), else an
        expression; None for any other index."""
        out, offsets = [], []
        for index in indices:
            if isinstance(index, tirx.IntImm) and int(index.value) == 0:
                out.append(None)
                offsets.append(0)
                continue
            if index not in self._known:
                self._known[index] = self._shifted(index)
            found = self._known[index]
            if found is None:
                return None
            out.append(found[0])
            offsets.append(found[1])
        return tuple(out), tuple(offsets)

    def _shifted(self, index):
        """(loop dimension, offset) of an index that is one of the nest's variables plus an
        expression of neither its variables nor memory (`i + 16`, `i + s * 16`, `i - 1`)."""
        for d, var in enumerate(self.loop_vars):
            if index.same_as(var):
                return d, 0
            if not uses(index, var):
                continue
            offset = simplify(index - var)
            if self._invariant(offset):
                return d, int(offset.value) if isinstance(offset, tirx.IntImm) else offset
            return None
        return None

    def _invariant(self, expr) -> bool:
        if isinstance(expr, int):
            return True
        found = []
        walk(expr, object, lambda n: found.append(n) if is_load(n) or any(
            n.same_as(v) for v in self.loop_vars) else None)
        return not found


@dataclass
class LayoutPlan:
    """The result: a Fragment per fragment buffer and the warp grid of each GEMM."""

    fragments: dict = field(default_factory=dict)  # buffer name -> Fragment
    gemm_warps: dict = field(default_factory=dict)  # the gemm node -> (wm, wn)
    nests: list = field(default_factory=list)
    loop_layouts: dict = field(default_factory=dict)  # the outer T.Parallel loop -> Fragment
    # a loop whose layout is its Fragment shifted: iteration x runs where element x + offsets
    # lives (the outer T.Parallel loop -> offsets per loop dimension; see _nest_layout)
    loop_shifts: dict = field(default_factory=dict)
    shared_layouts: dict = field(default_factory=dict)  # shared tile name -> swizzled Layout
    wgmma: dict = field(default_factory=dict)  # the gemm node -> its WgmmaPlan (sm_90a)
    # a copy from a fragment to shared memory -> the registers stmatrix stores (sm_90)
    stmatrix: dict = field(default_factory=dict)
    instructions: list = field(default_factory=list)  # per gemm: the instruction and why

    def follow(self, planned, rewritten) -> None:
        """The plans made for the op `planned` hold for `rewritten`, the same op with its
        regions' indices rewritten (a register read as the register array it became)."""
        if not rewritten.same_as(planned):
            for table in (self.gemm_warps, self.wgmma, self.stmatrix):
                if planned in table:
                    table[rewritten] = table[planned]

    def to_json(self) -> dict:
        out = {name: frag.to_json() for name, frag in self.fragments.items()}
        out.update({name: dict(layout.to_json(), scope="shared")
                    for name, layout in self.shared_layouts.items()})
        return out


def parallel_nest(loop) -> ParallelNest:
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


NO_WGMMA = "no sm_90a target"


class LayoutContext:
    """What an op's layout rule sees: the plan so far and how to add to it."""

    def __init__(self, plan: LayoutPlan, threads: int, wgmma_off: str | None = NO_WGMMA,
                 stmatrix: bool = False):
        self.plan = plan
        self.layouts = plan.fragments  # fragment name -> Fragment
        self.threads = threads
        self.warps = threads // 32
        self.wgmma_off = wgmma_off  # why warpgroup MMA is not available; None where it is
        self.stmatrix = stmatrix  # the target stores fragments with stmatrix (sm_90)
        self.reshaped = reshaped

    @contextlib.contextmanager
    def run_by(self, threads: int):
        """While an op of a T.ws role is handled: the role's threads stand for the block's."""
        saved = self.threads
        self.threads, self.warps = threads, threads // 32
        try:
            yield
        finally:
            self.threads, self.warps = saved, saved // 32

    def assign(self, buffer, frag: Fragment, why: str) -> bool:
        """Give `buffer` the layout `frag`; False if it had it already (or cannot take it)."""
        known = self.layouts.get(buffer.name)
        if known is not None:
            if not known.same_as(frag):
                raise LayoutConflict(
                    buffer.name, f"fragment {buffer.name!r} needs two different layouts: "
                    f"{known} and {frag} (from {why})",
                    hint="copy it into a second fragment, or change the GEMM warp policy")
            return False
        if tuple(frag.shape) != _shape(buffer):
            return False
        self.layouts[buffer.name] = frag
        return True


def warn_unapplied_layouts(annotated: dict, locations: dict) -> None:
    """The CUDA backend applies an annotated T.Fragment (a fragment's layout) and a shared
    tile's swizzle of 16-byte chunks. Any other T.Layout only orders a tile's elements in
    memory, and every access to the tile goes through the compiler, so no result depends on
    it (the CPU backend ignores them all): it is left out, with a warning at its tile."""
    import warnings

    from ..errors import TileLabWarning

    for name, layout in annotated.items():
        if isinstance(layout, Fragment) or getattr(layout, "place", None) is not None:
            continue
        where = locations.get(name)
        warnings.warn(f"{str(where) + ': ' if where else ''}the layout annotated for {name!r} "
                      "is not applied on the GPU (tilelab applies swizzles that permute "
                      "16-byte chunks within rows, Layout.swizzled); it keeps the row-major "
                      "order, which gives the same results", TileLabWarning, stacklevel=2)


def infer_layouts(body, threads: int, annotated: dict | None = None, func=None,
                  wgmma_off: str | None = NO_WGMMA, stmatrix: bool = False) -> LayoutPlan:
    """The LayoutPlan of one kernel body; `func` (the PrimFunc) lets errors name the user's
    line; `wgmma_off` says why T.gemm may not use warpgroup MMA (None: it may); `stmatrix`:
    copies from fragments to shared tiles may use it (sm_90)."""
    plan = LayoutPlan()
    for name, layout in (annotated or {}).items():  # the user's word comes first
        if isinstance(layout, Fragment):
            if layout.threads > threads:
                raise TileLabTypeError(f"the T.Fragment of {name!r} uses {layout.threads} "
                                       f"threads but the kernel has {threads}")
            plan.fragments[name] = layout
        elif getattr(layout, "place", None) is not None:  # a swizzle of a shared tile
            plan.shared_layouts[name] = layout
        # any other T.Layout is not applied (see warn_unapplied_layouts)
    fragments: dict = {}  # name -> buffer, in order of allocation
    calls: list = []  # (tile-op node, its TileOp, its threads), in program order
    roles = _Roles(threads, func)  # which threads run each op and keep each fragment

    def collect_in(role):
        def collect(node):
            if role_threads(node):
                walk(node.body, object, collect_in(role_threads(node)))
                return WalkResult.SKIP
            if isinstance(node, tirx.AllocBuffer) and _is_fragment(node.buffer):
                fragments[node.buffer.name] = node.buffer
            elif isinstance(node, TilePrimitiveCall):
                with at_user_line(node, func):
                    calls.append((node, lookup(node), role))
                    for region in regions(node):
                        roles.use(region.buffer, role)
            elif isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
                nest = parallel_nest(node)
                innermost = node
                for _ in nest.loop_vars[1:]:
                    innermost = innermost.body

                def access(n):
                    if isinstance(n, tirx.BufferStore) and _is_fragment(n.buffer):
                        nest.accesses.append((n.buffer, n.indices, True))
                        nest.stores.append((n.buffer, n.indices, _vars_in(n.value),
                                            _reads(n.value, n.buffer)))
                    elif is_load(n) and _is_fragment(n.source):
                        nest.accesses.append((n.source, n.indices, False))
                    elif isinstance(n, tirx.IfThenElse):
                        nest.tested |= _vars_in(n.condition)

                walk(innermost.body, (tirx.BufferStore, tvm.ir.TensorLoad, tirx.IfThenElse),
                     access)
                for buffer, _, _ in nest.accesses:
                    roles.use(buffer, role)
                roles.of_nest[nest.loop] = role
                plan.nests.append(nest)
                return WalkResult.SKIP
            return None

        return collect

    walk(body, object, collect_in(None))
    ctx = LayoutContext(plan, threads, wgmma_off, stmatrix)
    views = fragment_view_buffers(body)  # T.reshape: each layout is the other's

    # 1. ops fix the layouts they insist on (GEMM accumulators, swizzled tiles), each
    # for the threads that run it (a T.ws role's, or the block's).
    for call, op, role in calls:
        if op.fix_layouts is not None:
            with at_user_line(call, func), ctx.run_by(roles.threads(role)):
                op.fix_layouts(call, ctx)

    def propagate():
        changed = True
        while changed:
            changed = False
            for call, op, role in calls:
                if op.propagate_layouts is not None:
                    with at_user_line(call, func), ctx.run_by(roles.threads(role)):
                        changed |= op.propagate_layouts(call, ctx)
            for nest in plan.nests:
                changed |= _propagate_nest(nest, ctx.layouts, ctx.assign, plan)
            for view, base in views:
                changed |= _propagate_view(view, base, ctx)

    # 2. known layouts spread to neighbours; 3. a fragment a T.Parallel loop reads at a
    # computed index (`f[n - 1 - i]`, `f[k]` of an outer loop) is kept whole by every
    # thread, so that any element is at hand (small tiles); 4. the others get a default.
    propagate()
    for nest in plan.nests:
        for buffer, indices, written in nest.accesses:
            if buffer.name not in ctx.layouts and not written and \
                    nest.positions(indices) is None and \
                    math.prod(_shape(buffer)) <= KEPT_WHOLE_LIMIT:
                ctx.layouts[buffer.name] = Fragment.replicated(
                    _shape(buffer), roles.threads(roles.of_buffer.get(buffer.name)))
                propagate()
    by_size = sorted(fragments.items(), key=lambda item: -math.prod(_shape(item[1])))
    for name, buffer in by_size:  # (a view has its fragment's, once that has one)
        if name not in ctx.layouts:
            bits = as_dtype(str(buffer.dtype)).bits
            ctx.layouts[name] = default_fragment(
                _shape(buffer), roles.threads(roles.of_buffer.get(name)), bits)
            propagate()
    for nest in plan.nests:
        _check_nest(nest, ctx.layouts, plan, roles.threads(roles.of_nest[nest.loop]))
    for buffer, indices, role in _plain_reads(body):
        if buffer.name in ctx.layouts:
            register_read_by_all(buffer, indices, ctx.layouts[buffer.name], roles.threads(role))
    # 5. with layouts final, ops say what they will emit (plan.instructions, for the Trace)
    for call, op, role in calls:
        if op.describe is not None:
            with at_user_line(call, func), ctx.run_by(roles.threads(role)):
                op.describe(call, ctx)
    return plan


def _plain_reads(body) -> list:
    """(fragment, indices, role) of each fragment element that a statement outside T.Parallel
    loops, tile ops and per-thread code reads: every thread of the block (or of the T.ws
    role) runs such a statement, so each needs the element in a register of its own."""
    found = []

    def visit_in(role):
        def visit(node):
            if role_threads(node):
                walk(node.body, object, visit_in(role_threads(node)))
                return WalkResult.SKIP
            if isinstance(node, TilePrimitiveCall) or (
                    isinstance(node, tirx.AttrStmt) and node.attr_key == PER_THREAD) or (
                    isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL):
                return WalkResult.SKIP
            if is_load(node) and _is_fragment(node.source):
                found.append((node.source, node.indices, role))
            return None

        return visit

    walk(body, object, visit_in(None))
    return found


def register_read_by_all(buffer, indices, layout, threads: int):
    """The register in which each of `threads` keeps element `indices` of fragment `buffer`,
    which a statement outside T.Parallel reads on every thread (_plain_reads; an expression
    where the index is computed); a LayoutConflict where they do not all keep it alike -
    spill_fragments then moves the fragment to shared memory."""
    element = tuple(_const_int(i) for i in indices)
    if None in element:
        if not kept_whole_alike(layout):
            raise LayoutConflict(
                buffer.name, f"fragment {buffer.name!r} is indexed with a variable outside a "
                "T.Parallel loop, and its elements are spread over the block's threads",
                hint="loop over it with T.Parallel, or keep it in shared memory")
        return layout.local_of(*indices)
    owners = owner_table(layout).get(element, {})
    if not kept_alike(owners, threads):
        raise LayoutConflict(
            buffer.name, f"element {element} of fragment {buffer.name!r} is used by the whole "
            f"block but lives on {len(owners)} of {threads} threads",
            hint="read it inside a T.Parallel loop, or reduce into a smaller fragment")
    return next(iter(owners.values()))


class _Roles:
    """The threads each fragment lives on: a fragment used inside `with T.ws(...)` is
    spread over that role's threads (its layout numbers them from 0), so it may not be
    used by other threads too."""

    def __init__(self, block_threads: int, func):
        self.block_threads = block_threads
        self.func = func
        self.of_buffer: dict = {}  # fragment name -> role ((first, end), or None: the block)
        self.of_nest: dict = {}  # T.Parallel loop -> role

    def threads(self, role) -> int:
        return self.block_threads if role is None else role[1] - role[0]

    def use(self, buffer, role) -> None:
        if not _is_fragment(buffer):
            return
        known = self.of_buffer.setdefault(buffer.name, role)
        if known != role:
            names = [f"T.ws threads {r[0]}..{r[1] - 1}" if r else "the whole block"
                     for r in (known, role)]
            raise RoleConflict(
                f"fragment {buffer.name!r} is used by {names[0]} and by {names[1]}: a "
                "fragment lives in the registers of the threads of one role",
                hint="copy it through a shared tile to hand it from one role to another")


def _propagate_view(view, base, ctx) -> bool:
    """A view and its fragment name the same registers: each layout is the other's, seen
    with its own shape."""
    if base.name in ctx.layouts:
        layout = ctx.layouts[base.name].viewed_as(_shape(view))
        if view.name in ctx.layouts and not ctx.layouts[view.name].same_as(layout):
            raise LayoutConflict(
                view.name, f"fragment {view.name!r}, a view of {base.name!r}, needs the "
                f"layout {ctx.layouts[view.name]}, which is not {base.name!r}'s "
                f"{ctx.layouts[base.name]} seen with shape {_shape(view)}",
                hint="use the view and the fragment in ways that agree, or copy the "
                     "fragment into one of the view's shape", spillable=False)
        return ctx.assign(view, layout, f"T.reshape of {base.name!r}")
    if view.name in ctx.layouts:
        return ctx.assign(base, ctx.layouts[view.name].viewed_as(_shape(base)),
                          f"its view {view.name!r}")
    return False


def _nest_layout(nest: ParallelNest, layouts: dict, plan: LayoutPlan):
    """The loop's layout: that of a fragment of its shape that it indexes by its variables
    in order. Failing that, where every fragment access indexes them in order and one
    reads a fragment of its shape at the variables plus offsets (`f[i + s * 16, j]`, how
    a tile is stored in parts), that fragment's layout shifted: iteration x runs where
    element x + offsets lives, in the register that holds it (plan.loop_shifts)."""
    known = plan.loop_layouts.get(nest.loop)
    if known is not None:
        return known
    fits = []  # (shifted?, offsets, layout) of each such fragment access
    for buffer, indices, written in nest.accesses:
        shifts = nest.shifts(indices)
        if shifts is None or buffer.name not in layouts or \
                tuple(layouts[buffer.name].shape) != tuple(nest.extents):
            continue
        shifted = any(not is_zero_offset(o) for o in shifts[1])
        if _full(shifts[0], nest) and not (written and shifted):
            fits.append((shifted, shifts[1], layouts[buffer.name]))
    if not fits:
        return None
    shifted, offsets, layout = min(fits, key=lambda fit: fit[0])  # unshifted first
    if shifted:
        in_order = [nest.shifts(indices) for _, indices, _ in nest.accesses]
        if not all(s is not None and _full(s[0], nest) for s in in_order):
            return None
        plan.loop_shifts[nest.loop] = offsets
    plan.loop_layouts[nest.loop] = layout
    return layout


def is_zero_offset(offset) -> bool:
    return isinstance(offset, int) and offset == 0


def relative_shifts(nest: ParallelNest, plan: LayoutPlan, indices):
    """(positions, offsets) of a fragment access relative to its loop's layout: it reaches
    element y + offsets where the loop's layout places the iteration at y (offsets ints,
    all 0 for an access that lines up with the loop). None for an index computed
    otherwise: not a loop variable plus an offset, or an offset not a constant apart from
    the loop's shift."""
    shifts = nest.shifts(indices)
    if shifts is None:
        return None
    loop = plan.loop_shifts.get(nest.loop, (0,) * len(nest.loop_vars))
    offsets = []
    for p, offset in zip(*shifts):
        apart = offset if p is None else _difference(offset, loop[p])
        if apart is None:
            return None
        offsets.append(apart)
    return shifts[0], tuple(offsets)


def _difference(a, b) -> int | None:
    """a - b of two offsets, where it is a constant."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    apart = simplify(to_expr(a, "int32") - to_expr(b, "int32"))
    return int(apart.value) if isinstance(apart, tirx.IntImm) else None


def shifter(pos, offsets, shape):
    """For an access of `pos` and `offsets` (relative_shifts), the function from an element
    of the loop's layout to the element of the fragment it reaches; a shifted index wraps
    around the fragment as the shifted layout does - an iteration that would read past the
    end is one that an `if` keeps from reading, or one that the CPU reports. The common
    access, the loop's first dimensions in order and unshifted, reaches the element itself,
    or its first indices (the tables are walked element by element, tens of thousands of
    times a kernel)."""
    rank = len(shape)
    if tuple(pos) == tuple(range(rank)) and not any(offsets):
        return lambda element: element if len(element) == rank else element[:rank]
    return lambda element: tuple(0 if p is None else (element[p] + c) % shape[k] if c
                                 else element[p] for k, (p, c) in enumerate(zip(pos, offsets)))


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
    for buffer, indices, _ in nest.accesses:
        if buffer.name in layouts:
            continue
        shifts = relative_shifts(nest, plan, indices)
        if shifts is None:
            continue
        pos, offsets = shifts
        if _full(pos, nest):  # placed where the iteration that reaches it runs
            changed |= assign(buffer, layout.shifted([-c for c in offsets]) if any(offsets)
                              else layout, "a T.Parallel loop")
            continue
        if any(offsets) or nest.loop in plan.loop_shifts:
            continue
        used = {p for p in pos if p is not None}
        missing = [d for d in range(len(nest.extents)) if d not in used and nest.extents[d] > 1]
        if len(missing) == 1:
            try:
                reduced = layout.reduce(missing[0])
            except NotImplementedError:
                continue
            changed |= assign(buffer, reshaped(reduced, _shape(buffer)), "a T.Parallel loop")
    return changed


def _vars_in(expr) -> set:
    found = set()
    walk(expr, tirx.Var, lambda v: found.add(v))
    return found


def _reads(expr, buffer) -> bool:
    found = []
    walk(expr, object, lambda n: found.append(n) if is_load(n) and n.source.same_as(buffer)
         else None)
    return bool(found)


def _check_copies_agree(nest, table, layouts, plan):
    """A fragment stored at fewer dimensions than its loop's (`acc[i]` in a loop over i, j)
    is written by several iterations per element. The CPU runs them all, in order; on the
    GPU each thread runs its own iterations on its own copy of the element, and one copy
    reaches memory. The copies agree where every thread that keeps an element runs every
    iteration that writes it, or where every such iteration writes the same value: one
    that reads neither the element nor a loop variable the index leaves out, under no `if`
    on one. Otherwise each thread would keep its own part - `acc[i] += s[i, j]` with the
    columns of s dealt to four threads summed a quarter of each row - and in shared
    memory their writes would race, so the conflict is not moved there: a loop that folds
    into the fragment becomes a reduction (spill_fragments.as_reduction), anything else is
    refused."""
    for buffer, indices, value_vars, self_read in nest.stores:
        shifts = relative_shifts(nest, plan, indices)
        if shifts is None:
            continue  # refused by the check of computed indices
        pos, offsets = shifts
        left_out = [d for d in range(len(nest.extents))
                    if d not in pos and nest.extents[d] > 1]
        if not left_out:
            continue
        unindexed = {nest.loop_vars[d] for d in left_out}
        if not self_read and not any(v in unindexed for v in value_vars | nest.tested):
            continue  # every iteration writes the same value
        writes = math.prod(nest.extents[d] for d in left_out)
        runs: dict = {}  # element -> {thread: iterations writing it that the thread runs}
        shift = shifter(pos, offsets, _shape(buffer))
        for t, elements in enumerate(table):
            for element in elements:
                if element is not None:
                    wanted = shift(element)
                    by_thread = runs.setdefault(wanted, {})
                    by_thread[t] = by_thread.get(t, 0) + 1
        owners = owner_table(layouts[buffer.name])
        for element, by_thread in runs.items():
            short = [t for t in owners.get(element, {}) if by_thread.get(t, 0) != writes]
            if short:
                names = ", ".join(str(nest.loop_vars[d].name) for d in left_out)
                conflict = LayoutConflict(
                    buffer.name, f"fragment {buffer.name!r} is written at "
                    f"[{', '.join(str(i) for i in indices)}] in every iteration over {names} "
                    f"of its T.Parallel loop, a value that changes from one to the next (it "
                    f"reads {names} or the element itself), but the threads share those "
                    f"iterations (thread {short[0]} runs "
                    f"{by_thread.get(short[0], 0)} of the {writes} that write element "
                    f"{element}): each would keep its own part of the result",
                    hint="T.reduce_sum/T.reduce_max (clear=False to add to what it holds) "
                         "combines a dimension across threads; or write the element in a "
                         "loop that does not run over that dimension",
                    spillable=False)  # in shared memory the threads' writes would race
                conflict.loop_var = nest.loop_vars[0]  # (spill_fragments may fold it)
                raise conflict


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
    _check_copies_agree(nest, table, layouts, plan)  # first: moving these to shared would not do
    for buffer, indices, written in nest.accesses:
        shifts = relative_shifts(nest, plan, indices)
        if not written and (shifts is None or any(shifts[1])) and \
                kept_whole_alike(layouts[buffer.name]):
            continue  # every thread has every element
        if shifts is None:
            where = ", ".join(str(i) for i in indices)
            raise LayoutConflict(
                buffer.name, f"fragment {buffer.name!r} is {'written' if written else 'read'} at "
                f"[{where}] inside T.Parallel: a computed index, and its elements are "
                "spread over the block's threads",
                hint="index fragments with the loop variables themselves; a small fragment "
                     f"(up to {KEPT_WHOLE_LIMIT} elements) that is only read at computed "
                     "indices is kept whole by every thread, or go through shared memory")
        misfit = _misfit(table, owner_table(layouts[buffer.name]), *shifts, _shape(buffer))
        if misfit is None:
            continue
        if misfit[0] == "elsewhere":
            _, t, element, wanted = misfit
            raise LayoutConflict(
                buffer.name, f"in a T.Parallel loop over {tuple(nest.extents)}, "
                f"thread {t} works on element {element} but fragment {buffer.name!r} "
                f"keeps element {wanted} on another thread",
                hint="make the fragments of one loop share a layout, e.g. by copying "
                     "through shared memory")
        # each thread runs the same code, so one loop register must meet one fragment
        # register on every thread
        raise LayoutConflict(
            buffer.name, f"fragment {buffer.name!r} does not line up with the loop layout "
            f"of its T.Parallel loop over {tuple(nest.extents)}: the threads keep one "
            "iteration's element in different registers",
            hint="make the fragments of one loop share a layout, e.g. by copying through "
                 "shared memory")


_MISFITS: dict = {}  # (loop table, fragment owners, access) -> _misfit's answer


def _misfit(table, owners, pos, offsets, shape):
    """Where an access of a fragment (owners: owner_table) from a loop (table:
    thread_elements of its layout) leaves a thread: None if every iteration finds its
    element on its own thread, in one fragment register per loop register;
    ("elsewhere", thread, element, wanted) or ("misaligned",) if not. Layout tables are
    cached for good, so the answer is kept by their identity (a kernel asks again and
    again, and a table walk is a Python loop over every element of the tile)."""
    key = (id(table), id(owners), pos, offsets, shape)
    if key in _MISFITS:
        return _MISFITS[key]
    answer = None
    registers = {}  # the loop's register -> the fragment's registers it meets
    shift = shifter(pos, offsets, shape)
    for t, elements in enumerate(table):
        for reg, element in enumerate(elements):
            if element is None:  # a padding slot of this thread
                continue
            wanted = shift(element)
            held = owners.get(wanted, {})
            if t not in held:
                answer = ("elsewhere", t, element, wanted)
                break
            registers.setdefault(reg, set()).add(held[t])
        if answer:
            break
    if answer is None and any(len(found) > 1 for found in registers.values()):
        answer = ("misaligned",)
    _MISFITS[key] = answer
    return answer


def InferLayouts(annotated: dict | None = None, wgmma_off: str | None = NO_WGMMA,  # noqa: N802
                 stmatrix: bool = False):
    """Runs layout inference on each kernel; its LayoutPlan rides on the kernel loop
    (`LAYOUT_PLAN`) to the thread lowering, and from the IR into the Trace. `annotated`:
    the layouts the program chose itself (T.annotate_layout); `stmatrix`: the target has
    it (sm_90) and it is not turned off."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.InferLayouts")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        def on_kernel(loop):
            if KERNEL not in loop.annotations:
                return loop
            plan = infer_layouts(loop, block_threads(loop), annotated, func, wgmma_off,
                                 stmatrix)
            return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                            thread_binding=loop.thread_binding,
                            annotations={**loop.annotations, LAYOUT_PLAN: fact(plan)})

        return func.with_body(rewrite_pre(func.body, tirx.For, on_kernel))

    return _pass
