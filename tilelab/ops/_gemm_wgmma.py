"""`T.gemm` on Hopper (sm_90a): warpgroup MMA, `wgmma.mma_async`.

On Ampere each warp multiplies 16x8 tiles after loading its operands from
shared memory into registers (`ldmatrix`, then `mma.sync`). Hopper adds a
bigger instruction: four warps - a *warpgroup*, 128 threads - issue one
`wgmma.mma_async.m64nNk16` together and the tensor cores read both operands
straight from shared memory. Nothing is loaded into registers first; the
instruction names each operand by a 64-bit *matrix descriptor*: the tile's
shared address, the byte distance between groups of 8 rows (and between
column panels), and a swizzle mode.

The descriptor can only describe tiles stored the way the tensor cores read
them (`Layout.wgmma_panels`): swizzle atoms of 8 rows x 128 (or 64, 32) bytes
whose 16-byte chunks are XOR-permuted by the row, wide tiles cut into column
panels one atom wide. So on sm_90a, layout inference gives the operand tiles
that layout, and every `T.copy` into them writes there.

Per `T.gemm` each warpgroup then runs:

1. `fence.proxy.async`: the tile copies wrote shared memory through ordinary
   stores; the tensor cores read it through the *async proxy*, so make the
   writes visible to it (not needed for tiles that TMA wrote: it writes
   through the async proxy itself; a pipelined loop fences the tiles it only
   reads once, before it);
2. `wgmma.fence`, then for each 16-wide step along K and each 64-row piece of
   the warpgroup's tile, one `wgmma.mma_async` (N up to 256 at a time),
   accumulating into the fp32 registers laid out as `Fragment.wgmma_accumulator`;
3. `wgmma.commit_group` and `wgmma.wait_group 0`: the instructions run
   asynchronously; wait for them before the registers or the tiles are used.
   In a pipelined loop that only multiplies (`passes/pipeline_loops.py`), the
   call is marked `in_flight`: `wgmma.wait_group 1` waits only for the previous
   iteration's instructions, and these stay in flight while the threads go on.
   MMAs of one shape into the same accumulators run in order, so the next
   iteration's may follow them; the `gemm_wait` after the loop waits for all.

Where the program keeps A in registers (FlashAttention's P), the `rs` form
takes A from the threads' registers (layout `Fragment.wgmma_operand_a`).

Tiles the instruction cannot take (fp32 inputs, K not a multiple of 16, a
warpgroup tile not a multiple of 64 rows, ...) stay on the Ampere path; the
reason goes into the Trace.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import tirx

from ..ir.dtypes import as_dtype
from ..ir.layout import Fragment, Layout, fdiv, fmod
from ..ir.tile_ops import Region, config, regions
from ._lowering import address, extern, is_fragment, seq, simplify, unrolled_registers

_TYPES = {"float16": "f16", "bfloat16": "bf16"}
_SWIZZLE_MODES = {128: 3, 64: 2, 32: 1}  # the encoder's numbering (CUtensorMapSwizzle)


@dataclass(frozen=True)
class Operand:
    """How one operand reaches the tensor cores."""

    k_major: bool  # K is the tile's contiguous dimension
    swizzle_bytes: int = 0  # 0: from registers (A only)


@dataclass(frozen=True)
class WgmmaPlan:
    """What layout inference decided for one T.gemm; the lowering follows it."""

    groups: tuple  # warpgroups along M and N
    n_instr: int  # N of each wgmma instruction
    a: Operand
    b: Operand


# ---------------------------------------------------------------- the decision


def warpgroup_grid(policy: str, m: int, n: int, groups: int) -> tuple[int, int] | None:
    """Split `groups` warpgroups over an MxN tile (64-row pieces, N a multiple of 8)."""
    candidates = [(gm, groups // gm) for gm in range(1, groups + 1) if groups % gm == 0 and
                  m % (64 * gm) == 0 and n % (8 * (groups // gm)) == 0]
    if not candidates:
        return None
    if policy == "FullRow":
        return max(candidates, key=lambda c: c[0])
    if policy == "FullCol":
        return max(candidates, key=lambda c: c[1])
    return min(candidates, key=lambda c: (abs(m / c[0] - n / c[1]), -c[0]))


def _swizzle(tile, k_major: bool, mn_step: int, taken) -> int | None:
    """The widest swizzle atom (128, 64, 32 bytes) that tiles a 16-bit operand.

    K-major: one instruction reads 16 K (32 bytes) of a row, so an atom row must
    hold whole steps. MN-major: one instruction spans `mn_step` of the contiguous
    dimension, which must be whole atoms. `taken`: a wgmma layout the tile
    already has (from another GEMM); only that one will do then.
    """
    rows, cols = tile
    for width in (128, 64, 32):
        elements = width // 2
        if taken is not None and taken != width:
            continue
        if rows % 8 or cols % elements:
            continue
        if k_major and elements % 16:
            continue
        if not k_major and mn_step % elements:
            continue
        return width
    return None


def plan(call, ctx) -> WgmmaPlan | str:
    """A WgmmaPlan for this T.gemm, or why it stays on the Ampere path."""
    if ctx.wgmma_off:
        return ctx.wgmma_off
    a, b, c = regions(call)
    cfg = config(call)
    ta, tb = bool(cfg["transpose_A"]), bool(cfg["transpose_B"])
    if a.dtype not in _TYPES or b.dtype != a.dtype or str(c.buffer.dtype) != "float32":
        return f"wgmma here takes float16/bfloat16 A and B into float32 (got {a.dtype}, " \
               f"{b.dtype} -> {c.buffer.dtype})"
    if not is_fragment(c.buffer):
        return "the accumulator is not a fragment"
    if is_fragment(b.buffer) or not b.buffer.scope().startswith("shared"):
        return "B must come from shared memory"
    a_regs = is_fragment(a.buffer)
    if not (a_regs or a.buffer.scope().startswith("shared")):
        return "A must come from shared memory or registers"
    if a_regs and ta:
        return "a register A operand cannot be transposed"
    m, n = (int(s) for s in c.buffer.shape[-2:])
    k = int(a.extents[-2] if ta else a.extents[-1])
    if k % 16:
        return f"K = {k} is not a multiple of 16"
    if ctx.threads % 128:
        return f"{ctx.threads} threads are not whole warpgroups (128 threads each)"
    grid = warpgroup_grid(cfg["policy"], m, n, ctx.threads // 128)
    if grid is None:
        return f"a {m}x{n} tile does not split among {ctx.threads // 128} warpgroup(s) " \
               "in 64-row pieces"
    gm, gn = grid
    n_wg = n // gn
    pieces = -(-n_wg // 256)
    n_instr = n_wg // pieces
    if n_wg % pieces or n_instr % 8:
        return f"N = {n_wg} per warpgroup does not split into wgmma widths"
    operands = []
    for region, k_major, mn_step, role in ((a, not ta, 64, "A"), (b, tb, n_instr, "B")):
        if is_fragment(region.buffer):
            operands.append(Operand(k_major=True))
            continue
        tile = tuple(int(s) for s in region.buffer.shape[-2:])
        known = ctx.plan.shared_layouts.get(region.buffer.name)
        taken = None
        if known is not None:
            kind = known.recipe.get("kind")
            if kind == "wgmma_panels":
                taken = known.recipe["swizzle_bytes"]
            elif kind != "swizzled":  # tilelab's own default may be replaced, a user's not
                return f"{role} ({region.buffer.name}) has a layout of the user's"
        width = _swizzle(tile, k_major, mn_step, taken)
        if width is None:
            return f"{role} tile {tile[0]}x{tile[1]} fits no wgmma swizzle atom"
        misaligned = _misaligned(region, k_major, width)
        if misaligned:
            return f"{role} is a part of {region.buffer.name} {misaligned}"
        operands.append(Operand(k_major=k_major, swizzle_bytes=width))
    return WgmmaPlan((gm, gn), n_instr, *operands)


def _misaligned(region: Region, k_major: bool, width: int) -> str:
    """Why an instruction's piece of this part of a shared tile (stored in atoms `width`
    bytes wide) would not start where a descriptor can point; '' where it would. The
    tensor cores swizzle an address by its place in an atom of 8 rows, so a part starts
    on an atom's row boundary; along the contiguous dimension at a whole 16-element step
    of K (K-major), or at a panel's edge (MN-major: a descriptor steps panel by panel)."""
    row, col = (int(s) for s in region.starts[-2:])
    step = 16 if k_major else width // 2
    if row % 8:
        return f"starting at row {row}, not a multiple of 8"
    if col % step:
        return f"starting at column {col}, not a multiple of {step}"
    return ""


