"""The statement builder that `T.*` primitives emit into while a kernel is traced.

The front end walks the user's function and keeps one `Builder` active. Tile
primitives (`T.copy`, `T.alloc_shared`, ...) find it with `current()` and
append TIR statements to the innermost open block. A primitive called with no
kernel being traced gets a clear error instead.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field

from tvm import tirx

from ..errors import SourceLocation, TileLabSyntaxError


class SymbolicSize:
    """A size known only once a tensor has it: a `T.const` name, or arithmetic on names.

    `OH = (H + 2 * P - K) // S + 1` may be written before any tensor gives H; it stays
    symbolic until then, and the front end resolves it whenever it is read.
    """

    def resolve(self, constants: dict):
        """An int when every name is known, else the symbolic size itself."""
        raise NotImplementedError

    def _op(self, symbol, other, reflected=False):
        if not isinstance(other, (int, SymbolicSize)):
            return NotImplemented
        return _SizeArithmetic(symbol, other, self) if reflected else \
            _SizeArithmetic(symbol, self, other)

    def __add__(self, other):
        return self._op("+", other)

    def __radd__(self, other):
        return self._op("+", other, reflected=True)

    def __sub__(self, other):
        return self._op("-", other)

    def __rsub__(self, other):
        return self._op("-", other, reflected=True)

    def __mul__(self, other):
        return self._op("*", other)

    def __rmul__(self, other):
        return self._op("*", other, reflected=True)

    def __floordiv__(self, other):
        return self._op("//", other)

    def __rfloordiv__(self, other):
        return self._op("//", other, reflected=True)

    def __mod__(self, other):
        return self._op("%", other)

    def __rmod__(self, other):
        return self._op("%", other, reflected=True)

    def __neg__(self):
        return _SizeArithmetic("-", 0, self)


_SIZE_OPS = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "//": int.__floordiv__,
             "%": int.__mod__}


@dataclass(frozen=True, eq=False)
class _SizeArithmetic(SymbolicSize):
    symbol: str
    left: object
    right: object

    def resolve(self, constants: dict):
        a, b = (x.resolve(constants) if isinstance(x, SymbolicSize) else x
                for x in (self.left, self.right))
        if isinstance(a, int) and isinstance(b, int):
            return _SIZE_OPS[self.symbol](a, b)
        return _SizeArithmetic(self.symbol, a, b)

    def __repr__(self) -> str:
        return f"({self.left!r} {self.symbol} {self.right!r})"


@dataclass(frozen=True, eq=False)
class SymbolicDim(SymbolicSize):
    """A `T.const` name whose value is learned from the first tensor that uses it."""

    name: str

    def resolve(self, constants: dict):
        return constants.get(self.name, self)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ParamInfo:
    """One global tensor of a kernel's signature, with the line that declared it."""

    name: str
    shape: tuple
    dtype: str
    output: bool
    location: SourceLocation | None


