"""The layout algebra (tilelab/ir/layout.py): who holds which element of a fragment,
where a shared tile's elements live, and the operations the passes rely on.

Fragments are checked against the PTX ISA's tables, and the algebra's promises as
properties over every element: `index_of` inverts the forward map, `reduce` keeps each
result row on every thread that held part of it, a swizzle permutes 16-byte chunks
within a row, and a recipe's JSON rebuilds the same fragment.
"""

from __future__ import annotations

import itertools

import pytest
from tvm import sym, tirx

from tilelab.ir.layout import Fragment, Layout
from tilelab.ir.visit import substitute
from tilelab.viz import layout_tables, layout_view
from tilelab.viz.layouts import LayoutGrid

# ---------------------------------------------------------------- m16n8k16 fragments
# The PTX ISA's tables for mma.m16n8k16 with 16-bit A/B and 32-bit C/D
# ("Matrix Fragments for mma.m16n8k16"): groupID = lane >> 2,
# threadID_in_group = lane % 4, and register i of a lane holds
#   A (16x16): row = groupID (+8 for a2, a3, a6, a7), col = tig*2 + (i & 1) (+8 for a4..a7)
#   B (16x8):  row = tig*2 + (i & 1) (+8 for b2, b3), col = groupID
#   C (16x8):  row = groupID (+8 for c2, c3),          col = tig*2 + (i & 1)


def ptx_a(lane, i):
    group, tig = lane >> 2, lane % 4
    return group + (8 if i in (2, 3, 6, 7) else 0), tig * 2 + (i & 1) + (8 if i >= 4 else 0)


def ptx_b(lane, i):
    group, tig = lane >> 2, lane % 4
    return tig * 2 + (i & 1) + (8 if i in (2, 3) else 0), group


def ptx_c(lane, i):
    group, tig = lane >> 2, lane % 4
    return group + (8 if i in (2, 3) else 0), tig * 2 + (i & 1)


@pytest.mark.parametrize("fragment, ptx, registers", [
    (Fragment.mma_a(), ptx_a, 8), (Fragment.mma_b(), ptx_b, 4), (Fragment.mma_c(), ptx_c, 4)])
def test_mma_fragments_follow_the_ptx_tables(fragment, ptx, registers):
    grid = LayoutGrid(layout_tables(fragment))
    thread, local = grid.thread, grid.local
    for lane in range(32):
        for i in range(registers):
            row, col = ptx(lane, i)
            assert fragment.owners(row, col) == [(lane, i)]
            assert (thread[0, row, col], local[0, row, col]) == (lane, i)


@pytest.mark.parametrize("fragment, element, owner", [
    # A (9, 10): row 9 = groupID 1 + 8, col 10 = tig 1 * 2 + 0 + 8 -> a6 of lane 1*4 + 1
    (Fragment.mma_a(), (9, 10), "T5:R6"),
    (Fragment.mma_a(), (0, 0), "T0:R0"),
    (Fragment.mma_a(), (15, 15), "T31:R7"),
    # B (11, 3): row 11 = tig 1 * 2 + 1 + 8 -> b3; col 3 = groupID 3 -> lane 3*4 + 1
    (Fragment.mma_b(), (11, 3), "T13:R3"),
    (Fragment.mma_b(), (0, 7), "T28:R0"),
    # C (10, 5): row 10 = groupID 2 + 8, col 5 = tig 2 * 2 + 1 -> c3 of lane 2*4 + 2
    (Fragment.mma_c(), (10, 5), "T10:R3"),
    (Fragment.mma_c(), (7, 0), "T28:R0"),
])
def test_hand_picked_mma_elements(fragment, element, owner):
    assert LayoutGrid(layout_tables(fragment)).cell_label(*element) == [owner]


@pytest.mark.parametrize("element, owner", [
    # 4 warps along M (16 rows each), each a row of eight 16x8 mma_c tiles along N:
    # warp = i // 16, tile = j // 8; thread = 32*warp + (i % 8)*4 + (j % 8)//2,
    # register = 4*tile + 2*((i % 16) // 8) + j % 2
    ((0, 0), "T0:R0"), ((0, 1), "T0:R1"), ((8, 0), "T0:R2"),
    ((17, 9), "T36:R5"),  # warp 1, row 1, tile 1, col 1 -> lane 4, 4 + 0 + 1
    ((40, 18), "T65:R10"),  # warp 2, row 8 of its 16, tile 2, col 2 -> lane 1, 8 + 2 + 0
    ((63, 63), "T127:R31"),  # warp 3, row 15, tile 7, col 7 -> lane 31, 28 + 2 + 1
])
def test_accumulator_64x64_on_4x1_warps(element, owner):
    fragment = Fragment.accumulator(64, 64, 4, 1)
    assert LayoutGrid(layout_tables(fragment)).cell_label(*element) == [owner]
    view = layout_view(fragment, "acc")
    t, r = (int(x) for x in owner[1:].split(":R"))
    assert view.data["layout"]["thread"][0][element[0]][element[1]] == t
    assert view.data["layout"]["local"][0][element[0]][element[1]] == r


def test_replicated_fragments_name_their_copies():
    rows = Fragment.accumulator_rows(64, 4, 1)  # row i on the 4 lanes that hold it
    grid = LayoutGrid(layout_tables(rows))
    assert grid.cell_label(0, 17) == ["T36:R0", "×4"]
    assert sorted(int(t) for t in grid.thread[:, 0, 17]) == [36, 37, 38, 39]
    assert grid.cell_label(0, 17, thread=38) == ["T38:R0", "×4"]


