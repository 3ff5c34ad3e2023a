"""The kernel as a dataflow graph: buffers and the tile ops that move data between them.

A tile kernel moves data down the memory hierarchy and back: global memory
-> shared tiles -> register fragments -> global memory. The graph shows that
path from the Trace's program summary (`passes/summarize.py`): every buffer is a
box colored by its memory scope, every tile op an ellipse, with an edge from
each buffer an op reads and to each buffer it writes (a double-headed edge
when it does both, as a GEMM does with its accumulator). Ops inside a loop
sit in a cluster for it; a `T.Pipelined` loop's cluster names its stages,
and a shared tile that lives only inside the loop sits there with its number
of slots. The graph is graphviz DOT text; graphviz's `dot` program draws it.
Without `dot` the view shows the DOT text and how to install graphviz.
"""

from __future__ import annotations

import shutil
import subprocess

from .scene import escape
from .view import View, trace_field

SCOPE_COLORS = {"global": "#cfe2f3", "shared": "#d9ead3", "local.fragment": "#fce5cd",
                "local.var": "#fff2cc"}
SCOPE_NAMES = {"global": "global memory", "shared": "shared memory",
               "local.fragment": "registers (fragment)", "local.var": "registers (scalar)"}
INSTALL_HINT = ("apt-get install graphviz (Debian, Ubuntu), brew install graphviz (macOS) or "
                "conda install graphviz")


def _scope(scope: str) -> str:
    return "shared" if scope.startswith("shared") else scope


def _quote(text: str) -> str:
    """A DOT string literal; newlines become DOT's line breaks, nothing else is special."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _op_label(op: dict, producer: bool) -> str:
    name, cfg = op["op"], op.get("config", {})
    if name == "parallel":
        return "T.Parallel " + "×".join(str(e) for e in cfg.get("extents", []))
    if name == "reduce":
        split = {"own": ", each thread's registers", "across": ", across threads"}.get(
            cfg.get("split"), "")
        return f"reduce_{cfg.get('kind', '')} (dim {cfg.get('dim', '?')}{split})"
    if name == "gemm":
        flags = [f"transpose_{x}" for x in "AB" if cfg.get(f"transpose_{x}")]
        return "gemm" + (f" ({', '.join(flags)})" if flags else "")
    if name == "copy" and producer:
        return "copy (async, runs ahead)"
    return name


def dataflow_graph(program: dict, plans: list | None = None) -> dict:
    """`{dot, nodes, edges}` of a program summary (and the pipeline plans, for slot counts)."""
    loops = {loop["var"]: loop for loop in program.get("loops", [])}
    slots = {name: n for plan in plans or [] for name, n in plan.get("slots", {}).items()}
    buffers = {b["name"]: b for b in program.get("buffers", [])}
    ops = program.get("ops", [])
    nodes, edges = [], []
    buffer_ids: dict[str, str] = {}
    where: dict[str, tuple] = {}  # node id -> the loop path (outer to inner) it sits in

    def add_buffer(name: str) -> str:
        if name not in buffer_ids:
            info = buffers.get(name, {"name": name, "scope": "", "dtype": "", "shape": []})
            buffer_ids[name] = f"b{len(buffer_ids)}"
            label = f"{name}\n{info['dtype']}{list(info['shape'])}"
            if name in slots:
                label += f" × {slots[name]} slots"
            nodes.append({"id": buffer_ids[name], "label": label, "kind": "buffer",
                          "scope": info["scope"]})
        return buffer_ids[name]

    paths: dict[str, list[tuple]] = {}  # buffer -> loop paths of the ops touching it
    for i, op in enumerate(ops):
        path = tuple(op.get("loops", []))
        # a pipelined loop's copies from global into shared memory run ahead (cp.async)
        producer = op["op"] == "copy" and bool(path) and \
            loops.get(path[-1], {}).get("kind") == "pipelined" and \
            [_scope(buffers.get(b, {}).get("scope", "")) for b in op["reads"] + op["writes"]] \
            == ["global", "shared"]
        op_id = f"o{i}"
        nodes.append({"id": op_id, "label": _op_label(op, producer), "kind": "op", "scope": ""})
        where[op_id] = path
        for name in dict.fromkeys(op["reads"] + op["writes"]):
            paths.setdefault(name, []).append(path)
            both = name in op["reads"] and name in op["writes"]
            if name in op["writes"]:
                edges.append({"from": op_id, "to": add_buffer(name), **({"both": True}
                                                                        if both else {})})
            else:
                edges.append({"from": add_buffer(name), "to": op_id})
    for name, node_id in buffer_ids.items():
        scope = buffers.get(name, {}).get("scope", "global")
        where[node_id] = () if scope == "global" else _common_prefix(paths[name])
    return {"dot": _dot(nodes, edges, where, loops), "nodes": nodes,
            "edges": [{"from": e["from"], "to": e["to"]} for e in edges]}


def dataflow_dot(program: dict, plans: list | None = None) -> str:
    """The DOT text of the dataflow graph of a program summary (`trace.program`)."""
    return dataflow_graph(program, plans)["dot"]


def _common_prefix(paths: list[tuple]) -> tuple:
    prefix = paths[0]
    for path in paths[1:]:
        n = 0
        while n < min(len(prefix), len(path)) and prefix[n] == path[n]:
            n += 1
        prefix = prefix[:n]
    return prefix


def _dot(nodes, edges, where, loops) -> str:
    lines = ["digraph dataflow {", "  rankdir=LR;",
             '  graph [fontname="Helvetica", fontsize=11, labelloc=b, label='
             + _quote("box: buffer (blue: global, green: shared, orange: registers); "
                      "ellipse: tile op") + "];",
             '  node [fontname="Helvetica", fontsize=11];',
             '  edge [color="#555555"];']
    by_id = {n["id"]: n for n in nodes}
    clusters = sorted({path[:k] for path in where.values() for k in range(1, len(path) + 1)},
                      key=lambda p: (len(p), p))

    def node_line(node_id, indent):
        node = by_id[node_id]
        if node["kind"] == "buffer":
            color = SCOPE_COLORS.get(_scope(node["scope"]), "#eeeeee")
            style = f'shape=box, style="rounded,filled", fillcolor="{color}"'
        else:
            style = 'shape=ellipse, style=filled, fillcolor="#ffffff"'
        return f"{indent}{node_id} [label={_quote(node['label'])}, {style}];"

    def emit(path, indent):
        for node_id, node_path in where.items():
            if node_path == path:
                lines.append(node_line(node_id, indent))
        for child in clusters:
            if len(child) == len(path) + 1 and child[:len(path)] == path:
                loop = loops.get(child[-1], {})
                if loop.get("kind") == "pipelined":
                    label = (f"T.Pipelined over {child[-1]}, num_stages = "
                             f"{loop.get('num_stages')}")
                    fill = "#f3ecfa"
                else:
                    label, fill = f"for {child[-1]}", "#f6f6f6"
                lines.append(f"{indent}subgraph cluster_{clusters.index(child)} {{")
                lines.append(f'{indent}  label={_quote(label)}; style="rounded,filled"; '
                             f'fillcolor="{fill}"; color="#999999";')
                emit(child, indent + "  ")
                lines.append(f"{indent}}}")

    emit((), "  ")
    for e in edges:
        extra = " [dir=both]" if e.get("both") else ""
        lines.append(f"  {e['from']} -> {e['to']}{extra};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_dot(dot: str, fmt: str) -> bytes:
    """Run graphviz's `dot` (raises FileNotFoundError with the install hint when missing)."""
    program = shutil.which("dot")
    if program is None:
        raise FileNotFoundError(f"graphviz's `dot` program is not installed: {INSTALL_HINT}")
    return subprocess.run([program, f"-T{fmt}"], input=dot.encode(), capture_output=True,
                          check=True, timeout=60).stdout


