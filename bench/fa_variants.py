"""FlashAttention d128 variants beside SDPA, compiled on the GPU machine itself.

    python bench/fa_variants.py OUT.json [NAME,NAME,...]

Each variant of examples/flash_attention.py (the key-tile width; the split loop rotated,
FlashAttention 3's intra-warpgroup overlap; the consumer warpgroups taking turns; Q kept in
registers) is compiled in this process, as a notebook cell would compile it, checked against
`F.scaled_dot_product_attention` on three fresh inputs whose sequences have tails (1000, 1037,
1074) and on the timed shape, then timed: b4 h32 s4096 d128 fp16, kernel and SDPA alternated
three times and the middle of the three medians kept (CUDA events, 10 warm-up launches, 50
timed, L2 flushed before each: tilelab.profiler.do_bench).
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tilelab  # noqa: E402
from examples.flash_attention import flash_attention_kernel as fa  # noqa: E402
from tilelab.profiler import do_bench  # noqa: E402

SPLIT = {"tl.force_warp_specialized": True, "tl.enable_warpgroup_turns": False}
TURNS = {**SPLIT, "tl.enable_warpgroup_turns": True}
ROTATE = {**SPLIT, "tl.enable_intra_warpgroup_overlap": True}
ROTATE_TURNS = {**TURNS, "tl.enable_intra_warpgroup_overlap": True}
SHAPE = (4, 32, 4096, 128)
VARIANTS = [  # name, keys per tile, causal, pass configs ({}: the compiler's defaults),
    # Q kept in registers (S = Q Kᵀ from registers: wgmma's rs form)
    ("default_bn128", 128, False, {}, False), ("rot_bn128", 128, False, ROTATE, False),
    ("rotturns_bn128", 128, False, ROTATE_TURNS, False), ("default_bn176", 176, False, {}, False),
    ("rot_bn176", 176, False, ROTATE, False), ("rotturns_bn176", 176, False, ROTATE_TURNS, False),
    ("causal_default_bn128", 128, True, {}, False), ("causal_rot_bn128", 128, True, ROTATE, False),
    ("qregs_bn128", 128, False, {}, True), ("qregs_bn176", 176, False, {}, True),
    ("qregs_rot_bn128", 128, False, ROTATE, True), ("causal_qregs_bn128", 128, True, {}, True)]


def compiled(shape, block_n, causal, configs, q_in_registers=False):
    program = fa.fn(*shape, block_m=128, block_n=block_n, threads=256, causal=causal,
                    q_in_registers=q_in_registers)
    return tilelab.compile(program, out_idx=fa.out_idx, target="cuda",
                           pass_configs={**fa.pass_configs, **configs})


def error(kernel, shape, causal) -> float:
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return (kernel(q, k, v).float() - expected.float()).abs().max().item()


def measure(name, block_n, causal, configs, q_in_registers=False) -> dict:
    started = time.time()
    kernel = compiled(SHAPE, block_n, causal, configs, q_in_registers)
    compile_s = time.time() - started
    errors = []
    for seed in range(3):
        torch.manual_seed(100 + seed)
        tail = (2, 4, 1000 + 37 * seed, SHAPE[3])  # a sequence no multiple of the tiles
        errors.append(error(compiled(tail, block_n, causal, configs, q_in_registers), tail,
                            causal))
    torch.manual_seed(0)
    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=torch.float16) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    errors.append((kernel(q, k, v).float() - expected.float()).abs().max().item())

    def ours():
        return kernel(q, k, v)

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    pairs = [(do_bench(ours, warmup=10, rep=50, backend="event"),
              do_bench(sdpa, warmup=10, rep=50, backend="event")) for _ in range(3)]
    ms, sdpa_ms = (sorted(p[i] for p in pairs)[1] for i in (0, 1))
    b, h, s, d = SHAPE
    flops = (2 if causal else 4) * b * h * s * s * d
    return {"name": name, "block_n": block_n, "causal": causal, "pass_configs": configs,
            "q_in_registers": q_in_registers,
            "ms": ms, "sdpa_ms": sdpa_ms, "ratio": sdpa_ms / ms, "TFLOPs": flops / ms / 1e9,
            "sdpa_TFLOPs": flops / sdpa_ms / 1e9, "max_abs_err": errors,
            "ok": max(errors) < 2e-2, "compile_s": compile_s, "pairs": pairs}


def main() -> None:
    out = Path(sys.argv[1])
    chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else [v[0] for v in VARIANTS]
    results = {"device": torch.cuda.get_device_name(), "shape": list(SHAPE), "rows": [],
               "command": "python bench/fa_variants.py " + " ".join(sys.argv[1:])}
    for variant in VARIANTS:
        if variant[0] not in chosen:
            continue
        row = measure(*variant)
        results["rows"].append(row)
        print(f"{row['name']:22} {row['ms']:.3f} ms  sdpa {row['sdpa_ms']:.3f} ms  "
              f"x{row['ratio']:.3f}  err {max(row['max_abs_err']):.1e} "
              f"{'ok' if row['ok'] else 'FAIL'}  compile {row['compile_s']:.1f} s", flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
