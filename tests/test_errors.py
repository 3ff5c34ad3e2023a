"""User mistakes become TileLabErrors at the user's own line, never raw tracebacks.

Each case below makes one mistake and checks the error the way a user sees it:
the right `TileLabError` subclass, a message that starts with this file's
`file:line:col` (the line of the offending statement, found by its marker
comment `# @name`), the source line with a caret under the column, no file
names from tilelab's or TVM's internals, and a traceback that ends in this file
or in the jit entry point that re-raises it (never inside the compiler).
"""

import functools
import sys
import traceback
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.source_lines import line_of
from tilelab import (
    TileLabArgumentError,
    TileLabError,
    TileLabSyntaxError,
    TileLabTypeError,
    TileLabWarning,
)
from tilelab.language.tilelang_names import TileLangFeatureError

# The module behind the `tilelab.jit` export (it checks argument devices), and the wrapper
# its entry points use to re-raise user errors: the only frame of tilelab a traceback may show.
_api = sys.modules[tilelab.jit.__module__]
_entry = sys.modules[tilelab.errors.raised_at_the_caller.__module__]

THIS_FILE = Path(__file__).resolve()
SOURCE_LINES = THIS_FILE.read_text().splitlines()
ENTRY_FILE = Path(_entry.__file__).resolve()
INTERNALS = ("tilelab/", "tvm/", "site-packages", "Traceback")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """A fresh compile cache per test: warnings are only raised when a kernel is compiled."""
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILELAB_DISABLE_CACHE", raising=False)


# ---------------------------------------------------------------- checking helpers


def assert_no_internals(text: str) -> None:
    # The user's own path may contain anything; what must not appear is tilelab's/TVM's.
    cleaned = text.replace(str(THIS_FILE), "<test file>").replace(__file__, "<test file>")
    for word in INTERNALS:
        assert word not in cleaned, f"{word!r} leaks into the message:\n{text}"


def assert_user_error(err: BaseException, marker: str, token: str, cls=TileLabError,
                      expect: tuple = ()) -> None:
    """`err` is a `cls` located at the marked line, column on `token`, with an excerpt."""
    message = str(err)
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {message}"
    line = line_of(__file__, marker)
    location = err.location
    assert location is not None, f"the error names no source location:\n{message}"
    assert Path(location.filename).resolve() == THIS_FILE, message
    assert location.line == line, f"error at line {location.line}, expected {line}:\n{message}"
    text = SOURCE_LINES[line - 1]
    assert text[location.col:].startswith(token), \
        f"column {location.col + 1} points at {text[location.col:]!r}, expected {token!r}"

    header = f"{location.filename}:{line}:{location.col + 1}: "
    assert message.startswith(header), message
    lines = message.splitlines()
    assert f"    {text.strip()}" in lines, f"no source line in:\n{message}"
    at = lines.index(f"    {text.strip()}")
    indent = len(text) - len(text.lstrip())
    assert lines[at + 1] == "    " + " " * (location.col - indent) + "^", message
    for word in expect:
        assert word in message, f"{word!r} not in:\n{message}"
    assert_no_internals(message)


def assert_clean_traceback(err: BaseException) -> None:
    """Only this file's frames and the jit entry point's re-raise; no chained exceptions."""
    frames = traceback.extract_tb(err.__traceback__)
    formatted = "".join(traceback.format_exception(err))
    assert frames, formatted
    for frame in frames:
        path = Path(frame.filename).resolve()
        assert path == THIS_FILE or (path == ENTRY_FILE and frame.name == "wrapper"), \
            f"internal frame {frame.filename}:{frame.lineno} ({frame.name}) in:\n{formatted}"
    assert "tvm" not in "".join(f.filename for f in frames)
    assert "site-packages" not in formatted
    assert "During handling of the above exception" not in formatted, formatted
    assert "direct cause of the following exception" not in formatted, formatted


# ---------------------------------------------------------------- kernels with mistakes


def make_copy(N):
    """Factory style; argument errors at call time point at the parameter in the signature."""

    @T.prim_func
    def copy_kernel(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):  # @copy-signature
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i]

    return copy_kernel


