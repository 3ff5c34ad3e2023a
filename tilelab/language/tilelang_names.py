"""TileLang's spellings that tilelab writes another way, and TileLang features tilelab lacks.

tilelab's `T` namespace follows TileLang, whose programs should run here as written.
TileLang also has other names for things tilelab already has (`T.float` for
`T.float32`, `T.Serial` for `T.serial`, `T.floordiv(a, b)` for `a // b`); they live
here, in one place, and `T` re-exports them. TVM's thread all-reduce and the warp
shuffles (`T.shfl_xor`, `T.tvm_warp_shuffle`, ...) are code written for one thread
that hands values between threads through shared memory. Some of TileLang's explicit
hardware programming (tcgen05, clusters) has no place in a tile-level language that
chooses those itself: naming one of those gives a `TileLangFeatureError` that says what
the feature is and what to write instead, never a bare "has no attribute".
"""

from __future__ import annotations

import builtins
import difflib
import math

from tvm import tirx

from ..errors import TileLabSyntaxError, TileLabTypeError, tvm_span
from ..ir import dtypes
from ..ir.builder import SymbolicDim, current
from ..ir.expr import dtype_of
from ..ir.keys import EXCHANGE
from ..ir.tile_ops import _const_int, is_load
from ..ir.tile_ops import is_buffer as tirx_is_buffer
from ..ops._lowering import unravel
from . import expr as E
from .primitives import (
    Parallel,
    Tensor,
    alloc_fragment,
    alloc_global,
    alloc_local,
    alloc_shared,
    serial,
    thread_index,
    unroll,
)

# ---------------------------------------------------------------- data types

dtype = dtypes.as_dtype  # T.dtype("float16"), T.dtype(torch.float16); also an annotation
float = dtypes.float32  # noqa: A001 - C's names, as TileLang spells them
half = dtypes.float16
double = dtypes.float64
int = dtypes.int32  # noqa: A001
uint = dtypes.uint32
long = dtypes.int64
short = dtypes.int16
# TileLang's tf32: float32 storage whose GEMMs may round their inputs to tf32's 10-bit
# mantissa. tilelab keeps all of float32's bits: results at least as accurate.
tfloat32 = dtypes.float32
float8_e4m3 = dtypes.float8_e4m3fn  # TileLang's short name: the e4m3 type has no infinities
# an address: `T.Tensor((G,), T.ptr)` holds torch tensors' data_ptr()s, which
# T.make_tensor turns back into tensors (torch passes them as int64)
ptr = dtypes.int64


def cast(value, dtype):  # noqa: A002 - TileLang's argument order: T.cast(x, T.float32)
    """Convert `value` to `dtype` (TileLang's order of `T.Cast(dtype, value)`)."""
    return E.Cast(dtype, value)


def reinterpret(value, dtype):
    """The bits of a scalar `value` read as `dtype` of the same width: `T.reinterpret(x,
    T.uint32)` is a float32's bits, as C++'s std::bit_cast (no conversion)."""
    from ..errors import TileLabTypeError

    value = E.as_ir(value)
    if not E.is_expr(value):
        raise TileLabTypeError(f"T.reinterpret takes a kernel value (a typed expression), got "
                               f"{value!r}", hint="give a constant its type: T.uint32(7)")
    target = str(dtype) if str(dtype) == "handle" else str(dtypes.as_dtype(dtype))
    source = dtype_of(value)
    if target == "handle" and source in ("int64", "uint64"):  # TVM's null-pointer idiom, as
        return tirx.reinterpret(target, value)  # the value of T.attr(..., "reduce_scope", ...)
    if "handle" in (target, source) or \
            dtypes.as_dtype(target).bits != dtypes.as_dtype(source).bits:
        raise TileLabTypeError(
            f"T.reinterpret({source} -> {target}): only a scalar's bits read as another type "
            "of the same width are supported",
            hint="convert with T.cast; a buffer seen as another type is a tensor view")
    return tirx.reinterpret(target, value)


# ---------------------------------------------------------------- integer arithmetic


def _int_op(python_op, tir_op, doc):
    def op(a, b):
        a, b = E.as_ir(a), E.as_ir(b)
        if not E.is_expr(a) and not E.is_expr(b):
            return python_op(a, b)
        return tir_op(*E.unify(a, b))

    op.__doc__ = doc
    return op


