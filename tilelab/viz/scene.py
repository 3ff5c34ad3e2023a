"""A tiny drawing model: rectangles, text and lines in pixel coordinates.

Every static picture of `tilelab.viz` is built once as a `Scene` and then
written out twice: as SVG text (inline in the HTML views and `.save("x.svg")`;
each item sits in a `<g class="tl-GROUP">` so that the views' small scripts
can find cells and bars), and as a matplotlib Figure (`.save("x.png")`). One
picture, two writers: the PNG never drifts from the SVG.

All text is data: the SVG writer escapes it and matplotlib draws it with
math parsing off, so a `$` or a `<` in a buffer name shows as itself.
"""

from __future__ import annotations

import colorsys
import html
from dataclasses import dataclass, field


def escape(text) -> str:
    """Text for HTML/SVG content and attribute values."""
    return html.escape(str(text), quote=True)


def hsl(hue: float, saturation: float, lightness: float) -> str:
    """'#rrggbb' of a color given as hue (0..1, wraps), saturation and lightness (0..1)."""
    r, g, b = colorsys.hls_to_rgb(hue % 1.0, lightness, saturation)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


@dataclass
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    stroke: str | None = None
    stroke_width: float = 0.0
    group: str = "shapes"
    attrs: dict | None = None  # extra SVG attributes (data-* for scripts)
    hatch: bool = False  # drawn striped (a stall)


@dataclass
class Text:
    x: float
    y: float
    text: str
    size: float = 11.0
    anchor: str = "start"  # "start", "middle" or "end"
    color: str = "#222222"
    group: str = "labels"
    bold: bool = False


@dataclass
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    color: str = "#222222"
    width: float = 1.0
    group: str = "lines"


@dataclass
class Image:
    """A grid of colored cells drawn as one pixel each, stretched: big tiles stay small files."""

    x: float
    y: float
    w: float
    h: float
    colors: list  # rows of '#rrggbb'
    group: str = "cells"

    def pixels(self):
        import numpy as np

        table = {c: [int(c[i:i + 2], 16) for i in (1, 3, 5)] for row in self.colors for c in row}
        return np.array([[table[c] for c in row] for row in self.colors], dtype=np.uint8)

    def png(self) -> bytes:
        import io

        from matplotlib.image import imsave

        buffer = io.BytesIO()
        imsave(buffer, self.pixels(), format="png")
        return buffer.getvalue()