@functools.cache
def copy16():
    return tilelab.compile(make_copy(16))


@tilelab.jit
def eager_add(A, B, block: int = 32):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)  # @eager-A
    B: T.Tensor((N,), T.float32)  # @eager-B
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return C


@tilelab.jit
def eager_scale_2d(A):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)  # @eager-2d-A
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 4), threads=32) as bx:
        for i, j in T.Parallel(4, N):
            if bx * 4 + i < M:
                B[bx * 4 + i, j] = A[bx * 4 + i, j] * 2.0
    return B


@tilelab.jit
def copy_extent_mismatch(M, N):
    @T.prim_func
    def kernel(A: T.Tensor((M, N), T.float32), B: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=32) as (bx, by):
            tile = T.alloc_shared((32, 32), T.float32)
            T.copy(A[0:64, 0:32], tile)  # @copy-extents
            T.copy(tile, B[by * 32, bx * 32])

    return kernel


def bare_copy_extent_mismatch(M, N):
    """The same mistake in a factory that is not wrapped by @tilelab.jit."""

    @T.prim_func
    def kernel(A: T.Tensor((M, N), T.float32), B: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 32), threads=32) as (bx, by):
            tile = T.alloc_shared((32, 32), T.float32)
            T.copy(A[0:64, 0:32], tile)  # @bare-copy-extents
            T.copy(tile, B[by * 32, bx * 32])

    return kernel


@tilelab.jit
def gemm_shape_mismatch(A, B):
    A: T.Tensor((16, 16), T.float16)
    B: T.Tensor((8, 16), T.float16)
    C = T.empty((16, 16), T.float32)
    with T.Kernel(1, threads=32):
        a = T.alloc_shared((16, 16), T.float16)
        b = T.alloc_shared((8, 16), T.float16)
        c = T.alloc_fragment((16, 16), T.float32)
        T.copy(A, a)
        T.copy(B, b)
        T.clear(c)
        T.gemm(a, b, c)  # @gemm-shapes
        T.copy(c, C)
    return C


@tilelab.jit
def reduce_wrong_dst(A):
    A: T.Tensor((16, 8), T.float32)
    C = T.empty((16,), T.float32)
    with T.Kernel(1, threads=32):
        tile = T.alloc_fragment((16, 8), T.float32)
        row_sums = T.alloc_fragment((8,), T.float32)
        T.copy(A, tile)
        T.reduce_sum(tile, row_sums, dim=1)  # @reduce-dst
        T.copy(row_sums, C)
    return C


@tilelab.jit
def unknown_dtype(A):
    A: T.Tensor((4,), T.float32)
    with T.Kernel(1, threads=32):
        tile = T.alloc_shared((4,), "float17")  # @unknown-dtype
        T.copy(A, tile)


@tilelab.jit
def unknown_primitive(A):
    A: T.Tensor((4,), T.float32)
    with T.Kernel(1, threads=32):
        T.no_such_thing(A)  # @unknown-primitive


@tilelab.jit
def undefined_name(A):
    A: T.Tensor((4,), T.float32)
    with T.Kernel(1, threads=32):
        for i in T.Parallel(4):
            A[i] = undefined_thing + 1.0  # @undefined-name  # noqa: F821


@tilelab.jit
def primitive_outside_kernel(A):
    A: T.Tensor((4,), T.float32)
    tile = T.alloc_shared((4,), T.float32)  # @outside-kernel
    with T.Kernel(1, threads=32):
        T.copy(A, tile)


@tilelab.jit
def while_loop(A):
    A: T.Tensor((4,), T.float32)
    with T.Kernel(1, threads=32):
        i = A[0]  # a kernel value, bound to a name: the condition would never see i + 1
        while i < 4:  # @while-loop
            A[0] = i
            i = i + 1.0


@T.macro
def load_tile(dst, src):
    T.copy(src[0:64], dst)  # @macro-copy


