"""Lower `T.gemm` to tensor-core instructions.

The accumulator tile C (MxN) is split among the warps in a grid
(`infer_layouts.warp_grid`); each warp owns a block of 16x8 output tiles. For
every 16-wide step along K, a warp

1. loads its A tiles (16x16) with `ldmatrix.x4` from shared memory - or takes
   them straight from registers when A is a fragment (FlashAttention's P@V);
2. loads its B tiles (16x8), two at a time with `ldmatrix.x4` (`.trans` when B is
   stored KxN);
3. issues one `mma.sync.m16n8k16` per (A tile, B tile) pair, accumulating in
   fp32 registers laid out exactly as `Fragment.accumulator` says.

Tiles that do not fit the tensor cores (fp32 inputs, K not a multiple of 16)
fall back to per-thread multiply-adds over the thread's own C registers.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import TileLabTypeError
from ..ir.expr import to_expr
from ..ir.tile_ops import Region

_TENSOR_CORE_TYPES = ("float16", "bfloat16")


def _shape(region: Region):
    """The 2-d tile a region covers (a pipelined tile has a leading slot dimension)."""
    return [int(e) for e in region.extents][-2:]


def _at(region: Region, row, col):
    """Indices of element (row, col) of the tile, slot index included."""
    starts = list(region.starts)
    return starts[:-2] + [starts[-2] + row, starts[-1] + col]


def lower_gemm(lowering, stmt, a: Region, b: Region, c: Region, cfg: dict):
    from .lower_tile_ops_to_threads import _address, _extern, _is_fragment, _seq, simplify

    if not _is_fragment(c.buffer):
        raise TileLabTypeError("T.gemm accumulates into a fragment (T.alloc_fragment)")
    ta, tb = bool(cfg["transpose_A"]), bool(cfg["transpose_B"])
    m, n = _shape(c)
    k = _shape(a)[0] if ta else _shape(a)[1]
    c_local = lowering.local(c.buffer)
    stmts = []
    if cfg.get("clear_accum"):
        reg = tirx.Var("reg", "int32")
        stmts.append(tirx.For(reg, 0, int(c_local.shape[0]), tirx.ForKind.UNROLLED,
                              tirx.BufferStore(c_local, to_expr(0, str(c_local.dtype)), [reg])))
    tensor_cores = (a.dtype in _TENSOR_CORE_TYPES and b.dtype == a.dtype
                    and str(c_local.dtype) == "float32" and k % 16 == 0
                    and not _is_fragment(b.buffer))
    if not tensor_cores:
        stmts.append(_gemm_fma(lowering, a, b, c, ta, tb, k))
        return _seq(stmts)

    wm, wn = lowering.plan.gemm_warps[stmt]
    tile_m, tile_n = m // wm, n // wn
    mt, nt, kt = tile_m // 16, tile_n // 8, k // 16
    tx = lowering.tx
    warp, lane = tirx.floordiv(tx, 32), tirx.floormod(tx, 32)
    warp_m, warp_n = (tirx.floordiv(warp, wn), tirx.floormod(warp, wn)) if wn > 1 else (warp, 0)
    a_in_registers = _is_fragment(a.buffer)
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
            body.append(_extern("tl::ldmatrix_x4", _address(a_regs, [mi * 8]),
                                lowering.address(a.buffer, _at(a, simplify(row), simplify(col)))))
        else:  # A is KxM: load transposed 8x8 pieces
            row = kk * 16 + tirx.floormod(lane, 8) + tirx.floordiv(lane, 16) * 8
            col = m0 + tirx.floormod(tirx.floordiv(lane, 8), 2) * 8
            body.append(_extern("tl::ldmatrix_x4_trans", _address(a_regs, [mi * 8]),
                                lowering.address(a.buffer, _at(a, simplify(row), simplify(col)))))
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
        body.append(_extern(name, _address(b_regs, [ni * 4]),
                            lowering.address(b.buffer, _at(b, simplify(row), simplify(col)))))
        ni += 2 if pair else 1
    a_local = lowering.local(a.buffer) if a_in_registers else None
    for mi in range(mt):
        for ni in range(nt):
            a_ptr = _address(a_local, [(mi * kt) * 8 + kk * 8]) if a_in_registers else \
                _address(a_regs, [mi * 8])
            body.append(_extern("tl::mma_m16n8k16", _address(c_local, [(mi * nt + ni) * 4]),
                                a_ptr, _address(b_regs, [ni * 4])))
    loop = tirx.For(kk, 0, kt, tirx.ForKind.UNROLLED, _seq(body))
    allocs = [tirx.AllocBuffer(b_regs)] + ([] if a_in_registers else [tirx.AllocBuffer(a_regs)])
    stmts.extend(allocs + [loop])
    return _seq(stmts)


def _gemm_fma(lowering, a: Region, b: Region, c: Region, ta: bool, tb: bool, k: int):
    """C[i, j] += sum_k A[i, k] * B[k, j] for each of this thread's C registers."""
    from .infer_layouts import thread_elements
    from .lower_tile_ops_to_threads import _is_fragment, _seq

    for operand in (a, b):
        if _is_fragment(operand.buffer):
            raise TileLabTypeError(
                f"T.gemm with a register operand {operand.buffer.name!r} needs float16 or "
                "bfloat16 tiles with K a multiple of 16")
    frag = lowering.layout_of(c.buffer)
    local = lowering.local(c.buffer)
    elements = thread_elements(frag)
    dtype = str(local.dtype)
    kv = tirx.Var("k", "int32")
    stmts = []
    for reg in range(frag.local_size):
        if all(elements[t][reg] is None for t in range(frag.threads)):
            continue
        i, j = lowering.inverse(frag, reg)[:2]
        av = tirx.BufferLoad(a.buffer, _at(a, kv, i) if ta else _at(a, i, kv))
        bv = tirx.BufferLoad(b.buffer, _at(b, j, kv) if tb else _at(b, kv, j))
        update = tirx.BufferStore(local, tirx.BufferLoad(local, [reg]) + to_expr(av, dtype)
                                  * to_expr(bv, dtype), [reg])
        stmts.append(tirx.For(kv, 0, k, tirx.ForKind.SERIAL, update))
    return _seq(stmts)
