"""Display objects: what every view hands to a notebook, a script or a file.

A view is a slice of a Trace (its *payload*, see docs/MIME.md), a static
picture (a `Scene`), and optionally a small script that makes the picture
interactive. From those three a `View` produces:

* `_repr_mimebundle_`: `application/vnd.tilelab.<view>+json` (the payload,
  for the JupyterLab extension), `text/html` and `text/plain`;
* the HTML: self-contained (inline SVG and CSS), readable without JavaScript;
  the script only adds hover, pickers and controls that are hidden until it
  runs. The script finds its own view through `document.currentScript`, so the
  same view can appear twice on a page; its data travels in a
  `<script type="application/json">` block with `<`, `>` and `&` escaped, so
  no text from a kernel can close it;
* `.save(path)`: `.svg`, `.png` (matplotlib), `.html` (a whole document) or
  `.json` (the payload); `.show()` displays in IPython or opens a browser.
"""

from __future__ import annotations

import json
import os
import tempfile
import webbrowser
from pathlib import Path

from ..display import View as DisplayView
from .scene import Scene, escape

CSS = """
.tilelab-view { position: relative; font-family: DejaVu Sans, Helvetica, Arial, sans-serif;
  font-size: 13px; color: #222; margin: 4px 0; }
.tilelab-view .tl-title { font-weight: bold; font-size: 14px; margin-bottom: 4px; }
.tilelab-view .tl-note { color: #555; margin: 2px 0 6px 0; max-width: 60em; }
.tilelab-view .tl-scroll { overflow: auto; max-width: 100%; }
.tilelab-view table.tl-table { border-collapse: collapse; margin: 6px 0; }
.tilelab-view table.tl-table td, .tilelab-view table.tl-table th {
  border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
.tilelab-view table.tl-table th { background: #f3f3f3; }
.tilelab-view .tl-bad { color: #b52b27; font-weight: bold; }
.tilelab-view .tl-good { color: #2b7a2b; font-weight: bold; }
.tilelab-view .tl-controls { margin: 4px 0; }
.tilelab-view .tl-controls button { margin-right: 4px; }
.tilelab-view .tl-status { font-family: DejaVu Sans Mono, Menlo, monospace; font-size: 12px;
  white-space: pre-wrap; margin: 4px 0; min-height: 1.2em; }
.tilelab-view .tl-tip { position: absolute; pointer-events: none; background: #222; color: #fff;
  padding: 3px 6px; border-radius: 3px; font-size: 12px; white-space: pre; z-index: 10; }
.tilelab-view pre.tl-pre { background: #f6f6f6; padding: 6px; overflow: auto; max-height: 30em; }
.tilelab-view .tl-panels { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
"""


def json_for_script(data) -> str:
    """JSON that is safe inside a <script> element, whatever strings it holds."""
    return (json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))


class View(DisplayView):
    """A view with a picture: subclasses give `view`, `payload`, `scene`, `title`, `text`."""

    script = ""  # JavaScript run as `function (root, data)`; empty for a static view

    def __init__(self, kernel: str):
        self.kernel = kernel

    # -- what subclasses provide

    def scene(self) -> Scene:
        raise NotImplementedError

    def title(self) -> str:
        raise NotImplementedError

    def body_html(self) -> str:
        """The view's HTML below the title; by default its picture."""
        return f'<div class="tl-scroll">{self.svg()}</div>'

    def script_data(self):
        """What the script gets as `data` (by default the mime payload)."""
        return self.data

    # -- derived

    def svg(self) -> str:
        return self.scene().to_svg()

    def png(self) -> bytes:
        return self.scene().to_png()

    def html(self) -> str:
        """A self-contained HTML fragment (what the notebook shows without the extension)."""
        parts = [f'<div class="tilelab-view tl-view-{self.view}">', f"<style>{CSS}</style>",
                 f'<div class="tl-title">{escape(self.title())}</div>', self.body_html()]
        if self.script:
            parts.append(f'<script type="application/json" class="tl-data">'
                         f"{json_for_script(self.script_data())}</script>")
            parts.append("<script>(function (root) {\nvar data = JSON.parse("
                         "root.querySelector(':scope > .tl-data').textContent);\n"
                         f"{self.script}\n}})(document.currentScript.parentElement);</script>")
        parts.append("</div>")
        return "\n".join(parts)

    def html_document(self) -> str:
        return ('<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
                f"<title>{escape(self.title())}</title></head>\n<body>\n{self.html()}\n"
                "</body></html>\n")

    def save(self, path) -> Path:
        """Write the view to `path`: .svg, .png, .html or .json, by its suffix."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".svg":
            path.write_text(self.svg(), encoding="utf-8")
        elif suffix == ".png":
            path.write_bytes(self.png())
        elif suffix in (".html", ".htm"):
            path.write_text(self.html_document(), encoding="utf-8")
        elif suffix == ".json":
            path.write_text(json.dumps(self.data, indent=1), encoding="utf-8")
        else:
            raise ValueError(f"cannot save a {self.view} view as {path.name!r}: "
                             "the suffix must be .svg, .png, .html or .json")
        return path

    def show(self) -> None:
        """Display in IPython; elsewhere open the HTML in a browser."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            get_ipython = None
        if get_ipython is not None and get_ipython() is not None:
            display(self)
            return
        handle, name = tempfile.mkstemp(prefix=f"tilelab-{self.view}-", suffix=".html")
        os.close(handle)
        webbrowser.open(self.save(name).resolve().as_uri())


def trace_field(trace, name: str, default=None):
    """A Trace's field, from a Trace object or from its dict (Trace.to_dict / JSON)."""
    if isinstance(trace, dict):
        return trace.get(name, default)
    return getattr(trace, name, default)
