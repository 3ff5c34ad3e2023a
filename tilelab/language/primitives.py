"""The tile primitives users write: kernels, buffers, tile operations and loops.

Each primitive either returns a description the front end acts on (`T.Kernel`,
`T.Parallel`, `T.Tensor`: the front end needs the loop or `with` body to build
them) or emits a statement straight into the active builder (`T.copy`,
`T.alloc_shared`, ...). Argument checks happen here, so mistakes surface at the
user's line while the kernel is traced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import tirx

from ..errors import TileLabSyntaxError, TileLabTypeError
from ..ir import dtypes
from ..ir.builder import SymbolicDim, current
from ..ir.expr import dtype_of, is_expr, to_expr
from ..ir.keys import KERNEL, SWIZZLE, THREAD_INDEX, THREADS, WARP_ROLE
from ..ir.tile_ops import _const_int, data_of, is_buffer

# Limits of every NVIDIA GPU, checked while tracing so that both backends reject the same
# programs at the user's line (the CUDA backend checks its target's own shared memory too).
MAX_THREADS = 1024  # threads per block
MAX_GRID = (2**31 - 1, 65535, 65535)  # blocks along x, y, z
MAX_SHARED_BYTES = 227 * 1024  # shared memory per block on the largest GPUs (sm_90, sm_100)
MAX_REGISTER_TILE = 65536  # elements of one fragment or local tile
MAX_STAGES = 32  # T.Pipelined stages (the copies of each loaded tile)

# ---------------------------------------------------------------- signatures


@dataclass(frozen=True)
class Tensor:
    """`T.Tensor(shape, dtype)`: a global-memory tensor in a kernel's signature."""

    shape: tuple
    dtype: str = "float32"

    def __new__(cls, shape=None, dtype="float32", data=None, *view_args, **view_kwargs):
        if data is None and not view_args and not view_kwargs:
            return super().__new__(cls)
        if view_args or view_kwargs:
            raise TileLabTypeError(
                "T.Tensor(shape, dtype, data) takes a view's shape, dtype and the tensor's "
                "data; strides, offsets and scopes are not supported")
        return _view(shape, dtype, data)

    def __init__(self, shape, dtype="float32", data=None, *view_args, **view_kwargs):
        if not isinstance(shape, (tuple, list)):
            shape = (shape,)
        object.__setattr__(self, "shape", tuple(shape))
        object.__setattr__(self, "dtype", dtypes.as_dtype(dtype))

    def __class_getitem__(cls, item):
        """`T.Tensor[shape, dtype]`, TileLang's annotation spelling, is `T.Tensor(shape, dtype)`."""
        return cls(*item) if isinstance(item, tuple) else cls(item)


Buffer = Tensor


def _view(shape, dtype, data):
    """`T.Tensor(shape, dtype, X.data)` inside a kernel: X's memory seen with another shape
    (a reshape of the contiguous tensor X, as `X.view(shape)` in torch). It must cover at
    most X's elements of the same dtype."""
    builder = current("T.Tensor(shape, dtype, data)")
    base = data_of(data)
    if base is None or base.scope() != "global":
        raise TileLabTypeError("T.Tensor(shape, dtype, data): data must be a kernel tensor's "
                               "`.data` (as in T.Tensor((M * N,), T.float16, A.data))")
    shape = _shape(shape)  # known at compile time, like every shape inside a kernel
    dtype = dtypes.as_dtype(dtype)
    if str(dtype) != str(base.dtype):
        raise TileLabTypeError(f"a view of {base.name} ({base.dtype}) must have its dtype, "
                               f"not {dtype}", hint="T.reinterpret converts single values")
    size, held = math.prod(shape), None
    if all(_const_int(e) is not None for e in base.shape):
        held = math.prod(int(_const_int(e)) for e in base.shape)
    if held is not None and size > held:
        raise TileLabTypeError(f"a view of shape {shape} holds {size} elements; "
                               f"{base.name} has {held}")
    view = tirx.decl_buffer(shape, str(dtype), name=builder.take_name(f"{base.name}_view"),
                            data=data)
    builder.buffer_locations[view.name] = builder.location
    builder.emit(tirx.DeclBuffer(view, data=data))
    return view


