"""tilelab.viz: golden data (owners, conflict degrees, pipeline stages), exports, escaping.

The pictures are checked only for being produced; what they show is checked
as data: the tables a view draws from and the numbers it reports.
"""

import json
import shutil

import pytest

from tilelab.ir.layout import Fragment, Layout
from tilelab.trace import Trace
from tilelab.viz import (
    bank_conflict_view,
    bank_conflicts,
    chrome_trace,
    conflict_degree,
    dataflow_dot,
    dataflow_view,
    fragment_figure,
    layout_svg,
    layout_tables,
    layout_view,
    pipeline_timeline,
    pipeline_view,
    shared_accesses,
)

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz's dot is missing")


def test_shared_layout_tables_give_offsets_and_banks():
    tables = layout_tables(Layout.swizzled((128, 32), 16))
    assert tables["kind"] == "swizzled" and tables["dtype_bits"] == 16
    # row 2 is the second 128-byte line: key 1 swaps chunks 0 and 1
    assert tables["offsets"][2][0] == 2 * 32 + 8
    assert tables["banks"][2][0] == (2 * 32 + 8) * 2 // 4 % 32
    row_major = layout_tables({"kind": "row_major", "shape": [4, 64]}, bits=32)
    assert row_major["banks"][1][3] == (64 + 3) % 32


# ---------------------------------------------------------------- bank conflicts


