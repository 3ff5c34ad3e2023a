"""`T.gemm`: C += A @ B on tiles, C a fragment accumulator.

Loop semantics: `C[i, j] += A[i, k] * B[k, j]`, products in C's type.

Layouts: the accumulator (and a register A operand) must sit where the
tensor-core instruction leaves its results: `warp_grid` splits the warps over C
by the warp policy and `Fragment.accumulator` says which thread keeps what.
Shared operands of 16-bit types are swizzled against bank conflicts.

Thread lowering, to tensor-core instructions:

The accumulator tile C (MxN) is split among the warps in a grid
(`warp_grid` below); each warp owns a block of 16x8 output tiles. For
every 16-wide step along K, a warp

1. loads its A tiles (16x16) with `ldmatrix.x4` from shared memory - or takes
   them straight from registers when A is a fragment (FlashAttention's P@V);
2. loads its B tiles (16x8), two at a time with `ldmatrix.x4` (`.trans` when B is
   stored KxN);
3. issues one `mma.sync.m16n8k16` per (A tile, B tile) pair, accumulating in
   fp32 registers laid out exactly as `Fragment.accumulator` says.

Tiles that do not fit the tensor cores (fp32 inputs, K not a multiple of 16)
fall back to per-thread multiply-adds over the thread's own C registers.

On Hopper (sm_90a) a GEMM that warpgroup MMA can take goes there instead
(`_gemm_wgmma.py`); which instruction each `T.gemm` got, and why, is in the
Trace (`trace.instructions`).
"""

from __future__ import annotations

import enum

from tvm import tirx

from ..errors import LayoutConflict, TileLabTypeError
from ..ir.builder import current
from ..ir.dtypes import as_dtype
from ..ir.expr import to_expr
from ..ir.layout import Fragment, Layout, thread_elements
from ..ir.tile_ops import Region, config, regions, tile_call
from . import Effects, TileOp, _gemm_wgmma, register
from ._lowering import address, extern, is_fragment, seq, simplify, unrolled_registers
from ._operands import tile_2d
from .fill import fill_loops

_TENSOR_CORE_TYPES = ("float16", "bfloat16")


class GemmWarpPolicy(enum.Enum):
    """How `T.gemm` splits the output tile among warps."""

    Square = "Square"
    FullRow = "FullRow"
    FullCol = "FullCol"


def gemm(A, B, C, transpose_A=False, transpose_B=False,  # noqa: N803
         policy=GemmWarpPolicy.Square, clear_accum=False, k_pack=1, wg_wait=0):
    """`C += A @ B` on tiles (with optional transposes); C is a fragment accumulator."""
    builder = current("gemm")
    (ra, a), (rb, b), (rc, c) = (tile_2d(x, "gemm") for x in (A, B, C))
    m, k = (a[1], a[0]) if transpose_A else a
    k2, n = (b[1], b[0]) if transpose_B else b
    if len(c) != 2 or k != k2 or c[0] != m or c[1] != n:
        raise TileLabTypeError(
            f"T.gemm shapes do not agree: A{'ᵀ' if transpose_A else ''} is {m}×{k}, "
            f"B{'ᵀ' if transpose_B else ''} is {k2}×{n}, C is {'×'.join(map(str, c))}",
            hint="C must be M×N when A is M×K and B is K×N (after the transposes)")
    if not isinstance(policy, GemmWarpPolicy):
        raise TileLabTypeError("policy must be a T.GemmWarpPolicy member")
    builder.emit(tile_call("gemm", ra, rb, rc,
                           transpose_A=bool(transpose_A), transpose_B=bool(transpose_B),
                           policy=policy.value, clear_accum=bool(clear_accum)))


def effects(call) -> Effects:
    a, b, c = regions(call)
    reads = (a, b) if config(call).get("clear_accum") else (a, b, c)
    return Effects(reads=reads, writes=(c,))


# ---------------------------------------------------------------- layout rule


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


def _tensor_core_types(a: Region, b: Region, c_dtype: str, k: int) -> bool:
    """Are these the types and the K that the tensor cores multiply?"""
    return a.dtype in _TENSOR_CORE_TYPES and b.dtype == a.dtype and c_dtype == "float32" \
        and k % 16 == 0


