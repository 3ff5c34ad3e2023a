"""Where a persistent GEMM's time goes: its epilogue, stored three ways, beside torch.matmul.

The kernel is examples/persistent_gemm.py's (132 blocks walking 128×256×64 tiles, 4
stages, two consumer warpgroups and a producer warp); only the end of each tile differs:

- `direct`:  `T.copy(c_fragment, C[...])`, each thread storing from its registers;
- `skipped`: the same copy behind `if F[0] == 1`, which never holds at run time: the
  MMAs and registers stay, the stores go (what the main loop alone costs);
- `staged`:  through a shared tile of `parts` parts (the example's own epilogue).

The one-block-per-tile GEMM of examples/gemm.py (same tile) is timed beside them. Each
variant is alternated with torch.matmul three times (tilelab.profiler.do_bench: CUDA
events, L2 flushed, median), compiled in place on the GPU machine:

    python bench/gemm_epilogue.py bench/results/gemm_epilogue_h200.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilelab  # noqa: E402
import tilelab.language as T  # noqa: E402
from examples.gemm import gemm_kernel  # noqa: E402
from tilelab.profiler import do_bench  # noqa: E402


@tilelab.jit
def persistent(A, B, F, epilogue: str = "direct", parts: int = 2, blocks: int = 132,
               bm: int = 128, bn: int = 256, bk: int = 64, stages: int = 4, threads: int = 256):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    F: T.Tensor((1,), T.int32)
    C = T.empty((M, N), T.float16)
    with T.Kernel(blocks, threads=threads) as block:
        a = T.alloc_shared((bm, bk), T.float16)
        b = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        width = bn // parts
        out = T.alloc_shared((bm, width), T.float16)
        for ty, tx in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], blocks, block, 8):
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[ty * bm, k * bk], a)
                T.copy(B[k * bk, tx * bn], b)
                T.gemm(a, b, acc)
            if epilogue == "direct":
                T.copy(acc, C[ty * bm, tx * bn])
            elif epilogue == "skipped":
                if F[0] == 1:
                    T.copy(acc, C[ty * bm, tx * bn])
            else:
                for part in T.unroll(parts):
                    T.copy(acc[0:bm, part * width:(part + 1) * width], out)
                    T.copy(out, C[ty * bm, tx * bn + part * width])
    return C


def launcher(kernel, *args):
    """A call of `kernel` on `args`, for do_bench."""
    return lambda: kernel(*args)


def main() -> None:
    results = {"command": "python bench/gemm_epilogue.py " + " ".join(sys.argv[1:]),
               "device": torch.cuda.get_device_name(), "rows": {}}
    for size in (8192, 4096):
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        never = torch.zeros(1, dtype=torch.int32, device="cuda")
        expected = a @ b
        runs = {f"persistent_{how}": launcher(persistent.compile(a, b, never, epilogue=how),
                                              a, b, never)
                for how in ("direct", "skipped", "staged")}
        runs["persistent_staged_quarters"] = launcher(
            persistent.compile(a, b, never, epilogue="staged", parts=4), a, b, never)
        runs["one_block_per_tile"] = launcher(
            gemm_kernel.compile(a, b, block_n=256, block_k=64, num_stages=4, threads=256,
                                panel=8), a, b)
        matmul = launcher(torch.matmul, a, b)
        for name, run in runs.items():
            if "skipped" not in name:
                torch.testing.assert_close(run(), expected, rtol=2e-2, atol=2e-1)
        times = {name: [] for name in [*runs, "torch"]}
        for _ in range(3):
            for name, run in runs.items():
                times[name].append(do_bench(run, warmup=10, rep=50))
                times["torch"].append(do_bench(matmul, warmup=10, rep=50))
        torch_ms = statistics.median(times["torch"])
        for name, samples in times.items():
            ms = statistics.median(samples)
            row = {"ms": ms, "TFLOPs": 2 * size ** 3 / ms / 1e9, "vs_torch": torch_ms / ms}
            results["rows"][f"{size}_{name}"] = row
            print(f"{size}^3 {name:28} {ms:.4f} ms {row['TFLOPs']:7.1f} TFLOP/s  "
                  f"x{row['vs_torch']:.3f} torch", flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
