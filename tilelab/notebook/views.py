"""Display objects: each view is a slice of a Trace, shown three ways.

A view's `_repr_mimebundle_` returns its data as
`application/vnd.tilelab.<view>+json` (the payloads of docs/MIME.md, which the
JupyterLab extension renders, also from a saved notebook), a self-contained
`text/html` fallback (inline styles, no JavaScript, all user and compiler text
escaped) and a `text/plain` summary. Views only read the data they are given;
they never compile or run anything. From plain Python: `passes_view(trace).show()`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from ..display import View
from ..viz.measurements import AutotuneView, BenchView  # noqa: F401 - re-exported
from ..viz.render import (
    MUTED,
    Markup,
    box,
    diff_text,
    escape,
    highlight,
    number,
    preformatted,
    side_by_side_diff,
    table,
    unified_diff,
)


def _trace_of(obj):
    """A Trace, from a Trace or a compiled Kernel."""
    trace = getattr(obj, "trace", obj)
    if not hasattr(trace, "passes"):
        raise TypeError(f"expected a tilelab Trace or Kernel, got {type(obj).__name__}")
    return trace


# ---------------------------------------------------------------- passes


def select_passes(trace, which="changed") -> list[int]:
    """Indices of the passes to show: "all", "changed", or pass names/indices."""
    if which in ("all", None):
        return list(range(len(trace.passes)))
    if which == "changed":
        return [i for i, p in enumerate(trace.passes) if p.changed]
    keys = [which] if isinstance(which, (str, int)) else list(which)
    indices: list[int] = []
    count = len(trace.passes)
    for key in keys:
        if isinstance(key, int):
            found = [key % count] if -count <= key < count else []
        else:
            found = [i for i, p in enumerate(trace.passes) if p.name == key]
        if not found:
            raise KeyError(f"no pass {key!r} in {trace.kernel}; passes: "
                           f"{', '.join(trace.pass_names())}")
        indices.extend(i for i in found if i not in indices)
    return sorted(indices)


def pass_index(trace, key) -> int:
    """The index of one pass given by name (its first occurrence) or index."""
    return select_passes(trace, [key])[0]


def first_change_index(trace, name: str) -> int | None:
    """Like `Trace.first_change_of`, but the pass's index (pass names repeat)."""
    for i in range(1, len(trace.passes)):
        if trace.passes[i].changed:
            before = [ln for ln in trace.passes[i - 1].ir.splitlines() if name in ln]
            after = [ln for ln in trace.passes[i].ir.splitlines() if name in ln]
            if before != after:
                return i
    return None


def _buffer_names(trace) -> list[str]:
    names = [p["name"] for p in trace.params]
    names += [b["name"] for b in trace.program.get("buffers", []) if b["name"] not in names]
    return names


def _pass_label(trace, i: int) -> str:
    return f"#{i} {trace.passes[i].name}"


def pass_diff(trace, a: int, b: int) -> str:
    """The unified diff of the IR after pass `a` and after pass `b`."""
    return diff_text(trace.passes[a].ir, trace.passes[b].ir, _pass_label(trace, a),
                     _pass_label(trace, b))