@dataclass
class Builder:
    """Collects the statements of one kernel and what the front end learns on the way."""

    shape_constants: dict = field(default_factory=dict)  # T.const names known up front
    blocks: list = field(default_factory=lambda: [[]])
    in_kernel: int = 0
    pending_name: str | None = None  # name of the variable being assigned, for buffers
    location: SourceLocation | None = None  # the statement being traced
    source_file: str | None = None  # the kernel's file (a tile op's `loc` is relative to it)
    param_buffers: list = field(default_factory=list)
    buffer_locations: dict = field(default_factory=dict)  # buffer name -> where allocated
    allocated_names: set = field(default_factory=set)
    has_atomics: bool = False
    const_names: set = field(default_factory=set)  # names T.const asked for
    captured: dict = field(default_factory=dict)  # module globals the kernel read: name -> value
    swizzle: tuple | None = None  # T.use_swizzle(panel, order, enable)
    annotated_layouts: dict = field(default_factory=dict)  # T.annotate_layout: name -> layout
    params: list = field(default_factory=list)  # ParamInfo, in signature order
    example_shapes: dict = field(default_factory=dict)  # param name -> shape of an example
    threads: tuple = ()  # the T.Kernel being traced: its thread extents
    kernel_level: int = 0  # len(blocks) in the T.Kernel's own statement list
    block_indices: list = field(default_factory=list)  # (var, extent) of blockIdx x, y, z
    rng: tuple | None = None  # T.rng_init: the stream's registers (seed, seq, position)
    draws_pending: int = 0  # T.rng_rand calls in the statement being traced
    after_statement: dict = field(default_factory=dict)  # stores that follow it (by buffer)
    role: tuple | None = None  # inside `with T.ws(...)`: its threads [first, end)
    thread_vars: dict = field(default_factory=dict)  # T.get_thread_binding: dim -> its Var
    reducers: list = field(default_factory=list)  # `with T.attr(T.comm_reducer(...), ...)`
    barriers: dict = field(default_factory=dict)  # T.alloc_barrier: name -> arrival counts
    pass_configs: dict = field(default_factory=dict)  # asked for by the program's own hints
    parallel_depth: int = 0  # T.Parallel loops around the statement being traced
    writes: dict = field(default_factory=dict)  # buffer name -> stores traced so far
    # sizes written with names a later tensor gives (`T.Tensor[[seq_len * heads, d]]` before
    # the tensor that has seq_len): (tensor, axis, size, the example's extent, location)
    later_sizes: list = field(default_factory=list)
    # a first look at an eager kernel whose output is made before the tensor that gives its
    # size (`Logits = T.empty((seq_len, n))` above `Weights: T.Tensor((seq_len, h))`): sizes
    # not known yet are taken as 1, only to learn the others (language/frontend.trace_eager)
    guess_sizes: bool = False

    def declare_param(self, name: str, shape: tuple, dtype: str, output: bool = False):
        """A global tensor of the signature; sizes given by `T.const` names are resolved here."""
        from ..errors import TileLabArgumentError, TileLabTypeError, UnknownSize
        from .dtypes import PACKED

        packed = PACKED.get(str(dtype))  # 4-bit values come in two to a byte
        if packed and output:
            raise TileLabTypeError(f"{name} is an output of {dtype} values; tilelab reads "
                                   f"{dtype} tensors but does not write them",
                                   hint="write int8 values and pack them with torch")
        example = self.example_shapes.get(name)
        if example is not None and len(example) != len(shape):
            raise TileLabArgumentError(
                f"{name} is declared with {len(shape)} dimension(s) but the tensor passed "
                f"has shape {tuple(example)}")
        passed_shape = None if example is None else tuple(example)
        if example is not None and packed:  # the tensor passed holds two values a byte
            example = (*tuple(example)[:-1], 2 * int(example[-1]))
        resolved = []
        for axis, extent in enumerate(shape):
            if isinstance(extent, SymbolicSize):
                extent = extent.resolve(self.shape_constants)
            if isinstance(extent, SymbolicDim):
                if example is None and self.guess_sizes:
                    resolved.append(1)
                    continue
                if example is None:
                    raise UnknownSize(
                        f"the size {extent.name} of {name} is not known",
                        hint=f"pass a tensor for {name}, or {extent.name}=... to .compile()")
                self.shape_constants[extent.name] = int(example[axis])
                extent = int(example[axis])
            elif isinstance(extent, SymbolicSize):
                if example is None and self.guess_sizes:
                    resolved.append(1)
                    continue
                if example is None:
                    raise UnknownSize(
                        f"the size {extent!r} of {name} uses names no tensor has given yet",
                        hint="declare first the tensors whose shapes have these names")
                # the tensor passed gives the extent; the names, once known, must agree
                self.later_sizes.append((name, axis, extent, int(example[axis]),
                                         self.location))
                extent = int(example[axis])
            if not _is_integer(extent) or int(extent) <= 0:
                # zero-size and negative sizes too: nothing to launch, and TVM rejects them
                raise TileLabTypeError(
                    f"{name} has shape {_shape_text(shape, self.shape_constants)}: every "
                    "dimension must be a positive int",
                    hint="tilelab kernels work on tensors with at least one element")
            extent = int(extent)  # a numpy or tvm integer too
            if packed and axis == len(shape) - 1 and extent % 2:
                raise TileLabTypeError(
                    f"{name} has {extent} {dtype} values in its last dimension; they come "
                    "two to a byte, so it must be even")
            if example is not None and int(example[axis]) != extent:
                declared = tuple(e if isinstance(e, SymbolicSize) else int(e) for e in shape)
                if packed:
                    last = declared[-1]
                    half = last // 2 if isinstance(last, int) else f"{last!r} / 2"
                    raise TileLabArgumentError(
                        f"{name} holds {declared} {dtype} values, two to a byte: pass "
                        f"{packed} of shape {(*declared[:-1], half)}; the tensor passed has "
                        f"shape {passed_shape}",
                        hint="pack the values: (t[..., 0::2] & 15) | (t[..., 1::2] << 4)")
                raise TileLabArgumentError(
                    f"{name} must have shape {declared} "
                    f"but the tensor passed has shape {tuple(example)}")
            resolved.append(extent)
        elements = 1
        for extent in resolved:
            elements *= extent
        if elements >= 2**31:  # kernels index with 32-bit integers
            raise TileLabTypeError(f"{name} has {elements} elements; tilelab kernels index "
                                   f"with 32-bit integers, so a tensor holds at most 2**31 - 1",
                                   hint="split the work over several calls")
        buffer = tirx.decl_buffer(tuple(resolved), str(dtype), name=self.fresh_name(name))
        passed, passed_dtype = tuple(resolved), str(dtype)
        if packed:
            passed, passed_dtype = (*resolved[:-1], resolved[-1] // 2), packed
        self.params.append(ParamInfo(name, passed, passed_dtype, output, self.location))
        self.param_buffers.append(buffer)
        return buffer

    def check_later_sizes(self) -> None:
        """Sizes that named a later tensor's sizes agree with the tensors passed."""
        from ..errors import TileLabArgumentError, TileLabTypeError

        for name, axis, size, extent, location in self.later_sizes:
            value = size.resolve(self.shape_constants)
            if isinstance(value, SymbolicSize):
                raise TileLabTypeError(f"the size {size!r} of {name} uses names no tensor "
                                       "gives", location,
                                       hint="declare the tensors whose shapes have them")
            if int(value) != extent:
                raise TileLabArgumentError(
                    f"dimension {axis} of {name} is {size!r} = {int(value)}, but the tensor "
                    f"passed has {extent}", location)

    def declare_output(self, name: str, shape: tuple, dtype: str):
        return self.declare_param(name, shape, dtype, output=True)

    def role_threads(self) -> int:
        """Threads that run the statement being traced: its T.ws role's, or the block's."""
        if self.role is not None:
            return self.role[1] - self.role[0]
        return math.prod(self.threads)

    def emit(self, stmt) -> None:
        """Append a statement; a tile op gets the line and column it was written at."""
        from tvm.tirx.tile_primitive import TilePrimitiveCall

        from .tile_ops import location_text

        if isinstance(stmt, TilePrimitiveCall) and self.location is not None:
            loc = location_text(self.location, self.source_file)
            stmt = stmt.replace(config={**{str(k): v for k, v in stmt.config.items()},
                                        "loc": loc})
        self.count_writes(stmt)
        self.blocks[-1].append(stmt)

    def count_writes(self, stmt) -> None:
        """Count the stores into each buffer (the front end's names of loaded values ask
        whether their buffer changed since, see `Interpreter.bind`)."""
        from tvm.tirx.tile_primitive import TilePrimitiveCall

        if isinstance(stmt, tirx.BufferStore):
            written = [stmt.buffer.name]
        elif isinstance(stmt, TilePrimitiveCall):
            from ..ops import effects

            written = [w.buffer.name for w in effects(stmt).writes]
        else:
            return
        for name in written:
            self.writes[name] = self.writes.get(name, 0) + 1

    @contextmanager
    def block(self):
        """Open a nested statement list; yields the list that the body fills."""
        self.blocks.append([])
        try:
            yield self.blocks[-1]
        finally:
            self.blocks.pop()

    def fresh_name(self, hint: str) -> str:
        name, n = hint, 1
        while name in self.allocated_names:
            name, n = f"{hint}_{n}", n + 1
        self.allocated_names.add(name)
        return name

    def take_name(self, default: str) -> str:
        name = self.pending_name or default
        self.pending_name = None
        return self.fresh_name(name)

    def allocate(self, default_name: str, shape: tuple, dtype: str, scope: str):
        """A new buffer, named after the variable being assigned (else `default_name`),
        allocated where the statement being traced stands."""
        name = self.take_name(default_name)
        buffer = tirx.decl_buffer(shape, dtype, name=name, scope=scope)
        self.buffer_locations[name] = self.location
        self.emit(tirx.AllocBuffer(buffer))
        return buffer


def _is_integer(value) -> bool:
    import numbers

    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral):
        return True
    return isinstance(value, tirx.IntImm)