@tilelab.jit
def uses_macro(A):
    A: T.Tensor((64,), T.float32)
    with T.Kernel(1, threads=32):
        tile = T.alloc_shared((32,), T.float32)
        load_tile(tile, A)


class FakeCudaTensor:
    """Looks like a CUDA tensor to tilelab's argument checks; no GPU needed."""

    def __init__(self, like: torch.Tensor):
        self.shape, self.dtype = like.shape, like.dtype
        self.device = types.SimpleNamespace(type="cuda", index=0)

    def is_contiguous(self) -> bool:
        return True

    def __dlpack__(self, *args, **kwargs):
        raise AssertionError("a CUDA tensor must never reach a CPU kernel")

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA


class _MarkedTensor(torch.Tensor):
    """A subclass, so that Kernel.__call__'s fast path (exact torch.Tensor only) lets the
    argument checks see it, as it does a real CUDA tensor."""


def eager_with_cuda_tensor(monkeypatch):
    """A real CPU tensor that `tilelab.kernel._device_of` reports as living on the GPU."""
    marked = torch.zeros(8).as_subclass(_MarkedTensor)
    real = _api._device_of
    monkeypatch.setattr(_api, "_device_of", lambda v: "cuda" if v is marked else real(v))
    eager_add(marked, torch.zeros(8))


# ---------------------------------------------------------------- the cases


@dataclass
class Case:
    id: str
    run: object  # callable(monkeypatch) that makes the mistake
    marker: str
    token: str  # the text the column must point at
    cls: type = TileLabError
    expect: tuple = ()  # words the message must contain
    xfail_message: str | None = None
    xfail_traceback: str | None = None
    marks: list = field(default_factory=list)


