"""Write docs/PERFORMANCE.md from the recorded results in bench/results/.

    python bench/report.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

SHAPES = {
    "vector_add": "2^28 fp32; the tutorial's kernel: one element per thread",
    "vector_add_x4": "2^28 fp32; block 1024, 256 threads: four elements (16 bytes) per thread",
    "vector_add_one_per_thread": "2^28 fp32; the tutorial's kernel with "
                                 "`tl.disable_coarsen`: one element per thread as written",
    "swiglu": "2^28 fp32; `silu(g) * u`, one element per thread as written",
    "swiglu_one_per_thread": "2^28 fp32; the same with `tl.disable_coarsen`",
    "softmax": "8192×8192 fp16",
    "layer_norm": "8192×8192 fp16; the tutorial's kernel, one row per block",
    "layer_norm_bm2": "8192×8192 fp16; two rows per block (block_m=2)",
    "layer_norm_bm2_t512": "8192×8192 fp16; two rows per block, 512 threads",
    "layer_norm_own_barriers": "8192×8192 fp16; the tutorial's kernel with "
                               "`tl.disable_thread_storage_sync`: no barriers inside its "
                               "T.Parallel loops",
    "layer_norm_bm2_t512_own_barriers": "8192×8192 fp16; two rows per block, 512 threads, "
                                        "`tl.disable_thread_storage_sync`",
    "layer_norm_bm4_t1024": "8192×8192 fp16; four rows per block, 1024 threads",
    "layer_norm_registers": "8192×8192 fp16; rows read straight into registers (no shared "
                            "memory), 256 threads",
    "layer_norm_registers_t512": "8192×8192 fp16; rows straight into registers, 512 threads",
    "softmax_t256": "8192×8192 fp16; one row per block, 256 threads",
    "softmax_t512": "8192×8192 fp16; one row per block, 512 threads",
    "softmax_t256_fast": "8192×8192 fp16; one row per block, 256 threads, fast math (exp)",
    "rms_norm": "8192×8192 fp16",
    "gemm_fp16": "8192³ fp16 in, fp32 accumulate; 128×128×32 tiles, 4 warps, 3 stages",
    "gemm_fp16_bk64": "8192³ fp16; 128×128×64 tiles, 4 warps, 3 stages",
    "gemm_fp16_panel8": "8192³ fp16; as gemm_fp16, blocks rasterized in panels of 8 rows "
                        "(T.use_swizzle(8))",
    "flash_attention": "batch 4, heads 32, seq 4096, dim 128, fp16, non-causal; "
                       "block 64×64, 4 warps, 2 stages",
    "flash_attention_bm128_w8": "same shapes; block 128×64, 8 warps, 2 stages",
    "flash_attention_bm128_bn128_w8": "same shapes; block 128×128, 8 warps, 2 stages, one role",
    "flash_attention_causal_bm128_bn128_w8": "same shapes, causal; block 128×128, 8 warps, "
                                             "2 stages, one role",
    "flash_attention_d64_bm128_bn128_w8": "dim 64; block 128×128, 8 warps, 2 stages, one role",
    "flash_attention_bm128_bn128_w8_default": "same shapes; block 128×128, 8 warps, 2 stages, "
                                              "no pass configs: split by default, the "
                                              "consumers taking turns",
    "flash_attention_causal_bm128_bn128_w8_default": "same shapes, causal; block 128×128, 8 "
                                                     "warps, 2 stages, no pass configs: split "
                                                     "by default",
    "flash_attention_bm128_bn160_w8_default": "same shapes; block 128×160, 8 warps, 2 "
                                              "stages, no pass configs",
    "flash_attention_bm128_bn176_w8_default": "same shapes; block 128×176, 8 warps, 2 "
                                              "stages, no pass configs (FlashAttention 3's width)",
    "flash_attention_bm128_bn192_w8_default": "same shapes; block 128×192, 8 warps, 2 "
                                              "stages, no pass configs",
    "fa_bm128_w8_2blocks": "same shapes; block 128×64, 8 warps, 2 stages, compiled by hand "
                           "for two blocks per SM (32 bytes spilled)",
    "flash_attention_bm128_w8_s3": "same shapes; block 128×64, 8 warps, 3 stages",
    "flash_attention_bm128_bn128_w8_s3": "same shapes; block 128×128, 8 warps, 3 stages (split "
                                         "by default, the consumers taking turns)",
    "flash_attention_causal_bm128_bn128_w8_s3": "same shapes, causal; block 128×128, 8 warps, 3 "
                                                "stages (split by default)",
    "flash_attention_d64_bm128_bn128_w8_s3": "dim 64; block 128×128, 8 warps, 3 stages",
    "flash_attention_bm128_w8_cp_async": "same shapes; block 128×64, 8 warps, 2 stages; K and V "
                                         "by every thread's cp.async (`tl.disable_tma_lower`)",
    "gemm_fp16_128x256_t256": "8192³ fp16; 128×256×64 tiles, 8 warps (two warpgroups), "
                              "3 stages, panels of 8",
    "gemm_fp16_bk64_s4": "8192³ fp16; 128×128×64 tiles, 4 warps, 4 stages, panels of 8",
    "gemm_fp16_128x256_t256_s4": "8192³ fp16; 128×256×64 tiles, 8 warps, 4 stages, "
                                 "panels of 8",
    "gemm_fp16_bk64_s4_tma": "8192³ fp16; 128×128×64 tiles, 4 warps, 4 stages, panels of 8; "
                             "tiles copied by TMA (`tl.enable_tma`, opt-in then; the default "
                             "since)",
    "gemm_fp16_128x256_t256_s4_tma": "8192³ fp16; 128×256×64 tiles, 8 warps, 4 stages, panels "
                                     "of 8; tiles copied by TMA (`tl.enable_tma`, opt-in then; the "
                                     "default since)",
    "gemm_fp16_bk64_s4_cp_async": "8192³ fp16; 128×128×64 tiles, 4 warps, 4 stages, panels "
                                  "of 8; tiles copied by every thread's cp.async "
                                  "(`tl.disable_tma_lower`)",
    "gemm_fp16_128x256_t256_s4_cp_async": "8192³ fp16; 128×256×64 tiles, 8 warps, 4 stages, "
                                          "panels of 8; tiles copied by every thread's cp.async "
                                          "(`tl.disable_tma_lower`)",
    "gemm_fp16_128x256x32_t256_s6": "8192³ fp16; 128×256×32 tiles, 8 warps, 6 stages, panels "
                                    "of 8",
    "gemm_fp16_4096_128x256_t256_s4": "4096³ fp16; 128×256×64 tiles, 8 warps, 4 stages, "
                                      "panels of 8",
    "gemm_fp16_4096_128x256_t256_s3": "4096³ fp16; 128×256×64 tiles, 8 warps, 3 stages, "
                                      "panels of 8",
    "gemm_fp16_4096_128x256x32_t256_s6": "4096³ fp16; 128×256×32 tiles, 8 warps, 6 stages, "
                                         "panels of 8",
    "gemm_bf16_128x256_t256_s4": "8192³ bf16; 128×256×64 tiles, 8 warps, 4 stages, panels of 8",
    "gemm_bf16_4096_128x256_t256_s4": "4096³ bf16; 128×256×64 tiles, 8 warps, 4 stages, "
                                      "panels of 8",
    "persistent_gemm_fp16": "8192³ fp16; persistent (examples/persistent_gemm.py): at most "
                            "one block per multiprocessor walks the tiles in groups of 8 "
                            "columns, 128×256×64 tiles, 8 warps and a producer warpgroup, 4 "
                            "stages, C through a shared tile in two parts",
    "persistent_gemm_fp16_4096": "4096³ fp16; persistent, as above",
    "persistent_gemm_bf16": "8192³ bf16; persistent, as above",
    "persistent_gemm_bf16_4096": "4096³ bf16; persistent, as above",
    "persistent_gemm_fp16_group16": "8192³ fp16; persistent, groups of 16 columns",
    "persistent_gemm_fp16_128x128": "8192³ fp16; persistent, 128×128×64 tiles on one consumer "
                                    "warpgroup",
    "persistent_gemm_fp16_s3_whole": "8192³ fp16; persistent, 3 stages, C through a shared tile "
                                     "at once",
    "persistent_gemm_fp16_quarters": "8192³ fp16; persistent, C in four parts",
    "flash_attention_causal": "batch 4, heads 32, seq 4096, dim 128, fp16, causal (each query "
                              "block's key loop stops at its diagonal); block 64×64, 4 warps, "
                              "2 stages",
    "flash_attention_causal_bm128_w8": "same shapes, causal; block 128×64, 8 warps, 2 stages",
    "flash_attention_causal_b2h16_bm128_w8": "batch 2, heads 16, seq 4096, dim 128, fp16, "
                                             "causal; block 128×64, 8 warps, 2 stages",
    "flash_attention_bn32": "same shapes; block 64×32, 4 warps, 2 stages",
    "ws_gemm_s2": "8192³ fp16; warp roles written by hand (`examples/ws_gemm.py`): warpgroup 1 "
                  "copies by `T.tma_copy` (TMA), warpgroup 0 multiplies 128×128×64 tiles, "
                  "mbarriers between them, 2 slots",
    "ws_gemm_s4": "8192³ fp16; the same with 4 slots",
    "flash_attention_bm128_bn32_w8": "same shapes; block 128×32, 8 warps, 2 stages",
    **{f"flash_attention{causal}_bm128{bn}_w8_ws": (
        f"same shapes{', causal' if causal else ''}; block 128×{128 if bn else 64}, two "
        "consumer warpgroups and a producer warpgroup (TMA; `tl.force_warp_specialized`), the "
        "consumers with 240 registers a thread (setmaxnreg), 2 stages")
       for causal in ("", "_causal") for bn in ("", "_bn128")},
    "flash_attention_d64_bm128_w8": "batch 4, heads 32, seq 4096, dim 64, fp16, non-causal; "
                                    "block 128×64, 8 warps, 2 stages",
    "flash_attention_d64_bm128_w8_ws": "dim 64, as above; block 128×64, split as the d128 "
                                       "`_ws` rows but without the register moves (ptxas "
                                       "gave a thread 101 registers at launch: too few to "
                                       "move)",
    "flash_attention_d64_bm128_bn128_w8_ws": "dim 64, as above; block 128×128, split as the "
                                             "d128 `_ws` rows",
    "flash_attention_bm128_w8_ws_no_setmaxnreg": "same shapes; block 128×64, split as the "
                                                 "`_ws` rows but each thread keeps what "
                                                 "the launch gives it (ptxas: 143 "
                                                 "registers; `tl.disable_setmaxnreg`)",
}
# a suite entry named `<config><suffix>` is that config with one setting changed
VARIANTS = {
    "_one_role": "; one role: every thread waits for the copies and multiplies "
                 "(`tl.disable_warp_specialized`)",
    "_fullrow": "; each warpgroup a 64×256 half of the tile (`GemmWarpPolicy.FullRow`)",
    "_split": "; split between a producer warpgroup (TMA) and the consumers "
              "(`tl.force_warp_specialized`)",
    "_as_written": "; blocks started in the order written, the shortest first "
                   "(`tl.disable_heavy_first`)",
    "_direct": "; C stored straight from the accumulator's registers "
               "(`tl.disable_stage_stores`)",
    "_rotate_turns": "; rotated (the next key tile's S = Q Kᵀ issued before this tile's "
                     "O += P V, `tl.enable_intra_warpgroup_overlap`) and the consumer "
                     "warpgroups taking turns at the tensor cores",
    "_rotate": "; rotated: the next key tile's S = Q Kᵀ issued before this tile's O += P V, "
               "the softmax beside its MMAs (`tl.enable_intra_warpgroup_overlap`)",
    "_turns": "; the consumer warpgroups taking turns at the tensor cores "
              "(`tl.enable_warpgroup_turns`)",
    "_before": "; built from the code before this run's change, for an A/B in one run",
    "_select_per_element": "; the causal mask tested at every element of every key tile "
                           "(`tl.disable_uniform_selects`)",
}


def _variant_of(name: str) -> tuple[str, str]:
    """(the config's own name, what the variants change) of a suite entry; a variant of a
    variant (`_ws_turns_before`) names both changes."""
    for suffix, what in VARIANTS.items():
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            base, more = (base, "") if base in SHAPES else _variant_of(base)
            return base, more + what
    return name, ""


BASELINES = {
    "vector_add": "`a + b`", "vector_add_x4": "`a + b`", "softmax": "`torch.softmax`",
    "vector_add_one_per_thread": "`a + b`", "swiglu": "`F.silu(g) * u`",
    "swiglu_one_per_thread": "`F.silu(g) * u`",
    "layer_norm": "`F.layer_norm`", "layer_norm_bm2": "`F.layer_norm`",
    "rms_norm": "`F.rms_norm`", "softmax_t256": "`torch.softmax`",
    "softmax_t512": "`torch.softmax`", "layer_norm_bm2_t512": "`F.layer_norm`",
    "layer_norm_own_barriers": "`F.layer_norm`",
    "layer_norm_bm2_t512_own_barriers": "`F.layer_norm`",
    "softmax_t256_fast": "`torch.softmax`", "layer_norm_bm4_t1024": "`F.layer_norm`",
    "layer_norm_registers": "`F.layer_norm`", "layer_norm_registers_t512": "`F.layer_norm`",
    "gemm_fp16": "`torch.matmul`", "gemm_fp16_bk64": "`torch.matmul`",
    "gemm_fp16_panel8": "`torch.matmul`", "gemm_fp16_128x256_t256": "`torch.matmul`",
    "gemm_fp16_bk64_s4": "`torch.matmul`", "gemm_fp16_128x256_t256_s4": "`torch.matmul`",
    "gemm_fp16_bk64_s4_tma": "`torch.matmul`",
    "gemm_fp16_128x256_t256_s4_tma": "`torch.matmul`",
    "gemm_fp16_bk64_s4_cp_async": "`torch.matmul`",
    "gemm_fp16_128x256_t256_s4_cp_async": "`torch.matmul`",
    "gemm_fp16_128x256x32_t256_s6": "`torch.matmul`",
    "gemm_fp16_4096_128x256_t256_s4": "`torch.matmul`",
    "gemm_fp16_4096_128x256_t256_s3": "`torch.matmul`",
    "gemm_fp16_4096_128x256x32_t256_s6": "`torch.matmul`",
    "gemm_bf16_128x256_t256_s4": "`torch.matmul`",
    "gemm_bf16_4096_128x256_t256_s4": "`torch.matmul`",
    "ws_gemm_s2": "`torch.matmul`", "ws_gemm_s4": "`torch.matmul`",
    **{name: "`torch.matmul`" for name in (
        "persistent_gemm_fp16", "persistent_gemm_fp16_4096", "persistent_gemm_bf16",
        "persistent_gemm_bf16_4096", "persistent_gemm_fp16_group16",
        "persistent_gemm_fp16_128x128", "persistent_gemm_fp16_s3_whole",
        "persistent_gemm_fp16_quarters")},
    "flash_attention_causal": "`F.scaled_dot_product_attention(is_causal=True)`",
    "flash_attention_causal_bm128_w8": "`F.scaled_dot_product_attention(is_causal=True)`",
    "flash_attention_causal_b2h16_bm128_w8": "`F.scaled_dot_product_attention(is_causal=True)`",
}


RUNS = [  # newest first: (results file, what the run was, the build command)
    ("gpu_suite_h100_fiftyfirst_full.json",
     "Every suite row, built at 8890340 (the persistent GEMM's warpgroups split the tile by "
     "rows - `GemmWarpPolicy.FullRow` - and C leaves in parts of columns; every other kernel's "
     "CUDA source as at adb7fdd), on an H100 SXM (no H200 came): GEMM fp16 8192³ with "
     "128×256 tiles ×0.97 of cuBLAS, bf16 ×1.06, fp16 4096³ ×0.99, bf16 ×0.96, the "
     "persistent kernel ×1.03-1.08 at 8192³, ×0.94 (fp16) and ×0.98 (bf16) at 4096³; "
     "FlashAttention d128 with 128×128 tiles as compiled by default ×1.04 of SDPA, causal "
     "×0.93, d64 ×1.12; vector add ×1.00 of `a + b`, SwiGLU ×1.68; all 49 checks ok. One "
     "run, kernel and baseline alternated three times; the paired figures (bench/results/"
     "goals_paired_h100_w51.json, 16 rounds: persistent 4096³ 0.998 and 0.997; "
     "goals_4096_48_rounds_h100_w51.json, 48 rounds: 0.996 and 0.997) are the ones to quote "
     "(2026-12-07, fifty-first session)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h100_fiftieth_full.json",
     "Every suite row, built at adb7fdd (stmatrix epilogues on sm_90a, a walk's K loop kept "
     "rolled), on an H100 SXM (no H200 came): GEMM fp16 8192³ with 128×256 tiles ×1.06 of "
     "cuBLAS, bf16 ×1.00, fp16 and bf16 4096³ ×0.97, the persistent kernel ×0.99-1.00 at "
     "8192³, ×0.94 (fp16) and ×1.00 (bf16) at 4096³; FlashAttention d128 with 128×128 tiles "
     "as compiled by default ×1.01 of SDPA, causal ×0.92, d64 ×1.09; vector add ×1.00 of "
     "`a + b`, SwiGLU ×1.68; all 49 checks ok. One run, kernel and baseline alternated three "
     "times; the paired figures (16 rounds each, bench/results/goals_paired_h100_w50.json, "
     "in the notes: persistent 4096³ 0.994 and 0.998) are the ones to quote (2026-12-07, "
     "fiftieth session)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h200_fortyfifth_full.json",
     "Every suite row, built at 979f9da (the compiler as the forty-third session left it), "
     "on the H200 - the first since the thirty-eighth session: GEMM fp16 8192³ with 128×256 "
     "tiles ×1.00 of cuBLAS, bf16 ×1.03, fp16 and bf16 4096³ ×0.97, the persistent kernel "
     "×1.02-1.03 at 8192³ and ×0.99-1.00 at 4096³; FlashAttention d128 with 128×128 tiles "
     "as compiled by default ×1.00 of SDPA, causal ×0.94, causal 128×64 ×0.98, d64 ×1.09; "
     "vector add ×1.00 of `a + b`, SwiGLU ×1.69; all 49 checks ok. One run, kernel and "
     "baseline alternated three times; the paired figures (16 rounds each, "
     "bench/results/goals_paired_h200.json, in the notes) are the ones to quote "
     "(2026-12-06, forty-fifth session)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h100_fortysecond_full.json",
     "Every suite row, built at 96d3d01 (a loop's row sums combined across threads once, "
     "after the loop - passes/deferred_row_sums.py, the new default), on an H100 SXM (an "
     "H200 was asked for and none came): GEMM fp16 8192³ with 128×256 tiles ×1.03 of "
     "cuBLAS, bf16 ×1.01, fp16 4096³ ×0.97, bf16 4096³ ×1.02, the persistent kernel "
     "×0.98-1.00; FlashAttention d128 with 128×128 tiles as compiled by default ×1.04 of "
     "SDPA, causal ×0.96, causal 128×64 ×0.97, d64 ×1.10; vector add ×1.00 of `a + b`, "
     "SwiGLU ×1.68; all 49 checks ok. One run, kernel and baseline alternated three times; "
     "SDPA moved 1.88-2.00 ms between rows of this run, so the paired figures in the notes "
     "(16 rounds each, bench/results/goals_paired_h100.json) are the ones to quote "
     "(2026-12-06, forty-second session)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h100_fortyfirst_full.json",
     "Every suite row, built at 0d8054a (wgmma tiles' alignment checked once per kernel, "
     "the new default), on an H100 SXM (no H200 could be had): GEMM fp16 8192³ with 128×256 "
     "tiles ×0.97-0.98 of cuBLAS, bf16 ×1.01, fp16 4096³ "
     "×0.98, the persistent kernel ×0.98-1.03; FlashAttention d128 with 128×128 tiles as "
     "compiled by default ×0.98 of SDPA, causal ×0.94, causal 128×64 ×0.98, d64 ×1.08; "
     "vector add ×1.00 of `a + b`, SwiGLU ×1.68; all 49 checks ok. One run, kernel and "
     "baseline alternated; on this card SDPA itself moves 1.86-1.94 ms between rows "
     "(2026-12-06, forty-first session)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h200_thirtyeighth_full.json",
     "Every suite row, built at d85d4ef (the compiler as the thirty-seventh session left it; "
     "this session's change, a compile-time bounds check, leaves the generated code as it "
     "was). GEMM: fp16 8192³ with 128×256 tiles ×1.01 of cuBLAS, bf16 ×1.01, fp16 4096³ "
     "×1.01, the persistent kernel ×0.98-1.01; FlashAttention d128 with 128×128 tiles as "
     "compiled by default ×0.98 of SDPA, causal ×0.94, d64 (one role) ×1.08; vector add "
     "×1.00 of `a + b`, SwiGLU ×1.69; all 49 checks ok (2026-12-06, thirty-eighth session)",
     "`python bench/gpu_suite.py build`"),
    ("parallel_as_one_h200.json",
     "T.Parallel loops are one statement to TVM's ThreadSync (it orders them against the "
     "rest, and against shared-memory reuse, but puts no barrier between their unrolled "
     "elements: the tutorial's layer_norm 38 barriers -> 7), beside `_before` rows built "
     "from main before the change (1d63546): layer_norm x0.82 -> x0.96 of F.layer_norm, two "
     "rows per block with 512 threads x1.07 -> x1.14; the persistent GEMM (InsertBarriers now "
     "walks into T.Persistent's guard) and the rotated causal attention level with their "
     "`_before` rows; all 49 checks ok (2026-12-04, twenty-seventh session, a subset)",
     "`python bench/gpu_suite.py build --only layer_norm,layer_norm_bm2,layer_norm_bm2_t512,"
     "layer_norm_bm4_t1024,persistent_gemm_fp16,persistent_gemm_fp16_4096,persistent_gemm_bf16,"
     "flash_attention_causal_bm128_bn128_w8_ws_rotate,gemm_fp16_128x256_t256_s4,"
     "flash_attention_bm128_bn128_w8_default,flash_attention_causal_bm128_bn128_w8_default,"
     "softmax,rms_norm`, and `--only layer_norm,layer_norm_bm2_t512,persistent_gemm_fp16,"
     "flash_attention_causal_bm128_bn128_w8_ws_rotate` at 1d63546, its artifacts added to the "
     "manifest as `before_*`, named `*_before` here"),
    ("layer_norm_own_barriers_h200.json",
     "What the barriers TVM's ThreadSync puts inside T.Parallel loops cost: layer_norm with "
     "`tl.disable_thread_storage_sync` (the program places the barriers of its own code; a "
     "T.Parallel loop that reads one shared tile and writes another then has none inside, "
     "where TVM, which takes all dynamic shared memory for one buffer, puts one between "
     "unrolled elements: 38 barriers -> 6) beside the same kernels as compiled by default: "
     "the tutorial's kernel x0.80 -> x0.96 of F.layer_norm, two rows per block with 512 "
     "threads x1.07 -> x1.14; all checks ok (2026-12-04, twenty-sixth session, a subset)",
     "`python bench/gpu_suite.py build --only layer_norm,layer_norm_own_barriers,"
     "layer_norm_bm2_t512,layer_norm_bm2_t512_own_barriers`"),
    ("fa_wide_keys_h200.json",
     "Wider key tiles for FlashAttention d128 (FlashAttention 3 takes 176 keys at this head "
     "size) beside the default 128, as the compiler chooses without pass configs: 160, 176 and "
     "192 keys are no faster (x0.84, x0.96, x0.96 against x0.97 for 128); all checks ok "
     "(2026-12-04, twenty-fifth session, a subset)",
     "`python bench/gpu_suite.py build --only flash_attention_bm128_bn128_w8_default,flash_att"
     "ention_bm128_bn160_w8_default,flash_attention_bm128_bn176_w8_default,flash_attention_bm1"
     "28_bn192_w8_default,flash_attention_causal_bm128_bn128_w8_default`"),
    ("gpu_suite_h200_twentysecond_full.json",
     "Every suite row (the 3-slot rows included), built with the compiler as the "
     "twenty-first session left it (105acb7); this session's later changes to it (T.gemm on "
     "parts of shared tiles, vector atomics) leave the suite's kernels' generated CUDA "
     "byte-identical (eleven GEMM, attention, warp-role and atomic kernels compared). "
     "GEMM: fp16 8192³ 128×256 ×1.01 of cuBLAS, bf16 ×1.01, the "
     "persistent kernel at 4096³ ×1.02 (fp16) and ×1.01 (bf16); FlashAttention d128 with "
     "128×128 tiles as compiled by default ×0.98 of SDPA, causal ×0.96, d64 ×1.08; all 49 "
     "checks ok (2026-12-04, twenty-second session)",
     "`python bench/gpu_suite.py build`"),
    ("stages_h200.json",
     "More slots, measured: FlashAttention's 128×128 tiles with 3 stages (224 KB of K, V and Q "
     "tiles: the block alone on its SM, as with 2) beside 2, and the 4096³ GEMM's 128×256 "
     "tiles in 3 stages of 64 and 6 of 32 beside 4 of 64 and the persistent kernel. A second "
     "run of the same artifacts right after (`stages_h200_b.json`): d128 1.935 ms with 2 "
     "stages, 1.961 with 3; causal 1.153 and 1.161; d64 1.149 and 1.186; GEMM 0.196 ms in 4 "
     "stages, 0.254 in 3, 0.234 in 6 of 32, persistent 0.198. A third slot does not pay "
     "FlashAttention (its key loop waits for its MMAs and exponentials, not for its copies); "
     "the GEMM keeps 4 slots of 64 (2026-12-04, twenty-second session, a subset)",
     "`python bench/gpu_suite.py build --only flash_attention_bm128_bn128_w8_default,flash_att"
     "ention_bm128_bn128_w8_s3,flash_attention_causal_bm128_bn128_w8_default,flash_attention_c"
     "ausal_bm128_bn128_w8_s3,flash_attention_d64_bm128_bn128_w8,flash_attention_d64_bm128_bn"
     "128_w8_s3,gemm_fp16_4096_128x256_t256_s4,gemm_fp16_4096_128x256_t256_s3,gemm_fp16_4096_1"
     "28x256x32_t256_s6,persistent_gemm_fp16_4096`"),
    ("gpu_suite_h200_twentysecond.json",
     "FlashAttention's 128×128 tiles at d128 as the compiler chooses for them without pass "
     "configs (`_default`: split, the consumers taking turns where the key loop is as long in "
     "every block), beside the `_ws_turns` and causal `_ws` rows they compile to. Same day: "
     "the GPU tests of warp specialization and turns (13 passed), difftest attention family "
     "with default configs seed 91 (217 programs, 0 mismatches) (2026-12-04, twenty-second "
     "session, a subset)",
     "`python bench/gpu_suite.py build --only flash_attention_bm128_bn128_w8_default,flash_att"
     "ention_causal_bm128_bn128_w8_default,flash_attention_bm128_bn128_w8_ws_turns,flash_atten"
     "tion_causal_bm128_bn128_w8_ws`"),
    ("gpu_suite_h200_twentyfirst_c.json",
     "A/B in one run: each `_before` row is the same config built from the code before this "
     "session's two changes (the twentieth session's last commit, 4a69f4d), beside it built "
     "with them: `T.reduce_*` folds a thread's registers of a row in two independent chains, "
     "not one (ops/reduce.py: 16 dependent steps for FlashAttention's 32 registers a row, not "
     "31 - ncu on the H200 showed the single chain's `FMNMX`/`FADD` waiting on each other "
     "where cuDNN's kernel folds pairwise; four chains, eight and a balanced tree measured "
     "slower, `bench/results/reduce_chains_h200.json` and the notes below), and a pipelined "
     "loop's `T.gemm` fences the tiles the loop only reads (Q) once, before the loop, not every "
     "iteration (passes/pipeline_loops.py `_fenced_once`). Causal 128×64 in one role, the "
     "causal default: 1.141 against 1.233 ms (×0.93 of SDPA causal against ×0.86); 128×64: "
     "2.090 against 2.153 ms; d64 128×128: 1.148 against 1.187 ms (×1.09); the split rows "
     "within 1%; d64 128×64 2% slower (1.342 against 1.314 ms, as in the chains' run); no "
     "GEMM's code changed. Same call: difftest general mix seed 81 (183 programs) and "
     "attention family seed 82 (80), 0 mismatches (2026-12-04, twenty-first session, a subset)",
     "`python bench/gpu_suite.py build --only softmax,softmax_t256_fast,layer_norm,layer_nor"
     "m_registers,rms_norm,gemm_fp16_128x256_t256_s4,flash_attention_bm128_w8,flash_attent"
     "ion_causal_bm128_w8,flash_attention_d64_bm128_w8,flash_attention_bm128_bn128_w8,flash_"
     "attention_d64_bm128_bn128_w8,flash_attention_causal_bm128_bn128_w8,flash_attention_bm1"
     "28_bn128_w8_ws,flash_attention_bm128_bn128_w8_ws_turns,flash_attention_causal_bm128_bn"
     "128_w8_ws,flash_attention_causal_bm128_bn128_w8_ws_turns` with this session's code, and "
     "`--only flash_attention_bm128_w8,flash_attention_causal_bm128_w8,flash_attention_bm128_b"
     "n128_w8_ws_turns,flash_attention_causal_bm128_bn128_w8_ws,flash_attention_d64_bm128_bn1"
     "28_w8,softmax,layer_norm` in a worktree at 4a69f4d (and flash_attention_d64_bm128_w8, "
     "compiled there by `compile_kernel` and exported alone), its artifacts added to the "
     "manifest as `before_*`, named `*_before`"),
    ("gpu_suite_h200_twentyfirst_b.json",
     "the same A/B with four chains in `T.reduce_*` (the first version of the change, "
     "superseded by two): one-role FlashAttention 2-3% faster but d64 128×64 10% slower "
     "(1.429 ms; 1.445 against 1.314 in a second run, where the fence alone measured 1.307 "
     "and the chains alone 1.435: `bench/results/reduce_fence_ab_h200.json`) (2026-12-03, "
     "twenty-first session, a subset)",
     "as the run above, with `CHAINS = 4`"),
    ("gpu_suite_h200_twentyfirst.json",
     "FlashAttention's 128×128 tiles in one role (`flash_attention_bm128_bn128_w8`, causal, "
     "d64) beside the split rows and the 128×64 defaults, in one run: at d64 the 128×128 tile "
     "in one role is the fastest (×1.07 of SDPA; split ×0.89, 128×64 ×0.94); at d128 and "
     "causal it is no faster than 128×64 in one role (×0.88, ×0.87), and the split 128×128 "
     "tiles stay ahead (×0.93 and with turns ×0.98; causal ×0.94) (2026-12-03, twenty-first "
     "session, a subset)",
     "the artifacts of the twentieth session's second build (`gpu_suite_h200_twentieth_b`, "
     "with the rows a99e0b1 added: `python bench/gpu_suite.py build --only ...,flash_attentio"
     "n_bm128_bn128_w8,flash_attention_causal_bm128_bn128_w8,flash_attention_d64_bm128_bn128_w"
     "8`), run unchanged"),
    ("gpu_suite_h200_twentieth_b.json",
     "warp-specialized blocks that move registers to their consumers put the consumers' "
     "branch first in the code (passes/specialize_warps.py): in the other order ptxas kept "
     "them within the launch's 168 registers despite setmaxnreg, and 128×128 attention "
     "tiles spilled (rotated ones serialized their MMAs); no FlashAttention kernel spills "
     "now. The GEMM rows that split (`_split`, persistent) were built that way too and "
     "measured slower than before (×0.87 and ×0.88 against ×0.98 and ×1.00 in the sixteenth "
     "session's run): blocks that move no registers keep the producer's branch first, "
     "their code as before (2026-12-03, twentieth session, a subset)",
     "`python bench/gpu_suite.py build --only "
     "ws_gemm_s4,gemm_fp16_128x256_t256_s4,gemm_fp16_128x256_t256_s4_split,persistent_"
     "gemm_fp16,flash_attention_bm128_w8,flash_attention_causal_bm128_w8,flash_attenti"
     "on_bm128_w8_ws,flash_attention_bm128_w8_ws_turns,flash_attention_bm128_w8_ws_rot"
     "ate,flash_attention_bm128_w8_ws_rotate_turns,flash_attention_bm128_bn128_w8_ws,f"
     "lash_attention_bm128_bn128_w8_ws_turns,flash_attention_bm128_bn128_w8_ws_rotate,"
     "flash_attention_bm128_bn128_w8_ws_rotate_turns,flash_attention_causal_bm128_w8_w"
     "s,flash_attention_causal_bm128_bn128_w8_ws,flash_attention_causal_bm128_bn128_w8"
     "_ws_turns,flash_attention_causal_bm128_bn128_w8_ws_rotate,flash_attention_d64_bm"
     "128_w8,flash_attention_d64_bm128_bn128_w8_ws,flash_attention_d64_bm128_bn128_w8_"
     "ws_rotate"
     "`"),
    ("gpu_suite_h200_twentieth.json",
     "FlashAttention's split key loop rotated (`_rotate` rows, "
     "`tl.enable_intra_warpgroup_overlap`: the next key tile's S = Q Kᵀ issued before this "
     "tile's O += P V, the softmax beside its MMAs) beside the split loop as written and the "
     "default one-role loop, in the same run (2026-12-03, twentieth session, a subset; the "
     "checks cover the suite but the `_rotate_turns` checks, run by the GPU tests instead)",
     "`python bench/gpu_suite.py build --only "
     "gemm_fp16_128x256_t256_s4,gemm_fp16_4096_128x256_t256_s4,flash_attention_bm128_w"
     "8,flash_attention_causal_bm128_w8,flash_attention_bm128_w8_ws,flash_attention_bm"
     "128_w8_ws_turns,flash_attention_bm128_w8_ws_rotate,flash_attention_bm128_bn128_w"
     "8_ws,flash_attention_bm128_bn128_w8_ws_turns,flash_attention_bm128_bn128_w8_ws_r"
     "otate,flash_attention_causal_bm128_w8_ws,flash_attention_causal_bm128_w8_ws_turn"
     "s,flash_attention_causal_bm128_w8_ws_rotate,flash_attention_causal_bm128_bn128_w"
     "8_ws_rotate,flash_attention_d64_bm128_w8,flash_attention_d64_bm128_w8_ws,flash_a"
     "ttention_d64_bm128_bn128_w8_ws,flash_attention_d64_bm128_w8_ws_rotate,flash_atte"
     "ntion_d64_bm128_bn128_w8_ws_rotate"
     "` (the `rotate_turns` entries then taken out of the manifest)"),
    ("gpu_suite_h200_eighteenth.json",
     "causal attention's mask decided once per key tile where the whole tile is kept "
     "(passes/uniform_selects.py: only the diagonal tiles test each element); "
     "`_select_per_element` rows test every element of every tile as before "
     "(`tl.disable_uniform_selects`), in the same run (2026-12-03, eighteenth session, "
     "a subset; the checks cover the suite)",
     "`python bench/gpu_suite.py build --only flash_attention_causal,"
     "flash_attention_causal_select_per_element,flash_attention_causal_bm128_w8,"
     "flash_attention_causal_bm128_w8_select_per_element,flash_attention_causal_b2h16_bm128_w8,"
     "flash_attention_bm128_w8,flash_attention_causal_bm128_w8_ws`"),
    ("gpu_suite_h200_sixteenth.json",
     "FlashAttention's key loop split between a producer warpgroup and two consumer "
     "warpgroups that take the producer's registers (`_ws` rows, `tl.force_warp_specialized`); "
     "`_ws_turns` rows with the consumers taking turns at the tensor cores "
     "(`tl.enable_warpgroup_turns`) (2026-12-03, sixteenth session, the whole suite)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h200_fifteenth.json",
     "GEMM sums leave through a shared tile by themselves (passes/stage_stores.py), in the "
     "dead pipeline slots' place; `_direct` rows store from registers as before, in the same "
     "run (2026-12-03, fifteenth session, the whole suite)",
     "`python bench/gpu_suite.py build`"),
    ("gpu_suite_h200_fourteenth.json",
     "persistent blocks: the producer warp walks the tiles with the consumers and runs ahead "
     "across them; C stored through a shared tile (2026-12-02, fourteenth session, a subset "
     "beside the one-block-per-tile GEMMs; the checks cover the suite)",
     "`python bench/gpu_suite.py build --only persistent_gemm_fp16,persistent_gemm_fp16_4096,"
     "persistent_gemm_bf16,persistent_gemm_bf16_4096,persistent_gemm_fp16_group16,"
     "persistent_gemm_fp16_128x128,persistent_gemm_fp16_s3_whole,"
     "persistent_gemm_fp16_quarters,gemm_fp16_128x256_t256_s4,"
     "gemm_fp16_4096_128x256_t256_s4,gemm_bf16_128x256_t256_s4`"),
    ("gpu_suite_h200_thirteenth.json",
     "no proxy fence before the MMAs of tiles that TMA wrote; the 128×256 GEMM also split "
     "between a producer warpgroup and its two consumer warpgroups (2026-12-02, thirteenth "
     "session, a subset; the checks cover the suite)",
     "`python bench/gpu_suite.py build --only gemm_fp16_bk64_s4,gemm_fp16_128x256_t256_s4,"
     "gemm_fp16_128x256_t256_s4_split,gemm_fp16_4096_128x256_t256_s4,"
     "gemm_bf16_128x256_t256_s4`"),
    ("gpu_suite_h200_twelfth.json",
     "warp roles written by hand (`T.ws`, mbarriers, `T.tma_copy` by TMA; "
     "`examples/ws_gemm.py`) beside the automatic producer/consumer split of the same tile "
     "(`gemm_fp16_bk64_s4`); shared tiles read through access pointers no longer kept to the "
     "end of the block (2026-12-02, twelfth session, a subset; the checks cover the suite)",
     "`python bench/gpu_suite.py build --only ws_gemm_s2,ws_gemm_s4,gemm_fp16_bk64_s4,"
     "gemm_fp16_128x256_t256`"),
    ("gpu_suite_h200_eleventh.json",
     "the occupancy repair keeps a second build that spills at most 64 bytes a thread "
     "(FlashAttention 128×64 with 8 warps: 128 registers, 32 bytes spilled, two blocks per "
     "SM instead of one); the longest blocks of a causal kernel started first "
     "(`passes/heavy_blocks_first.py`; `_as_written`: block 0 first); shared tiles kept "
     "alive only within their scope (2026-12-02, eleventh session, a subset; built before "
     "commit c5716c9 moved the wait for a TMA loop's last MMAs before its closing barrier, "
     "a correctness fix after the loop, not re-timed)",
     "`python bench/gpu_suite.py build --only gemm_fp16,gemm_fp16_bk64_s4,"
     "gemm_fp16_128x256_t256_s4,gemm_fp16_4096_128x256_t256_s4,gemm_bf16_128x256_t256_s4,"
     "flash_attention,flash_attention_bm128_w8,flash_attention_causal,"
     "flash_attention_causal_bm128_w8,flash_attention_causal_bm128_w8_as_written,"
     "flash_attention_causal_b2h16_bm128_w8,flash_attention_causal_b2h16_bm128_w8_as_written,"
     "vector_add_one_per_thread,swiglu_one_per_thread`"),
    ("gpu_suite_h200_eleventh_a.json",
     "the experiment behind the spill rule above: `fa_bm128_w8_2blocks` is "
     "`flash_attention_bm128_w8` compiled by hand with `__launch_bounds__(256, 2)` (ptxas: "
     "128 registers, 32 bytes spilled), beside the build tilelab made then (132 registers, "
     "one block per SM); the causal block order A/B on 4096 blocks (2026-12-02, eleventh "
     "session, a subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16_bk64,gemm_fp16_bk64_s4,"
     "flash_attention_bm128_w8,flash_attention_causal,flash_attention_causal_as_written,"
     "flash_attention_causal_bm128_w8,flash_attention_causal_bm128_w8_as_written` and a "
     "scratch script for `fa_bm128_w8_2blocks`"),
    ("gpu_suite_h200_warp_specialized.json",
     "warp specialization, A/B in one run: each GEMM config split between a producer "
     "warpgroup and its consumers (every name without `_one_role`: 128×128×64 in 4 stages on "
     "one warpgroup, 128×256×64 on two, FullRow, 4096³) beside the same config on one role "
     "(`tl.disable_warp_specialized`). A second run of the same artifacts: 588/556, "
     "609/628, 627/653 TFLOP/s. From this, the split stays where it paid: one consumer "
     "warpgroup, a block alone on its SM (2026-12-02, tenth session, a subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16_bk64_s4,gemm_fp16_bk64_s4_one_role,"
     "gemm_fp16_128x256_t256_s4,gemm_fp16_128x256_t256_s4_one_role,"
     "gemm_fp16_128x256_t256_s4_fullrow,gemm_fp16_4096_128x256_t256_s4,"
     "gemm_fp16_4096_128x256_t256_s4_one_role` (the second and fourth `_one_role` builds are "
     "the defaults now)"),
    ("gpu_suite_h200_tenth.json",
     "the split kept to loops that keep their MMAs in flight in a block alone on its SM "
     "(the rule before the A/B above narrowed it to one warpgroup: 128×128×64 and the "
     "128×256×64 rows ran split, `_one_role` not); the course GEMM and FlashAttention one "
     "role, as they are now; the shared-lifetime fix in (2026-12-02, tenth session, a "
     "subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16,gemm_fp16_bk64_s4,"
     "gemm_fp16_128x256_t256_s4,gemm_fp16_128x256_t256_s4_one_role,"
     "gemm_fp16_128x256_t256_s4_fullrow,gemm_fp16_4096_128x256_t256_s4,"
     "gemm_bf16_128x256_t256_s4,flash_attention,flash_attention_causal,"
     "flash_attention_causal_bm128_w8`"),
    ("gpu_suite_h200_split_everywhere.json",
     "the first warp-specialized build: every TMA loop split, FlashAttention's too, except "
     "where `_one_role` (`tl.disable_warp_specialized`); the course GEMM (128×128×32, 3 "
     "stages, room for four blocks by shared memory) fell to 296 TFLOP/s, its producer "
     "warpgroup's registers keeping all but one block off each SM (2026-12-02, tenth "
     "session, a subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16,gemm_fp16_bk64_s4,"
     "gemm_fp16_128x256_t256_s4,...,flash_attention_causal_bm128_w8_one_role` (the "
     "`_one_role` entries since removed: they are the defaults now)"),
    ("gpu_suite_h200_occupancy.json",
     "the occupancy repair (`__launch_bounds__(threads, k)` where a few registers too many "
     "kept a second block off an SM): causal FlashAttention 128×64 at 128 registers instead "
     "of 138; 128×64 non-causal keeps 132 (at 128 ptxas would spill) (2026-12-02, a subset)",
     "`python bench/gpu_suite.py build --only flash_attention,flash_attention_bm128_w8,"
     "flash_attention_causal,flash_attention_causal_bm128_w8,gemm_fp16_128x256_t256_s4`"),
    ("gpu_suite_h200_tma_default.json",
     "TMA the default on sm_90a, also for loops that wait for their MMAs (FlashAttention's K "
     "and V); cp.async builds beside them (2026-12-02, commit e1760c0, a subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16,gemm_fp16_bk64_s4,"
     "gemm_fp16_128x256_t256_s4,gemm_fp16_bk64_s4_cp_async,gemm_fp16_128x256_t256_s4_cp_async,"
     "gemm_fp16_4096_128x256_t256_s4,gemm_bf16_128x256_t256_s4,flash_attention,"
     "flash_attention_bm128_w8,flash_attention_bm128_w8_s3,flash_attention_bm128_w8_cp_async,"
     "flash_attention_causal,flash_attention_causal_bm128_w8`"),
    ("gpu_suite_h200_tma.json",
     "TMA copies with mbarrier completion in pipelined wgmma GEMM loops (`tl.enable_tma`, "
     "opt-in at the time of the run), beside the same configs on cp.async (2026-12-02, a "
     "subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16,gemm_fp16_bk64_s4,"
     "gemm_fp16_128x256_t256_s4,gemm_fp16_bk64_s4_tma,gemm_fp16_128x256_t256_s4_tma,"
     "gemm_fp16_128x256x32_t256_s6,gemm_fp16_4096_128x256_t256_s4,gemm_bf16_128x256_t256_s4,"
     "flash_attention,flash_attention_causal`"),
    ("gpu_suite_h200_gemm_attention.json",
     "wgmma for T.gemm, one iteration's MMAs in flight in GEMM loops, one barrier per "
     "pipelined iteration; two warpgroups, causal FlashAttention (2026-12-01, a subset)",
     "`python bench/gpu_suite.py build --only gemm_fp16,gemm_fp16_bk64,"
     "gemm_fp16_128x256_t256,gemm_fp16_bk64_s4,gemm_fp16_128x256_t256_s4,flash_attention,"
     "flash_attention_bm128_w8,flash_attention_causal,flash_attention_causal_bm128_w8`"),
    ("gpu_suite_h200_hopper.json",
     "wgmma for T.gemm, block coarsening for elementwise kernels (2026-12-01, a subset)",
     "`python bench/gpu_suite.py build --only vector_add,vector_add_one_per_thread,swiglu,"
     "swiglu_one_per_thread,vector_add_x4,gemm_fp16,gemm_fp16_bk64,flash_attention,"
     "flash_attention_bm128_w8`"),
    ("gpu_suite_h200.json", "Ampere-class instructions (mma.sync, ldmatrix, cp.async)",
     "`python bench/gpu_suite.py build`"),
]


def gpu_section(r: dict, what: str, build: str, results: str) -> list[str]:
    ce = r["ceilings"]
    out = [
        f"## GPU: {r['device']} (sm_90a), CUDA backend: {what}",
        "",
        f"Commands: {build} here (TVM and nvcc compile and export every kernel to "
        "`bench/artifacts/suite/`), then on the GPU machine "
        f"`python bench/gpu_suite.py run --json bench/results/{results}` (kernels "
        "loaded with `tilelab.load`, no TVM). Timing: CUDA events, 10 warm-up launches, "
        "median of 50, L2 flushed (256 MB memset) before every launch, `torch.randn` inputs; "
        "kernel and baseline alternated three times, the middle median kept.",
        "",
        f"Ceilings measured in the same run: copy bandwidth **{ce['copy_GBps']:.0f} GB/s** "
        f"(`dst.copy_(src)`, 2^28 fp32); bf16 `torch.matmul` 8192³ "
        f"**{ce['bf16_matmul_TFLOPs']:.0f} TFLOP/s**.",
        "",
        "| kernel | shapes, dtype, configuration | tilelab | PyTorch, same run | speedup "
        "| of the ceiling |",
        "|---|---|---|---|---|---|",
    ]
    for row in r["bench"]:
        name = row["name"]
        stem, variant = _variant_of(name)
        base = BASELINES.get(stem, "`F.scaled_dot_product_attention(is_causal=True)`"
                             if "causal" in stem else "`F.scaled_dot_product_attention`")
        if "GBps" in row:
            ours = f"{row['ms']:.3f} ms, {row['GBps']:.0f} GB/s"
            theirs = f"{row['torch_ms']:.3f} ms, {row['torch_GBps']:.0f} GB/s"
            pct = f"{100 * row['GBps'] / ce['copy_GBps']:.0f}% of copy"
        else:
            ours = f"{row['ms']:.3f} ms, {row['TFLOPs']:.0f} TFLOP/s"
            theirs = f"{row['torch_ms']:.3f} ms, {row['torch_TFLOPs']:.0f} TFLOP/s"
            pct = f"{100 * row['TFLOPs'] / ce['bf16_matmul_TFLOPs']:.0f}% of bf16 matmul"
        shapes = SHAPES.get(name) or SHAPES.get(stem, "") + variant
        out.append(f"| {name} | {shapes} | {ours} | {base}: {theirs} | "
                   f"×{row['speedup']:.2f} | {pct} |")
    checks = ", ".join(f"{c['name']} {'ok' if c['ok'] else 'FAIL'}" for c in r["checks"])
    out += ["", f"Correctness in the same run (three fresh input sets each, shapes with tails; "
                f"see `bench/gpu_suite.py` CHECKS): {checks}.", ""]
    return out


def cpu_section(c: dict) -> list[str]:
    return [
        f"## CPU backend ({c['machine']})",
        "",
        "Command: `python bench/cpu_compile.py --json bench/results/cpu_compile.json`.",
        "",
        "| measure | result | goal |",
        "|---|---|---|",
        f"| cold compile, course GEMM for CPU (empty cache; imports excluded) | "
        f"{c['cold']['compile_s'] * 1e3:.0f} ms | < 1.5 s |",
        f"| warm compile (disk-cache hit in a new process) | {c['warm']['compile_s'] * 1e3:.0f} ms "
        f"| < 50 ms |",
        f"| 512×512×512 fp32 GEMM kernel on the CPU | {c['cold']['gemm512_fp32_ms']:.1f} ms "
        f"(torch.matmul {c['cold']['torch_ms']:.1f} ms) | < 0.5 s |",
        f"| `import torch, tvm, tilelab` | {c['cold']['imports_s']:.2f} s | reported |",
        *([f"| cold compile for sm_90a, no GPU needed (nvcc included): course GEMM 8192³ | "
           f"{c['cold']['gemm_sm90a_s']:.2f} s | ≤ 1.5 s |",
           f"| the same, course FlashAttention b4 h32 s4096 d128 | "
           f"{c['cold']['flash_attention_sm90a_s']:.2f} s | ≤ 1.5 s |"]
          if "gemm_sm90a_s" in c["cold"] else []),
        "",
    ]


def autotune_section(r: dict) -> list[str]:
    """The autotuner's sweeps (bench/autotune.py): compile phase, tune time, winners."""
    out = ["## Autotuning on the GPU machine", "",
           f"Command: `python {r['command']}` on {r['machine']}. The compile phase with "
           "one worker (on a sample of the candidates) against one worker per "
           "core, each "
           "into an empty compile cache; the whole tune from an empty cache; the winner, "
           "the hand-picked default and the vendor library timed in the same process "
           "(`tilelab.profiler.do_bench`: CUDA events, L2 flushed).", "",
           "| kernel | candidates | compile speed-up (goal 0.7 × cores) | whole tune "
           "(goal ≤ 60 s) | winner | winner vs default | winner vs vendor |",
           "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        winner = ", ".join(f"{k} {v}" for k, v in row["winner"].items())
        out.append(
            f"| {row['kernel']} | {row['configs']} ({row['failed']} failed) | "
            f"{row['compile_speedup']:.1f}× on {row['compile_workers']} workers "
            f"(goal {row['compile_speedup_goal']:.1f}) | {row['tune_wall_s']:.1f} s "
            f"(benchmark phase {row['benchmark_s']:.1f} s) | {winner}: "
            f"{row['winner_ms']:.3f} ms | ×{row['winner_vs_hand_picked']:.2f} "
            f"({row['hand_picked_ms']:.3f} ms) | ×{row['winner_vs_vendor']:.2f} "
            f"({row['vendor_ms']:.3f} ms) |")
    return out + [""]


PEER_NAMES = {
    "gemm_128x128x32_s3": "GEMM 8192³ fp16 (examples/gemm.py), 128×128×32 tiles, 3 stages, "
                          "128 threads",
    "gemm_128x256x64_s4_t256": "GEMM 8192³ fp16, 128×256×64 tiles, 4 stages, 256 threads",
    "gemm_128x256x64_s4_t256_panel8": "the same, blocks in panels of 8 (T.use_swizzle(8))",
    "flash_attention_d128": "FlashAttention b4 h32 s4096 d128 fp16 (examples/flash_attention.py), "
                            "64×64 blocks, 2 stages, 128 threads",
    "flash_attention_d128_bm128_w8": "the same, 128×64 blocks, 256 threads",
    "flash_attention_d128_causal": "the same, causal, 64×64 blocks, 128 threads",
    "flash_attention_d128_causal_bm128_w8": "the same, causal, 128×64 blocks, 256 threads",
    "flash_attention_d128_bm128_bn128_w8": "the same, non-causal, 128×128 blocks, 256 threads",
    "softmax": "row softmax 8192×8192 fp16 (examples/softmax.py), called eagerly",
}


def peer_section(r: dict) -> list[str]:
    """The course's sources through both compilers (bench/peer_tilelang.py)."""
    out = [f"## Same program, two compilers: tilelab and TileLang 0.1.15 ({r['machine']}, "
           f"{r['date']})", "",
           f"Command: `{r['command'].replace('/tmp/tilelang-site', 'DIR')}` on one "
           f"{r['machine']} ({r['date']}). The course's sources, unchanged, compiled by each "
           "compiler in a process of its own (TileLang brings its own TVM); the processes "
           "alternate, twice each; each times the program and PyTorch's kernel for it with "
           "CUDA events, warm-up, L2 flushed before every launch, median; the table keeps the "
           "median over the rounds. A kernel is called as the course calls it (the softmax "
           "eagerly: its dispatch is in the time).", "",
           "| program | tilelab | TileLang | tilelab vs TileLang | PyTorch, same run | "
           "max error (both) |", "|---|---|---|---|---|---|"]
    for name, row in r["results"].items():
        ours, theirs = row["tilelab"], row["tilelang"]
        if "ms" not in ours or "ms" not in theirs:
            out.append(f"| {PEER_NAMES.get(name, name)} | {ours.get('error', '')} | "
                       f"{theirs.get('error', '')} | | | |")
            continue
        out.append(f"| {PEER_NAMES.get(name, name)} | {ours['ms']:.3f} ms | "
                   f"{theirs['ms']:.3f} ms | ×{row['tilelab_vs_tilelang']:.2f} | "
                   f"{ours['torch_ms']:.3f} ms | "
                   f"{max(ours['max_error'], theirs['max_error']):.1e} |")
    return out + ([""] + [r["note"]] if r.get("note") else []) + [""]


def main() -> None:
    lines = ["# Performance", "",
             "Every figure comes from a `bench/` script; each kernel is timed beside its "
             "PyTorch baseline in the same run. Regenerate this page with "
             "`python bench/report.py`.", ""]
    for results, what, build in RUNS:
        gpu = RESULTS / results
        if gpu.exists():
            lines += gpu_section(json.loads(gpu.read_text()), what, build, results)
    for peer in ("peer_tilelang_h200.json", "peer_tilelang_h100.json"):  # the latest first
        if (RESULTS / peer).exists():
            lines += peer_section(json.loads((RESULTS / peer).read_text()))
    tuned = RESULTS / "autotune_h200.json"
    if tuned.exists():
        lines += autotune_section(json.loads(tuned.read_text()))
    cpu = RESULTS / "cpu_compile.json"
    if cpu.exists():
        lines += cpu_section(json.loads(cpu.read_text()))
    notes = RESULTS / "notes.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    (ROOT / "docs" / "PERFORMANCE.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