def make_tensor(ptr, shape, dtype="float32", strides=None):
    """`T.make_tensor(ptr, shape, dtype)`: a tensor in global memory at the address `ptr`,
    a kernel value of 64 bits - an element of a `T.Tensor((G,), T.ptr)` parameter, the
    `data_ptr()`s of torch tensors - so that one kernel reaches tensors it was not given
    one by one (TileLang's grouped GEMM: a table of each group's A, B and C). Its rows are
    contiguous, as a torch tensor's; its shape is known at compile time. The address must
    be of memory the kernel runs on (a CUDA tensor's for the GPU, a CPU tensor's for the
    CPU backend): nothing checks it, as nothing can."""
    builder = current("T.make_tensor")
    if strides is not None:
        raise TileLabTypeError("T.make_tensor(..., strides=...): a made tensor's rows are "
                               "contiguous here", hint="make it with its full row length and "
                                                       "index the part you need")
    address = ptr if is_expr(ptr) else None
    if address is None or dtype_of(address) not in ("int64", "uint64"):
        raise TileLabTypeError(
            f"T.make_tensor takes an address, a 64-bit kernel value (an element of a "
            f"T.Tensor((n,), T.ptr) parameter), got {_short(ptr)}",
            hint="pass torch.tensor([t.data_ptr() for t in tensors]) as a T.ptr tensor")
    shape, dtype = _shape(shape), dtypes.as_dtype(dtype)
    name = builder.take_name("tensor")
    data = tirx.Var(f"{name}_data", tvm.ir.PointerType(tvm.ir.PrimType(str(dtype)), "global"))
    builder.emit(tirx.Bind(data, tvm.ir.Call(tvm.ir.Op.get("tirx.reinterpret"), [address],
                                             ret_ty=data.ty)))
    tensor = tirx.decl_buffer(shape, str(dtype), name=name, data=data)
    builder.buffer_locations[name] = builder.location
    builder.emit(tirx.DeclBuffer(tensor, data=data))
    return tensor


def reshape(tile, shape):
    """`T.reshape(tile, shape)`: the same elements seen with another shape, in row-major
    order (as torch's `view`): `s3 = T.reshape(s, (N, Q, H))` of an (N, Q * H) fragment
    reads and writes s's elements as s3[n, q, h] = s[n, q * H + h]. Kernel tensors and
    fragments can be reshaped; the view holds exactly the tile's elements."""
    return _reshaped("T.reshape", tile, shape)


def view(tile, shape=None, dtype=None):
    """`T.view(tile, shape, dtype)`: TileLang's reshape that may also reinterpret the bits
    as another type - a shared tile's bytes as a tile of another type, scratch space reused
    (`acc_shared = T.view(KV_shared, (16, 512), T.float32)` once the loop is done with
    KV_shared's values; before it is written through, the view holds the tile's bytes as
    the GPU laid them out, which nothing defines); kernel tensors and fragments keep their
    type."""
    if dtype is not None and str(dtypes.as_dtype(dtype)) != str(tile.dtype):
        if is_buffer(tile) and tile.scope().startswith("shared"):
            return _shared_view(tile, tile.shape if shape is None else shape, dtype)
        raise TileLabTypeError(
            f"T.view({tile.name}, dtype={dtypes.as_dtype(dtype)}): tilelab's views of kernel "
            f"tensors and fragments keep their type ({tile.dtype}); a shared tile's bytes "
            "may be seen as another type",
            hint="allocate a tile of that type, or T.reinterpret one value")
    return _reshaped("T.view", tile, tile.shape if shape is None else shape)


def _shared_view(tile, shape, dtype):
    """A shared tile's bytes as a tile of `shape` and `dtype` (at most the tile's bytes):
    another name for the same memory, which the barriers treat as the tile itself."""
    builder = current("T.view")
    shape, dtype = _shape(shape), dtypes.as_dtype(dtype)
    size = math.prod(shape) * dtypes.itemsize(str(dtype))
    held = math.prod(int(e) for e in tile.shape) * dtypes.itemsize(str(tile.dtype))
    if size > held:
        raise TileLabTypeError(f"T.view({tile.name}, {shape}, {dtype}) needs {size} bytes; "
                               f"{tile.name} has {held}")
    view = tirx.decl_buffer(shape, str(dtype), name=builder.take_name(f"{tile.name}_view"),
                            data=tile.data, scope=tile.scope())
    builder.buffer_locations[view.name] = builder.location
    builder.emit(tirx.DeclBuffer(view, data=tile.data))
    return view


