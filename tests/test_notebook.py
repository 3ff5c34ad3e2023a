"""The notebook layer through a real IPython shell: `%%tilekernel` cells and their views.

Each test runs cells in `InteractiveShell.instance()` with `%load_ext tilelab`
and checks what a notebook would receive: the mime bundles' JSON (parsed and
checked against docs/MIME.md), their HTML fallback (escaped, self-contained)
and plain text; errors at the cell's own line without tilelab's internals;
`--check` and `--bench` against PyTorch; the Python API and the widget.
"""

import html
import inspect
import json
import linecache
import os
import re
import subprocess
import sys

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import tilelab
from tilelab.notebook import (
    BenchView,
    CheckView,
    ErrorView,
    JsonView,
    PassesView,
    SourceView,
    diff,
    passes_view,
)
from tilelab.notebook.views import first_change_index
from tilelab.trace import PassRecord, Trace

PASS_KEYS = {"name", "ir", "changed", "duration_ms", "owner", "stage"}

# A small kernel; its docstring carries markup that every view must show as text.
KERNEL = '''
@tilelab.jit
def double_kernel(X):
    """Doubles X. <script>document.body.dataset.pwned = 1</script>"""
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    Y = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 128), threads=128) as block:
        tile = T.alloc_fragment((128,), T.float32)
        T.copy(X[block * 128], tile)
        for i in T.Parallel(128):
            tile[i] = tile[i] * 2.0
        T.copy(tile, Y[block * 128])
    return Y
'''


@pytest.fixture(scope="module")
def shell():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tilelab")
    shell.run_cell("import torch, tilelab\nimport tilelab.language as T")
    yield shell
    shell.run_line_magic("unload_ext", "tilelab")


@pytest.fixture
def settings(shell):
    """%tilelab's settings, put back to the defaults after the test."""
    from tilelab.notebook.magics import Settings

    magics = shell.magics_manager.registry["TileLabMagics"]
    yield magics.settings
    magics.settings = Settings()


def run(shell, cell):
    """Run a cell; return its result and what it displayed and printed."""
    with capture_output() as captured:
        result = shell.run_cell(cell)
    return result, captured


def bundles(captured, view):
    mime = f"application/vnd.tilelab.{view}+json"
    found = [o.data for o in captured.outputs if mime in o.data]
    for bundle in found:  # every bundle: JSON-ready payload, version 1, three entries
        json.loads(json.dumps(bundle[mime]))
        assert bundle[mime]["version"] == 1
        assert {"text/html", "text/plain"} <= set(bundle)
    return found


def one(captured, view):
    found = bundles(captured, view)
    assert len(found) == 1, [list(o.data) for o in captured.outputs]
    return found[0]


