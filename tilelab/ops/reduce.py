"""`T.reduce_sum`, `_max`, `_min`, `_abssum`, `_absmax`: fold one dimension of a tile.

Loop semantics: `dst[row] = op(dst[row] or the identity, src[row, k] for every k)`,
the reduced dimension innermost.

Layouts: the result lives where its rows lived (the source fragment's layout with
the reduced dimension folded away).

Thread lowering: each thread folds its own registers into one partial per result
register, in two independent chains combined at the end (a row of 32 registers is 16
dependent steps, not 31: the two chains' steps issue back to back where one chain's
would wait for the step before); threads holding parts of the same row combine with
warp shuffles (`shfl.xor`) and, across warps, through a shared scratch tile. A tile in
shared (or global) memory is there for every thread to read: each result element is
folded by one thread, serially along the reduced dimension (for a fragment result,
the thread that keeps the element; otherwise the elements are dealt round-robin).
Where the result fragment's layout came from its other uses and does not keep each
row on the threads holding its parts, the reduction runs into registers of its own
layout and the results move over through a shared scratch tile (move_through_shared).

Split across a loop (passes/deferred_row_sums.py): a sum whose result only feeds a
running total in a loop is made in two calls, `split="own"` in the loop (each thread's
registers only) and `split="across"` after it (the shuffles, on the running total). Both
carry the source, the result and the running total, and decide from their layouts
alike whether the split holds (`_splits`); where it does not, the first reduces whole
and the second does nothing. The CPU, with no threads to combine, does the same.
"""

from __future__ import annotations

import functools
import math

from tvm import tirx

from ..errors import LayoutConflict, TileLabTypeError
from ..ir.builder import current
from ..ir.expr import to_expr
from ..ir.layout import Fragment, owner_table, reshaped, thread_elements
from ..ir.tile_ops import Region, _const_int, config, regions, tile_call
from . import Effects, TileOp, register
from ._lowering import flatten, guard, in_bounds, is_fragment, seq, simplify, sync, unravel
from ._operands import whole_shape
from .fill import fill_loops

_INIT = {"sum": 0.0, "abssum": 0.0, "absmax": 0.0}


def _reduce(kind):
    def reduce(src, dst, dim=-1, clear=True):
        builder = current(f"reduce_{kind}")
        s, d = (whole_shape(x, f"reduce_{kind}") for x in (src, dst))
        axis = dim + len(s) if dim < 0 else dim
        if not 0 <= axis < len(s):
            raise TileLabTypeError(f"T.reduce_{kind}: dim={dim} is out of range for "
                                   f"{src.name} of shape {s}")
        expected = s[:axis] + s[axis + 1:]
        if tuple(x for x in d if x != 1) != tuple(x for x in expected if x != 1):
            raise TileLabTypeError(
                f"T.reduce_{kind}: reducing {src.name} {s} over dim {axis} gives "
                f"{expected or (1,)}, but {dst.name} has shape {d}")
        builder.emit(tile_call("reduce", Region.whole(src), Region.whole(dst), kind=kind,
                               dim=axis, clear=bool(clear)))

    reduce.__name__ = f"reduce_{kind}"
    reduce.__doc__ = f"Reduce `src` over `dim` with {kind} into `dst` (`clear=False` folds " \
                     "the old contents of `dst` in)."
    return reduce


reduce_sum = _reduce("sum")
reduce_max = _reduce("max")
reduce_min = _reduce("min")
reduce_abssum = _reduce("abssum")
reduce_absmax = _reduce("absmax")


def effects(call) -> Effects:
    src, dst, *_ = regions(call)
    if config(call).get("split") == "across":  # the running total's threads combine
        return Effects(reads=(dst,), writes=(dst,))
    folded_in = () if config(call)["clear"] else (dst,)  # clear=False folds dst's old values in
    return Effects(reads=(src, *folded_in), writes=(dst,))


# ---------------------------------------------------------------- layout rule


