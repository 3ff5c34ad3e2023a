"""The line of a test's own file that a marker comment tags (`x = a[i]  # @read`): where
an error's location and excerpt must point."""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def _lines(path: str) -> tuple[str, ...]:
    return tuple(Path(path).read_text().splitlines())


def line_of(path, marker: str) -> int:
    """The 1-based line of the file at `path` (a test's `__file__`) whose comment is
    `# @marker` (`marker` given with or without its `# @`); exactly one line may carry it."""
    tag = "@" + marker.removeprefix("#").strip().removeprefix("@")
    hits = [n for n, text in enumerate(_lines(str(path)), 1)
            if tag in (part.strip() for part in text.split("#")[1:])]
    assert len(hits) == 1, f"the marker # {tag} is on lines {hits} of {path}"
    return hits[0]
