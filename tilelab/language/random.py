"""Random numbers drawn in the kernel: TileLang's `T.rng_init` and `T.rng_rand`.

`T.rng_init(seed, seq, off)` starts a stream of the Philox4x32-10 generator, as CUDA's
`curand_init(seed, seq, off, &state)` does for its default `curandStatePhilox4_32_10_t`,
and each `T.rng_rand()` takes the stream's next 32-bit number, as `curand(&state)` does.
Philox is counter-based: number d of a stream is lane (off + d) % 4 of ten rounds of
multiplications and xors applied to the counter ((off + d) // 4, seq) under the key
`seed`. So a stream needs no state but its position, three registers of the thread
(seed, seq, position), and the numbers are the same on the CPU and the GPU, and the
same as curand's and Triton's `tl.randint4x(seed, offset)` (a stream of seq 0).

Which thread draws matters: each thread has a stream. A stream started in code written
for one thread (`T.rng_init(seed, 0, tx * 4)`) is that thread's; a draw inside a
`T.Parallel` loop would take numbers in the order in which the loop's elements are dealt
to threads, which the compiler chooses - so it is allowed only in a block of one thread,
whose elements are all its own, in order. A draw advances the stream after the statement
that made it (`x = T.rng_rand()`, `A[i] = T.rng_rand() ^ T.rng_rand()`: two numbers).
"""

from __future__ import annotations

import math

from tvm import tirx

from ..errors import TileLabSyntaxError, TileLabTypeError
from ..ir.builder import current
from . import expr as E
from .primitives import get_thread_binding

_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
_KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
_ROUNDS = 10
_PHILOX = "curandStatePhilox4_32_10_t"


def rng_init(seed, seq=None, off=0, generator=_PHILOX):
    """Start this thread's stream: number `off` onward of subsequence `seq` under the key
    `seed` (all taken as 64-bit). Without `seq`, each thread of the grid gets its own: its
    index among all threads of all blocks (x fastest, threads before blocks)."""
    builder = current("T.rng_init")
    if generator != _PHILOX:
        raise TileLabTypeError(f"T.rng_init(generator={generator!r}): tilelab draws from "
                               f"Philox4x32-10 ({_PHILOX!r}, curand's default)")
    if seq is None:
        seq = _thread_of_the_grid(builder)
    registers = builder.rng
    if registers is None:
        registers = tuple(tirx.decl_buffer((1,), "uint64", scope="local.var",
                                           name=builder.fresh_name(f"rng_{part}"))
                          for part in ("seed", "seq", "position"))
        for register in registers:
            builder.emit(tirx.AllocBuffer(register))
        builder.rng = registers
    for register, value in zip(registers, (seed, seq, off)):
        builder.emit(tirx.BufferStore(register, _uint64(value, "T.rng_init"), [0]))


def rng_rand():
    """The stream's next 32-bit number (uint32)."""
    builder = current("T.rng_rand")
    seed, seq, position = _stream(builder, "T.rng_rand")
    at = tirx.BufferLoad(position, [0]) + tirx.const(builder.draws_pending, "uint64")
    builder.draws_pending += 1
    builder.after_statement[position.name] = tirx.BufferStore(
        position, tirx.BufferLoad(position, [0]) + tirx.const(builder.draws_pending, "uint64"),
        [0])
    return _philox(tirx.BufferLoad(seed, [0]), tirx.BufferLoad(seq, [0]), at)


def rng_rand_float(bit=32, dist="uniform"):
    """The stream's next number as a float32 uniform in (0, 1], as curand_uniform maps
    it: the next 32-bit number x, rounded to float32, times 2**-32 plus 2**-33 - one fused
    multiply-add, so that every backend rounds it alike."""
    if bit != 32 or dist != "uniform":
        raise TileLabTypeError(
            f"T.rng_rand_float(bit={bit!r}, dist={dist!r}): tilelab draws float32 uniform "
            "numbers", hint="for normal numbers, transform two uniform draws (Box-Muller: "
                            "T.sqrt(-2 * T.log(u1)) * T.cos(2 * pi * u2))")
    x = tirx.Cast("float32", rng_rand())
    return tirx.call_pure_extern("float32", "fmaf", x, tirx.const(2.0 ** -32, "float32"),
                                 tirx.const(2.0 ** -33, "float32"))


