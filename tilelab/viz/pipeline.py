"""The software pipeline, replayed: which copy and which compute run when, in which slot.

`passes/pipeline_loops.py` turns `for k in T.Pipelined(n, num_stages=S)`
into a prologue that starts the copies of iterations 0..a-1, and a loop whose
iteration k waits for its own copies, starts the copies of iteration k+a
into slot (k+a) % S, and computes on slot k % S. Copies run a = S-1
iterations ahead (S-2 on Hopper when the body only multiplies and each
iteration's MMAs stay in flight: the plan's `ahead`). Its plan (stage and
order of every statement, slots, async groups, waits) is in
`trace.pipelines`.

This module replays a plan on an abstract clock: a group of async copies
takes `copy_time` units from issue to landing (default 2: memory is slower
than math), the compute statements of an iteration take `compute_time` units
together (default 1), issuing is instantaneous, and an iteration whose copies
have not landed waits. The result is a timeline - a row per statement per
iteration, plus the waits - with three phases marked: the *prologue* fills
the pipeline (until the first compute starts), the *steady state* overlaps
copies of later iterations with the compute of this one, and the *epilogue*
drains it (the last `ahead` iterations issue no copies). With the defaults, two
stages leave the compute waiting every iteration and three stages hide the
copies completely - the reason `num_stages` exists. A warp-specialized loop
(`passes/specialize_warps.py`) is replayed by its roles: the producer warp
fills all S slots at once and refills a slot the moment the consumers release
it, so the compute lane is the consumer warpgroups' and the slot lanes are the
producer's copies.

The picture has one lane for the threads' compute and one per buffer slot;
the HTML adds Play and step controls (plain inline JavaScript, so they work
in a saved notebook without a kernel) that move a time cursor over every
timeline on the page at once, so two schedules can be compared step by step.
`chrome_trace` exports a timeline in the Chrome trace event format, which
Perfetto (ui.perfetto.dev) and chrome://tracing open.
"""

from __future__ import annotations

import base64
import json

from .scene import Scene, escape
from .view import View, trace_field

COLORS = {"copy": "#5b9bd5", "compute": "#70ad47", "read": "#e2efda"}
PHASE_COLORS = {"prologue": "#fff4d6", "steady": "#eef5ff", "epilogue": "#f3ecfa"}
PHASE_NAMES = {"prologue": "prologue", "steady": "steady state", "epilogue": "epilogue"}


def replayed_iterations(plan: dict, iterations: int) -> int:
    """The loop is replayed as if its extent were min(extent, iterations)."""
    extent = plan.get("extent")
    return min(extent, iterations) if isinstance(extent, int) else iterations


def pipeline_timeline(plan: dict, iterations: int = 8, copy_time: float = 2.0,
                      compute_time: float = 1.0) -> list[dict]:
    """Rows `{iteration, stage, kind, slot, start, end, label, phase, statement}` of a plan.

    `statement` is the order of the plan's statement the row belongs to (None
    for waits); times are abstract units (see the module doc).
    """
    return replay(plan, iterations, copy_time, compute_time)[0]