def test_per_thread_view_holds_what_elements_of_says():
    fragment = Fragment.accumulator(64, 64, 4, 1)
    held = LayoutGrid(layout_tables(fragment)).held(thread=36)
    expected = {idx for idx, _ in fragment.elements_of(36)}
    assert {(int(r), int(c)) for r, c in zip(*held.nonzero())} == expected
    assert LayoutGrid(layout_tables(fragment)).held(warp=1).sum() == 64 * 64 // 4


# ---------------------------------------------------------------- the algebra's promises

FRAGMENTS = [
    Fragment.row_spread((64, 32), 128, 4),
    Fragment.row_spread((32,), 32, 1),
    Fragment.accumulator(64, 64, 2, 2),
    Fragment.accumulator_rows(64, 4, 1),
    Fragment.replicated((8,), 64),
    Fragment.wgmma_accumulator(64, 64, 1, 1),
    Fragment.packed_rows((40,), 128, 4),  # padded: 32 thread groups, the second round has 8
]


def _value(expr, thread: int, local: int, tx, reg) -> int:
    if isinstance(expr, int):
        return expr
    return int(sym.Analyzer().simplify(substitute(expr, {tx: thread, reg: local})).value)


@pytest.mark.parametrize("frag", FRAGMENTS, ids=lambda f: repr(f)[:40])
def test_index_of_inverts_the_forward_map(frag):
    tx, reg = tirx.Var("tx", "int32"), tirx.Var("reg", "int32")
    exprs = frag.index_of(tx, reg)
    rank = len(frag.shape)
    for thread in range(frag.threads):
        for element, local in frag.elements_of(thread):
            got = tuple(_value(e, thread, local, tx, reg) for e in exprs[:rank])
            assert got == tuple(element), (thread, local)


@pytest.mark.parametrize("frag", [f for f in FRAGMENTS if len(f.shape) == 2],
                         ids=lambda f: repr(f)[:40])
def test_reduce_keeps_each_row_on_the_threads_that_held_it(frag):
    try:
        rows = frag.reduce(1)
    except NotImplementedError:
        pytest.skip("this layout does not reduce over its columns")
    for i, j in itertools.product(range(frag.shape[0]), range(frag.shape[1])):
        holders = {t for t, _ in frag.owners(i, j)}
        keepers = {t for t, _ in rows.owners(i)}
        assert holders <= keepers, (i, j)


@pytest.mark.parametrize("shape, bits", [((64, 32), 16), ((32, 64), 16), ((16, 64), 32),
                                         ((128, 64), 16)])
def test_swizzle_permutes_16_byte_chunks_within_each_row(shape, bits):
    layout = Layout.swizzled(shape, bits)
    per_chunk = 128 // bits
    rows, cols = shape
    offsets = [[layout.offset(r, c) for c in range(cols)] for r in range(rows)]
    flat = sorted(o for row in offsets for o in row)
    assert flat == list(range(rows * cols))  # a bijection onto the tile
    for r in range(rows):
        assert sorted(o // cols for o in offsets[r]) == [r] * cols  # stays in its row
        for c0 in range(0, cols, per_chunk):  # a chunk moves whole, in order
            chunk = offsets[r][c0:c0 + per_chunk]
            assert chunk == list(range(chunk[0], chunk[0] + per_chunk))
            assert chunk[0] % per_chunk == 0


@pytest.mark.parametrize("frag", FRAGMENTS, ids=lambda f: repr(f)[:40])
def test_recipe_json_rebuilds_the_same_fragment(frag):
    assert Fragment.from_json(frag.to_json()).same_as(frag)


def _branching(*args):
    """A user's layout that decides in Python per element: numpy cannot run it whole."""
    i, j, rep = args
    return (i % 4) * 8 + j % 8 if i < 2 else (i % 4) * 8 + (j + 1) % 8, (i // 4) * 2 + j // 8


@pytest.mark.parametrize("frag", FRAGMENTS + [
    Fragment.mma_a(), Fragment.mma_b(), Fragment.mma_c(), Fragment.accumulator(64, 128, 2, 2),
    Fragment.wgmma_accumulator(128, 256, 2, 1), Fragment.accumulator_rows(64, 4, 1),
    Fragment((8, 16), 32, 1, _branching, 4, {"kind": "custom"})], ids=lambda f: repr(f)[:40])
def test_tables_at_once_agree_with_element_by_element(frag):
    thread, local = frag.tables()
    by_element = frag.tables(at_once=False)
    assert (thread == by_element[0]).all() and (local == by_element[1]).all()


@pytest.mark.parametrize("layout", [
    Layout.row_major((16, 24)), Layout.swizzled((64, 64), 16), Layout.swizzled((32, 128), 8),
    Layout.wgmma_panels((64, 128), 16, 128), Layout.wgmma_panels((128, 64), 16, 64),
    Layout((8, 8), lambda i, j: (i * 8 + j) if i % 2 == 0 else (i * 8 + 7 - j), {})],
    ids=lambda layout: repr(layout)[:40])
def test_shared_layout_offsets_at_once_agree_with_element_by_element(layout):
    assert (layout.table() == layout.table(at_once=False)).all()
