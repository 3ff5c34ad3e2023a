"""What every view hands to a notebook: one mime bundle from one payload.

A view is a slice of a Trace (its *payload*, see docs/MIME.md) plus two ways
to read it: an HTML fragment that needs no JavaScript and a line or two of
plain text. `_repr_mimebundle_` returns all three, the payload wrapped with its
version and kernel name as `application/vnd.tilelab.<view>+json`, which the
JupyterLab extension renders (also from a saved notebook). The notebook layer
(passes, source, bench, check, error) and the pictures of `tilelab.viz`
(layouts, bank conflicts, pipeline, dataflow) share this base.
"""

from __future__ import annotations

from functools import cached_property

MIME_VERSION = 1


class View:
    """Subclasses set `view` and `kernel` and give `payload`, `html` and `text`."""

    view = ""  # the <view> of application/vnd.tilelab.<view>+json
    kernel = ""

    def payload(self) -> dict:
        raise NotImplementedError

    def html(self) -> str:
        raise NotImplementedError

    def text(self) -> str:
        raise NotImplementedError

    @property
    def mime_type(self) -> str:
        return f"application/vnd.tilelab.{self.view}+json"

    @cached_property
    def data(self) -> dict:
        """The mime payload: version, kernel name and the view's slice of the Trace."""
        return {"version": MIME_VERSION, "kernel": self.kernel, **self.payload()}

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {self.mime_type: self.data, "text/html": self.html(),
                  "text/plain": self.text()}
        return {k: v for k, v in bundle.items()
                if (not include or k in include) and not (exclude and k in exclude)}

    def __repr__(self) -> str:
        return self.text()

    def show(self) -> None:
        """Display in IPython; outside IPython, print the text."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            print(self.text())
            return
        if get_ipython() is not None:
            display(self)
        else:
            print(self.text())