def replay(plan: dict, iterations: int = 8, copy_time: float = 2.0, compute_time: float = 1.0):
    """The timeline rows of a plan and the time spans of its three phases."""
    stages = int(plan["num_stages"])
    ahead = int(plan.get("ahead", stages - 1))  # how many iterations copies run ahead
    n = replayed_iterations(plan, iterations)
    statements = sorted(plan["statements"], key=lambda s: s["order"])
    producers = [s for s in statements if s["role"] == "copy"]
    consumers = [s for s in statements if s["role"] != "copy"]
    step = compute_time / max(len(consumers), 1)
    tma = bool(plan.get("tma"))  # one thread's box copies, waits on mbarriers
    rows: list[dict] = []
    landed: dict[int, float] = {}

    def add(iteration, stage, kind, start, end, label, statement):
        rows.append({"iteration": iteration, "stage": stage, "kind": kind,
                     "slot": iteration % stages, "start": start, "end": end, "label": label,
                     "statement": statement})

    def issue(iteration, now):
        for s in producers:
            add(iteration, s["stage"], "copy", now, now + copy_time,
                f"{'TMA ' if tma else ''}{s['text']} #{iteration}", s["order"])
        landed[iteration] = now + copy_time

    # A warp-specialized loop's producer issues a slot's copies the moment the consumers
    # release it (iteration k's slot, or k - 1's while k's MMAs are in flight);
    # otherwise the threads issue the copies of iteration k + ahead at the top of k.
    specialized = bool(plan.get("warp_specialized"))
    held = 1 if specialized and ahead == stages - 2 else 0  # slots still read after k
    for i in range(min(stages if specialized else ahead, n)):  # the prologue
        issue(i, 0.0)
    now, tops = 0.0, []
    for k in range(n):
        tops.append(now)
        if landed[k] > now:
            how = f" (mbarrier of slot {k % stages}, phase {k // stages % 2})" if tma else ""
            add(k, ahead, "wait", now, landed[k], f"wait for the copies of #{k}{how}", None)
            now = landed[k]
        if not specialized and k + ahead < n:
            issue(k + ahead, now)
        for s in consumers:
            add(k, s["stage"], "compute", now, now + step, f"{s['text']} #{k}", s["order"])
            now += step
        if specialized and 0 <= k - held and k - held + stages < n:
            issue(k - held + stages, now)  # the released slot, refilled by the producer

    # The prologue lasts until the first compute starts; the epilogue starts at the
    # top of the first iteration that issues no copies (iteration n - ahead).
    first = min((r["start"] for r in rows if r["kind"] == "compute"), default=now)
    drain = n - ahead
    second = max(tops[drain] if 1 <= drain < n else (first if drain < 1 else now), first)
    spans = {"prologue": (0.0, first), "steady": (first, second), "epilogue": (second, now)}
    for row in rows:
        row["phase"] = ("prologue" if row["start"] < first else
                        "steady" if row["start"] < second else "epilogue")
    return rows, spans


def lane_of(row: dict) -> int:
    """Lane 0 is the threads' compute (and waits); lane 1 + s is buffer slot s."""
    return 1 + row["slot"] if row["kind"] == "copy" else 0


def chrome_trace(timeline, process: str = "pipeline", us_per_unit: float = 1.0) -> dict:
    """Chrome trace events (`ph: "X"`, ts/dur in µs) of a timeline, for Perfetto.

    `timeline` is a list of rows, or a dict name -> rows for several
    schedules (one process each).
    """
    schedules = timeline if isinstance(timeline, dict) else {process: timeline}
    events = []
    for pid, (name, rows) in enumerate(schedules.items(), start=1):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": name}})
        for lane in sorted({lane_of(r) for r in rows}):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": lane,
                           "args": {"name": "compute" if lane == 0 else f"slot {lane - 1}"}})
        for r in rows:
            events.append({"name": r["label"], "cat": r["kind"], "ph": "X",
                           "ts": r["start"] * us_per_unit,
                           "dur": (r["end"] - r["start"]) * us_per_unit,
                           "pid": pid, "tid": lane_of(r),
                           "args": {"iteration": r["iteration"], "stage": r["stage"],
                                    "slot": r["slot"], "phase": r.get("phase")}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"time unit": "abstract (1 unit = 1 µs here)"}}


# ---------------------------------------------------------------- the view


def _plans_of(source) -> tuple[str, list[dict]]:
    """(kernel name, plans) from a Trace, a trace dict, one plan, or a list of plans."""
    if isinstance(source, dict) and "statements" in source:
        return "", [source]
    if isinstance(source, list):
        return "", list(source)
    return trace_field(source, "kernel", ""), list(trace_field(source, "pipelines") or [])


def pipeline_view(trace, iterations: int = 8, compare=None, copy_time: float = 2.0,
                  compute_time: float = 1.0, measured=None) -> PipelineView:
    """The pipeline plans of a Trace replayed for `iterations` iterations.

    `compare`: another Trace (or plan, or list of plans) shown beside it on
    the same clock, e.g. the same kernel with another `num_stages`.
    `measured`: rows recorded on a GPU by an instrumented build
    (`tilelab.instrument.measured_rows`), drawn under the plan in nanoseconds.
    """
    kernel, plans = _plans_of(trace)
    other = _plans_of(compare) if compare is not None else None
    view = PipelineView(kernel, plans, iterations, other, copy_time, compute_time)
    view.measured = [r for r in (measured or []) if r["iteration"] < iterations]
    return view


