"""Views of a compiled kernel: pure functions from Trace data to pictures and pages.

Each view takes a `Trace` (or its dict) and returns a display object (see
`view.py`) that a notebook shows through `_repr_mimebundle_` - the slice of
the Trace as `application/vnd.tilelab.<view>+json` (docs/MIME.md), an HTML
page that reads without JavaScript, and a line of text - and that `.show()`s
and `.save()`s itself as SVG, PNG, HTML or JSON:

* `layout_view(trace, buffer)` - who holds each element of a fragment
  (thread, register, warp) or where each element of a shared tile lives
  (offset, bank); `layouts.py`.
* `bank_conflict_view(trace, buffer)` - the conflict degree of every warp
  instruction that touches a shared tile, row-major vs swizzled; `banks.py`.
* `pipeline_view(trace, iterations, compare)` - the software pipeline
  replayed: copies and compute per iteration, stage and slot; `pipeline.py`.
* `dataflow_view(trace)` - buffers and tile ops as a graph; `dataflow.py`.

The functions underneath work on plain data too: `fragment_figure` and
`layout_svg` draw any Layout or Fragment, `bank_conflicts` scores an access
on a layout, `pipeline_timeline` replays one plan, `chrome_trace` exports a
timeline for Perfetto, `dataflow_dot` writes the graph as DOT text.
"""

from .banks import bank_conflict_view, bank_conflicts, conflict_degree, shared_accesses
from .dataflow import dataflow_dot, dataflow_view
from .layouts import fragment_figure, layout_svg, layout_tables, layout_view
from .pipeline import chrome_trace, pipeline_timeline, pipeline_view

__all__ = [
    "bank_conflict_view", "bank_conflicts", "chrome_trace", "conflict_degree", "dataflow_dot",
    "dataflow_view", "fragment_figure", "layout_svg", "layout_tables", "layout_view",
    "pipeline_timeline", "pipeline_view", "shared_accesses",
]