CASES = [
    Case("call-shape", lambda mp: copy16()(torch.zeros(8), torch.zeros(16)),
         "copy-signature", "A: T.Tensor", TileLabArgumentError, ("A", "(16,)", "(8,)")),
    Case("call-shape-second-arg", lambda mp: copy16()(torch.zeros(16), torch.zeros(17)),
         "copy-signature", "B: T.Tensor", TileLabArgumentError, ("B", "(16,)", "(17,)")),
    Case("eager-shape", lambda mp: eager_add(torch.zeros(8), torch.zeros(9)),
         "eager-B", "B: T.Tensor", TileLabArgumentError, ("B", "(8,)", "(9,)")),
    Case("call-dtype",
         lambda mp: copy16()(torch.zeros(16, dtype=torch.float64), torch.zeros(16)),
         "copy-signature", "A: T.Tensor", TileLabArgumentError, ("A", "float32", "float64")),
    Case("eager-dtype",
         lambda mp: eager_add(torch.zeros(8), torch.zeros(8, dtype=torch.float16)),
         "eager-B", "B: T.Tensor", TileLabArgumentError, ("B", "float32", "float16")),
    Case("call-argument-count", lambda mp: copy16()(torch.zeros(16)),
         "copy-signature", "A: T.Tensor", TileLabArgumentError, ("(A, B)", "2")),
    Case("eager-argument-count", lambda mp: eager_add(torch.zeros(8)),
         "eager-B", "B: T.Tensor", TileLabArgumentError, ("B",)),
    Case("call-non-contiguous", lambda mp: copy16()(torch.zeros(32)[::2], torch.zeros(16)),
         "copy-signature", "A: T.Tensor", TileLabArgumentError, ("A", "contiguous")),
    Case("eager-non-contiguous", lambda mp: eager_add(torch.zeros(8), torch.zeros(16)[::2]),
         "eager-B", "B: T.Tensor", TileLabArgumentError, ("B", "contiguous")),
    Case("call-non-tensor", lambda mp: copy16()([0.0] * 16, torch.zeros(16)),
         "copy-signature", "A: T.Tensor", TileLabArgumentError, ("A", "tensor", "list")),
    Case("eager-non-tensor", lambda mp: eager_add(3.0, torch.zeros(8)),
         "eager-A", "A: T.Tensor", TileLabArgumentError, ("A", "tensor", "float")),
    Case("call-cuda-tensor", lambda mp: copy16()(FakeCudaTensor(torch.zeros(16)),
                                                 torch.zeros(16)),
         "copy-signature", "A: T.Tensor", TileLabArgumentError, ("A", "cuda", "CPU")),
    Case("eager-cuda-tensor", eager_with_cuda_tensor,
         "eager-A", "A: T.Tensor", TileLabArgumentError, ("A", "cuda", "CPU")),
    Case("eager-rank-too-low", lambda mp: eager_scale_2d(torch.zeros(8)),
         "eager-2d-A", "A: T.Tensor", TileLabArgumentError, ("A", "2 dimension", "(8,)")),
    Case("eager-rank-too-high", lambda mp: eager_scale_2d(torch.zeros(2, 4, 4)),
         "eager-2d-A", "A: T.Tensor", TileLabArgumentError, ("A", "2 dimension", "(2, 4, 4)")),
    Case("copy-extents", lambda mp: copy_extent_mismatch(64, 64),
         "copy-extents", "T.copy", TileLabTypeError, ("T.copy", "64", "32", "tile")),
    Case("copy-extents-bare-factory", lambda mp: tilelab.compile(bare_copy_extent_mismatch(64, 64)),
         "bare-copy-extents", "T.copy", TileLabTypeError, ("T.copy", "64", "tile")),
    Case("gemm-shapes",
         lambda mp: gemm_shape_mismatch(torch.zeros(16, 16).half(), torch.zeros(8, 16).half()),
         "gemm-shapes", "T.gemm", TileLabTypeError, ("T.gemm", "16", "8")),
    Case("reduce-dst", lambda mp: reduce_wrong_dst(torch.zeros(16, 8)),
         "reduce-dst", "T.reduce_sum", TileLabTypeError, ("row_sums", "(16,)", "(8,)")),
    Case("unknown-dtype", lambda mp: unknown_dtype(torch.zeros(4)),
         "unknown-dtype", "T.alloc_shared", TileLabTypeError, ("float17", "float16")),
    Case("unknown-primitive", lambda mp: unknown_primitive(torch.zeros(4)),
         "unknown-primitive", "T.no_such_thing", TileLangFeatureError, ("no_such_thing",)),
    Case("undefined-name", lambda mp: undefined_name(torch.zeros(4)),
         "undefined-name", "undefined_thing", TileLabSyntaxError, ("undefined_thing",)),
    Case("primitive-outside-kernel", lambda mp: primitive_outside_kernel(torch.zeros(4)),
         "outside-kernel", "T.alloc_shared", TileLabSyntaxError,
         ("T.alloc_shared", "T.Kernel")),
    Case("while-loop", lambda mp: while_loop(torch.zeros(4)),
         "while-loop", "while", TileLabSyntaxError, ("while",)),
    Case("macro-helper", lambda mp: uses_macro(torch.zeros(64)),
         "macro-copy", "T.copy", TileLabTypeError, ("T.copy", "64", "32")),
]


def _params(attribute: str):
    params = []
    for case in CASES:
        reason = getattr(case, attribute)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


@pytest.mark.parametrize("case", _params("xfail_message"))
def test_error_names_the_users_line(case, monkeypatch):
    with pytest.raises(TileLabError) as info:
        case.run(monkeypatch)
    assert_user_error(info.value, case.marker, case.token, case.cls, case.expect)


@pytest.mark.parametrize("case", _params("xfail_traceback"))
def test_error_traceback_hides_the_compiler(case, monkeypatch):
    with pytest.raises(TileLabError) as info:
        case.run(monkeypatch)
    assert_clean_traceback(info.value)


def test_cases_do_not_pass_vacuously():
    """Every marker exists once, and the cases cover each TileLabError subclass."""
    for case in CASES:
        line_of(__file__, case.marker)
    assert {c.cls for c in CASES} >= {TileLabArgumentError, TileLabTypeError,
                                      TileLabSyntaxError}
    assert len({c.id for c in CASES}) == len(CASES)


