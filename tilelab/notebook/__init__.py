"""tilelab in a notebook: the `%%tilekernel` magic, display objects and the pass explorer.

`%load_ext tilelab` registers the magics (`magics.py`). The views
(`views.py`) turn a Trace into mime bundles: tilelab's JSON for the
JupyterLab extension, a self-contained HTML fallback, and plain text. They
work from plain Python too::

    from tilelab.notebook import passes_view, diff
    passes_view(kernel.trace).show()
    diff(kernel.trace, "tilelab.FrontEnd", "tirx.FlattenBuffer").show()

`PassExplorer` (`explorer.py`) is the same explorer with ipywidgets controls.
"""

from __future__ import annotations

from .views import (  # noqa: F401
    AutotuneView,
    BenchView,
    CheckView,
    ErrorView,
    JsonView,
    PassDiffView,
    PassesView,
    SourceView,
    diff,
    passes_view,
    source_views,
)


def load_ipython_extension(ipython) -> None:
    """Register %%tilekernel and %tilelab (`%load_ext tilelab`)."""
    from .magics import TileLabMagics

    ipython.register_magics(TileLabMagics)


def unload_ipython_extension(ipython) -> None:
    """Remove the magics again (`%unload_ext tilelab`)."""
    manager = ipython.magics_manager
    manager.magics["cell"].pop("tilekernel", None)
    manager.magics["line"].pop("tilelab", None)
    manager.registry.pop("TileLabMagics", None)


def __getattr__(name):
    if name == "PassExplorer":  # imports ipywidgets, so only when asked for
        from .explorer import PassExplorer

        return PassExplorer
    raise AttributeError(f"module 'tilelab.notebook' has no attribute {name!r}")
