"""The course's exercise checkers, and the few helpers the chapters share.

Every exercise in a notebook is a cell you edit (it starts out as a runnable
skeleton with a `# TODO`) and a check cell below it:

    check("01.1", add_relu_scale)

`check` runs your answer against PyTorch on fresh inputs - including sizes
that are not multiples of the block sizes - and answers with a `Verdict`:
either "correct", or "not yet" and what looks wrong, with a hint. It never
raises: a kernel that does not compile gets tilelab's error message, at your
line. Where a wrong answer matches a likely mistake (the plain sum instead
of the fused result, the last tile only, a missing rescale), the verdict
names that mistake. The solutions are in `solutions/`, one file per chapter.

`EXERCISES` lists every exercise: its notebook, the names of the answers
`check` takes (the names the skeleton defines), and its checker. The tests
use it to run each checker on the skeleton (it must say "not yet") and on
the solution (it must say "correct").

Helpers for the chapters: `guarded`, `mark` and `touched` run a kernel whose
tail guard is missing without harm and show what it wrote past the end
(chapter 8); `difference` says in words where two tensors first differ.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LOG2_E = 1.4426950408889634

# ---------------------------------------------------------------- verdicts


class NotYet(Exception):
    """Raised by a checker when the answer is wrong; the message says why."""


@dataclass
class Verdict:
    """The answer of `check`: `passed`, and a message for the learner."""

    exercise: str
    title: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        status = "correct" if self.passed else "not yet"
        return f"Exercise {self.exercise} ({self.title}): {status}"

    def __repr__(self) -> str:
        mark = "✅" if self.passed else "❌"
        return f"{mark} {self.headline()}\n{self.message}"

    def _repr_html_(self) -> str:
        color, background = ("#2b7a2b", "#eef8ee") if self.passed else ("#b52b27", "#fdf0ef")
        return (f'<div style="border-left: 4px solid {color}; background: {background}; '
                f'padding: 6px 10px; margin: 4px 0">'
                f'<b style="color: {color}">{html.escape(self.headline())}</b>'
                f'<pre style="white-space: pre-wrap; margin: 4px 0 0 0; background: none">'
                f"{html.escape(self.message)}</pre></div>")


@dataclass(frozen=True)
class Exercise:
    id: str  # "01.1": chapter 01, exercise 1
    notebook: str  # the notebook it belongs to
    title: str
    answers: tuple[str, ...]  # the names of what `check` takes, as the skeleton defines them
    checker: Callable


EXERCISES: dict[str, Exercise] = {}


def exercise(id: str, notebook: str, title: str, answers: tuple[str, ...]):  # noqa: A002
    """Register a checker: it returns a success note, or raises NotYet."""

    def register(checker):
        EXERCISES[id] = Exercise(id, notebook, title, answers, checker)
        return checker

    return register


def check(exercise_id: str, *answers) -> Verdict:
    """Check your answer to an exercise; see the module docstring."""
    if exercise_id not in EXERCISES:
        known = ", ".join(EXERCISES)
        return Verdict(exercise_id, "unknown", False, f"There is no exercise {exercise_id!r}; "
                       f"the exercises are {known}.")
    ex = EXERCISES[exercise_id]
    if len(answers) != len(ex.answers):
        return Verdict(ex.id, ex.title, False, f"check({exercise_id!r}, ...) takes "
                       f"{len(ex.answers)} answer(s): {', '.join(ex.answers)}.")
    try:
        note = ex.checker(*answers)
    except NotYet as wrong:
        return Verdict(ex.id, ex.title, False, str(wrong))
    except Exception as err:  # noqa: BLE001 - the learner's code may raise anything
        return Verdict(ex.id, ex.title, False, _describe_error(err))
    return Verdict(ex.id, ex.title, True, note or "Well done.")


def _describe_error(err: Exception) -> str:
    from tilelab import TileLabError

    if isinstance(err, TileLabError):
        return ("tilelab could not compile or run your kernel. Its message (the line is in "
                f"your cell or file):\n\n{err}")
    return f"Running your answer raised {type(err).__name__}: {err}"


# ---------------------------------------------------------------- helpers


def randn(*shape, dtype=torch.float32, seed: int = 0, scale: float = 1.0, offset: float = 0.0):
    """Reproducible normal random numbers on DEVICE."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(*shape, generator=generator) * scale + offset
    return values.to(dtype).to(DEVICE)


def guarded(n: int, dtype=torch.float32, fill: float = 0.0, band: int = 1024):
    """A vector of n elements followed by a guard band of `band` more, in one allocation.

    Returns (vector, guard). A kernel that reads past the end of `vector`
    reads the guard band (NaN) instead of someone else's memory, and one that
    writes past the end writes into it, where `touched(guard)` sees it. The
    chapters use it to run kernels whose tail guard is missing, safely.
    """
    storage = torch.full((n + band,), float("nan"), dtype=dtype, device=DEVICE)
    storage[:n] = fill
    return storage[:n], storage[n:]