def _rows_aligned(region: Region) -> bool:
    """Does each row of a part of a shared tile start on a 16-byte boundary, as `ldmatrix`
    reads it (a whole tile does; a part, where its first column is a multiple of 8)?"""
    return is_fragment(region.buffer) or int(region.starts[-1]) % 8 == 0


def _tensor_cores(a: Region, b: Region, c_dtype: str, k: int) -> bool:
    """Can mma.sync take these tiles (B from memory)?"""
    return _tensor_core_types(a, b, c_dtype, k) and not is_fragment(b.buffer) and \
        _rows_aligned(a) and _rows_aligned(b)


def fix_layouts(call, ctx) -> None:
    a, b, c = regions(call)
    cfg = config(call)
    m, n = (int(s) for s in c.buffer.shape[-2:])
    if ctx.warps < 1:
        raise TileLabTypeError("T.gemm needs at least one warp (32 threads)")
    loc = str(call.config.get("loc", ""))
    names = {"a": a.buffer.name, "b": b.buffer.name, "c": c.buffer.name}
    choice = _gemm_wgmma.plan(call, ctx)
    if isinstance(choice, _gemm_wgmma.WgmmaPlan):
        ctx.plan.wgmma[call] = choice
        ctx.plan.instructions.append({
            "op": "gemm", "loc": loc, **names, "instruction": "wgmma.mma_async",
            "why": f"sm_90a: {choice.groups[0]}x{choice.groups[1]} warpgroups, "
                   f"m64n{choice.n_instr}k16, A from "
                   f"{'registers' if not choice.a.swizzle_bytes else 'shared memory'}"
                   + ("; its pipelined loop leaves one iteration's MMAs in flight "
                      "(wgmma.wait_group 1)" if cfg.get("in_flight") else "")})
        _gemm_wgmma.fix_layouts(call, ctx, choice)
        return
    k = int(a.extents[-2] if cfg["transpose_A"] else a.extents[-1])
    ampere = "mma.sync" if _tensor_cores(a, b, str(c.buffer.dtype), k) else "fma"
    why = f"not wgmma: {choice}"
    if ampere == "fma" and _tensor_core_types(a, b, str(c.buffer.dtype), k) and \
            not (_rows_aligned(a) and _rows_aligned(b)):
        why += "; not mma.sync: a part of a shared tile whose rows start off a 16-byte line"
    ctx.plan.instructions.append({"op": "gemm", "loc": loc, **names, "instruction": ampere,
                                  "why": why})
    wm, wn = warp_grid(cfg["policy"], m, n, ctx.warps)
    ctx.plan.gemm_warps[call] = (wm, wn)
    if is_fragment(c.buffer):
        ctx.assign(c.buffer, Fragment.accumulator(m, n, wm, wn), "T.gemm accumulator")
    for operand in (a, b):  # tensor cores read 16-byte rows: swizzle against conflicts
        buf = operand.buffer
        if buf.scope().startswith("shared") and as_dtype(str(buf.dtype)).bits == 16 and \
                buf.name not in ctx.plan.shared_layouts:
            tile = tuple(int(s) for s in buf.shape)[-2:]
            ctx.plan.shared_layouts[buf.name] = Layout.swizzled(tile, 16)
    if is_fragment(a.buffer):
        if cfg["transpose_A"]:
            raise LayoutConflict(a.buffer.name,
                                 "a register A operand of T.gemm cannot be transposed")
        k = int(a.buffer.shape[-1])
        ctx.assign(a.buffer, Fragment.operand_a(m, k, wm, wn), "T.gemm A operand")


# ---------------------------------------------------------------- loop semantics (CPU)