def fix_layouts(call, ctx, p: WgmmaPlan) -> None:
    """The accumulator's (and a register A's) fragment, the operand tiles' panels."""
    a, b, c = regions(call)
    m, n = (int(s) for s in c.buffer.shape[-2:])
    ctx.assign(c.buffer, Fragment.wgmma_accumulator(m, n, *p.groups), "T.gemm accumulator")
    if is_fragment(a.buffer):
        k = int(a.buffer.shape[-1])
        ctx.assign(a.buffer, Fragment.wgmma_operand_a(m, k, *p.groups), "T.gemm A operand")
    for region, operand in ((a, p.a), (b, p.b)):
        if operand.swizzle_bytes:
            buf = region.buffer
            tile = tuple(int(s) for s in buf.shape[-2:])
            bits = as_dtype(str(buf.dtype)).bits
            ctx.plan.shared_layouts[buf.name] = Layout.wgmma_panels(tile, bits,
                                                                    operand.swizzle_bytes)


# ---------------------------------------------------------------- the code


def _ptx():
    from tvm.backend.cuda.ptx import PTXNamespace

    return PTXNamespace()


def proxy_fence():
    """`fence.proxy.async.shared::cta`: this thread's ordinary shared-memory accesses so far
    ordered before its async-proxy ones (the tensor cores', TMA's) that follow."""
    return tirx.Evaluate(_ptx().fence.proxy.async_.shared__cta())