GUARD_MARK = -7777.0


def mark(guard) -> None:
    """Fill a guard band with a value no kernel here writes, before a run."""
    guard.fill_(GUARD_MARK)


def touched(guard) -> list[int]:
    """Positions of a marked guard band (0 = just past the end) that a kernel wrote."""
    return (guard != GUARD_MARK).nonzero().flatten().tolist()


def _as_float(t) -> torch.Tensor:
    return t.detach().float().cpu()


def close(actual, expected, rtol: float = 1e-2, atol: float = 1e-2) -> bool:
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    return bool(torch.isclose(_as_float(actual), _as_float(expected), rtol=rtol,
                              atol=atol).all())


def _where(index: tuple, names) -> str:
    return ", ".join(f"{name} {i}" for name, i in zip(names, index))


def difference(actual, expected, rtol: float = 1e-2, atol: float = 1e-2,
               names=("row", "column")) -> str:
    """Where `actual` first differs from `expected`, in words; '' if they agree."""
    if not isinstance(actual, torch.Tensor):
        return f"your kernel returned {type(actual).__name__}, not a tensor"
    if actual.shape != expected.shape:
        return (f"your kernel's output has shape {tuple(actual.shape)}, expected "
                f"{tuple(expected.shape)}")
    a, e = _as_float(actual), _as_float(expected)
    wrong = ~torch.isclose(a, e, rtol=rtol, atol=atol)
    if not wrong.any():
        return ""
    first = tuple(wrong.nonzero()[0].tolist())
    if a.dim() == 1:
        where = f"index {first[0]}"
    else:
        where = _where(first, names[-a.dim():] if len(names) >= a.dim() else
                       [f"dim {d}" for d in range(a.dim())])
    return (f"your kernel's output differs at {where}: got {a[first].item():.5g}, expected "
            f"{e[first].item():.5g} ({int(wrong.sum())} of {a.numel()} values differ)")


def _need_kernel(answer, name: str):
    from tilelab import JITFunction

    if not isinstance(answer, JITFunction):
        raise NotYet(f"{name} should be a @tilelab.jit function; got {type(answer).__name__}. "
                     "Run the exercise cell above (it defines it) and then this one.")
    return answer


def _target() -> str:
    return "cuda" if DEVICE == "cuda" else "cpu"


def _factory(answer, name: str, *args, **kwargs):
    """Compile a factory-style answer for DEVICE."""
    return _need_kernel(answer, name).compile(*args, target=_target(), **kwargs)


def _quiz(name: str, value, expected, hint: str) -> None:
    try:
        right = value is not None and math.isclose(float(value), float(expected), rel_tol=1e-9)
    except (TypeError, ValueError):
        right = False
    if not right:
        raise NotYet(f"{name} = {value!r} is not right. {hint}")


# ---------------------------------------------------------------- 00 setup


@exercise("00.1", "00_setup.ipynb", "a factory-style kernel: Y = factor · X", ("make_scale",))
def _check_scale(make_scale):
    n, factor = 1000, 3.0
    x = randn(n, seed=1)
    y = _factory(make_scale, "make_scale", n, factor)(x)
    if close(y, x * factor):
        return ("make_scale(1000, 3.0) triples all 1000 elements, the last, partial block "
                "included. `factor` is plain Python: it was baked into the kernel as a "
                "constant when the factory ran.")
    if close(y, x):
        raise NotYet("Your kernel returns X unchanged: multiply each element by `factor`.")
    if close(y, x * 2):
        raise NotYet("Your kernel doubles X, but make_scale(1000, 3.0) must triple it: use "
                     "the `factor` argument instead of a fixed number.")
    raise NotYet(difference(y, x * factor) + ".")


# ---------------------------------------------------------------- 01 vector add


@exercise("01.1", "01_vector_add.ipynb", "fused add, ReLU and scale", ("add_relu_scale",))
def _check_add_relu_scale(add_relu_scale):
    kernel = _need_kernel(add_relu_scale, "add_relu_scale")
    for n, scale in [(4096, 2.0), (1000, 0.5)]:
        a, b = randn(n, seed=n), randn(n, seed=n + 1)
        out = kernel(a, b, scale=scale)
        expected = torch.relu(a + b) * scale
        if close(out, expected):
            continue
        if close(out, a + b):
            raise NotYet("Your kernel still computes plain A + B. Apply the ReLU "
                         "(T.max(value, 0)) and multiply by `scale`, in the same statement.")
        if close(out, torch.relu(a + b)):
            raise NotYet("The ReLU is right, but the result is not multiplied by `scale`.")
        if close(out, (a + b) * scale):
            raise NotYet("The scale is right, but negative sums must become 0: apply "
                         "T.max(A[index] + B[index], 0) before scaling.")
        if close(out, torch.relu(a + b) * 2.0):
            raise NotYet("With scale=0.5 your kernel still multiplies by 2: use the `scale` "
                         "parameter, not a fixed number.")
        message = difference(out, expected)
        wrong = (~torch.isclose(_as_float(out), _as_float(expected), rtol=1e-2, atol=1e-2))
        first = int(wrong.nonzero()[0])
        if n % 256 and first >= n // 256 * 256:
            message += (f". Only the last, partial block is wrong (indices from "
                        f"{n // 256 * 256} on): did you guard the tail with `if index < N`?")
        raise NotYet(message)
    return ("One kernel reads A and B once and writes the result once; PyTorch's "
            "torch.relu(a + b) * scale runs three kernels and keeps two temporaries.")


