"""PassExplorer: the pass explorer as ipywidgets controls, for a live kernel.

A pass selector, a diff toggle (IR / unified diff / side by side, against the
previous pass or any other), and a search box that jumps to the first pass
that changed a buffer or variable. Everything it shows comes from the Trace it
was built from; nothing is compiled again. Its mime bundle carries the
widget plus the static PassesView, so a notebook saved without widget state
still shows the passes.
"""

from __future__ import annotations

import ipywidgets as widgets

from ..viz.render import MUTED, escape, highlight, side_by_side_diff, unified_diff
from .views import PassesView, _trace_of, first_change_index, pass_diff, select_passes

_MODES = [("IR", "ir"), ("diff", "unified"), ("side by side", "side")]
_PREVIOUS = -1  # "against the previous pass" in the comparison selector


class PassExplorer:
    """Interactive pass explorer over a Trace; `.widget` is the ipywidgets box."""

    def __init__(self, trace, which: str = "changed", diff: bool = False):
        self.trace = _trace_of(trace)
        self.which = which
        self.show_all = widgets.Checkbox(value=which == "all", description="show no-op passes",
                                         indent=False)
        self.pass_selector = widgets.Dropdown(description="pass")
        self.mode = widgets.ToggleButtons(options=_MODES, value="unified" if diff else "ir")
        self.compare_with = widgets.Dropdown(description="against")
        self.search = widgets.Text(placeholder="buffer or variable", description="find",
                                   continuous_update=False)
        self.status = widgets.HTML()
        self.view = widgets.HTML()
        self._fill_selectors()
        self.show_all.observe(lambda _: self._fill_selectors(), "value")
        for control in (self.pass_selector, self.mode, self.compare_with):
            control.observe(lambda _: self._render(), "value")
        self.search.observe(lambda change: self.find(change["new"]), "value")
        self.widget = widgets.VBox([
            widgets.HBox([self.pass_selector, self.show_all]),
            widgets.HBox([self.mode, self.compare_with]),
            widgets.HBox([self.search, self.status]),
            self.view,
        ])
        self._render()

    def _options(self) -> list[tuple[str, int]]:
        shown = select_passes(self.trace, "all" if self.show_all.value else "changed")
        return [(f"#{i} {self.trace.passes[i].name} ({self.trace.passes[i].owner}, "
                 f"{self.trace.passes[i].duration_ms:.2f} ms)", i) for i in shown]

    def _fill_selectors(self) -> None:
        current = self.pass_selector.value
        options = self._options()
        self.pass_selector.options = options
        self.compare_with.options = [("previous pass", _PREVIOUS)] + options
        if current in [i for _, i in options]:
            self.pass_selector.value = current
        self._render()

    def select(self, index: int) -> None:
        """Show the pass at `index` (showing no-op passes if it is one)."""
        if index not in [i for _, i in self.pass_selector.options]:
            self.show_all.value = True
        self.pass_selector.value = index

    def find(self, name: str) -> int | None:
        """Jump to the first pass that changed the lines mentioning `name`."""
        name = name.strip()
        if not name:
            self.status.value = ""
            return None
        index = first_change_index(self.trace, name)
        if index is None:
            self.status.value = f'<span style="{MUTED}">no pass changes {escape(name)}</span>'
            return None
        self.select(index)
        self.mode.value = "unified"
        self.status.value = (f"{escape(name)}: first changed by "
                             f"<code>#{index} {escape(self.trace.passes[index].name)}</code>")
        return index

    def _render(self) -> None:
        index = self.pass_selector.value
        if index is None:
            self.view.value = ""
            return
        passes = self.trace.passes
        if self.mode.value == "ir":
            self.view.value = highlight(passes[index].ir, "tir")
            return
        other = index - 1 if self.compare_with.value in (_PREVIOUS, None) else \
            self.compare_with.value
        if other < 0:
            self.view.value = f'<span style="{MUTED}">the first pass has nothing before it</span>'
            return
        if self.mode.value == "unified":
            self.view.value = unified_diff(pass_diff(self.trace, other, index))
        else:
            self.view.value = side_by_side_diff(passes[other].ir, passes[index].ir,
                                                f"#{other} {passes[other].name}",
                                                f"#{index} {passes[index].name}")

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = PassesView(self.trace, self.which)._repr_mimebundle_(include, exclude)
        widget = self.widget._repr_mimebundle_(include=include, exclude=exclude) or {}
        bundle.update({k: v for k, v in widget.items() if k != "text/plain"})
        return bundle

    def show(self) -> None:
        from IPython.display import display

        display(self)
