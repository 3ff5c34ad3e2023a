"""Layouts and fragments as pictures: who holds each element of a tile, and where.

A fragment tile (a GEMM accumulator, an mma operand) is spread over the
threads of a block: element (i, j) lives in register R of thread T. The
picture draws the tile as a grid, one cell per element, colored by the owning
thread - hue by lane (0..31), shade by warp - with thick lines at warp
boundaries, and labels each cell `T{thread}:R{register}` while cells are big
enough to read. For a 128x128 tile the labels go; colors, warp lines and the
legend stay, and hovering (in the HTML view) tells the rest. A replicated
fragment keeps k copies of each element on k threads: the cell names the
first owner and shows `×k`. Highlighting a thread or a warp greys out every
element it does not hold: the per-thread view.

A shared-memory layout maps elements to addresses instead. Its picture colors
each element by its memory bank (32 banks of 4 bytes) and labels it with its
offset; thin lines mark the 16-byte chunks. A swizzle (the chunks of each row
permuted by an XOR with the row number) shows as a column of one color
turning into a staircase of different colors - different banks.

`layout_tables` turns any Layout, Fragment or their JSON into the tables of
the `layout` mime payload (thread/local, or offsets/banks); the pictures draw
from those tables only, so the notebook extension and these figures show the
same data.
"""

from __future__ import annotations

import math
import re
from functools import cached_property

import numpy as np

from ..ir.layout import Fragment, Layout
from .scene import Scene, hsl
from .view import View, trace_field

GREY = "#e4e4e4"
# (lightness, saturation) of each warp's colors; hue is the lane.
WARP_SHADES = [(0.70, 0.80), (0.56, 0.55), (0.82, 0.70), (0.62, 0.35),
               (0.74, 0.50), (0.58, 0.85), (0.86, 0.55), (0.66, 0.25)]
WARP_COLORS = ["#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69",
               "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f", "#a6cee3"]


