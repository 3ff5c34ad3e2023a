"""Suite kernels and their PyTorch baselines launched in turns, for a profiler to compare.

    ncu --kernel-name regex:"gemm|xmma|cutlass|sm90" --section LaunchStats \\
        --section SpeedOfLight -o OUT python bench/ncu_beside_torch.py ROW,ROW,...

Each row's artifact (built with `python bench/gpu_suite.py build`) is loaded without TVM
and called three times, each call followed by its baseline on the same inputs, so the
profile holds both kernels side by side: which kernel PyTorch picked (its name carries the
tile, stages and cluster shape for cuBLAS), its grid and shared memory, and both kernels'
cycles at the profiler's fixed clocks.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(rows: list[str]) -> None:
    import torch

    import tilelab
    from bench.gpu_suite import ARTIFACTS, bench_cases, make_inputs, references

    manifest = bench_cases()
    refs = references()
    for row in rows:
        case = manifest[row]
        kernel = tilelab.load(ARTIFACTS / case["artifact"])
        baseline = refs[case["reference"]]
        torch.manual_seed(0)
        inputs = make_inputs(case["inputs"])
        for _ in range(3):
            kernel(*inputs)
            baseline(*inputs)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1].split(","))