def propagate_layouts(call, ctx) -> bool:
    src, dst, *_ = regions(call)
    if src.buffer.name not in ctx.layouts or not is_fragment(dst.buffer) or \
            dst.buffer.name in ctx.layouts:
        return False
    dim = int(config(call)["dim"])
    try:
        reduced = ctx.layouts[src.buffer.name].reduce(dim)
    except NotImplementedError:
        raise LayoutConflict(
            src.buffer.name, f"reducing fragment {src.buffer.name!r} over dimension {dim} is "
            f"not supported for its layout {ctx.layouts[src.buffer.name]}",
            hint="reduce over the last dimension, or annotate the fragment "
                 "with a layout that keeps the reduced dimension in a "
                 "thread group") from None
    shape = tuple(int(s) for s in dst.buffer.shape)
    return ctx.assign(dst.buffer, ctx.reshaped(reduced, shape), "T.reduce")


# ---------------------------------------------------------------- loop semantics (CPU)


def combine(kind, acc, value):
    if kind in ("abssum", "absmax"):
        value = tirx.abs(value)
    if kind in ("sum", "abssum"):
        return acc + value
    if kind in ("max", "absmax"):
        return tirx.max(acc, value)
    return tirx.min(acc, value)


def _partials_combine(kind):
    """How partial results of a `kind` reduction combine (abssum's and absmax's partials
    already hold absolute values: they add up, or take the max)."""
    return "sum" if kind in ("sum", "abssum") else "max" if kind in ("max", "absmax") \
        else "min"


def identity(kind, dtype):
    if kind == "max":
        return -tirx.infinity(dtype) if dtype.startswith(("float", "bfloat")) else \
            tirx.min_value(dtype)
    if kind == "min":
        return tirx.infinity(dtype) if dtype.startswith(("float", "bfloat")) else \
            tirx.max_value(dtype)
    return to_expr(_INIT[kind], dtype) if dtype.startswith(("float", "bfloat")) else \
        to_expr(0, dtype)


def reduce_loops(src: Region, dst: Region, kind, dim, clear):
    src_shape = [int(_const_int(e)) for e in src.extents]
    kept = [d for d in range(len(src_shape)) if d != dim]
    dst_free = [d for d, e in enumerate(dst.extents) if _const_int(e) != 1]
    src_free = [d for d in kept if src_shape[d] != 1]

    def dst_indices(src_idx):
        idx = [0] * len(dst.extents)
        for d_dst, d_src in zip(dst_free, src_free):
            idx[d_dst] = src_idx[d_src]
        return idx

    stmts = []
    if clear:
        stmts.append(fill_loops(dst, identity(kind, dst.dtype)))
    loop_vars = [tirx.Var(f"i{d}", "int32") for d in range(len(src_shape))]
    di = dst_indices(loop_vars)
    value = to_expr(tirx.BufferLoad(src.buffer, loop_vars), dst.dtype)
    update = tirx.BufferStore(dst.buffer, combine(kind, tirx.BufferLoad(dst.buffer, di), value),
                              di)
    for d in reversed(kept + [dim]):  # reduced dimension innermost
        update = tirx.For(loop_vars[d], 0, src_shape[d], tirx.ForKind.SERIAL, update)
    stmts.append(update)
    return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]


def lower_loops(call):
    cfg = config(call)
    if cfg.get("split") == "across":  # one thread holds the whole rows already
        return tirx.Evaluate(0)
    src, dst, *_ = regions(call)
    return reduce_loops(src, dst, kind=cfg["kind"], dim=int(cfg["dim"]), clear=cfg["clear"])


# ---------------------------------------------------------------- thread lowering (CUDA)


def lower_threads(call, ctx):
    cfg = config(call)
    split = cfg.get("split")
    src, dst, *total = regions(call)
    if split is not None:
        own, total = (dst, total[0]) if split == "own" else (total[0], dst)
        if not _splits(ctx, src, own, total, int(cfg["dim"])):
            return tirx.Evaluate(0) if split == "across" else reduce_threads(
                ctx, src, own, cfg["kind"], int(cfg["dim"]), bool(cfg["clear"]))
        if split == "across":
            return _combine_total(ctx, src, total, int(cfg["dim"]))
    return reduce_threads(ctx, src, dst, kind=cfg["kind"], dim=int(cfg["dim"]),
                          clear=bool(cfg["clear"]), across_threads=split is None)


