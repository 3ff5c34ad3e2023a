"""stmatrix: fragments that hold 8x8 matrices go to shared memory four matrices a warp.

The CPU cannot run the instruction, so the lowering's addresses are replayed here: each
lane of each warp gives the address of one matrix row, and the row's eight elements are
the ones the PTX ISA says the warp's lanes hold (lane 4r + c/2, register 2q + c%2 of the
group for row r, column c of matrix q). Every element of the copied region must land
where the tile's layout puts it, and nothing else may be written. The GPU runs the same
kernels in tests/test_tma_stores.py and examples/persistent_gemm.py against PyTorch.
"""

from __future__ import annotations

import pytest
from tvm import tirx

import tilelab
import tilelab.language as T
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.ir.layout import Fragment, Layout, holds_matrix_rows, thread_elements
from tilelab.ir.tile_ops import Region
from tilelab.ir.visit import substitute, walk
from tilelab.ops.copy import stmatrix_groups, stmatrix_store
from tilelab.passes.infer_layouts import LayoutPlan
from tilelab.passes.lower_tile_ops_to_threads import ThreadLowering
from tilelab.viz.banks import bank_conflict_view


def _lowering(frag: Fragment, shared_shape, shared_dtype: str, layout, fragment_dtype="float32"):
    f = tirx.decl_buffer(frag.shape, fragment_dtype, name="f", scope="local.fragment")
    s = tirx.decl_buffer(shared_shape, shared_dtype, name="s", scope="shared.dyn")
    plan = LayoutPlan()
    plan.fragments["f"] = frag
    if layout is not None:
        plan.shared_layouts["s"] = layout
    tx = tirx.Var("tx", "int32")
    ctx = ThreadLowering(plan, frag.threads, tx, [])
    ctx.locals["f"] = tirx.decl_buffer((frag.local_size,), fragment_dtype, name="f_local",
                                       scope="local")
    return ctx, f, s


_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "FloorDiv": lambda a, b: a // b, "FloorMod": lambda a, b: a % b,
           "And": lambda a, b: a and b, "Or": lambda a, b: a or b, "LT": lambda a, b: a < b,
           "LE": lambda a, b: a <= b, "EQ": lambda a, b: a == b,
           "BitwiseXor": lambda a, b: a ^ b, "BitwiseAnd": lambda a, b: a & b,
           "ShiftRight": lambda a, b: a >> b}


def _value(expr, tx: int):
    """An index expression of the lowering at thread `tx`, computed in Python."""
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var):
        return tx
    kind = type(expr).__name__
    if kind in _BINARY:
        return _BINARY[kind](_value(expr.a, tx), _value(expr.b, tx))
    raise TypeError(f"no rule for {kind}: {expr}")