@exercise("01.2", "01_vector_add.ipynb", "the launch geometry of a vector add",
          ("blocks", "idle_threads", "bytes_moved"))
def _check_geometry(blocks, idle_threads, bytes_moved):
    # N = 1000 float32 elements, block_size = 256
    _quiz("blocks", blocks, 4, "N / block_size = 1000 / 256 = 3.9, and a block cannot be "
          "partial: round up, T.ceildiv(1000, 256). Three blocks would cover only 768 "
          "elements.")
    _quiz("idle_threads", idle_threads, 24, "4 blocks × 256 threads = 1024 threads for 1000 "
          "elements: how many of them fail `index < N`?")
    _quiz("bytes_moved", bytes_moved, 12000, "Count what goes through global memory: A and B "
          "are read once, C is written once, 1000 float32 elements (4 bytes) each.")
    return ("4 blocks, 24 threads idle in the last one, and 12 bytes moved for every "
            "addition: memory, not arithmetic, sets the speed of this kernel.")


# ---------------------------------------------------------------- 02 reduce


@exercise("02.1", "02_reduce.ipynb", "row maximum", ("row_max",))
def _check_row_max(row_max):
    kernel = _need_kernel(row_max, "row_max")
    x = randn(37, 300, seed=2)
    x[5] = -x[5].abs() - 1  # a row where every value is negative
    out = kernel(x)
    expected = x.max(dim=-1).values
    if close(out, expected, 1e-5, 1e-5):
        return ("T.reduce_max with clear=True starts every row at -inf, so rows of negative "
                "numbers come out right too.")
    if close(out, x.sum(dim=-1), 1e-3, 1e-3):
        raise NotYet("Your kernel returns the row sums: reduce with T.reduce_max instead of "
                     "T.reduce_sum.")
    if close(out, x.max(dim=-1).values.clamp(min=0), 1e-5, 1e-5):
        raise NotYet("Row 5, whose values are all negative, comes out as 0: your maximum "
                     "starts at 0. Use clear=True (it starts at -inf), or T.fill the result "
                     "with -T.infinity(T.float32) first.")
    raise NotYet(difference(out, expected, 1e-5, 1e-5, names=("row",)) + ".")