def _row_of(sf: Fragment, df: Fragment, dim: int):
    """The result element of a source element: its index without `dim` and without the
    source's unit dimensions, placed in the result's dimensions that are not units."""
    kept = [d for d, s in enumerate(sf.shape) if d != dim and s != 1]
    filled = [s != 1 for s in df.shape]

    @functools.cache
    def dst_element(element):
        parts = iter([element[d] for d in kept])
        return tuple(next(parts) if fill else 0 for fill in filled)

    return dst_element


def _splits(ctx, src: Region, own: Region, total: Region, dim: int) -> bool:
    """May a sum of `src` into `own` stop at each thread's registers, its threads combining
    later in the running `total`? Where both keep each row on the threads holding its parts,
    in the same registers, and those threads are in one warp (combining across warps goes
    through shared memory and a barrier of the whole block)."""
    if not all(is_fragment(r.buffer) for r in (src, own, total)):
        return False
    sf, of, tf = (ctx.layout_of(r.buffer) for r in (src, own, total))
    if not of.same_as(tf):
        return False
    row = _row_of(sf, of, dim)
    return _keeps_rows(sf, of, row) and all(m < 32 for m in _xor_masks(sf, row, of))


def _combine_total(ctx, src: Region, total: Region, dim: int):
    """The running total's registers summed across the threads of each row."""
    sf, tf = ctx.layout_of(src.buffer), ctx.layout_of(total.buffer)
    return seq(_warp_shuffles(ctx.local(total.buffer), tf, _held(tf),
                              _xor_masks(sf, _row_of(sf, tf, dim), tf), "sum"))


def reduce_threads(ctx, src: Region, dst: Region, kind: str, dim: int, clear: bool,
                   across_threads: bool = True):
    if not is_fragment(src.buffer):  # memory every thread can read
        return reduce_from_memory(ctx, src, dst, kind, dim, clear)
    if not is_fragment(dst.buffer):  # (passes/stage_operands.py gives it one)
        raise TileLabTypeError("on the GPU, T.reduce_* of a fragment writes a fragment; "
                               "reduce into one, then T.copy it where it should go")
    sf, df = ctx.layout_of(src.buffer), ctx.layout_of(dst.buffer)
    s_local, d_local = ctx.local(src.buffer), ctx.local(dst.buffer)
    dtype = str(d_local.dtype)
    dst_element = _row_of(sf, df, dim)
    if _keeps_rows(sf, df, dst_element):
        return seq(_reduce_registers(ctx, src, sf, s_local, dst.buffer.name, df, d_local,
                                     dst_element, kind, clear, across_threads))
    # dst's layout, set by its other uses, does not keep each row where its parts are:
    # reduce into the layout the reduction would give it, then move the results over
    try:
        rows = reshaped(sf.reduce(dim), tuple(df.shape))
    except NotImplementedError:
        raise TileLabTypeError(
            f"T.reduce_{kind}: {dst.buffer.name!r}'s layout does not keep each row where "
            f"{src.buffer.name!r} holds its parts, and no layout of the reduction serves "
            "instead") from None
    tmp = tirx.decl_buffer((rows.local_size,), dtype, name=f"{dst.buffer.name}_rows",
                           scope="local")
    return seq([tirx.AllocBuffer(tmp),
                *_reduce_registers(ctx, src, sf, s_local, dst.buffer.name, rows, tmp,
                                   dst_element, kind, True),
                move_through_shared(ctx, rows, tmp, df, d_local, kind, clear)])


def _keeps_rows(sf: Fragment, df: Fragment, dst_element) -> bool:
    """Does every thread that holds part of a row keep that row's result in `df`, each
    source register's rows in one result register on every thread?"""
    s_elems, d_owners = thread_elements(sf), owner_table(df)
    for ls in range(sf.local_size):
        slots = set()
        for t in range(sf.threads):
            element = s_elems[t][ls]
            if element is None:
                continue
            owners = d_owners.get(dst_element(element), {})
            if t not in owners:
                return False
            slots.add(owners[t])
        if len(slots) > 1:
            return False
    return True


