"""Tile ops, one module each: everything about an op in one place.

A tile op (`T.copy`, `T.gemm`, `T.reduce_sum`, ...) is more than a function
users call. The compiler must know, for every op:

* the **primitive**: the `T.*` function(s) users write, with their docstrings and
  argument checks; each emits a `TilePrimitiveCall` node into the kernel;
* its **effects**: which regions it reads and writes, and whether it may stand
  inside a `T.Parallel` loop. Barriers, the unwritten-fragment check and the
  dataflow summary all ask this one question;
* its **layout rule**: the fragment layouts it insists on (a GEMM's accumulator)
  or passes along (a reduction's result lives where its rows lived);
* its **loop semantics**: the loop nest that defines it, which the CPU backend
  runs and which is the reference every other backend must agree with;
* its **thread lowering**: the code each GPU thread runs, written against the
  small lowering context that `passes/lower_tile_ops_to_threads.py` passes in.

Each module of this package declares one `TileOp` with these parts and
`register`s it; the passes look ops up here. Adding a primitive is adding a
module (and its test): the package finds it, `T` exports its primitives, and a
pass that meets an op without the rule it needs says which op and which backend.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import TileLabCompileError, TileLabError
from ..ir.keys import SOURCE_FILE
from ..ir.tile_ops import Region, location_of, op_name, register_tile_op


@dataclass(frozen=True)
class Effects:
    """The regions a tile op reads and writes (an accumulating op does both to one region)."""

    reads: tuple = ()
    writes: tuple = ()
    # its lowering starts with a barrier of the block (a TMA store: every thread's proxy
    # fence, then the barrier): the barrier pass puts none before it
    synchronizes: bool = False
    # its reads go on after it, asynchronously (a TMA store reads its tile while the block
    # goes on): the barrier pass has the block wait for them before the next write of
    # the tiles read
    reads_late: bool = False


@dataclass(frozen=True)
class TileOp:
    """One tile op: its primitives, its effects and its rules, by backend."""

    name: str  # the IR op is `tilelab.<name>`, printed `T.tile.<name>(...)`
    primitives: tuple  # the T.* functions that emit it, exported under their __name__
    effects: Callable  # (call) -> Effects
    in_parallel: bool = False  # may it stand inside a T.Parallel loop?
    # may it stand in code each thread runs for itself (passes/thread_code.py)? Always, or
    # where (call) -> bool says so. Its thread lowering then sees ctx.in_parallel set: the
    # thread does the whole op for itself
    in_thread_code: bool | Callable = False
    fix_layouts: Callable | None = None  # (call, ctx): layouts the op insists on
    propagate_layouts: Callable | None = None  # (call, ctx) -> bool: layouts passed along
    # (call, ctx): once layouts are final, what the op will emit, for the Trace's views
    describe: Callable | None = None
    lowerings: dict = field(default_factory=dict)  # backend ("cpu", "cuda") -> rule
    # (call) -> [(position among its regions, places, read, written)]: where its thread
    # lowering takes an operand ("fragment", "shared"; the first is preferred) and whether
    # the op reads and writes it; a tile elsewhere is staged there
    # (passes/stage_operands.py), so the program runs as the CPU runs it
    gpu_operands: Callable | None = None

    def allowed_in_thread_code(self, call) -> bool:
        rule = self.in_thread_code
        return rule(call) if callable(rule) else rule

    def lowering(self, backend: str) -> Callable:
        rule = self.lowerings.get(backend)
        if rule is None:
            raise TileLabCompileError(
                f"tile op {self.name!r} has no lowering for the {backend} backend",
                hint=f"add a '{backend}' rule to tilelab/ops/{self.name}.py")
        return rule


_REGISTRY: dict[str, TileOp] = {}


def register(op: TileOp) -> TileOp:
    """Add an op to the registry (each module of this package calls it once)."""
    if op.name in _REGISTRY:
        raise ValueError(f"tile op {op.name!r} is registered twice")
    register_tile_op(op.name)
    _REGISTRY[op.name] = op
    return op


def lookup(call_or_name) -> TileOp:
    """The TileOp of an IR node (or of a name); an unknown op is an error naming it."""
    name = call_or_name if isinstance(call_or_name, str) else op_name(call_or_name)
    op = _REGISTRY.get(name)
    if op is None:
        raise TileLabCompileError(f"tile op {name!r} is not registered in tilelab/ops/",
                                  hint=f"add a module tilelab/ops/{name}.py that declares it")
    return op


def effects(call) -> Effects:
    """What a tile-op node reads and writes, as its module declares."""
    return lookup(call).effects(call)


@contextlib.contextmanager
def at_user_line(call, func=None):
    """An error raised while a pass handles `call` points at the line that wrote the op.

    `func` is the PrimFunc being compiled: its `tilelab.source_file` attribute names the
    file that the op's `loc` ("line:col") is in.
    """
    try:
        yield
    except TileLabError as err:
        if err.location is None:
            source_file = func.attrs.get(SOURCE_FILE) if func is not None and \
                func.attrs is not None else None
            location = location_of(call, str(source_file) if source_file else "")
            if location is not None:
                err.with_location(location)
        raise


def all_ops() -> list[TileOp]:
    return list(_REGISTRY.values())


def region_effects(reads=(), writes=()) -> Effects:
    """Effects from lists that may hold non-Region arguments (scalars are dropped)."""
    return Effects(tuple(r for r in reads if isinstance(r, Region)),
                   tuple(w for w in writes if isinstance(w, Region)))


def _load_all() -> None:
    """Import every op module of this package; each registers its op."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_load_all()