def _reshaped(primitive: str, tile, shape):
    if not is_buffer(tile):
        raise TileLabTypeError(f"{primitive} takes a tile or a kernel tensor, not "
                               f"{type(tile).__name__}")
    scope = tile.scope()
    if scope == "global":
        return _view(shape, tile.dtype, tile.data)
    if scope != "local.fragment":
        raise TileLabTypeError(
            f"{primitive} of {tile.name} ({scope}): tilelab reshapes kernel tensors and "
            "fragments (T.alloc_fragment), not shared or local tiles",
            hint="allocate the tile in the shape you index it by, or use index arithmetic")
    builder = current(primitive)
    shape = _shape(shape)
    size, held = math.prod(shape), math.prod(int(e) for e in tile.shape)
    if size != held:
        raise TileLabTypeError(f"{primitive}({tile.name}, {shape}): the view holds {size} "
                               f"elements, {tile.name} {tuple(int(e) for e in tile.shape)} "
                               f"holds {held}; a reshape keeps every element")
    view = tirx.decl_buffer(shape, str(tile.dtype), name=builder.take_name(f"{tile.name}_view"),
                            data=tile.data, scope=scope)
    builder.buffer_locations[view.name] = builder.location
    builder.emit(tirx.DeclBuffer(view, data=tile.data))
    return view


def const(names: str):
    """`M, N = T.const("M, N")`: compile-time sizes taken from tensors or `.compile(M=...)`."""
    builder = current("const", need_kernel=False)
    parts = [n.strip() for n in names.replace(" ", ",").split(",") if n.strip()]
    builder.const_names.update(parts)
    values = [builder.shape_constants.get(n, SymbolicDim(n)) for n in parts]
    for name, value in zip(parts, values):
        if not isinstance(value, SymbolicDim) and not _positive_int(value):
            raise TileLabTypeError(f"{name}={_short(value)}: a size must be a positive int")
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(frozen=True)
class EmptyTensor:
    """`T.empty(shape, dtype)`: an output the kernel allocates and returns."""

    shape: tuple
    dtype: str


def empty(shape, dtype="float32"):
    """An output tensor of the eager style: allocated for each call and returned."""
    builder = current("empty", need_kernel=False)
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    name = builder.pending_name or "out"
    builder.pending_name = None
    return builder.declare_output(name, tuple(shape), dtypes.as_dtype(dtype))


# ---------------------------------------------------------------- kernels and loops

_BLOCK_NAMES = ("bx", "by", "bz")


@dataclass
class Kernel:
    """`with T.Kernel(grid_x, grid_y=1, grid_z=1, threads=128) as (bx, by, bz)`."""

    grid: tuple
    threads: tuple

    def __init__(self, *grid, threads=128, prelude=None):
        if not 1 <= len(grid) <= 3:
            raise TileLabSyntaxError("T.Kernel takes 1 to 3 grid dimensions")
        given = threads
        if isinstance(threads, int):
            threads = (threads,)
        if not isinstance(threads, (tuple, list)) or not 1 <= len(threads) <= 3:
            raise TileLabTypeError(f"threads must be a positive int or 1 to 3 of them, got "
                                   f"{threads!r}")
        self.grid = tuple(grid)
        self.threads = tuple(threads)
        # the launch limits of every NVIDIA GPU, checked here so that a kernel the GPU could
        # never launch fails at its T.Kernel line, on the CPU too, before anything is built
        for t in self.threads:
            if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
                raise TileLabTypeError(f"threads must be positive Python ints, got {given!r}")
        if math.prod(self.threads) > MAX_THREADS:
            raise TileLabTypeError(
                f"threads={given!r} asks for {math.prod(self.threads)} threads per block; "
                f"a GPU block has at most {MAX_THREADS}",
                hint="give each thread more elements (larger tiles per thread), not more threads")
        for axis, extent in enumerate(self.grid):
            if isinstance(extent, bool) or not (isinstance(extent, int) or is_expr(extent)):
                raise TileLabTypeError(f"grid sizes must be ints or integer expressions, got "
                                       f"{_short(extent)}")
            value = _const_int(extent)
            if value is not None and not 1 <= value <= MAX_GRID[axis]:
                raise TileLabTypeError(
                    f"grid dimension {'xyz'[axis]} is {value}; it must be between 1 and "
                    f"{MAX_GRID[axis]}")

    def build(self, names: list[str], body_fn):
        """Bind block indices named `names`, trace the body, wrap it in block loops."""
        builder = current("Kernel", need_kernel=False)
        if builder.in_kernel:
            raise TileLabSyntaxError("T.Kernel cannot be nested inside another T.Kernel")
        names = list(names) + list(_BLOCK_NAMES[len(names):len(self.grid)])
        block_vars = [tirx.Var(n, "int32") for n in names[: len(self.grid)]]
        builder.in_kernel += 1
        builder.threads = self.threads
        builder.thread_vars = {}
        try:
            with builder.block() as stmts:
                builder.kernel_level = len(builder.blocks)
                builder.block_indices = list(zip(block_vars, self.grid))
                body_fn(block_vars[0] if len(block_vars) == 1 else tuple(block_vars))
        finally:
            builder.in_kernel -= 1
        body = _seq(stmts)
        axes = ("x", "y", "z")
        for axis, var, extent in reversed(list(zip(axes, block_vars, self.grid))):
            iter_var = tirx.IterVar(None, tirx.Var(f"blockIdx.{axis}", "int32"),
                                    tirx.IterVar.ThreadIndex, f"blockIdx.{axis}")
            body = tirx.For(var, 0, to_expr(extent), tirx.ForKind.THREAD_BINDING, body,
                            thread_binding=iter_var)
        annotations = {KERNEL: True, THREADS: list(self.threads)}
        if builder.thread_vars:  # code written for one thread (passes/thread_code.py)
            annotations[THREAD_INDEX] = [thread_index(builder, d) for d in range(len(self.threads))]
        if builder.swizzle is not None:
            annotations[SWIZZLE] = list(builder.swizzle)
        return tirx.For(body.loop_var, body.min, body.extent, body.kind, body.body,
                        thread_binding=body.thread_binding, annotations=annotations)


