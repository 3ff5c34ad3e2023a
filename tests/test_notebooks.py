"""The course: its notebooks run top to bottom, its exercises check, its example scripts run.

* Every notebook in notebooks/ is executed with nbclient in a fresh `python3`
  kernel (this interpreter's ipykernel), from notebooks/ as the working
  directory, as JupyterLab would run it; any cell that raises fails the test.
  On this machine (no GPU) that is the CPU backend, the path CI takes.
* The notebooks are kept in git without outputs or execution counts.
* Every exercise registered in notebooks/checks.py has a skeleton cell and a
  check cell in its notebook. Its checker accepts the solution in
  notebooks/solutions/ and rejects the skeleton as shipped, with the specific
  hint the skeleton's mistake deserves (not just "wrong") - both when the
  skeleton is imported here and where the notebook runs it.
* Each script in examples/ runs from the command line with `--device cpu` and
  its default sizes: its own check, then its benchmark.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
CHAPTERS = ["00_setup", "01_vector_add", "02_reduce", "03_softmax", "04_gemm", "05_layer_norm",
            "06_rms_norm", "07_flash_attention", "08_debugging", "09_hopper", "10_autotuning"]
CELL_TIMEOUT_S = 300  # per cell; the slowest cells take a few seconds on a 2-core machine

# What the checker must say about each shipped skeleton: the mistake it makes, by name.
SKELETON_HINTS = {
    "00.1": "returns X unchanged",
    "01.1": "plain A + B",
    "01.2": "round up",
    "02.1": "returns the row sums",
    "02.2": "last tile of columns only",
    "03.1": "NaN",
    "03.2": "exp2(previous_max - running_max)",
    "04.1": "2 bytes per float16",
    "04.2": "without the residual",
    "05.1": "LayerNorm(X)",
    "05.2": "inputs around 300",
    "06.1": "H equals X",
    "07.1": "causal attention",
    "07.2": "sequence × sequence",
    "08.1": "past the end of Y",
    "08.2": "transpose_B=True",
    "08.3": "values in every thread",
    "09.1": "spread over all 256 threads",
    "09.2": "num_stages - 2 ahead",
    "10.1": "48 KiB shared memory budget",
    "10.2": "can only win if it is correct",
}


def load_module(path: Path, name: str):
    """Import a file under `name` (registered in sys.modules, as dataclasses need)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def checks():
    return load_module(NOTEBOOKS / "checks.py", "course_checks")


def notebook_path(chapter: str) -> Path:
    return NOTEBOOKS / f"{chapter}.ipynb"


def tagged_cells(notebook, tag: str) -> list:
    return [cell for cell in notebook.cells if tag in cell.get("metadata", {}).get("tags", [])]


# ---------------------------------------------------------------- the notebooks as stored


def test_every_chapter_is_there():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == CHAPTERS


