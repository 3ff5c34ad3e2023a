"""The autotuner's numbers (issue 16): compile-phase speed-up, tune time, winner vs peers.

    python bench/autotune.py [--device cuda|cpu] [--json bench/results/autotune_<device>.json]

For each kernel (the course GEMM, FlashAttention forward with head dim 128):

* **compile phase**: the same candidates compiled with one worker and with one per core,
  each into an empty compile cache; the speed-up is the ratio of the two compile phases
  (with --serial-configs N, the one-worker run compiles N candidates spread evenly over the
  sweep and the ratio is of the time per candidate);
* **whole tune**: wall time of a tune from an empty compile cache (no results cache), with
  every core and every visible GPU;
* **winner** against the hand-picked default configuration and the vendor library
  (torch: cuBLAS, SDPA), all timed with `tilelab.profiler.do_bench` in this process;
* with two or more GPUs: the benchmark phase on one GPU and on two (compile cache warm).

On a GPU: GEMM 8192³ over 64 configurations, FlashAttention (batch 4, 32 heads, 4096,
d128) over 36. On the CPU (`--device cpu`): small sizes and sweeps, to measure the compile
phase on this machine's cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tilelab  # noqa: E402
from examples.flash_attention import flash_attention_kernel  # noqa: E402
from examples.gemm import gemm_kernel  # noqa: E402
from tilelab.profiler import do_bench  # noqa: E402


def fresh_cache() -> None:
    """An empty compile cache for what follows (forked workers inherit the variable)."""
    os.environ["TILELAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilelab-bench-autotune-")


def tune(jit, configs, args, **options):
    tuner = tilelab.autotune(configs=configs, cache_results=False, show=False, **options)(jit)
    started = time.perf_counter()
    kernel = tuner.compile(*args)
    return kernel, time.perf_counter() - started


def sweep(name, jit, configs, args, default, baseline, inputs, serial_configs, cores,
          warmup, rep) -> dict:
    """One kernel's numbers; `default` is the hand-picked config, `baseline` the vendor's."""
    n = len(configs)
    print(f"{name}: {n} configurations, {cores} cores, {torch.cuda.device_count()} GPUs",
          flush=True)
    fresh_cache()
    # with --serial-configs N: a seeded random sample of N candidates (every Nth one of a
    # cartesian product would keep the inner knobs fixed: stages 1 and 128 threads, the
    # quickest to compile, for the FlashAttention sweep)
    serial = random.Random(1).sample(configs, min(serial_configs, n)) if serial_configs \
        else configs
    one, _ = tune(jit, serial, args, compile_workers=1, warmup=warmup, rep=rep)
    serial_s = one.autotune_result.seconds["compile"]
    serial_n = len(one.autotune_result.rows)
    fresh_cache()
    kernel, wall_s = tune(jit, configs, args, compile_workers=cores, warmup=warmup, rep=rep)
    result = kernel.autotune_result
    parallel_s, parallel_n = result.seconds["compile"], len(result.rows)
    speedup = (serial_s / serial_n) / (parallel_s / parallel_n)
    hand = jit.compile(*args, **default)
    times = {"winner_ms": do_bench(lambda: kernel(*inputs), warmup=warmup, rep=rep),
             "hand_picked_ms": do_bench(lambda: hand(*inputs), warmup=warmup, rep=rep),
             "vendor_ms": do_bench(lambda: baseline(*inputs), warmup=warmup, rep=rep)}
    row = {"kernel": name, "configs": parallel_n, "device": result.device,
           "compile_serial_s": serial_s, "compile_serial_configs": serial_n,
           "compile_parallel_s": parallel_s, "compile_workers": cores,
           "compile_speedup": speedup, "compile_speedup_goal": 0.7 * cores,
           "tune_wall_s": wall_s, "benchmark_s": result.seconds["benchmark"],
           "winner": kernel.config, "hand_picked": default,
           "failed": sum(r["status"] != "ok" for r in result.rows), **times,
           "winner_vs_hand_picked": times["hand_picked_ms"] / times["winner_ms"],
           "winner_vs_vendor": times["vendor_ms"] / times["winner_ms"],
           # where the compile phase's time went: each candidate's own compile seconds in
           # the parallel run (the longest bounds the phase from below)
           "compile_longest_s": max((r["compile_s"] or 0.0) for r in result.rows),
           "compile_work_s": sum((r["compile_s"] or 0.0) for r in result.rows),
           "candidates": [{**r["config"], "compile_s": r["compile_s"], "status": r["status"]}
                          for r in result.rows]}
    if torch.cuda.device_count() >= 2:  # the benchmark phase on one GPU, then on two
        phases = []
        for gpus in (["0"], ["0", "1"]):
            k, _ = tune(jit, configs, args, gpus=gpus, warmup=warmup, rep=rep)
            phases.append(k.autotune_result.seconds["benchmark"])
        row.update(benchmark_1gpu_s=phases[0], benchmark_2gpu_s=phases[1],
                   benchmark_2gpu_ratio=phases[1] / phases[0])
    print(json.dumps(row, indent=1), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"],
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--serial-configs", type=int, default=None,
                        help="candidates the one-worker compile phase compiles (default: all)")
    parser.add_argument("--only", choices=["gemm", "flash"], default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = args.device
    cores = len(os.sched_getaffinity(0))
    gpu = device == "cuda"
    rows = []

    if args.only in (None, "gemm"):
        size = 8192 if gpu else 256
        a = torch.randn(size, size, dtype=torch.float16, device=device)
        b = torch.randn(size, size, dtype=torch.float16, device=device)
        if gpu:
            # 64 candidates; the two warpgroups (256 threads) carry 128×256 tiles, and
            # 128×256×64 in 5 stages asks more shared memory than a block has (a failure
            # the table must show)
            configs = {"block_m": [64, 128], "block_n": [128, 256], "block_k": [32, 64],
                       "num_stages": [2, 3, 4, 5], "threads": [128, 256], "panel": [8]}
        else:
            configs = {"block_m": [32, 64], "block_n": [32, 64], "block_k": [32, 64]}
        configs = [dict(zip(configs, v)) for v in itertools.product(
            *configs.values())]
        default = {"block_m": 128, "block_n": 128, "block_k": 32, "num_stages": 3} if gpu \
            else {"block_m": 64, "block_n": 64, "block_k": 32}
        rows.append(sweep(f"gemm {size}³ fp16", gemm_kernel, configs, (a, b), default,
                          lambda a, b: a @ b, (a, b), args.serial_configs, cores,
                          25 if gpu else 2, 100 if gpu else 5))

    if args.only in (None, "flash"):
        batch, heads, seq, dim = (4, 32, 4096, 128) if gpu else (1, 2, 128, 64)
        q, k, v = (torch.randn(batch, heads, seq, dim, dtype=torch.float16, device=device)
                   for _ in range(3))
        if gpu:
            # 64 candidates, like the GEMM's; K and V tiles of 256 rows in 2 or more stages
            # ask more shared memory than a block has (failures the table must show)
            configs = {"block_m": [64, 128], "block_n": [32, 64, 128, 256],
                       "num_stages": [1, 2, 3, 4], "threads": [128, 256]}
        else:
            configs = {"block_m": [32, 64], "block_n": [32, 64], "num_stages": [1, 2]}
        configs = [dict(zip(configs, c)) for c in itertools.product(
            *configs.values())]
        default = {"block_m": 64, "block_n": 64, "num_stages": 2, "threads": 128} if gpu \
            else {"block_m": 64, "block_n": 64, "num_stages": 2}
        rows.append(sweep(f"flash attention d{dim}", flash_attention_kernel, configs,
                          (batch, heads, seq, dim), default,
                          lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (q, k, v),
                          args.serial_configs, cores, 25 if gpu else 2, 100 if gpu else 5))

    path = Path(args.json or ROOT / "bench" / "results" / f"autotune_{device}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1) + "\n")
    print(f"{'kernel':24} {'configs':>7} {'compile 1w s':>12} {'compile Nw s':>12} "
          f"{'speed-up':>8} {'tune s':>7} {'vs hand':>7} {'vs vendor':>9}")
    for r in rows:
        print(f"{r['kernel']:24} {r['configs']:>7} {r['compile_serial_s']:>12.1f} "
              f"{r['compile_parallel_s']:>12.1f} {r['compile_speedup']:>8.2f} "
              f"{r['tune_wall_s']:>7.1f} {r['winner_vs_hand_picked']:>7.2f} "
              f"{r['winner_vs_vendor']:>9.2f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
