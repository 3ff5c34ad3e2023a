"""Reading generated CUDA in tests: where a loop starts and the text of its body."""

from __future__ import annotations


def split_at_loop(source: str, var: str) -> tuple[str, str]:
    """(the source before the first `for (int var = ...`, that loop's text up to its closing
    brace) - the brace found at the indentation of the loop's own line, so that a loop at
    any depth is read whole and nothing after it."""
    before, rest = source.split(f"for (int {var} = ", 1)
    indent = before[before.rindex("\n") + 1:]
    return before, rest.split(f"\n{indent}}}\n")[0]


def loop_end(source: str, var: str) -> int:
    """Where the text of the first loop over `var` ends in `source` (before its closing
    brace's line)."""
    before, loop = split_at_loop(source, var)
    return len(before) + len(f"for (int {var} = ") + len(loop)


def loop_text(source: str, var: str) -> str:
    """The text of the first loop over `var` (not `var_load`, a producer's)."""
    return split_at_loop(source, var)[1]
