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
from .render import (
    MUTED,
    Markup,
    bar_chart,
    box,
    diff_text,
    escape,
    highlight,
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


class SourceView(View):
    """Generated code in one language, with the compiler's resource report."""

    view = "source"

    def __init__(self, trace, language: str | None = None):
        self.trace = _trace_of(trace)
        self.kernel = self.trace.kernel
        available = [lang for lang in SOURCE_LANGUAGES if self.trace.code.get(lang)]
        self.language = language or (available[0] if available else "llvm")

    def payload(self) -> dict:
        return {"language": self.language, "code": self.trace.code.get(self.language, ""),
                "resources": self.trace.resources}

    def html(self) -> str:
        code = self.trace.code.get(self.language, "")
        title = (f"{escape(self.language)} · <code>{escape(self.kernel)}</code> "
                 f'<span style="{MUTED} font-weight: normal;">{code.count(chr(10)) + 1} lines'
                 "</span>")
        resources = self.trace.resources
        report = (table(["resource", "value"], [[k, v] for k, v in resources.items()])
                  if resources else f'<div style="{MUTED}">no resource report for this target'
                  "</div>")
        body = report + (highlight(code, self.language) if code else
                         f'<div style="{MUTED}">no {escape(self.language)} code</div>')
        return box(title, body, attrs='data-tilelab-view="source"')

    def text(self) -> str:
        code = self.trace.code.get(self.language, "")
        lines = code.splitlines()
        head = "\n".join(lines[:20]) + (f"\n… ({len(lines)} lines)" if len(lines) > 20 else "")
        report = ", ".join(f"{k}={v}" for k, v in self.trace.resources.items())
        return f"{self.language} for {self.kernel}" + (f" [{report}]" if report else "") + \
            f"\n{head}"


def source_views(trace) -> list[SourceView]:
    """One SourceView per language the compilation produced (CUDA C, PTX, SASS, LLVM IR)."""
    trace = _trace_of(trace)
    return [SourceView(trace, lang) for lang in SOURCE_LANGUAGES if trace.code.get(lang)]


# ---------------------------------------------------------------- benchmarks


def _number(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}g}"