def _replay(ctx, frag: Fragment, stmt, tile_size: int) -> dict:
    """offset in the tile -> (fragment element) written there by the lowered stmatrix."""
    calls = []  # (condition or None, offset expression, first register)

    def on_if(node):
        if isinstance(node.then_case, tirx.Evaluate):
            calls.append((node.condition, node.then_case.value))

    walk(stmt, tirx.IfThenElse, on_if)
    if not calls:
        walk(stmt, tirx.Evaluate, lambda e: calls.append((None, e.value)))
    elements = thread_elements(frag)
    written: dict = {}
    for cond, call in calls:
        assert call.args[0].value.startswith("tl::stmatrix_x4")
        offset = call.args[1].args[2]
        reg = int(call.args[2].args[0].indices[0])
        for warp in range(frag.threads // 32):
            active = []
            for lane in range(32):
                t = warp * 32 + lane
                on = cond is None or bool(_value(cond, t))
                active.append(on)
                if not on:
                    continue
                at = _value(offset, t)
                assert at % 8 == 0 and 0 <= at < tile_size  # one aligned 16-byte row
                q, r = divmod(lane, 8)
                for c in range(8):
                    element = elements[warp * 32 + 4 * r + c // 2][reg + 2 * q + c % 2]
                    assert at + c not in written, f"two stores into {at + c}"
                    written[at + c] = element
            assert len(set(active)) == 1, "a warp's lanes disagree whether to store"
    return written


def _expected(frag: Fragment, rows: tuple, shared_shape, layout) -> dict:
    expected = {}
    cols = shared_shape[-1]
    for per_thread in thread_elements(frag):
        for element in per_thread:
            if rows[0] <= element[0] < rows[1]:
                row, col = element[0] - rows[0], element[1]
                if layout is not None:
                    row, col = (int(x) for x in layout.place(row, col))
                expected[row * cols + col] = element
    return expected


CASES = {
    # 2 warpgroups side by side (GemmWarpPolicy.Square), half the rows at a time, into the
    # swizzled tile the compiler gives a shared tile written from a fragment
    "wgmma 128x256, rows 64-127, swizzled": (Fragment.wgmma_accumulator(128, 256, 1, 2),
                                             (64, 128), (64, 256), "float16", True),
    "wgmma 128x128, all rows, bfloat16": (Fragment.wgmma_accumulator(128, 128, 2, 1),
                                          (0, 128), (128, 128), "bfloat16", True),
    "mma 64x64 on 4 warps, row-major": (Fragment.accumulator(64, 64, 2, 2), (0, 64),
                                        (64, 64), "float16", False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_element_lands_where_the_layout_puts_it(case):
    frag, rows, shape, dtype, swizzled = CASES[case]
    layout = Layout.swizzled(shape, 16) if swizzled else None
    ctx, f, s = _lowering(frag, shape, dtype, layout)
    src = Region(f, (rows[0], 0), (rows[1] - rows[0], frag.shape[1]))
    dst = Region.whole(s)
    groups = stmatrix_groups(frag, src, dst)
    assert groups, "the copy should go by stmatrix"
    written = _replay(ctx, frag, stmatrix_store(ctx, src, dst, groups), shape[0] * shape[1])
    assert written == _expected(frag, rows, shape, layout)


def test_a_region_given_by_a_loop_variable_is_stored_under_a_warp_uniform_condition():
    """`c[part * 64:(part + 1) * 64, :]`: the region is not known until the loop unrolls;
    every group a warp holds lies wholly on one side of its bounds."""
    frag = Fragment.wgmma_accumulator(128, 256, 1, 2)
    ctx, f, s = _lowering(frag, (64, 256), "float16", Layout.swizzled((64, 256), 16))
    part = tirx.Var("part", "int32")
    src = Region(f, (part * 64, 0), (64, 256))
    groups = stmatrix_groups(frag, src, Region.whole(s))
    assert groups == list(range(0, frag.local_size, 8))
    stmt = stmatrix_store(ctx, src, Region.whole(s), groups)
    for value in (0, 1):
        fixed = substitute(stmt, {part: tirx.const(value, "int32")})
        written = _replay(ctx, frag, fixed, 64 * 256)
        layout = Layout.swizzled((64, 256), 16)
        assert written == _expected(frag, (64 * value, 64 * (value + 1)), (64, 256), layout)


def test_copies_stmatrix_cannot_take_keep_the_threads_stores():
    wgmma = Fragment.wgmma_accumulator(128, 256, 1, 2)
    ctx, f, s = _lowering(wgmma, (8, 256), "float16", None)
    # rows 8-15 cut each warp's 16-row groups: lanes holding rows 0-7 would sit out
    assert stmatrix_groups(wgmma, Region(f, (8, 0), (8, 256)), Region.whole(s)) == []
    # a 32-bit tile, and a thread's widest access narrowed below 16 bytes
    ctx, f, s32 = _lowering(wgmma, (128, 256), "float32", None)
    assert stmatrix_groups(wgmma, Region.whole(f), Region.whole(s32)) == []
    ctx, f, s = _lowering(wgmma, (128, 256), "float16", None)
    assert stmatrix_groups(wgmma, Region.whole(f), Region.whole(s), widest=4) == []
    # a fragment dealt in rows of 8 elements a thread holds no 8x8 matrices
    spread = Fragment.row_spread((64, 64), 128, 8)
    assert not holds_matrix_rows(spread)
    ctx, f, s = _lowering(spread, (64, 64), "float16", None)
    assert stmatrix_groups(spread, Region.whole(f), Region.whole(s)) == []


@tilelab.jit
def _gemm_through_shared(A, B, block: int = 128):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=256) as (bx, by):
        a = T.alloc_shared((block, 64), T.float16)
        b = T.alloc_shared((64, block), T.float16)
        acc = T.alloc_fragment((block, block), T.float32)
        c = T.alloc_shared((block, block), T.float16)
        T.clear(acc)
        for k in T.Pipelined(T.ceildiv(K, 64), num_stages=3):
            T.copy(A[by * block, k * 64], a)
            T.copy(B[k * 64, bx * block], b)
            T.gemm(a, b, acc)
        T.copy(acc, c)
        T.copy(c, C[by * block, bx * block])
    return C


@tilelab.jit
def _half_sums_through_shared(A, B):
    """The sums rounded into a float16 fragment of the accumulator's layout first."""
    A: T.Tensor((128, 64), T.float16)
    B: T.Tensor((64, 128), T.float16)
    C = T.empty((128, 128), T.float16)
    with T.Kernel(1, threads=128):
        a, b = T.alloc_shared((128, 64), T.float16), T.alloc_shared((64, 128), T.float16)
        acc = T.alloc_fragment((128, 128), T.float32)
        rounded = T.alloc_fragment((128, 128), T.float16)
        c = T.alloc_shared((128, 128), T.float16)
        T.copy(A, a)
        T.copy(B, b)
        T.gemm(a, b, acc, clear_accum=True)
        T.copy(acc, rounded)
        T.copy(rounded, c)
        T.copy(c, C)
    return C


needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


@needs_nvcc
def test_hopper_epilogue_uses_stmatrix_and_says_so():
    import torch

    a, b = torch.empty(256, 192, dtype=torch.float16), torch.empty(192, 256, dtype=torch.float16)
    kernel = _gemm_through_shared.compile(a, b, target="cuda:sm_90a")
    source = kernel.get_kernel_source()
    assert source.count("tl::stmatrix_x4_float_as_half") == 8  # 64 registers, 8 at a time
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in kernel.trace.code["ptx"]
    record = next(r for r in kernel.trace.instructions if r["op"] == "copy" and r["dst"] == "c")
    assert record["kind"] == "stmatrix" and record["instruction"].startswith("stmatrix.x4")
    # the bank view replays the same lanes: 16 bytes each, eight rows of one matrix column
    # in a phase - on the swizzled tile no two in a bank, on row-major all eight in one
    view = bank_conflict_view(kernel.trace, "c")
    (i,) = [i for i, a in enumerate(view.accesses) if a["instruction"].startswith("stmatrix")]
    assert view.accesses[i]["lane_bytes"] == 16
    assert len(view.accesses[i]["instructions"]) == 8 * 8  # 8 warps, 8 groups each
    assert max(view.degrees[(i, "swizzled")]) == 1 and max(view.degrees[(i, "row-major")]) == 8
    off = _gemm_through_shared.compile(a, b, target="cuda:sm_90a",
                                       pass_configs={PassConfigKey.TL_DISABLE_STMATRIX: True})
    assert "tl::stmatrix" not in off.get_kernel_source()
    ampere = _gemm_through_shared.compile(a, b, target="cuda:sm_80")
    assert "tl::stmatrix" not in ampere.get_kernel_source()


@needs_nvcc
def test_a_16_bit_fragment_goes_as_it_is():
    kernel = _half_sums_through_shared.compile(target="cuda:sm_90a")
    assert kernel.get_kernel_source().count("tl::stmatrix_x4_b16(") == 128 * 128 // 128 // 8
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16" in kernel.trace.code["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["float32 sums", "float16 fragment"])
def test_stmatrix_stores_what_the_threads_stored(program):
    """On the GPU: the same kernels with and without stmatrix, bit for bit, and PyTorch."""
    import torch

    a = torch.randn(256, 192, device="cuda", dtype=torch.float16)
    b = torch.randn(192, 256, device="cuda", dtype=torch.float16)
    off = {PassConfigKey.TL_DISABLE_STMATRIX.value: True}
    if program == "float32 sums":
        on_kernel = _gemm_through_shared.compile(a, b)
        off_kernel = _gemm_through_shared.compile(a, b, pass_configs=off)
    else:
        a, b = a[:128, :64].contiguous(), b[:64, :128].contiguous()
        on_kernel = _half_sums_through_shared.compile()
        off_kernel = _half_sums_through_shared.compile(pass_configs=off)
    assert "tl::stmatrix" in on_kernel.get_kernel_source()
    on, plain = on_kernel(a, b), off_kernel(a, b)
    assert torch.equal(on, plain)
    torch.testing.assert_close(on, (a.float() @ b.float()).half(), rtol=1e-2, atol=1e-2)


@needs_nvcc
def test_the_bank_view_shows_the_persistent_epilogue_part_by_part():
    """`c_fragment[:, part * 128:(part + 1) * 128]` into a 128-column tile: the view replays
    a part in the tile's coordinates (each part meets the tile alike): per warp, eight groups
    of its 16 rows (the warpgroups split the rows), every row of the tile and each of its
    eight-column pieces written, conflict-free on the kernel's panels, 8-way on row-major."""
    from examples.persistent_gemm import persistent_gemm_kernel
    from tests.test_tma_stores import _meta

    kernel = persistent_gemm_kernel.compile(_meta(1000, 520), _meta(520, 776),
                                            target="cuda:sm_90a")
    view = bank_conflict_view(kernel.trace, "c_shared")
    (i,) = [i for i, a in enumerate(view.accesses) if a["instruction"].startswith("stmatrix")]
    assert len(view.accesses[i]["instructions"]) == 8 * 8  # 8 consumer warps, 8 groups
    lanes = [lane for lanes in view.accesses[i]["instructions"] for lane in lanes]
    assert {row for row, _ in lanes} == set(range(128))
    assert {col for _, col in lanes} == set(range(0, 128, 8))  # 16-byte row pieces
    assert max(view.degrees[(i, "this kernel's")]) == 1
    assert max(view.degrees[(i, "row-major")]) == 8
