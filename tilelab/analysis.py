"""What a tile program asks of the machine: floating-point work and global-memory traffic.

Counted from the tile ops as the user wrote them, before any lowering: each
`T.gemm` is 2·M·N·K floating-point operations, each `T.copy` with a global side
moves its region's bytes, and each counts once per trip of the loops around it
and once per block of the grid. A loop whose trip count depends on the block (a
causal attention's key loop stops at the diagonal) is counted block by block.
Branches count as taken (an upper bound); the arithmetic of `T.Parallel` loops
and single-element loads and stores outside tile ops are not counted: they are
rarely what bounds a kernel that has tile ops.

The roofline then gives the least time the kernel can take on a device: the
larger of its work over the peak math rate and its traffic over the memory
bandwidth. `%%tilekernel --bench` uses the count for TFLOP/s when `--flops` is
not given, and TileLang's `tilelang.tools.Analyzer` is this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

from .errors import TileLabError
from .ir.dtypes import itemsize
from .ir.tile_ops import op_name, regions
from .ir.visit import uses


@dataclass(frozen=True)
class OpWork:
    """One tile op's share: how many times it runs, and its work and bytes in all."""

    op: str
    buffers: tuple
    runs: int
    flops: int
    global_bytes: int


@dataclass(frozen=True)
class Work:
    flops: int
    global_bytes: int
    ops: tuple  # OpWork of each counted tile op, in program order

    def roofline_seconds(self, tflops: float | None, bandwidth_gbps: float) -> float:
        """The least time: memory time, or compute time where it is larger."""
        memory = self.global_bytes / (bandwidth_gbps * 1e9)
        return max(memory, self.flops / (tflops * 1e12)) if tflops else memory


def _per_run(call) -> tuple[int, int] | None:
    """(flops, global bytes) of one run of a tile op, or None if it is not counted."""
    name = op_name(call)
    regs = regions(call)
    if name == "gemm":
        a, _, c = regs
        extents = a.static_extents()
        m, n = (int(s) for s in c.buffer.shape[-2:])
        if extents is None:
            return None
        k = extents[-2] if call.config.get("transpose_A") else extents[-1]
        return 2 * m * n * int(k), 0
    if name == "copy":
        src, dst = regs
        side = src if src.scope == "global" else dst if dst.scope == "global" else None
        extents = side.static_extents() if side is not None else None
        if extents is None:
            return None
        return 0, math.prod(int(e) for e in extents) * itemsize(side.dtype)
    return None


def _value(expr, env: dict) -> int:
    """An integer expression's value with the loop variables in `env`."""
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    if isinstance(expr, tirx.Var) and expr in env:
        return env[expr]
    if isinstance(expr, (tirx.Var, tvm.ir.TensorLoad)):
        name = expr.name if isinstance(expr, tirx.Var) else expr.source.name
        raise TileLabError(f"cannot count the trips of a loop bounded by {name}, which is "
                           "known only while the kernel runs")
    if isinstance(expr, tirx.Cast):
        return _value(expr.value, env)
    binary = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b,
              tirx.Mul: lambda a, b: a * b, tirx.FloorDiv: lambda a, b: a // b,
              tirx.FloorMod: lambda a, b: a % b, tirx.Min: min, tirx.Max: max}
    for kind, fn in binary.items():
        if isinstance(expr, kind):
            return fn(_value(expr.a, env), _value(expr.b, env))
    if isinstance(expr, tirx.Div):  # integer division truncates toward zero
        a, b = _value(expr.a, env), _value(expr.b, env)
        return int(a / b)
    raise TileLabError(f"cannot count the trips of a loop bounded by {expr}")


def _trips(loops: list, env: dict) -> int:
    """How many times a statement inside `loops` (outermost first) runs in all."""
    if not loops:
        return 1
    (var, low, extent), rest = loops[0], loops[1:]
    n = max(_value(extent, env), 0)
    if not any(uses(lo, var) or uses(ext, var) for _, lo, ext in rest):
        return n * _trips(rest, env)
    first = _value(low, env)
    return sum(_trips(rest, {**env, var: first + i}) for i in range(n))


def work(program) -> Work:
    """The work and traffic of a program (a Kernel, a traced program or its PrimFunc)."""
    func = getattr(getattr(program, "program", program), "func", program)
    if not isinstance(func, tirx.PrimFunc) and hasattr(func, "functions"):
        func = next(iter(func.functions.values()))  # an IRModule of one function
    counted: list = []

    def visit(node, loops):
        if isinstance(node, tirx.SeqStmt):
            for stmt in node:
                visit(stmt, loops)
        elif isinstance(node, TilePrimitiveCall):
            share = _per_run(node)
            if share is not None:
                runs = _trips(loops, {})
                counted.append(OpWork(op_name(node),
                                      tuple(str(r.buffer.name) for r in regions(node)),
                                      runs, share[0] * runs, share[1] * runs))
        elif isinstance(node, tirx.For):
            if node.kind == tirx.ForKind.PARALLEL:
                return  # elementwise arithmetic: not counted (module doc)
            is_thread = node.kind == tirx.ForKind.THREAD_BINDING and \
                not str(node.thread_binding.thread_tag).startswith("blockIdx")
            visit(node.body, loops if is_thread else
                  loops + [(node.loop_var, node.min, node.extent)])
        elif isinstance(node, tirx.IfThenElse):
            visit(node.then_case, loops)
            if node.else_case is not None:
                visit(node.else_case, loops)
        elif hasattr(node, "body"):  # attributes, lets, while loops (counted once)
            visit(node.body, loops)

    visit(func.body, [])
    return Work(sum(o.flops for o in counted), sum(o.global_bytes for o in counted),
                tuple(counted))