def test_correct_calls_still_work():
    """The kernels above are only wrong where the tests make them wrong."""
    a, b = torch.randn(16), torch.empty(16)
    copy16()(a, b)
    torch.testing.assert_close(b, a)
    x, y = torch.randn(40), torch.randn(40)
    torch.testing.assert_close(eager_add(x, y), x + y)
    m = torch.randn(6, 5)
    torch.testing.assert_close(eager_scale_2d(m), m * 2)


def test_unknown_dtype_is_a_type_error():
    with pytest.raises(TileLabError) as info:
        unknown_dtype(torch.zeros(4))
    assert isinstance(info.value, TileLabTypeError), repr(info.value)


# ---------------------------------------------------------------- tile primitives outside tilelab


def test_tile_primitive_called_as_plain_python_is_a_syntax_error():
    with pytest.raises(TileLabSyntaxError) as info:
        T.copy(torch.zeros(4), torch.zeros(4))
    message = str(info.value)
    assert "T.copy" in message and "kernel" in message
    assert_no_internals(message)


def test_tile_primitive_called_as_plain_python_names_the_callers_line():
    with pytest.raises(TileLabSyntaxError) as info:
        T.copy(torch.zeros(4), torch.zeros(4))  # @plain-copy
    assert_user_error(info.value, "plain-copy", "T.copy", TileLabSyntaxError, ("T.copy",))


def test_tile_primitive_called_as_plain_python_hides_the_compiler():
    with pytest.raises(TileLabSyntaxError) as info:
        T.copy(torch.zeros(4), torch.zeros(4))
    assert_clean_traceback(info.value)


# ---------------------------------------------------------------- warnings


def make_unwritten_fragment(N, clear_first: bool):
    @T.prim_func
    def read_garbage(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            acc = T.alloc_fragment((N,), T.float32)  # @fragment-alloc
            if clear_first:
                T.clear(acc)
            for i in T.Parallel(N):
                B[i] = acc[i] + A[i]

    return read_garbage


def test_reading_an_unwritten_fragment_warns_at_its_allocation():
    with pytest.warns(TileLabWarning) as record:
        kernel = tilelab.compile(make_unwritten_fragment(8, clear_first=False))
    messages = [str(w.message) for w in record if issubclass(w.category, TileLabWarning)]
    assert len(messages) == 1, messages
    line = line_of(__file__, "fragment-alloc")
    assert "'acc'" in messages[0]
    assert f"{THIS_FILE}:{line}:" in messages[0] or f"{__file__}:{line}:" in messages[0], \
        messages[0]
    assert_no_internals(messages[0])
    # the warning is reported in the user's file, not in a tilelab module
    ours = [w for w in record if issubclass(w.category, TileLabWarning)]
    assert Path(ours[0].filename).resolve() == THIS_FILE
    assert any("'acc'" in w for w in kernel.trace.warnings)


def test_a_cleared_fragment_does_not_warn():
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        kernel = tilelab.compile(make_unwritten_fragment(8, clear_first=True))
    assert not [w for w in record if issubclass(w.category, TileLabWarning)]
    a, b = torch.randn(8), torch.empty(8)
    kernel(a, b)
    torch.testing.assert_close(b, a)


def test_the_warning_is_repeated_when_the_kernel_comes_from_the_cache():
    with pytest.warns(TileLabWarning):
        tilelab.compile(make_unwritten_fragment(8, clear_first=False))
    with pytest.warns(TileLabWarning):
        kernel = tilelab.compile(make_unwritten_fragment(8, clear_first=False))
    assert kernel.trace.cache_hit



def test_a_function_redefined_in_the_same_file_is_read_anew(tmp_path):
    """The front end remembers where each function's source ends (inspect tokenizes the file
    to find it), keyed by the file's text: a file changed since is read again, as a notebook
    cell edited and run again."""
    import importlib.util

    from tilelab.language.frontend import FunctionSource

    path = tmp_path / "edited.py"

    def define(text):
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("edited", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.f

    first = "def f(x):\n    return x\n"
    assert FunctionSource.of(define(first)).text == first
    second = "def f(x):\n    y = x + 1\n    return y\n"
    assert FunctionSource.of(define(second)).text == second