class PipelineView(View):
    """Payload `{pipelines, timeline}` (docs/MIME.md); `compare` adds the other schedule."""

    view = "pipeline"

    def __init__(self, kernel, plans, iterations, compare, copy_time, compute_time):
        super().__init__(kernel)
        self.plans, self.iterations = plans, iterations
        self.copy_time, self.compute_time = copy_time, compute_time
        self.compare = compare
        # (kernel name, plan, timeline rows, phase spans) for every schedule shown
        self.panels = [(kernel, plan, *self._replay(plan)) for plan in plans]
        if compare is not None:
            self.panels += [(compare[0] or "compare", plan, *self._replay(plan))
                            for plan in compare[1]]

    def _replay(self, plan):
        rows, spans = replay(plan, self.iterations, self.copy_time, self.compute_time)
        for row in rows:
            row["loop"] = plan["loop"]
        return rows, spans

    measured: list = []

    def payload(self) -> dict:
        own = len(self.plans)
        data = {"pipelines": self.plans,
                "timeline": [r for _, _, rows, _ in self.panels[:own] for r in rows]}
        if self.measured:
            data["measured"] = self.measured
        if self.compare is not None:
            data["compare"] = {"kernel": self.compare[0], "pipelines": self.compare[1],
                               "timeline": [r for _, _, rows, _ in self.panels[own:] for r in rows]}
        return data

    def title(self) -> str:
        stages = " vs ".join(str(p["num_stages"]) for _, p, _, _ in self.panels)
        return (f"Software pipeline of {self.kernel or 'the kernel'} "
                f"(num_stages {stages}), first {self.iterations} iterations")

    def text(self) -> str:
        if not self.panels:
            return f"{self.kernel}: no T.Pipelined loop with num_stages >= 2"
        lines = []
        for name, plan, rows, spans in self.panels:
            end = max(r["end"] for r in rows)
            waits = sum(r["end"] - r["start"] for r in rows if r["kind"] == "wait")
            lines.append(f"{name}: loop {plan['loop']}, {plan['num_stages']} stages, "
                         f"{replayed_iterations(plan, self.iterations)} iterations in {end:g} "
                         f"units ({waits:g} waiting); "
                         + ", ".join(f"{PHASE_NAMES[k]} {a:g}-{b:g}" for k, (a, b) in
                                     spans.items() if b > a))
            for what in ("copies", "waits", "across_tiles", "rotated"):
                if plan.get(what):
                    lines.append(f"  {what.replace('_', ' ')}: {plan[what]}")
        return "\n".join(lines)

    def chrome_trace(self) -> dict:
        return chrome_trace({f"{name} · {plan['loop']} · num_stages={plan['num_stages']}": rows
                             for name, plan, rows, _ in self.panels})

    # -- pictures

    def scene(self, title: bool = True) -> Scene:
        scene = Scene(0, 0)
        y = 4.0
        if title:
            scene.text(4, 12, self.title(), size=13, bold=True)
            y = 28.0
        if not self.panels:
            scene.text(4, y + 10, "No T.Pipelined loop with num_stages >= 2 in this kernel.",
                       size=12)
            scene.width, scene.height = 480, y + 24
            return scene
        end = max(r["end"] for _, _, rows, _ in self.panels for r in rows)
        for name, plan, rows, spans in self.panels:
            y = _draw_panel(scene, y, name, plan, rows, spans, end, self.iterations)
        if self.measured:
            y = _draw_measured(scene, y, self.measured, end)
        scene.width = LEFT + end * UNIT + 30
        scene.height = y
        return scene

    def body_html(self) -> str:
        trace = base64.b64encode(json.dumps(self.chrome_trace()).encode()).decode("ascii")
        filename = f"{self.kernel or 'pipeline'}.trace.json"
        end = max((r["end"] for _, _, rows, _ in self.panels for r in rows), default=0)
        controls = (
            '<div class="tl-controls" hidden><button class="tl-reset">&#x21E4; start</button>'
            '<button class="tl-back">&#x25C0; step</button>'
            '<button class="tl-play">&#x25B6; play</button>'
            '<button class="tl-step">step &#x25B6;</button> '
            f'<input class="tl-time" type="range" min="0" max="{end:g}" step="0.05" '
            f'value="{end:g}" style="width: 16em"> <span class="tl-clock"></span></div>')
        return (f'{_plan_tables(self.panels)}{controls}'
                f'<div class="tl-scroll">{self.scene(title=False).to_svg()}</div>'
                '<div class="tl-status"></div>'
                f'<p class="tl-note">Abstract time: a group of async copies takes '
                f'{self.copy_time:g} units to land, an iteration\'s compute {self.compute_time:g}'
                f'. <a download="{escape(filename)}" '
                f'href="data:application/json;base64,{trace}">Chrome trace JSON</a> '
                '(opens in ui.perfetto.dev).</p>')

    def script_data(self):
        return {"panels": [{"name": name, "num_stages": plan["num_stages"], "rows": rows}
                           for name, plan, rows, _ in self.panels], "unit": UNIT, "left": LEFT}

    script = r"""
var svg = root.querySelector('svg'), status = root.querySelector('.tl-status');
var slider = root.querySelector('.tl-time'), clock = root.querySelector('.tl-clock');
var play = root.querySelector('.tl-play'), timer = null;
if (!svg || !data.panels.length) return;
root.querySelector('.tl-controls').hidden = false;
var bars = Array.prototype.slice.call(svg.querySelectorAll('[data-start]'));
var end = parseFloat(slider.max), times = [0, end];
data.panels.forEach(function (p) {
  p.rows.forEach(function (r) { times.push(r.start, r.end); });
});
times = times.filter(function (t, i, a) { return a.indexOf(t) === i; });
times.sort(function (a, b) { return a - b; });
var NS = 'http://www.w3.org/2000/svg';
var cursor = document.createElementNS(NS, 'line');
cursor.setAttribute('class', 'tl-cursor');
cursor.setAttribute('y1', 0);
cursor.setAttribute('y2', svg.getAttribute('height'));
cursor.setAttribute('stroke', '#d9534f');
cursor.setAttribute('stroke-width', 2);
svg.appendChild(cursor);

function describe(p, t) {
  var now = p.rows.filter(function (r) { return r.start <= t && t < r.end; });
  var parts = [], copies = {};
  now.forEach(function (r) {
    var what = r.label.replace(/ #\d+$/, '');
    if (r.kind === 'compute') {
      parts.push('computing #' + r.iteration + ' on slot ' + r.slot + ' (' + what + ')');
    } else if (r.kind === 'wait') {
      parts.push('waiting for the copies of #' + r.iteration + ' (slot ' + r.slot + ')');
    } else {
      copies[r.iteration] = r.slot;
    }
  });
  Object.keys(copies).forEach(function (i) {
    parts.push('copies of #' + i + ' -> slot ' + copies[i] + ' in flight');
  });
  var doing = parts.join('; ') || (t >= end ? 'done' : 'idle');
  return p.name + ' (num_stages=' + p.num_stages + '): ' + doing;
}
function show(t) {
  t = Math.max(0, Math.min(end, t));
  root.setAttribute('data-time', String(t));
  slider.value = t;
  clock.textContent = 't = ' + t.toFixed(2);
  var x = data.left + t * data.unit;
  cursor.setAttribute('x1', x);
  cursor.setAttribute('x2', x);
  var active = 0;
  bars.forEach(function (b) {
    var s = parseFloat(b.getAttribute('data-start')), e = parseFloat(b.getAttribute('data-end'));
    var on = s <= t && t < e;
    if (on) active++;
    b.setAttribute('opacity', s > t ? '0.2' : '1');
    b.setAttribute('stroke', on ? '#000' : '#fff');
    b.setAttribute('stroke-width', on ? '2' : '1');
  });
  root.setAttribute('data-active', String(active));
  status.textContent = data.panels.map(function (p) { return describe(p, t); }).join('\n');
}
function current() { return parseFloat(root.getAttribute('data-time')); }
function next() {
  var t = current();
  for (var i = 0; i < times.length; i++) if (times[i] > t + 1e-9) return show(times[i]);
  show(end);
}
function previous() {
  var t = current();
  for (var i = times.length - 1; i >= 0; i--) if (times[i] < t - 1e-9) return show(times[i]);
  show(0);
}
function stop() { clearInterval(timer); timer = null; play.textContent = '\u25B6 play'; }
play.addEventListener('click', function () {
  if (timer) return stop();
  if (current() >= end) show(0);
  play.textContent = '\u23F8 pause';
  timer = setInterval(function () { if (current() >= end) stop(); else next(); }, 500);
});
root.querySelector('.tl-step').addEventListener('click', function () { stop(); next(); });
root.querySelector('.tl-back').addEventListener('click', function () { stop(); previous(); });
root.querySelector('.tl-reset').addEventListener('click', function () { stop(); show(0); });
slider.addEventListener('input', function () { stop(); show(parseFloat(slider.value)); });
show(end);
"""


