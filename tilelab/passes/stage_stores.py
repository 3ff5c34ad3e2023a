"""Send a T.gemm's sums to global memory through a shared tile.

A GEMM's accumulator lives in registers in the tensor cores' layout: a thread
holds two neighbouring values of a row, eight rows apart from its neighbours'.
Stored straight to global memory, `T.copy(c_fragment, C[...])` writes 4 bytes
per thread at a time, scattered over eight rows per warp instruction; on the
H200 a 128x256 tile took about 7 us that way, while the tensor cores waited.
Through a shared tile the same data leaves in whole rows, 16 bytes per thread
(about 1 us). This pass writes that detour for the program, as a user would:

    for part in T.unroll(parts):
        T.copy(c_fragment[:, part * width:(part + 1) * width], c_staged)
        T.copy(c_staged, C[..., part * width:(part + 1) * width])

The staged tile costs shared memory, so the pass only stages where that costs
no block on the multiprocessor. After a pipelined loop its slots are dead, and
the shared-memory merge puts later tiles in their place. The pass replays that
merge at the level of the kernel's statements (`merged_bytes`: a tile takes the
place of one used only before it, else a new place) and keeps the staged tile
only where the block's shared memory still lets as many blocks share a
multiprocessor as before. The tile is `parts` times narrower than the store (1, 2, 4 or
8 parts, the fewest that fit). The tensor cores' fragment layouts turn each
row's column groups by the row (an xor), so the eight rows a warp writes at
once fall in different banks of the unpadded tile. The barrier pass then orders
the copies.

Only the accumulators of T.gemm are staged (their layout is the one that
scatters), only in kernels without `T.ws` roles (those synchronize as the program
says), and `tl.disable_stage_stores` turns it off.
"""

from __future__ import annotations

from tvm import tirx

from ..ir.dtypes import buffer_bytes, itemsize
from ..ir.keys import KERNEL, WARP_ROLE
from ..ir.tile_ops import Region, is_buffer, is_tile_call, regions, tile_call
from ..ir.visit import (
    block_body,
    keep_user_errors,
    rewrite,
    rewrite_pre,
    statements,
    walk,
    with_block_body,
)
from ..ops._lowering import is_fragment

PARTS = (1, 2, 4, 8)


def _buffers_in(stmt) -> set:
    """Names of the buffers a statement mentions."""
    names = set()
    walk(stmt, tirx.Var, lambda v: names.add(str(v.name)) if is_buffer(v) else None)
    return names


def merged_bytes(spans: dict) -> int:
    """Shared bytes of a block whose tiles (name -> (first, last, bytes): the statements
    that first and last use them) share places as the shared-memory merge lets them: in
    the order of first use, larger first, a tile takes the smallest place of one whose
    last use came before its first, else a new place."""
    places, total = [], 0  # places: [size, last use of the tile in it]
    for first, last, size in sorted(spans.values(), key=lambda s: (s[0], -s[2])):
        free = [place for place in places if place[1] < first and place[0] >= size]
        if free:
            min(free)[1] = last
        else:
            places.append([size, last])
            total += size
    return total


class _Kernel:
    """What the pass needs to know about one kernel: its statements, when each shared tile
    is in use, its GEMM accumulators and what shared memory a block may have."""

    def __init__(self, kernel, arch_limit: int):
        self.statements = statements(block_body(kernel))
        sizes = {}
        walk(kernel, tirx.AllocBuffer, lambda a: sizes.setdefault(
            str(a.buffer.name), buffer_bytes(a.buffer))
            if a.buffer.scope().startswith("shared") else None)
        self.spans = {}
        for index, stmt in enumerate(self.statements):
            if isinstance(stmt, tirx.AllocBuffer):
                continue
            for name in _buffers_in(stmt) & set(sizes):
                first = self.spans.get(name, (index,))[0]
                self.spans[name] = (first, index, sizes[name])
        self.accumulators = set()
        walk(kernel, tirx.Stmt, lambda s: self.accumulators.add(str(regions(s)[2].buffer.name))
             if is_tile_call(s, "gemm") else None)
        self.limit = arch_limit
        self.roles = []
        walk(kernel, tirx.AttrStmt, lambda a: self.roles.append(a)
             if a.attr_key == WARP_ROLE else None)
        self.names = set(sizes) | {str(v) for v in _buffers_in(kernel)}

    def blocks(self, nbytes: int) -> int:
        """Blocks a multiprocessor holds by shared memory (an SM has 1 KB more than a block
        may use, and keeps 1 KB per block)."""
        return (self.limit + 1024) // (nbytes + 1024)

    def free(self, name: str, nbytes: int, index: int) -> bool:
        """Would a tile of `nbytes` used in statement `index` cost no block on the
        multiprocessor?"""
        before = merged_bytes(self.spans)
        after = merged_bytes({**self.spans, name: (index, index, nbytes)})
        return after <= self.limit and self.blocks(after) >= self.blocks(before)