class PassesView(View):
    """The pass explorer: every shown pass with its duration, diff and IR."""

    view = "passes"

    def __init__(self, trace, which="changed", diff: bool = False):
        self.trace = _trace_of(trace)
        self.kernel = self.trace.kernel
        self.which = which
        self.diff = diff
        self.indices = select_passes(self.trace, which)
        # ids for the links from the pass table to the passes: stable, and distinct per trace
        self._id = hashlib.sha1(f"{self.kernel}|{self.trace.target}|"
                                f"{[len(p.ir) for p in self.trace.passes]}".encode()).hexdigest()

    def payload(self) -> dict:
        return {"target": self.trace.target, "source": self.trace.source,
                "passes": [asdict(self.trace.passes[i]) for i in self.indices]}

    # -- HTML

    def _anchor(self, i: int) -> str:
        return f"tilelab-{self._id[:10]}-pass-{i}"

    def _title(self, what: str) -> str:
        t = self.trace
        changed = sum(p.changed for p in t.passes)
        cached = ", from the cache" if t.cache_hit else ""
        return (f"{escape(what)} · <code>{escape(t.kernel)}</code> · {escape(t.target)} "
                f'<span style="{MUTED} font-weight: normal;">{len(t.passes)} passes, '
                f"{changed} changed, {t.compile_seconds:.3f} s{cached}</span>")

    def _pass_table(self) -> str:
        rows, attrs = [], []
        for i in self.indices:
            p = self.trace.passes[i]
            link = Markup(f'<a href="#{self._anchor(i)}">{escape(p.name)}</a>')
            rows.append([i, link, p.owner, p.stage, f"{p.duration_ms:.2f}",
                         "changed" if p.changed else "unchanged"])
            attrs.append(f'data-pass="{i}"')
        return table(["#", "pass", "owner", "stage", "ms", "IR"], rows, attrs)

    def _buffer_index(self) -> str:
        rows = []
        for name in _buffer_names(self.trace):
            i = first_change_index(self.trace, name)
            where = Markup(f'<a href="#{self._anchor(i)}">{escape(_pass_label(self.trace, i))}'
                           "</a>") if i is not None else "(never)"
            rows.append([name, where])
        if not rows:
            return ""
        return ("<details><summary>find a buffer: the first pass that changed it</summary>"
                f"{table(['buffer', 'first changed by'], rows)}</details>")

    def _source(self) -> str:
        source = self.trace.source
        if not source.get("text"):
            return ""
        where = _where(source.get("filename", "?"), source.get("first_line", "?"))
        return (f"<details><summary>kernel source ({escape(where)})</summary>"
                f"{highlight(source['text'], 'python')}</details>")

    def _pass_details(self, i: int) -> str:
        t, p = self.trace, self.trace.passes[i]
        summary = (f"<summary><code>{escape(_pass_label(t, i))}</code> "
                   f'<span style="{MUTED}">{escape(p.owner)} · {escape(p.stage)} · '
                   f"{p.duration_ms:.2f} ms · {'changed' if p.changed else 'unchanged'}"
                   "</span></summary>")
        parts = []
        if i > 0 and p.changed:
            previous = t.passes[i - 1]
            parts.append(f'<div style="{MUTED}">diff against {escape(_pass_label(t, i - 1))}'
                         "</div>")
            parts.append(unified_diff(pass_diff(t, i - 1, i)))
            if self.diff:
                parts.append(side_by_side_diff(previous.ir, p.ir, _pass_label(t, i - 1),
                                               _pass_label(t, i)))
        elif i > 0:
            parts.append(f'<div style="{MUTED}">no change: the same IR as '
                         f"{escape(_pass_label(t, i - 1))}</div>")
        parts.append(f"<details><summary>IR after this pass</summary>"
                     f"{highlight(p.ir, 'tir')}</details>")
        opened = " open" if self.diff else ""
        return (f'<details data-pass="{i}" id="{self._anchor(i)}"{opened}>{summary}'
                f'<div style="margin-left: 16px;">{"".join(parts)}</div></details>')

    def html(self) -> str:
        hidden = len(self.trace.passes) - len(self.indices)
        note = ""
        if self.which == "changed" and hidden:
            note = (f'<div style="{MUTED}">{hidden} passes that changed nothing are hidden '
                    "(<code>--passes all</code> shows them)</div>")
        body = (note + self._pass_table() + self._buffer_index() + self._source()
                + "".join(self._pass_details(i) for i in self.indices))
        return box(self._title("passes"), body, attrs='data-tilelab-view="passes"')

    def text(self) -> str:
        t = self.trace
        lines = [f"{t.kernel} on {t.target}: {len(t.passes)} passes, "
                 f"{sum(p.changed for p in t.passes)} changed, {t.compile_seconds:.3f} s"]
        width = max((len(t.passes[i].name) for i in self.indices), default=0)
        for i in self.indices:
            p = t.passes[i]
            lines.append(f"  #{i:<3} {p.name:<{width}}  {p.owner:<7} {p.duration_ms:8.2f} ms  "
                         f"{'changed' if p.changed else 'unchanged'}")
        return "\n".join(lines)


class PassDiffView(PassesView):
    """The IR difference between two passes, unified and side by side."""

    def __init__(self, trace, before, after):
        trace = _trace_of(trace)
        self.before, self.after = pass_index(trace, before), pass_index(trace, after)
        super().__init__(trace, [self.before, self.after])

    def html(self) -> str:
        t, a, b = self.trace, self.before, self.after
        body = (unified_diff(pass_diff(t, a, b))
                + side_by_side_diff(t.passes[a].ir, t.passes[b].ir, _pass_label(t, a),
                                    _pass_label(t, b))
                + "".join(f"<details><summary>IR after {escape(_pass_label(t, i))}</summary>"
                          f"{highlight(t.passes[i].ir, 'tir')}</details>" for i in (a, b)))
        what = f"diff {_pass_label(t, a)} → {_pass_label(t, b)}"
        return box(self._title(what), body, attrs='data-tilelab-view="passes"')

    def text(self) -> str:
        return pass_diff(self.trace, self.before, self.after) or "(no difference)"


def passes_view(trace, which="changed", diff: bool = False) -> PassesView:
    """The pass explorer of a Trace (or Kernel): "changed", "all", or pass names."""
    return PassesView(trace, which, diff)