LEFT, UNIT = 200, 56  # x of time 0 and pixels per time unit
LANE_H, COPY_H = 30, 13  # compute lane height; height of one copy inside a slot lane


def _draw_panel(scene: Scene, y: float, name: str, plan: dict, rows: list[dict], spans: dict,
                end: float, iterations: int) -> float:
    """One schedule: phase bands, a compute lane and a lane per slot, a time axis, a legend."""
    stages = plan["num_stages"]
    producers = [s for s in sorted(plan["statements"], key=lambda s: s["order"])
                 if s["role"] == "copy"]
    extent = plan.get("extent")
    n = replayed_iterations(plan, iterations)
    whole = "" if isinstance(extent, int) and extent <= iterations else \
        f" (extent {extent}: replayed as a loop of {n})"
    scene.text(4, y + 8, f"{name + ' · ' if name else ''}loop {plan['loop']}: num_stages = "
               f"{stages}, {n} iterations{whole}", size=12, bold=True)
    y += 20
    slot_h = max(LANE_H, COPY_H * len(producers) + 4)
    lanes_top = y + 16
    height = LANE_H + stages * (slot_h + 4) + 4
    for phase, (start, stop) in spans.items():  # the phase bands behind everything
        scene.rect(LEFT + start * UNIT, y, (stop - start) * UNIT, height + 16,
                   PHASE_COLORS[phase], group="phases")
        if stop > start:
            scene.text(LEFT + (start + stop) / 2 * UNIT, y + 7, PHASE_NAMES[phase], size=10,
                       anchor="middle", color="#555555", group="phases")
    tops = {0: lanes_top}
    scene.text(LEFT - 8, lanes_top + LANE_H / 2, "compute (threads)", size=11, anchor="end")
    for s in range(stages):
        tops[1 + s] = lanes_top + LANE_H + 4 + s * (slot_h + 4)
        buffers = ", ".join(plan.get("slots", {}))
        scene.text(LEFT - 8, tops[1 + s] + slot_h / 2 - 6, f"slot {s}", size=11, anchor="end")
        scene.text(LEFT - 8, tops[1 + s] + slot_h / 2 + 7, buffers, size=9, anchor="end",
                   color="#555555")
        scene.line(LEFT, tops[1 + s] - 2, LEFT + end * UNIT, tops[1 + s] - 2, color="#cccccc",
                   width=0.5, group="grid")
    for r in rows:  # slot s is read while iteration k computes: a pale band in its lane
        if r["kind"] == "compute":
            scene.rect(LEFT + r["start"] * UNIT, tops[1 + r["slot"]], (r["end"] - r["start"])
                       * UNIT, slot_h, COLORS["read"], group="reads",
                       attrs={"data-start": r["start"], "data-end": r["end"]})
    order = {s["order"]: i for i, s in enumerate(producers)}
    for r in rows:
        x, w = LEFT + r["start"] * UNIT, (r["end"] - r["start"]) * UNIT
        attrs = {"data-start": r["start"], "data-end": r["end"], "data-kind": r["kind"],
                 "data-iteration": r["iteration"], "data-slot": r["slot"]}
        if r["kind"] == "copy":
            top = tops[1 + r["slot"]] + 2 + order[r["statement"]] * COPY_H
            scene.rect(x, top, w, COPY_H - 1, COLORS["copy"], stroke="#ffffff", stroke_width=1,
                       group="bars", attrs=attrs)
            label = f"#{r['iteration']} {producers[order[r['statement']]]['text']}"
            scene.text(x + 3, top + COPY_H / 2, label if w > 5.2 * len(label) else
                       f"#{r['iteration']}", size=8.5, color="#ffffff", group="bar-labels")
        else:
            scene.rect(x, lanes_top, w, LANE_H, COLORS.get(r["kind"], "#ffffff"),
                       stroke="#ffffff", stroke_width=1, group="bars", attrs=attrs,
                       hatch=r["kind"] == "wait")
            if w >= 22:
                scene.text(x + w / 2, lanes_top + LANE_H / 2, f"#{r['iteration']}", size=9,
                           anchor="middle", color="#222222" if r["kind"] == "wait"
                           else "#ffffff", group="bar-labels")
    axis = lanes_top + height - 2
    scene.line(LEFT, axis, LEFT + end * UNIT, axis, color="#888888", group="grid")
    for t in range(int(end) + 1):
        scene.line(LEFT + t * UNIT, axis, LEFT + t * UNIT, axis + 4, color="#888888",
                   group="grid")
        scene.text(LEFT + t * UNIT, axis + 11, str(t), size=9, anchor="middle",
                   color="#555555", group="grid")
    legend = axis + 26
    x = LEFT
    for label, color, hatch in (("copy (cp.async, in flight)", COLORS["copy"], False),
                                ("compute", COLORS["compute"], False),
                                ("slot being read", COLORS["read"], False),
                                ("waiting for copies", "#fbe3e3", True)):
        scene.rect(x, legend - 6, 14, 12, color, hatch=hatch, group="legend")
        scene.text(x + 18, legend, label, size=10, group="legend")
        x += 40 + 6.2 * len(label)
    return legend + 18


