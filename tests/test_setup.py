"""The set-up leaves a user's checkout as it was cloned.

`scripts/setup.sh` builds the JupyterLab extension on machines with Node.js; webpack
names its files after where the venv lives, so the build goes to a git-ignored folder
(extension/build/) and never rewrites the tracked prebuilt copy. CI runs this after
the set-up, on a fresh clone.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout")
def test_setup_changed_no_tracked_file():
    # the folder a build used to rewrite (a developer's edits elsewhere are their own)
    status = subprocess.run(["git", "status", "--porcelain", "--",
                             "extension/tilelab_labextension"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert status == "", status


def test_the_venv_uses_an_extension_build_outside_tracked_paths():
    link = ROOT / ".venv" / "share" / "jupyter" / "labextensions" / "tilelab"
    if not link.is_symlink():
        pytest.skip("no venv made by scripts/setup.sh")
    target = link.resolve()
    assert target in (ROOT / "extension" / "build" / "tilelab_labextension",
                      ROOT / "extension" / "tilelab_labextension")
    assert (target / "package.json").exists()