class _Descriptors:
    """Matrix descriptors of one shared operand tile.

    The descriptor of the tile's start is built once per GEMM (TVM's
    `cuda.wgmma_encode_matrix_descriptor`); an instruction's piece of the tile
    starts `offset` bytes further, and the start-address field counts 16-byte
    units, so its descriptor is the tile's plus offset / 16.
    """

    def __init__(self, name: str, region: Region, operand: Operand):
        from tvm.backend.cuda.op import cuda_wgmma_encode_matrix_descriptor

        buf = region.buffer
        self.rows = int(buf.shape[-2])
        self.first = tuple(int(s) for s in region.starts[-2:])  # a part's place in the tile
        self.width = operand.swizzle_bytes  # bytes of an atom row
        self.k_major = operand.k_major
        self.local = tirx.decl_buffer((1,), "uint64", name=name, scope="local")
        start = address(buf, list(region.starts[:-2]) + [0, 0])
        leading, stride = descriptor_strides(self.rows, self.width, self.k_major)
        self.alloc = tirx.AllocBuffer(self.local)
        self.encode = seq([
            extern(f"tl::wgmma_check_aligned<{8 * self.width}>", start),
            tirx.Evaluate(cuda_wgmma_encode_matrix_descriptor(
                address(self.local, [0]), start, leading >> 4, stride >> 4,
                _SWIZZLE_MODES[self.width]))])

    def piece(self, mn, k):
        """The descriptor of the piece that starts at (M or N index, K index) of the
        operand (of the part, where the operand is a part of the tile)."""
        row, col = (mn, k) if self.k_major else (k, mn)
        row, col = row + self.first[0], col + self.first[1]
        offset = simplify(tirx.floordiv(piece_offset(self.rows, self.width, row, col), 16))
        return tirx.BufferLoad(self.local, [0]) + tirx.Cast("uint64", offset)


def piece_offset(rows: int, width: int, row, col):
    """Bytes from a `Layout.wgmma_panels` tile's start to element (row, col), before the
    swizzle (the tensor cores swizzle the address themselves). 16-bit elements."""
    elements = width // 2
    return fdiv(col, elements) * (rows * width) + row * width + fmod(col, elements) * 2


def descriptor_strides(rows: int, width: int, k_major: bool) -> tuple[int, int]:
    """(leading, stride) byte offsets of a tile's descriptor.

    K-major: an instruction reads 16 K of each row, inside one atom row, so the leading
    offset is unused; 8-row groups are one atom (8 x `width` bytes) apart. MN-major:
    the contiguous dimension crosses atoms, which sit a panel apart (leading); K walks
    down the rows, 8 at a time (stride).
    """
    return (16 if k_major else rows * width), 8 * width