def thread_color(thread: int) -> str:
    lightness, saturation = WARP_SHADES[(thread // 32) % len(WARP_SHADES)]
    return hsl((thread % 32) / 32, saturation, lightness)


def warp_color(warp: int) -> str:
    return WARP_COLORS[warp % len(WARP_COLORS)]


def bank_color(bank: int) -> str:
    return hsl(bank / 32, 0.62, 0.74)


def dtype_bits(dtype: str) -> int:
    """Bits of an element: float16 -> 16, bfloat16 -> 16, float8_e4m3fn -> 8, bool -> 8."""
    found = re.match(r"[a-z]+?(\d+)", str(dtype))
    return int(found.group(1)) if found else 8


def describe_recipe(recipe: dict) -> str:
    """accumulator(m=128, n=128, warps=[2, 2]) from a layout's recipe."""
    params = ", ".join(f"{k}={describe_recipe(v) if isinstance(v, dict) else v}"
                       for k, v in recipe.items() if k != "kind")
    return f"{recipe.get('kind', 'custom')}({params})"


# ---------------------------------------------------------------- tables


def layout_tables(layout, bits: int | None = None) -> dict:
    """The `layout` of the mime payload: recipe plus tables, from any layout or its JSON.

    Fragments give `thread[rep][...index]` and `local[rep][...index]`; memory
    layouts give `offsets[...index]` (in elements) and `banks[...index]`, for
    elements of `bits` bits (else the recipe's `dtype_bits`, else 16).
    """
    if isinstance(layout, Fragment):
        return layout.to_json()
    if isinstance(layout, dict) and layout.get("kind") == "fragment":
        if "thread" in layout:
            return {k: v for k, v in layout.items() if k != "scope"}
        return Fragment.from_json(layout).to_json()
    if isinstance(layout, dict):  # a memory layout's JSON: offsets included, or a recipe
        recipe = layout
        offsets = np.asarray(layout["offsets"]) if "offsets" in layout else \
            Layout.from_json(layout).table()
    else:
        recipe, offsets = layout.recipe, layout.table()
    bits = bits or recipe.get("dtype_bits") or 16
    return {"kind": recipe.get("kind", "custom"), "shape": list(recipe.get("shape",
                                                                        offsets.shape)),
            "dtype_bits": bits, "offsets": offsets.tolist(),
            "banks": ((offsets * bits // 32) % 32).tolist()}


def grid_shape(shape) -> tuple[int, int]:
    """Rows and columns of the picture: the last dimension across, the others down."""
    shape = [int(s) for s in shape]
    if len(shape) == 1:
        return 1, shape[0]
    return math.prod(shape[:-1]), shape[-1]


class LayoutGrid:
    """The tables of one layout, as (rows, cols) arrays for drawing."""

    def __init__(self, tables: dict):
        self.tables = tables
        self.rows, self.cols = grid_shape(tables["shape"])
        self.is_fragment = tables["kind"] == "fragment"
        if self.is_fragment:
            rep = tables["replicate"]
            self.thread = np.asarray(tables["thread"]).reshape(rep, self.rows, self.cols)
            self.local = np.asarray(tables["local"]).reshape(rep, self.rows, self.cols)
        else:
            self.offsets = np.asarray(tables["offsets"]).reshape(self.rows, self.cols)
            self.banks = np.asarray(tables["banks"]).reshape(self.rows, self.cols)

    def held(self, thread=None, warp=None, bank=None):
        """Cells the highlighted thread or warp holds, or that lie in the bank (None: none)."""
        if self.is_fragment and thread is not None:
            return (self.thread == thread).any(axis=0)
        if self.is_fragment and warp is not None:
            return (self.thread // 32 == warp).any(axis=0)
        if not self.is_fragment and bank is not None:
            return self.banks == bank
        return None

    def cell_label(self, r: int, c: int, thread=None) -> list[str]:
        """Text lines of a cell: T{t}:R{r} (and ×k for k copies), or offset and bank."""
        if not self.is_fragment:
            return [str(self.offsets[r, c]), f"b{self.banks[r, c]}"]
        copy = 0
        if thread is not None:
            copy = int(np.argmax(self.thread[:, r, c] == thread))
        lines = [f"T{self.thread[copy, r, c]}:R{self.local[copy, r, c]}"]
        if self.thread.shape[0] > 1:
            lines.append(f"×{self.thread.shape[0]}")
        return lines


def _cell_size(rows: int, cols: int):
    """(width, height, font size) of a cell; font size 0 means no labels."""
    if cols <= 16 and rows <= 32:
        return 54, 30, 9.5
    if cols <= 32 and rows <= 48:
        return 36, 20, 7.5
    side = max(3, min(22, 768 // max(rows, cols)))
    return side, side, 0


def layout_scene(grid: LayoutGrid, title: str, thread=None, warp=None, bank=None,
                 color_by: str = "thread"):
    """The picture of a layout (titled unless `title` is empty), and the grid's geometry."""
    rows, cols = grid.rows, grid.cols
    cw, ch, font = _cell_size(rows, cols)
    x0, y0 = 40, 44 if title else 22
    width, height = cols * cw, rows * ch
    scene = Scene(max(x0 + width + 12, 560), 0)
    if title:
        scene.text(4, 12, title, size=13, bold=True)

    held = grid.held(thread, warp, bank)
    if grid.is_fragment:
        owner = grid.thread[0]
        group = {"warp": 32, "warpgroup": 128}.get(color_by)  # threads one color covers
        palette = {t: (warp_color(t // group) if group else thread_color(t))
                   for t in np.unique(owner).tolist()}
        colors = [[palette[t] for t in row] for row in owner.tolist()]
    else:
        colors = [[bank_color(b) for b in row] for row in grid.banks.tolist()]
    if held is not None:
        colors = [[color if keep else GREY for color, keep in zip(row, keep_row)]
                  for row, keep_row in zip(colors, held.tolist())]

    if font:  # one rectangle per cell, white gaps between cells
        for r in range(rows):
            for c in range(cols):
                scene.rect(x0 + c * cw, y0 + r * ch, cw, ch, colors[r][c], stroke="#ffffff",
                           stroke_width=1, group="cells")
    else:  # small cells: one pixel each, stretched
        scene.image(x0, y0, width, height, colors, group="cells")

    if not grid.is_fragment:
        per_chunk = 128 // grid.tables["dtype_bits"]
        for c in range(per_chunk, cols, per_chunk):
            scene.line(x0 + c * cw, y0, x0 + c * cw, y0 + height, color="#666666", width=0.8,
                       group="chunks")
    if grid.is_fragment and grid.tables["threads"] > 32:
        _warp_lines(scene, grid.thread[0] // 32, x0, y0, cw, ch)
    if grid.is_fragment and grid.tables["threads"] > 128:  # warpgroups: wgmma's unit
        _warp_lines(scene, grid.thread[0] // 128, x0, y0, cw, ch, color="#d62728", width=3.5)

    if font:
        for r in range(rows):
            for c in range(cols):
                if held is not None and not held[r, c]:
                    continue
                lines = grid.cell_label(r, c, thread)
                for k, text in enumerate(lines):
                    dy = (k - (len(lines) - 1) / 2) * (font + 2)
                    scene.text(x0 + (c + 0.5) * cw, y0 + (r + 0.5) * ch + dy, text, size=font,
                               anchor="middle", color="#111111", group="labels")

    step = 1 if font else (8 if max(rows, cols) <= 64 else 16)
    for c in range(0, cols, step):
        scene.text(x0 + (c + 0.5) * cw, y0 - 9, str(c), size=9, anchor="middle",
                   color="#555555", group="axes")
    for r in range(0, rows, step):
        scene.text(x0 - 5, y0 + (r + 0.5) * ch, str(r), size=9, anchor="end",
                   color="#555555", group="axes")

    y = _legend(scene, grid, x0, y0 + height + 18, thread, warp, bank, held, color_by)
    scene.height = y + 6
    return scene, {"x0": x0, "y0": y0, "cw": cw, "ch": ch, "rows": rows, "cols": cols}


def _warp_lines(scene: Scene, warps: np.ndarray, x0, y0, cw, ch, color="#111111",
                width=2.5) -> None:
    """Thick lines between cells of different warps (or warpgroups; around the tile too)."""
    rows, cols = warps.shape
    padded = np.full((rows + 2, cols + 2), -1)
    padded[1:-1, 1:-1] = warps
    vertical = padded[1:-1, 1:] != padded[1:-1, :-1]  # edge left of column c (0..cols)
    horizontal = padded[1:, 1:-1] != padded[:-1, 1:-1]  # edge above row r (0..rows)
    for c in range(cols + 1):
        for start, end in _runs(vertical[:, c]):
            scene.line(x0 + c * cw, y0 + start * ch, x0 + c * cw, y0 + end * ch,
                       color=color, width=width, group="warps")
    for r in range(rows + 1):
        for start, end in _runs(horizontal[r, :]):
            scene.line(x0 + start * cw, y0 + r * ch, x0 + end * cw, y0 + r * ch,
                       color=color, width=width, group="warps")


def _runs(flags) -> list[tuple[int, int]]:
    """(start, end) of every run of True values in a 1-d boolean array, end exclusive."""
    runs, start = [], None
    for i, flag in enumerate(flags):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(flags)))
    return runs


def _legend(scene: Scene, grid: LayoutGrid, x, y, thread, warp, bank, held, color_by) -> float:
    """Color keys and notes under the grid; returns the y below them."""
    notes = []
    if grid.is_fragment:
        threads = grid.tables["threads"]
        if color_by in ("warp", "warpgroup"):
            size = 32 if color_by == "warp" else 128
            scene.text(x, y, f"{color_by}s:", size=10, group="legend")
            for w in range(min(-(-threads // size), 16)):
                scene.rect(x + 72 + w * 40, y - 6, 12, 12, warp_color(w), group="legend")
                scene.text(x + 87 + w * 40, y, str(w), size=10, group="legend")
        else:
            scene.text(x, y, "lanes 0-31:", size=10, group="legend")
            for lane in range(32):
                scene.rect(x + 70 + lane * 7, y - 6, 7, 12, thread_color(lane), group="legend")
            if threads > 32:
                y += 18
                scene.text(x, y, "warp shades:", size=10, group="legend")
                for w in range(min(threads // 32, 8)):  # each warp's lanes 0, 4, ..., 28
                    for k in range(8):
                        scene.rect(x + 78 + w * 60 + k * 4, y - 6, 4, 12,
                                   thread_color(w * 32 + 4 * k), group="legend")
                    scene.text(x + 112 + w * 60, y, f"w{w}", size=10, group="legend")
        notes.append(f"T5:R3 = thread 5, register 3 · {threads} threads × "
                     f"{grid.tables['local_size']} registers")
        if threads > 32:
            notes.append("thick lines: warp boundaries" + (
                "; red: warpgroup boundaries (4 warps, the unit of wgmma)" if threads > 128
                else ""))
        if grid.thread.shape[0] > 1:
            notes.append(f"×{grid.thread.shape[0]}: every element is held by "
                         f"{grid.thread.shape[0]} threads (the first is named)")
    else:
        scene.text(x, y, "banks 0-31:", size=10, group="legend")
        for b in range(32):
            scene.rect(x + 70 + b * 7, y - 6, 7, 12, bank_color(b), group="legend")
        notes.append(f"label: offset in elements / bank (4-byte banks) · "
                     f"{grid.tables['dtype_bits']}-bit elements · grey lines: 16-byte chunks")
    if held is not None:
        what = (f"thread {thread}" if thread is not None else
                f"warp {warp}" if warp is not None else f"bank {bank}")
        notes.append(f"highlighted: {what} ({int(held.sum())} elements)")
    for note in notes:
        y += 16
        scene.text(x, y, note, size=10, color="#444444", group="legend")
    return y + 8


# ---------------------------------------------------------------- public functions


def fragment_figure(layout, thread=None, warp=None, bank=None, color_by: str = "thread",
                    title: str | None = None, bits: int | None = None):
    """A matplotlib Figure of a Fragment or Layout (or their JSON).

    `thread` / `warp` (fragments) or `bank` (memory layouts) highlight what
    that thread or warp holds, or which elements share the bank.
    """
    tables = layout_tables(layout, bits)
    scene, _ = layout_scene(LayoutGrid(tables), title or _default_title(tables), thread, warp,
                            bank, color_by)
    return scene.to_figure()


def layout_svg(layout, thread=None, warp=None, bank=None, color_by: str = "thread",
               title: str | None = None, bits: int | None = None) -> str:
    """The same picture as `fragment_figure`, as SVG text."""
    tables = layout_tables(layout, bits)
    scene, _ = layout_scene(LayoutGrid(tables), title or _default_title(tables), thread, warp,
                            bank, color_by)
    return scene.to_svg()


def _default_title(tables: dict) -> str:
    if tables["kind"] == "fragment":
        return f"{describe_recipe(tables['recipe'])}: shape {tables['shape']}"
    return f"{tables['kind']} layout, shape {tables['shape']}"


_SCOPE_WORDS = {"global": "global memory", "shared": "shared memory",
                "shared.dyn": "shared memory", "local.fragment": "registers (fragment)",
                "local.var": "registers", "local": "registers"}


def buffer_info(trace, buffer: str) -> dict:
    """A buffer's entry (name, scope, dtype, shape) in the trace's program summary."""
    for info in (trace_field(trace, "program") or {}).get("buffers", []):
        if info["name"] == buffer:
            return info
    return {"name": buffer, "scope": "", "dtype": "", "shape": []}


def layout_view(trace, buffer: str | None = None, thread=None, warp=None, bank=None,
                color_by: str = "thread") -> LayoutView:
    """The layout of `buffer` in a compiled kernel's Trace, as a display object.

    `trace` may also be a Fragment, a Layout or their JSON, to look at one
    directly (`buffer` then only names it).
    """
    if isinstance(trace, (Fragment, Layout)) or (isinstance(trace, dict) and "kind" in trace):
        tables = layout_tables(trace)
        scope = "local.fragment" if tables["kind"] == "fragment" else "shared"
        return LayoutView("", buffer or "tile", scope, "", tables, thread, warp, bank, color_by)
    from ..errors import TileLabError

    layouts = trace_field(trace, "layouts") or {}
    info = buffer_info(trace, buffer)
    if buffer in layouts:
        layout = layouts[buffer]
    elif info["scope"] in ("global", "shared", "shared.dyn") and \
            all(isinstance(s, int) for s in info["shape"]):
        layout = Layout.row_major(info["shape"])
    else:
        known = ", ".join(sorted(layouts)) or "none"
        why = ("the compiler recorded no layout for this fragment (layouts are inferred for "
               "the GPU; see the trace's warnings)" if info["scope"] == "local.fragment"
               else "there is no such buffer in this kernel")
        raise TileLabError(f"no layout to show for {buffer!r}: {why}",
                           hint=f"buffers with layouts: {known}")
    tables = layout_tables(layout, dtype_bits(info["dtype"]) if info["dtype"] else None)
    return LayoutView(trace_field(trace, "kernel", ""), buffer, info["scope"], info["dtype"],
                      tables, thread, warp, bank, color_by)


class LayoutView(View):
    """A buffer's layout: payload `{buffer, scope, dtype, layout}` (docs/MIME.md)."""

    view = "layout"

    def __init__(self, kernel, buffer, scope, dtype, tables, thread=None, warp=None, bank=None,
                 color_by="thread"):
        super().__init__(kernel)
        self.buffer, self.scope, self.dtype, self.tables = buffer, scope, dtype, tables
        self.highlight = {"thread": thread, "warp": warp, "bank": bank}
        self.color_by = color_by
        self.grid = LayoutGrid(tables)

    def payload(self) -> dict:
        return {"buffer": self.buffer, "scope": self.scope, "dtype": self.dtype,
                "layout": self.tables}

    def title(self) -> str:
        where = _SCOPE_WORDS.get(self.scope, self.scope or "a tile")
        dtype = f"{self.dtype} " if self.dtype else ""
        what = describe_recipe(self.tables["recipe"]) if self.grid.is_fragment \
            else f"{self.tables['kind']} layout"
        return f"{self.buffer}: {dtype}{self.tables['shape']} in {where}, {what}"

    def text(self) -> str:
        t = self.tables
        if self.grid.is_fragment:
            detail = (f"{t['threads']} threads x {t['local_size']} registers, "
                      f"{t['replicate']} cop{'y' if t['replicate'] == 1 else 'ies'} per element")
        else:
            detail = f"{t['dtype_bits']}-bit elements, 32 banks of 4 bytes"
        return f"{self.kernel + ': ' if self.kernel else ''}{self.title()} ({detail})"

    def scene(self) -> Scene:
        return layout_scene(self.grid, self.title(), color_by=self.color_by,
                            **self.highlight)[0]

    def script_data(self):
        return {"layout": self.tables, "geometry": self._untitled[1]}

    @cached_property
    def _untitled(self):
        """The picture inside the HTML, where the title is already above it."""
        return layout_scene(self.grid, "", color_by=self.color_by, **self.highlight)

    def body_html(self) -> str:
        if self.grid.is_fragment:
            modes = [("thread", "thread"), ("warp", "warp")]
        else:
            modes = [("bank", "bank")]
        chosen = next((k for k, v in self.highlight.items() if v is not None), "")
        value = self.highlight.get(chosen) or 0
        options = '<option value="">nothing</option>' + "".join(
            f'<option value="{k}"{" selected" if k == chosen else ""}>{label}</option>'
            for k, label in modes)
        return (
            '<div class="tl-controls" hidden>highlight '
            f'<select class="tl-mode">{options}</select> '
            f'<input class="tl-pick" type="number" min="0" value="{int(value)}" '
            'style="width: 5em"> <span class="tl-note">hover a cell for its details; '
            'click one to highlight its owner</span></div>'
            f'<div class="tl-scroll">{self._untitled[0].to_svg()}</div>'
            '<div class="tl-status"></div><div class="tl-tip" hidden></div>')

    script = r"""
var g = data.geometry, L = data.layout, rows = g.rows, cols = g.cols, n = rows * cols;
var frag = L.kind === 'fragment', reps = frag ? L.replicate : 1;
var svg = root.querySelector('svg'), tip = root.querySelector('.tl-tip');
var status = root.querySelector('.tl-status');
var mode = root.querySelector('.tl-mode'), pick = root.querySelector('.tl-pick');
root.querySelector('.tl-controls').hidden = false;
var NS = 'http://www.w3.org/2000/svg';
var overlay = document.createElementNS(NS, 'g');
overlay.setAttribute('class', 'tl-overlay');
var cells = svg.querySelector('.tl-cells');
svg.insertBefore(overlay, cells.nextSibling);
var thread = frag ? L.thread.flat(Infinity) : null, local = frag ? L.local.flat(Infinity) : null;
var offsets = frag ? null : L.offsets.flat(Infinity), banks = frag ? null : L.banks.flat(Infinity);

function index(i) {
  var idx = [];
  for (var d = L.shape.length - 1; d >= 0; d--) {
    idx.unshift(i % L.shape[d]);
    i = Math.floor(i / L.shape[d]);
  }
  return '[' + idx.join(', ') + ']';
}
function who(t) { return 'thread ' + t + ' (warp ' + (t >> 5) + ', lane ' + (t & 31) + ')'; }
function describe(i) {
  var lines = ['element ' + index(i)];
  if (!frag) {
    var bytes = offsets[i] * L.dtype_bits / 8;
    lines.push('offset ' + offsets[i] + ' elements = byte ' + bytes);
    lines.push('bank ' + banks[i] + ' (bank group ' + (Math.floor(bytes / 16) % 8) + ')');
    return lines.join('\n');
  }
  for (var k = 0; k < Math.min(reps, 8); k++)
    lines.push(who(thread[k * n + i]) + ', register R' + local[k * n + i]);
  if (reps > 8) lines.push('... ' + reps + ' copies in all');
  return lines.join('\n');
}
function cellAt(e) {
  var m = svg.getScreenCTM();
  if (!m) return -1;
  var p = svg.createSVGPoint();
  p.x = e.clientX; p.y = e.clientY;
  p = p.matrixTransform(m.inverse());
  var c = Math.floor((p.x - g.x0) / g.cw), r = Math.floor((p.y - g.y0) / g.ch);
  return (r >= 0 && r < rows && c >= 0 && c < cols) ? r * cols + c : -1;
}
function matches(i, m, v) {
  if (!frag) return banks[i] === v;
  for (var k = 0; k < reps; k++) {
    var t = thread[k * n + i];
    if (m === 'thread' ? t === v : (t >> 5) === v) return true;
  }
  return false;
}
function summary(m, v, held) {
  if (m === 'warp') {
    return 'warp ' + v + ' (threads ' + 32 * v + '-' + (32 * v + 31) + ') holds ' +
      held.length + ' elements';
  }
  if (m === 'bank') return 'bank ' + v + ': ' + held.length + ' elements';
  var regs = [];
  held.forEach(function (i) {
    for (var k = 0; k < reps; k++) if (thread[k * n + i] === v) regs.push([local[k * n + i], i]);
  });
  regs.sort(function (a, b) { return a[0] - b[0]; });
  return who(v) + ' holds ' + regs.length + ' elements: ' + regs.slice(0, 32).map(function (p) {
    return 'R' + p[0] + '=' + index(p[1]);
  }).join(' ') + (regs.length > 32 ? ' ...' : '');
}
function highlight() {
  while (overlay.firstChild) overlay.removeChild(overlay.firstChild);
  var m = mode.value, v = parseInt(pick.value, 10), held = [];
  if (m && !isNaN(v)) {
    for (var i = 0; i < n; i++) {
      if (!matches(i, m, v)) continue;
      held.push(i);
      var r = document.createElementNS(NS, 'rect');
      r.setAttribute('x', g.x0 + (i % cols) * g.cw);
      r.setAttribute('y', g.y0 + Math.floor(i / cols) * g.ch);
      r.setAttribute('width', g.cw);
      r.setAttribute('height', g.ch);
      r.setAttribute('fill', '#ffd400');
      r.setAttribute('fill-opacity', '0.8');
      r.setAttribute('stroke', '#000');
      r.setAttribute('stroke-width', '1');
      overlay.appendChild(r);
    }
  }
  root.setAttribute('data-highlighted', String(held.length));
  status.textContent = (m && !isNaN(v)) ? summary(m, v, held) : '';
}
svg.addEventListener('mousemove', function (e) {
  var i = cellAt(e);
  if (i < 0) { tip.hidden = true; return; }
  tip.textContent = describe(i);
  tip.hidden = false;
  var box = root.getBoundingClientRect();
  tip.style.left = (e.clientX - box.left + 14) + 'px';
  tip.style.top = (e.clientY - box.top + 14) + 'px';
  root.setAttribute('data-hover', String(i));
});
svg.addEventListener('mouseleave', function () { tip.hidden = true; });
svg.addEventListener('click', function (e) {
  var i = cellAt(e);
  if (i < 0) return;
  mode.value = frag ? 'thread' : 'bank';
  pick.value = frag ? thread[i] : banks[i];
  highlight();
});
mode.addEventListener('change', highlight);
pick.addEventListener('input', highlight);
highlight();
"""