def thread_index(builder, dim: int):
    """The variable of the block's thread index along `dim` (one per kernel and dim)."""
    if dim not in builder.thread_vars:
        builder.thread_vars[dim] = tirx.Var(("tx", "ty", "tz")[dim], "int32")
    return builder.thread_vars[dim]


def get_thread_binding(dim: int = 0):
    """The index of the thread running this code along `dim` (0, 1, 2: x, y, z of
    `T.Kernel(..., threads=(x, y, z))`).

    Statements that use it - or a `T.alloc_local`/`T.alloc_var` they wrote - are code each
    thread runs for itself, as in CUDA: `if tx < 16: S[tx] = A[bx, tx]`. Tile ops stay the
    whole block's work; next to them, thread code may hold plain statements, loops,
    `T.fill`/`T.clear` of its own registers and `T.atomic_add`. The CPU runs such code
    once per thread, in step between statements (passes/thread_code.py)."""
    builder = current("get_thread_binding")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(builder.threads):
        raise TileLabTypeError(
            f"T.get_thread_binding({dim!r}): the kernel has threads={builder.threads!r}, so "
            f"the dimension is one of {list(range(len(builder.threads)))}")
    if builder.role is not None:
        raise TileLabSyntaxError(
            "T.get_thread_binding inside a T.ws role is not supported",
            hint="take the thread index outside the role; inside, use tile ops")
    if builder.threads[dim] == 1:  # the one thread along dim: its code is the block's
        return tirx.const(0, "int32")
    return thread_index(builder, dim)


def get_thread_bindings():
    """The thread's index along each dimension of the kernel's threads (a list)."""
    return [get_thread_binding(d) for d in range(len(current("get_thread_bindings").threads))]


def get_thread_extent(dim: int = 0) -> int:
    """The kernel's threads along `dim` (x, y, z: 0, 1, 2)."""
    extents = get_thread_extents()
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(extents):
        raise TileLabTypeError(f"T.get_thread_extent({dim!r}): the kernel has threads="
                               f"{tuple(extents)!r}")
    return extents[dim]


def get_thread_extents() -> list:
    return list(current("get_thread_extents").threads)


def get_block_binding(dim: int = 0):
    """The block's index along `dim` of the grid (what `with T.Kernel(...) as (bx, by)`
    names)."""
    return _block_index("get_block_binding", dim)[0]


def get_block_bindings():
    return [var for var, _ in current("get_block_bindings").block_indices]


def get_block_extent(dim: int = 0):
    """The grid's blocks along `dim`."""
    return _block_index("get_block_extent", dim)[1]


def get_block_extents():
    return [extent for _, extent in current("get_block_extents").block_indices]


def _block_index(primitive: str, dim):
    indices = current(primitive).block_indices
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(indices):
        raise TileLabTypeError(f"T.{primitive}({dim!r}): the kernel's grid has "
                               f"{len(indices)} dimension(s)")
    return indices[dim]


