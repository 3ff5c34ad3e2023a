"""Measured pipeline replay: record %globaltimer inside pipelined loops on the GPU.

    python bench/pipeline_replay.py build    # here: instrumented kernels -> bench/artifacts/replay
    python bench/pipeline_replay.py run      # GPU machine: run them, write the timelines to
                                             # bench/results/pipeline_measured.json

Each record holds the planned schedule (the Trace's pipeline plan) and the measured
rows of `tilelab.instrument.measured_rows`, which `tilelab.viz.pipeline_view` overlays.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "bench" / "artifacts" / "replay"
sys.path.insert(0, str(ROOT))

CASES = [  # name, M=N=K, num_stages, block_k
    ("gemm_4096_stages2", 4096, 2, 32),
    ("gemm_4096_stages3", 4096, 3, 32),
    # 128 KB of tiles: a producer warpgroup and one consumer warpgroup (warp-specialized)
    ("gemm_4096_bk64_stages4_split", 4096, 4, 64),
]


def build() -> None:
    import tilelab
    from examples.gemm import gemm_kernel

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, size, stages, block_k in CASES:
        kernel = gemm_kernel.compile(
            M=size, N=size, K=size, num_stages=stages, block_k=block_k, target="cuda",
            pass_configs={tilelab.PassConfigKey.TL_INSTRUMENT_PIPELINE: 4})
        kernel.export(ARTIFACTS / f"{name}.tilelab")
        manifest.append({"name": name, "size": size, "num_stages": stages,
                         "plan": kernel.trace.pipelines[0]})
        print(f"built {name}")
    (ARTIFACTS / "manifest.json").write_text(json.dumps(manifest, indent=1))


def run(out: Path) -> None:
    import torch

    import tilelab
    from tilelab.instrument import measured_rows

    records = []
    for case in json.loads((ARTIFACTS / "manifest.json").read_text()):
        kernel = tilelab.load(ARTIFACTS / f"{case['name']}.tilelab")
        a = torch.randn(case["size"], case["size"], device="cuda", dtype=torch.float16)
        b = torch.randn_like(a)
        for _ in range(3):  # warm up; keep the last run's stamps
            c, timeline = kernel(a, b)
        torch.cuda.synchronize()
        torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-2)
        rows = measured_rows(timeline, specialized=bool(case["plan"].get("warp_specialized")))
        records.append({"kernel": case["name"], "device": torch.cuda.get_device_name(),
                        "plan": case["plan"], "measured": rows})
        computes = [r["end_ns"] - r["start_ns"] for r in rows if r["kind"] == "compute"]
        waits = [r["end_ns"] - r["start_ns"] for r in rows if r["kind"] == "wait"]
        median = sorted(computes)[len(computes) // 2]
        print(f"{case['name']}: {len(rows)} rows; median compute {median} ns, "
              f"median wait {sorted(waits)[len(waits) // 2]} ns")
    out.write_text(json.dumps(records, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["build", "run"])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" /
                                             "pipeline_measured.json"))
    args = parser.parse_args()
    build() if args.mode == "build" else run(Path(args.out))


if __name__ == "__main__":
    main()