def diff(trace, before, after) -> PassDiffView:
    """The IR difference between two passes (names or indices)."""
    return PassDiffView(trace, before, after)


# ---------------------------------------------------------------- generated code


SOURCE_LANGUAGES = ("cuda", "ptx", "sass", "llvm")


def tile_op_rows(trace) -> list[dict]:
    """What each T.gemm and each T.copy through shared memory or between registers and
    global memory became, and why, from the compiler's instruction records: one row per op
    and instruction (a pipeline's prologue and loop issue the same copy)."""
    rows, seen = [], set()
    for record in getattr(trace, "instructions", None) or []:
        if record.get("op") == "gemm":
            operands = f"{record.get('a')}, {record.get('b')} -> {record.get('c')}"
        else:
            operands = f"{record.get('src')} -> {record.get('dst')}"
        row = {"line": str(record.get("loc", "")).split(":")[0],
               "op": f"T.{record.get('op')}({operands})",
               "instruction": str(record.get("instruction", "")),
               "why": str(record.get("why", ""))}
        key = tuple(row.values())
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows


class SourceView(View):
    """Generated code in one language, with the compiler's resource report; the CUDA
    view also lists what each tile op became (`tile_op_rows`)."""

    view = "source"

    def __init__(self, trace, language: str | None = None):
        self.trace = _with_sass(trace)
        self.kernel = self.trace.kernel
        available = [lang for lang in SOURCE_LANGUAGES if self.trace.code.get(lang)]
        self.language = language or (available[0] if available else "llvm")
        # the records name GPU instructions: shown beside the CUDA code, once
        self.ops = tile_op_rows(self.trace) if self.language == "cuda" else []

    def payload(self) -> dict:
        return {"language": self.language, "code": self.trace.code.get(self.language, ""),
                "resources": self.trace.resources, "ops": self.ops}

    def html(self) -> str:
        code = self.trace.code.get(self.language, "")
        title = (f"{escape(self.language)} · <code>{escape(self.kernel)}</code> "
                 f'<span style="{MUTED} font-weight: normal;">{code.count(chr(10)) + 1} lines'
                 "</span>")
        resources = self.trace.resources
        report = (table(["resource", "value"], [[k, v] for k, v in resources.items()])
                  if resources else f'<div style="{MUTED}">no resource report for this target'
                  "</div>")
        ops = table(["line", "tile op", "instruction", "why"],
                    [list(row.values()) for row in self.ops]) if self.ops else ""
        body = ops + report + (highlight(code, self.language) if code else
                               f'<div style="{MUTED}">no {escape(self.language)} code</div>')
        return box(title, body, attrs='data-tilelab-view="source"')

    def text(self) -> str:
        code = self.trace.code.get(self.language, "")
        lines = code.splitlines()
        head = "\n".join(lines[:20]) + (f"\n… ({len(lines)} lines)" if len(lines) > 20 else "")
        report = ", ".join(f"{k}={v}" for k, v in self.trace.resources.items())
        ops = "".join(f"\n  line {row['line']}: {row['op']} -> {row['instruction']} "
                      f"({row['why']})" for row in self.ops)
        return f"{self.language} for {self.kernel}" + (f" [{report}]" if report else "") + \
            ops + f"\n{head}"


def _with_sass(obj):
    """The Trace of a Trace or a Kernel; given a CUDA Kernel, its SASS too, disassembled from
    its cubin the first time a view asks (the compile leaves it out: backends/cuda/nvcc.py
    `disassemble`)."""
    trace = _trace_of(obj)
    cubin = getattr(obj, "cubin", None)
    if cubin and "sass" not in trace.code:
        from ..backends.cuda.nvcc import disassemble

        trace.code["sass"] = disassemble(cubin)
    return trace


def source_views(trace) -> list[SourceView]:
    """One SourceView per language the compilation produced (CUDA C, PTX, SASS, LLVM IR);
    SASS where a Kernel (not its Trace alone) is given and cuobjdump or nvdisasm is there."""
    trace = _with_sass(trace)
    return [SourceView(trace, lang) for lang in SOURCE_LANGUAGES if trace.code.get(lang)]