def move_through_shared(ctx, rows: Fragment, tmp, df: Fragment, d_local, kind: str, clear):
    """The results in registers `tmp` (layout `rows`) into `d_local` (layout `df`, the same
    shape): the first copy of each written to a shared scratch tile, a barrier, each
    thread reading the elements its registers keep (folded into them when not `clear`)."""
    shape = [int(s) for s in df.shape]
    dtype = str(d_local.dtype)
    scratch = tirx.decl_buffer((math.prod(shape),), dtype, name=f"{d_local.name}_moved",
                               scope="shared.dyn")
    ctx.scratch.append(scratch)
    rank = len(shape)
    stmts = []
    for slot in range(rows.local_size):
        index = ctx.inverse(rows, slot)
        store = tirx.BufferStore(scratch, tirx.BufferLoad(tmp, [slot]),
                                 [simplify(flatten(index[:rank], shape))])
        if rows.replicate > 1:
            store = tirx.IfThenElse(tirx.EQ(index[rank], 0), store, None)
        stmts.append(ctx.only_if_valid(rows, slot, store))
    stmts.append(sync())
    combine_kind = _partials_combine(kind)
    for reg in range(df.local_size):
        element = ctx.inverse(df, reg)[:rank]
        value = tirx.BufferLoad(scratch, [simplify(flatten(element, shape))])
        if not clear:
            value = combine(combine_kind, tirx.BufferLoad(d_local, [reg]), value)
        stmts.append(ctx.only_if_valid(df, reg, tirx.BufferStore(d_local, value, [reg])))
    return seq(stmts)


def _reduce_registers(ctx, src, sf, s_local, dst_name, df, d_local, dst_element, kind,
                      clear, across_threads=True) -> list:
    """The reduction of `src` (layout `sf`, registers `s_local`) into registers `d_local`
    of layout `df`, which keeps each row's result on every thread holding part of it
    (without `across_threads`, each thread's own registers only)."""
    dtype = str(d_local.dtype)
    s_elems, d_owners = thread_elements(sf), owner_table(df)
    # 1. each thread folds its own registers into one partial per result register
    acc = tirx.decl_buffer((df.local_size,), dtype, name=f"{dst_name}_partial",
                           scope="local")
    stmts = [tirx.AllocBuffer(acc)]
    held = _held(df)
    terms: dict[int, list] = {slot: [] for slot in held}
    for ls in range(sf.local_size):
        slots = set()
        for t in range(sf.threads):
            element = s_elems[t][ls]
            if element is None:
                continue
            slots.add(d_owners[dst_element(element)][t])  # (_keeps_rows holds)
        if not slots:
            continue
        assert len(slots) == 1  # (_keeps_rows holds)
        value = to_expr(tirx.BufferLoad(s_local, [ls]), dtype)
        if kind in ("abssum", "absmax"):
            value = tirx.abs(value)
        terms[slots.pop()].append(ctx.valid_or(sf, ls, value, identity(kind, dtype)))
    combine_kind = _partials_combine(kind)
    stmts += [tirx.BufferStore(acc, _interleaved(combine_kind, values) if values else
                               identity(kind, dtype), [slot])
              for slot, values in terms.items()]
    # 2. threads holding parts of the same row combine: shuffles, then shared memory
    masks = _xor_masks(sf, dst_element, df) if across_threads else []
    block_masks = [m for m in masks if m >= 32]
    stmts += _warp_shuffles(acc, df, held, [m for m in masks if m < 32], combine_kind)
    if block_masks:
        stmts.append(combine_across_warps(ctx, acc, df, held, block_masks, combine_kind))
    # 3. the result lands in the destination fragment

    def final(r):
        value = tirx.BufferLoad(acc, [r])
        if not clear:
            value = combine(combine_kind, tirx.BufferLoad(d_local, [r]), value)
        return tirx.BufferStore(d_local, value, [r])

    stmts.append(_each_held(df, held, final))
    return stmts


def _held(df: Fragment) -> list[int]:
    """The registers some thread keeps a result in (a sparse layout, as a reduction of a
    T.reshape view has, leaves the others unused)."""
    d_elems = thread_elements(df)
    return [slot for slot in range(df.local_size)
            if any(d_elems[t][slot] is not None for t in range(df.threads))]


def _each_held(df: Fragment, held: list[int], store):
    """store(register) for every held register of layout `df`."""
    if len(held) == df.local_size:
        reg = tirx.Var("reg", "int32")
        return tirx.For(reg, 0, df.local_size, tirx.ForKind.UNROLLED, store(reg))
    return seq([store(tirx.const(slot, "int32")) for slot in held])


