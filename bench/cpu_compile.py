"""Compile time and CPU speed, the numbers of the compiler-core issue.

    python bench/cpu_compile.py [--json bench/results/cpu_compile.json]

* cold compile of the course GEMM for the CPU (empty cache, in a fresh process,
  TVM already imported - the import itself is reported separately);
* warm compile (the same kernel again in a new process: a disk-cache hit);
* a 512x512x512 float32 GEMM kernel on the CPU, beside torch.matmul;
* where nvcc is installed (no GPU needed), cold compiles for sm_90a of the course GEMM
  (8192^3) and FlashAttention (b4 h32 s4096 d128), nvcc included: what a GPU user waits
  for before a `%%tilekernel` cell runs, less the launch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r'''
import json, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import torch, tvm, tilelab, tilelab.language as T
imports = time.perf_counter() - t0
from examples.gemm import gemm_kernel
t0 = time.perf_counter()
kernel = gemm_kernel.compile(M=512, N=512, K=512, input_dtype=T.float32, target="cpu")
compile_s = time.perf_counter() - t0
a, b = torch.randn(512, 512), torch.randn(512, 512)
torch.testing.assert_close(kernel(a, b), a @ b, rtol=1e-3, atol=1e-3)
from tilelab.profiler import do_bench
run_ms = do_bench(lambda: kernel(a, b), warmup=2, rep=10, backend="wall")
torch_ms = do_bench(lambda: a @ b, warmup=2, rep=10, backend="wall")
cuda = {{}}
from tilelab.backends.cuda.nvcc import find_nvcc
if find_nvcc() is not None and not kernel.trace.cache_hit:
    from examples.flash_attention import flash_attention_kernel as fa
    t0 = time.perf_counter()
    gemm_kernel.compile(M=8192, N=8192, K=8192, target="cuda:sm_90a")
    cuda["gemm_sm90a_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tilelab.compile(fa.fn(4, 32, 4096, 128), out_idx=fa.out_idx, target="cuda:sm_90a",
                    pass_configs=fa.pass_configs)
    cuda["flash_attention_sm90a_s"] = time.perf_counter() - t0
print(json.dumps({{"imports_s": imports, "compile_s": compile_s, "cache_hit":
                  kernel.trace.cache_hit, "gemm512_fp32_ms": run_ms, "torch_ms": torch_ms,
                  **cuda}}))
'''


def probe(cache: str) -> dict:
    env = dict(os.environ, TILELAB_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT))], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        cold, warm = probe(cache), probe(cache)
    result = {"machine": f"{os.cpu_count()} cores", "cold": cold, "warm": warm}
    print(f"imports (torch, tvm, tilelab): {cold['imports_s']:.2f} s")
    print(f"cold compile, course GEMM for CPU: {cold['compile_s'] * 1e3:.0f} ms "
          f"(cache hit: {cold['cache_hit']})")
    print(f"warm compile (disk cache):         {warm['compile_s'] * 1e3:.0f} ms "
          f"(cache hit: {warm['cache_hit']})")
    print(f"512^3 fp32 GEMM on CPU: {cold['gemm512_fp32_ms']:.1f} ms "
          f"(torch.matmul {cold['torch_ms']:.1f} ms)")
    if "gemm_sm90a_s" in cold:
        print(f"cold compile for sm_90a (nvcc included): course GEMM "
              f"{cold['gemm_sm90a_s']:.2f} s, "
              f"FlashAttention {cold['flash_attention_sm90a_s']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
