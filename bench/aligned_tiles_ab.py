"""wgmma tile alignment checked once per kernel, against a check before every T.gemm.

    python bench/aligned_tiles_ab.py OUT.json

On the GPU machine, in one process, each program is compiled twice as a notebook cell
would compile it: by default (`before`: the wgmma lowering's trap before every T.gemm of
every iteration) and with `tl.enable_alignment_check_once` (`after`:
passes/aligned_tiles_once.py proves the tiles' offsets and checks the shared buffer's
start once). FlashAttention d128 with 128x128 tiles, b4 h32 s4096 fp16, non-causal
and causal, beside SDPA (bench/fa_variants.py's `measure`: checked on three inputs with
tails and on the timed shape); the GEMM fp16 8192³ with 128x256x64 tiles, 3 stages, 256
threads, panels of 8, beside torch.matmul. Modes alternate before, after, before, after;
each row is the middle of three medians (CUDA events, L2 flushed).
"""

import json
import os
import sys
from pathlib import Path

os.environ["TILELAB_DISABLE_CACHE"] = "1"  # compiled here, as the notebook would
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench.fa_variants as fa_variants  # noqa: E402
from examples.gemm import gemm_kernel  # noqa: E402
from tilelab.profiler import do_bench  # noqa: E402


def asked(mode: str) -> dict:
    return {"tl.enable_alignment_check_once": True} if mode == "after" else {}


def gemm_row(mode: str) -> dict:
    kernel = gemm_kernel.compile(M=8192, N=8192, K=8192, block_m=128, block_n=256, block_k=64,
                                 num_stages=3, threads=256, panel=8, target="cuda",
                                 pass_configs=asked(mode))
    torch.manual_seed(1)
    a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.float16) for _ in range(2))
    err = (kernel(a, b).float() - (a @ b).float()).abs().max().item()
    pairs = [(do_bench(lambda: kernel(a, b), warmup=10, rep=50),
              do_bench(lambda: a @ b, warmup=10, rep=50)) for _ in range(3)]
    ms, ref = (sorted(p[i] for p in pairs)[1] for i in (0, 1))
    return {"name": f"gemm_128x256_{mode}", "ms": ms, "matmul_ms": ref, "ratio": ref / ms,
            "TFLOPs": 2 * 8192 ** 3 / ms / 1e9, "max_abs_err": err, "pairs": pairs,
            "checks_in_source": kernel.get_kernel_source().count("wgmma_check_aligned<")}


def main() -> None:
    out = Path(sys.argv[1])
    results = {"device": torch.cuda.get_device_name(), "rows": [],
               "command": "python bench/aligned_tiles_ab.py " + " ".join(sys.argv[1:])}
    for mode in ("before", "after", "before", "after"):
        for name, causal in (("fa_bn128", False), ("fa_causal_bn128", True)):
            row = fa_variants.measure(f"{name}_{mode}", 128, causal, asked(mode))
            results["rows"].append(row)
            print(f"{row['name']:24} {row['ms']:.3f} ms  sdpa {row['sdpa_ms']:.3f} ms  "
                  f"x{row['ratio']:.3f}  {'ok' if row['ok'] else 'FAIL'}", flush=True)
        row = gemm_row(mode)
        results["rows"].append(row)
        print(f"{row['name']:24} {row['ms']:.3f} ms  matmul {row['matmul_ms']:.3f} ms  "
              f"x{row['ratio']:.3f}  checks {row['checks_in_source']}", flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