def _warp_shuffles(local, df: Fragment, held: list[int], masks: list[int], kind: str) -> list:
    """Each held register of `local` (layout `df`) combined with `kind` with the same
    register of the thread whose index differs by each mask in turn (`shfl.xor`)."""
    dtype = str(local.dtype)
    return [_each_held(df, held, lambda r, m=m: tirx.BufferStore(
        local, combine(kind, tirx.BufferLoad(local, [r]), tirx.call_extern(
            dtype, "tl::shfl_xor", tirx.BufferLoad(local, [r]), m)), [r])) for m in masks]


CHAINS = 2  # independent partials a thread folds its registers of one row into


def _interleaved(kind: str, values: list):
    """`values` folded with `kind` (sum, max or min): value i into partial i % CHAINS,
    then the partials pairwise. Two chains halve the dependent steps (a row of 32
    registers: 16, not 31) and keep one more register live. More chains measured slower
    (H200, FlashAttention 128x64 tiles in one role, one run): with 4, 8 or a balanced tree
    over all 32 the kernels took more registers (causal: 143 where 128 fit with 2 chains,
    a block per SM lost) or were scheduled worse (d64: 1.45 ms against 1.34 with one chain
    and 1.36 with two); with two, causal 1.17 ms against 1.23 with one."""
    partials = values[:CHAINS]
    for i, value in enumerate(values[CHAINS:], CHAINS):
        partials[i % CHAINS] = combine(kind, partials[i % CHAINS], value)
    while len(partials) > 1:
        pairs = [combine(kind, a, b) for a, b in zip(partials[::2], partials[1::2])]
        partials = pairs + partials[len(pairs) * 2:]
    return partials[0]


def reduce_from_memory(ctx, src: Region, dst: Region, kind: str, dim: int, clear: bool):
    """Every result element folded by one thread from the tile in memory, serially along `dim`
    (the loop semantics' order, so a sum rounds as the CPU's does)."""
    src_shape = [int(_const_int(e)) for e in src.extents]
    src_free = [d for d in range(len(src_shape)) if d != dim and src_shape[d] != 1]
    dst_free = [d for d, e in enumerate(dst.extents) if _const_int(e) != 1]
    dtype = dst.dtype
    total = tirx.decl_buffer((1,), dtype, name=f"{dst.buffer.name}_fold", scope="local")

    def fold(dst_offsets, old, write):
        """The statements folding the row that element `dst_offsets` (from dst's start)
        names into `total`, starting from `old`, then `write(total)`."""
        k = tirx.Var("k", "int32")  # a loop variable of its own for every loop
        index = list(src.starts)
        for d_dst, d_src in zip(dst_free, src_free):
            index[d_src] = index[d_src] + dst_offsets[d_dst]
        index[dim] = index[dim] + k
        value = to_expr(tirx.BufferLoad(src.buffer, index), dtype)
        step = tirx.BufferStore(total, combine(kind, tirx.BufferLoad(total, [0]), value), [0])
        return seq([tirx.BufferStore(total, old, [0]),
                    tirx.For(k, 0, src_shape[dim], tirx.ForKind.SERIAL, step),
                    write(tirx.BufferLoad(total, [0]))])

    if is_fragment(dst.buffer):  # each thread computes the elements its registers keep
        df, d_local = ctx.layout_of(dst.buffer), ctx.local(dst.buffer)
        stmts = []
        for reg in range(df.local_size):
            element = ctx.inverse(df, reg)[:len(df.shape)]
            offsets = [simplify(e - s) for e, s in zip(element, dst.starts)]
            old = tirx.BufferLoad(d_local, [reg]) if not clear else identity(kind, dtype)
            stmts.append(ctx.only_if_valid(df, reg, fold(
                offsets, old, lambda v, reg=reg: tirx.BufferStore(d_local, v, [reg]))))
        return seq([tirx.AllocBuffer(total), *stmts])

    extents = [int(_const_int(dst.extents[d])) for d in dst_free]

    def element(item):
        offsets = [0] * len(dst.extents)
        for d, i in zip(dst_free, unravel(item, extents)):
            offsets[d] = i
        index = [s + o for s, o in zip(dst.starts, offsets)]
        old = tirx.BufferLoad(dst.buffer, index) if not clear else identity(kind, dtype)
        return guard(in_bounds(dst, index), fold(
            offsets, old, lambda v: tirx.BufferStore(dst.buffer, v, index)))

    return seq([tirx.AllocBuffer(total), ctx.deal(math.prod(extents), element)])