def lower_loops(call):
    a, b, c = regions(call)
    cfg = config(call)
    transpose_a, transpose_b = cfg["transpose_A"], cfg["transpose_B"]
    m, n = _shape(c)
    k_extent = _shape(a)[0 if transpose_a else 1]
    i, j, k = (tirx.Var(name, "int32") for name in ("i", "j", "k"))
    a_val = tirx.BufferLoad(a.buffer, _at(a, k, i) if transpose_a else _at(a, i, k))
    b_val = tirx.BufferLoad(b.buffer, _at(b, j, k) if transpose_b else _at(b, k, j))
    acc = tirx.BufferLoad(c.buffer, _at(c, i, j))
    update = tirx.BufferStore(c.buffer, acc + to_expr(a_val, c.dtype) * to_expr(b_val, c.dtype),
                              _at(c, i, j))
    # i-k-j keeps the innermost loop contiguous in B and C (vectorizes); with Bᵀ, i-j-k does.
    order = [(i, m), (j, n), (k, k_extent)] if transpose_b else [(i, m), (k, k_extent), (j, n)]
    stmt = update
    for var, extent in reversed(order):
        stmt = tirx.For(var, 0, extent, tirx.ForKind.SERIAL, stmt)
    if cfg["clear_accum"]:
        stmt = tirx.SeqStmt([fill_loops(c, 0), stmt])
    return stmt


# ---------------------------------------------------------------- thread lowering (CUDA)


def _shape(region: Region):
    """The 2-d tile a region covers (a pipelined tile has a leading slot dimension)."""
    return [int(e) for e in region.extents][-2:]


def _at(region: Region, row, col):
    """Indices of element (row, col) of the tile, slot index included."""
    starts = list(region.starts)
    return starts[:-2] + [starts[-2] + row, starts[-1] + col]


def lower_threads(call, ctx):
    a, b, c = regions(call)
    cfg = config(call)
    if not is_fragment(c.buffer):
        raise TileLabTypeError("T.gemm accumulates into a fragment (T.alloc_fragment)")
    if call in ctx.plan.wgmma:
        return _gemm_wgmma.lower(call, ctx, ctx.plan.wgmma[call])
    ta, tb = bool(cfg["transpose_A"]), bool(cfg["transpose_B"])
    m, n = _shape(c)
    k = _shape(a)[0] if ta else _shape(a)[1]
    c_local = ctx.local(c.buffer)
    stmts = []
    if cfg.get("clear_accum"):
        stmts.append(unrolled_registers(c_local, lambda reg: to_expr(0, str(c_local.dtype))))
    if not _tensor_cores(a, b, str(c_local.dtype), k):
        stmts.append(_gemm_fma(ctx, a, b, c, ta, tb, k))
        return seq(stmts)

    wm, wn = ctx.plan.gemm_warps[call]
    tile_m, tile_n = m // wm, n // wn
    mt, nt, kt = tile_m // 16, tile_n // 8, k // 16
    tx = ctx.tx
    warp, lane = tirx.floordiv(tx, 32), tirx.floormod(tx, 32)
    warp_m, warp_n = (tirx.floordiv(warp, wn), tirx.floormod(warp, wn)) if wn > 1 else (warp, 0)
    a_in_registers = is_fragment(a.buffer)
    a_regs = None if a_in_registers else tirx.decl_buffer((mt * 8,), a.dtype, name="a_frag",
                                                          scope="local")
    b_regs = tirx.decl_buffer((nt * 4,), b.dtype, name="b_frag", scope="local")
    kk = tirx.Var("kk", "int32")
    body = []
    for mi in range(mt):
        if a_in_registers:
            continue
        m0 = warp_m * tile_m + mi * 16
        if not ta:  # A is MxK in shared memory
            row, col = m0 + tirx.floormod(lane, 16), kk * 16 + tirx.floordiv(lane, 16) * 8
            body.append(extern("tl::ldmatrix_x4", address(a_regs, [mi * 8]),
                                ctx.address(a.buffer, _at(a, simplify(row), simplify(col)))))
        else:  # A is KxM: load transposed 8x8 pieces
            row = kk * 16 + tirx.floormod(lane, 8) + tirx.floordiv(lane, 16) * 8
            col = m0 + tirx.floormod(tirx.floordiv(lane, 8), 2) * 8
            body.append(extern("tl::ldmatrix_x4_trans", address(a_regs, [mi * 8]),
                                ctx.address(a.buffer, _at(a, simplify(row), simplify(col)))))
    ni = 0
    while ni < nt:  # two 16x8 B tiles per ldmatrix.x4 where possible, else one per .x2
        pair = ni + 1 < nt
        n0 = warp_n * tile_n + ni * 8
        if not tb:  # B is KxN: rows of K, transposed into the column-major operand
            row = kk * 16 + tirx.floormod(lane, 16)
            col = n0 + (tirx.floordiv(lane, 16) * 8 if pair else 0)
            name = "tl::ldmatrix_x4_trans" if pair else "tl::ldmatrix_x2_trans"
        else:  # B is NxK: already the operand's column-major order
            row = n0 + tirx.floormod(lane, 8) + (tirx.floordiv(lane, 16) * 8 if pair else 0)
            col = kk * 16 + tirx.floormod(tirx.floordiv(lane, 8), 2) * 8
            name = "tl::ldmatrix_x4" if pair else "tl::ldmatrix_x2"
        body.append(extern(name, address(b_regs, [ni * 4]),
                            ctx.address(b.buffer, _at(b, simplify(row), simplify(col)))))
        ni += 2 if pair else 1
    a_local = ctx.local(a.buffer) if a_in_registers else None
    for mi in range(mt):
        for ni in range(nt):
            a_ptr = address(a_local, [(mi * kt) * 8 + kk * 8]) if a_in_registers else \
                address(a_regs, [mi * 8])
            body.append(extern("tl::mma_m16n8k16", address(c_local, [(mi * nt + ni) * 4]),
                                a_ptr, address(b_regs, [ni * 4])))
    loop = tirx.For(kk, 0, kt, tirx.ForKind.UNROLLED, seq(body))
    allocs = [tirx.AllocBuffer(b_regs)] + ([] if a_in_registers else [tirx.AllocBuffer(a_regs)])
    stmts.extend(allocs + [loop])
    return seq(stmts)