MEASURED_COLORS = {"wait": "#e8a0a0", "issue": "#7fb0e0", "compute": COLORS["compute"]}


def _draw_measured(scene: Scene, y: float, rows: list[dict], width_units: float) -> float:
    """What block 0 did on the GPU: wait, issue and compute per iteration, in nanoseconds;
    a warp-specialized loop on two lanes, its producer's issues and its consumers' work."""
    rows = [r for r in rows if r.get("block", 0) == 0]
    if not rows:
        return y
    total = max(r["end_ns"] for r in rows) or 1
    scale = width_units * UNIT / total  # the measured run fills the plan's width
    roles = sorted({r.get("role", "thread 0") for r in rows}, key=["producer", "consumer",
                                                                    "thread 0"].index)
    who = "thread 0" if roles == ["thread 0"] else "its producer thread and consumer warps"
    scene.text(4, y + 8, f"measured on the GPU (block 0, {who}): {total} ns for "
               f"{1 + max(r['iteration'] for r in rows)} iterations", size=12, bold=True)
    top = y + 20
    for lane, role in enumerate(roles):
        lane_top = top + lane * (LANE_H + 4)
        for r in (r for r in rows if r.get("role", "thread 0") == role):
            x = LEFT + r["start_ns"] * scale
            w = max((r["end_ns"] - r["start_ns"]) * scale, 2.0 if role == "producer" else 0.5)
            scene.rect(x, lane_top, w, LANE_H, MEASURED_COLORS[r["kind"]], stroke="#ffffff",
                       stroke_width=0.5, group="measured",
                       attrs={"data-kind": r["kind"], "data-iteration": r["iteration"],
                              "data-ns": r["end_ns"] - r["start_ns"], "data-role": role})
        label = "block 0" if role == "thread 0" else \
            "producer" if role == "producer" else "consumers"
        scene.text(LEFT - 8, lane_top + LANE_H / 2, label, size=11, anchor="end")
    legend, x = top + len(roles) * (LANE_H + 4) + 14, LEFT
    for label, kind in (("waiting for tiles", "wait"), ("issuing copies", "issue"),
                        ("compute", "compute")):
        scene.rect(x, legend - 6, 14, 12, MEASURED_COLORS[kind], group="legend")
        scene.text(x + 18, legend, label, size=10, group="legend")
        x += 40 + 6.2 * len(label)
    return legend + 18


