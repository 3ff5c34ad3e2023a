"""Check the alignment of wgmma's operand tiles once per kernel, where it can be proven.

The tensor cores apply a matrix descriptor's swizzle to the address bits, so a swizzled
operand tile must start on a multiple of its swizzle pattern (1024 bytes for 128-byte rows).
The wgmma lowering (ops/_gemm_wgmma.py) puts `tl::wgmma_check_aligned<B>(tile)` before
each T.gemm: a trap rather than a product read permuted. In a pipelined loop that is a
test and a branch per operand per iteration, and ptxas must keep such a branch where the
program put it: it injects warpgroup waits around it, and where a loop keeps MMAs in
flight across one it serializes every MMA of the kernel (warnings C7517-C7520).

After shared memory is planned every tile is a view of the one dynamic shared buffer at
an offset the compiler chose: `slot * 32768 + 33792` bytes for a pipelined K tile, say.
This pass asks TVM's analyzer for the offset's modular set (what it is a multiple of,
plus what) with the kernel's bound values substituted; where it is a multiple of B, the
tile is aligned exactly when the buffer's start is. Those checks go, and one check of the
buffer's start (for the largest B) follows its allocation, before any MMA. A check whose
offset the analyzer cannot pin down (an index read from memory), or whose tile is not
the allocated buffer itself or a view of it from its first byte, stays.

Without the branches ptxas schedules a loop as one block: FlashAttention's rescale of
its output moves in among the exponentials, where before it waited behind the check
before O += P V. Paired on an H100 (bench/results/aligned_tiles_once_ab_h100.json):
FlashAttention 1-5% faster, the GEMMs level. `tl.disable_alignment_check_once` keeps a
check before every T.gemm.
"""

from __future__ import annotations

import re

import tvm
from tvm import sym, tirx

from ..ir.tile_ops import access_ptr_tile, data_of
from ..ir.visit import rewrite, walk
from ..ops._lowering import address, extern, extern_name

_CHECK = re.compile(r"tl::wgmma_check_aligned<(\d+)>")


def _check_of(stmt):
    """(B, pointer) of a `tl::wgmma_check_aligned<B>(pointer)` statement, or None."""
    match = _CHECK.fullmatch(extern_name(stmt))
    return (int(match[1]), stmt.value.args[1]) if match else None


def _allocations(body) -> dict:
    """Each tile that starts where a dynamic shared allocation does (the allocation itself,
    or a view declared on its pointer) -> that allocation."""
    start = {}
    for alloc in _collect(body, tirx.AllocBuffer):
        if alloc.buffer.scope() == "shared.dyn":
            start[alloc.buffer] = alloc.buffer
    for decl in _collect(body, tirx.DeclBuffer):
        base = data_of(decl.data)
        if base is not None and base in start:
            start[decl.buffer] = start[base]
    return start


def _collect(body, node_type) -> list:
    found: list = []
    walk(body, node_type, found.append)
    return found


@tirx.transform.prim_func_pass(opt_level=0, name="tilelab.AlignedTilesOnce")
def AlignedTilesOnce(func, _mod, _ctx):  # noqa: N802
    analyzer = sym.Analyzer()
    walk(func.body, tirx.Bind, lambda b: analyzer.bind(b.var, b.value)
         if re.fullmatch(r"u?int\d+", str(b.var.ty)) else None)  # (the integers: offsets)
    starts = _allocations(func.body)
    dropped: dict = {}  # allocation -> the largest alignment a dropped check asked of it

    def proven(stmt) -> bool:
        check = _check_of(stmt)
        if check is None:
            return False
        bytes_, pointer = check
        tile, dtype = access_ptr_tile(pointer)
        bits = tvm.DataType(dtype).bits * tvm.DataType(dtype).lanes if tile is not None else 0
        if tile not in starts or bits % 8:
            return False
        offset = analyzer.modular_set(pointer.args[2] * (bits // 8))
        if offset.coeff % bytes_ or offset.base % bytes_:
            return False
        dropped[starts[tile]] = max(bytes_, dropped.get(starts[tile], 0))
        return True

    body = rewrite(func.body, tirx.Evaluate,
                   lambda stmt: tirx.Evaluate(tirx.const(0, "int32")) if proven(stmt) else stmt)
    checked = []

    def after_allocation(seq_stmt):
        stmts = list(seq_stmt.seq)
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, tirx.AllocBuffer) and stmt.buffer in dropped:
                checked.append(stmt.buffer)
                check = extern(f"tl::wgmma_check_aligned<{dropped[stmt.buffer]}>",
                               address(stmt.buffer, [0]))
                return tirx.SeqStmt(stmts[:i + 1] + [check] + stmts[i + 1:])
        return seq_stmt

    body = rewrite(body, tirx.SeqStmt, after_allocation)
    if len(checked) != len(dropped):  # an allocation with nothing after it: keep all checks
        return func
    return func.with_body(body)
