"""Builds the wgmma check kernels here: PYTHONPATH=$PWD python bench/wgmma/build.py.

Compiles for cuda:sm_90a without a GPU and exports each kernel; writes manifest.json
for check.py (run on the GPU from the folder the kernels are in; the run of 2026-12-01
used .hopper/, results in bench/results/wgmma_h200.json).
"""
import json
import os
import sys
from pathlib import Path

os.environ["TILELAB_DISABLE_CACHE"] = "1"
sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

import tilelab  # noqa: E402
import tilelab.language as T  # noqa: E402
from examples.flash_attention import flash_attention_kernel as fa  # noqa: E402
from examples.gemm import gemm_kernel  # noqa: E402
from tests.test_wgmma import CONFIGS, matmul  # noqa: E402

OUT = Path(__file__).resolve().parent
OFF = {tilelab.PassConfigKey.TL_DISABLE_WGMMA: True}
manifest = {"checks": [], "bench": []}


def save(section, name, kernel, **info):
    kernel.export(OUT / f"{name}.tilelab")
    instr = [r["instruction"] for r in kernel.trace.instructions]
    res = kernel.trace.resources
    print(f"{name:34} {instr} regs {res['registers']} spills {res['spill_stores_bytes']} "
          f"smem {res['dynamic_smem_bytes']}", flush=True)
    manifest[section].append(dict(info, name=name, artifact=f"{name}.tilelab",
                                  instructions=instr, registers=res["registers"]))


def gemm_inputs(m, n, k, dtype=torch.float16, ta=False, tb=False):
    return (torch.empty((k, m) if ta else (m, k), dtype=dtype),
            torch.empty((n, k) if tb else (k, n), dtype=dtype))


M, N, K = 1000, 776, 520
for name, cfg in CONFIGS.items():
    dt = torch.bfloat16 if cfg.get("dtype") is T.bfloat16 else torch.float16
    a, b = gemm_inputs(M, N, K, dt, cfg.get("trans_a", False), cfg.get("trans_b", False))
    save("checks", f"mm_{name}", matmul.compile(a, b, target="cuda:sm_90a", **cfg),
         kind="gemm", m=M, n=N, k=K, dtype=str(dt).split(".")[1],
         trans_a=cfg.get("trans_a", False), trans_b=cfg.get("trans_b", False))
for dt, tl in ((torch.float16, T.float16), (torch.bfloat16, T.bfloat16)):
    a, b = gemm_inputs(M, N, K, dt)
    tag = str(dt).split(".")[1]
    save("checks", f"course_gemm_{tag}", gemm_kernel.compile(a, b, input_dtype=tl,
         target="cuda:sm_90a"), kind="gemm", m=M, n=N, k=K, dtype=tag)
a, b = gemm_inputs(M, N, K)
save("checks", "course_gemm_ampere", gemm_kernel.compile(a, b, target="cuda:sm_90a",
     pass_configs=OFF), kind="gemm", m=M, n=N, k=K, dtype="float16")
for d in (64, 128):
    for causal in (False, True):
        shape = (2, 4, 1000, d)
        prog = fa.fn(*shape, causal=causal)
        k = tilelab.compile(prog, out_idx=fa.out_idx, target="cuda:sm_90a",
                            pass_configs=fa.pass_configs)
        save("checks", f"fa_d{d}{'_causal' if causal else ''}", k, kind="fa", shape=shape,
             causal=causal)

prog = fa.fn(2, 4, 1000, 128, block_m=128, threads=256)
save("checks", "fa_d128_bm128_w8", tilelab.compile(prog, out_idx=fa.out_idx, target="cuda:sm_90a",
     pass_configs=fa.pass_configs), kind="fa", shape=(2, 4, 1000, 128), causal=False)

BIG = dict(block_m=128, block_n=256, block_k=64, num_stages=3)
for size in (4096, 8192):
    a, b = gemm_inputs(size, size, size)
    save("bench", f"gemm{size}_course_wgmma", gemm_kernel.compile(a, b, target="cuda:sm_90a"),
         kind="gemm", m=size, n=size, k=size, dtype="float16")
    save("bench", f"gemm{size}_course_ampere", gemm_kernel.compile(
        a, b, target="cuda:sm_90a", pass_configs=OFF), kind="gemm", m=size, n=size, k=size,
         dtype="float16")
    save("bench", f"gemm{size}_128x256x64_w8", matmul.compile(
        a, b, target="cuda:sm_90a", block_m=128, block_n=256, block_k=64, stages=3,
        threads=256, policy=T.GemmWarpPolicy.FullRow), kind="gemm", m=size, n=size, k=size,
         dtype="float16")
a, b = gemm_inputs(8192, 8192, 8192, torch.bfloat16)
save("bench", "gemm8192_bf16_128x256x64_w8", matmul.compile(
    a, b, target="cuda:sm_90a", block_m=128, block_n=256, block_k=64, stages=3, threads=256,
    dtype=T.bfloat16, policy=T.GemmWarpPolicy.FullRow), kind="gemm", m=8192, n=8192, k=8192,
     dtype="bfloat16")
shape = (4, 32, 4096, 128)
for name, cfgs, configs in (("fa_d128_wgmma", {}, fa.pass_configs),
                            ("fa_d128_ampere", {}, dict(fa.pass_configs, **OFF)),
                            ("fa_d128_bm128_w8_wgmma", {"block_m": 128, "threads": 256},
                             fa.pass_configs)):
    prog = fa.fn(*shape, **cfgs)
    save("bench", name, tilelab.compile(prog, out_idx=fa.out_idx, target="cuda:sm_90a",
                                        pass_configs=configs), kind="fa", shape=shape,
         causal=False)
(OUT / "manifest.json").write_text(json.dumps(manifest, indent=1))