@dataclass
class Scene:
    width: float
    height: float
    items: list = field(default_factory=list)

    def rect(self, *args, **kwargs) -> Rect:
        item = Rect(*args, **kwargs)
        self.items.append(item)
        return item

    def text(self, *args, **kwargs) -> Text:
        item = Text(*args, **kwargs)
        self.items.append(item)
        return item

    def line(self, *args, **kwargs) -> Line:
        item = Line(*args, **kwargs)
        self.items.append(item)
        return item

    def image(self, *args, **kwargs) -> Image:
        item = Image(*args, **kwargs)
        self.items.append(item)
        return item

    # ------------------------------------------------------------ SVG

    def to_svg(self, css_class: str = "tl-svg") -> str:
        """The scene as one `<svg>` element; items grouped by their `group`, in first-use order."""
        groups: dict[str, list[str]] = {}
        for item in self.items:
            groups.setdefault(item.group, []).append(_svg_item(item))
        w, h = _num(self.width), _num(self.height)
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(css_class)}" '
                 f'width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                 'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">']
        if any(isinstance(i, Rect) and i.hatch for i in self.items):
            parts.append('<defs><pattern id="tl-hatch" width="6" height="6" '
                         'patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
                         '<rect width="6" height="6" fill="#fbe3e3"/>'
                         '<line x1="0" y1="0" x2="0" y2="6" stroke="#d9534f" stroke-width="2"/>'
                         '</pattern></defs>')
        for name, items in groups.items():
            parts.append(f'<g class="tl-{escape(name)}">')
            parts.extend(items)
            parts.append("</g>")
        parts.append("</svg>")
        return "\n".join(parts)

    # ------------------------------------------------------------ matplotlib

    def to_figure(self, dpi: int = 100):
        """The scene as a matplotlib Figure (no pyplot: no global state, any backend)."""
        from matplotlib.collections import LineCollection, PatchCollection
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle

        fig = Figure(figsize=(self.width / dpi, self.height / dpi), dpi=dpi)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, self.width)
        ax.set_ylim(self.height, 0)
        ax.axis("off")
        points = 72.0 / dpi  # font sizes are given in pixels
        for im in (i for i in self.items if isinstance(i, Image)):
            ax.imshow(im.pixels(), extent=(im.x, im.x + im.w, im.y + im.h, im.y),
                      interpolation="nearest", aspect="auto")
        rects = [i for i in self.items if isinstance(i, Rect)]
        if rects:
            patches = [Rectangle((r.x, r.y), r.w, r.h) for r in rects]
            ax.add_collection(PatchCollection(
                patches, facecolors=[_mpl_fill(r) for r in rects],
                edgecolors=[r.stroke or "none" for r in rects],
                linewidths=[r.stroke_width * points for r in rects]))
            for r in rects:
                if r.hatch:
                    ax.add_patch(Rectangle((r.x, r.y), r.w, r.h, fill=False, hatch="///",
                                           edgecolor="#d9534f", linewidth=0))
        lines = [i for i in self.items if isinstance(i, Line)]
        if lines:
            ax.add_collection(LineCollection(
                [((ln.x1, ln.y1), (ln.x2, ln.y2)) for ln in lines],
                colors=[ln.color for ln in lines],
                linewidths=[ln.width * points for ln in lines]))
        for t in (i for i in self.items if isinstance(i, Text)):
            ax.text(t.x, t.y, t.text, fontsize=t.size * points, color=t.color,
                    ha={"start": "left", "middle": "center", "end": "right"}[t.anchor],
                    va="center", fontweight="bold" if t.bold else "normal", parse_math=False)
        return fig

    def to_png(self, dpi: int = 100) -> bytes:
        import io

        buffer = io.BytesIO()
        self.to_figure(dpi).savefig(buffer, format="png", dpi=dpi)
        return buffer.getvalue()


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _mpl_fill(rect: Rect) -> str:
    return "#fbe3e3" if rect.hatch else rect.fill


def _svg_item(item) -> str:
    if isinstance(item, Image):
        import base64

        data = base64.b64encode(item.png()).decode("ascii")
        return (f'<image x="{_num(item.x)}" y="{_num(item.y)}" width="{_num(item.w)}" '
                f'height="{_num(item.h)}" preserveAspectRatio="none" '
                f'style="image-rendering: pixelated" href="data:image/png;base64,{data}"/>')
    if isinstance(item, Rect):
        fill = "url(#tl-hatch)" if item.hatch else escape(item.fill)
        extra = f' stroke="{escape(item.stroke)}" stroke-width="{_num(item.stroke_width)}"' \
            if item.stroke else ""
        for key, value in (item.attrs or {}).items():
            extra += f' {escape(key)}="{escape(value)}"'
        return (f'<rect x="{_num(item.x)}" y="{_num(item.y)}" width="{_num(item.w)}" '
                f'height="{_num(item.h)}" fill="{fill}"{extra}/>')
    if isinstance(item, Text):
        weight = ' font-weight="bold"' if item.bold else ""
        return (f'<text x="{_num(item.x)}" y="{_num(item.y)}" font-size="{_num(item.size)}" '
                f'text-anchor="{item.anchor}" dominant-baseline="central" '
                f'fill="{escape(item.color)}"{weight}>{escape(item.text)}</text>')
    return (f'<line x1="{_num(item.x1)}" y1="{_num(item.y1)}" x2="{_num(item.x2)}" '
            f'y2="{_num(item.y2)}" stroke="{escape(item.color)}" '
            f'stroke-width="{_num(item.width)}"/>')
