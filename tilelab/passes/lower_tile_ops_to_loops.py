"""Lower tile operations to plain loop nests: what each tile op *means*.

A tile op names whole regions: `copy(A[r0:r0+64, c0:c0+32], A_shared)`. On
the CPU there are no threads to share the work, so each op becomes the
obvious loop nest over its region, one element at a time:

* copy    - `dst[i, j] = src[i, j]`; elements past the edge of a global
            tensor read as 0 and are never written (this is how partial tiles
            at the borders stay correct);
* fill    - `dst[i, j] = value`;
* gemm    - `C[i, j] += A[i, k] * B[k, j]`, products in C's type;
* reduce  - fold one dimension with +, max, min (or of absolute values);
* atomic_add - `dst[i, j] += src[i, j]`;
* print   - `printf` of a value or of every element of a region.

These loops are the reference semantics of tilelab: the CUDA backend
distributes the same iterations over threads and must agree with them.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from ..ir.expr import to_expr
from ..ir.tile_ops import Region, _const_int, config, is_tile_call, op_name, regions
from ..ir.visit import loop_nest, rewrite

_INIT = {"sum": 0.0, "abssum": 0.0, "absmax": 0.0}


def _in_bounds(region: Region, indices) -> list:
    """Bounds conditions for a global tensor (the simplifier later drops the provable ones)."""
    if region.scope != "global":
        return []
    # every dimension, unit ones too: a 64-row tile copied into a 1-row tensor must stop at 1
    return [tirx.LT(index, extent) for index, extent in zip(indices, region.buffer.shape)]


def _all(conds):
    result = None
    for c in conds:
        result = c if result is None else tirx.And(result, c)
    return result


def _guard(conds, stmt):
    cond = _all(conds)
    return stmt if cond is None else tirx.IfThenElse(cond, stmt, None)


def _index_map(region: Region):
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


def lower_copy(src: Region, dst: Region):
    extents = dst.squeezed_extents() or [1]
    src_at, dst_at = _index_map(src), _index_map(dst)

    def body(loop_vars):
        si, di = src_at(loop_vars), dst_at(loop_vars)
        value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
        src_ok = _all(_in_bounds(src, si))
        if src_ok is not None:
            value = tirx.if_then_else(src_ok, value, to_expr(0, dst.dtype))
        return _guard(_in_bounds(dst, di), tirx.BufferStore(dst.buffer, value, di))

    return loop_nest(extents, body)


def lower_fill(dst: Region, value):
    extents = list(dst.extents)

    def body(loop_vars):
        idx = [s + v for s, v in zip(dst.starts, loop_vars)]
        return _guard(_in_bounds(dst, idx), tirx.BufferStore(dst.buffer, to_expr(value,
                                                                                dst.dtype), idx))

    return loop_nest(extents, body)


def lower_gemm(a: Region, b: Region, c: Region, transpose_A, transpose_B, clear_accum, **_):
    m, n = (int(_const_int(e)) for e in c.extents)
    k_extent = int(_const_int(a.extents[0 if transpose_A else 1]))
    i, j, k = (tirx.Var(name, "int32") for name in ("i", "j", "k"))
    a_val = tirx.BufferLoad(a.buffer, [k, i] if transpose_A else [i, k])
    b_val = tirx.BufferLoad(b.buffer, [j, k] if transpose_B else [k, j])
    acc = tirx.BufferLoad(c.buffer, [i, j])
    update = tirx.BufferStore(c.buffer, acc + to_expr(a_val, c.dtype) * to_expr(b_val, c.dtype),
                              [i, j])
    # i-k-j keeps the innermost loop contiguous in B and C (vectorizes); with Bᵀ, i-j-k does.
    order = [(i, m), (j, n), (k, k_extent)] if transpose_B else [(i, m), (k, k_extent), (j, n)]
    stmt = update
    for var, extent in reversed(order):
        stmt = tirx.For(var, 0, extent, tirx.ForKind.SERIAL, stmt)
    if clear_accum:
        stmt = tirx.SeqStmt([lower_fill(c, 0), stmt])
    return stmt


def _combine(kind, acc, value):
    if kind in ("abssum", "absmax"):
        value = tirx.abs(value)
    if kind in ("sum", "abssum"):
        return acc + value
    if kind in ("max", "absmax"):
        return tirx.max(acc, value)
    return tirx.min(acc, value)


def _init(kind, dtype):
    if kind == "max":
        return -tirx.infinity(dtype) if dtype.startswith(("float", "bfloat")) else \
            tirx.min_value(dtype)
    if kind == "min":
        return tirx.infinity(dtype) if dtype.startswith(("float", "bfloat")) else \
            tirx.max_value(dtype)
    return to_expr(_INIT[kind], dtype) if dtype.startswith(("float", "bfloat")) else \
        to_expr(0, dtype)


def lower_reduce(src: Region, dst: Region, kind, dim, clear):
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
        stmts.append(lower_fill(dst, _init(kind, dst.dtype)))
    loop_vars = [tirx.Var(f"i{d}", "int32") for d in range(len(src_shape))]
    di = dst_indices(loop_vars)
    value = to_expr(tirx.BufferLoad(src.buffer, loop_vars), dst.dtype)
    update = tirx.BufferStore(dst.buffer, _combine(kind, tirx.BufferLoad(dst.buffer, di), value),
                              di)
    for d in reversed(kept + [dim]):  # reduced dimension innermost
        update = tirx.For(loop_vars[d], 0, src_shape[d], tirx.ForKind.SERIAL, update)
    stmts.append(update)
    return tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]


def lower_atomic_add(dst: Region, src):
    if not isinstance(src, Region):  # a scalar added to one element
        idx = list(dst.starts)
        old = tirx.BufferLoad(dst.buffer, idx)
        return _guard(_in_bounds(dst, idx), tirx.BufferStore(dst.buffer, old + to_expr(
            src, dst.dtype), idx))
    extents = dst.squeezed_extents() or [1]
    src_at, dst_at = _index_map(src), _index_map(dst)

    def body(loop_vars):
        si, di = src_at(loop_vars), dst_at(loop_vars)
        old = tirx.BufferLoad(dst.buffer, di)
        value = to_expr(tirx.BufferLoad(src.buffer, si), dst.dtype)
        return _guard(_in_bounds(dst, di) + _in_bounds(src, si),
                      tirx.BufferStore(dst.buffer, old + value, di))

    return loop_nest(extents, body)


def _printf(fmt: str, *values):
    args = []
    for v in values:
        dtype = str(v.ty)
        args.append(tirx.Cast("float64", v) if dtype.startswith(("float", "bfloat"))
                    else tirx.Cast("int32", v))  # %d: TVM narrows 64-bit indices anyway
    return tirx.Evaluate(tirx.call_extern("int32", "printf", fmt, *args))


def _spec(value) -> str:
    return "%g" if str(value.ty).startswith(("float", "bfloat")) else "%d"


def lower_print(target, msg, newline="\n"):
    """`newline` is what ends a line in the format string: a newline character for LLVM,
    the two characters backslash-n for CUDA C, whose code generator prints strings raw."""
    prefix = f"{msg}: " if msg else ""
    if not isinstance(target, Region):
        return _printf(f"{prefix}{_spec(target)}{newline}", target)
    extents = list(target.extents)

    def body(loop_vars):
        idx = [s + v for s, v in zip(target.starts, loop_vars)]
        value = tirx.BufferLoad(target.buffer, idx)
        where = ", ".join(["%d"] * len(idx))
        fmt = f"{prefix}{target.buffer.name}[{where}] = {_spec(value)}{newline}"
        return _printf(fmt, *[tirx.Cast("int32", v) for v in idx], value)

    return loop_nest(extents, body)


def lower_tile_op(stmt):
    name = op_name(stmt)
    regs = regions(stmt)
    cfg = config(stmt)
    scalars = [a for a in stmt.args if not isinstance(a, tvm.ir.TensorRegion)]
    if name == "copy":
        return lower_copy(*regs)
    if name == "fill":
        return lower_fill(regs[0], scalars[0])
    if name == "gemm":
        return lower_gemm(*regs, **cfg)
    if name == "reduce":
        return lower_reduce(*regs, kind=cfg["kind"], dim=int(cfg["dim"]), clear=cfg["clear"])
    if name == "atomic_add":
        return lower_atomic_add(regs[0], regs[1] if len(regs) > 1 else scalars[0])
    if name == "print":
        return lower_print(regs[0] if regs else scalars[0], cfg.get("msg", ""))
    raise NotImplementedError(f"no loop lowering for tile op {name}")


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.LowerTileOpsToLoops")
def LowerTileOpsToLoops(func, _mod, _ctx):  # noqa: N802 - TVM pass naming
    """Expects tile-op nodes anywhere in the body; leaves none."""
    from tvm.tirx.tile_primitive import TilePrimitiveCall

    def lower(stmt):
        return lower_tile_op(stmt) if is_tile_call(stmt) else stmt

    return func.with_body(rewrite(func.body, TilePrimitiveCall, lower))