def tracked_notebooks() -> list[Path]:
    """The notebooks git tracks (all of notebooks/*.ipynb where git is not available)."""
    try:
        out = subprocess.run(["git", "ls-files", "notebooks/*.ipynb"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    tracked = [ROOT / line for line in out.splitlines() if line]
    return tracked or sorted(NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {index} has outputs: run " \
                                       "scripts/strip_notebooks.py"
            assert cell.execution_count is None, f"{path.name} cell {index} has an " \
                                                 "execution count"
    assert set(notebook.metadata) <= {"kernelspec", "language_info"}, notebook.metadata.keys()
    assert notebook.metadata["kernelspec"]["name"] == "python3"


def test_tracked_notebooks_are_the_stripped_ones():
    # the test above reads the working tree; git must not hold other notebooks than those
    assert {p.name for p in tracked_notebooks()} <= {f"{c}.ipynb" for c in CHAPTERS}


def test_strip_script_finds_nothing_to_strip():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "strip_notebooks.py"),
                          "--check"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_strip_script_removes_outputs(tmp_path):
    source = nbformat.read(notebook_path("00_setup"), as_version=4)
    cell = next(c for c in source.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", text="hello\n")]
    cell.execution_count = 3
    source.metadata["widgets"] = {"state": {}}
    dirty = tmp_path / "dirty.ipynb"
    nbformat.write(source, dirty)
    script = str(ROOT / "scripts" / "strip_notebooks.py")
    check = subprocess.run([sys.executable, script, "--check", str(dirty)], capture_output=True)
    assert check.returncode == 1
    subprocess.run([sys.executable, script, str(dirty)], check=True, capture_output=True)
    stripped = nbformat.read(dirty, as_version=4)
    assert all(c.get("outputs", []) == [] for c in stripped.cells)
    assert "widgets" not in stripped.metadata
    assert [c.source for c in stripped.cells] == [c.source for c in source.cells]


# ---------------------------------------------------------------- exercises


def exercise_ids():
    return list(load_module(NOTEBOOKS / "checks.py", "course_checks").EXERCISES)


def test_every_exercise_has_a_skeleton_and_a_check_cell(checks):
    assert sorted(checks.EXERCISES) == sorted(SKELETON_HINTS)
    for chapter in CHAPTERS:
        notebook = nbformat.read(notebook_path(chapter), as_version=4)
        tags = {t for cell in notebook.cells for t in cell.get("metadata", {}).get("tags", [])}
        ids = {ex.id for ex in checks.EXERCISES.values() if ex.notebook == f"{chapter}.ipynb"}
        assert ids, f"{chapter} has no exercise"
        assert tags == {f"{kind}-{i}" for i in ids for kind in ("exercise", "check")}, chapter
        for exercise_id in ids:
            skeleton = tagged_cells(notebook, f"exercise-{exercise_id}")
            assert len(skeleton) == 1 and "TODO" in skeleton[0].source, exercise_id
            [check_cell] = tagged_cells(notebook, f"check-{exercise_id}")
            assert f'check("{exercise_id}"' in check_cell.source, exercise_id


@pytest.fixture(scope="module")
def solutions():
    return {chapter: load_module(SOLUTIONS / f"{chapter}.py", f"solutions_{chapter}")
            for chapter in CHAPTERS}


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_checker_accepts_the_solution(exercise_id, checks, solutions):
    exercise = checks.EXERCISES[exercise_id]
    solution = solutions[exercise.notebook.removesuffix(".ipynb")]
    verdict = checks.check(exercise_id, *(getattr(solution, n) for n in exercise.answers))
    assert verdict.passed, repr(verdict)
    assert "correct" in repr(verdict)


SKELETON_PREAMBLE = """\
import torch

import tilelab
import tilelab.language as T

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

"""


def skeleton_module(exercise, tmp_path):
    """The skeleton cell of an exercise, as a module (the magic's line dropped)."""
    notebook = nbformat.read(NOTEBOOKS / exercise.notebook, as_version=4)
    [cell] = tagged_cells(notebook, f"exercise-{exercise.id}")
    lines = [line for line in cell.source.splitlines() if not line.startswith("%")]
    path = tmp_path / f"skeleton_{exercise.id.replace('.', '_')}.py"
    path.write_text(SKELETON_PREAMBLE + "\n".join(lines) + "\n")
    sys.modules.pop(path.stem, None)
    return load_module(path, path.stem)


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_checker_rejects_the_skeleton_with_a_hint(exercise_id, checks, tmp_path):
    exercise = checks.EXERCISES[exercise_id]
    skeleton = skeleton_module(exercise, tmp_path)
    verdict = checks.check(exercise_id, *(getattr(skeleton, n) for n in exercise.answers))
    assert not verdict.passed, repr(verdict)
    assert "not yet" in repr(verdict)
    assert SKELETON_HINTS[exercise_id] in verdict.message, verdict.message


def test_check_never_raises(checks):
    """Wrong types, unknown exercises and kernels that do not compile become verdicts."""
    assert not checks.check("99.9")
    assert not checks.check("01.1")  # no answer given
    assert "@tilelab.jit" in checks.check("01.1", 42).message
    assert not checks.check("01.2", "four", None, [])

    import tilelab
    import tilelab.language as T

    @tilelab.jit
    def add_relu_scale(A, B, scale: float = 2.0):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B: T.Tensor((N,), T.float32)
        C = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, 128), threads=128) as block:
            tile = T.alloc_fragment((128,), T.float32)
            T.copy(A[block * 128], tile)
            T.copy(tile, C[block * 64 : block * 64 + 64])  # 128 elements into 64
        return C

    verdict = checks.check("01.1", add_relu_scale)
    assert not verdict.passed
    assert "could not compile" in verdict.message and "T.copy" in verdict.message
    assert __file__ in verdict.message  # the error names the learner's own line


# ---------------------------------------------------------------- running every notebook


def execute(path: Path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError as err:
        pytest.fail(f"{path.name} failed:\n{err}", pytrace=False)
    return notebook


def cell_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_notebook_runs_top_to_bottom(chapter, checks):
    notebook = execute(notebook_path(chapter))
    for exercise in checks.EXERCISES.values():
        if exercise.notebook != f"{chapter}.ipynb":
            continue
        # the shipped skeleton ran, and its check said "not yet" with its hint (no exception)
        [check_cell] = tagged_cells(notebook, f"check-{exercise.id}")
        text = cell_text(check_cell)
        assert "not yet" in text and SKELETON_HINTS[exercise.id] in text, text
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{chapter} cell {index}: {output}"
            # a TileLabError the magic shows is a lesson in chapter 0 and 8 only
            if "application/vnd.tilelab.error+json" in output.get("data", {}):
                assert chapter in ("00_setup", "08_debugging"), f"{chapter} cell {index}"


# ---------------------------------------------------------------- the example scripts

EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py")
                  if p.name not in ("__init__.py", "common.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_script_runs_on_the_cpu(script):
    out = subprocess.run([sys.executable, str(script), "--device", "cpu"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    assert "check passed" in out.stdout, out.stdout
    assert "speedup" in out.stdout, out.stdout
