"""FlashAttention's generated CUDA rewritten before nvcc, each rewrite timed against the
build it came from: experiments for changes the compiler does not make (yet).

    python bench/fa_source_rewrites.py OUT.json REWRITE

On the GPU machine, TVM in process as a notebook has it. REWRITE is one of

  unfused_exponent  each `exp2f(s * c - m * c)` as an unfused multiply and add (`__fmul_rn`,
                    `__fadd_rn`), the way cuDNN's SDPA kernel computes it
  deferred_sum      the two `shfl_xor` steps of the row sum (`T.reduce_sum` across a row's
                    four threads) moved out of the key loop onto the running sum, once

Four programs of examples/flash_attention.py (b4 h32 s4096 d128 fp16: 128x128 tiles and
128x64 with 8 warps, causal and not) are each compiled as generated and rewritten, checked
against SDPA on two inputs with tails (sequences 1000 and 1037) and on the timed shape, then
timed in pairs: the two builds alternated 12 times on the same inputs, SDPA beside them
(`gpu_suite.alternated`: CUDA events, L2 flushed); the median of the per-round ratios is
kept, as `gpu_suite.py ab` does.
"""

import functools
import json
import os
import re
import statistics
import sys
from pathlib import Path

os.environ["TILELAB_DISABLE_CACHE"] = "1"  # both builds compiled here
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tilelab  # noqa: E402
import tilelab.backends.cuda.nvcc as nvcc  # noqa: E402
from bench.gpu_suite import alternated  # noqa: E402
from examples.flash_attention import flash_attention_kernel as fa  # noqa: E402

_COMMENT = r"(?:/\*[^*]*\*/)?"
_EXPONENT = re.compile(r"scores_ptr\[(\d+)\] = exp2f\(\(\(scores_ptr\[\1\] \* (0x[0-9a-fp.+-]+)"
                       + _COMMENT + r"\) - \(running_max_ptr\[(\d)\] \* (0x[0-9a-fp.+-]+)"
                       + _COMMENT + r"\)\)\);")
_ROW_SHUFFLE = re.compile(r"^\s*tile_sum_partial_ptr\[(\d)\] = \(tile_sum_partial_ptr\[\1\] \+ "
                          r"tl::shfl_xor\(tile_sum_partial_ptr\[\1\], ([12])\)\);$")
_NORMALIZE = "output_ptr[0] = (output_ptr[0] / running_sum_ptr[0]);"


def unfused_exponent(source: str) -> str:
    def unfused(m):
        i, scale, row = m.group(1), m.group(2), m.group(3)
        return (f"scores_ptr[{i}] = exp2f(__fadd_rn(__fmul_rn(scores_ptr[{i}], {scale}), "
                f"-(running_max_ptr[{row}] * {scale})));")

    return _EXPONENT.sub(unfused, source)


def deferred_sum(source: str) -> str:
    """Legal because the running sum is linear in the tile sums and a row's four threads
    rescale theirs alike; FlashAttention 2 and 3 keep it per thread the same way."""
    lines = source.split("\n")
    shuffles = [(i, m) for i, line in enumerate(lines) for m in [_ROW_SHUFFLE.match(line)] if m]
    normalize = [i for i, line in enumerate(lines) if line.strip() == _NORMALIZE]
    if len(shuffles) != 4 or len(normalize) != 1:
        return source
    dropped = {i for i, _ in shuffles}
    out = []
    for i, line in enumerate(lines):
        if i == normalize[0]:
            out += [f"    running_sum_ptr[{m.group(1)}] = (running_sum_ptr[{m.group(1)}] + "
                    f"tl::shfl_xor(running_sum_ptr[{m.group(1)}], {m.group(2)}));"
                    for _, m in shuffles]
        if i not in dropped:
            out.append(line)
    return "\n".join(out)


REWRITES = {"unfused_exponent": unfused_exponent, "deferred_sum": deferred_sum}
PROGRAMS = [("fa_bn128", False, 128, 128), ("fa_causal_bn128", True, 128, 128),
            ("fa_bm128_w8", False, 128, 64), ("fa_causal_bm128_w8", True, 128, 64)]
SHAPE = (4, 32, 4096, 128)


def main() -> None:
    out, rewrite = Path(sys.argv[1]), REWRITES[sys.argv[2]]
    compile_cuda = nvcc.compile_cuda
    state = {"rewrite": False, "rewritten": 0}

    def rewritten(source, arch, fast_math=False):
        if state["rewrite"]:
            changed = rewrite(source)
            state["rewritten"] += changed != source
            source = changed
        return compile_cuda(source, arch, fast_math)

    nvcc.compile_cuda = rewritten

    def build(shape, causal, block_m, block_n, rewrite_it):
        state["rewrite"] = rewrite_it
        program = fa.fn(*shape, block_m=block_m, block_n=block_n, threads=256, causal=causal)
        return tilelab.compile(program, out_idx=fa.out_idx, target="cuda",
                               pass_configs=fa.pass_configs)

    def error(kernel, q, k, v, causal):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return (kernel(q, k, v).float() - expected.float()).abs().max().item()

    results = {"device": torch.cuda.get_device_name(), "rewrite": sys.argv[2], "rows": [],
               "command": "python bench/fa_source_rewrites.py " + " ".join(sys.argv[1:])}
    for name, causal, block_m, block_n in PROGRAMS:
        errors = []
        for rewrite_it in (False, True):
            for sequence in (1000, 1037):
                torch.manual_seed(sequence)
                shape = (2, 4, sequence, 128)
                inputs = [torch.randn(shape, device="cuda", dtype=torch.float16) for _ in "qkv"]
                errors.append(error(build(shape, causal, block_m, block_n, rewrite_it), *inputs,
                                    causal))
        kernels = [build(SHAPE, causal, block_m, block_n, rewrite_it)
                   for rewrite_it in (False, True)]
        torch.manual_seed(0)
        q, k, v = (torch.randn(SHAPE, device="cuda", dtype=torch.float16) for _ in range(3))
        errors += [error(kernel, q, k, v, causal) for kernel in kernels]
        calls = [functools.partial(kernel, q, k, v) for kernel in kernels]
        calls.append(functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal))
        times = alternated(calls, 12)
        ratios = [b / a for a, b in zip(times[0], times[1])]
        row = {"name": name, "base_ms": statistics.median(times[0]),
               "rewritten_ms": statistics.median(times[1]),
               "sdpa_ms": statistics.median(times[2]),
               "rewritten_over_base": statistics.median(ratios), "ratios": ratios,
               "max_abs_err": errors, "builds_rewritten": state["rewritten"]}
        results["rows"].append(row)
        print(f"{name:20} as generated {row['base_ms']:.3f} ms, rewritten "
              f"{row['rewritten_ms']:.3f} ms, SDPA {row['sdpa_ms']:.3f} ms; rewritten / generated "
              f"{row['rewritten_over_base']:.3f}; max error {max(errors):.1e}", flush=True)
        out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
