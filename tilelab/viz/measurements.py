"""Views of measurements: a benchmark beside its baseline, and an autotuning sweep.

`tilelab.bench` and `tilelab.autotune` return these (their results are views), and
the notebook shows them like every other view: tilelab's JSON for the JupyterLab
extension (`application/vnd.tilelab.bench+json`, `...autotune+json`, docs/MIME.md),
self-contained HTML, and plain text. They hold numbers only; nothing here measures.
"""

from __future__ import annotations

from ..display import View
from .render import MUTED, bar_chart, box, escape, number, table


class BenchView(View):
    """Latency, throughput, roofline and speedup of a kernel beside its baseline."""

    view = "bench"

    def __init__(self, kernel: str, device: str, timing: str, rows: list[dict]):
        self.kernel, self.device, self.timing, self.rows = kernel, device, timing, rows

    def payload(self) -> dict:
        return {"device": self.device, "timing": self.timing, "rows": self.rows}

    def _table_rows(self) -> list[list[str]]:
        return [[r["name"], number(r["median_ms"]), number(r.get("tflops")),
                 number(r.get("gbps")),
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
        screened = len({r.get("calls") for r in self._timed()}) > 1  # some timed in full
        header += ["timed calls"] * screened
        with_baseline = any(r.get("speedup_vs_baseline") for r in self.rows)
        if with_baseline:
            header.append(f"vs {self.baseline['name']}")
        with_registers = any(r["resources"].get("registers") for r in self.rows)
        header += ["registers"] * with_registers + ["compile s"]
        rows = []
        for rank, r in enumerate(self._timed(), 1):
            mark = " (default)" if r["default"] else ""
            row = [f"{rank}{mark}", *[_plain_text(r["config"].get(k)) for k in self.knobs],
                   number(r["median_ms"]), _speedup(r.get("speedup_vs_default"))]
            row += [_plain_text(r.get("calls"))] * screened
            if with_baseline:
                row.append(_speedup(r.get("speedup_vs_baseline")))
            row += [_plain_text(r["resources"].get("registers"))] * with_registers
            row.append(number(r.get("compile_s"), 3))
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
