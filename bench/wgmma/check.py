"""wgmma kernels built on the CPU machine (build.py), checked and timed on the GPU.

    cd .hopper && PYTHONPATH=$PWD/.. python3 check.py

Loads each exported kernel with tilelab.load (runtime only, no TVM), checks it on fresh
random inputs with tails against torch (fp32 references), then times the GEMM and
FlashAttention kernels against torch.matmul / SDPA: CUDA events, warm-up, median of 50,
L2 flushed before each call, kernel and baseline alternated three times.
"""
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

import tilelab
from tilelab.profiler import do_bench

HERE = Path(__file__).resolve().parent
OUT = Path(os.environ.get("OUT", HERE))
manifest = json.loads((HERE / "manifest.json").read_text())
assert "tvm" not in sys.modules
print(f"device {torch.cuda.get_device_name()} cc {torch.cuda.get_device_capability()} "
      f"torch {torch.__version__}", flush=True)
results = {"device": torch.cuda.get_device_name(), "checks": [], "bench": []}


def inputs(case, seed):
    torch.manual_seed(seed)
    if case["kind"] == "gemm":
        dt = getattr(torch, case["dtype"])
        m, n, k = case["m"], case["n"], case["k"]
        a = torch.randn((k, m) if case.get("trans_a") else (m, k), dtype=dt, device="cuda")
        b = torch.randn((n, k) if case.get("trans_b") else (k, n), dtype=dt, device="cuda")
        return [a, b]
    return [torch.randn(case["shape"], dtype=torch.float16, device="cuda") for _ in range(3)]


def reference(case, args):
    if case["kind"] == "gemm":
        a, b = args
        a = a.float().T if case.get("trans_a") else a.float()
        b = b.float().T if case.get("trans_b") else b.float()
        return a @ b
    q, k, v = (x.float() for x in args)
    return F.scaled_dot_product_attention(q, k, v, is_causal=case["causal"])


def baseline(case, args):
    if case["kind"] == "gemm":
        return lambda: torch.matmul(*args)
    return lambda: F.scaled_dot_product_attention(*args, is_causal=case["causal"])


failures = 0
for case in manifest["checks"]:
    try:
        kernel = tilelab.load(HERE / case["artifact"])
        rel = []
        for seed in range(3):
            args = inputs(case, seed)
            out = kernel(*args)
            ref = reference(case, args)
            torch.cuda.synchronize()
            err = (out.float() - ref).abs().max().item()
            rel.append(err / ref.abs().max().item())
        limit = 2e-2 if case.get("dtype") == "bfloat16" else (2e-2 if case["kind"] == "fa"
                                                              else 5e-3)
        ok = all(r == r and r <= limit for r in rel)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        rel, ok = [float("nan")], False
    failures += not ok
    print(f"check {case['name']:30} {case['instructions'][0]:16} max rel err "
          f"{max(rel):.2e}  {'ok' if ok else 'FAIL'}", flush=True)
    results["checks"].append({"name": case["name"], "rel_err": rel, "ok": ok})

for case in manifest["bench"]:
    try:
        kernel = tilelab.load(HERE / case["artifact"])
        args = inputs(case, 0)
        out = kernel(*args)
        ref = baseline(case, args)()
        err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        ours_fn = lambda kernel=kernel, args=args: kernel(*args)  # noqa: E731
        theirs_fn = baseline(case, args)
        pairs = [(do_bench(ours_fn, warmup=10, rep=50), do_bench(theirs_fn, warmup=10, rep=50))
                 for _ in range(3)]
        ours = sorted(p[0] for p in pairs)[1]
        theirs = sorted(p[1] for p in pairs)[1]
        if case["kind"] == "gemm":
            flops = 2 * case["m"] * case["n"] * case["k"]
        else:
            b, h, s, d = case["shape"]
            flops = 4 * b * h * s * s * d
        row = {"name": case["name"], "ms": ours, "torch_ms": theirs, "ratio": theirs / ours,
               "TFLOPs": flops / ours / 1e9, "torch_TFLOPs": flops / theirs / 1e9,
               "rel_err": err, "instructions": case["instructions"],
               "registers": case["registers"]}
        print(f"bench {case['name']:30} {ours:7.3f} ms {row['TFLOPs']:6.1f} TFLOP/s  torch "
              f"{theirs:7.3f} ms {row['torch_TFLOPs']:6.1f}  x{row['ratio']:.2f}  "
              f"rel err {err:.1e}", flush=True)
        results["bench"].append(row)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        failures += 1
(OUT / "results.json").write_text(json.dumps(results, indent=1))
print(f"{failures} failure(s)")
