"""Same program, two compilers: the course's kernels through tilelab and through TileLang.

    python bench/peer_tilelang.py --tilelang-site DIR [--json OUT] [--rounds 2]
    python bench/peer_tilelang.py --tilelang-site DIR --compile-only   # no GPU needed

The sources are the course's own (examples/gemm.py, examples/flash_attention.py,
examples/softmax.py), imported unchanged: in the TileLang process a stand-in module named
`tilelab` hands their `@tilelab.jit` and `import tilelab.language as T` to TileLang's
`tilelang.jit` and `tilelang.language`. TileLang brings its own TVM, which cannot share a
process (or a path) with apache-tvm 0.27, so each compiler runs in a process of its own,
`--tilelang-site` being the directory TileLang was installed into (`pip install --target`).

Each process times every program and PyTorch's own kernel for it in the same way (CUDA
events, warm-up, L2 flushed before every launch, median), on the same seeded inputs, and
checks each output against PyTorch. The processes alternate, `--rounds` times each; the
table keeps, per program and compiler, the median over rounds, and the ratio of the two
compilers' times. `--compile-only` compiles every program for sm_90a in both processes and
reports what each emitted (no GPU): a check that the sources go through both unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> (example module, sizes, options): the course kernels as the course runs
# them on the H200 (docs/PERFORMANCE.md), GEMM at its default and at its fastest config
PROGRAMS = {
    "gemm_128x128x32_s3": ("gemm", {"m": 8192, "n": 8192, "k": 8192},
                           {"block_m": 128, "block_n": 128, "block_k": 32, "num_stages": 3}),
    "gemm_128x256x64_s4_t256": ("gemm", {"m": 8192, "n": 8192, "k": 8192},
                                {"block_m": 128, "block_n": 256, "block_k": 64,
                                 "num_stages": 4, "threads": 256}),
    "gemm_128x256x64_s4_t256_panel8": ("gemm", {"m": 8192, "n": 8192, "k": 8192},
                                       {"block_m": 128, "block_n": 256, "block_k": 64,
                                        "num_stages": 4, "threads": 256, "panel": 8}),
    "flash_attention_d128": ("flash_attention", {"b": 4, "h": 32, "s": 4096, "d": 128},
                             {"block_m": 64, "block_n": 64, "num_stages": 2, "threads": 128}),
    "flash_attention_d128_bm128_w8": ("flash_attention", {"b": 4, "h": 32, "s": 4096, "d": 128},
                                      {"block_m": 128, "block_n": 64, "num_stages": 2,
                                       "threads": 256}),
    "flash_attention_d128_causal": ("flash_attention", {"b": 4, "h": 32, "s": 4096, "d": 128},
                                    {"block_m": 64, "block_n": 64, "num_stages": 2,
                                     "threads": 128, "causal": True}),
    "flash_attention_d128_causal_bm128_w8": ("flash_attention",
                                             {"b": 4, "h": 32, "s": 4096, "d": 128},
                                             {"block_m": 128, "block_n": 64, "num_stages": 2,
                                              "threads": 256, "causal": True}),
    "flash_attention_d128_bm128_bn128_w8": ("flash_attention",
                                            {"b": 4, "h": 32, "s": 4096, "d": 128},
                                            {"block_m": 128, "block_n": 128, "num_stages": 2,
                                             "threads": 256}),
    "softmax": ("softmax", {"m": 8192, "n": 8192}, {}),
}


# ---------------------------------------------------------------- inside one compiler's process


def use_tilelang() -> None:
    """Make `import tilelab` (as the course sources write it) import TileLang."""
    import tilelang
    import tilelang.language as language

    target = os.environ.get("PEER_TARGET")

    def jit(fn=None, **options):
        if target:
            options.setdefault("target", json.loads(target))
        return tilelang.jit(fn, **options) if fn is not None else \
            (lambda f: tilelang.jit(f, **options))

    stand_in = types.ModuleType("tilelab")
    stand_in.jit, stand_in.language = jit, language
    stand_in.PassConfigKey = tilelang.PassConfigKey
    profiler = types.ModuleType("tilelab.profiler")
    profiler.do_bench = lambda fn, **_: time_ms(fn)
    stand_in.profiler = profiler
    sys.modules.update({"tilelab": stand_in, "tilelab.language": language,
                        "tilelab.profiler": profiler})


def time_ms(fn, warmup: int = 10, rep: int = 50) -> float:
    """Median milliseconds of `fn()`: CUDA events around each call, L2 flushed before it."""
    import torch

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rep):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def program(name: str, device: str):
    """(our call, PyTorch's call, the check) of one program, on seeded inputs."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    module_name, sizes, options = PROGRAMS[name]
    module = __import__(f"examples.{module_name}", fromlist=["_"])
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator, device=device, dtype=torch.float16)

    if module_name == "gemm":
        a, b = randn(sizes["m"], sizes["k"]), randn(sizes["k"], sizes["n"])

        def ours():
            return module.gemm_kernel(a, b, **options)

        return ours, (lambda: a @ b), (lambda out: (out.float() - (a @ b).float()).abs().max()
                                        / (a @ b).float().abs().max())
    if module_name == "flash_attention":
        q, k, v = (randn(sizes["b"], sizes["h"], sizes["s"], sizes["d"]) for _ in range(3))
        causal = options.get("causal", False)
        kernel = module.flash_attention_kernel(sizes["b"], sizes["h"], sizes["s"], sizes["d"],
                                               **options)

        def sdpa():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return (lambda: kernel(q, k, v)), sdpa, \
            (lambda out: (out.float() - sdpa().float()).abs().max())
    x = randn(sizes["m"], sizes["n"])
    return (lambda: module.softmax_kernel(x, **options)), (lambda: torch.softmax(x, dim=-1)), \
        (lambda out: (out.float() - torch.softmax(x.float(), dim=-1)).abs().max())


