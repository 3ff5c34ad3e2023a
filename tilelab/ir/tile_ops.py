"""Tile operations as explicit IR nodes.

A tile program is TVM TIR plus a handful of *tile operations*: statements that
act on whole rectangular regions of buffers at once (`copy`, `gemm`, `fill`,
`reduce`, `atomic_add`, `print`, ...). Each one is a `TilePrimitiveCall` node
whose arguments are `BufferRegion`s, so every pass can see exactly which
elements an operation reads and writes, and the printed IR reads like the source:

    T.tile.copy(A[by * 64:by * 64 + 64, k * 32:k * 32 + 32], A_shared[0:64, 0:32], loc="12:8")

`loc` is the line and column of the user's statement, so that a pass that
rejects the op can point there. Passes later replace each tile op by loops
(CPU) or by thread-level code (CUDA); what each op means and how it is lowered
lives in its module under `tilelab/ops/`. This module names the ops to TVM and
offers `Region`, a small view of a buffer region that the front end and the
passes share.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

OPS: dict = {}  # op name -> TVM Op, filled by register_tile_op (tilelab/ops/ calls it)


def register_tile_op(name: str) -> None:
    """Make `tilelab.<name>` a TVM op that prints as `T.tile.<name>(...)`."""
    if name not in OPS:
        tvm.ir.register_op_attr(f"tilelab.{name}", "TIRxOpCategory", "tile_primitive")
        tvm.ir.register_op_attr(f"tilelab.{name}", "TScriptPrinterName", name)
        OPS[name] = tvm.ir.Op.get(f"tilelab.{name}")


def is_buffer(value) -> bool:
    """In TVM 0.27 a Buffer is a Var of buffer type; tell it apart from scalar variables."""
    return isinstance(value, tirx.Var) and bool(tirx.is_buffer_var(value))


def data_of(value):
    """The buffer whose pointer `value` is (`X.data`, TVM's `buffer_data(X)`), or None."""
    if isinstance(value, tvm.ir.Call) and value.args and \
            getattr(value.op, "name", "") == "tirx.buffer_data" and is_buffer(value.args[0]):
        return value.args[0]
    return None


def fragment_view_buffers(body) -> list:
    """(view, fragment) of each fragment `body` declares as a view of another (`T.reshape`):
    the view's buffer and the fragment whose registers it names (a view of a view: the
    first fragment), in program order."""
    return _view_buffers(body, lambda scope: scope == "local.fragment")


def shared_views(body) -> dict:
    """The shared tiles `body` declares as views of others (`T.view(tile, shape, dtype)`,
    the tile's bytes in another type): view name -> the name of the tile it names."""
    return {str(view.name): str(base.name)
            for view, base in _view_buffers(body, lambda scope: scope.startswith("shared"))}


def _view_buffers(body, of_scope) -> list:
    import tvm_ffi

    found: list = []
    roots: dict = {}  # view name -> its tile

    def visit(decl):
        base = data_of(decl.data)
        if of_scope(decl.buffer.scope()) and base is not None and \
                str(base.name) != str(decl.buffer.name):
            root = roots.get(str(base.name), base)
            roots[str(decl.buffer.name)] = root
            found.append((decl.buffer, root))

    tvm_ffi.structural_walk(body, (tirx.DeclBuffer, visit), order="pre")
    return found


def fragment_views(body) -> dict:
    """The fragments `body` declares as views of others: view name -> the fragment whose
    registers it names (fragment_view_buffers)."""
    return {str(view.name): base for view, base in fragment_view_buffers(body)}


def is_load(value) -> bool:
    """A buffer element read `A[i, j]` (TVM calls it a TensorLoad; `.source` is the buffer)."""
    return isinstance(value, tvm.ir.TensorLoad)


def loaded(expr) -> list:
    """The buffers whose elements `expr` reads, one per load, in program order."""
    found = []
    tvm_ffi.structural_walk(expr, (tvm.ir.TensorLoad, lambda load: found.append(load.source)),
                            order="pre")
    return found


ADDRESS_CALLS = ("tirx.address_of", "tirx.tvm_access_ptr")  # calls that take a buffer's address


def by_address(node) -> list:
    """Buffers that calls in `node` take by address (`address_of(A[i])`, and
    `tvm_access_ptr`: cp.async, wgmma descriptors, atomics)."""
    found = []

    def visit(call):
        if getattr(call.op, "name", "") in ADDRESS_CALLS:
            found.extend(loaded(call))
            tvm_ffi.structural_walk(call, (tirx.Var, lambda var: found.append(var)
                                           if is_buffer(var) else None), order="pre")

    tvm_ffi.structural_walk(node, (tvm.ir.Call, visit), order="pre")
    return found


def accessed_buffers(stmt) -> list:
    """The buffers `stmt` reads or writes (also by address: cp.async, wgmma, atomics)."""
    found = by_address(stmt)

    def visit(node):
        found.append(node.buffer if isinstance(node, tirx.BufferStore) else node.source)

    tvm_ffi.structural_walk(stmt, (tirx.BufferStore, visit), order="pre")
    tvm_ffi.structural_walk(stmt, (tvm.ir.TensorLoad, visit), order="pre")
    return found


def touches_shared(stmt) -> bool:
    """Does `stmt` read or write a shared tile?"""
    return any(buffer.scope().startswith("shared") for buffer in accessed_buffers(stmt))


def is_select(value) -> bool:
    """`T.if_then_else(cond, a, b)`: TVM's `if_then_else` call, its `.args` those three."""
    return isinstance(value, tvm.ir.Call) and \
        getattr(value.op, "name", "") == "prim.if_then_else"


def is_access_ptr(value) -> bool:
    """A pointer into a tile, `tvm_access_ptr(type, data, offset, extent, rw)` (cp.async's
    destination, a wgmma descriptor's address)."""
    return isinstance(value, tvm.ir.Call) and \
        getattr(value.op, "name", "") == "tirx.tvm_access_ptr"


def access_ptr_tile(call):
    """The tile an access pointer points into (named as `X` or as `X.data`), and its element
    type; (None, None) for other calls."""
    if not is_access_ptr(call):
        return None, None
    tile = call.args[1] if is_buffer(call.args[1]) else data_of(call.args[1])
    return tile, str(call.args[0].ty)


def _const_int(expr) -> int | None:
    if isinstance(expr, int):
        return expr
    if isinstance(expr, tirx.IntImm):
        return int(expr.value)
    return None


@dataclass(frozen=True)
class Region:
    """A rectangular region of a buffer: `buffer[starts[d] : starts[d] + extents[d]]`."""

    buffer: tirx.Buffer
    starts: tuple
    extents: tuple

    @staticmethod
    def whole(buffer) -> Region:
        return Region(buffer, tuple(0 for _ in buffer.shape), tuple(buffer.shape))

    @staticmethod
    def from_tir(region) -> Region:
        ranges = list(region.region)
        return Region(region.source, tuple(r.min for r in ranges), tuple(r.extent for r in ranges))

    def to_tir(self):
        ranges = [tvm.ir.Range.from_min_extent(s, e) for s, e in zip(self.starts, self.extents)]
        return tirx.BufferRegion(self.buffer, ranges)

    @property
    def scope(self) -> str:
        return self.buffer.scope()

    @property
    def dtype(self) -> str:
        return str(self.buffer.dtype)

    def static_extents(self) -> tuple[int, ...] | None:
        values = tuple(_const_int(e) for e in self.extents)
        return None if any(v is None for v in values) else values

    def squeezed_extents(self) -> list:
        """Extents with the unit dimensions dropped (how copies match shapes)."""
        return [e for e in self.extents if _const_int(e) != 1]


def tile_call(name: str, *args, **config) -> TilePrimitiveCall:
    """Build a tile-op node; Regions become BufferRegions, config holds plain Python values."""
    tir_args = [a.to_tir() if isinstance(a, Region) else a for a in args]
    return TilePrimitiveCall(*tir_args, op=OPS[name], config=config)


def is_tile_call(stmt, name: str | None = None) -> bool:
    if not isinstance(stmt, TilePrimitiveCall):
        return False
    return name is None or stmt.op.same_as(OPS[name])


def op_name(stmt: TilePrimitiveCall) -> str:
    return str(stmt.op.name).removeprefix("tilelab.")


def regions(stmt: TilePrimitiveCall) -> list[Region]:
    """The buffer regions among a tile op's arguments, in order."""
    return [Region.from_tir(a) for a in stmt.args if isinstance(a, tvm.ir.TensorRegion)]


def scalars(stmt: TilePrimitiveCall) -> list:
    """The arguments that are not buffer regions (a fill value, a printed scalar), in order."""
    return [a for a in stmt.args if not isinstance(a, tvm.ir.TensorRegion)]


def config(stmt: TilePrimitiveCall) -> dict:
    """The op's settings (transpose flags, reduce kind, ...) as a plain dict; no location."""
    return {str(k): v for k, v in stmt.config.items() if str(k) != "loc"}


def location_text(location, kernel_file: str | None) -> str:
    """`loc` of a tile op: "line:col" in the kernel's own file, else "file:line:col"."""
    where = f"{location.line}:{location.col}"
    return where if location.filename == kernel_file else f"{location.filename}:{where}"


def span_location(node):
    """The SourceLocation a statement was traced at (its span; None for one a pass made)."""
    from ..errors import SourceLocation

    span = getattr(node, "span", None)
    if isinstance(span, tvm.ir.Span) and span.source_name is not None and span.line > 0:
        return SourceLocation(span.source_name.name, span.line, span.column)
    return None


def location_of(stmt: TilePrimitiveCall, kernel_file: str, lines=None):
    """The SourceLocation a tile op was traced at (None for ops a pass made up)."""
    from ..errors import SourceLocation

    loc = stmt.config.get("loc") if stmt.config is not None else None
    if loc is None:
        return None
    *file, line, col = str(loc).split(":")
    filename = ":".join(file) if file else kernel_file
    text = None
    if lines is not None and filename == kernel_file and 0 < int(line) <= len(lines):
        text = lines[int(line) - 1].rstrip("\n")
    return SourceLocation(filename, int(line), int(col), text)
