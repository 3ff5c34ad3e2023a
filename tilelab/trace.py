"""The Trace: everything one compilation did, as plain JSON-ready data.

Every view tilelab shows (pass explorer, layouts, pipeline replay, generated
code, benchmarks) is a rendering of a Trace. The compiler fills it in; the
notebook only reads it. It round-trips through JSON, so saved notebooks and
other tools can show it without recompiling.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field, fields


def _lines(text: str) -> list[str]:
    """Lines with their newlines, the last one too (so a diff never glues two lines)."""
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


@dataclass
class PassRecord:
    """The IR after one pass."""

    name: str
    ir: str
    changed: bool
    duration_ms: float
    owner: str  # "tilelab" or "tvm"
    stage: str = "pipeline"  # "input", "pipeline", "host", "device"


@dataclass
class Trace:
    """A compilation, from source to generated code."""

    kernel: str
    target: str
    source: dict = field(default_factory=dict)  # filename, first_line, text
    params: list = field(default_factory=list)  # name, shape, dtype, output
    program: dict = field(default_factory=dict)  # buffers and tile ops (passes/summarize.py)
    passes: list[PassRecord] = field(default_factory=list)
    layouts: dict = field(default_factory=dict)  # buffer -> Layout/Fragment as JSON
    pipelines: list = field(default_factory=list)  # plans of T.Pipelined loops
    # what the ops emit: each T.gemm's instruction and why; each copy through shared
    # memory, its vector width and instruction (the bank view replays these)
    instructions: list = field(default_factory=list)
    code: dict = field(default_factory=dict)  # "llvm", "cuda", "ptx", "sass", ...
    resources: dict = field(default_factory=dict)  # registers, spills, shared memory, ...
    bench: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    compile_seconds: float = 0.0
    cache_hit: bool = False

    # -- queries used by the views

    def pass_names(self, changed_only: bool = False) -> list[str]:
        return [p.name for p in self.passes if p.changed or not changed_only]

    def get_pass(self, name_or_index) -> PassRecord:
        if isinstance(name_or_index, int):
            return self.passes[name_or_index]
        for p in self.passes:
            if p.name == name_or_index:
                return p
        raise KeyError(f"no pass named {name_or_index!r}; passes: {', '.join(self.pass_names())}")

    def ir_after(self, name_or_index) -> str:
        return self.get_pass(name_or_index).ir

    def diff(self, before, after, context: int = 3) -> str:
        """Unified diff of the IR between two passes (names or indices)."""
        a, b = self.get_pass(before), self.get_pass(after)
        return "".join(difflib.unified_diff(_lines(a.ir), _lines(b.ir), fromfile=a.name,
                                            tofile=b.name, n=context))

    def first_change_of(self, name: str) -> str | None:
        """The first pass whose output mentions `name` differently from its input."""
        previous = None
        for p in self.passes:
            if previous is not None and p.changed:
                before = [ln for ln in previous.splitlines() if name in ln]
                after = [ln for ln in p.ir.splitlines() if name in ln]
                if before != after:
                    return p.name
            previous = p.ir
        return None

    # -- serialization

    def to_dict(self) -> dict:
        """Plain data for JSON. The fields already hold plain data (layout tables are long
        lists of ints), so this copies one level, not every number as `asdict` would."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["passes"] = [asdict(p) for p in self.passes]
        return data

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def from_dict(data: dict) -> Trace:
        data = dict(data)
        data["passes"] = [PassRecord(**p) for p in data.get("passes", [])]
        return Trace(**data)

    @staticmethod
    def from_json(text: str) -> Trace:
        return Trace.from_dict(json.loads(text))

    def __repr__(self) -> str:
        changed = sum(p.changed for p in self.passes)
        return (f"<Trace {self.kernel} for {self.target}: {len(self.passes)} passes "
                f"({changed} changed), {self.compile_seconds:.3f} s>")