def compile_only(name: str, compiler: str) -> dict:
    """Trace and compile one program for sm_90a without a GPU: what the compiler emitted."""
    import torch

    module_name, sizes, options = PROGRAMS[name]
    # TileLang's target rides on its jit (PEER_TARGET); tilelab's is the compile's
    options = dict(options, **({"target": "cuda:sm_90a"} if compiler == "tilelab" else {}))
    module = __import__(f"examples.{module_name}", fromlist=["_"])
    meta = "meta" if module_name != "flash_attention" else None
    started = time.perf_counter()
    if module_name == "gemm":
        a = torch.empty(sizes["m"], sizes["k"], dtype=torch.float16, device=meta)
        b = torch.empty(sizes["k"], sizes["n"], dtype=torch.float16, device=meta)
        kernel = module.gemm_kernel.compile(a, b, **options)
    elif module_name == "flash_attention":
        kernel = module.flash_attention_kernel.compile(sizes["b"], sizes["h"], sizes["s"],
                                                       sizes["d"], **options) \
            if compiler == "tilelab" else \
            module.flash_attention_kernel(sizes["b"], sizes["h"], sizes["s"], sizes["d"],
                                          **options)
    else:
        x = torch.empty(sizes["m"], sizes["n"], dtype=torch.float16, device=meta)
        kernel = module.softmax_kernel.compile(x, **options)
    source = kernel.get_kernel_source()
    return {"compile_s": round(time.perf_counter() - started, 2), "source_chars": len(source),
            "wgmma": "wgmma" in source, "tma": "cp.async.bulk.tensor" in source or
            "tma_load" in source}


def worker(compiler: str, names: list, only_compile: bool) -> dict:
    if compiler == "tilelang":
        use_tilelang()
    sys.path.insert(0, str(ROOT))
    rows = {}
    for name in names:
        try:
            if only_compile:
                rows[name] = compile_only(name, compiler)
                continue
            ours, theirs, error = program(name, "cuda")
            started = time.perf_counter()
            out = ours()  # compiles (or loads from the compile cache)
            compile_s = time.perf_counter() - started
            rows[name] = {"ms": time_ms(ours), "torch_ms": time_ms(theirs),
                          "max_error": float(error(out)), "first_call_s": round(compile_s, 2)}
        except Exception as err:  # noqa: BLE001 - a program one compiler refuses is a result
            rows[name] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
        print(compiler, name, rows[name], flush=True)
    return rows


# ---------------------------------------------------------------- the driver


def run(compiler: str, site: str, names: list, only_compile: bool) -> dict:
    env = dict(os.environ)
    if compiler == "tilelang":  # TileLang's own TVM only: nothing of apache-tvm 0.27
        env["PYTHONPATH"] = os.pathsep.join([site, str(ROOT)])
        if only_compile:
            env["PEER_TARGET"] = json.dumps({"kind": "cuda", "arch": "sm_90a"})
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, "--worker", compiler, "--only", ",".join(names)]
    done = subprocess.run(command + (["--compile-only"] if only_compile else []), env=env,
                          capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        said = (done.stderr or done.stdout).strip().splitlines()
        return {n: {"error": said[-1] if said else f"exit {done.returncode}"} for n in names}
    return json.loads(lines[-1])


def _machine() -> str:
    """The GPU's name as nvidia-smi gives it (this process has no CUDA context)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
        return done.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return "no GPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tilelang-site", default=os.environ.get("TILELANG_SITE"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default=",".join(PROGRAMS))
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--worker", choices=["tilelang", "tilelab"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    if args.worker:
        print(json.dumps(worker(args.worker, names, args.compile_only)), flush=True)
        return
    if not args.tilelang_site:
        parser.error("give --tilelang-site (where `pip install --target` put TileLang)")
    rounds = {"tilelang": [], "tilelab": []}
    for _ in range(1 if args.compile_only else args.rounds):
        for compiler in ("tilelang", "tilelab"):  # alternated, the same GPU
            rounds[compiler].append(run(compiler, args.tilelang_site, names, args.compile_only))
    table = {}
    for name in names:
        row = {}
        for compiler, results in rounds.items():
            runs = [r[name] for r in results]
            if args.compile_only or any("error" in r for r in runs):
                row[compiler] = runs[-1]
                continue
            row[compiler] = {"ms": statistics.median(r["ms"] for r in runs),
                             "torch_ms": statistics.median(r["torch_ms"] for r in runs),
                             "max_error": max(r["max_error"] for r in runs),
                             "rounds": [r["ms"] for r in runs]}
        if "ms" in row["tilelab"] and "ms" in row["tilelang"]:
            row["tilelab_vs_tilelang"] = row["tilelang"]["ms"] / row["tilelab"]["ms"]
        table[name] = row
        print(name, json.dumps(row), flush=True)
    out = {"command": " ".join(["python", "bench/peer_tilelang.py", *sys.argv[1:]]),
           "machine": _machine(), "date": time.strftime("%Y-%m-%d"),
           "programs": {n: {"sizes": PROGRAMS[n][1], "options": PROGRAMS[n][2]} for n in names},
           "results": table}
    path = Path(args.json) if args.json else None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