def thread_binding(start, stop=None, thread: str = "threadIdx.x", annotations=None):
    """TileLang's `tx = T.thread_binding(0, threads, thread="threadIdx.x")`: the thread
    index along x, y or z, whose extent must be the kernel's (T.get_thread_binding)."""
    builder = current("thread_binding")
    if stop is None:
        start, stop = 0, start
    axes = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}
    if thread not in axes:
        raise TileLabTypeError(f"T.thread_binding(thread={thread!r}): the thread is one of "
                               f"{', '.join(axes)}")
    dim = axes[thread]
    extent = builder.threads[dim] if dim < len(builder.threads) else 1
    if _const_int(start) != 0 or _const_int(stop) != extent:
        raise TileLabTypeError(
            f"T.thread_binding({start}, {stop}, thread={thread!r}) covers threads other "
            f"than the block's {extent} along {thread[-1]} (threads={builder.threads!r})",
            hint=f"bind the whole extent: T.thread_binding(0, {extent}, thread={thread!r})")
    return get_thread_binding(dim)


WARPGROUP = 128  # threads of one warpgroup: what T.ws counts in


class ws:  # noqa: N801 - TileLang's spelling
    """`with T.ws(1):` the body runs on warpgroup 1 only (threads 128..255); `T.ws(0, 1)`
    on warpgroups 0 and 1. Tile ops inside are split among the role's threads, fragments
    used there live in its threads' registers, and barriers inside are the role's own.
    The roles of a block meet only through the program's mbarriers (T.alloc_barrier,
    T.barrier_arrive, T.barrier_wait) and the block-wide barriers between statements
    outside any role. On the CPU side-by-side roles take turns, each running until it
    waits (passes/role_turns.py)."""

    def __init__(self, *warpgroups):
        ids = sorted(warpgroups)
        if not ids or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in ids):
            raise TileLabTypeError(f"T.ws takes warpgroup numbers (ints >= 0), got "
                                   f"{warpgroups!r}")
        if ids != list(range(ids[0], ids[-1] + 1)):
            raise TileLabTypeError(f"T.ws{tuple(warpgroups)!r}: the warpgroups of a role must "
                                   "be consecutive", hint="write one `with T.ws(k)` per group")
        self.first, self.end = ids[0] * WARPGROUP, (ids[-1] + 1) * WARPGROUP

    def __enter__(self):
        builder = current("ws")
        if builder.role is not None:
            raise TileLabSyntaxError("T.ws roles cannot be nested")
        threads = math.prod(builder.threads)
        if len(builder.threads) != 1 or self.end > threads:
            raise TileLabTypeError(
                f"T.ws asks for threads {self.first}..{self.end - 1}; the kernel has "
                f"threads={builder.threads[0] if len(builder.threads) == 1 else builder.threads}",
                hint="T.ws(k) is warpgroup k: threads 128k..128k+127 of a 1-D block")
        builder.role = (self.first, self.end)
        builder.blocks.append([])
        self._builder = builder
        return self

    def __exit__(self, exc_type, exc, tb):
        builder = self._builder
        stmts = builder.blocks.pop()
        builder.role = None
        if exc_type is None:
            builder.emit(tirx.AttrStmt(tirx.const(self.first, "int32"), WARP_ROLE,
                                       tirx.const(self.end, "int32"), _seq(stmts)))
        return False


def _seq(stmts):
    from ..ir.builder import seq

    return seq(stmts)


