"""mbarriers: `T.alloc_barrier`, `T.barrier_arrive`, `T.barrier_wait` (and TileLang's
`T.mbarrier_arrive`, `T.mbarrier_wait_parity`), how warp roles (`T.ws`) hand tiles over.

An mbarrier counts arrivals. It is made with the number it expects; when that many
threads have arrived, its current *phase* completes and the next begins, counting
from zero again. A wait names a phase by its parity: `T.barrier_wait(bar, p)` returns
once the phase of parity p has completed, which for a fresh barrier (phase 0 running)
means at once for p = 1 and after the first completion for p = 0. So a producer and a
consumer alternate without ever resetting anything:

    producer (T.ws(1))                       consumer (T.ws(0))
    wait(done, (k + 1) % 2)  # slot free?     wait(ready, k % 2)   # tile there?
    T.tma_copy(A[...], A_s, barrier=ready)    T.gemm(A_s, ..., C)
    arrive(ready)            # 128 arrivals   arrive(done)

Loop semantics (the CPU, the reference): a barrier is a 64-bit count, phases above
bit 32, arrivals below. An arrival of a role adds its thread count (every thread of
it arrives once) and completes the phase when the count is reached; more arrivals
than expected is an error. Side-by-side roles take turns, each running until it
reaches a wait whose phase has not completed (passes/role_turns.py); where every
role waits for another, the kernel stops with an error at the waits (a GPU would
hang). A wait outside such roles must find its phase complete when it is reached.

Thread lowering (CUDA): `mbarrier.init` by thread 0 at the allocation, then a fence and
a block barrier; each thread of the role arrives (`mbarrier.arrive`) or waits
(`mbarrier.try_wait.parity` in a loop) itself.
"""

from __future__ import annotations

from tvm import tirx

from ..errors import TileLabSyntaxError, TileLabTypeError
from ..ir.builder import current
from ..ir.expr import to_expr
from ..ir.tile_ops import Region, config, is_buffer, is_load, regions, scalars, tile_call
from . import Effects, TileOp, register
from ._lowering import address, check, extern, seq, sync, where_text

PHASE = 32  # the phase count lives above bit 32 of a CPU barrier, arrivals below


def alloc_barrier(arrive_count):
    """mbarriers in shared memory, each expecting `arrive_count` arrivals per phase (an int
    for one barrier, a list for several: `bars = T.alloc_barrier([128] * 4)`, `bars[i]`)."""
    builder = current("alloc_barrier")
    counts = [arrive_count] if isinstance(arrive_count, int) else list(arrive_count)
    if not counts or any(isinstance(c, bool) or not isinstance(c, int) or not 0 < c < 2**20
                         for c in counts):
        raise TileLabTypeError(f"T.alloc_barrier takes an arrival count (a positive int) or "
                               f"a list of them, got {arrive_count!r}")
    if builder.role is not None or len(builder.blocks) > 2:
        raise TileLabSyntaxError("T.alloc_barrier belongs at the top of the kernel, before "
                                 "any loop or T.ws: every thread must see it initialized")
    bars = builder.allocate("barrier", (len(counts),), "uint64", "shared.dyn")
    builder.barriers[bars.name] = counts
    builder.emit(tile_call("barrier_init", Region.whole(bars), counts=_text(counts)))
    return bars


def barrier_arrive(mbarrier, after_stores: bool = False):
    """Every thread of the role (or of the block, outside any T.ws) arrives once.
    `after_stores` (T.cp_async_barrier_noinc): on the GPU each thread first orders its
    shared-memory stores before the async proxy's reads (a wgmma's)."""
    builder = current("barrier_arrive")
    element, counts = barrier_element(mbarrier, "barrier_arrive", builder)
    hints = {"after_stores": True} if after_stores else {}
    builder.emit(tile_call("barrier_arrive", element, arrivals=builder.role_threads(),
                           counts=counts, **hints))


def barrier_wait(mbarrier, parity):
    """Wait until the barrier's phase of this parity (0 or 1) has completed."""
    builder = current("barrier_wait")
    element, _ = barrier_element(mbarrier, "barrier_wait", builder)
    builder.emit(tile_call("barrier_wait", element, to_expr(parity, "int32"),
                           where=where_text(builder.location)))


def mbarrier_arrive(mbarrier, cta_id=None):
    """TileLang's name of T.barrier_arrive (`cta_id`, a cluster's other block, is not had)."""
    if cta_id is not None:
        raise TileLabTypeError("T.mbarrier_arrive(cta_id=...) arrives at another block of a "
                               "cluster; tilelab launches no clusters")
    barrier_arrive(mbarrier)


def mbarrier_wait_parity(mbarrier, parity):
    """TileLang's name of T.barrier_wait."""
    barrier_wait(mbarrier, parity)


def _text(counts) -> str:
    return ",".join(str(c) for c in counts)