def dataflow_view(trace) -> DataflowView:
    """The dataflow graph of a compiled kernel's Trace."""
    graph = dataflow_graph(trace_field(trace, "program") or {},
                           trace_field(trace, "pipelines") or [])
    return DataflowView(trace_field(trace, "kernel", ""), graph)


class DataflowView(View):
    """Payload `{dot, nodes, edges}` (docs/MIME.md), drawn by graphviz when it is installed."""

    view = "dataflow"

    def __init__(self, kernel: str, graph: dict):
        super().__init__(kernel)
        self.graph = graph

    def payload(self) -> dict:
        return dict(self.graph)

    def title(self) -> str:
        return f"Dataflow of {self.kernel or 'the kernel'}: global → shared → registers → global"

    def text(self) -> str:
        kinds = [n["kind"] for n in self.graph["nodes"]]
        return (f"{self.kernel + ': ' if self.kernel else ''}dataflow graph, "
                f"{kinds.count('buffer')} buffers, {kinds.count('op')} tile ops "
                f"(DOT text in .data['dot'])")

    def svg(self) -> str:
        text = render_dot(self.graph["dot"], "svg").decode("utf-8")
        return text[text.index("<svg"):]  # without the XML prolog and doctype

    def png(self) -> bytes:
        return render_dot(self.graph["dot"], "png")

    def body_html(self) -> str:
        if shutil.which("dot") is not None:
            return f'<div class="tl-scroll">{self.svg()}</div>'
        return ('<p class="tl-note">graphviz\'s <code>dot</code> program was not found, so '
                "here is the graph as DOT text. To see it drawn, install graphviz: "
                f"{escape(INSTALL_HINT)}.</p>"
                f'<pre class="tl-pre">{escape(self.graph["dot"])}</pre>')