def _plan_tables(panels) -> str:
    """The plans as tables: every statement's stage and order, slots, async groups, waits."""
    out = []
    for name, plan, _, _ in panels:
        rows = "".join(f"<tr><td>{s['order']}</td><td>{escape(s['text'])}</td>"
                       f"<td>{escape(s['role'])}</td><td>{s['stage']}</td></tr>"
                       for s in sorted(plan["statements"], key=lambda s: s["order"]))
        slots = ", ".join(f"{escape(b)} &#xD7; {n}" for b, n in plan.get("slots", {}).items())
        groups = "; ".join(", ".join(escape(g) for g in group)
                           for group in plan.get("async_groups", []))
        out.append(f'<details><summary>{escape(name + " · " if name else "")}plan of loop '
                   f'{escape(plan["loop"])} (num_stages = {plan["num_stages"]})</summary>'
                   '<table class="tl-table"><tr><th>order</th><th>statement</th><th>role</th>'
                   f'<th>stage</th></tr>{rows}</table><p class="tl-note">slots: {slots}<br>'
                   f'async group: {groups}<br>copies: {escape(plan.get("copies", ""))}<br>'
                   f'waits: {escape(plan.get("waits", ""))}'
                   + "".join(f'<br>{what.replace("_", " ")}: {escape(plan[what])}'
                             for what in ("across_tiles", "rotated") if plan.get(what))
                   + "</p></details>")
    return "".join(out)