def column_read(rows=128):
    """ldmatrix-style reads of an fp16 128x32 tile: 8 lanes read 8 consecutive rows, same chunk.

    lane l of instruction k addresses row 16k + l % 16, column (l // 16) * 8.
    """
    return {"name": "column read", "instruction": "ldmatrix.x4", "lane_bytes": 16,
            "element_bytes": 2,
            "instructions": [[[16 * k + lane % 16, lane // 16 * 8] for lane in range(32)]
                             for k in range(rows // 16)]}


def test_unswizzled_column_read_is_a_4_way_conflict():
    # A row is 32 fp16 = 64 bytes, so (row r, chunk c) is at byte 64r + 16c, in bank
    # group (4r + c) % 8 (8 groups of 16 bytes = 4 banks). Eight consecutive rows at one
    # chunk fall in groups c, c+4, c, c+4, ...: two groups, each asked for 4 different
    # addresses -> every phase is a 4-way conflict.
    degrees = bank_conflicts({"kind": "row_major", "shape": [128, 32]}, column_read())
    assert degrees == [4] * 8
    # The swizzle XORs chunk c with (r // 2) % 4: rows 0..7 land in 8 different groups.
    degrees = bank_conflicts(Layout.swizzled((128, 32), 16).to_json(), column_read())
    assert degrees == [1] * 8


def test_conflict_degree_counts_different_words_per_bank():
    assert conflict_degree([16 * i for i in range(32)], 16) == 1  # 4 phases of 128 bytes
    assert conflict_degree([0] * 32, 16) == 1  # one address: a broadcast
    assert conflict_degree([128 * i for i in range(8)], 16) == 8  # 8 lines, same group
    assert conflict_degree([4 * i for i in range(32)], 4) == 1
    assert conflict_degree([8 * i for i in range(32)], 4) == 2  # stride 2 words: 2-way
    assert conflict_degree([2 * i for i in range(32)], 2) == 1  # two halves of one word


@pytest.fixture(scope="module")
def gemm_traces():
    from examples.gemm import gemm_kernel

    return {stages: gemm_kernel.compile(M=256, N=256, K=256, num_stages=stages,
                                        target="cpu").trace for stages in (2, 3)}


def test_a_part_of_a_fragment_is_replayed_in_the_tiles_coordinates():
    """The persistent GEMM stores its accumulators in parts of 128 columns through one
    128-column tile (`c_fragment[0:block_m, part * width:(part + 1) * width]`): the copy's
    record names the region, and the view replays a part's stores onto the tile."""
    import torch

    from examples.persistent_gemm import persistent_gemm_kernel

    a, b = torch.empty(256, 128, dtype=torch.float16), torch.empty(128, 512, dtype=torch.float16)
    trace = persistent_gemm_kernel.compile(a, b, target="cpu").trace
    view = bank_conflict_view(trace, "c_shared")
    stores = [x for x in view.accesses if "from registers" in x["instruction"]]
    assert len(stores) == 1
    lanes = [lane for lanes in stores[0]["instructions"] for lane in lanes if lane]
    assert {row for row, _ in lanes} == set(range(128))
    assert {col for _, col in lanes} == set(range(0, 128, 2))  # two values a lane


def test_gemm_shared_tiles_conflicts(gemm_traces):
    trace = gemm_traces[3]
    view = bank_conflict_view(trace, "a_shared")
    by_key = {(a["name"], a["swizzled"]): a for a in view.data["accesses"]}
    copy, gemm = "copy(A, a_shared)", "gemm A operand (a_shared @ b_shared)"
    assert by_key[(copy, True)]["max_degree"] == by_key[(copy, False)]["max_degree"] == 1
    assert "cp.async 16 B" in by_key[(copy, True)]["instruction"]
    assert len(by_key[(copy, True)]["conflict_degree_per_instruction"]) == 128 * 32 // 8 // 32
    assert set(by_key[(gemm, False)]["conflict_degree_per_instruction"]) == {4}
    assert set(by_key[(gemm, True)]["conflict_degree_per_instruction"]) == {1}
    # 4 warps x 2 k-steps x 4 m-tiles of ldmatrix.x4
    assert len(by_key[(gemm, True)]["conflict_degree_per_instruction"]) == 32
    # b_shared is 32x128: rows are 256 bytes apart, all in one bank group -> 8-way
    view = bank_conflict_view(trace, "b_shared")
    ldmatrix = [a for a in view.data["accesses"] if "ldmatrix.x2.trans" in a["instruction"]]
    assert {a["swizzled"]: a["max_degree"] for a in ldmatrix} == {True: 1, False: 8}


def test_the_bank_view_replays_what_the_compiler_recorded(gemm_traces):
    """Each copy through shared memory is recorded with the vector width its lowering uses
    (here: 16-byte cp.async in the pipeline, 2-element register stores would be 4 bytes)."""
    trace = gemm_traces[3]
    def without_why(record):  # the reasons name the target, which differs
        return {key: value for key, value in record.items() if key != "why"}

    copies = {(r["src"], r["dst"]): without_why(r) for r in trace.instructions
              if r["op"] == "copy"}
    assert copies[("A", "a_shared")]["vector"] == 8
    assert copies[("A", "a_shared")]["instruction"] == "cp.async 16 B per lane"
    (gemm,) = [r for r in trace.instructions if r["op"] == "gemm"]
    assert gemm["instruction"] == "mma.sync" and (gemm["a"], gemm["b"]) == ("a_shared",
                                                                             "b_shared")
    view = bank_conflict_view(trace, "a_shared")
    assert any(a["instruction"].startswith("cp.async 16 B per lane") for a in
               view.data["accesses"])
    from examples.gemm import gemm_kernel

    # the CPU's plan is the Ampere path's (sm_90a copies this loop with TMA: test_tma.py)
    cuda = gemm_kernel.compile(M=256, N=256, K=256, num_stages=3, target="cuda:sm_80")
    assert "tl::cp_async<16>" in cuda.trace.code["cuda"]  # what the record says it emits
    assert {(r["src"], r["dst"]): without_why(r) for r in cuda.trace.instructions
            if r["op"] == "copy"} == copies  # the CPU trace shows what the CUDA compile records


def test_a_store_from_registers_says_how_wide_it_is():
    """Stored straight from its accumulators, the course GEMM writes 4 bytes per thread: the
    record says so and how a shared tile widens the stores. By default the compiler stages
    them (passes/stage_stores.py), and so does the persistent GEMM by hand: 16 bytes."""
    import torch

    from examples.gemm import gemm_kernel
    from examples.persistent_gemm import persistent_gemm_kernel
    from tilelab.notebook.views import tile_op_rows

    a = torch.empty(256, 256, dtype=torch.float16, device="meta")
    direct = gemm_kernel.compile(a, a, target="cpu",
                                 pass_configs={"tl.disable_stage_stores": True})
    (store,) = [r for r in direct.trace.instructions if r.get("dst") == "C"]
    assert store["instruction"] == "st.global 4 B per lane" and "shared tile" in store["why"]
    assert any(row["instruction"] == "st.global 4 B per lane"
               for row in tile_op_rows(direct.trace))
    for staged in (gemm_kernel.compile(a, a, target="cpu"),
                   persistent_gemm_kernel.compile(a, a, target="cpu", blocks=4)):
        (store,) = [r for r in staged.trace.instructions if r.get("dst") == "C"]
        assert store["instruction"] == "ld.shared 16 B per lane"


def test_a_load_into_registers_counts_the_bytes_of_global_memory():
    """float16 read into float32 registers, four values a thread: 8 bytes of memory."""
    import torch

    import tilelab
    import tilelab.language as T

    @tilelab.jit
    def widen(X):
        M, N = T.const("M, N")
        X: T.Tensor((M, N), T.float16)
        Y = T.empty((M, N), T.float32)
        with T.Kernel(T.ceildiv(M, 64), threads=128) as b:
            f = T.alloc_fragment((64, N), T.float32)
            T.copy(X[b * 64, 0], f)
            T.copy(f, Y[b * 64, 0])
        return Y

    kernel = widen.compile(torch.empty(128, 64, dtype=torch.float16, device="meta"),
                           target="cpu")
    records = {(r["src"], r["dst"]): (r["vector"], r["instruction"])
               for r in kernel.trace.instructions}
    assert records[("X", "f")] == (4, "ld.global 8 B per lane")
    assert records[("f", "Y")] == (4, "st.global 16 B per lane")
    x = torch.randn(130, 64).half()
    torch.testing.assert_close(widen(x, target="cpu"), x.float())


def test_fragment_to_shared_copy_conflicts():
    # Each thread stores its accumulator registers in pairs (4 bytes of fp16): lane l writes
    # row l >> 2, columns 2 * (l % 4). Rows are 128 bytes apart, so all 8 rows hit the same
    # 4 banks: 8-way. Swizzled, row r's chunk moves to r % 8: 32 different banks.
    frag = Fragment.accumulator(64, 64, 4, 1).to_json()
    trace = {"kernel": "k", "layouts": {"acc": frag}, "program": {
        "buffers": [{"name": "acc", "scope": "local.fragment", "dtype": "float32",
                     "shape": [64, 64]},
                    {"name": "o", "scope": "shared.dyn", "dtype": "float16", "shape": [64, 64]}],
        "ops": [{"op": "copy", "reads": ["acc"], "writes": ["o"], "loops": [], "config": {}}],
        "loops": []},
        # what the compiler recorded: registers in pairs, 4 bytes of fp16 a lane
        "instructions": [{"op": "copy", "loc": "", "src": "acc", "dst": "o", "kind": "registers",
                          "vector": 2, "instruction": "st.shared 4 B per lane"}]}
    (access,) = shared_accesses(trace, "o")
    assert access["lane_bytes"] == 4
    assert access["instructions"][0][:5] == [[0, 0], [0, 2], [0, 4], [0, 6], [1, 0]]
    view = bank_conflict_view(trace, "o")
    assert {a["swizzled"]: a["max_degree"] for a in view.data["accesses"]} == {True: 1, False: 8}
    # A layout of the user's own is scored too: rows padded to 72 elements (144 bytes) put
    # row r's word 36r + l % 4 in bank 4r + l % 4: 32 different banks.
    trace["layouts"]["o"] = Layout.custom((64, 64), lambda i, j: i * 72 + j).to_json()
    view = bank_conflict_view(trace, "o")
    assert view.degrees[(0, "this kernel's")] == [1] * len(access["instructions"])
    assert "this kernel&#x27;s" in view.html() and "custom layout" in view.text()


# ---------------------------------------------------------------- pipeline


@pytest.mark.parametrize("stages", [2, 3])
def test_course_gemm_pipeline_plan(gemm_traces, stages):
    (plan,) = gemm_traces[stages].pipelines
    assert plan["num_stages"] == stages and plan["loop"] == "reduction_block"
    assert [(s["text"], s["stage"], s["order"], s["role"]) for s in plan["statements"]] == [
        ("copy(A, a_shared)", 0, 0, "copy"),
        ("copy(B, b_shared)", 0, 1, "copy"),
        ("gemm(a_shared, b_shared, c_fragment)", stages - 1, 2, "compute"),
    ]
    assert plan["slots"] == {"a_shared": stages, "b_shared": stages}
    assert plan["async_groups"] == [["copy(A, a_shared)", "copy(B, b_shared)"]]
    assert f"wait_group {stages - 2}" in plan["waits"]


def test_pipeline_timeline_two_vs_three_stages(gemm_traces):
    three = pipeline_timeline(gemm_traces[3].pipelines[0], 8)
    computes = [(r["iteration"], r["slot"], r["start"]) for r in three if r["kind"] == "compute"]
    # the prologue's two copies land at t=2; from then on the copies stay ahead
    assert computes == [(k, k % 3, 2.0 + k) for k in range(8)]
    assert [r["iteration"] for r in three if r["kind"] == "wait"] == [0]
    copies = [(r["iteration"], r["slot"], r["start"]) for r in three
              if r["kind"] == "copy" and r["label"].startswith("copy(A")]
    assert copies[:4] == [(0, 0, 0.0), (1, 1, 0.0), (2, 2, 2.0), (3, 0, 3.0)]
    phases = {(r["kind"], r["iteration"]): r["phase"] for r in three}
    assert phases[("copy", 1)] == "prologue" and phases[("wait", 0)] == "prologue"
    assert phases[("compute", 5)] == "steady"
    assert phases[("compute", 6)] == phases[("compute", 7)] == "epilogue"

    two = pipeline_timeline(gemm_traces[2].pipelines[0], 8)
    assert [r["iteration"] for r in two if r["kind"] == "wait"] == list(range(8))
    assert max(r["end"] for r in two) == 17.0 > max(r["end"] for r in three) == 10.0
    assert [r["phase"] for r in two if r["kind"] == "compute"][-1] == "epilogue"


def test_pipeline_view_compares_schedules(gemm_traces):
    view = pipeline_view(gemm_traces[3], iterations=8, compare=gemm_traces[2])
    data = view.data
    assert data["version"] == 1 and data["kernel"] == "gemm_kernel"
    assert data["pipelines"] == gemm_traces[3].pipelines
    assert {r["slot"] for r in data["timeline"]} == {0, 1, 2}
    assert data["compare"]["pipelines"] == gemm_traces[2].pipelines
    for row in data["timeline"]:
        assert {"iteration", "stage", "kind", "slot", "start", "end", "label"} <= set(row)
        assert row["kind"] in ("copy", "compute", "wait") and row["end"] > row["start"]
    assert "num_stages = 3" in view.html() and "num_stages = 2" in view.html()
    assert "3 stages, 8 iterations in 10 units" in view.text()


def test_chrome_trace_events(gemm_traces):
    rows = pipeline_timeline(gemm_traces[3].pipelines[0], 8)
    trace = json.loads(json.dumps(chrome_trace(rows, process="gemm")))
    events = trace["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == len(rows)
    for e in spans:
        assert isinstance(e["ts"], (int, float)) and e["dur"] > 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["cat"] in ("copy", "compute", "wait")
    names = {e["name"] for e in spans}
    assert {"copy(A, a_shared) #0", "copy(B, b_shared) #7",
            "gemm(a_shared, b_shared, c_fragment) #7", "wait for the copies of #0"} <= names
    gemm7 = next(e for e in spans if e["name"] == "gemm(a_shared, b_shared, c_fragment) #7")
    assert (gemm7["ts"], gemm7["dur"], gemm7["tid"]) == (9.0, 1.0, 0)
    copy3 = next(e for e in spans if e["name"] == "copy(A, a_shared) #3")
    assert copy3["tid"] == 1 + 3 % 3 and copy3["args"]["slot"] == 0
    lanes = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert lanes == {"compute", "slot 0", "slot 1", "slot 2"}
    both = chrome_trace({"3 stages": rows, "2 stages": rows})
    assert {e["pid"] for e in both["traceEvents"]} == {1, 2}


# ---------------------------------------------------------------- dataflow


def test_dataflow_graph_of_the_gemm(gemm_traces):
    trace = gemm_traces[3]
    view = dataflow_view(trace)
    nodes = {n["id"]: n for n in view.data["nodes"]}
    label = {n["label"].split("\n")[0]: n["id"] for n in nodes.values() if n["kind"] == "buffer"}
    assert nodes[label["a_shared"]]["scope"].startswith("shared")
    edges = {(e["from"], e["to"]) for e in view.data["edges"]}
    copy_a = next(a for a, b in edges if b == label["a_shared"])
    assert (label["A"], copy_a) in edges and nodes[copy_a]["kind"] == "op"
    dot = dataflow_dot(trace.program, trace.pipelines)
    assert dot == view.data["dot"]
    assert "subgraph cluster_0" in dot and "T.Pipelined over reduction_block" in dot
    cluster = dot[dot.index("subgraph cluster_0"):]
    assert f"{label['a_shared']} [" in cluster and f"{label['A']} [" not in cluster
    assert "× 3 slots" in dot


@needs_dot
def test_dataflow_drawn_by_graphviz(gemm_traces, tmp_path):
    view = dataflow_view(gemm_traces[3])
    assert view.svg().startswith("<svg") and "a_shared" in view.svg()
    assert view.save(tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in view.html()


def test_dataflow_without_dot_shows_text_and_how_to_install(gemm_traces, monkeypatch):
    from tilelab.viz import dataflow

    monkeypatch.setattr(dataflow.shutil, "which", lambda name: None)
    page = dataflow_view(gemm_traces[3]).html()
    assert "apt-get install graphviz" in page
    assert "digraph dataflow" in page and "<svg" not in page
    with pytest.raises(FileNotFoundError, match="apt-get install graphviz"):
        dataflow_view(gemm_traces[3]).svg()


# ---------------------------------------------------------------- rendering and bundles


def test_views_render_and_save(gemm_traces, tmp_path):
    trace = gemm_traces[3]
    views = [layout_view(trace, "c_fragment"), layout_view(trace, "a_shared"),
             layout_view(trace, "c_fragment", thread=5), bank_conflict_view(trace, "b_shared"),
             pipeline_view(trace)]
    for k, view in enumerate(views):
        bundle = view._repr_mimebundle_()
        assert bundle[f"application/vnd.tilelab.{view.view}+json"]["version"] == 1
        assert bundle["text/html"].startswith('<div class="tilelab-view')
        assert bundle["text/plain"]
        svg = view.save(tmp_path / f"{k}.svg").read_text()
        assert svg.startswith("<svg") and svg.count("<rect") + svg.count("<image") > 5
        png = view.save(tmp_path / f"{k}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
        page = view.save(tmp_path / f"{k}.html").read_text()
        assert page.startswith("<!DOCTYPE html>") and "<svg" in page
        assert json.loads(view.save(tmp_path / f"{k}.json").read_text()) == view.data
    with pytest.raises(ValueError, match="suffix"):
        views[0].save(tmp_path / "x.gif")


def test_layout_pictures_of_big_and_small_tiles():
    big = layout_svg(Fragment.accumulator(128, 128, 2, 2))
    assert "<image" in big and "T0:R0" not in big  # 128x128: colors and warps, no labels
    assert big.count('class="tl-warps"') == 1
    small = layout_svg(Fragment.mma_c())
    assert "T10:R3" in small and small.count("<rect") >= 16 * 8
    figure = fragment_figure(Fragment.mma_a(), thread=5)
    assert figure.get_figwidth() > 4
    texts = {t.get_text() for t in figure.axes[0].texts}
    assert "T5:R6" in texts and "T4:R0" not in texts  # only thread 5 keeps its labels


def test_layout_view_payload_follows_the_mime_spec(gemm_traces):
    data = layout_view(gemm_traces[3], "a_shared").data
    assert (data["buffer"], data["dtype"]) == ("a_shared", "float16")
    layout = data["layout"]
    assert layout["kind"] == "swizzled" and layout["shape"] == [128, 32]
    assert len(layout["offsets"]) == 128 and len(layout["banks"][0]) == 32
    data = layout_view(gemm_traces[3], "c_fragment").data
    assert data["layout"]["recipe"] == {"kind": "accumulator", "m": 128, "n": 128,
                                        "warps": [2, 2]}
    assert {"thread", "local", "threads", "replicate", "local_size"} <= set(data["layout"])


def test_unknown_buffer_names_the_known_ones(gemm_traces):
    from tilelab.errors import TileLabError

    with pytest.raises(TileLabError, match="c_fragment"):
        layout_view(gemm_traces[3], "nope")
    with pytest.raises(TileLabError, match="a_shared"):
        bank_conflict_view(gemm_traces[3], "c_fragment")


def test_html_reads_without_javascript(gemm_traces):
    page = layout_view(gemm_traces[3], "c_fragment").html()
    assert '<div class="tl-controls" hidden>' in page  # controls appear only with JS
    assert page.index("<svg") < page.index("<script")


# ---------------------------------------------------------------- hostile names

EVIL = "<img src=x onerror=alert(1)>"


def hostile_trace() -> dict:
    shared, glob, frag = EVIL, "G" + EVIL, "F$x_{1}$" + EVIL
    return Trace(kernel=EVIL, target="cpu", program={
        "buffers": [{"name": glob, "scope": "global", "dtype": "float16", "shape": [64, 64]},
                    {"name": shared, "scope": "shared.dyn", "dtype": "float16",
                     "shape": [16, 16]},
                    {"name": frag, "scope": "local.fragment", "dtype": "float32",
                     "shape": [16, 8]}],
        "ops": [{"op": "copy", "reads": [glob], "writes": [shared], "loops": [EVIL],
                 "config": {}},
                {"op": "gemm", "reads": [shared, shared, frag], "writes": [frag],
                 "loops": [EVIL], "config": {"transpose_A": False, "transpose_B": False}}],
        "loops": [{"var": EVIL, "kind": "pipelined", "num_stages": 2}]},
        layouts={frag: Fragment.mma_c().to_json()},
        pipelines=[{"loop": EVIL, "num_stages": 2, "extent": 4,
                    "statements": [{"text": f"copy({glob}, {shared})", "stage": 0, "order": 0,
                                    "role": "copy"},
                                   {"text": EVIL, "stage": 1, "order": 1, "role": "compute"}],
                    "slots": {shared: 2}, "async_groups": [[EVIL]], "waits": EVIL}]).to_dict()


def test_hostile_names_are_escaped(tmp_path, monkeypatch):
    trace = hostile_trace()
    frag = "F$x_{1}$" + EVIL
    views = [layout_view(trace, EVIL), layout_view(trace, frag), bank_conflict_view(trace, EVIL),
             pipeline_view(trace, compare=trace)]
    if shutil.which("dot"):
        views.append(dataflow_view(trace))
    for view in views:
        page = view.html()
        assert "<img" not in page, view.view
        assert "&lt;img" in page, view.view
        assert "<img" not in view.svg()
        view.save(tmp_path / f"{view.view}.png")  # '$' must not start matplotlib math
    from tilelab.viz import dataflow

    monkeypatch.setattr(dataflow.shutil, "which", lambda name: None)
    page = dataflow_view(trace).html()
    assert "<img" not in page and "&lt;img" in page


def test_measured_replay_is_drawn_under_the_plan():
    """Rows recorded on the GPU (tilelab.instrument) ride along in the payload and the picture."""
    import numpy as np

    from tilelab.instrument import measured_rows

    # two blocks, three iterations, four stamps each: wait, ready, issued, done (ns)
    stamps = np.array([[[100, 150, 160, 260], [260, 270, 280, 380], [380, 385, 390, 490]],
                       [[200, 210, 220, 320], [320, 330, 340, 440], [0, 0, 0, 0]]])
    rows = measured_rows(stamps)
    assert [(r["block"], r["iteration"], r["kind"]) for r in rows[:3]] == \
        [(0, 0, "wait"), (0, 0, "issue"), (0, 0, "compute")]
    assert rows[0]["start_ns"] == 0 and rows[0]["end_ns"] == 50  # relative to the first stamp
    assert len(rows) == 3 * 3 + 2 * 3  # the unrecorded iteration of block 1 is skipped
    plan = {"loop": "k", "num_stages": 2, "extent": 3, "slots": {"a": 2},
            "statements": [{"text": "copy(A, a)", "stage": 0, "order": 0, "role": "copy"},
                           {"text": "gemm(a, b, c)", "stage": 1, "order": 1, "role": "compute"}],
            "async_groups": [["copy(A, a)"]], "waits": ""}
    view = pipeline_view(plan, iterations=3, measured=rows)
    payload = view._repr_mimebundle_()["application/vnd.tilelab.pipeline+json"]
    assert payload["measured"] == rows
    svg = view.scene().to_svg()
    assert svg.count('data-ns="') == 9  # block 0's bars only
    assert "measured on the GPU" in svg