def _short(value, limit: int = 60) -> str:
    """A value's repr for a message, cut short (a tensor's repr runs for pages)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _positive_int(value) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0


def _loop_bound(value, primitive: str):
    """A loop bound is an int or an integer expression (not a bool, float or tensor)."""
    import numbers

    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or (
            is_expr(value) and str(value.ty).startswith(("int", "uint")))):
        raise TileLabTypeError(f"T.{primitive} bounds must be ints or integer expressions, "
                               f"got {_short(value)}")
    return int(value) if isinstance(value, numbers.Integral) else value


class Loop:
    """Base of the loop primitives; the front end calls `build` with the body tracer."""

    kind = tirx.ForKind.SERIAL
    annotations: dict = {}

    def __init__(self, *extents):
        if not extents:
            raise TileLabTypeError(f"T.{type(self).__name__} needs at least one extent")
        self.extents = tuple(_loop_bound(e, type(self).__name__) for e in extents)

    def ranges(self):
        return [(0, e) for e in self.extents]

    def build(self, names: list[str], body_fn):
        ranges = self.ranges()
        if len(names) != len(ranges):
            raise TileLabSyntaxError(
                f"this loop has {len(ranges)} index variable(s) but the for statement "
                f"names {len(names)}")
        loop_vars = [tirx.Var(n, "int32") for n in names]
        builder = current(type(self).__name__, need_kernel=False)
        parallel = self.kind == tirx.ForKind.PARALLEL
        builder.parallel_depth += parallel
        try:
            with builder.block() as stmts:
                body_fn(loop_vars[0] if len(loop_vars) == 1 else tuple(loop_vars))
        finally:
            builder.parallel_depth -= parallel
        body = _seq(stmts)
        for var, (start, extent) in reversed(list(zip(loop_vars, ranges))):
            body = tirx.For(var, to_expr(start), to_expr(extent), self.kind, body,
                            annotations=self.annotations or None)
        return body

    def __iter__(self):
        raise TileLabSyntaxError(
            f"T.{type(self).__name__} can only drive a `for` loop in a kernel traced by tilelab",
            hint="inside a helper function, decorate the helper with @T.macro")


class Parallel(Loop):
    """`for i, j in T.Parallel(M, N)`: every element independently; threads share the work.

    TileLang's `prefer_async=True` (with the annotation
    `{"parallel_async_without_async_commit_wait": True}`) asks for a copy loop issued as
    cp.async, its group committed and waited for by the program (`T.ptx_commit_group`,
    `T.ptx_wait_group`). tilelab's copies of that kind are complete when issued (as its
    `T.ptx_cp_async`), so the loop runs as written and the program's waits find nothing
    in flight: the same values, with no overlap of the copy."""

    kind = tirx.ForKind.PARALLEL
    HINTS = ("parallel_async_without_async_commit_wait",)  # annotations that ask nothing more

    def __init__(self, *extents, prefer_async: bool = False, annotations: dict | None = None):
        super().__init__(*extents)
        unknown = sorted(str(k) for k in (annotations or {}) if k not in self.HINTS)
        if unknown:
            raise TileLabTypeError(
                f"T.Parallel annotations {', '.join(unknown)} are TileLang scheduling "
                "annotations that tilelab does not have",
                hint=f"drop them; tilelab takes {', '.join(self.HINTS)} (with prefer_async)")
        if not isinstance(prefer_async, bool):
            raise TileLabTypeError(f"T.Parallel(prefer_async=...) is True or False, got "
                                   f"{_short(prefer_async)}")


class serial(Loop):  # noqa: N801 - TileLang's spelling
    """`for k in T.serial(n)` or `T.serial(start, stop)`: one after another."""

    def __init__(self, start, stop=None, step=1):
        if step != 1:
            raise TileLabSyntaxError("T.serial supports step=1 only")
        self.start, self.stop = (0, start) if stop is None else (start, stop)
        self.start = _loop_bound(self.start, type(self).__name__)
        super().__init__(self.stop)

    def ranges(self):
        from .expr import binary

        return [(self.start, binary("-", self.stop, self.start))]


class Persistent(Loop):
    """`for bx, by in T.Persistent([tiles_m, tiles_n], wave_size, block_id, group_size=8)`:
    a persistent block (TileLang's spelling and order). A grid of `wave_size` blocks
    covers a larger domain of tiles, one tile per trip: on trip `w` block `b` takes tile
    number t = w * wave_size + b. Tiles are numbered in groups of `group_size` columns
    (the last dimension): within a group, the columns of one row, then the next row, so
    the blocks of a wave share rows of A and columns of B in the L2 cache. Each tile is
    taken exactly once, so the result is that of one block per tile; only the order of
    the work differs. On sm_90a the pipelined loop inside may run ahead across tiles
    (passes/pipeline_loops.py, `TileWalk`)."""

    def __init__(self, domain, wave_size, index, group_size=8):
        domain = list(domain) if isinstance(domain, (list, tuple)) else [domain]
        self.domain = [_loop_bound(d, "Persistent") for d in domain]
        self.wave_size = _loop_bound(wave_size, "Persistent")
        self.index = _loop_bound(index, "Persistent")
        from .expr import binary, ceildiv

        last = self.domain[-1]
        group = _loop_bound(group_size, "Persistent")
        if is_expr(group) or is_expr(last):
            group = tirx.Max(tirx.Min(to_expr(group), to_expr(last)), to_expr(1))
        else:
            group = max(1, min(group, last))
        self.group = group
        # the numbering's dimensions: groups, every dimension but the last, a group's columns
        self.grouped = [ceildiv(last, group), *self.domain[:-1], group]
        self.total = self.grouped[0]
        for extent in self.grouped[1:]:
            self.total = binary("*", self.total, extent)
        super().__init__(ceildiv(self.total, self.wave_size))

    def build(self, names: list[str], body_fn):
        from .expr import binary

        if len(names) != len(self.domain):
            raise TileLabSyntaxError(
                f"this T.Persistent domain has {len(self.domain)} dimension(s) but the for "
                f"statement names {len(names)}")
        wave = tirx.Var(f"{names[0]}_wave", "int32")
        tile = binary("+", binary("*", wave, self.wave_size), self.index)
        digits, rest = [], tile  # tile's digits in the grouped numbering, last one first
        for extent in reversed(self.grouped[1:]):
            digits.append(binary("%", rest, extent))
            rest = binary("//", rest, extent)
        digits = [rest] + digits[::-1]
        last = binary("+", binary("*", digits[0], self.group), digits[-1])
        coords = digits[1:-1] + [last]
        builder = current("Persistent", need_kernel=False)
        with builder.block() as stmts:
            body_fn(coords[0] if len(coords) == 1 else tuple(coords))
        inside = binary("&", binary("<", tile, self.total),
                        binary("<", last, self.domain[-1]))  # (a group may stick out)
        guarded = tirx.IfThenElse(to_expr(inside), _seq(stmts), None)
        return tirx.For(wave, to_expr(0), to_expr(self.extents[0]), self.kind, guarded)


class unroll(serial):  # noqa: N801
    """`for k in T.unroll(n)`: a serial loop the compiler unrolls."""

    kind = tirx.ForKind.UNROLLED


class vectorized(serial):  # noqa: N801
    kind = tirx.ForKind.VECTORIZED


class Pipelined(serial):
    """`for k in T.Pipelined(n, num_stages=3)`: a loop whose copies overlap compute on GPUs."""

    def __init__(self, start, stop=None, num_stages=0, order=None, stage=None, group=None):
        super().__init__(start, stop)
        if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 0:
            raise TileLabTypeError(f"num_stages must be a non-negative int, got {num_stages!r}")
        if num_stages > MAX_STAGES:
            raise TileLabTypeError(
                f"num_stages={num_stages}: each stage keeps its own copy of every tile the "
                f"loop loads, and a pipeline holds at most {MAX_STAGES}",
                hint="2 to 4 stages hide the load latency on current GPUs")
        self.annotations = {"num_stages": num_stages}


# ---------------------------------------------------------------- buffers


def _shape(shape):
    if not isinstance(shape, (tuple, list)):
        shape = (shape,)
    if not shape:
        raise TileLabTypeError("a buffer needs at least one dimension, got ()")
    for extent in shape:
        if isinstance(extent, bool) or _const_int(extent) is None:
            raise TileLabTypeError(f"buffer shapes inside a kernel must be known at compile "
                                   f"time as ints, got {tuple(shape)!r}")
        if _const_int(extent) <= 0:
            raise TileLabTypeError(f"buffer dimensions must be positive, got {tuple(shape)!r}")
    return tuple(int(_const_int(e)) for e in shape)


def _alloc(primitive, shape, dtype, scope, builder=None):
    builder = builder or current(primitive)
    dtype = dtypes.as_dtype(dtype)
    shape = _shape(shape)
    size = math.prod(shape)
    if scope.startswith("local") and size > MAX_REGISTER_TILE:
        # the compilers unroll work per register; a tile this large could never live in
        # registers anyway (a GPU has 64K 32-bit registers per multiprocessor)
        raise TileLabTypeError(
            f"T.{primitive}({shape}) holds {size} elements; a register tile holds at most "
            f"{MAX_REGISTER_TILE}", hint="use a smaller tile (loop over the data in pieces)")
    if scope.startswith("shared"):
        # one tile larger than any block's shared memory can never run on a GPU; the sum of
        # all tiles may (the CUDA compile lets tiles whose uses do not overlap share memory,
        # then checks the block's real total against its target)
        nbytes = size * dtype.bits // 8
        if nbytes > MAX_SHARED_BYTES:
            raise TileLabTypeError(
                f"this shared tile alone is {nbytes // 1024} KB; no GPU block has more than "
                f"{MAX_SHARED_BYTES // 1024} KB", hint="use a smaller tile")
    return builder.allocate(primitive.replace("alloc_", ""), shape, str(dtype), scope)


def alloc_shared(shape, dtype, scope="shared.dyn"):
    """A tile in shared memory: visible to every thread of the block.

    Every shared tile lives in the block's dynamic shared memory, whatever `scope` says
    (TileLang's `scope="shared"` asks for static shared memory): the compiler plans those
    bytes as a whole - tiles whose lives do not overlap share bytes, swizzled tiles start
    on the 1 KiB boundaries wgmma and TMA read their pattern from. A static array would
    sit before all of them and push them off those boundaries."""
    if scope not in ("shared", "shared.dyn"):
        raise TileLabTypeError(f"T.alloc_shared takes scope 'shared' or 'shared.dyn', not "
                               f"{scope!r}", hint="T.alloc_fragment and T.alloc_local make "
                                                  "register tiles")
    return _alloc("alloc_shared", shape, dtype, "shared.dyn")


def alloc_fragment(shape, dtype, scope="local.fragment"):
    """A tile in registers, spread over the block's threads by layout inference."""
    return _alloc("alloc_fragment", shape, dtype, scope)


def alloc_local(shape, dtype, scope="local"):
    """Registers private to each thread."""
    return _alloc("alloc_local", shape, dtype, scope)


def alloc_var(dtype, init=None):
    """One private scalar; read and assign it by name: `acc = T.alloc_var(T.float32)`."""
    buffer = _alloc("alloc_var", (1,), dtype, "local.var")
    if init is not None:
        current("alloc_var").emit(tirx.BufferStore(buffer, to_expr(init, str(buffer.dtype)), [0]))
    return buffer


def alloc_global(shape, dtype):
    """A scratch tensor in global memory for the kernels of this program, written before
    the first `with T.Kernel`: one kernel fills it, a later one reads it (TileLang's
    split-KV decoding keeps partial results so). The CPU backend allocates it for each
    call; a CUDA program takes such a tensor as a parameter instead."""
    builder = current("alloc_global", need_kernel=False)
    if builder.in_kernel:
        raise TileLabSyntaxError(
            "T.alloc_global belongs before `with T.Kernel(...)`: it is memory of the whole "
            "program, which every block and every kernel of it sees",
            hint="for memory of one block use T.alloc_shared or T.alloc_fragment")
    return _alloc("alloc_global", shape, dtype, "global", builder)


def use_swizzle(panel_size=8, order="row", enable=True):
    """Rasterize blocks in panels for L2 reuse (a GPU hint; no effect on the CPU)."""
    current("use_swizzle").swizzle = (int(panel_size), str(order), bool(enable))


def Layout(shape, forward_fn):  # noqa: N802 - TileLang's spelling
    """A memory layout: `T.Layout((64, 32), lambda i, j: i * 32 + (j ^ i % 8))`."""
    from ..ir.layout import Layout as _Layout

    return _Layout.custom(shape, forward_fn)


def Fragment(shape, forward_thread_fn, forward_index_fn=None, replicate=1):  # noqa: N802
    """A register layout: which thread (and register) keeps each element of a fragment."""
    from ..ir.layout import Fragment as _Fragment

    if forward_index_fn is None:
        raise TileLabTypeError("T.Fragment needs forward_index_fn (the register of each "
                               "element on its thread)")
    try:
        return _Fragment.custom(shape, forward_thread_fn, forward_index_fn, replicate)
    except ValueError as err:
        raise TileLabTypeError(f"T.Fragment: {err}") from None


def annotate_layout(layouts: dict):
    """Pin layouts: `T.annotate_layout({acc: T.Fragment(...), a_shared: T.Layout(...)})`.

    Annotated layouts take precedence over the ones layout inference would choose;
    the CPU backend ignores them (it has no threads). The CUDA backend obeys a fragment's
    T.Fragment and a shared tile's swizzle; any other T.Layout only orders elements in
    memory, changes no result, and is left out with a warning.
    """
    from ..ir.layout import Fragment as _Fragment
    from ..ir.layout import Layout as _Layout

    builder = current("annotate_layout")
    for buffer, layout in layouts.items():
        if not is_buffer(buffer):
            raise TileLabTypeError("T.annotate_layout keys are buffers")
        if not isinstance(layout, (_Fragment, _Layout)):
            raise TileLabTypeError(f"the layout of {buffer.name} must be a T.Fragment or "
                                   f"T.Layout, got {type(layout).__name__}")
        if tuple(layout.shape) != tuple(int(s) for s in buffer.shape):
            raise TileLabTypeError(f"layout of shape {tuple(layout.shape)} does not fit "
                                   f"{buffer.name} of shape {tuple(buffer.shape)}")
        builder.annotated_layouts[buffer.name] = layout


def macro(fn):
    """Mark a helper whose body uses kernel control flow (T.Parallel loops, `if` on values)."""
    fn.__tilelab_macro__ = True
    return fn


_ = tvm  # tvm is imported for its side effect of loading the IR types