def _shape_text(shape, constants: dict) -> str:
    """A declared shape with the T.const sizes filled in where known."""
    values = [constants.get(getattr(e, "name", None), e) for e in shape]
    return "(" + ", ".join(repr(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def seq(stmts: list):
    """A statement list as one TIR statement."""
    if not stmts:
        return tirx.Evaluate(0)
    return stmts[0] if len(stmts) == 1 else tirx.SeqStmt(stmts)


_ACTIVE: list[Builder] = []


def in_tilelab(filename: str) -> bool:
    """Whether `filename` is one of tilelab's own source files."""
    from pathlib import Path

    return str(Path(filename).resolve()).startswith(str(Path(__file__).resolve().parents[1]))


def _caller_location() -> SourceLocation | None:
    """The first frame outside tilelab: where a user called a primitive directly."""
    import sys

    frame = sys._getframe(1)
    while frame is not None and in_tilelab(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    col = 0
    positions = list(frame.f_code.co_positions())
    index = frame.f_lasti // 2
    if 0 <= index < len(positions) and positions[index][2] is not None:
        col = positions[index][2]
    return SourceLocation(frame.f_code.co_filename, frame.f_lineno, col)


def current(primitive: str, need_kernel: bool = True) -> Builder:
    """The active builder; `primitive` names the caller for the error message."""
    if not _ACTIVE:
        raise TileLabSyntaxError(
            f"T.{primitive} can only be used inside a kernel being compiled",
            _caller_location(),
            hint="write it in a function decorated with @tilelab.jit or @T.prim_func",
        )
    builder = _ACTIVE[-1]
    if need_kernel and not builder.in_kernel:
        raise TileLabSyntaxError(
            f"T.{primitive} must be used inside `with T.Kernel(...)`",
            hint="tile primitives run on the blocks that T.Kernel launches",
        )
    return builder


@contextmanager
def activate(builder: Builder):
    _ACTIVE.append(builder)
    try:
        yield builder
    finally:
        _ACTIVE.pop()
