"""The course kernels on a real GPU, from exported artifacts (no TVM needed to run).

`python bench/gpu_suite.py build` compiles and exports every check kernel; on a
machine with a GPU these tests load them with `tilelab.load` and compare each
with PyTorch on three fresh random input sets (shapes with tails). Without a
GPU they are skipped; without built artifacts too.
"""

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "bench" / "artifacts" / "suite"


def _suite_module():
    spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "bench" / "gpu_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _checks():
    manifest = SUITE / "manifest.json"
    if not manifest.exists():
        return []
    return json.loads(manifest.read_text())["checks"]


@pytest.mark.parametrize("case", _checks() or [None], ids=lambda c: c["name"] if c else "none")
def test_course_kernel_matches_pytorch_on_the_gpu(case):
    if case is None:
        pytest.skip("no built artifacts: run `python bench/gpu_suite.py build` first")
    import torch

    import tilelab

    suite = _suite_module()
    kernel = tilelab.load(SUITE / case["artifact"])
    reference = suite.references()[case["reference"]]
    for seed in range(3):
        torch.manual_seed(seed)
        inputs = suite.make_inputs(case["inputs"])
        out = kernel(*inputs)
        if out is None:  # a kernel that accumulates into its last argument
            out = inputs[-1]
        expected = reference(*inputs)
        error = (out.float() - expected.float()).abs().max().item()
        scale = 1 + expected.float().abs().max().item()
        assert not math.isnan(error) and error <= case["tolerance"] * scale, (seed, error)
