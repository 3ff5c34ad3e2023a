"""The JupyterLab extension (extension/): packaging, its unit tests, and a real browser.

- the prebuilt extension is complete, current with its sources, packaged by
  pyproject.toml's data-files, and listed by `jupyter labextension list`;
- `npm test` runs the renderers' and the editor's unit tests (vitest, jsdom);
- `extension/ui-tests/e2e.mjs` starts JupyterLab headless on loopback, opens a
  notebook with saved tilelab outputs in Debian's Chromium and checks that the
  views render and respond (screenshots in extension/ui-tests/artifacts/).

Without node, the built node_modules or Chromium these tests are skipped, except
under CI (CI=true), where scripts/setup.sh provides them and a skip would hide a
broken setup.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = ROOT / "extension"
BUILT = EXTENSION / "tilelab_labextension"
NOTEBOOK = EXTENSION / "ui-tests" / "tilelab_views.ipynb"
ARTIFACTS = EXTENSION / "ui-tests" / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
VIEWS = ["passes", "source", "layout", "bank_conflicts", "pipeline", "dataflow", "bench",
         "error", "check"]
EVIL = "<img src=x onerror=alert(1)>"


def needs(condition: bool, why: str) -> None:
    """Skip without `condition`; under CI, fail instead (the setup must provide it)."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must have it: scripts/setup.sh installs it)")
    pytest.skip(why)


def node_ready() -> None:
    needs(shutil.which("node") is not None, "node is not installed")
    needs((EXTENSION / "node_modules" / ".bin" / "vitest").exists(),
          "extension/node_modules is missing: run scripts/build_extension.sh")


def sources_hash() -> str:
    """The fingerprint scripts/build_extension.sh records in sources.sha256."""
    files = [EXTENSION / name for name in ("package.json", "package-lock.json", "tsconfig.json",
                                           "install.json", "scripts/build-labextension.mjs")]
    files += [p for folder in ("src", "style") for p in (EXTENSION / folder).rglob("*")
              if p.is_file()]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(EXTENSION).as_posix()):
        digest.update(f"{path.relative_to(EXTENSION).as_posix()}\n".encode())
        digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def run(command, timeout, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


# ---------------------------------------------------------------- packaging


def test_prebuilt_extension_is_complete_and_current():
    package = json.loads((BUILT / "package.json").read_text())
    assert package["name"] == "tilelab"
    build = package["jupyterlab"]["_build"]
    for entry in ("load", "extension", "mimeExtension"):
        assert entry in build, f"the build has no {entry}"
    assert (BUILT / build["load"]).is_file()
    assert json.loads((BUILT / "install.json").read_text())["packageName"] == "tilelab"
    recorded = (BUILT / "sources.sha256").read_text().strip()
    assert recorded == sources_hash(), (
        "extension/tilelab_labextension was built from other sources: "
        "run scripts/build_extension.sh and commit the result")


def test_pyproject_packages_every_prebuilt_file():
    from setuptools.config.pyprojecttoml import read_configuration

    data_files = read_configuration(ROOT / "pyproject.toml")["tool"]["setuptools"]["data-files"]
    pairs = data_files.items() if isinstance(data_files, dict) else data_files  # globs expanded
    packaged = {(Path(target) / Path(source).name).as_posix(): source
                for target, sources in pairs for source in sources}
    needed = {"share/jupyter/labextensions/tilelab/"
              + path.relative_to(BUILT).as_posix(): path for path in BUILT.rglob("*")
              if path.is_file() and path.name != "sources.sha256"}
    assert set(needed) <= set(packaged), set(needed) - set(packaged)


@pytest.mark.slow
def test_the_wheel_brings_the_prebuilt_extension(tmp_path):
    pytest.importorskip("setuptools")
    result = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                  "-w", str(tmp_path), str(ROOT)], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    wheel = next(tmp_path.glob("tilelab-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    prefix = "tilelab-0.1.0.data/data/share/jupyter/labextensions/tilelab/"
    assert prefix + "package.json" in names and prefix + "install.json" in names
    load = json.loads((BUILT / "package.json").read_text())["jupyterlab"]["_build"]["load"]
    assert prefix + load in names


def test_jupyter_labextension_list_shows_it():
    jupyter = Path(sys.executable).parent / "jupyter"
    needs((Path(sys.executable).parent / "jupyter-labextension").exists(),
          "JupyterLab is not installed in this environment")
    result = run([str(jupyter), "labextension", "list"], timeout=120)
    listing = result.stdout + result.stderr
    line = next((ln for ln in listing.splitlines() if ln.strip().startswith("tilelab ")), "")
    assert "enabled" in line and "OK" in line, listing


# ---------------------------------------------------------------- the saved notebook


def test_the_saved_notebook_has_every_view():
    notebook = json.loads(NOTEBOOK.read_text())
    payloads = [(mime, data) for cell in notebook["cells"] for output in cell.get("outputs", [])
                for mime, data in output.get("data", {}).items() if "vnd.tilelab" in mime]
    views = {mime.split(".")[2].removesuffix("+json") for mime, _ in payloads}
    assert set(VIEWS) <= views
    assert all(data["version"] == 1 for _, data in payloads)
    assert sum(data["kernel"] == EVIL for _, data in payloads) == 3
    flash = max((data for mime, data in payloads if mime.endswith("passes+json")),
                key=lambda data: len(data["passes"]))
    assert len(flash["passes"]) > 20  # every pass of the FlashAttention trace


# ---------------------------------------------------------------- node


def test_unit_tests():
    node_ready()
    result = run(["npm", "test", "--silent"], timeout=600, cwd=EXTENSION)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout


def test_views_render_and_respond_in_chromium():
    node_ready()
    needs(Path(CHROMIUM).exists(), f"no Chromium at {CHROMIUM}")
    jupyter = Path(sys.executable).parent / "jupyter"
    needs(jupyter.exists(), "JupyterLab is not installed in this environment")
    env = {**os.environ, "JUPYTER": str(jupyter), "CHROMIUM": CHROMIUM}
    result = run(["node", "ui-tests/e2e.mjs"], timeout=300, cwd=EXTENSION, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    report = json.loads((ARTIFACTS / "e2e-results.json").read_text())
    assert report["failed"] == 0 and report["passed"] >= 10, output[-8000:]
    flash = report["timings"]["flash_attention"]
    assert flash["passes"] > 20
    assert max(flash["render_ms"], flash["biggest_ir_ms"], flash["biggest_diff_ms"]) < 1000
    assert (ARTIFACTS / "e2e.png").stat().st_size > 10_000