def barrier_element(value, primitive: str, builder) -> tuple[Region, str]:
    """`bars[i]` or a one-barrier `bar`: the element as a region of one, and its counts."""
    buffer = value.source if is_load(value) else value if is_buffer(value) else None
    counts = builder.barriers.get(buffer.name) if buffer is not None else None
    if counts is None:
        raise TileLabTypeError(f"T.{primitive} takes a barrier of T.alloc_barrier (bars[i], "
                               f"or the barrier itself when there is one), got {value!r}")
    if is_load(value):
        index = value.indices[0]
    elif len(counts) == 1:
        index = tirx.const(0, "int32")
    else:
        raise TileLabTypeError(f"T.{primitive}: {buffer.name} holds {len(counts)} barriers; "
                               f"name one ({buffer.name}[i])")
    return Region(buffer, (index,), (1,)), _text(counts)


def _counts(call) -> list[int]:
    return [int(c) for c in str(config(call)["counts"]).split(",")]


def _expected(call, index):
    """The arrival count of barrier `index` (a compile-time table lookup)."""
    counts = _counts(call)
    value = tirx.const(counts[-1], "uint64")
    for i in range(len(counts) - 2, -1, -1):
        value = tirx.Select(tirx.EQ(index, i), tirx.const(counts[i], "uint64"), value)
    return value


def effects(call) -> Effects:
    return Effects()  # a barrier's own memory is no tile: barriers are no data hazards


# ---------------------------------------------------------------- loop semantics (CPU)


def _u64(value):
    return tirx.const(value, "uint64")


def init_loops(call):
    bars = regions(call)[0].buffer
    return seq([tirx.BufferStore(bars, _u64(0), [i]) for i in range(len(_counts(call)))])


def arrive_loops(call):
    region = regions(call)[0]
    bars, index = region.buffer, region.starts[0]
    state = tirx.BufferLoad(bars, [index])
    arrived = tirx.bitwise_and(state, _u64(2**PHASE - 1)) + _u64(int(config(call)["arrivals"]))
    phase = tirx.shift_right(state, _u64(PHASE))
    expected = _expected(call, index)
    over = check(tirx.LE(arrived, expected), "T.barrier_arrive: more threads arrived at the "
                 "barrier than it expects in one phase", where(call))
    update = tirx.BufferStore(bars, tirx.Select(
        tirx.GE(arrived, expected), tirx.shift_left(phase + _u64(1), _u64(PHASE)),
        tirx.bitwise_or(tirx.shift_left(phase, _u64(PHASE)), arrived)), [index])
    return seq([over, update])


def phase_completed(call):
    """Has the phase a `T.barrier_wait` names completed (the CPU's barrier state)?"""
    region = regions(call)[0]
    bars, index = region.buffer, region.starts[0]
    parity = to_expr(scalars(call)[0], "uint64")
    running = tirx.bitwise_and(tirx.shift_right(tirx.BufferLoad(bars, [index]),
                                                _u64(PHASE)), _u64(1))
    return tirx.NE(running, parity)


def wait_loops(call):
    return check(phase_completed(call), "T.barrier_wait: the phase it waits for has not "
                 "completed here, and no role runs beside this code to complete it",
                 where(call))


def where(call) -> str:
    """The "file|line|col" of a barrier op's statement, for a check's report."""
    return str(config(call).get("where", ""))


# ---------------------------------------------------------------- thread lowering (CUDA)


def init_threads(call, ctx):
    bars = regions(call)[0].buffer
    return seq([extern("tl::mbar_init", address(bars, [i], rw_mask=2), tirx.const(c, "int32"))
                for i, c in enumerate(_counts(call))] + [extern("tl::mbar_init_fence"), sync()])


def arrive_threads(call, ctx):
    region = regions(call)[0]
    arrive = extern("tl::mbar_arrive", address(region.buffer, [region.starts[0]], rw_mask=1))
    if config(call).get("after_stores"):
        from ._gemm_wgmma import proxy_fence

        return seq([proxy_fence(), arrive])
    return arrive


def wait_threads(call, ctx):
    region = regions(call)[0]
    parity = ctx.fragment_scalars(to_expr(scalars(call)[0], "int32"))
    return extern("tl::mbar_wait", address(region.buffer, [region.starts[0]], rw_mask=1),
                  parity)


register(TileOp("barrier_init", primitives=(alloc_barrier,), effects=effects,
                lowerings={"cpu": init_loops, "cuda": init_threads}))
register(TileOp("barrier_arrive", primitives=(barrier_arrive, mbarrier_arrive),
                effects=effects, lowerings={"cpu": arrive_loops, "cuda": arrive_threads}))
register(TileOp("barrier_wait", primitives=(barrier_wait, mbarrier_wait_parity),
                effects=effects, lowerings={"cpu": wait_loops, "cuda": wait_threads}))
