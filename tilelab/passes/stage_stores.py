"""Send a T.gemm's sums to global memory through a shared tile.

A GEMM's accumulator lives in registers in the tensor cores' layout: a thread
holds two neighbouring values of a row, eight rows apart from its neighbours'.
Stored straight to global memory, `T.copy(c_fragment, C[...])` writes 4 bytes
per thread at a time, scattered over eight rows per warp instruction; on the
H200 a 128x256 tile took about 7 us that way, while the tensor cores waited.
Through a shared tile the same data leaves in whole rows, 16 bytes per thread
(about 1 us). This pass writes that detour for the program, as a user would:

    for part in T.unroll(parts):
        T.copy(c_fragment[:, part * width:(part + 1) * width], c_staged[:, 0:width])
        T.copy(c_staged[:, 0:width], C[..., part * width:(part + 1) * width])

The staged tile costs shared memory, so the pass only stages where that costs
no block on the multiprocessor. After a pipelined loop its slots are dead, and
the shared-memory merge puts later tiles in their place: a part that fits in
the largest tile no longer used costs nothing; otherwise it must fit beside the
others without lowering how many blocks share a multiprocessor. The tile is
`parts` times narrower than the store (1, 2, 4 or 8 parts, the fewest that
fit). The tensor cores' fragment layouts turn each row's column groups by the
row (an xor), so the eight rows a warp writes at once fall in different banks
of the unpadded tile. The barrier pass then orders the copies.

Only the accumulators of T.gemm are staged (their layout is the one that
scatters), only in kernels without `T.ws` roles (those synchronize as the program
says), and `tl.disable_stage_stores` turns it off.
"""

from __future__ import annotations

from tvm import tirx

from ..ir.dtypes import buffer_bytes, itemsize
from ..ir.keys import KERNEL, WARP_ROLE
from ..ir.tile_ops import Region, is_buffer, is_tile_call, regions, tile_call
from ..ir.visit import keep_user_errors, rewrite, walk
from ..ops._lowering import is_fragment

PARTS = (1, 2, 4, 8)


def _block_body(loop):
    """The statements of a kernel inside its block-index loops."""
    while isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.THREAD_BINDING:
        loop = loop.body
    return loop


def _with_block_body(loop, body):
    if isinstance(loop, tirx.For) and loop.kind == tirx.ForKind.THREAD_BINDING:
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind,
                        _with_block_body(loop.body, body), thread_binding=loop.thread_binding,
                        annotations=loop.annotations)
    return body


def _statements(body) -> list:
    """A statement list, nested sequences flattened."""
    if isinstance(body, tirx.SeqStmt):
        return [s for stmt in body.seq for s in _statements(stmt)]
    return [body]


def _buffers_in(stmt) -> set:
    """Names of the buffers a statement mentions."""
    names = set()
    walk(stmt, tirx.Var, lambda v: names.add(str(v.name)) if is_buffer(v) else None)
    return names


class _Kernel:
    """What the pass needs to know about one kernel: its shared tiles, its GEMM
    accumulators and the room left on a multiprocessor."""

    def __init__(self, kernel, arch_limit: int):
        self.statements = _statements(_block_body(kernel))
        self.shared = {}
        walk(kernel, tirx.AllocBuffer, lambda a: self.shared.setdefault(
            str(a.buffer.name), buffer_bytes(a.buffer))
            if a.buffer.scope().startswith("shared") else None)
        self.accumulators = set()
        walk(kernel, tirx.Stmt, lambda s: self.accumulators.add(str(regions(s)[2].buffer.name))
             if is_tile_call(s, "gemm") else None)
        self.limit = arch_limit
        self.total = sum(self.shared.values())
        self.roles = []
        walk(kernel, tirx.AttrStmt, lambda a: self.roles.append(a)
             if a.attr_key == WARP_ROLE else None)
        self.names = set(self.shared) | {str(v) for v in _buffers_in(kernel)}

    def blocks(self, nbytes: int) -> int:
        """Blocks a multiprocessor holds by shared memory (an SM has 1 KB more than a block
        may use, and keeps 1 KB per block)."""
        return (self.limit + 1024) // (nbytes + 1024)

    def dead_before(self, index: int) -> int:
        """Bytes of the largest shared tile that no statement from `index` on touches."""
        later = set()
        for stmt in self.statements[index:]:
            later |= _buffers_in(stmt)
        return max((size for name, size in self.shared.items() if name not in later), default=0)

    def free(self, nbytes: int, index: int) -> bool:
        """Does a tile of `nbytes` used from statement `index` on cost no block on the
        multiprocessor? Free if it fits in a dead tile's place, else beside the others."""
        if nbytes <= self.dead_before(index):
            return True
        total = self.total + nbytes
        return total <= self.limit and self.blocks(total) >= self.blocks(self.total)


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


def _staged_copy(call, src: Region, dst: Region, parts: int, names: set):
    """The shared tile and the copies through it, `parts` column blocks one after another."""
    rows, columns = (int(e) for e in src.extents)
    width = columns // parts
    name = f"{src.buffer.name}_staged"
    while name in names:
        name += "_"
    names.add(name)
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
    statements = list(kernel.statements)
    allocations = []
    for index, stmt in enumerate(kernel.statements):
        def stage(call, index=index):
            found = _stageable(call, kernel)
            if found is None:
                return call
            src, dst = found
            rows, columns = (int(e) for e in src.extents)
            size = itemsize(dst.dtype)
            parts = next((parts for parts in PARTS
                          if columns % parts == 0 and columns // parts * size % 16 == 0
                          and kernel.free(rows * columns // parts * size,
                                          index)), None)
            if parts is None:
                return call
            allocation, copies = _staged_copy(call, src, dst, parts, kernel.names)
            allocations.append(allocation)
            kernel.total += buffer_bytes(allocation.buffer)
            return copies

        statements[index] = rewrite(stmt, tirx.Stmt, lambda s, stage=stage:
                                    stage(s) if is_tile_call(s, "copy") else s)
    if not allocations:
        return kernel_loop
    return _with_block_body(kernel_loop, tirx.SeqStmt([*allocations, *statements]))


def StageStores(arch_limit: int | None):  # noqa: N802 - a pass, named like TVM's
    """Expects tile ops after pipelining; stages GEMM sums bound for global memory."""

    @tirx.transform.prim_func_pass(opt_level=0, name="tilelab.StageStores")
    @keep_user_errors
    def _pass(func, _mod, _ctx):
        if not arch_limit:
            return func

        def on_loop(loop):
            return stage_stores(loop, arch_limit) if KERNEL in loop.annotations else loop

        from ..ir.visit import rewrite_pre
        return func.with_body(rewrite_pre(func.body, tirx.For, on_loop))

    return _pass