def lower(call, ctx, p: WgmmaPlan):
    a, b, c = regions(call)
    cfg = config(call)
    ptx = _ptx()
    c_local = ctx.local(c.buffer)
    registers = int(c_local.shape[0])
    m, n = (int(s) for s in c.buffer.shape[-2:])
    ta = bool(cfg["transpose_A"])
    k = int(a.extents[-2] if ta else a.extents[-1])
    gm, gn = p.groups
    m_wg, n_wg = m // gm, n // gn
    group = tirx.floordiv(ctx.tx, 128)  # this thread's warpgroup, in the gm x gn grid
    group_m = tirx.floordiv(group, gn) if gm > 1 else 0
    group_n = tirx.floormod(group, gn) if gn > 1 else 0
    a_regs = is_fragment(a.buffer)
    b_desc = _Descriptors("b_desc", b, p.b)
    a_desc = None if a_regs else _Descriptors("a_desc", a, p.a)
    a_local = ctx.local(a.buffer) if a_regs else None
    stmts = []
    if cfg.get("clear_accum"):
        stmts.append(unrolled_registers(c_local, lambda reg: tirx.const(0.0, "float32")))
    descriptors = [d for d in (a_desc, b_desc) if d is not None]
    stmts += [d.alloc for d in descriptors] + [d.encode for d in descriptors]
    # the copies wrote the tiles with ordinary stores (the generic proxy); the tensor cores
    # read them through the async proxy (tiles that TMA wrote are there already, and a
    # pipelined loop fences the tiles it does not write once, before it: `proxy_fenced`)
    if not cfg.get("proxy_fenced"):
        stmts.append(proxy_fence())
    in_flight = bool(cfg.get("in_flight"))  # a pipelined loop's: wait for the previous ones
    if cfg.get("clear_accum") or not in_flight:
        # the accumulators' last writes stay before wgmma.fence (ptxas would count this as
        # a use of registers an MMA in flight writes, and wait for it there)
        stmts.append(extern(f"tl::wgmma_fence_registers<{registers}>", address(c_local, [0])))
    stmts.append(tirx.Evaluate(ptx.wgmma.fence.sync.aligned()))
    types = _TYPES[a.dtype]
    instr = getattr(ptx.wgmma.mma_async.sync.aligned, f"m64n{p.n_instr}k16").f32
    instr = getattr(getattr(instr, types), types)
    accumulate = ptx.pred(tirx.const(True, "bool"))  # D = A*B + D
    trans_a, trans_b = int(not p.a.k_major), int(not p.b.k_major)  # 1: MN-major
    for kk in range(k // 16):
        for mi in range(m_wg // 64):
            row0 = group_m * m_wg + mi * 64
            if a_regs:  # four 32-bit registers: this thread's 8 halves of the 64x16 piece
                first = mi * (k // 2) + kk * 8
                a_operand = [tirx.reinterpret("uint32", tirx.BufferLoad(
                    a_local, [tirx.Ramp(first + 2 * w, 1, 2)])) for w in range(4)]
            else:
                a_operand = [a_desc.piece(row0, kk * 16)]
            for ni in range(n_wg // p.n_instr):
                col0 = group_n * n_wg + ni * p.n_instr
                first = (mi * n_wg + ni * p.n_instr) // 2
                acc = [tirx.BufferLoad(c_local, [first + r]) for r in range(p.n_instr // 2)]
                imm = (1, 1, trans_b) if a_regs else (1, 1, trans_a, trans_b)
                stmts.append(tirx.Evaluate(instr(*acc, *a_operand, b_desc.piece(col0, kk * 16),
                                                 accumulate, *imm)))
    stmts.append(tirx.Evaluate(ptx.wgmma.commit_group.sync.aligned()))
    if in_flight:
        stmts.append(tirx.Evaluate(ptx.wgmma.wait_group.sync.aligned(1)))
    elif not cfg.get("wait_later"):  # (a `gemm_wait` follows: pipeline_loops._take_turns)
        stmts.append(wait_all(c_local))
    return seq(stmts)


def wait_all(c_local, pending: int = 0):
    """Wait for every MMA in flight but the `pending` groups committed last; then the
    accumulators in `c_local` (written by an earlier group) may be read."""
    registers = int(c_local.shape[0])
    return seq([
        tirx.Evaluate(_ptx().wgmma.wait_group.sync.aligned(pending)),
        # the accumulators changed behind the compiler's back: no read of them before the wait
        extern(f"tl::wgmma_fence_registers<{registers}>", address(c_local, [0]))])
