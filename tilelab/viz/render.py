"""HTML building blocks for the views: escaping, highlighting, diffs, tables, bar charts.

Every fragment here is self-contained: inline `style` attributes only (no
`<style>` sheet, no classes a page must define, no JavaScript), so it reads the
same in JupyterLab, nbconvert HTML, VS Code and GitHub. Every piece of text that
comes from a user or the compiler goes through `escape` (or through pygments
and difflib, which escape it themselves) before it becomes markup.
"""

from __future__ import annotations

import difflib
import html
import re
from functools import lru_cache

FONT = "font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; font-size: 13px;"
MONO = "font-family: SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px;"
BOX = f"{FONT} border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 10px; margin: 4px 0;"
SCROLL = "max-height: 480px; overflow: auto; border: 1px solid #eaeef2; margin: 4px 0;"
CELL = "padding: 2px 8px; border-bottom: 1px solid #eaeef2; text-align: left;"
MUTED = "color: #57606a;"

LEXERS = {"tir": "python", "python": "python", "cuda": "cuda", "ptx": "ptx", "llvm": "llvm",
          "sass": "text", "diff": "diff"}


def number(value, digits: int = 4) -> str:
    """A measured value with `digits` significant digits; empty when there is none."""
    return "" if value is None else f"{value:.{digits}g}"


def escape(value) -> str:
    """Text as HTML text (quotes too, so it is safe inside attributes)."""
    return html.escape(str(value), quote=True)


@lru_cache(maxsize=512)
def highlight(code: str, language: str) -> str:
    """`code` syntax-highlighted by pygments with inline styles, in a scrolling box.

    Cached: a warm notebook cell shows the same IR again, and highlighting is the
    slowest part of drawing a view.
    """
    from pygments import highlight as pygments_highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name

    lexer = get_lexer_by_name(LEXERS.get(language, "text"), stripnl=False)
    body = pygments_highlight(code, lexer, HtmlFormatter(noclasses=True, style="default"))
    return f'<div style="{SCROLL}">{body}</div>'


def preformatted(text: str) -> str:
    return f'<pre style="{MONO} margin: 0; padding: 4px; white-space: pre;">{escape(text)}</pre>'


_DIFF_LINE_STYLES = (("+++", "font-weight: bold;"), ("---", "font-weight: bold;"),
                     ("@@", "color: #0550ae; background: #ddf4ff;"),
                     ("+", "background: #dafbe1;"), ("-", "background: #ffebe9;"))


def diff_text(before: str, after: str, before_name: str, after_name: str) -> str:
    """The unified diff of two texts, line by line (whether or not they end in a newline)."""
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), before_name,
                                          after_name, lineterm=""))


def unified_diff(diff_text: str) -> str:
    """A unified diff with added lines green and removed lines red."""
    if not diff_text:
        return f'<div style="{MUTED}">(no difference)</div>'
    lines = []
    for line in diff_text.splitlines():
        style = next((s for prefix, s in _DIFF_LINE_STYLES if line.startswith(prefix)), "")
        lines.append(f'<span style="display: block; {style}">{escape(line) or " "}</span>')
    return (f'<div style="{SCROLL}"><pre style="{MONO} margin: 0; padding: 4px;">'
            f'{"".join(lines)}</pre></div>')


# difflib.HtmlDiff marks cells with classes its own style sheet defines; we inline them.
_HTMLDIFF_STYLES = {
    'class="diff"': f'style="{MONO} border-collapse: collapse;"',
    'class="diff_header"': 'style="background: #f6f8fa; color: #57606a; text-align: right; '
                           'padding: 0 4px;"',
    'class="diff_next"': 'style="background: #f6f8fa;"',
    'class="diff_add"': 'style="background: #aceebb;"',
    'class="diff_chg"': 'style="background: #fff1a8;"',
    'class="diff_sub"': 'style="background: #ffcecb;"',
}
_HTMLDIFF_CLASS = re.compile("|".join(re.escape(k) for k in _HTMLDIFF_STYLES))


def side_by_side_diff(before: str, after: str, before_name: str, after_name: str) -> str:
    """Two columns, changed lines aligned (difflib.HtmlDiff, which escapes the text)."""
    table = difflib.HtmlDiff(tabsize=4).make_table(
        before.splitlines(), after.splitlines(), escape(before_name), escape(after_name),
        context=True, numlines=3)
    table = _HTMLDIFF_CLASS.sub(lambda m: _HTMLDIFF_STYLES[m.group(0)], table)
    return f'<div style="{SCROLL}">{table}</div>'


def table(header: list[str], rows: list[list], attrs: list[str] | None = None) -> str:
    """An HTML table; cells are escaped unless wrapped in `Markup`."""
    head = "".join(f'<th style="{CELL} background: #f6f8fa;">{escape(h)}</th>' for h in header)
    body = []
    for i, row in enumerate(rows):
        extra = f" {attrs[i]}" if attrs else ""
        cells = "".join(f'<td style="{CELL}">{cell if isinstance(cell, Markup) else escape(cell)}'
                        "</td>" for cell in row)
        body.append(f"<tr{extra}>{cells}</tr>")
    return (f'<table style="{FONT} border-collapse: collapse; margin: 4px 0;">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


class Markup(str):
    """A string that is already HTML (built here from escaped parts)."""


def bar_chart(bars: list[tuple[str, float]], unit: str = "ms", width: int = 520) -> str:
    """Horizontal bars as inline SVG: one (label, value) per bar, longest = slowest."""
    label_width, bar_height, gap = 180, 22, 6
    top = max((value for _, value in bars), default=0.0) or 1.0
    span = width - label_width - 90
    height = len(bars) * (bar_height + gap) + gap
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" style="{FONT}">']
    colors = ("#0969da", "#8c959f")
    for i, (label, value) in enumerate(bars):
        y = gap + i * (bar_height + gap)
        length = max(value / top * span, 1.0)
        parts.append(
            f'<text x="{label_width - 6}" y="{y + 15}" text-anchor="end" font-size="12">'
            f"{escape(label[:28])}</text>"
            f'<rect x="{label_width}" y="{y}" width="{length:.1f}" height="{bar_height}" '
            f'fill="{colors[min(i, 1)]}"/>'
            f'<text x="{label_width + length + 6:.1f}" y="{y + 15}" font-size="12">'
            f"{value:.4g} {escape(unit)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def box(title_html: str, body_html: str, border: str = "#d0d7de", attrs: str = "") -> str:
    """The frame every view is drawn in: a title line and the body."""
    return (f'<div {attrs} style="{BOX} border-color: {border};">'
            f'<div style="font-weight: 600; margin-bottom: 4px;">{title_html}</div>'
            f"{body_html}</div>")
