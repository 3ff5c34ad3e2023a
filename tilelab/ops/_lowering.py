"""Helpers the op modules share when they build loops (CPU) and per-thread code (CUDA).

Edges are guarded the same way everywhere: an element outside a global tensor
(past its end, or before its start) reads as zero and is never written
(`in_bounds`, `guard`). That is how partial tiles at a tensor's borders and
halos stay correct on every backend.
"""

from __future__ import annotations

import tvm
from tvm import sym, tirx

from ..ir.expr import to_expr
from ..ir.tile_ops import Region, _const_int, is_buffer
from ..ir.visit import rewrite, walk

_ANALYZER = sym.Analyzer()


def simplify(expr):
    return _ANALYZER.simplify(expr) if not isinstance(expr, int) else expr


def thread_index_range(tx, threads: int):
    """While a kernel is lowered: the simplifier knows that `tx` runs over 0..threads-1,
    so that a layout's `tx % 256` on a 256-thread block becomes `tx` (TVM's FlattenBuffer
    fails on some xor-swizzled indices that still carry the modulo). A scope, so the
    shared simplifier keeps nothing of one kernel's thread index after it."""
    return _ANALYZER.constraint_scope(tirx.And(tirx.GE(tx, 0), tirx.LT(tx, threads)))


# ---------------------------------------------------------------- edges and indices


def in_bounds(region: Region, indices) -> list:
    """Bounds conditions for a global tensor (the simplifier later drops the provable ones).

    Both sides of every dimension: a tile may start before the tensor (a left halo,
    `A[bx * 64 - 1]`) as well as run past its end. Unit dimensions too: a 64-row tile
    copied into a 1-row tensor must stop at 1.
    """
    if region.scope != "global":
        return []
    conds = []
    for index, extent in zip(indices, region.buffer.shape):
        index = to_expr(index)
        conds += [tirx.LE(tirx.const(0, str(index.ty)), index), tirx.LT(index, extent)]
    return conds


def all_of(conds):
    result = None
    for c in conds:
        result = c if result is None else tirx.And(result, c)
    return result


def guard(conds, stmt):
    cond = all_of(conds)
    return stmt if cond is None else tirx.IfThenElse(cond, stmt, None)


def index_map(region: Region):
    """Map loop indices (one per dimension of extent > 1, in order) to the region's indices.

    Dimensions of extent 1 stay at their start. The two sides of a copy have the same
    number of such dimensions (checked when the copy was traced), so one loop nest
    serves both.
    """
    free = [d for d, e in enumerate(region.extents) if _const_int(e) != 1]

    def indices(loop_vars):
        at = dict(zip(free, loop_vars))
        return [(at[d] if _const_int(start) == 0 else start + at[d]) if d in at else start
                for d, start in enumerate(region.starts)]

    return indices


def _whole_dim(start, extent, size) -> bool:
    return _const_int(start) == 0 and _const_int(extent) == int(size)


def is_whole(region: Region) -> bool:
    return all(_whole_dim(s, e, n)
               for s, e, n in zip(region.starts, region.extents, region.buffer.shape))


def region_map(region: Region, mem: Region):
    """How a fragment element meets the other side of a copy.

    Returns `at(element)`, the index on the other side, and `inside(element)`, the
    conditions that the element lies in the fragment's copied region (none for a whole
    fragment). Unit dimensions on either side do not count: a (1, N) fragment matches
    `Y[row, 0:N]`, and a (64, 64) tile matches `Q[b, h, 0:64, 0:64]`.
    """
    free = [d for d, e in enumerate(region.extents) if _const_int(e) != 1]
    mem_at = index_map(mem)

    def offset(element, d):
        start = region.starts[d]
        return element[d] if _const_int(start) == 0 else element[d] - start

    def at(element):
        return mem_at([offset(element, d) for d in free])

    def inside(element):
        conds = []
        for d, (start, extent, size) in enumerate(
                zip(region.starts, region.extents, region.buffer.shape)):
            if _whole_dim(start, extent, size):
                continue
            conds += [tirx.LE(to_expr(start), element[d]),
                      tirx.LT(element[d], to_expr(start + extent))]
        return [simplify(c) for c in conds]

    return at, inside