def text_of(markup: str) -> str:
    """What a reader of the HTML sees: the tags dropped, the entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def bundle_text(captured) -> str:
    return "".join(o.data["text/plain"] for o in captured.outputs)


def kernel_cell(flags: str, extra: str = "") -> str:
    return f"%%tilekernel {flags}\n{KERNEL}{extra}"


# ---------------------------------------------------------------- the extension


def test_extension_registers_magics_with_generated_help(shell):
    magic = shell.find_cell_magic("tilekernel")
    assert magic is not None and shell.find_line_magic("tilelab") is not None
    for flag in ("--target", "--args", "--passes", "--diff", "--source", "--check", "--bench",
                 "--rtol", "--atol", "--layout", "--pipeline", "--dataflow"):
        assert flag in magic.__doc__, flag


def test_a_cell_run_again_is_a_cache_hit(shell, monkeypatch):
    """Each run of a cell has its own name (`<tilekernel-N>`); the kernel's IR names it, but
    the cache key leaves the name out: the second run compiles nothing."""
    import tilelab.compiler as compiler

    compiled = []
    uncached = compiler._compile_uncached
    monkeypatch.setattr(compiler, "_compile_uncached",
                        lambda *a, **k: compiled.append(1) or uncached(*a, **k))
    cell = kernel_cell('--args "N=1237"')
    for _ in range(2):
        result, captured = run(shell, cell)
        assert result.success, captured.stdout
    assert len(compiled) <= 1  # (none where an earlier test run left it in the cache)


def test_extension_loads_from_ipython_config():
    code = ("ip = get_ipython(); "
            "print('magic:', ip.find_cell_magic('tilekernel') is not None)")
    out = subprocess.run([sys.executable, "-m", "IPython", "--quick", "--no-banner",
                          "--InteractiveShellApp.extensions=['tilelab']", "-c", code],
                         capture_output=True, text=True, timeout=60)
    assert "magic: True" in out.stdout, out.stdout + out.stderr


def test_cell_binds_kernel_and_shows_changed_passes(shell):
    result, captured = run(shell, kernel_cell('--passes --args "N=1000"'))
    assert result.success, captured.stdout
    assert isinstance(shell.user_ns["double_kernel"], tilelab.JITFunction)
    bundle = one(captured, "passes")
    data = bundle["application/vnd.tilelab.passes+json"]
    assert data["kernel"] == "double_kernel" and data["target"] == "cpu"
    assert data["source"]["filename"].startswith("<tilekernel-")
    assert "def double_kernel(X):" in data["source"]["text"]
    passes = data["passes"]
    assert passes[0]["name"] == "tilelab.FrontEnd"
    assert all(set(p) == PASS_KEYS and p["changed"] for p in passes)
    assert {p["owner"] for p in passes} == {"tilelab", "tvm"}
    assert all(p["duration_ms"] >= 0 for p in passes)

    page = bundle["text/html"]
    assert page.count("<details data-pass=") == len(passes)
    assert "passes that changed nothing are hidden" in page
    shown = text_of(page)
    for p in passes:
        assert p["ir"].splitlines()[-1].strip() in shown
    assert "&lt;script&gt;" in page and "<script" not in page
    assert "double_kernel on cpu" in bundle["text/plain"]


def test_passes_all_and_by_name(shell):
    _, captured = run(shell, kernel_cell('--passes all --args "N=1000"'))
    passes = one(captured, "passes")["application/vnd.tilelab.passes+json"]["passes"]
    assert any(not p["changed"] for p in passes)
    assert [p["name"] for p in passes] == shell.user_ns["double_kernel"].lower(N=1000).pass_names()

    _, captured = run(shell, kernel_cell('--passes tilelab.FrontEnd tirx.FlattenBuffer '
                                         '--args "N=1000"'))
    passes = one(captured, "passes")["application/vnd.tilelab.passes+json"]["passes"]
    assert [p["name"] for p in passes] == ["tilelab.FrontEnd", "tirx.FlattenBuffer"]

    _, captured = run(shell, kernel_cell('--passes no.SuchPass --args "N=1000"'))
    assert "UsageError: no pass 'no.SuchPass'" in captured.stderr + captured.stdout
    assert "Traceback" not in captured.stderr + captured.stdout

    _, captured = run(shell, "%%tilekernel --kernel torch --passes\n# not a kernel\n")
    assert "no tilelab kernel of that name" in captured.stderr + captured.stdout


def test_diff_shows_side_by_side_tables(shell):
    _, captured = run(shell, kernel_cell('--diff --args "N=1000"'))
    page = one(captured, "passes")["text/html"]
    assert "<details data-pass=\"3\" id=" in page and " open>" in page
    assert "background: #aceebb" in page and 'class="diff_add"' not in page


def test_cell_source_is_registered_for_inspect(shell):
    run(shell, kernel_cell('--args "N=1000"'))
    fn = shell.user_ns["double_kernel"].fn
    filename = fn.__code__.co_filename
    assert re.fullmatch(r"<tilekernel-\d+>", filename)
    lines = linecache.getlines(filename)
    assert lines[0] == '%%tilekernel --args "N=1000"\n'
    assert inspect.getsource(fn) == KERNEL.lstrip("\n")
    assert fn.__code__.co_firstlineno == 3  # the magic's line, a blank line, then @tilelab.jit


def test_kernels_compiled_by_calls_in_the_cell(shell):
    _, captured = run(shell, kernel_cell("--passes", "y = double_kernel(torch.ones(300))\n"))
    data = one(captured, "passes")["application/vnd.tilelab.passes+json"]
    assert data["kernel"] == "double_kernel"
    assert torch.equal(shell.user_ns["y"], torch.full((300,), 2.0))


FACTORY = """%%tilekernel --passes --check "A * 0.5 + B"
@tilelab.jit(out_idx=[2])
def scaled_add(N: int, block: int = 64):
    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32),
             C: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    C[bx * block + i] = A[bx * block + i] * 0.5 + B[bx * block + i]

    return main