class CheckView(View):
    """A kernel's output compared with a reference: max error and pass/fail.

    Emitted as application/vnd.tilelab.check+json: `reference`, `passed`,
    `max_abs_error`, `max_rel_error`, `mismatched`, `total`, `rtol`, `atol`,
    `message`.
    """

    view = "check"

    def __init__(self, kernel: str, reference: str, comparison: dict):
        self.kernel, self.reference, self.comparison = kernel, reference, comparison

    def payload(self) -> dict:
        return {"reference": self.reference, **self.comparison}

    def html(self) -> str:
        c = self.comparison
        color = "#1a7f37" if c["passed"] else "#cf222e"
        verdict = "passed" if c["passed"] else "FAILED"
        title = (f'check · <code>{escape(self.kernel)}</code> against '
                 f'<code>{escape(self.reference)}</code>: '
                 f'<span style="color: {color};">{verdict}</span>')
        rows = [["max abs error", number(c["max_abs_error"])],
                ["max rel error", number(c["max_rel_error"])],
                ["mismatched", f"{c['mismatched']} of {c['total']}"],
                ["tolerance", f"rtol={c['rtol']:g}, atol={c['atol']:g}"]]
        message = f"<div>{escape(c['message'])}</div>" if c.get("message") else ""
        return box(title, message + table(["", ""], rows), border=color,
                   attrs='data-tilelab-view="check"')

    def text(self) -> str:
        c = self.comparison
        verdict = "passed" if c["passed"] else "FAILED"
        text = (f"check {self.kernel} against {self.reference}: {verdict} "
                f"(max abs error {number(c['max_abs_error'])}, {c['mismatched']} of "
                f"{c['total']} outside rtol={c['rtol']:g}, atol={c['atol']:g})")
        return text + (f"\n  {c['message']}" if c.get("message") else "")


# ---------------------------------------------------------------- errors


def _where(filename: str, line, cell: str | None = None) -> str:
    """`cell line 5` in a %%tilekernel cell (lines count from the magic's line), else file, line.

    `cell` is the cell being run: a location in another cell keeps its name.
    """
    if filename == cell or (cell is None and filename.startswith("<tilekernel-")):
        return f"cell line {line}"
    return f"{filename}, line {line}"


class ErrorView(View):
    """A TileLabError at the user's own line, with a caret; no traceback.

    `line` and `col` are 1-based, as in the error's message.
    """

    view = "error"

    def __init__(self, error, kernel: str = "", cell: str | None = None):
        self.error, self.kernel, self.cell = error, kernel, cell
        self.location = getattr(error, "location", None)

    def payload(self) -> dict:
        loc = self.location
        return {"message": getattr(self.error, "message", str(self.error)),
                "filename": loc.filename if loc else None,
                "line": loc.line if loc else None,
                "col": loc.col + 1 if loc else None,
                "source_line": loc.source_line if loc else None,
                "hint": getattr(self.error, "hint", "")}

    def _excerpt(self) -> str:
        loc = self.location
        if loc is None or not loc.source_line:
            return ""
        text = loc.source_line
        caret = " " * loc.col + "^"
        return f"{text}\n{caret}"

    def html(self) -> str:
        d = self.payload()
        where = f" at {escape(_where(d['filename'], d['line'], self.cell))}, column {d['col']}" \
            if d["line"] else ""
        title = f'<span style="color: #cf222e;">{escape(type(self.error).__name__)}</span>{where}'
        excerpt = self._excerpt()
        body = (f"<div>{escape(d['message'])}</div>"
                + (preformatted(excerpt) if excerpt else "")
                + (f'<div style="{MUTED}">hint: {escape(d["hint"])}</div>' if d["hint"] else ""))
        return box(title, body, border="#cf222e", attrs='data-tilelab-view="error"')

    def text(self) -> str:
        d = self.payload()
        head = f"{type(self.error).__name__}"
        if d["line"]:
            head += f" at {_where(d['filename'], d['line'], self.cell)}, column {d['col']}"
        parts = [f"{head}: {d['message']}"]
        if self._excerpt():
            parts.append("\n".join("    " + ln for ln in self._excerpt().splitlines()))
        if d["hint"]:
            parts.append(f"hint: {d['hint']}")
        return "\n".join(parts)


# ---------------------------------------------------------------- raw Trace data


def compact_json(value, depth: int = 0) -> str:
    """Indented JSON that keeps each innermost list (a row of a layout table) on one line."""
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {compact_json(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        items = [inner + compact_json(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value)


class JsonView(View):
    """Any piece of a Trace as JSON, for data that has no dedicated view (yet).

    Its data is not one of docs/MIME.md's payloads, so it is emitted as plain
    `application/json` (JupyterLab shows it as a tree) with `title` and `data`.
    """

    def __init__(self, kernel: str, title: str, data):
        self.kernel, self.title, self.value = kernel, title, data

    @property
    def mime_type(self) -> str:
        return "application/json"

    def payload(self) -> dict:
        return {"title": self.title, "data": self.value}

    def html(self) -> str:
        title = f"{escape(self.title)} · <code>{escape(self.kernel)}</code>"
        text = compact_json(self.value)
        return box(title, f'<div style="max-height: 480px; overflow: auto;">'
                          f"{preformatted(text)}</div>", attrs='data-tilelab-view="json"')

    def text(self) -> str:
        text = json.dumps(self.value)
        return f"{self.title} of {self.kernel}: {text[:500]}{'…' if len(text) > 500 else ''}"