def _stream(builder, primitive: str):
    if builder.rng is None:
        raise TileLabSyntaxError(f"{primitive}() before T.rng_init: the thread has no "
                                 "stream to draw from", hint="start one first: "
                                                             "T.rng_init(seed, seq, offset)")
    if builder.parallel_depth and math.prod(builder.threads) > 1:
        raise TileLabSyntaxError(
            f"{primitive}() inside a T.Parallel loop of a block of {math.prod(builder.threads)} "
            "threads: each thread draws from its own stream, in the order the compiler deals "
            "it the loop's elements, so which element gets which number is not the program's",
            hint="draw in code written for one thread: tx = T.get_thread_binding(); "
                 "T.rng_init(seed, 0, tx * n); for j in T.serial(n): A[tx * n + j] = "
                 "T.rng_rand()")
    return builder.rng


def _thread_of_the_grid(builder):
    """The thread's index among all threads of the grid: threads x fastest, then y and z,
    then the blocks in the same order."""
    index = tirx.const(0, "int32")
    for var, extent in reversed(builder.block_indices):
        index = index * extent + var
    for dim in reversed(range(len(builder.threads))):
        index = index * builder.threads[dim] + get_thread_binding(dim)
    return index


def _uint64(value, primitive: str):
    value = E.as_ir(value)
    if isinstance(value, bool) or not (isinstance(value, int) or E.is_expr(value)):
        raise TileLabTypeError(f"{primitive} takes integers (a seed, a subsequence, an "
                               f"offset), got {value!r}")
    return tirx.Cast("uint64", E.to_expr(value)) if E.is_expr(value) else \
        tirx.const(value % 2 ** 64, "uint64")


def _philox(seed, seq, position):
    """Lane position % 4 of Philox4x32-10 of counter (position // 4, seq) under key seed.
    Each round's four words are bound once (`let`): written out, every round would repeat
    the one before it twice over."""
    def word(value, shift=0):
        shifted = tirx.shift_right(value, tirx.const(shift, "uint64")) if shift else value
        return tirx.Cast("uint32", shifted)

    block = tirx.shift_right(position, tirx.const(2, "uint64"))
    words = [word(block), word(block, 32), word(seq), word(seq, 32)]  # the counter
    key = [word(seed), word(seed, 32)]
    bindings = []  # (the round's four variables, the values they are bound to)
    for round_ in range(_ROUNDS):
        names = [tirx.Var(f"philox{round_}_{c}", "uint32") for c in "xyzw"]
        bindings.append((names, words))
        x, y, z, w = names
        high0, low0 = _multiply(_MULTIPLIERS[0], x)
        high1, low1 = _multiply(_MULTIPLIERS[1], z)
        words = [high1 ^ y ^ key[0], low1, high0 ^ w ^ key[1], low0]
        key = [k + tirx.const(step, "uint32") for k, step in zip(key, _KEY_STEPS)]
    lane = tirx.Cast("int32", tirx.bitwise_and(position, tirx.const(3, "uint64")))
    x, y, z, w = words
    result = tirx.Select(lane == 0, x, tirx.Select(lane == 1, y, tirx.Select(lane == 2, z, w)))
    for names, values in reversed(bindings):
        for var, value in zip(reversed(names), reversed(values)):
            result = tirx.Let(var, value, result)
    return result


def _multiply(constant: int, value):
    product = tirx.Cast("uint64", value) * tirx.const(constant, "uint64")
    return (tirx.Cast("uint32", tirx.shift_right(product, tirx.const(32, "uint64"))),
            tirx.Cast("uint32", product))
