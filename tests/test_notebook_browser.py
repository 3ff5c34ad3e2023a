"""The views' HTML fallbacks as a browser sees them: Debian's headless Chromium.

All views go into one page, each in a `<section>`; Chromium loads it
(JavaScript on, so injected markup that slipped through would run) and dumps
the resulting DOM, which the tests read back: the pass list has one entry
per changed pass, the IR is there as text, the bench chart has its bars, and
a Trace full of markup (kernel, pass and buffer names, IR, code) created no
element and ran no script. Skipped where /usr/bin/chromium is missing
(scripts/setup.sh installs it).
"""

import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.errors import SourceLocation, TileLabError
from tilelab.notebook import BenchView, ErrorView, PassesView, SourceView, diff
from tilelab.trace import PassRecord, Trace

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")

# If any of these ran, the body would carry a data-pwned attribute.
PWN_SCRIPT = "<script>document.body.setAttribute('data-pwned', 'script')</script>"
PWN_IMG = "<img src=x onerror=\"document.body.setAttribute('data-pwned', 'img')\">"


@tilelab.jit
def triple_kernel(X):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as block:
        tile = T.alloc_fragment((64,), T.float32)
        T.copy(X[block * 64], tile)
        for i in T.Parallel(64):
            tile[i] = tile[i] * 3.0
        T.copy(tile, Y[block * 64])
    return Y


def evil_trace() -> Trace:
    return Trace(
        kernel=PWN_IMG, target=PWN_SCRIPT,
        source={"filename": PWN_SCRIPT, "first_line": 1, "text": f"'{PWN_SCRIPT}'\n"},
        program={"buffers": [{"name": PWN_IMG, "scope": "global", "dtype": "f", "shape": [1]}]},
        passes=[PassRecord(PWN_SCRIPT, f"a = '{PWN_IMG}'\n", True, 0.1, "tilelab", "input"),
                PassRecord(PWN_IMG, f"b = '{PWN_SCRIPT}'\n", True, 0.1, PWN_SCRIPT, "pipeline")],
        code={"llvm": PWN_SCRIPT + PWN_IMG}, resources={PWN_IMG: PWN_SCRIPT})


class DomReader(HTMLParser):
    """Every element of the dumped DOM with its attributes, and the text, per <section>."""

    def __init__(self):
        super().__init__()
        self.section = None
        self.elements: dict = {}
        self.text: dict = {}
        self.body_attrs: dict = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.section = attrs["id"]
        if tag == "body":
            self.body_attrs = attrs
        self.elements.setdefault(self.section, []).append((tag, attrs))

    def handle_endtag(self, tag):
        if tag == "section":
            self.section = None

    def handle_data(self, data):
        self.text[self.section] = self.text.get(self.section, "") + data


@pytest.fixture(scope="module")
def dom(tmp_path_factory):
    kernel = triple_kernel.compile(N=1000, target="cpu")
    x = torch.randn(1000)
    torch.testing.assert_close(kernel(x), x * 3)
    error = TileLabError(f"bad {PWN_SCRIPT}", SourceLocation("<tilekernel-3>", 4, 8,
                                                              f"    bad({PWN_IMG})"))
    views = {
        "passes": PassesView(kernel.trace),
        "diff": diff(kernel.trace, 0, -1),
        "source": SourceView(kernel.trace),
        "bench": BenchView("triple_kernel", "CPU", "wall-clock (CPU)", [
            {"name": "triple_kernel", "median_ms": 0.5, "baseline_name": "X * 3",
             "baseline_ms": 1.0, "speedup": 2.0},
            {"name": "X * 3", "median_ms": 1.0, "baseline_name": "X * 3", "baseline_ms": 1.0,
             "speedup": 1.0}]),
        "error": ErrorView(error, "broken"),
        "evil-passes": PassesView(evil_trace(), "all", diff=True),
        "evil-source": SourceView(evil_trace()),
        "evil-bench": BenchView(PWN_IMG, PWN_SCRIPT, PWN_IMG, [
            {"name": PWN_SCRIPT, "median_ms": 1.0, "baseline_name": PWN_IMG,
             "baseline_ms": 1.0, "speedup": 1.0}]),
    }
    sections = "".join(f'<section id="{name}">{view._repr_mimebundle_()["text/html"]}</section>'
                       for name, view in views.items())
    root = tmp_path_factory.mktemp("browser")
    page = root / "views.html"
    page.write_text(f'<!doctype html><html><head><meta charset="utf-8"></head>'
                    f"<body>{sections}</body></html>", encoding="utf-8")
    out = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={root / 'profile'}", "--dump-dom",
         page.as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "<body" in out.stdout, out.stderr[-2000:]
    reader = DomReader()
    reader.feed(out.stdout)
    return reader, kernel.trace


def tags(reader, section, tag, attr=None):
    return [a for t, a in reader.elements[section] if t == tag and (attr is None or attr in a)]


def test_pass_list_has_one_entry_per_changed_pass(dom):
    reader, trace = dom
    changed = [i for i, p in enumerate(trace.passes) if p.changed]
    assert [int(a["data-pass"]) for a in tags(reader, "passes", "details", "data-pass")] == changed
    assert [int(a["data-pass"]) for a in tags(reader, "passes", "tr", "data-pass")] == changed
    # the table links to each pass's collapsed entry
    targets = {a["href"][1:] for a in tags(reader, "passes", "a", "href")}
    assert {a["id"] for a in tags(reader, "passes", "details", "data-pass")} <= targets


def test_ir_and_code_are_there_as_text(dom):
    reader, trace = dom
    for p in trace.passes:
        if p.changed:
            assert p.ir.splitlines()[-1].strip() in reader.text["passes"]
    assert "tilelab.FrontEnd" in reader.text["diff"]
    assert len(tags(reader, "diff", "table")) == 1  # the side-by-side diff
    assert "define" in reader.text["source"]


def test_bench_chart_and_error_caret(dom):
    reader, _ = dom
    assert len(tags(reader, "bench", "rect")) == 2
    assert "triple_kernel" in reader.text["bench"]
    assert "cell line 4" in reader.text["error"]
    assert "    bad(" in reader.text["error"] and "        ^" in reader.text["error"]


def test_injected_markup_stays_text(dom):
    reader, _ = dom
    assert "data-pwned" not in reader.body_attrs
    for section, elements in reader.elements.items():
        for tag, attrs in elements:
            assert tag not in ("script", "img", "iframe"), (section, tag)
            assert not any(name.startswith("on") for name in attrs), (section, tag, attrs)
    for section in ("evil-passes", "evil-source", "evil-bench", "error"):
        assert "<script>document.body" in reader.text[section] or \
            "<img src=x onerror" in reader.text[section], section
