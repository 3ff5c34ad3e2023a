"""Errors a user can cause, reported at the user's own source line.

Every mistake in a kernel (a wrong shape, an unknown primitive, a copy whose
extents disagree) raises a `TileLabError` that carries a `SourceLocation`: the
file (or notebook cell), line and column, the offending line and a caret under
the column. The message says what went wrong and what to do; it never shows
tilelab's or TVM's internals.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    """A position in the user's source: 1-based line, 0-based column."""

    filename: str
    line: int
    col: int = 0
    source_line: str | None = None

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col + 1}"

    def excerpt(self) -> str:
        text = self.source_line
        if text is None:
            text = linecache.getline(self.filename, self.line).rstrip("\n")
        if not text:
            return ""
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        caret = " " * max(self.col - indent, 0) + "^"
        return f"    {stripped}\n    {caret}"


def tvm_span(location: SourceLocation | None):
    """A TVM span for a user's statement (None where there is no location): the CPU's
    access checks report its line."""
    import tvm

    if location is None:
        return None
    return tvm.ir.Span(tvm.ir.SourceName(location.filename), location.line, location.line,
                       location.col, location.col)


class TileLabError(Exception):
    """A mistake in a tile program or in how it is called."""

    def __init__(self, message: str, location: SourceLocation | None = None, hint: str = ""):
        self.message = message
        self.location = location
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        parts = []
        if self.location is not None:
            parts.append(f"{self.location}: {self.message}")
            excerpt = self.location.excerpt()
            if excerpt:
                parts.append(excerpt)
        else:
            parts.append(self.message)
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)

    def with_location(self, location: SourceLocation) -> TileLabError:
        """Attach a location if the error does not have one yet."""
        if self.location is None:
            self.location = location
            self.args = (self.render(),)
        return self


class TileLabSyntaxError(TileLabError):
    """Python syntax that a kernel cannot use, or a primitive used in the wrong place."""


class TileLabTypeError(TileLabError):
    """Mismatched shapes, extents or dtypes inside a kernel."""


class UnknownSize(TileLabTypeError):
    """A tensor's size names what no tensor has given yet (a T.const or T.dynamic name)."""


class RoleConflict(TileLabTypeError):
    """A fragment used by two warp roles: a rule of the language, which the CPU keeps too
    (it lives in the registers of one role's threads)."""


class LayoutConflict(TileLabTypeError):
    """No register layout serves every use of one fragment, named by `fragment` (the CUDA
    compiler then keeps that fragment in shared memory, see passes/spill_fragments.py -
    unless `spillable` is False: where shared memory would not serve either)."""

    def __init__(self, fragment: str, message: str, hint: str = "", spillable: bool = True):
        super().__init__(message, hint=hint)
        self.fragment = fragment
        self.spillable = spillable


class TileLabArgumentError(TileLabError):
    """Arguments passed to a compiled kernel that do not match its signature."""


class TileLabCompileError(TileLabError):
    """A pass or a backend compiler rejected the program."""


class TileLabWarning(UserWarning):
    """Something suspicious in a kernel that still compiles (e.g. reading an unwritten fragment)."""


def raised_at_the_caller(fn):
    """Wrap an entry point so that its TileLabErrors show no tilelab frames."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TileLabError as err:
            raise err.with_traceback(None) from None

    return wrapper
