"""The course notebooks run on the CPU and on a GPU: nothing in them names one backend only.

A `%%tilekernel --passes NAME ...` line that names a pass of one backend's list fails
on the other machine (the GPU check found three such cells). Pass names in the
notebooks must be in both lists, or come from a variable (`{lowering}`).
"""

import json
import re
import shlex
from pathlib import Path

import pytest

from tilelab.backends.cuda.nvcc import find_nvcc

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def pass_names(target: str) -> set:
    from examples.gemm import gemm_kernel

    return set(gemm_kernel.compile(M=64, N=64, K=64, target=target).trace.pass_names())


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc for the CUDA pass list")
def test_passes_named_in_the_notebooks_exist_on_both_backends():
    both = pass_names("cpu") & pass_names("cuda:sm_90a")
    named = []
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            first = "".join(cell["source"]).split("\n", 1)[0]
            if cell["cell_type"] != "code" or not first.startswith("%%tilekernel"):
                continue
            words = shlex.split(first)
            if "--passes" not in words:
                continue
            for word in words[words.index("--passes") + 1:]:
                if word.startswith("-"):
                    break
                if word not in ("all", "changed") and not re.fullmatch(r"\{\w+\}", word):
                    named.append((path.name, word))
    assert named, "no notebook names a pass: is the test still looking at the right lines?"
    missing = [(name, word) for name, word in named if word not in both]
    assert not missing, missing