def holds_part_of(elements, regs, region: Region) -> bool:
    """Does some thread hold, in one of the registers `regs`, an element that may lie in
    `region` of its fragment? (`elements`: `thread_elements` of the fragment.) False only
    when the region's bounds are constants that leave those registers out: a statement
    for them would be guarded by a condition no thread meets, which TVM's later passes
    may fold into nonsense (a division by a range of no values)."""
    bounds = [(_const_int(s), _const_int(e)) for s, e in zip(region.starts, region.extents)]

    def may_lie(element):
        return all(s is None or e is None or s <= i < s + e
                   for (s, e), i in zip(bounds, element))

    return any(per[r] is not None and may_lie(per[r]) for per in elements for r in regs)


def unravel(flat, extents):
    index, rest = [], flat
    for d, extent in enumerate(reversed(extents)):
        last = d == len(extents) - 1
        index.append(rest if last else tirx.floormod(rest, extent))
        rest = tirx.floordiv(rest, extent)
    return [simplify(i) for i in reversed(index)]


def flatten(index, shape):
    flat = 0
    for i, extent in zip(index, shape):
        flat = flat * extent + i
    return flat


# ---------------------------------------------------------------- statements


def seq(stmts):
    stmts = [s for s in stmts if s is not None]
    if not stmts:
        return tirx.Evaluate(0)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


def extern(name: str, *args):
    return tirx.Evaluate(tirx.call_extern("void", name, *args))


def extern_name(stmt) -> str:
    """The function an `extern(...)` statement calls; "" for any other statement."""
    call = stmt.value if isinstance(stmt, tirx.Evaluate) else None
    if isinstance(call, tvm.ir.Call) and getattr(call.op, "name", "") == "tirx.call_extern":
        return str(call.args[0].value)
    return ""


CHECK = "__tilelab_check"  # an op's own check, until passes/check_bounds.py reports it


def check(cond, message: str, where: str = ""):
    """A condition an op's CPU loops require (`where`: "file|line|col" of the user's
    statement): where it fails, the kernel reports `message` there once it has run
    (passes/check_bounds.py turns the check into its report)."""
    return tirx.Evaluate(tirx.call_extern("int32", CHECK, cond, tvm.ir.StringImm(message),
                                          tvm.ir.StringImm(where)))


def where_text(location) -> str:
    """A source location as a check's `where` ("file|line|col"; "" for none)."""
    return f"{location.filename}|{location.line}|{location.col}" if location else ""


def is_check(stmt) -> bool:
    return extern_name(stmt) == CHECK


def sync():
    """A barrier of the whole block (`__syncthreads`)."""
    return tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))


def narrow_barriers(stmt, barrier):
    """`stmt` with each barrier of the whole block in it replaced by `barrier` (a barrier
    of fewer threads: the consumers of a warp-specialized loop, the threads of a T.ws role)."""
    return rewrite(stmt, tirx.Evaluate, lambda node: barrier if is_sync(node) else node)


def is_sync(stmt) -> bool:
    """Is `stmt` a barrier of the whole block (`sync()`, or one TVM's ThreadSync placed)?"""
    call = getattr(stmt, "value", None) if isinstance(stmt, tirx.Evaluate) else None
    return isinstance(call, tvm.ir.Call) and \
        getattr(call.op, "name", "") == "tirx.tvm_storage_sync" and \
        str(call.args[0].value).startswith("shared")


GRID_SYNC = "tl::sync_grid"  # T.sync_grid: a barrier of every block of the grid


def is_grid_sync(stmt) -> bool:
    return extern_name(stmt) == GRID_SYNC