class BenchView(View):
    """Latency, throughput, roofline and speedup of a kernel beside its baseline."""

    view = "bench"

    def __init__(self, kernel: str, device: str, timing: str, rows: list[dict]):
        self.kernel, self.device, self.timing, self.rows = kernel, device, timing, rows

    def payload(self) -> dict:
        return {"device": self.device, "timing": self.timing, "rows": self.rows}

    def _table_rows(self) -> list[list[str]]:
        return [[r["name"], _number(r["median_ms"]), _number(r.get("tflops")),
                 _number(r.get("gbps")),
                 "" if r.get("roofline_pct") is None else f"{r['roofline_pct']:.1f}%",
                 "" if r.get("speedup") is None else f"{r['speedup']:.2f}×"]
                for r in self.rows]

    HEADER = ["", "median ms", "TFLOP/s", "GB/s", "% of roofline", "speedup"]

    def _table(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows, without the columns no row has a value for."""
        rows = self._table_rows()
        keep = [c for c in range(len(self.HEADER)) if c < 2 or any(r[c] for r in rows)]
        return [self.HEADER[c] for c in keep], [[r[c] for c in keep] for r in rows]

    def html(self) -> str:
        title = (f"bench · <code>{escape(self.kernel)}</code> "
                 f'<span style="{MUTED} font-weight: normal;">{escape(self.device)}, '
                 f"{escape(self.timing)}, median</span>")
        chart = bar_chart([(r["name"], r["median_ms"]) for r in self.rows])
        note = (f'<div style="{MUTED}">speedup = baseline time / time; shorter bars are faster'
                "</div>")
        return box(title, table(*self._table()) + chart + note,
                   attrs='data-tilelab-view="bench"')

    def text(self) -> str:
        header, rows = self._table()
        rows = [header] + rows
        widths = [max(len(str(r[c])) for r in rows) for c in range(len(header))]
        lines = [f"bench {self.kernel} on {self.device} ({self.timing}, median)"]
        lines += ["  " + "  ".join(str(c).rjust(w) if j else str(c).ljust(w)
                                   for j, (c, w) in enumerate(zip(r, widths))) for r in rows]
        return "\n".join(lines)


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
        rows = [["max abs error", _number(c["max_abs_error"])],
                ["max rel error", _number(c["max_rel_error"])],
                ["mismatched", f"{c['mismatched']} of {c['total']}"],
                ["tolerance", f"rtol={c['rtol']:g}, atol={c['atol']:g}"]]
        message = f"<div>{escape(c['message'])}</div>" if c.get("message") else ""
        return box(title, message + table(["", ""], rows), border=color,
                   attrs='data-tilelab-view="check"')

    def text(self) -> str:
        c = self.comparison
        verdict = "passed" if c["passed"] else "FAILED"
        text = (f"check {self.kernel} against {self.reference}: {verdict} "
                f"(max abs error {_number(c['max_abs_error'])}, {c['mismatched']} of "
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


# ---------------------------------------------------------------- autotuning


def _speedup(value) -> str:
    return "" if value is None else f"{value:.2f}×"


def heatmap(rows: list[dict], x: str, y: str, width: int = 520) -> str:
    """Inline SVG: the best time over the other knobs for each (x, y) pair; darker is faster."""
    cells: dict = {}
    for r in rows:
        if r["median_ms"] is None:
            continue
        at = (str(r["config"].get(x)), str(r["config"].get(y)))
        cells[at] = min(cells.get(at, float("inf")), r["median_ms"])
    if not cells:
        return ""

    def order(values):
        return sorted(set(values), key=lambda v: (float(v) if v.lstrip("-").replace(".", "", 1)
                                                  .isdigit() else float("inf"), v))

    xs, ys = order(a for a, _ in cells), order(b for _, b in cells)
    left, top, size = 90, 24, min(60, (width - 100) // max(len(xs), 1))
    fastest, slowest = min(cells.values()), max(cells.values())
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + size * len(xs) + 10}" '
             f'height="{top + size * len(ys) + 30}" role="img" style="font-size: 11px;">',
             f'<text x="{left}" y="14">{escape(x)} →</text>',
             f'<text x="4" y="{top + 12}">{escape(y)} ↓</text>']
    for j, b in enumerate(ys):
        parts.append(f'<text x="{left - 6}" y="{top + j * size + size / 2 + 4:.0f}" '
                     f'text-anchor="end">{escape(b)}</text>')
        for i, a in enumerate(xs):
            ms = cells.get((a, b))
            if ms is None:
                fill, label = "#eaeef2", "–"
            else:
                share = 0.0 if slowest == fastest else (ms - fastest) / (slowest - fastest)
                light = int(35 + 55 * share)  # fastest darkest
                fill, label = f"hsl(212, 80%, {light}%)", f"{ms:.3g}"
            color = "#fff" if ms is not None and light < 60 else "#24292f"
            parts.append(f'<rect x="{left + i * size}" y="{top + j * size}" width="{size - 2}" '
                         f'height="{size - 2}" fill="{fill}"><title>{escape(x)}={escape(a)}, '
                         f'{escape(y)}={escape(b)}: {escape(label)} ms</title></rect>'
                         f'<text x="{left + i * size + size / 2 - 1:.0f}" '
                         f'y="{top + j * size + size / 2 + 3:.0f}" text-anchor="middle" '
                         f'fill="{color}">{escape(label)}</text>')
    for i, a in enumerate(xs):
        parts.append(f'<text x="{left + i * size + size / 2:.0f}" '
                     f'y="{top + len(ys) * size + 14}" text-anchor="middle">{escape(a)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def varying_knobs(rows: list[dict], knobs: list[str]) -> list[str]:
    """The knobs that take more than one value among the candidates that ran."""
    return [k for k in knobs if len({str(r["config"].get(k)) for r in rows
                                     if r["median_ms"] is not None}) > 1]


class AutotuneView(View):
    """An autotuning run: candidates sorted by time, a plot over the knobs, the failures.

    Emitted as application/vnd.tilelab.autotune+json (docs/MIME.md).
    """

    view = "autotune"

    def __init__(self, kernel: str, device: str, timing: str, target: str, backend: str,
                 rows: list[dict], knobs: list[str], seconds: dict, cached: bool = False,
                 baseline: dict | None = None):
        self.kernel, self.device, self.timing, self.target = kernel, device, timing, target
        self.backend, self.rows, self.knobs, self.seconds = backend, rows, knobs, seconds
        self.cached, self.baseline = cached, baseline

    def payload(self) -> dict:
        return {"device": self.device, "timing": self.timing, "target": self.target,
                "backend": self.backend, "knobs": self.knobs, "rows": self.rows,
                "seconds": self.seconds, "cached": self.cached, "baseline": self.baseline}

    def _timed(self) -> list[dict]:
        return [r for r in self.rows if r["median_ms"] is not None]

    def _failed(self) -> list[dict]:
        return [r for r in self.rows if r["status"] not in ("ok", "pending")]

    def _summary(self) -> str:
        timed = self._timed()
        if not timed:
            return "no configuration ran correctly"
        best = timed[0]
        text = f"best: {best['label']}, {best['median_ms']:.4g} ms"
        if best.get("speedup_vs_default"):
            text += f", {best['speedup_vs_default']:.2f}× the default"
        if best.get("speedup_vs_baseline"):
            text += f", {best['speedup_vs_baseline']:.2f}× {self.baseline['name']}"
        return text

    def _header_and_rows(self):
        header = ["#", *self.knobs, "median ms", "vs default"]
        with_baseline = any(r.get("speedup_vs_baseline") for r in self.rows)
        if with_baseline:
            header.append(f"vs {self.baseline['name']}")
        with_registers = any(r["resources"].get("registers") for r in self.rows)
        header += ["registers"] * with_registers + ["compile s"]
        rows = []
        for rank, r in enumerate(self._timed(), 1):
            mark = " (default)" if r["default"] else ""
            row = [f"{rank}{mark}", *[_plain_text(r["config"].get(k)) for k in self.knobs],
                   _number(r["median_ms"]), _speedup(r.get("speedup_vs_default"))]
            if with_baseline:
                row.append(_speedup(r.get("speedup_vs_baseline")))
            row += [_plain_text(r["resources"].get("registers"))] * with_registers
            row.append(_number(r.get("compile_s"), 3))
            rows.append(row)
        return header, rows

    def html(self) -> str:
        s = self.seconds
        cached = ", from the cache" if self.cached else ""
        title = (f"autotune · <code>{escape(self.kernel)}</code> "
                 f'<span style="{MUTED} font-weight: normal;">{len(self.rows)} configurations on '
                 f"{escape(self.device)} ({escape(self.timing)}, median); compile "
                 f"{s.get('compile', 0):.1f} s on {s.get('compile_workers')} workers, "
                 f"benchmark {s.get('benchmark', 0):.1f} s on {s.get('bench_workers')}"
                 f"{cached}</span>")
        header, rows = self._header_and_rows()
        parts = [f"<div><b>{escape(self._summary())}</b></div>", table(header, rows)]
        timed = self._timed()
        knobs = varying_knobs(self.rows, self.knobs)
        if len(knobs) >= 2:
            parts.append(f'<div style="{MUTED}">best time (ms) per {escape(knobs[0])} and '
                         f"{escape(knobs[1])}, over the other knobs</div>"
                         + heatmap(self.rows, knobs[0], knobs[1]))
        if timed:
            parts.append(bar_chart([(r["label"], r["median_ms"]) for r in timed]))
        failed = self._failed()
        if failed:
            parts.append(f"<details open><summary>{len(failed)} failed</summary>"
                         + table(["configuration", "status", "reason"],
                                 [[r["label"], r["status"], r["reason"]] for r in failed])
                         + "</details>")
        return box(title, "".join(parts), attrs='data-tilelab-view="autotune"')

    def text(self) -> str:
        header, rows = self._header_and_rows()
        rows = [header] + rows
        widths = [max(len(str(r[c])) for r in rows) for c in range(len(header))]
        lines = [f"autotune {self.kernel} on {self.device} ({len(self.rows)} configurations): "
                 f"{self._summary()}"]
        lines += ["  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
        lines += [f"  failed: {r['label']}: {r['status']}: {r['reason']}"
                  for r in self._failed()]
        return "\n".join(lines)


def _plain_text(value) -> str:
    return "" if value is None else str(value)