def _stageable(call, kernel: _Kernel):
    """(source, destination) of a copy from a GEMM accumulator into global memory whose
    regions have the same two extents, else None."""
    if not is_tile_call(call, "copy"):
        return None
    src, dst = regions(call)
    if not (is_fragment(src.buffer) and str(src.buffer.name) in kernel.accumulators
            and dst.scope == "global"):
        return None
    extents, far = src.static_extents(), dst.static_extents()
    if extents is None or far is None or len(extents) != 2 or \
            [e for e in far if e != 1] != [e for e in extents if e != 1]:
        return None
    return src, dst


def _fresh(name: str, names: set) -> str:
    while name in names:
        name += "_"
    return name


def _staged_copy(call, src: Region, dst: Region, parts: int, name: str):
    """The shared tile and the copies through it, `parts` column blocks one after another."""
    rows, columns = (int(e) for e in src.extents)
    width = columns // parts
    tile = tirx.decl_buffer([rows, width], dst.dtype, name=name, scope="shared.dyn")
    staged = Region.whole(tile)
    inner = max(i for i, e in enumerate(dst.extents) if int(e) != 1)  # C's column axis
    where = {"loc": call.config["loc"]} if "loc" in call.config else {}

    def copies(offset):
        piece = Region(src.buffer, (src.starts[0], src.starts[1] + offset), (rows, width))
        starts, extents = list(dst.starts), list(dst.extents)
        starts[inner], extents[inner] = starts[inner] + offset, width
        out = Region(dst.buffer, tuple(starts), tuple(extents))
        return tirx.SeqStmt([tile_call("copy", piece, staged, **where),
                             tile_call("copy", staged, out, **where)])

    if parts == 1:
        return tirx.AllocBuffer(tile), copies(0)
    part = tirx.Var("part", "int32")
    return tirx.AllocBuffer(tile), tirx.For(part, 0, parts, tirx.ForKind.UNROLLED,
                                            copies(part * width))


def stage_stores(kernel_loop, arch_limit: int):
    """`kernel_loop` with its GEMM sums stored through shared tiles where that is free."""
    kernel = _Kernel(kernel_loop, arch_limit)
    if not kernel.accumulators or kernel.roles:
        return kernel_loop  # T.ws: the program's roles synchronize as they say
    body = list(kernel.statements)
    allocations = []
    for index, stmt in enumerate(kernel.statements):
        def stage(call, index=index):
            found = _stageable(call, kernel)
            if found is None:
                return call
            src, dst = found
            rows, columns = (int(e) for e in src.extents)
            size = itemsize(dst.dtype)
            name = _fresh(f"{src.buffer.name}_staged", kernel.names)
            parts = next((parts for parts in PARTS  # the fewest, in rows of 16-byte pieces
                          if columns % parts == 0 and columns // parts * size % 16 == 0
                          and kernel.free(name, rows * columns // parts * size, index)), None)
            if parts is None:
                return call
            kernel.names.add(name)
            kernel.spans[name] = (index, index, rows * columns // parts * size)
            allocation, copies = _staged_copy(call, src, dst, parts, name)
            allocations.append(allocation)
            return copies

        body[index] = rewrite(stmt, tirx.Stmt, lambda s, stage=stage:
                                    stage(s) if is_tile_call(s, "copy") else s)
    if not allocations:
        return kernel_loop
    return with_block_body(kernel_loop, lambda _: tirx.SeqStmt([*allocations, *body]))


def StageStores(arch_limit: int):  # noqa: N802 - a pass, named like TVM's
    """Expects tile ops after pipelining; stages GEMM sums bound for global memory
    (`arch_limit`: the bytes of shared memory a block may have)."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.StageStores")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        def on_loop(loop):
            return stage_stores(loop, arch_limit) if KERNEL in loop.annotations else loop

        return func.with_body(rewrite_pre(func.body, tirx.For, on_loop))

    return _pass