def _gemm_fma(ctx, a: Region, b: Region, c: Region, ta: bool, tb: bool, k: int):
    """C[i, j] += sum_k A[i, k] * B[k, j] for each of this thread's C registers."""
    for operand in (a, b):
        if is_fragment(operand.buffer):
            raise TileLabTypeError(
                f"T.gemm with a register operand {operand.buffer.name!r} needs float16 or "
                "bfloat16 tiles with K a multiple of 16")
    frag = ctx.layout_of(c.buffer)
    local = ctx.local(c.buffer)
    elements = thread_elements(frag)
    dtype = str(local.dtype)
    kv = tirx.Var("k", "int32")
    stmts = []
    for reg in range(frag.local_size):
        if all(elements[t][reg] is None for t in range(frag.threads)):
            continue
        i, j = ctx.inverse(frag, reg)[:2]
        av = tirx.BufferLoad(a.buffer, _at(a, kv, i) if ta else _at(a, i, kv))
        bv = tirx.BufferLoad(b.buffer, _at(b, j, kv) if tb else _at(b, kv, j))
        update = tirx.BufferStore(local, tirx.BufferLoad(local, [reg]) + to_expr(av, dtype)
                                  * to_expr(bv, dtype), [reg])
        stmts.append(tirx.For(kv, 0, k, tirx.ForKind.SERIAL, update))
    return seq(stmts)


def gpu_operands(call) -> list:
    """B from shared memory; A from shared memory, or registers where the tensor cores
    take it (16-bit types, K a multiple of 16); the accumulator in registers (read unless
    clear_accum)."""
    a, b, c = regions(call)
    k = int(a.extents[-2] if config(call)["transpose_A"] else a.extents[-1])
    a_places = ("shared", "fragment") if _tensor_core_types(a, b, str(c.buffer.dtype), k) \
        else ("shared",)
    return [(0, a_places, True, False), (1, ("shared",), True, False),
            (2, ("fragment",), not config(call).get("clear_accum"), True)]


register(TileOp("gemm", primitives=(gemm,), effects=effects, fix_layouts=fix_layouts,
                lowerings={"cpu": lower_loops, "cuda": lower_threads},
                gpu_operands=gpu_operands))
