"""The interactive HTML views, exercised in headless Chromium.

No DevTools protocol: each test saves a view as an HTML page, appends a small
script that plays the user (dispatches mouse events, changes a picker, clicks
buttons) and writes what it observed as JSON into a `<pre id="results">`,
then reads that back from `chromium --dump-dom`.
"""

import html
import json
import re
import shutil
import subprocess

import pytest

from tilelab.ir.layout import Fragment
from tilelab.viz import layout_view, pipeline_view

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                       "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs headless Chromium")


def run_in_chromium(view, script: str, tmp_path) -> dict:
    """Load the view's page plus `script` (which fills `results`) and return `results`."""
    page = view.html_document().replace(
        "</body>", "<pre id=\"results\"></pre><script>\nvar results = {};\n"
        f"try {{\n{script}\n}} catch (e) {{ results.error = String(e); }}\n"
        "document.getElementById('results').textContent = JSON.stringify(results);\n"
        "</script></body>")
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    dom = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,2000",
         "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=60).stdout
    found = re.search(r'<pre id="results">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    results = json.loads(html.unescape(found.group(1)))
    assert "error" not in results, results["error"]
    return results


# Helpers the test scripts share: the view's root and a mouse event at a cell's center.
CELL_EVENTS = """
var root = document.querySelector('.tilelab-view');
var svg = root.querySelector('svg');
var g = JSON.parse(root.querySelector('.tl-data').textContent).geometry;
function mouse(type, r, c) {
  var p = svg.createSVGPoint();
  p.x = g.x0 + (c + 0.5) * g.cw; p.y = g.y0 + (r + 0.5) * g.ch;
  p = p.matrixTransform(svg.getScreenCTM());
  svg.dispatchEvent(new MouseEvent(type, {clientX: p.x, clientY: p.y, bubbles: true}));
}
function pick(mode, value) {
  root.querySelector('.tl-mode').value = mode;
  var input = root.querySelector('.tl-pick');
  input.value = value;
  input.dispatchEvent(new Event('input'));
}
"""


def test_layout_hover_and_pickers(tmp_path):
    view = layout_view(Fragment.mma_a(), "a_tile")
    results = run_in_chromium(view, CELL_EVENTS + """
results.controlsShown = !root.querySelector('.tl-controls').hidden;
mouse('mousemove', 9, 10);
results.tip = root.querySelector('.tl-tip').textContent;
results.tipShown = !root.querySelector('.tl-tip').hidden;
pick('thread', 5);
results.thread5 = root.getAttribute('data-highlighted');
results.status = root.querySelector('.tl-status').textContent;
pick('warp', 0);
results.warp0 = root.getAttribute('data-highlighted');
mouse('click', 15, 15);
results.clicked = [root.querySelector('.tl-mode').value, root.querySelector('.tl-pick').value,
                   root.getAttribute('data-highlighted')];
results.overlay = root.querySelectorAll('.tl-overlay rect').length;
""", tmp_path)
    assert results["controlsShown"] and results["tipShown"]
    # element (9, 10) of the A operand is register a6 of lane 5 (PTX ISA m16n8k16)
    assert "element [9, 10]" in results["tip"]
    assert "thread 5 (warp 0, lane 5), register R6" in results["tip"]
    assert results["thread5"] == "8" and results["warp0"] == "256"
    assert results["status"].startswith("thread 5 (warp 0, lane 5) holds 8 elements: R0=[1, 2]")
    assert results["clicked"] == ["thread", "31", "8"] and results["overlay"] == 8


def test_big_fragment_and_shared_layout(tmp_path):
    view = layout_view(Fragment.accumulator(128, 128, 2, 2), "c")
    results = run_in_chromium(view, CELL_EVENTS + """
mouse('mousemove', 127, 127);
results.tip = root.querySelector('.tl-tip').textContent;
pick('warp', 1);
results.warp1 = root.getAttribute('data-highlighted');
""", tmp_path)
    assert "thread 127 (warp 3, lane 31), register R127" in results["tip"]
    assert results["warp1"] == str(128 * 128 // 4)

    from tilelab.ir.layout import Layout

    view = layout_view(Layout.swizzled((128, 32), 16), "a_shared")
    results = run_in_chromium(view, CELL_EVENTS + """
mouse('mousemove', 2, 0);
results.tip = root.querySelector('.tl-tip').textContent;
mouse('click', 2, 0);
results.bank = [root.querySelector('.tl-mode').value, root.querySelector('.tl-pick').value,
                root.getAttribute('data-highlighted')];
""", tmp_path)
    # row 2, column 0 is moved to chunk 1 of its row: offset 2*32 + 8 = 72, byte 144, bank 4
    assert "offset 72 elements = byte 144" in results["tip"] and "bank 4" in results["tip"]
    assert results["bank"][:2] == ["bank", "4"]
    assert int(results["bank"][2]) == 128 * 32 // 32  # 2-byte elements: 128 per bank


def test_pipeline_play_and_step(tmp_path):
    three = {"loop": "k", "num_stages": 3, "extent": 8, "slots": {"a_s": 3},
             "async_groups": [["copy(A, a_s)"]], "waits": "",
             "statements": [{"text": "copy(A, a_s)", "stage": 0, "order": 0, "role": "copy"},
                            {"text": "gemm(a_s)", "stage": 2, "order": 1, "role": "compute"}]}
    two = dict(three, num_stages=2, slots={"a_s": 2},
               statements=[dict(three["statements"][0]), dict(three["statements"][1], stage=1)])
    view = pipeline_view(three, iterations=8, compare=two)
    results = run_in_chromium(view, """
var root = document.querySelector('.tilelab-view');
function press(name) { root.querySelector('.tl-' + name).click(); }
function state() {
  return {t: root.getAttribute('data-time'), active: root.getAttribute('data-active'),
          status: root.querySelector('.tl-status').textContent};
}
results.start = state();
press('reset'); results.reset = state();
press('step'); results.step = state();
press('step'); results.step2 = state();
press('back'); results.back = state();
press('play'); results.playing = root.querySelector('.tl-play').textContent;
press('play'); results.paused = root.querySelector('.tl-play').textContent;
var faded = 0;
root.querySelectorAll('svg [data-start]').forEach(function (b) {
  if (b.getAttribute('opacity') === '0.2') faded++;
});
results.faded = faded;
results.cursor = root.querySelector('svg .tl-cursor').getAttribute('x1');
""", tmp_path)
    assert results["start"]["t"] == "17" and results["start"]["status"].count("done") == 2
    reset = results["reset"]
    assert reset["t"] == "0"
    assert "waiting for the copies of #0 (slot 0)" in reset["status"]
    assert "copies of #1 -> slot 1 in flight" in reset["status"]  # 3 stages: two ahead
    assert results["step"]["t"] == "2"
    assert "computing #0 on slot 0 (gemm(a_s))" in results["step"]["status"]
    assert "copies of #2 -> slot 2 in flight" in results["step"]["status"]
    assert results["step2"]["t"] == "3" and results["back"]["t"] == "2"
    assert "pause" in results["playing"] and "play" in results["paused"]
    assert results["faded"] > 10  # at t = 2 most bars have not started yet
    assert float(results["cursor"]) > 200