@exercise("02.2", "02_reduce.ipynb", "row sums of long rows, tile by tile", ("row_sum_tiled",))
def _check_row_sum_tiled(row_sum_tiled):
    kernel = _need_kernel(row_sum_tiled, "row_sum_tiled")
    block_n = 128
    x = randn(9, 1000, seed=3)  # 1000 = 7 tiles of 128 and a partial tile of 104
    out = kernel(x, block_n=block_n)
    expected = x.sum(dim=-1)
    if close(out, expected, 1e-4, 1e-3):
        return ("Each tile's sum is added to the running total (clear=False); the zeros that "
                "T.copy puts past column N in the last tile add nothing.")
    last_tile = x[:, (1000 // block_n) * block_n:].sum(dim=-1)
    if close(out, last_tile, 1e-4, 1e-3):
        raise NotYet("Your sums equal the sum of the last tile of columns only: with "
                     "clear=True every T.reduce_sum overwrites the total. Clear the total "
                     "once before the loop and reduce with clear=False, so tiles add up.")
    first_tile = x[:, :block_n].sum(dim=-1)
    if close(out, first_tile, 1e-4, 1e-3):
        raise NotYet("Your sums equal the first tile of columns only: does the loop walk "
                     "over all T.ceildiv(N, block_n) tiles, and does each T.copy start at "
                     "column column_block * block_n?")
    raise NotYet(difference(out, expected, 1e-4, 1e-3, names=("row",)) +
                 ". Is the total cleared once, before the loop?")


# ---------------------------------------------------------------- 03 softmax


@exercise("03.1", "03_softmax.ipynb", "a softmax that does not overflow", ("stable_softmax",))
def _check_stable_softmax(stable_softmax):
    kernel = _need_kernel(stable_softmax, "stable_softmax")
    x = randn(24, 200, dtype=torch.float16, seed=4, scale=4.0)
    x[7] += 100.0  # exp(100) is far beyond float32's largest number (3.4e38)
    out = kernel(x)
    expected = torch.softmax(x.float(), dim=-1).half()
    if close(out, expected):
        return ("Subtracting the row maximum makes every exponent ≤ 0, so exp() stays in "
                "(0, 1] whatever the inputs; the result is the same softmax.")
    if isinstance(out, torch.Tensor) and out.shape == expected.shape and \
            not torch.isfinite(out[7]).all() and close(out[:7], expected[:7]):
        raise NotYet("Row 7, whose values are near 100, comes out as NaN: exp(100) overflows "
                     "float32 and inf / inf is NaN. Subtract the row maximum before exp() "
                     "(T.reduce_max, then exp(x - max)).")
    raise NotYet(difference(out, expected) + ".")


@exercise("03.2", "03_softmax.ipynb", "the online softmax's rescale", ("online_softmax",))
def _check_online_softmax(online_softmax):
    kernel = _need_kernel(online_softmax, "online_softmax")
    m, n, block_n = 8, 1000, 128
    x = randn(m, n, dtype=torch.float16, seed=5, scale=2.0)
    for row, column in enumerate([3, 130, 400, 999, 60, 700, 260, 900]):
        x[row, column] = 9.0  # the row's maximum, in tile column // 128
    out = kernel(x, block_n=block_n)
    expected = torch.softmax(x.float(), dim=-1).half()
    if close(out, expected):
        return ("The running sum is rescaled by 2^(old max - new max) whenever a tile raises "
                "the maximum, so after one pass it is exactly the softmax's denominator.")
    if isinstance(out, torch.Tensor) and out.shape == expected.shape:
        bad = [r for r in range(m) if not close(out[r], expected[r])]
        if bad and 0 not in bad and 4 not in bad:
            raise NotYet(f"Rows {bad} are wrong; rows 0 and 4, whose maximum sits in the first "
                         "tile, are right. When a later tile raises the running maximum, the "
                         "sum so far was computed against the old maximum: multiply it by "
                         "exp2(previous_max - running_max) before adding the tile's sum.")
    raise NotYet(difference(out, expected) + ".")


# ---------------------------------------------------------------- 04 GEMM


@exercise("04.1", "04_gemm.ipynb", "shared memory and reuse in a tiled GEMM",
          ("stage_bytes", "shared_bytes", "uses_per_a_element"))
def _check_gemm_quiz(stage_bytes, shared_bytes, uses_per_a_element):
    # block_m = block_n = 128, block_k = 32, float16, num_stages = 3
    _quiz("stage_bytes", stage_bytes, 16384, "One stage holds a block_m × block_k tile of A "
          "and a block_k × block_n tile of B, at 2 bytes per float16.")
    _quiz("shared_bytes", shared_bytes, 49152, "With num_stages = 3 the pipeline keeps three "
          "copies of both tiles, so the copies of later iterations can land while this one "
          "computes.")
    _quiz("uses_per_a_element", uses_per_a_element, 128, "An element A[i, k] of the tile is "
          "multiplied with B[k, j] for every column j of the block's output tile.")
    return ("48 kB of shared memory (about a fifth of an H100's SM), and every element loaded "
            "is used 128 times: that reuse is why tiling beats reading A and B from global "
            "memory for every output.")


@exercise("04.2", "04_gemm.ipynb", "a residual-add epilogue", ("gemm_residual",))
def _check_gemm_residual(gemm_residual):
    kernel = _need_kernel(gemm_residual, "gemm_residual")
    m, n, k = 100, 72, 48  # edge tiles in every direction with 64×64 blocks
    a = randn(m, k, dtype=torch.float16, seed=6)
    b = randn(k, n, dtype=torch.float16, seed=7)
    r = randn(m, n, dtype=torch.float16, seed=8)
    out = kernel(a, b, r, block_m=64, block_n=64, block_k=32)
    product = a.float() @ b.float()
    expected = (product + r.float()).half()
    if close(out, expected):
        return ("The residual is added while the tile is still in registers: C is written "
                "once, and there is no second kernel to read it back.")
    if close(out, product.half()):
        raise NotYet("Your kernel returns A @ B without the residual: copy the block's tile "
                     "of R (rows block_y * block_m, columns block_x * block_n) and add it to "
                     "the accumulator before the final T.copy.")
    if isinstance(out, torch.Tensor) and out.shape == expected.shape and \
            close(out[:64, :64], expected[:64, :64]):
        raise NotYet(difference(out, expected) + ". Block (0, 0) is right and others are "
                     "not: is the R tile taken at the same offset as the C tile, "
                     "R[block_y * block_m, block_x * block_n]?")
    raise NotYet(difference(out, expected) + ".")


# ---------------------------------------------------------------- 05 LayerNorm


def _layer_norm(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x.float(), (x.shape[-1],), gamma.float(), beta.float(), eps).half()


@exercise("05.1", "05_layer_norm.ipynb", "residual add fused into LayerNorm",
          ("add_layer_norm",))
def _check_add_layer_norm(add_layer_norm):
    kernel = _need_kernel(add_layer_norm, "add_layer_norm")
    m, n = 13, 256
    x, r = randn(m, n, dtype=torch.float16, seed=9), randn(m, n, dtype=torch.float16, seed=10)
    gamma = randn(n, dtype=torch.float16, seed=11)
    beta = randn(n, dtype=torch.float16, seed=12)
    out = kernel(x, r, gamma, beta)
    expected = _layer_norm(x.float() + r.float(), gamma, beta)
    if close(out, expected):
        return ("X + R is formed in registers and normalized right away; the sum never "
                "makes a round trip through global memory.")
    if close(out, _layer_norm(x, gamma, beta)):
        raise NotYet("Your output is LayerNorm(X): add the residual R to X before the mean "
                     "and variance are computed.")
    if close(out, (_layer_norm(x, gamma, beta).float() + r.float()).half()):
        raise NotYet("Your output is LayerNorm(X) + R: the residual must be added before "
                     "normalizing, LayerNorm(X + R).")
    raise NotYet(difference(out, expected) + ".")


@exercise("05.2", "05_layer_norm.ipynb", "a variance that survives a large mean",
          ("layer_norm_two_pass",))
def _check_layer_norm_two_pass(layer_norm_two_pass):
    kernel = _need_kernel(layer_norm_two_pass, "layer_norm_two_pass")
    m, n = 16, 512
    gamma = randn(n, dtype=torch.float16, seed=13)
    beta = randn(n, dtype=torch.float16, seed=14)
    for offset in (0.0, 300.0):
        x = randn(m, n, dtype=torch.float16, seed=15, offset=offset)
        out = kernel(x, gamma, beta)
        expected = _layer_norm(x, gamma, beta)
        if close(out, expected):
            continue
        if offset:
            raise NotYet("Right for inputs around 0, wrong for inputs around 300 "
                         f"({difference(out, expected)}). E[x²] - mean² subtracts two "
                         "numbers near 90,000 to get a variance near 1, and float32 keeps "
                         "only about 7 digits. Compute the mean first, then the mean of "
                         "(x - mean)²: the row is still in registers, so the second pass is "
                         "free.")
        raise NotYet(difference(out, expected) + ".")
    return ("The two-pass variance subtracts the mean before squaring, so its terms are "
            "small whatever the offset of the inputs.")


# ---------------------------------------------------------------- 06 RMSNorm


def _rms_norm(x, weight, eps=1e-6):
    x = x.float()
    return (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight.float()).half()


@exercise("06.1", "06_rms_norm.ipynb", "residual add + RMSNorm, two outputs",
          ("add_rms_norm",))
def _check_add_rms_norm(add_rms_norm):
    kernel = _need_kernel(add_rms_norm, "add_rms_norm")
    m, n = 11, 384
    x, r = randn(m, n, dtype=torch.float16, seed=16), randn(m, n, dtype=torch.float16, seed=17)
    weight = randn(n, dtype=torch.float16, seed=18)
    outputs = kernel(x, r, weight)
    if not isinstance(outputs, tuple) or len(outputs) != 2:
        raise NotYet("add_rms_norm must return two tensors, `return H, Y`: the new residual "
                     "stream H = X + R and Y = RMSNorm(H) * weight.")
    h, y = outputs
    expected_h = (x.float() + r.float()).half()
    expected_y = _rms_norm(expected_h, weight)
    if not close(h, expected_h):
        if close(h, x):
            raise NotYet("H equals X: H must be the sum X + R (the next layer adds to it).")
        raise NotYet("H: " + difference(h, expected_h) + ".")
    if close(y, expected_y):
        return ("One kernel reads X, R and the weight once and writes H and Y once; unfused, "
                "the sum is written, then read back to be normalized.")
    if close(y, _rms_norm(x, weight)):
        raise NotYet("H is right, but Y is RMSNorm(X): normalize the sum X + R.")
    raise NotYet("Y: " + difference(y, expected_y) + ".")


# ---------------------------------------------------------------- 07 FlashAttention


def _attention(q, k, v, mask=None):
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.float()).half()


def _window_mask(sequence: int, window: int):
    query = torch.arange(sequence, device=DEVICE)[:, None]
    key = torch.arange(sequence, device=DEVICE)[None, :]
    return (key <= query) & (key > query - window)


@exercise("07.1", "07_flash_attention.ipynb", "sliding-window attention",
          ("sliding_window_attention",))
def _check_sliding_window(sliding_window_attention):
    batch, heads, sequence, dimension, window = 1, 2, 100, 64, 24
    kernel = _factory(sliding_window_attention, "sliding_window_attention", batch, heads,
                      sequence, dimension, window=window)
    q, k, v = (randn(batch, heads, sequence, dimension, dtype=torch.float16, seed=20 + i)
               for i in range(3))
    out = kernel(q, k, v)
    expected = _attention(q, k, v, _window_mask(sequence, window))
    names = ("batch", "head", "query", "column")
    if close(out, expected, 2e-2, 2e-2):
        return ("Each query sees only the `window` most recent keys. Key tiles that are "
                "entirely outside every query's window could be skipped, as the causal "
                "kernel skips the tiles after the diagonal: a good next step.")
    if isinstance(out, torch.Tensor) and out.shape == expected.shape and \
            not torch.isfinite(out.float()).all():
        raise NotYet(difference(out, expected, 2e-2, 2e-2, names=names) + ". Rows whose "
                     "first key tiles lie entirely outside their window come out NaN: their "
                     "running maximum is still -inf, and exp2(-inf - -inf) is NaN. Subtract 0 "
                     "instead while the maximum is -inf (the skeleton's `safe_max`).")
    causal = torch.ones(sequence, sequence, dtype=torch.bool, device=DEVICE).tril()
    if close(out, _attention(q, k, v, causal), 2e-2, 2e-2):
        raise NotYet("Your output is causal attention: each query still sees every earlier "
                     "key. Mask keys more than `window` positions back too: key > query - "
                     "window.")
    if close(out, _attention(q, k, v), 2e-2, 2e-2):
        raise NotYet("Your output is full attention: no mask was applied. A key is visible "
                     "when query - window < key <= query.")
    raise NotYet(difference(out, expected, 2e-2, 2e-2, names=names) + ".")


@exercise("07.2", "07_flash_attention.ipynb", "what FlashAttention saves",
          ("score_bytes", "key_tile_loads"))
def _check_attention_quiz(score_bytes, key_tile_loads):
    # batch 1, 32 heads, sequence 4096, float16 scores; FlashAttention with block_m = 64
    _quiz("score_bytes", score_bytes, 32 * 4096 * 4096 * 2, "The score matrix S = Q Kᵀ has "
          "sequence × sequence entries per head, 2 bytes each in float16, for all 32 heads.")
    _quiz("key_tile_loads", key_tile_loads, 4096 // 64, "Every block of block_m queries walks "
          "over all the keys once. How many query blocks does one head have?")
    return ("1 GiB of scores that never exist, in exchange for reading K and V 64 times "
            "instead of once - reads that hit fast memory and overlap with math.")


# ---------------------------------------------------------------- 08 debugging


@exercise("08.1", "08_debugging.ipynb", "the missing tail guard", ("make_clamp",))
def _check_clamp(make_clamp):
    n, low, high = 1000, -0.5, 0.5
    kernel = _factory(make_clamp, "make_clamp", n, low, high)
    x, x_guard = guarded(n)
    y, y_guard = guarded(n)
    x.copy_(randn(n, seed=30))
    mark(y_guard)
    from tilelab import TileLabError

    try:
        result = kernel(x, y)
    except TileLabError as err:
        if "out of bounds" not in err.message:
            raise
        # the CPU backend checks every access: it stopped the last block at the user's line
        raise NotYet(f"Your kernel reads past the end of X and would write past the end of Y: "
                     f"the grid covers {-(-n // 256) * 256} elements for N = {n}, and tilelab "
                     f"stopped it here:\n{err}\nOn a GPU nothing stops those writes; they "
                     "land in someone else's memory. Guard the store: `if index < N:`.") from None
    if result is not None:
        raise NotYet("make_clamp's kernel should write into the Y you pass (no out_idx), "
                     "so that the check can watch the memory after Y.")
    written = touched(y_guard)
    if written:
        raise NotYet(f"Your kernel wrote {len(written)} values past the end of Y (positions "
                     f"{n + written[0]}..{n + written[-1]}): the grid covers "
                     f"{n + len(written)} elements for N = {n}. On a GPU those writes land "
                     "in someone else's memory. Guard the store: `if index < N:`.")
    expected = x.clamp(low, high)
    if close(y, expected, 0, 0):
        return ("Nothing written past the end, and all 1000 values right, the 232 of the "
                "last block included.")
    raise NotYet(difference(y, expected, 0, 0) + ".")


def _gemm_without_transpose(x, w, block: int):
    """What `T.gemm(x_tile, w_tile, acc)` computes when W's tiles are block × block and
    transpose_B is forgotten: each tile of W is used as it lies, not transposed."""
    m, k = x.shape
    n = w.shape[0]
    out = torch.zeros(m, n, device=x.device)
    for n0 in range(0, n, block):
        for k0 in range(0, k, block):
            x_tile = torch.zeros(m, block, device=x.device)
            w_tile = torch.zeros(block, block, device=x.device)
            x_part = x[:, k0:k0 + block].float()
            w_part = w[n0:n0 + block, k0:k0 + block].float()
            x_tile[:, :x_part.shape[1]] = x_part
            w_tile[:w_part.shape[0], :w_part.shape[1]] = w_part
            out[:, n0:n0 + block] += (x_tile @ w_tile)[:, :min(block, n - n0)]
    return out.half()


@exercise("08.2", "08_debugging.ipynb", "the wrong transpose", ("linear",))
def _check_linear(linear):
    kernel = _need_kernel(linear, "linear")
    m, n, k, block = 20, 48, 80, 64
    x = randn(m, k, dtype=torch.float16, seed=31)
    w = randn(n, k, dtype=torch.float16, seed=32)  # nn.Linear's layout: out_features × in
    out = kernel(x, w, block_m=block, block_n=block, block_k=block)
    expected = (x.float() @ w.float().T).half()
    if close(out, expected):
        return ("W is stored N × K, as nn.Linear stores it: w_shared holds a block_n × block_k "
                "tile, and T.gemm(..., transpose_B=True) multiplies by its transpose.")
    if close(out, _gemm_without_transpose(x, w, block)):
        raise NotYet("Your kernel multiplies by W's tiles as they lie, untransposed. T.gemm(a, "
                     "b, c) computes a (block_m × block_k) @ b (block_k × block_n), but "
                     "w_shared holds a block_n × block_k tile of W (W is N × K). Pass "
                     "transpose_B=True. It compiled only because block_n == block_k; with "
                     "block_k = 32 the shapes would not even agree.")
    raise NotYet(difference(out, expected) + ".")


@exercise("08.3", "08_debugging.ipynb", "a fragment that is too large",
          ("long_row_softmax",))
def _check_long_row_softmax(long_row_softmax):
    kernel = _need_kernel(long_row_softmax, "long_row_softmax")
    limit = 16
    compiled = kernel.compile(M=4, N=8192, target=_target())
    per_thread = fragment_values_per_thread(compiled.trace)
    worst = max(per_thread, key=per_thread.get) if per_thread else None
    if worst is not None and per_thread[worst] > limit:
        raise NotYet(f"The fragment `{worst}` holds {per_thread[worst]} values in every thread "
                     f"for rows of 8192 (see kernel.trace.layouts['{worst}']['local_size']); "
                     f"the limit here is {limit}. A GPU thread has at most 255 registers for "
                     "everything it keeps: fragments this large spill to slow local memory. "
                     "Walk the row in tiles of block_n columns, as the online softmax of "
                     "chapter 3 does, so a fragment holds block_n / 128 values per thread.")
    for m, n in [(4, 8192), (3, 3000)]:
        x = randn(m, n, dtype=torch.float16, seed=33 + n, scale=3.0)
        out = kernel(x)
        expected = torch.softmax(x.float(), dim=-1).half()
        if not close(out, expected):
            raise NotYet(f"Fragments are small now, but the result is wrong for {m} × {n}: "
                         + difference(out, expected) + ".")
    return (f"At most {max(per_thread.values()) if per_thread else '?'} values per thread in "
            "any fragment, whatever the row length: registers no longer limit N.")


def fragment_values_per_thread(trace) -> dict[str, int]:
    """Buffer -> elements each thread keeps, for every fragment the GPU plan laid out."""
    return {name: int(layout["local_size"]) for name, layout in trace.layouts.items()
            if layout.get("kind") == "fragment"}


# ---------------------------------------------------------------- 09 hopper


@exercise("09.1", "09_hopper.ipynb", "a warpgroup's share of a 128 × 256 tile",
          ("accumulator_registers", "wgmma_per_k16", "wgmma_per_iteration"))
def _check_warpgroup_quiz(accumulator_registers, wgmma_per_k16, wgmma_per_iteration):
    # block_m = 128, block_n = 256, block_k = 64, 256 threads: two warpgroups of 64 × 256
    _quiz("accumulator_registers", accumulator_registers, 128 * 256 // 256, "The 128 × 256 "
          "accumulator is float32 and spread over all 256 threads, each holding the same "
          "number of values.")
    _quiz("wgmma_per_k16", wgmma_per_k16, 1, "Each warpgroup's share is 64 rows by 256 "
          "columns, and one wgmma.m64nNk16 covers 64 rows and up to N = 256 columns.")
    _quiz("wgmma_per_iteration", wgmma_per_iteration, 64 // 16, "An iteration multiplies a "
          "block_k = 64 slice of K, 16 at a time.")
    return ("Four instructions per warpgroup per iteration, each of 64 × 256 × 16 "
            "multiply-adds, with both operands read straight from shared memory.")


@exercise("09.2", "09_hopper.ipynb", "the shared-memory budget of a Hopper pipeline",
          ("ahead", "shared_bytes", "max_stages"))
def _check_hopper_pipeline_quiz(ahead, shared_bytes, max_stages):
    stage = (128 * 64 + 64 * 256) * 2  # a tile of A and a tile of B, float16
    _quiz("ahead", ahead, 4 - 2, "With the MMAs of one iteration still in flight, the slot a "
          "copy refills must be one no running MMA reads: copies run num_stages - 2 ahead.")
    _quiz("shared_bytes", shared_bytes, 4 * stage, "Each stage holds a 128 × 64 tile of A and a "
          "64 × 256 tile of B, at 2 bytes per float16.")
    _quiz("max_stages", max_stages, 232448 // stage, "Divide the block's 232,448 bytes by the "
          "bytes of one stage, rounding down.")
    return ("Four stages take 192 KB, and a fifth would not fit: at this tile size the "
            "pipeline is as deep as shared memory allows, which is why such kernels keep only "
            "the A and B tiles there and write C from registers.")


# ---------------------------------------------------------------- 10 autotuning

SHARED_BUDGET = 48 * 1024  # bytes of shared memory a block may use without opting in


def gemm_stage_bytes(config: dict) -> int:
    """Shared memory of one pipeline stage of the course GEMM: a float16 tile of A and of B."""
    return (config["block_m"] * config["block_k"] + config["block_k"] * config["block_n"]) * 2


def _search_space(M: int, N: int) -> list[dict]:
    """Every candidate exercise 10.1 allows, for sizes M × N (the reference answer)."""
    space = []
    for block_m in (32, 64, 128):
        for block_n in (32, 64, 128):
            for block_k in (32, 64):
                for num_stages in (1, 2, 3):
                    config = {"block_m": block_m, "block_n": block_n, "block_k": block_k,
                              "num_stages": num_stages}
                    fits = num_stages * gemm_stage_bytes(config) <= SHARED_BUDGET
                    useful = (block_m == 32 or block_m // 2 < M) and \
                        (block_n == 32 or block_n // 2 < N)
                    if fits and useful:
                        space.append(config)
    return space


@exercise("10.1", "10_autotuning.ipynb", "a search space that fits", ("gemm_configs",))
def _check_gemm_configs(gemm_configs):
    if not callable(gemm_configs):
        raise NotYet("gemm_configs should be a function of the sizes (M, N, K) returning a "
                     "list of dicts.")
    for sizes in [(4096, 4096, 4096), (40, 1000, 512), (20, 20, 64)]:
        configs = gemm_configs(*sizes)
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise NotYet(f"gemm_configs{sizes} should return a list of dicts, got "
                         f"{type(configs).__name__}.")
        too_big = [c for c in configs if c.get("num_stages", 1) * gemm_stage_bytes(c)
                   > SHARED_BUDGET]
        if too_big:
            c = too_big[0]
            raise NotYet(f"{c} needs {c['num_stages'] * gemm_stage_bytes(c)} bytes of shared "
                         f"memory: it exceeds the 48 KiB shared memory budget "
                         f"(num_stages × (block_m·block_k + block_k·block_n) × 2 bytes). It "
                         "would only fail to compile or launch: leave it out.")
        M, N = sizes[:2]
        wasted = [c for c in configs if (c["block_m"] > 32 and c["block_m"] // 2 >= M)
                  or (c["block_n"] > 32 and c["block_n"] // 2 >= N)]
        if wasted:
            raise NotYet(f"For M, N = {M}, {N}, {wasted[0]} has a block more than twice the "
                         "matrix: half of it computes nothing. Keep a block size only if "
                         "half of it is still smaller than the matrix (32 always stays).")
        expected = _search_space(M, N)
        key = lambda c: tuple(sorted(c.items()))  # noqa: E731
        missing = sorted(set(map(key, expected)) - set(map(key, configs)))
        if missing:
            raise NotYet(f"For sizes {sizes}, {dict(missing[0])} fits and is useful, but it is "
                         f"not in the list ({len(missing)} such configurations are missing).")
    return (f"{len(_search_space(4096, 4096))} candidates for 4096², "
            f"{len(_search_space(20, 20))} for 20²: none that cannot compile, none wasted.")


@exercise("10.2", "10_autotuning.ipynb", "the winner must be correct", ("pick_winner",))
def _check_pick_winner(pick_winner):
    rows = [{"config": {"block_m": 64}, "status": "ok", "median_ms": 2.0},
            {"config": {"block_m": 256}, "status": "wrong result", "median_ms": 0.5},
            {"config": {"block_m": 128}, "status": "ok", "median_ms": 1.5},
            {"config": {"block_m": 512}, "status": "compile failed", "median_ms": None}]
    chosen = pick_winner(list(rows))
    if chosen == {"block_m": 256}:
        raise NotYet("pick_winner chose {'block_m': 256}, the fastest, but its output is wrong "
                     "(status 'wrong result'): a candidate can only win if it is correct.")
    if chosen != {"block_m": 128}:
        raise NotYet(f"pick_winner returned {chosen!r}; the fastest correct candidate is "
                     "{'block_m': 128} (status 'ok', 1.5 ms).")
    if pick_winner([rows[1], rows[3]]) is not None:
        raise NotYet("With no correct candidate, pick_winner should return None.")
    return "Correct first, then fast: a wrong kernel's time means nothing."