kernel = scaled_add(100)
"""


def test_factory_style_and_a_compiled_kernel_shown_once(shell):
    result, captured = run(shell, FACTORY)
    assert result.success
    assert isinstance(shell.user_ns["kernel"], tilelab.Kernel)
    data = one(captured, "passes")["application/vnd.tilelab.passes+json"]
    assert data["kernel"] == "main"
    check = one(captured, "check")["application/vnd.tilelab.check+json"]
    assert check["passed"] and check["total"] == 100  # on random A and B, by parameter name

    _, captured = run(shell, '%%tilekernel --kernel scaled_add --args "N=130" --passes all\n'
                              '# a kernel from an earlier cell\n')
    data = one(captured, "passes")["application/vnd.tilelab.passes+json"]
    assert "T.Buffer((130,)" in data["passes"][0]["ir"]


def test_uncompiled_kernel_gets_a_note(shell):
    _, captured = run(shell, kernel_cell("--passes"))
    assert not bundles(captured, "passes")
    assert "not compiled yet" in captured.stdout


def test_last_expression_is_the_cell_value(shell):
    result, _ = run(shell, "%%tilekernel\nvalue = 20\nvalue + 1\n")
    assert result.result == 21


def test_source_view_llvm(shell):
    _, captured = run(shell, kernel_cell('--source --args "N=1000"'))
    bundle = one(captured, "source")
    data = bundle["application/vnd.tilelab.source+json"]
    assert data["language"] == "llvm" and "define" in data["code"]
    assert isinstance(data["resources"], dict)
    assert "define" in text_of(bundle["text/html"])


def test_target_flag(shell):
    _, captured = run(shell, kernel_cell('--target cpu --args "N=1000" --passes'))
    assert one(captured, "passes")["application/vnd.tilelab.passes+json"]["target"] == "cpu"
    assert shell.user_ns["double_kernel"].target == "cpu"  # later calls compile for it too


def test_cuda_source_and_resources_without_a_gpu(shell):
    from tilelab.backends.cuda.nvcc import find_nvcc

    if find_nvcc() is None:
        pytest.skip("compiling for CUDA needs nvcc")
    _, captured = run(shell, kernel_cell('--target cuda --args "N=1000" --source'))
    sources = {b["application/vnd.tilelab.source+json"]["language"]: b
               for b in bundles(captured, "source")}
    assert {"cuda", "ptx"} <= set(sources)
    data = sources["cuda"]["application/vnd.tilelab.source+json"]
    assert "__global__" in data["code"] and data["resources"]["block"] == [128, 1, 1]
    assert "registers" in text_of(sources["cuda"]["text/html"])


# ---------------------------------------------------------------- check and bench


def test_check_passes_for_a_correct_kernel(shell):
    _, captured = run(shell, kernel_cell('--args "N=1000" --check "X * 2"'))
    data = one(captured, "check")["application/vnd.tilelab.check+json"]
    assert data["passed"] and data["max_abs_error"] == 0.0 and data["total"] == 1000
    assert data["reference"] == "X * 2"


def test_check_reports_a_wrong_baseline(shell):
    shell.user_ns["x"] = torch.randn(1000)
    _, captured = run(shell, kernel_cell('--args "x" --check "x * 3" --rtol 0 --atol 1e-6'))
    bundle = one(captured, "check")
    data = bundle["application/vnd.tilelab.check+json"]
    assert not data["passed"] and data["mismatched"] > 0
    expected = float((shell.user_ns["x"]).abs().max())
    assert data["max_abs_error"] == pytest.approx(expected, rel=1e-6)
    assert (data["rtol"], data["atol"]) == (0.0, 1e-6)
    assert "FAILED" in bundle["text/html"] and "FAILED" in bundle["text/plain"]


def test_bench_in_the_cell(shell, settings):
    run(shell, "%tilelab --warmup 1 --rep 3 --input-sets 2")
    assert (settings.warmup, settings.rep, settings.input_sets) == (1, 3, 2)
    _, captured = run(shell, kernel_cell('--args "N=4096" --bench "X * 2"'))
    bundle = one(captured, "bench")
    data = bundle["application/vnd.tilelab.bench+json"]
    assert data["timing"] == "wall-clock (CPU)" and data["device"].startswith("CPU")
    kernel_row, baseline_row = data["rows"]
    assert kernel_row["name"] == "double_kernel" and baseline_row["name"] == "X * 2"
    for row in data["rows"]:
        assert row["baseline_name"] == "X * 2" and row["median_ms"] > 0
        assert row["gbps"] == pytest.approx(2 * 4096 * 4 / (row["median_ms"] * 1e-3) / 1e9)
        assert "roofline_pct" not in row  # no known peak for a CPU
    assert kernel_row["speedup"] == pytest.approx(baseline_row["median_ms"] / kernel_row["median_ms"])
    assert baseline_row["speedup"] == 1.0
    page = bundle["text/html"]
    assert page.count("<rect ") == 2 and "wall-clock (CPU)" in page


def test_bench_refuses_a_wrong_kernel(shell):
    _, captured = run(shell, kernel_cell('--args "N=1000" --bench "X * 3"'))
    assert not bundles(captured, "bench")
    assert not one(captured, "check")["application/vnd.tilelab.check+json"]["passed"]
    assert "not benchmarked" in captured.stdout


def test_bench_function_times_both_and_checks_first():
    import tilelab.benchmark as bench_module

    result = tilelab.bench(lambda x: x * 2, baseline=lambda x: x + x,
                           args=lambda: (torch.randn(2048),), warmup=1, rep=2, input_sets=2,
                           flops=2048, bytes=2 * 2048 * 4, name="twice")
    assert isinstance(result, BenchView) and result.check["passed"]
    assert [r["name"] for r in result.rows] == ["twice", "<lambda>"]
    assert result.rows[0]["tflops"] == pytest.approx(2048 / (result.median_ms * 1e-3) / 1e12)
    with pytest.raises(bench_module.CheckFailed, match="differs"):
        tilelab.bench(lambda x: x * 2, baseline=lambda x: x * 3, args=(torch.ones(8),))
    assert tilelab.bench(lambda: 1, warmup=0, rep=1).rows[0]["baseline_ms"] is None
    assert callable(tilelab.bench) and not isinstance(tilelab.bench, type(bench_module))


def test_roofline_from_the_table_of_peaks(monkeypatch):
    import tilelab.benchmark as bench_module

    peak = bench_module.device_peak("NVIDIA H200")
    assert (peak.memory_tbps, peak.fp16_tflops) == (4.8, 989.4)
    assert bench_module.device_peak("NVIDIA H200 NVL").fp16_tflops < 989.4
    monkeypatch.setattr(bench_module, "_device_of", lambda sets: ("NVIDIA H200", "cuda-events",
                                                                 peak))
    result = bench_module.bench(lambda: None, warmup=0, rep=3, flops=1e9, bytes=1e8)
    row = result.rows[0]
    bound = max(1e9 / 989.4e12, 1e8 / 4.8e12)
    assert row["roofline_pct"] == pytest.approx(100 * bound / (row["median_ms"] * 1e-3))


def test_compare_reports_shapes_and_nan():
    from tilelab.benchmark import compare

    assert compare(torch.ones(3), torch.ones(3))["passed"]
    bad = compare(torch.ones(3), torch.ones(4))
    assert not bad["passed"] and "shape" in bad["message"]
    nan = compare(torch.tensor([float("nan"), 1.0]), torch.tensor([0.0, 1.0]))
    assert not nan["passed"] and nan["max_abs_error"] is None and "NaN" in nan["message"]
    # the reference's own NaN and infinities, matched value for value, are no error
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    same = compare(special.clone(), special)
    assert same["passed"] and same["max_abs_error"] == 0.0 and same["mismatched"] == 0
    other = compare(torch.tensor([float("nan"), -float("inf"), 0.0, 1.0]), special)
    assert not other["passed"] and other["max_abs_error"] is None
    assert compare((torch.ones(2), torch.zeros(2)), (torch.ones(2), torch.zeros(2)))["total"] == 4


# ---------------------------------------------------------------- layouts, pipeline, dataflow


def test_layout_pipeline_dataflow_views(shell):
    _, captured = run(shell, kernel_cell('--args "N=1000" --layout tile --pipeline --dataflow'))
    shown = [o.data for o in captured.outputs]
    assert len(shown) == 3
    trace = shell.user_ns["double_kernel"].lower(N=1000)
    for data, (view, raw) in zip(shown, [("layout", trace.layouts["tile"]),
                                         ("pipeline", trace.pipelines),
                                         ("dataflow", trace.program)]):
        if "application/json" in data:  # tilelab.viz does not draw this one yet
            assert data["application/json"]["data"] == raw
            assert data["application/json"]["kernel"] == "double_kernel"
        else:
            assert f"application/vnd.tilelab.{view}+json" in data
        assert "text/html" in data and "text/plain" in data

    _, captured = run(shell, kernel_cell('--args "N=1000" --layout nothing'))
    assert "no buffer 'nothing'" in captured.stderr + captured.stdout


# ---------------------------------------------------------------- errors


ERROR_CELL = '''%%tilekernel --args "N=64"
import tilelab
@tilelab.jit
def broken(X):
    N = T.const("N")
    X: T.Tensor((N,), T.float32)
    with T.Kernel(1, threads=128) as block:
        tile = T.alloc_fragment((64,), T.float32)
        T.copy(X[0], undefined_buffer)
'''


def test_error_cell_points_at_its_own_line(shell):
    result, captured = run(shell, ERROR_CELL)
    assert result.error_in_exec is None  # shown as a view, not raised through the shell
    bundle = one(captured, "error")
    data = bundle["application/vnd.tilelab.error+json"]
    lines = ERROR_CELL.splitlines()
    assert data["line"] == 9 and lines[data["line"] - 1] == data["source_line"]
    assert data["source_line"][data["col"] - 1:].startswith("undefined_buffer")
    assert data["filename"].startswith("<tilekernel-") and data["kernel"] == "broken"
    assert "undefined_buffer" in data["message"]
    for text in (bundle["text/html"], bundle["text/plain"], captured.stdout, captured.stderr):
        assert "tilelab/" not in text and "Traceback" not in text
    assert "cell line 9" in bundle["text/plain"] and "cell line 9" in bundle["text/html"]
    caret = bundle["text/plain"].splitlines()[-1]
    assert caret.strip() == "^"


def test_error_when_calling_a_kernel_in_the_cell(shell):
    cell = kernel_cell("", "\ny = double_kernel(torch.zeros(8, dtype=torch.int32))\n")
    _, captured = run(shell, cell)
    data = one(captured, "error")["application/vnd.tilelab.error+json"]
    assert "must be float32" in data["message"]
    assert data["line"] == cell.splitlines().index('    X: T.Tensor((N,), T.float32)') + 1
    assert f"cell line {data['line']}," in bundle_text(captured)

    # the same mistake in a later cell points at the cell that defined the kernel
    defined_in = data["filename"]
    _, captured = run(shell, "%%tilekernel\ndouble_kernel(torch.zeros(8, dtype=torch.int32))\n")
    later = one(captured, "error")
    assert later["application/vnd.tilelab.error+json"]["filename"] == defined_in
    assert f"{defined_in}, line {data['line']}," in later["text/plain"]


def test_other_exceptions_propagate(shell):
    result, captured = run(shell, "%%tilekernel\nraise ValueError('plain python')\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert not bundles(captured, "error")
    # the traceback shows the cell's own line, not the magic's frames
    assert "<tilekernel-" in captured.stdout and "magics.py" not in captured.stdout


# ---------------------------------------------------------------- %tilelab


def test_tilelab_line_magic_shows_and_sets_defaults(shell, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("TILELAB_CACHE_DIR", "/nowhere")
    _, captured = run(shell, "%tilelab")
    assert "target      auto" in captured.stdout and "/nowhere" in captured.stdout
    _, captured = run(shell, f"%tilelab --target cpu --rep 7 --cache-dir {tmp_path}")
    assert "target      cpu" in captured.stdout and "rep         7" in captured.stdout
    assert (settings.target, settings.rep) == ("cpu", 7)
    assert os.environ["TILELAB_CACHE_DIR"] == str(tmp_path)
    _, captured = run(shell, "%tilelab --target tpu")
    assert "unknown target 'tpu'" in captured.stderr + captured.stdout


# ---------------------------------------------------------------- from Python


@pytest.fixture(scope="module")
def trace(shell):
    run(shell, kernel_cell('--args "N=1000"'))
    return shell.user_ns["double_kernel"].lower(N=1000)


def test_python_api_views_and_show(trace):
    view = passes_view(trace, "all")
    assert len(view.payload()["passes"]) == len(trace.passes)
    pair = diff(trace, "tilelab.FrontEnd", "tilelab.LowerTileOpsToLoops")
    bundle = pair._repr_mimebundle_()
    assert [p["name"] for p in bundle["application/vnd.tilelab.passes+json"]["passes"]] == \
        ["tilelab.FrontEnd", "tilelab.LowerTileOpsToLoops"]
    assert bundle["text/plain"].startswith("--- #0 tilelab.FrontEnd")
    assert "<table" in bundle["text/html"] and 'class="diff_' not in bundle["text/html"]
    with capture_output() as captured:
        pair.show()
        SourceView(trace).show()
    assert [list(o.data)[0] for o in captured.outputs] == [
        "application/vnd.tilelab.passes+json", "application/vnd.tilelab.source+json"]


def test_first_change_index(trace):
    index = first_change_index(trace, "tile")
    assert index is not None and trace.passes[index].changed
    assert trace.first_change_of("tile") == trace.passes[index].name
    assert first_change_index(trace, "no_such_name_anywhere") is None


def test_pass_explorer_widget_drives_the_ir(trace):
    from tilelab.notebook import PassExplorer

    explorer = PassExplorer(trace)
    changed = [i for i, p in enumerate(trace.passes) if p.changed]
    assert [i for _, i in explorer.pass_selector.options] == changed
    explorer.pass_selector.value = changed[2]
    assert trace.passes[changed[2]].ir.splitlines()[-1].strip() in text_of(explorer.view.value)
    explorer.mode.value = "unified"
    assert text_of(explorer.view.value).startswith(f"--- #{changed[2] - 1} ")
    explorer.mode.value = "side"
    assert "<table" in explorer.view.value
    explorer.compare_with.value = 0
    assert "#0 tilelab.FrontEnd" in text_of(explorer.view.value)
    explorer.show_all.value = True
    assert len(explorer.pass_selector.options) == len(trace.passes)
    explorer.show_all.value = False
    explorer.search.value = "tile"
    assert explorer.pass_selector.value == first_change_index(trace, "tile")
    assert "first changed by" in explorer.status.value
    explorer.search.value = "no_such_name_anywhere"
    assert "no pass changes" in explorer.status.value
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "application/vnd.tilelab.passes+json" in bundle and "text/html" in bundle


# ---------------------------------------------------------------- escaping


EVIL = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert('x')</script>"


def evil_trace() -> Trace:
    return Trace(
        kernel=EVIL, target="<b>cpu</b>",
        source={"filename": SCRIPT, "first_line": 1, "text": f"def k():\n    '{SCRIPT}'\n"},
        params=[{"name": "<iframe>", "shape": [4], "dtype": "float32", "output": False}],
        program={"buffers": [{"name": "<svg onload=alert(2)>", "scope": "global",
                              "dtype": "float32", "shape": [4]}]},
        passes=[PassRecord(SCRIPT, f"x = '{EVIL}'\n", True, 0.1, "tilelab", "input"),
                PassRecord("tirx.<svg onload=alert(2)>", f"y = '{SCRIPT}'\n<iframe>\n", True,
                           0.2, "<i>tvm</i>", "<u>pipeline</u>")],
        layouts={"<iframe>": {"kind": EVIL}}, code={"llvm": f"; {SCRIPT}\n{EVIL}\n"},
        resources={"<b>registers</b>": EVIL})


class _Located(tilelab.TileLabError):
    pass


def test_every_view_escapes_user_and_compiler_text():
    from tilelab.errors import SourceLocation

    trace = evil_trace()
    error = _Located(f"bad {SCRIPT}", SourceLocation("<tilekernel-1>", 2, 4, f"    {EVIL}"),
                     hint=EVIL)
    views = [PassesView(trace, "all"), PassesView(trace, "all", diff=True), diff(trace, 0, 1),
             SourceView(trace), ErrorView(error, EVIL),
             CheckView(EVIL, SCRIPT, {"passed": False, "max_abs_error": 1.0,
                                      "max_rel_error": 1.0, "mismatched": 1, "total": 2,
                                      "rtol": 0.0, "atol": 0.0, "message": SCRIPT}),
             BenchView(EVIL, SCRIPT, "wall-clock (CPU)",
                       [{"name": EVIL, "median_ms": 1.0, "baseline_name": SCRIPT,
                         "baseline_ms": 2.0, "speedup": 2.0},
                        {"name": SCRIPT, "median_ms": 2.0, "baseline_name": SCRIPT,
                         "baseline_ms": 2.0, "speedup": 1.0}]),
             JsonView(EVIL, SCRIPT, trace.layouts)]
    for view in views:
        page = view._repr_mimebundle_()["text/html"]
        for raw in ("<img", "<script", "<iframe", "<svg onload", "<b>", "<i>", "<u>"):
            assert raw not in page, (type(view).__name__, raw)
        assert "&lt;" in page
        payload = view.data
        assert payload["version"] == 1 and payload["kernel"] == EVIL


def test_rerunning_a_cell_shows_its_views_again(shell):
    """The second run assigns the same (cached) kernel object; it is still the cell's."""
    shell.run_cell(KERNEL + "\nx_rerun = torch.randn(300)")
    cell = "%%tilekernel --passes\nk_rerun = double_kernel.compile(x_rerun)\n"
    for _ in range(2):
        result, captured = run(shell, cell)
        assert result.error_in_exec is None
        assert bundles(captured, "passes") or "PassExplorer" in bundle_text(captured)


def test_syntax_error_in_a_cell_with_args_is_shown_at_its_line(shell):
    shell.run_cell("x_syntax = torch.randn(300)")
    cell = kernel_cell("--args x_syntax --passes", "\ny = = 1\n")
    result, captured = run(shell, cell)
    payload = one(captured, "error")["application/vnd.tilelab.error+json"]
    text = json.dumps(payload)
    assert "invalid Python syntax" in text
    assert cell.splitlines().index("y = = 1") + 1 == payload.get("line", payload.get(
        "location", {}).get("line")), payload