floordiv = _int_op(lambda a, b: a // b, tirx.floordiv, "`a // b`, rounding down.")
floormod = _int_op(lambda a, b: a % b, tirx.floormod, "`a % b`, with the sign of `b`.")
truncdiv = _int_op(lambda a, b: builtins.int(a / b), tirx.truncdiv,
                   "`a / b` rounded toward zero, as in C.")
truncmod = _int_op(lambda a, b: a - b * builtins.int(a / b), tirx.truncmod,
                   "The remainder of `truncdiv`, with the sign of `a`, as in C.")
shift_left = _int_op(lambda a, b: a << b, tirx.shift_left, "`a << b`.")
shift_right = _int_op(lambda a, b: a >> b, tirx.shift_right, "`a >> b`.")


def clamp(value, lo, hi):
    """`value` limited to `[lo, hi]`."""
    return E.max(E.min(value, hi), lo)


# ---------------------------------------------------------------- loops, sizes, buffers

Serial = serial
Unroll = unroll


def parallel(start, stop=None):
    """TVM's one-dimensional `T.parallel(n)`, as TileLang programs use it: `T.Parallel(n)`;
    nested, the loops are one parallel nest, as `T.Parallel(m, n)` is."""
    if stop is not None:
        if not (isinstance(start, builtins.int) and start == 0):
            raise TileLabSyntaxError(
                "T.parallel(start, stop) counts from start; tilelab's parallel loops count "
                "from 0", hint="for i in T.Parallel(stop - start): ... use start + i")
        start = stop
    return Parallel(start)


def SharedBuffer(shape, dtype="float32"):  # noqa: N802 - TileLang's spelling
    """TileLang's annotation of a `@T.macro` parameter that is a shared tile
    (`tile: T.SharedBuffer([N], T.float32)`). A macro takes its arguments as they come:
    the annotation documents the parameter and checks nothing."""
    return Tensor(shape, dtype)


FragmentBuffer = LocalBuffer = SharedBuffer  # the same, for fragments and thread-locals


def dynamic(name: str, dtype: str = "int32"):  # noqa: A002
    """`M = T.dynamic("m")`: a size taken from the tensors of each call.

    tilelab compiles one kernel per shape, so a dynamic size is known by the time the
    kernel body is traced (like a `T.const` name of the eager style).
    """
    names = [n for n in name.replace(",", " ").split() if n]
    values = tuple(SymbolicDim(n) for n in names)
    return values[0] if len(values) == 1 else values


symbolic = dynamic


def alloc_buffer(shape, dtype, scope=None):  # noqa: A002
    """TileLang's general allocation; the scope picks the tilelab primitive. Without one
    it is, as in TVM, global memory before `with T.Kernel` (T.alloc_global: scratch of
    the program) and, as tilelab reads it inside a kernel, a shared tile."""
    if scope is None:
        scope = "shared.dyn" if current("alloc_buffer", need_kernel=False).in_kernel \
            else "global"
    if scope == "global":
        return alloc_global(shape, dtype)
    if scope.startswith("shared"):
        return alloc_shared(shape, dtype, scope)
    if scope == "local.fragment":
        return alloc_fragment(shape, dtype)
    if scope == "local":
        return alloc_local(shape, dtype)
    raise TileLangFeatureError.of("alloc_buffer", f"memory scope {scope!r}",
                               "T.alloc_shared, T.alloc_fragment, T.alloc_local or "
                               "T.alloc_global")


def alloc_reducer(shape, dtype, op="sum", replication=None):
    """TileLang's reducer: a fragment that a T.Parallel loop folds into (`r[i] += v` in a
    loop over i, j; T.max, T.min) before T.finalize_reducer. tilelab keeps it a fragment:
    the CPU runs the loop in order, and where the GPU's threads share the iterations that
    fold into one element the compiler does the loop as a reduction across them
    (passes/spill_fragments.as_reduction). `op` and `replication` are TileLang's hints."""
    if op not in ("sum", "max", "min"):
        raise TileLabSyntaxError(f"T.alloc_reducer(op={op!r}): the ops are 'sum', 'max' "
                                 "and 'min'")
    if replication not in (None, "all", "none"):
        raise TileLabSyntaxError(f"T.alloc_reducer(replication={replication!r}): TileLang "
                                 "takes 'all' or 'none'")
    return alloc_fragment(shape, dtype)


def finalize_reducer(reducer):
    """Where TileLang combines the threads' copies of a T.alloc_reducer: in tilelab the
    loop that folded into it already did (a reduction where the threads shared it)."""
    if not tirx_is_buffer(reducer) or reducer.scope() != "local.fragment":
        raise TileLabSyntaxError("T.finalize_reducer takes the buffer T.alloc_reducer made")


def make_swizzled_layout(buffer):
    """The bank-conflict-free layout tilelab would pick for a shared tile, for
    `T.annotate_layout({tile: make_swizzled_layout(tile)})`."""
    from ..ir.layout import Layout
    from ..ir.tile_ops import is_buffer

    if not is_buffer(buffer):
        raise TileLabSyntaxError("make_swizzled_layout takes a shared-memory buffer")
    bits = dtypes.as_dtype(str(buffer.dtype)).bits
    return Layout.swizzled([builtins.int(s) for s in buffer.shape], bits)


def im2col(img, col, nhw_step, c_step, kernel, stride=1, dilation=1, pad=0,
           eviction_policy=None, annotations=None):
    """Fill the shared tile `col` (rows × cols) with a block of the im2col matrix of the
    NHWC image `img`, as a convolution computed as a GEMM reads it: row r is output
    pixel m = nhw_step * rows + r (batch, then row, then column of the output), column c
    is k = c_step * cols + c over (kernel row, kernel column, channel), channel fastest;
    its value is the input pixel that filter tap sees, 0 where it falls in the padding or
    past the last pixel or tap. `kernel` is the filter's height and width. (TileLang's
    T.im2col; here an element-wise T.Parallel loop, on every backend.)"""
    from .primitives import Parallel

    builder = current("im2col")
    if not (tirx_is_buffer(img) and len(img.shape) == 4 and tirx_is_buffer(col) and
            len(col.shape) == 2):
        raise TileLabSyntaxError("T.im2col(img, col, ...) takes a 4-D NHWC tensor and a 2-D "
                                 "tile")
    for name, value in (("kernel", kernel), ("stride", stride), ("dilation", dilation),
                        ("pad", pad)):
        if not isinstance(value, builtins.int) or value < (0 if name == "pad" else 1):
            raise TileLabSyntaxError(f"T.im2col: {name} must be a "
                                     f"{'non-negative' if name == 'pad' else 'positive'} int, "
                                     f"got {value!r}")
    batch, height, width, channels = img.shape
    rows, cols = (builtins.int(e) for e in col.shape)
    out_h = (height + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    out_w = (width + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1

    def element(ij):
        i, j = ij
        m = E.binary("+", E.binary("*", nhw_step, rows), i)
        k = E.binary("+", E.binary("*", c_step, cols), j)
        n, pixel = m // (out_h * out_w), m % (out_h * out_w)
        tap, c = k // channels, k % channels
        h = (pixel // out_w) * stride + (tap // kernel) * dilation - pad
        w = (pixel % out_w) * stride + (tap % kernel) * dilation - pad
        inside = tirx.all(m < batch * out_h * out_w, k < kernel * kernel * channels,
                          h >= 0, h < height, w >= 0, w < width)
        clamp = [tirx.max(tirx.min(v, hi - 1), 0) for v, hi in
                 ((n, batch), (h, height), (w, width))]  # every read within img
        value = tirx.BufferLoad(img, [clamp[0], clamp[1], clamp[2], c])
        builder.emit(tirx.BufferStore(col, tirx.if_then_else(
            inside, value, tirx.const(0, str(col.dtype))), [i, j]))

    builder.emit(Parallel(rows, cols).build(["i", "j"], element))


class comm_reducer:  # noqa: N801 - TVM's spelling
    """`T.comm_reducer(lambda x, y: x + y, [T.cast(0, T.float32)])`: how TVM's thread
    all-reduce combines two values, and the value that changes nothing."""

    def __init__(self, combine, identities):
        identities = list(identities) if isinstance(identities, (list, tuple)) else [identities]
        if not callable(combine) or len(identities) != 1:
            raise TileLabSyntaxError("T.comm_reducer takes a function of two values and a list "
                                     "of one identity: T.comm_reducer(lambda x, y: x + y, "
                                     "[T.cast(0, T.float32)])")
        self.combine, self.identity = combine, identities[0]


class attr:  # noqa: N801 - TVM's spelling
    """`with T.attr(T.comm_reducer(...), "reduce_scope", ...):` the scope TVM gives one
    `T.tvm_thread_allreduce`, as TileLang's hand-written GEMV does; the only T.attr tilelab
    takes (its third argument, a null pointer, says nothing)."""

    def __init__(self, node, key, value=None):
        if not isinstance(node, comm_reducer) or key != "reduce_scope":
            raise TileLangFeatureError(
                f"T.attr({type(node).__name__}, {key!r}, ...) is a TVM attribute tilelab does "
                "not have; it takes T.attr(T.comm_reducer(...), \"reduce_scope\", ...) around a "
                "T.tvm_thread_allreduce",
                hint="for an exchange between threads, T.reduce_* of a fragment")
        self.reducer = node

    def __enter__(self):
        self._builder = current("T.attr")
        self._builder.reducers.append(self.reducer)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._builder.reducers.pop()
        return False


class _Done:
    """What `T.tvm_thread_allreduce` returns: its statements are emitted already, so
    `T.evaluate` of it has nothing more to do."""


def tvm_thread_allreduce(count, value, condition, out, *threads, dtype="handle"):
    """`T.tvm_thread_allreduce(T.uint32(1), v, True, r[0], tk, dtype="handle")` inside
    `with T.attr(T.comm_reducer(f, [identity]), "reduce_scope", ...)`: each thread's `r[0]`
    becomes f folded over the `v` of the threads that differ from it only in the thread
    indices listed (`tk`). tilelab exchanges the values through shared memory - each thread
    writes its own, a barrier, each folds its group's - in code written for one thread, so
    both backends run it as any such code (passes/thread_code.py); TVM would use warp
    shuffles where the group fits a warp."""
    builder = current("T.tvm_thread_allreduce")
    if not builder.reducers:
        raise TileLabSyntaxError(
            "T.tvm_thread_allreduce needs its reducer: write it inside `with T.attr("
            "T.comm_reducer(lambda x, y: x + y, [identity]), \"reduce_scope\", ...)`")
    reducer = builder.reducers[-1]
    cond = E.as_ir(condition)
    if _const_int(E.as_ir(count)) != 1 or not (
            condition is True or isinstance(cond, tirx.IntImm) and builtins.int(cond.value)):
        raise TileLabSyntaxError("T.tvm_thread_allreduce(T.uint32(1), value, True, out, ...): "
                                 "tilelab reduces one value, under no condition")
    out = E.as_ir(out)
    if not (is_load(out) and out.source.scope() in ("local", "local.var")):
        raise TileLabSyntaxError("T.tvm_thread_allreduce writes its result into an element of "
                                 "a T.alloc_local register, as `C_reduced[0]`")
    dims = []
    for var in threads:
        match = [d for d, v in builder.thread_vars.items() if v.same_as(E.as_ir(var))]
        if not match:
            raise TileLabSyntaxError("T.tvm_thread_allreduce reduces over thread indices "
                                     "(T.get_thread_binding(d)); got "
                                     f"{E.as_ir(var)!r}")
        dims.append(match[0])
    extents = [builtins.int(e) for e in builder.threads]
    index = [thread_index(builder, d) for d in range(len(extents))]
    dtype = str(out.source.dtype)
    exchange = _exchange(builder, "allreduce_exchange", math.prod(extents), dtype)
    builder.emit(tirx.BufferStore(exchange, E.to_expr(value, dtype), [_flat(index, extents)]))
    r = tirx.Var("r", "int32")
    group = [extents[d] for d in dims]
    others = list(index)
    for d, i in zip(dims, unravel(r, group)):
        others[d] = i
    here = tirx.BufferLoad(out.source, list(out.indices))
    builder.emit(tirx.BufferStore(out.source, E.to_expr(reducer.identity, dtype),
                                  list(out.indices)))
    builder.emit(tirx.For(r, 0, math.prod(group), tirx.ForKind.SERIAL, tirx.BufferStore(
        out.source, E.to_expr(reducer.combine(here, tirx.BufferLoad(
            exchange, [_flat(others, extents)])), dtype), list(out.indices))))
    return _Done()


def _flat(index, extents):
    """The flat thread index of the thread indices `index` (x varies fastest), as CUDA
    numbers a block's threads - and so its warps' lanes."""
    flat = 0
    for d in reversed(range(len(extents))):
        flat = flat * extents[d] + index[d]
    return flat


def _exchange(builder, name, size, dtype):
    """A shared tile of `size` elements through which threads hand each other values in
    code written for one thread (allocated where the exchange is written)."""
    exchange = tirx.decl_buffer((size,), dtype, scope="shared.dyn",
                                name=builder.fresh_name(name))
    builder.buffer_locations[exchange.name] = builder.location
    builder.emit(tirx.AllocBuffer(exchange, annotations={EXCHANGE: 1}))
    return exchange


# ---------------------------------------------------------------- warp shuffles
#
# CUDA's __shfl_sync family hands each lane of a warp (32 threads, numbered by the flat
# thread index) the value another lane of that warp holds. tilelab passes the values
# through a shared tile instead, in code written for one thread, as the all-reduce above
# does: where the shuffle is called each thread stores its value at its flat thread index
# (a statement), and the shuffle's value is the load of its source lane's entry (an
# expression, read by the statement that uses it). The store and that statement are
# separate pieces of thread code (passes/thread_code.py), so the CPU runs the store for
# every thread before any thread reads, and on CUDA TVM's ThreadSync puts a
# __syncthreads() between them - and between the reads and the next store of the tile
# where the shuffle sits in a loop. Each call has its own tile: a shuffle's value is read
# where it is used, which may come after another shuffle has stored (`T.shfl_xor(a, 1) +
# T.shfl_xor(b, 2)` stores both values before it reads either).
#
# Which lane a shuffle reads is CUDA's rule (PTX's shfl.sync): `width` (a power of two up
# to 32) cuts the warp into segments that shuffle on their own, and a source outside the
# caller's segment gives the caller its own value - except a shfl_xor's source in an
# earlier segment, which CUDA reads. Lanes and offsets count modulo 32, CUDA reading their
# low five bits. The mask, the lanes that take part, changes nothing here: every thread
# that reaches the shuffle stores its value.

WARP_SIZE = 32
_FULL_MASK = 0xFFFFFFFF


def _shuffle(op, value, width, source):
    """The exchange of one `T.<op>`: emits the store of the caller's `value` and returns
    the load of its source lane's entry, `source(lane, first, width)` for the caller's lane
    (0..31) and the first lane of its `width`-lane segment."""

    builder = current(op)
    if builder.parallel_depth:
        raise TileLabSyntaxError(
            f"T.{op} inside a T.Parallel loop: a warp shuffle belongs in code written for one "
            "thread, whose lanes are its threads; the compiler deals a T.Parallel loop's "
            "elements to threads itself",
            hint="take the thread index (tx = T.get_thread_binding()) and loop with T.serial")
    if builder.role is not None:
        raise TileLabSyntaxError(f"T.{op} inside a T.ws role is not supported",
                                 hint="shuffle in code for one thread outside the role")
    value = E.as_ir(value)
    if not E.is_expr(value):
        raise TileLabSyntaxError(f"T.{op} shuffles a kernel value; got {value!r}",
                                 hint="give a constant its type (T.float32(1)), or read it "
                                      "from a buffer")
    size = _lane_count(width)
    if size is None:
        raise TileLabSyntaxError(
            f"T.{op}(..., width={width!r}): the width of the warp's segments is a constant "
            f"power of two from 1 to {WARP_SIZE}", hint=f"width={WARP_SIZE}: the whole warp")
    extents = [builtins.int(e) for e in builder.threads]
    t = _flat([thread_index(builder, d) for d in range(len(extents))], extents)
    # whole warps: a source lane past the block's last thread reads an entry no thread
    # wrote, as CUDA leaves that value undefined
    warps = -(-math.prod(extents) // WARP_SIZE)
    exchange = _exchange(builder, "shfl_exchange", warps * WARP_SIZE, dtype_of(value))
    builder.emit(tirx.BufferStore(exchange, value, [t], span=tvm_span(builder.location)))
    lane = E.binary("%", t, WARP_SIZE)
    first = E.binary("-", lane, E.binary("%", lane, size))
    # the warp's first thread as (t // 32) * 32: TVM's FlattenBuffer divides by zero on
    # `t - t % 32` in an index where t < 32 (a block of one warp)
    warp = E.binary("*", E.binary("//", t, WARP_SIZE), WARP_SIZE)
    return tirx.BufferLoad(exchange, [E.binary("+", warp, source(lane, first, size))])


def _lane_count(x) -> int | None:
    """`x` as a number of a warp's lanes: a constant power of two from 1 to 32 (else None)."""
    size = _const_int(E.as_ir(x))
    if size is None or isinstance(x, bool) or not 1 <= size <= WARP_SIZE or size & (size - 1):
        return None
    return size


def _lane_number(x):
    """A lane or offset as CUDA reads it: its low five bits."""
    return E.binary("&", E.to_expr(x, "int32"), WARP_SIZE - 1)


def _read(src_lane):
    """__shfl_sync: lane `src_lane` modulo width of the caller's segment."""
    return lambda lane, first, width: E.binary(
        "+", first, E.binary("&", E.to_expr(src_lane, "int32"), width - 1))


def _up(delta):
    """__shfl_up_sync: `delta` lanes below; the segment's lowest lanes keep their own."""
    def source(lane, first, width):
        j = E.binary("-", lane, _lane_number(delta))
        return tirx.Select(E.binary(">=", j, first), j, lane)
    return source


def _down(delta):
    """__shfl_down_sync: `delta` lanes above; the segment's highest lanes keep their own."""
    def source(lane, first, width):
        j = E.binary("+", lane, _lane_number(delta))
        return tirx.Select(E.binary("<", j, E.binary("+", first, width)), j, lane)
    return source


def _xor(lane_mask):
    """__shfl_xor_sync: the lane whose number is the caller's xor `lane_mask`; one in a
    later segment gives the caller its own value."""
    def source(lane, first, width):
        j = E.binary("^", lane, _lane_number(lane_mask))
        return tirx.Select(E.binary("<", j, E.binary("+", first, width)), j, lane)
    return source


def shfl_sync(*args, **kwargs):
    """`T.shfl_sync(value, srcLane, width=32, mask=0xFFFFFFFF)`: the `value` that lane
    `srcLane` (modulo `width`) of the caller's segment of `width` lanes holds - a broadcast
    when every lane names the same (CUDA's `__shfl_sync`). TileLang's older spelling puts
    the mask first, as CUDA does: `T.shfl_sync(mask, value, srcLane, width)`; a constant
    first argument (no value to shuffle) says that one is meant."""
    if args and _const_int(E.as_ir(args[0])) is not None:
        return _shfl_sync_mask_first(*args, **kwargs)
    return _shfl_sync(*args, **kwargs)


def _shfl_sync(value, srcLane, width=WARP_SIZE, mask=_FULL_MASK):  # noqa: N803 - TileLang's
    return _shuffle("shfl_sync", value, width, _read(srcLane))


def _shfl_sync_mask_first(mask, value, srcLane, width=WARP_SIZE):  # noqa: N803
    return _shuffle("shfl_sync", value, width, _read(srcLane))


def shfl_xor(value, delta, width=WARP_SIZE, mask=_FULL_MASK):
    """`T.shfl_xor(value, delta, width=32)`: the `value` of the lane whose number is the
    caller's xor `delta` (CUDA's `__shfl_xor_sync`); with `delta` 16, 8, 4, 2, 1 in turn,
    a butterfly that gives every lane the whole warp's sum."""
    return _shuffle("shfl_xor", value, width, _xor(delta))


def shfl_down(value, delta, width=WARP_SIZE, mask=_FULL_MASK):
    """`T.shfl_down(value, delta, width=32)`: the `value` of the lane `delta` above the
    caller's; the top `delta` lanes of each segment keep their own (CUDA's
    `__shfl_down_sync`). With `delta` 16, 8, 4, 2, 1, lane 0 ends with the warp's sum."""
    return _shuffle("shfl_down", value, width, _down(delta))


def shfl_up(value, delta, width=WARP_SIZE, mask=_FULL_MASK):
    """`T.shfl_up(value, delta, width=32)`: the `value` of the lane `delta` below the
    caller's; the bottom `delta` lanes of each segment keep their own (CUDA's
    `__shfl_up_sync`): with `delta` 1, 2, 4, 8, 16, an inclusive prefix sum."""
    return _shuffle("shfl_up", value, width, _up(delta))


def _tvm_width(op, width, warp_size):
    """`width`, once TVM's `warp_size` (the target's warp) is checked: no more lanes than
    CUDA's warp, and no fewer than `width`."""
    size = _lane_count(warp_size)
    if size is None or (_const_int(E.as_ir(width)) or 0) > size:
        raise TileLabSyntaxError(
            f"T.{op}(..., width={width!r}, warp_size={warp_size!r}): the warp size is a "
            f"constant power of two up to CUDA's {WARP_SIZE}, and the width at most that",
            hint=f"T.{op}(mask, value, lane, {WARP_SIZE}, {WARP_SIZE})")
    return width


def tvm_warp_shuffle(mask, value, warp_id, width, warp_size):
    """TVM's `T.tvm_warp_shuffle(mask, value, src_lane, width, warp_size)`: `T.shfl_sync`
    with CUDA's order of arguments, `warp_id` the source lane."""
    return _shuffle("tvm_warp_shuffle", value,
                    _tvm_width("tvm_warp_shuffle", width, warp_size), _read(warp_id))


def tvm_warp_shuffle_up(mask, value, offset, width, warp_size):
    """TVM's spelling of `T.shfl_up(value, offset, width)`."""
    return _shuffle("tvm_warp_shuffle_up", value,
                    _tvm_width("tvm_warp_shuffle_up", width, warp_size), _up(offset))


def tvm_warp_shuffle_down(mask, value, offset, width, warp_size):
    """TVM's spelling of `T.shfl_down(value, offset, width)`."""
    return _shuffle("tvm_warp_shuffle_down", value,
                    _tvm_width("tvm_warp_shuffle_down", width, warp_size), _down(offset))


def tvm_warp_shuffle_xor(mask, value, lane_mask, width, warp_size):
    """TVM's spelling of `T.shfl_xor(value, lane_mask, width)`."""
    return _shuffle("tvm_warp_shuffle_xor", value,
                    _tvm_width("tvm_warp_shuffle_xor", width, warp_size), _xor(lane_mask))


def evaluate(value):
    """`T.evaluate(T.tvm_thread_allreduce(...))`: the all-reduce (its statements are in
    place already). tilelab evaluates no other expression for its effect."""
    if not isinstance(value, _Done):
        raise TileLabSyntaxError("T.evaluate takes a T.tvm_thread_allreduce; an expression "
                                 "evaluated for its effect has none in tilelab",
                                 hint="assign the value to a buffer element")


def disable_warp_group_reg_alloc():
    """TileLang's hint that the kernel's warpgroups keep the registers they launch with:
    no `setmaxnreg` moves between producer and consumers (`tl.disable_setmaxnreg`)."""
    from ..ir.keys import PassConfigKey

    builder = current("T.disable_warp_group_reg_alloc")
    builder.pass_configs[PassConfigKey.TL_DISABLE_SETMAXNREG.value] = True


no_set_max_nreg = disable_warp_group_reg_alloc  # TileLang's other name for the same hint


def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=None,  # noqa: N803
               clear_accum=False, k_pack=1, wg_wait=0):
    """TileLang's `T.gemm` issued as warpgroup MMAs the program waits for itself
    (`T.wait_wgmma`). tilelab lowers it as `T.gemm`, which waits for its MMAs where
    something reads their result (and keeps them in flight across a pipelined loop), so
    the program's `T.wait_wgmma` that follows has nothing left to wait for."""
    from ..ops.gemm import GemmWarpPolicy, gemm

    gemm(A, B, C, transpose_A, transpose_B, GemmWarpPolicy.Square if policy is None else
         policy, clear_accum, k_pack, wg_wait)


# ---------------------------------------------------------------- 2:4 sparse GEMM

# TileLang's contract for 2:4 sparse operands (its `tilelang.cuda.intrinsics.sparse_layout`):
# per data type, (nonzeros kept, elements) in each group along K; the positions of a
# group's nonzeros take 4 bits of metadata, packed from the low bits up
SPARSE_GROUPS = {dtypes.float32: (1, 2), dtypes.float16: (2, 4), dtypes.bfloat16: (2, 4),
                 dtypes.int8: (2, 4), dtypes.uint8: (2, 4), dtypes.float8_e4m3fn: (2, 4),
                 dtypes.float8_e5m2: (2, 4)}


def sparse_e_factor(a_dtype, meta_dtype) -> builtins.int:
    """How many elements of A one metadata element describes."""
    _, group = SPARSE_GROUPS[dtypes.as_dtype(a_dtype)]
    return dtypes.as_dtype(meta_dtype).bits // 4 * group


def gemm_sp(A_sparse, E, B, C, transpose_A=False, transpose_E=False,  # noqa: N803
            transpose_B=False, policy=None, clear_accum=False, k_pack=1, wg_wait=0,
            annotations=None):
    """TileLang's 2:4 sparse GEMM, `C += A @ B` with A given by its nonzeros: `A_sparse`
    keeps two of every four elements along K (one of two for float32), in order, and `E`
    says where they were, 4 bits a group from the low bits up (2-bit positions of the first
    and the second; float32: 0b0100 the first element, 0b1110 the second), as TileLang's
    `compress` writes them. tilelab expands A into a dense shared tile, element by element
    (a T.Parallel loop), and multiplies that with T.gemm: the result of the sparse
    instruction, at the cost of a dense one."""
    from ..ops.gemm import GemmWarpPolicy, gemm

    builder = current("gemm_sp")
    for name, tile in (("A_sparse", A_sparse), ("E", E)):
        if not tirx_is_buffer(tile) or len(tile.shape) != 2:
            raise TileLabTypeError(f"T.gemm_sp: {name} must be a 2-D tile (T.alloc_shared "
                                   "or T.alloc_fragment)")
    a_dtype = dtypes.as_dtype(str(A_sparse.dtype))
    if a_dtype not in SPARSE_GROUPS:
        raise TileLabTypeError(f"T.gemm_sp has no 2:4 sparse form for {a_dtype} operands",
                               hint="float16, bfloat16, float32, int8, uint8 or float8")
    kept, group = SPARSE_GROUPS[a_dtype]
    rows, half_k = (builtins.int(e) for e in A_sparse.shape)
    if transpose_A:
        rows, half_k = half_k, rows
    depth = half_k * group // kept
    per_meta = sparse_e_factor(a_dtype, str(E.dtype))
    e_shape = (depth // per_meta, rows) if transpose_E else (rows, depth // per_meta)
    if tuple(builtins.int(e) for e in E.shape) != e_shape:
        raise TileLabTypeError(f"T.gemm_sp: E is {'x'.join(str(e) for e in E.shape)}, "
                               f"expected {'x'.join(map(str, e_shape))} for a {rows}x{depth} A "
                               f"with {E.dtype} metadata ({per_meta} elements of A each)")
    dense = alloc_shared((rows, depth), a_dtype)

    def element(ik):
        i, k = ik
        g, p = k // group, k % group
        meta = E[k // per_meta, i] if transpose_E else E[i, k // per_meta]
        nibble = (tirx.Cast("int32", meta) >> (4 * (g % (per_meta // group)))) & 15

        def kept_value(j):
            return A_sparse[g * kept + j, i] if transpose_A else A_sparse[i, g * kept + j]

        zero = tirx.const(0, str(a_dtype))
        if kept == 1:  # float32: one of each pair
            value = tirx.if_then_else(tirx.EQ(p, (nibble & 3) // 2), kept_value(0), zero)
        else:
            value = tirx.if_then_else(tirx.EQ(p, nibble & 3), kept_value(0), tirx.if_then_else(
                tirx.EQ(p, (nibble >> 2) & 3), kept_value(1), zero))
        builder.emit(tirx.BufferStore(dense, value, [i, k]))

    builder.emit(Parallel(rows, depth).build(["i", "k"], element))
    gemm(dense, B, C, False, transpose_B, GemmWarpPolicy.Square if policy is None else policy,
         clear_accum, k_pack, wg_wait)


def wait_wgmma(count=0):
    """TileLang's wait for all but `count` groups of a warpgroup's `T.wgmma_gemm` MMAs:
    tilelab's `T.wgmma_gemm` waits for its own (see there), so this waits for nothing."""
    current("T.wait_wgmma")
    if _const_int(count) is None or _const_int(count) < 0:
        raise TileLabTypeError(f"T.wait_wgmma({count}): the number of MMA groups left in "
                               "flight is a constant >= 0")


def set_max_nreg(reg_count, is_inc):
    """TileLang's `T.set_max_nreg(240, 1)` at the top of a warp role written by hand: the
    role's warpgroups take (1) or give back (0) registers, a hint for the register
    allocator that changes no result. tilelab moves registers itself where it splits a
    loop into producer and consumers (passes/specialize_warps.py); in a program's own
    roles it keeps the registers the launch gives every thread, and the hint is checked
    and left out."""
    _register_hint("T.set_max_nreg", reg_count, ", ...")
    inc = _const_int(is_inc)
    if inc not in (0, 1):
        raise TileLabTypeError(f"T.set_max_nreg(..., {is_inc}): is_inc is 1 (take registers) "
                               "or 0 (give them back)")


def annotate_producer_reg_dealloc(reg_count=24):
    """TileLang's `T.set_max_nreg(reg_count, 0)` for a producer role (it gives registers
    back): a hint, checked and left out as T.set_max_nreg is."""
    _register_hint("T.annotate_producer_reg_dealloc", reg_count)


def annotate_consumer_reg_alloc(reg_count=240):
    """TileLang's `T.set_max_nreg(reg_count, 1)` for a consumer role (it takes registers):
    a hint, checked and left out as T.set_max_nreg is."""
    _register_hint("T.annotate_consumer_reg_alloc", reg_count)


class AccessPointer:
    """`T.access_ptr(A[i, j], "r", n)`: `n` elements of A from [i, j] on, read ("r") or
    written ("w"), as `T.ptx_cp_async` takes them (no other use: tilelab has no pointers)."""

    def __init__(self, element, mode, extent):
        self.element, self.mode, self.extent = element, mode, extent


def access_ptr(element, mode="r", extent=1, *_offsets, **_hints):
    """TileLang's access pointer into a tensor or tile, for `T.ptx_cp_async`."""
    current("T.access_ptr")
    if not is_load(element):
        raise TileLabTypeError(f"T.access_ptr takes an element, as in T.access_ptr(A[i, j], "
                               f"'r', 8), got {element!r}")
    if mode not in ("r", "w", "rw"):
        raise TileLabTypeError(f"T.access_ptr(..., {mode!r}, ...): the access is 'r', 'w' or "
                               "'rw'")
    return AccessPointer(element, mode, extent)


def ptx_cp_async(dst, src, num_elems, predicate=None):
    """TileLang's copy of `num_elems` consecutive elements from global to shared memory by
    one thread (`cp.async`, in code for one thread: the indices use T.get_thread_binding()),
    each side a `T.access_ptr`. tilelab copies them there and then (16 bytes at a time
    where the size allows), so the elements are in place when the thread goes on, and
    `T.cp_async_barrier_noinc`, `T.ptx_commit_group` and `T.ptx_wait_group` that order
    them later have nothing left to wait for. `predicate`: copy only where it holds."""
    builder = current("T.ptx_cp_async")
    for side, name, scope in ((dst, "destination", "shared"), (src, "source", "global")):
        if not isinstance(side, AccessPointer):
            raise TileLabTypeError(f"T.ptx_cp_async takes T.access_ptr(...) as its {name}, "
                                   f"got {side!r}")
        if not side.element.source.scope().startswith(scope):
            raise TileLabTypeError(f"T.ptx_cp_async copies from global to shared memory; its "
                                   f"{name} {side.element.source.name} is in "
                                   f"{side.element.source.scope()} memory")
    count = _const_int(num_elems)
    if count is None or count < 1:
        raise TileLabTypeError(f"T.ptx_cp_async(..., {num_elems}): the number of elements is "
                               "a constant >= 1")
    e = tirx.Var("e", "int32")
    *rows, last = dst.element.indices
    *src_rows, src_last = src.element.indices
    store = tirx.BufferStore(dst.element.source, E.to_expr(
        tirx.BufferLoad(src.element.source, [*src_rows, src_last + e]),
        str(dst.element.source.dtype)), [*rows, last + e])
    if predicate is not None:
        store = tirx.IfThenElse(E.as_ir(predicate), store, None)
    bits = dtypes.as_dtype(str(dst.element.source.dtype)).bits * count
    kind = tirx.ForKind.VECTORIZED if predicate is None and bits in (32, 64, 128) else \
        tirx.ForKind.SERIAL
    builder.emit(tirx.For(e, 0, count, kind, store))


def cp_async_barrier_noinc(mbarrier):
    """TileLang's arrival at `mbarrier` once this thread's `T.ptx_cp_async` copies have
    landed: every thread of the role arrives (its copies are in place already); on the GPU
    each orders its stores before the tensor cores read them (a proxy fence)."""
    from ..ops.barrier import barrier_arrive

    barrier_arrive(mbarrier, after_stores=True)


def ptx_commit_group():
    """TileLang's end of a group of `T.ptx_cp_async` copies: tilelab's are complete
    already, so there is nothing to group."""
    current("T.ptx_commit_group")


def ptx_wait_group(count=0):
    """TileLang's wait until all but `count` groups of `T.ptx_cp_async` copies have landed:
    tilelab's are complete already (see T.ptx_cp_async)."""
    current("T.ptx_wait_group")
    if _const_int(count) is None or _const_int(count) < 0:
        raise TileLabTypeError(f"T.ptx_wait_group({count}): the number of groups left in "
                               "flight is a constant >= 0")


def _register_hint(primitive: str, reg_count, more: str = "") -> None:
    current(primitive)
    count = _const_int(reg_count)
    if count is None or not 24 <= count <= 256 or count % 8:
        raise TileLabTypeError(f"{primitive}({reg_count}{more}): the register count is a "
                               "constant multiple of 8 from 24 to 256")

def sync_grid():
    """TileLang's barrier of the whole grid: every block finishes what comes before it
    before any block goes on, so that a persistent kernel's second phase reads what all
    blocks wrote in the first (its split attention's partial results). It stands in the
    kernel's own statement list, not inside a loop, a branch or code for one thread: every
    thread of every block must reach it.

    On the GPU the kernel is then launched cooperatively - all its blocks resident at once,
    which the launch checks (a grid of at most as many blocks as the GPU holds: one per
    multiprocessor, as such kernels are written, is safe) - and the barrier is cooperative
    groups' grid sync. On the CPU the kernel runs as one loop over its blocks for each
    phase; what a block keeps in its own tiles from one phase to the next has a copy per
    block (passes/kernel_to_cpu_loops.py)."""
    from ..ops._lowering import GRID_SYNC

    builder = current("T.sync_grid")
    if len(builder.blocks) != builder.kernel_level or builder.role is not None:
        raise TileLabSyntaxError(
            "T.sync_grid() stands in the kernel's own statement list: inside a loop, a "
            "branch, a T.Parallel loop or a warp role not every thread of every block would "
            "reach it the same number of times",
            hint="end the phase before it: put the loop or branch's work first, then the "
                 "barrier, then the next phase")
    builder.emit(tirx.Evaluate(tirx.call_extern("int32", GRID_SYNC)))

def sync_threads(barrier_id=None, arrive_count=None):
    """A barrier of the whole block, as TileLang writes it. tilelab puts the barriers that
    its tile ops need itself (passes/insert_barriers.py) and counts this one among them;
    it is kept where the program wrote it (on the CPU, where one thread runs a block's
    statements in order, it has nothing to wait for). Every thread must reach it, so it
    may not stand inside a T.Parallel loop, whose elements are dealt to threads. With
    `tl.disable_thread_storage_sync`, the barriers between pieces of code written for one
    thread, and inside them and T.Parallel bodies, are only the program's own.

    `T.sync_threads(barrier_id, arrive_count)`, TileLang's named barrier, is a barrier
    of the `arrive_count` threads that reach it, in code written for one thread (after
    `T.get_thread_binding`) under `if`s on the thread index: `if tx < 256:
    T.sync_threads(3, 256)`. tilelab pushes such an `if` down to each statement below
    it (passes/thread_code.py), so every thread of the block reaches the barrier: it
    becomes a barrier of the block (or of the warp role around it), once the count is
    checked against the threads the `if`s let through."""
    from ..ops._lowering import sync

    builder = current("T.sync_threads")
    if barrier_id is not None or arrive_count is not None:
        if not builder.thread_vars:
            raise TileLabSyntaxError(
                "T.sync_threads(barrier_id, arrive_count), a barrier of part of the block, "
                "belongs in code written for one thread (after tx = T.get_thread_binding())",
                hint="T.sync_threads() in a tile program (tilelab puts the barriers its tile "
                     "ops need itself)")
        count = _const_int(E.as_ir(arrive_count)) if arrive_count is not None else None
        if _const_int(E.as_ir(barrier_id)) is None or count is None or count <= 0:
            raise TileLabSyntaxError(
                "T.sync_threads(barrier_id, arrive_count) takes two constant ints, as "
                f"T.sync_threads(3, 256); got ({barrier_id!r}, {arrive_count!r})")
    if builder.parallel_depth:
        raise TileLabSyntaxError(
            "T.sync_threads() inside a T.Parallel loop: each thread runs only its own "
            "elements of the loop, and a barrier there would wait for all of them",
            hint="put the barrier between loops (tilelab inserts those it needs anyway)")
    if barrier_id is None and arrive_count is None:
        builder.emit(sync())
    else:  # passes/thread_code.py checks the count and makes it a barrier of the block
        builder.emit(tirx.Evaluate(tirx.call_intrin(
            "int32", "tirx.tvm_storage_sync", "shared", E.as_ir(barrier_id),
            E.as_ir(arrive_count)), span=tvm_span(builder.location)))


def assume(condition):
    """A promise to the optimizer that `condition` holds; tilelab does not use it."""
    E.as_ir(condition)


# ---------------------------------------------------------------- what tilelab does not have

_HARDWARE = ("explicit Hopper/Blackwell programming (barriers, TMA, wgmma, tcgen05, warp "
             "specialization)", "T.copy, T.gemm and T.Pipelined: tilelab picks TMA, wgmma, "
             "barriers, async copies and a producer warp for them itself; or write the roles "
             "with T.ws, T.alloc_barrier, T.barrier_wait/T.barrier_arrive and T.tma_copy")
_SYNC = ("an explicit barrier", "nothing: tilelab inserts the barriers that shared memory needs")
_VIEWS = ("a tensor view (reshape/reinterpret of a buffer)",
          "a separate kernel parameter with the shape you need, or index arithmetic")

MISSING: dict[str, tuple[str, str]] = {
    "any_sync": ("a warp vote (does any lane's predicate hold)",
                 "T.shfl_xor of the predicate as an int in code for one thread, or "
                 "T.reduce_max of a fragment"),
    "dp4a": ("CUDA's four-way int8 dot product", "the int8 values cast to T.int32, "
             "multiplied and summed"),
    **dict.fromkeys(("alloc_cluster_barrier", "mbarrier_arrive_expect_tx", "mbarrier_expect_tx",
                     "alloc_tmem", "WSSync", "WSID", "WSPipeline",
                     "WSScope", "WSRole", "WSSchedule", "ws_op", "annotate_ws_schedule",
                     "tcgen05_gemm", "tcgen05_mma_arrive", "tcgen05_gemm_blockscaled",
                     "tcgen05_sf_warp_transpose", "tcgen05_cp_warpx4",
                     "ClusterKernel",
                     "block_rank_in_cluster", "mma_gemm_blockscaled",
                     "clc_try_cancel_multicast", "clc_is_canceled", "clc_get_first_ctaid_x"),
                    _HARDWARE),
    "sync_warp": _SYNC,
    "PersistentTileScheduler": ("persistent blocks that loop over tiles",
                                "one block per tile with T.Kernel"),
    "atomic_load": ("atomic loads and stores", "T.atomic_add, or separate kernels"),
    "atomic_store": ("atomic loads and stores", "T.atomic_add, or separate kernels"),
    "call_extern": ("calls into hand-written device code", "the T.* math functions"),
    "import_source": ("calls into hand-written device code", "the T.* math functions"),
}


class TileLangFeatureError(TileLabSyntaxError, AttributeError):
    """A TileLang name that tilelab does not have (an AttributeError, so `hasattr` works)."""

    @classmethod
    def of(cls, name: str, feature: str, instead: str) -> TileLangFeatureError:
        return cls(f"T.{name} is {feature}, which tilelab does not have",
                   hint=f"use {instead}")


def missing(name: str) -> TileLangFeatureError:
    """The error for `T.<name>` when `T` has no such name."""
    if name in MISSING:
        return TileLangFeatureError.of(name, *MISSING[name])
    import sys

    namespace = [n for n in vars(sys.modules[__package__]) if not n.startswith("_")]
    close = difflib.get_close_matches(name, namespace, 3)
    hint = f"did you mean {' or '.join(f'T.{c}' for c in close)}?" if close else \
        "dir(tilelab.language) lists the primitives"
    return TileLangFeatureError(f"tilelab has no T.{name}", hint=hint)