def calls_grid_sync(node) -> bool:
    """Does `node` hold a T.sync_grid (its kernel is then launched cooperatively)?"""
    found = []
    walk(node, tirx.Evaluate, lambda e: found.append(e) if is_grid_sync(e) else None)
    return bool(found)


FLOAT_TEXT = 32  # bytes of text for one float printed on the CPU ("%g" needs at most 14)


def printf(fmt: str, *values, floats_as_text: bool = False):
    """`printf(fmt, values...)`; a str value is passed as a string (for a `%s`).

    `floats_as_text` (the CPU): each float is first written as text by `strfromd` and
    printed with `%s` (see `format_spec`). TVM's LLVM code generator declares every
    external function without `...`, and x86-64's printf finds a double only if the
    caller says in %al how many vector registers it used, which nobody then does: the
    values printed depended on what %al held. Integers and pointers need no such count.
    """
    args, texts = [], []
    for v in values:
        if isinstance(v, str):
            args.append(tvm.ir.StringImm(v))
        elif not str(v.ty).startswith(("float", "bfloat")):
            args.append(tirx.Cast("int32", v))  # %d: TVM narrows 64-bit indices anyway
        elif floats_as_text:
            text = tirx.decl_buffer((FLOAT_TEXT,), "int8", name="text", scope="local")
            start = tirx.address_of(tirx.BufferLoad(text, [0]))
            texts += [tirx.AllocBuffer(text), tirx.Evaluate(tirx.call_extern(
                "int32", "strfromd", start, FLOAT_TEXT, tvm.ir.StringImm("%g"),
                tirx.Cast("float64", v)))]
            args.append(start)
        else:
            args.append(tirx.Cast("float64", v))
    return seq([*texts, tirx.Evaluate(tirx.call_extern("int32", "printf", fmt, *args))])


def format_spec(value, floats_as_text: bool = False) -> str:
    if str(value.ty).startswith(("float", "bfloat")):
        return "%s" if floats_as_text else "%g"
    return "%d"


# ---------------------------------------------------------------- GPU memory


def is_fragment(buffer) -> bool:
    return is_buffer(buffer) and buffer.scope() == "local.fragment"


def address(buffer, indices, rw_mask: int = 1):
    """A pointer to an element, for instructions that take addresses (ldmatrix, mma).

    Shared tiles are addressed with `tvm_access_ptr`, which tells TVM's later passes
    that the tile is read (mask 1) or written (2) here; with a bare `&A[i]` they would
    think the tile dead and let another tile reuse its memory.
    """
    if not buffer.scope().startswith("shared"):
        return tirx.address_of(tirx.BufferLoad(buffer, list(indices)))
    shape = [int(s) for s in buffer.shape]
    offset = 0
    for index, extent in zip(indices, shape):
        offset = offset * extent + index
    return tirx.tvm_access_ptr(str(buffer.dtype), buffer, simplify(offset), 8, rw_mask)


def vector_width(nbytes: int, *limits) -> int:
    """Largest power of two <= 16 bytes of elements dividing every limit."""
    v = max(16 // nbytes, 1)
    while v > 1 and any(lim % v for lim in limits):
        v //= 2
    return v


def aligned(start, v: int) -> bool:
    """Is a region's first column a multiple of the vector width (so vectors stay aligned)?"""
    if v == 1:
        return True
    if _const_int(start) is not None:
        return _const_int(start) % v == 0
    return _ANALYZER.can_prove(tirx.EQ(tirx.floormod(start, v), 0))


def unrolled_registers(local, value_fn):
    """`for reg in 0..size: local[reg] = value_fn(reg)`, unrolled."""
    reg = tirx.Var("reg", "int32")
    return tirx.For(reg, 0, int(local.shape[0]), tirx.ForKind.UNROLLED,
                    tirx.BufferStore(local, value_fn(reg), [reg]))