def combine_across_warps(ctx, acc, df, held, block_masks, kind):
    warps = ctx.threads // 32
    rows = math.prod(df.shape)
    dtype = str(acc.dtype)
    scratch = ctx.pooled_scratch("reduce_scratch", warps * rows, dtype)
    warp = tirx.floordiv(ctx.tx, 32)
    # The reductions of a block share one scratch tile (pooled_scratch). The barrier
    # between writing and reading it is placed here; one before the next write - the
    # next reduction's, or this one's when it runs again in a loop - is left to TVM's
    # ThreadSync pass, which sees these plain shared accesses.
    stmts = []
    for slot in held:  # (a thread that does not keep a result there writes nothing)
        index = ctx.inverse(df, slot)[: len(df.shape)]
        row = flatten(index, df.shape)
        stmts.append(ctx.only_if_valid(df, slot, tirx.BufferStore(
            scratch, tirx.BufferLoad(acc, [slot]), [simplify(warp * rows + row)])))
    stmts.append(sync())
    group = [0]
    for m in block_masks:
        group += [g ^ (m // 32) for g in group]
    for slot in held:
        index = ctx.inverse(df, slot)[: len(df.shape)]
        row = flatten(index, df.shape)
        total = None
        for g in sorted(group):
            partner = tirx.bitwise_xor(warp, g) if g else warp
            value = tirx.BufferLoad(scratch, [simplify(partner * rows + row)])
            total = value if total is None else combine(kind, total, value)
        stmts.append(ctx.only_if_valid(df, slot, tirx.BufferStore(acc, total, [slot])))
    return seq(stmts)


def _xor_masks(sf: Fragment, dst_element, df: Fragment) -> list[int]:
    """Thread-index XOR masks that connect the threads holding parts of one result row.

    Only the first copy of each element counts: replicas of a replicated
    fragment already hold whole rows and must not be added twice. A shuffle
    with mask m combines register d of thread t with register d of thread t^m,
    so for every mask both threads must keep the same result row in register d
    (a thread with nothing of that row contributes the identity).
    """
    import itertools

    first_copy = sf.tables()[0][0]  # the thread of each element's first copy
    holders: dict = {}
    for element in itertools.product(*(range(s) for s in sf.shape)):
        holders.setdefault(dst_element(element), set()).add(int(first_copy[element]))
    basis: list[int] = []
    for group in holders.values():
        t0 = min(group)
        for t in sorted(group):
            x = t ^ t0
            for b in basis:
                x = min(x, x ^ b)
            if x:
                basis.append(x)
                basis.sort(reverse=True)
    masks = sorted(basis)
    d_elems = thread_elements(df)
    for m in masks:
        for t in range(df.threads):
            partner = t ^ m
            if partner >= df.threads:
                raise TileLabTypeError("this reduction's threads do not form a shuffle pattern",
                                       hint="use a power-of-two number of threads")
            for a, b in zip(d_elems[t], d_elems[partner]):
                if a is not None and b is not None and a != b:
                    raise TileLabTypeError(
                        "this reduction's threads do not form a shuffle pattern",
                        hint="use a power-of-two number of threads per row")
    return masks


def gpu_operands(call) -> list:
    """A fragment's partial results combine in registers: its result is a fragment too
    (folded into the old values unless clear). A tile in memory is read as it is."""
    src, *_ = regions(call)
    return [(1, ("fragment",), not config(call)["clear"], True)] if is_fragment(src.buffer) \
        else []


register(TileOp("reduce", primitives=(reduce_sum, reduce_max, reduce_min, reduce_abssum,
                                      reduce_absmax),
                effects=effects, propagate_layouts=propagate_layouts,
                lowerings={"cpu": lower_loops, "cuda": lower_threads},
                gpu_operands=gpu_operands))
