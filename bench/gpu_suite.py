"""The GPU suite: course kernels checked against PyTorch and timed beside it.

Two halves, because the GPU machine has no TVM and no nvcc:

    python bench/gpu_suite.py build [--quick]   # here: compile and export every kernel
    python bench/gpu_suite.py run   [--json F]  # on the GPU: load, check, time
    python bench/gpu_suite.py build --only R,... --variant _x:tl.key=true  # R and R_x
    python bench/gpu_suite.py ab --pairs R:R_x,...  # on the GPU: two builds, alternated
    python bench/gpu_suite.py ab --pairs R:torch,...  # a build against its PyTorch baseline

`build` compiles each course kernel for its shapes (shapes with tails for the
checks, the issue's large shapes for the timings) and exports `.tilelab`
artifacts plus a manifest into bench/artifacts/suite/. `run` loads them with
`tilelab.load` (no TVM), makes fresh random inputs, compares with the PyTorch
reference, and times kernel and baseline in the same run: CUDA events, warm-up,
median, L2 flushed before every launch; kernel and baseline are timed alternately three
times and the middle of the three medians is kept, because clocks drift during a run.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "bench" / "artifacts" / "suite"
sys.path.insert(0, str(ROOT))

# name, kernel, compile-time sizes, inputs, reference, tolerance, work
WS = {"pass_configs": {"tl.force_warp_specialized": True,  # a producer warp, where it may
                       "tl.enable_warpgroup_turns": False}}  # (without turns: the `_ws` rows)
TURNS = {"pass_configs": {**WS["pass_configs"], "tl.enable_warpgroup_turns": True}}
# the split loop rotated: the next key tile's S = Q Kᵀ issued before this one's O += P V
ROTATE = {"pass_configs": {**WS["pass_configs"], "tl.enable_intra_warpgroup_overlap": True}}
ROTATE_TURNS = {"pass_configs": {**TURNS["pass_configs"], **ROTATE["pass_configs"]}}
ONE_ROLE = {"tl.disable_warp_specialized": True}  # (a pass_configs entry)

CHECKS = [
    ("vector_add_coarsened", "vector_add", {"N": (1 << 23) + 3},
     [("randn", ((1 << 23) + 3,), "float32")] * 2, "add", 1e-5),
    ("swiglu_coarsened", "swiglu", {"N": (1 << 23) + 3},
     [("randn", ((1 << 23) + 3,), "float32")] * 2, "swiglu", 1e-4),
    ("vector_add", "vector_add", {"N": 1000003}, [("randn", (1000003,), "float32")] * 2,
     "add", 1e-5),
    ("row_sum", "row_sum", {"M": 777, "N": 1000}, [("randn", (777, 1000), "float32")],
     "row_sum", 1e-3),
    ("softmax", "softmax", {"M": 1000, "N": 4096}, [("randn", (1000, 4096), "float16")],
     "softmax", 1e-2),
    ("softmax_tail", "softmax", {"M": 21, "N": 1000, "options": {"block_m": 4}},
     [("randn", (21, 1000), "float16")], "softmax", 1e-2),
    ("row_sum_rows", "row_sum", {"M": 29, "N": 50, "options": {"block_m": 8}},
     [("randn", (29, 50), "float32")], "row_sum", 1e-3),
    ("layer_norm_rows", "layer_norm", {"M": 13, "N": 96, "options": {"block_m": 4}},
     [("randn", (13, 96), "float16"), ("randn", (96,), "float16"),
      ("randn", (96,), "float16")], "layer_norm", 2e-2),
    ("rms_norm_rows", "rms_norm", {"M": 19, "N": 72, "options": {"block_m": 8}},
     [("randn", (19, 72), "float16"), ("randn", (72,), "float16")], "rms_norm", 2e-2),
    ("layer_norm_registers", "layer_norm_registers", {"M": 999, "N": 4096},
     [("randn", (999, 4096), "float16"), ("randn", (4096,), "float16"),
      ("randn", (4096,), "float16")], "layer_norm", 2e-2),
    ("layer_norm_registers_rows", "layer_norm_registers",
     {"M": 13, "N": 96, "options": {"block_m": 4}},
     [("randn", (13, 96), "float16"), ("randn", (96,), "float16"),
      ("randn", (96,), "float16")], "layer_norm", 2e-2),
    ("layer_norm", "layer_norm", {"M": 999, "N": 4096},
     [("randn", (999, 4096), "float16"), ("randn", (4096,), "float16"),
      ("randn", (4096,), "float16")], "layer_norm", 2e-2),
    ("rms_norm", "rms_norm", {"M": 999, "N": 4096},
     [("randn", (999, 4096), "float16"), ("randn", (4096,), "float16")], "rms_norm", 2e-2),
    ("gemm_fp16", "gemm", {"M": 1000, "N": 1000, "K": 1000},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("gemm_fp16_panel", "gemm", {"M": 1000, "N": 1200, "K": 256, "options": {"panel": 3}},
     [("randn", (1000, 256), "float16"), ("randn", (256, 1200), "float16")], "matmul", 2e-2),
    ("gemm_fp16_128x256_t256", "gemm",
     {"M": 1000, "N": 1000, "K": 1000,
      "options": {"block_n": 256, "block_k": 64, "num_stages": 3, "threads": 256}},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("gemm_fp16_bk64_s4", "gemm",
     {"M": 1000, "N": 1000, "K": 1000, "options": {"block_k": 64, "num_stages": 4}},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    # C through a shared tile (passes/stage_stores.py) on the Ampere path, on a block split
    # between roles, and the direct store from registers kept for comparison
    ("gemm_fp16_mma_sync", "gemm", {"M": 1000, "N": 1000, "K": 1000,
                                    "options": {"pass_configs": {"tl.disable_wgmma": True}}},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("gemm_fp16_128x256_t256_s4_split", "gemm",
     {"M": 1000, "N": 1000, "K": 1000,
      "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256,
                  "pass_configs": {"tl.force_warp_specialized": True}}},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("gemm_fp16_direct", "gemm", {"M": 1000, "N": 1000, "K": 1000,
                                  "options": {"pass_configs": {"tl.disable_stage_stores": True}}},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("gemm_fp16_t256_s5_short_k", "gemm",  # more slots than K tiles: a prologue cut short
     {"M": 1000, "N": 1000, "K": 136,
      "options": {"block_n": 256, "block_k": 32, "num_stages": 5, "threads": 256}},
     [("randn", (1000, 136), "float16"), ("randn", (136, 1000), "float16")], "matmul", 2e-2),
    # persistent blocks, each walking several tiles (edge tiles included) with its producer
    # warp running ahead across them
    ("persistent_gemm", "persistent_gemm", {"M": 1000, "N": 1000, "K": 1000,
                                            "options": {"blocks": 7}},
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("persistent_gemm_128x128_groups", "persistent_gemm",
     {"M": 1000, "N": 1800, "K": 520,
      "options": {"blocks": 132, "block_n": 128, "threads": 128, "group": 3}},
     [("randn", (1000, 520), "float16"), ("randn", (520, 1800), "float16")], "matmul", 2e-2),
    ("persistent_gemm_bf16", "persistent_gemm_bf16", {"M": 520, "N": 264, "K": 1008,
                                                      "options": {"blocks": 2}},
     [("randn", (520, 1008), "bfloat16"), ("randn", (1008, 264), "bfloat16")], "matmul", 3e-2),
    ("ws_gemm", "ws_gemm", {"M": 1000, "N": 1000, "K": 1000},  # warp roles written by hand
     [("randn", (1000, 1000), "float16")] * 2, "matmul", 2e-2),
    ("gemm_bf16", "gemm_bf16", {"M": 520, "N": 264, "K": 1008},
     [("randn", (520, 1008), "bfloat16"), ("randn", (1008, 264), "bfloat16")], "matmul", 3e-2),
    ("gemm_bias_relu", "gemm_bias_relu", {"M": 1000, "N": 1000, "K": 512},
     [("randn", (1000, 512), "float16"), ("randn", (512, 1000), "float16"),
      ("randn", (1000,), "float16")], "matmul_bias_relu", 2e-2),
    ("annotated_layout", "annotated_scale", {"M": 1000, "N": 64},
     [("randn", (1000, 64), "float32")], "scale_plus_row", 1e-5),
    ("relayout_through_shared", "relayout", {"M": 200, "N": 136, "K": 64},
     [("randn", (200, 64), "float16"), ("randn", (64, 136), "float16")], "twice_matmul", 1e-2),
    ("atomic_column_sum", "atomic_column_sum", {"M": 1000, "N": 300},
     [("randn", (1000, 300), "float32"), ("zeros", (300,), "float32")], "column_sum", 1e-3),
    ("online_softmax", "online_softmax", {"M": 1000, "N": 5000},
     [("randn", (1000, 5000), "float16")], "softmax", 1e-2),
    ("flash_attention_d64", "flash_attention", {"shape": (2, 4, 1000, 64)},
     [("randn", (2, 4, 1000, 64), "float16")] * 3, "sdpa", 2e-2),
    ("flash_attention_d128", "flash_attention", {"shape": (1, 4, 777, 128)},
     [("randn", (1, 4, 777, 128), "float16")] * 3, "sdpa", 2e-2),
    ("flash_attention_d128_causal", "flash_attention",
     {"shape": (1, 4, 777, 128), "options": {"causal": True}},
     [("randn", (1, 4, 777, 128), "float16")] * 3, "sdpa_causal", 2e-2),
    # 16 x 8 x 2 blocks: enough for the longest to be started first (heavy_blocks_first.py)
    ("flash_attention_d128_causal_heavy_first", "flash_attention",
     {"shape": (2, 8, 1000, 128), "options": {"causal": True}},
     [("randn", (2, 8, 1000, 128), "float16")] * 3, "sdpa_causal", 2e-2),
    # split between a producer warpgroup and two consumer warpgroups that take turns at the
    # tensor cores, with the producer's registers moved to them; the turns, then the
    # registers, left out; 128-key tiles
    ("flash_attention_d128_ws", "flash_attention",
     {"shape": (1, 4, 777, 128), "options": {"block_m": 128, "threads": 256, **WS}},
     [("randn", (1, 4, 777, 128), "float16")] * 3, "sdpa", 2e-2),
    ("flash_attention_d128_causal_ws", "flash_attention",
     {"shape": (2, 8, 1000, 128), "options": {"causal": True, "block_m": 128, "threads": 256,
                                              **WS}},
     [("randn", (2, 8, 1000, 128), "float16")] * 3, "sdpa_causal", 2e-2),
    ("flash_attention_d64_ws", "flash_attention",
     {"shape": (2, 4, 1000, 64), "options": {"block_m": 128, "threads": 256, **WS}},
     [("randn", (2, 4, 1000, 64), "float16")] * 3, "sdpa", 2e-2),
    ("flash_attention_d128_ws_turns", "flash_attention",
     {"shape": (1, 4, 777, 128), "options": {"block_m": 128, "threads": 256, **TURNS}},
     [("randn", (1, 4, 777, 128), "float16")] * 3, "sdpa", 2e-2),
    ("flash_attention_d128_causal_ws_turns", "flash_attention",
     {"shape": (2, 8, 1000, 128), "options": {"causal": True, "block_m": 128, "threads": 256,
                                              **TURNS}},
     [("randn", (2, 8, 1000, 128), "float16")] * 3, "sdpa_causal", 2e-2),
    ("flash_attention_d128_ws_bn128_turns", "flash_attention",
     {"shape": (1, 4, 777, 128), "options": {"block_m": 128, "block_n": 128, "threads": 256,
                                             **TURNS}},
     [("randn", (1, 4, 777, 128), "float16")] * 3, "sdpa", 2e-2),
    # rotated (the next tile's first T.gemm before this one's last), alone and with turns;
    # a sequence of 100: one key tile, the rotated loop runs no iteration
    *[(f"flash_attention_d{d}{causal}_ws_{name}{bn}{'_one_tile' if seq < 128 else ''}",
       "flash_attention",
       {"shape": (2, 8, seq, d), "options": {
           "causal": bool(causal), "block_m": 128, "block_n": 128 if bn else 64,
           "threads": 256, **configs}},
       [("randn", (2, 8, seq, d), "float16")] * 3, "sdpa_causal" if causal else "sdpa", 2e-2)
      for name, configs in (("rotate", ROTATE), ("rotate_turns", ROTATE_TURNS))
      for d, causal, bn, seq in ((128, "", "", 777), (128, "_causal", "", 1000),
                                 (64, "", "_bn128", 1000), (128, "", "", 100))],
]

BENCH = [
    ("vector_add", "vector_add", {"N": 1 << 28}, [("randn", (1 << 28,), "float32")] * 2,
     "add", 1e-5, {"bytes": 3 * 4 * (1 << 28)}),
    ("vector_add_one_per_thread", "vector_add",
     {"N": 1 << 28, "options": {"pass_configs": {"tl.disable_coarsen": True}}},
     [("randn", (1 << 28,), "float32")] * 2, "add", 1e-5, {"bytes": 3 * 4 * (1 << 28)}),
    ("swiglu", "swiglu", {"N": 1 << 28}, [("randn", (1 << 28,), "float32")] * 2,
     "swiglu", 1e-4, {"bytes": 3 * 4 * (1 << 28)}),
    ("swiglu_one_per_thread", "swiglu",
     {"N": 1 << 28, "options": {"pass_configs": {"tl.disable_coarsen": True}}},
     [("randn", (1 << 28,), "float32")] * 2, "swiglu", 1e-4, {"bytes": 3 * 4 * (1 << 28)}),
    ("vector_add_x4", "vector_add", {"N": 1 << 28, "options": {"block_size": 1024,
                                                              "threads": 256}},
     [("randn", (1 << 28,), "float32")] * 2, "add", 1e-5, {"bytes": 3 * 4 * (1 << 28)}),
    ("softmax", "softmax", {"M": 8192, "N": 8192}, [("randn", (8192, 8192), "float16")],
     "softmax", 1e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("softmax_t256", "softmax", {"M": 8192, "N": 8192, "options": {"threads": 256}},
     [("randn", (8192, 8192), "float16")], "softmax", 1e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("softmax_t256_fast", "softmax",
     {"M": 8192, "N": 8192, "options": {"threads": 256, "pass_configs": {
         "tl.enable_fast_math": True}}},
     [("randn", (8192, 8192), "float16")], "softmax", 1e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("softmax_t512", "softmax", {"M": 8192, "N": 8192, "options": {"threads": 512}},
     [("randn", (8192, 8192), "float16")], "softmax", 1e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("layer_norm", "layer_norm", {"M": 8192, "N": 8192},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16"),
      ("randn", (8192,), "float16")], "layer_norm", 2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("layer_norm_bm2", "layer_norm", {"M": 8192, "N": 8192, "options": {"block_m": 2}},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16"),
      ("randn", (8192,), "float16")], "layer_norm", 2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("layer_norm_bm2_t512", "layer_norm", {"M": 8192, "N": 8192,
                                           "options": {"block_m": 2, "threads": 512}},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16"),
      ("randn", (8192,), "float16")], "layer_norm", 2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("layer_norm_registers", "layer_norm_registers", {"M": 8192, "N": 8192},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16"),
      ("randn", (8192,), "float16")], "layer_norm", 2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("layer_norm_registers_t512", "layer_norm_registers",
     {"M": 8192, "N": 8192, "options": {"threads": 512}},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16"),
      ("randn", (8192,), "float16")], "layer_norm", 2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("layer_norm_bm4_t1024", "layer_norm", {"M": 8192, "N": 8192,
                                            "options": {"block_m": 4, "threads": 1024}},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16"),
      ("randn", (8192,), "float16")], "layer_norm", 2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("rms_norm", "rms_norm", {"M": 8192, "N": 8192},
     [("randn", (8192, 8192), "float16"), ("randn", (8192,), "float16")], "rms_norm_torch",
     2e-2, {"bytes": 2 * 2 * 8192 * 8192}),
    ("gemm_fp16", "gemm", {"M": 8192, "N": 8192, "K": 8192},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_panel8", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                  "options": {"panel": 8}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_bk64", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                "options": {"block_k": 64}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    # two warpgroups on a 128×256 tile (TileLang's fastest configuration of this GEMM)
    ("gemm_fp16_128x256_t256", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                        "options": {"block_n": 256, "block_k": 64,
                                                    "num_stages": 3, "threads": 256,
                                                    "panel": 8}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    # four slots: with the MMAs of one iteration in flight, copies run two tiles ahead
    ("gemm_fp16_bk64_s4", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                   "options": {"block_k": 64, "num_stages": 4, "panel": 8}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    # the producer/consumer split written by hand (examples/ws_gemm.py): the producer
    # warpgroup copies with plain loads and stores, the mbarriers hand the slots over
    ("ws_gemm_s2", "ws_gemm", {"M": 8192, "N": 8192, "K": 8192},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("ws_gemm_s4", "ws_gemm", {"M": 8192, "N": 8192, "K": 8192, "options": {"num_stages": 4}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_bk64_s4_one_role", "gemm",
     {"M": 8192, "N": 8192, "K": 8192,
      "options": {"block_k": 64, "num_stages": 4, "panel": 8,
                  "pass_configs": {"tl.disable_warp_specialized": True}}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_128x256_t256_s4", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                           "options": {"block_n": 256, "block_k": 64,
                                                       "num_stages": 4, "threads": 256,
                                                       "panel": 8}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    # the same, split between a producer warpgroup and the two consumer warpgroups
    ("gemm_fp16_128x256_t256_s4_split", "gemm",
     {"M": 8192, "N": 8192, "K": 8192,
      "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256, "panel": 8,
                  "pass_configs": {"tl.force_warp_specialized": True}}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    # the same two with their tiles copied by every thread's cp.async instead of TMA
    ("gemm_fp16_bk64_s4_cp_async", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                            "options": {"block_k": 64, "num_stages": 4,
                                                        "panel": 8, "pass_configs": {
                                                            "tl.disable_tma_lower": True}}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_128x256_t256_s4_cp_async", "gemm",
     {"M": 8192, "N": 8192, "K": 8192,
      "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256, "panel": 8,
                  "pass_configs": {"tl.disable_tma_lower": True}}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_128x256_t256_s4_fullrow", "gemm",
     {"M": 8192, "N": 8192, "K": 8192,
      "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256, "panel": 8,
                  "policy": "FullRow"}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_fp16_128x256x32_t256_s6", "gemm", {"M": 8192, "N": 8192, "K": 8192,
                                              "options": {"block_n": 256, "block_k": 32,
                                                          "num_stages": 6, "threads": 256,
                                                          "panel": 8}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    *[(f"gemm_fp16_4096_128x256{'x32' if bk == 32 else ''}_t256_s{stages}", "gemm",
       {"M": 4096, "N": 4096, "K": 4096,
        "options": {"block_n": 256, "block_k": bk, "num_stages": stages, "threads": 256,
                    "panel": 8}},
       [("randn", (4096, 4096), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 4096 ** 3})
      for bk, stages in ((64, 3), (32, 6))],
    ("gemm_fp16_4096_128x256_t256_s4", "gemm", {"M": 4096, "N": 4096, "K": 4096,
                                                "options": {"block_n": 256, "block_k": 64,
                                                            "num_stages": 4, "threads": 256,
                                                            "panel": 8}},
     [("randn", (4096, 4096), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 4096 ** 3}),
    ("gemm_bf16_128x256_t256_s4", "gemm_bf16", {"M": 8192, "N": 8192, "K": 8192,
                                                "options": {"block_n": 256, "block_k": 64,
                                                            "num_stages": 4, "threads": 256,
                                                            "panel": 8}},
     [("randn", (8192, 8192), "bfloat16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("gemm_bf16_4096_128x256_t256_s4", "gemm_bf16", {"M": 4096, "N": 4096, "K": 4096,
                                                     "options": {"block_n": 256, "block_k": 64,
                                                                 "num_stages": 4,
                                                                 "threads": 256, "panel": 8}},
     [("randn", (4096, 4096), "bfloat16")] * 2, "matmul", 5e-2, {"flops": 2 * 4096 ** 3}),
    # C stored straight from the accumulator's registers (`tl.disable_stage_stores`)
    *[(f"{name}_direct", kind, {**sizes, "options": {**sizes.get("options", {}),
                                                      "pass_configs": {
                                                          "tl.disable_stage_stores": True}}},
       inputs, reference, tolerance, work)
      for name, kind, sizes, inputs, reference, tolerance, work in [
          ("gemm_fp16", "gemm", {"M": 8192, "N": 8192, "K": 8192},
           [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
          ("gemm_fp16_128x256_t256_s4", "gemm",
           {"M": 8192, "N": 8192, "K": 8192,
            "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256,
                        "panel": 8}},
           [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
          ("gemm_fp16_4096_128x256_t256_s4", "gemm",
           {"M": 4096, "N": 4096, "K": 4096,
            "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256,
                        "panel": 8}},
           [("randn", (4096, 4096), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 4096 ** 3}),
          ("gemm_bf16_128x256_t256_s4", "gemm_bf16",
           {"M": 8192, "N": 8192, "K": 8192,
            "options": {"block_n": 256, "block_k": 64, "num_stages": 4, "threads": 256,
                        "panel": 8}},
           [("randn", (8192, 8192), "bfloat16")] * 2, "matmul", 5e-2,
           {"flops": 2 * 8192 ** 3})]],
    # one block per multiprocessor walking the tiles (examples/persistent_gemm.py):
    # 128x256x64 tiles in 4 stages on two consumer warpgroups and a producer warp, C stored
    # through a shared tile in two halves
    ("persistent_gemm_fp16", "persistent_gemm", {"M": 8192, "N": 8192, "K": 8192},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("persistent_gemm_fp16_4096", "persistent_gemm", {"M": 4096, "N": 4096, "K": 4096},
     [("randn", (4096, 4096), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 4096 ** 3}),
    ("persistent_gemm_bf16", "persistent_gemm_bf16", {"M": 8192, "N": 8192, "K": 8192},
     [("randn", (8192, 8192), "bfloat16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("persistent_gemm_bf16_4096", "persistent_gemm_bf16", {"M": 4096, "N": 4096, "K": 4096},
     [("randn", (4096, 4096), "bfloat16")] * 2, "matmul", 5e-2, {"flops": 2 * 4096 ** 3}),
    ("persistent_gemm_fp16_group16", "persistent_gemm",
     {"M": 8192, "N": 8192, "K": 8192, "options": {"group": 16}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("persistent_gemm_fp16_128x128", "persistent_gemm",
     {"M": 8192, "N": 8192, "K": 8192, "options": {"block_n": 128, "threads": 128}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    # three slots leave room to store all of C at once
    ("persistent_gemm_fp16_s3_whole", "persistent_gemm",
     {"M": 8192, "N": 8192, "K": 8192, "options": {"num_stages": 3, "parts": 1}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("persistent_gemm_fp16_quarters", "persistent_gemm",
     {"M": 8192, "N": 8192, "K": 8192, "options": {"parts": 4}},
     [("randn", (8192, 8192), "float16")] * 2, "matmul", 5e-2, {"flops": 2 * 8192 ** 3}),
    ("flash_attention", "flash_attention", {"shape": (4, 32, 4096, 128)},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_bn32", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"block_n": 32}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_bm128_bn32_w8", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"block_m": 128, "block_n": 32, "threads": 256}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_bm128_w8", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"block_m": 128, "threads": 256}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 128}),
    # 128-key tiles in one role (beside the split rows below; d128 is split by default)
    *[(f"flash_attention{causal}{d}_bm128_bn128_w8", "flash_attention",
       {"shape": (4, 32, 4096, dim), "options": {"causal": bool(causal), "block_m": 128,
                                                 "block_n": 128, "threads": 256,
                                                 "pass_configs": ONE_ROLE}},
       [("randn", (4, 32, 4096, dim), "float16")] * 3, "sdpa_causal" if causal else "sdpa",
       2e-2, {"flops": (2 if causal else 4) * 4 * 32 * 4096 * 4096 * dim})
      for causal, d, dim in (("", "", 128), ("_causal", "", 128), ("", "_d64", 64))],
    # the same tiles as the compiler chooses for them without pass configs (d128: split,
    # the consumers taking turns where the loop is as long in every block)
    *[(f"flash_attention{causal}_bm128_bn128_w8_default", "flash_attention",
       {"shape": (4, 32, 4096, 128), "options": {"causal": bool(causal), "block_m": 128,
                                                 "block_n": 128, "threads": 256}},
       [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal" if causal else "sdpa",
       2e-2, {"flops": (2 if causal else 4) * 4 * 32 * 4096 * 4096 * 128})
      for causal in ("", "_causal")],
    # wider key tiles at d128 (FlashAttention 3 takes 176 keys for this head size): fewer
    # turns of the loop, its last tile part-masked where 4096 is no multiple of the width
    *[(f"flash_attention_bm128_bn{bn}_w8_default", "flash_attention",
       {"shape": (4, 32, 4096, 128), "options": {"block_m": 128, "block_n": bn,
                                                 "threads": 256}},
       [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
       {"flops": 4 * 4 * 32 * 4096 * 4096 * 128})
      for bn in (160, 176, 192)],
    # three slots of 128 keys: 224 KB of K and V tiles and Q, the block alone on its SM
    *[(f"flash_attention{causal}{d}_bm128_bn128_w8_s3", "flash_attention",
       {"shape": (4, 32, 4096, dim), "options": {"causal": bool(causal), "block_m": 128,
                                                 "block_n": 128, "threads": 256,
                                                 "num_stages": 3}},
       [("randn", (4, 32, 4096, dim), "float16")] * 3, "sdpa_causal" if causal else "sdpa",
       2e-2, {"flops": (2 if causal else 4) * 4 * 32 * 4096 * 4096 * dim})
      for causal, d, dim in (("", "", 128), ("_causal", "", 128), ("", "_d64", 64))],
    ("flash_attention_bm128_w8_s3", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"block_m": 128, "threads": 256, "num_stages": 3}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_bm128_w8_cp_async", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"block_m": 128, "threads": 256, "pass_configs": {
         "tl.disable_tma_lower": True}}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_causal", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"causal": True}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_causal_bm128_w8", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"causal": True, "block_m": 128, "threads": 256}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 4 * 32 * 4096 * 4096 * 128}),
    # a quarter of the blocks (1024 of 128 rows): fewer waves, a longer tail
    ("flash_attention_causal_b2h16_bm128_w8", "flash_attention",
     {"shape": (2, 16, 4096, 128), "options": {"causal": True, "block_m": 128, "threads": 256}},
     [("randn", (2, 16, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 2 * 16 * 4096 * 4096 * 128}),
    ("flash_attention_causal_b2h16_bm128_w8_as_written", "flash_attention",
     {"shape": (2, 16, 4096, 128), "options": {"causal": True, "block_m": 128, "threads": 256,
                                               "pass_configs": {
                                                   "tl.disable_heavy_first": True}}},
     [("randn", (2, 16, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 2 * 16 * 4096 * 4096 * 128}),
    # the causal mask tested at every element of every tile, as before the mask was decided
    # once per tile where the whole tile is kept (passes/uniform_selects.py)
    ("flash_attention_causal_select_per_element", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"causal": True, "pass_configs": {
         "tl.disable_uniform_selects": True}}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_causal_bm128_w8_select_per_element", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"causal": True, "block_m": 128, "threads": 256,
                                               "pass_configs": {
                                                   "tl.disable_uniform_selects": True}}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 4 * 32 * 4096 * 4096 * 128}),
    # the same two with the blocks started in the order written (block 0 first)
    ("flash_attention_causal_as_written", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"causal": True, "pass_configs": {
         "tl.disable_heavy_first": True}}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 4 * 32 * 4096 * 4096 * 128}),
    ("flash_attention_causal_bm128_w8_as_written", "flash_attention",
     {"shape": (4, 32, 4096, 128), "options": {"causal": True, "block_m": 128, "threads": 256,
                                               "pass_configs": {
                                                   "tl.disable_heavy_first": True}}},
     [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal", 2e-2,
     {"flops": 2 * 4 * 32 * 4096 * 4096 * 128}),
    # split between a producer warpgroup and two consumer warpgroups (registers moved to
    # them); with the consumers taking turns at the tensor cores; without the registers
    *[(f"flash_attention{causal}_bm128{bn}_w8_ws{variant}", "flash_attention",
       {"shape": (4, 32, 4096, 128), "options": {
           "causal": bool(causal), "block_m": 128, "block_n": 128 if bn else 64, "threads": 256,
           "pass_configs": {**WS["pass_configs"], **extra}}},
       [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa_causal" if causal else "sdpa",
       2e-2, {"flops": (2 if causal else 4) * 4 * 32 * 4096 * 4096 * 128})
      for causal in ("", "_causal") for bn in ("", "_bn128")
      for variant, extra in (("", {}), ("_turns", TURNS["pass_configs"]),
                             ("_rotate", ROTATE["pass_configs"]),
                             ("_rotate_turns", ROTATE_TURNS["pass_configs"]))] +
     [("flash_attention_bm128_w8_ws_no_setmaxnreg", "flash_attention",
       {"shape": (4, 32, 4096, 128), "options": {"block_m": 128, "threads": 256,
                                                 "pass_configs": {**WS["pass_configs"],
                                                                  "tl.disable_setmaxnreg": True}}},
       [("randn", (4, 32, 4096, 128), "float16")] * 3, "sdpa", 2e-2,
       {"flops": 4 * 4 * 32 * 4096 * 4096 * 128})],
    ("flash_attention_d64_bm128_w8", "flash_attention",
     {"shape": (4, 32, 4096, 64), "options": {"block_m": 128, "threads": 256}},
     [("randn", (4, 32, 4096, 64), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 64}),
    ("flash_attention_d64_bm128_w8_ws", "flash_attention",
     {"shape": (4, 32, 4096, 64), "options": {"block_m": 128, "threads": 256, **WS}},
     [("randn", (4, 32, 4096, 64), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 64}),
    ("flash_attention_d64_bm128_bn128_w8_ws", "flash_attention",
     {"shape": (4, 32, 4096, 64), "options": {"block_m": 128, "block_n": 128, "threads": 256,
                                              **WS}},
     [("randn", (4, 32, 4096, 64), "float16")] * 3, "sdpa", 2e-2,
     {"flops": 4 * 4 * 32 * 4096 * 4096 * 64}),
    *[(f"flash_attention_d64_bm128{bn}_w8_ws_{name}", "flash_attention",
       {"shape": (4, 32, 4096, 64), "options": {"block_m": 128, "block_n": 128 if bn else 64,
                                                "threads": 256, **configs}},
       [("randn", (4, 32, 4096, 64), "float16")] * 3, "sdpa", 2e-2,
       {"flops": 4 * 4 * 32 * 4096 * 4096 * 64})
      for bn in ("", "_bn128")
      for name, configs in (("rotate", ROTATE), ("rotate_turns", ROTATE_TURNS))],
]


# ---------------------------------------------------------------- build (needs TVM, nvcc)


def atomic_column_sum(M: int, N: int):  # noqa: N803
    """Y[j] = sum_i X[i, j]: every block adds its rows' partial sums with T.atomic_add."""
    import tilelab.language as T

    @T.prim_func
    def column_sum(X: T.Tensor((M, N), T.float32), Y: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(M, 64), T.ceildiv(N, 128), threads=128) as (bx, by):
            tile = T.alloc_fragment((64, 128), T.float32)
            partial = T.alloc_fragment((128,), T.float32)
            T.copy(X[bx * 64, by * 128], tile)
            T.reduce_sum(tile, partial, dim=0)
            T.atomic_add(Y[by * 128:by * 128 + 128], partial)

    return column_sum


def relayout(M: int, N: int, K: int):  # noqa: N803
    """C = 2 A@B, the accumulator copied into a fragment of another layout (through shared)."""
    import tilelab.language as T

    @T.prim_func
    def twice_matmul(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
                     C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            a = T.alloc_shared((64, K), T.float16)
            b = T.alloc_shared((K, 64), T.float16)
            acc = T.alloc_fragment((64, 64), T.float32)
            out = T.alloc_fragment((64, 64), T.float32)
            T.annotate_layout({out: T.Fragment((64, 64), lambda i, j: (i * 64 + j) % 128,
                                               lambda i, j: (i * 64 + j) // 128)})
            T.copy(A[by * 64, 0], a)
            T.copy(B[0, bx * 64], b)
            T.clear(acc)
            T.gemm(a, b, acc)
            T.copy(acc, out)
            for i, j in T.Parallel(64, 64):
                out[i, j] = out[i, j] * 2.0
            T.copy(out, C[by * 64, bx * 64])

    return twice_matmul


@functools.cache
def swiglu_kernel():
    """silu(g) * u in the tutorial's form: one element per thread."""
    import tilelab
    import tilelab.language as T

    @tilelab.jit
    def swiglu(G, U, block_size: int = 256):
        N = T.const("N")
        G: T.Tensor((N,), T.float32)
        U: T.Tensor((N,), T.float32)
        Y = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block_size), threads=block_size) as bx:
            for i in T.Parallel(block_size):
                index = bx * block_size + i
                if index < N:
                    g = G[index]
                    Y[index] = g / (1 + T.exp(-g)) * U[index]
        return Y

    return swiglu


def annotated_scale(M: int, N: int):  # noqa: N803
    """y = 2x + row % 64 through a fragment whose thread layout the user chose."""
    import tilelab.language as T

    @T.prim_func
    def scale(X: T.Tensor((M, N), T.float32), Y: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
            tile = T.alloc_fragment((64, 64), T.float32)
            T.annotate_layout({tile: T.Fragment(
                (64, 64), forward_thread_fn=lambda i, j: (j * 64 + i) % 128,
                forward_index_fn=lambda i, j: (j * 64 + i) // 128)})
            T.copy(X[bx * 64, 0], tile)
            for i, j in T.Parallel(64, 64):
                tile[i, j] = tile[i, j] * 2.0 + i
            T.copy(tile, Y[bx * 64, 0])

    return scale


def compile_kernel(kind: str, sizes: dict, options: dict):
    import tilelab

    if kind == "vector_add":
        from examples.vector_add import vector_add_kernel as k
    elif kind == "swiglu":
        k = swiglu_kernel()
    elif kind == "row_sum":
        from examples.row_sum import row_sum_kernel as k
    elif kind == "softmax":
        from examples.softmax import softmax_kernel as k
    elif kind == "online_softmax":
        from examples.online_softmax import online_softmax_kernel as k
    elif kind == "layer_norm":
        from examples.layer_norm import layer_norm_kernel as k
    elif kind == "layer_norm_registers":
        from examples.layer_norm import layer_norm_in_registers_kernel as k
    elif kind == "rms_norm":
        from examples.rms_norm import rms_norm_kernel as k
    elif kind == "gemm":
        from examples.gemm import gemm_kernel as k
    elif kind == "ws_gemm":
        from examples.ws_gemm import ws_gemm_kernel as k
    elif kind == "gemm_bf16":
        import tilelab.language as T
        from examples.gemm import gemm_kernel as k

        sizes = dict(sizes)
        options = dict(sizes.pop("options", {}), **options)
        return k.compile(**sizes, input_dtype=T.bfloat16, target="cuda", **options)
    elif kind in ("persistent_gemm", "persistent_gemm_bf16"):
        import tilelab.language as T
        from examples.persistent_gemm import persistent_gemm_kernel as k

        if kind.endswith("bf16"):
            options = {**options, "input_dtype": T.bfloat16}
    elif kind == "atomic_column_sum":
        return tilelab.compile(atomic_column_sum(**sizes), target="cuda")
    elif kind == "relayout":
        return tilelab.compile(relayout(**sizes), out_idx=[2], target="cuda")
    elif kind == "annotated_scale":
        return tilelab.compile(annotated_scale(**sizes), out_idx=[1], target="cuda")
    elif kind == "gemm_bias_relu":
        from examples.gemm_bias_relu import gemm_bias_relu_kernel as k
    elif kind == "flash_attention":
        from examples.flash_attention import flash_attention_kernel as fa

        options = {**sizes.get("options", {}), **options}
        configs = {**fa.pass_configs, **options.pop("pass_configs", {})}
        program = fa.fn(*sizes["shape"], **options)
        return tilelab.compile(program, out_idx=fa.out_idx, target="cuda", pass_configs=configs)
    else:
        raise ValueError(kind)
    sizes = dict(sizes)
    options = dict(sizes.pop("options", {}), **options)
    if "policy" in options:  # named here, so that `run` needs no tilelab
        import tilelab.language as T

        options["policy"] = T.GemmWarpPolicy(options["policy"])
    return k.compile(**sizes, target="cuda", **options)


def with_configs(sizes: dict, configs: dict) -> dict:
    """A row's compile-time sizes with pass configs added to those it names."""
    options = dict(sizes.get("options", {}))
    options["pass_configs"] = {**options.get("pass_configs", {}), **configs}
    return {**sizes, "options": options}


def build(quick: bool, only: set | None = None, variant: tuple[str, dict] | None = None) -> None:
    """Compile and export the checks and the timings (those in `only`, if given); with
    `variant` (a suffix and pass configs), each timing also as a second build with those
    configs added, named with the suffix, for `ab`."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    manifest = {"checks": [], "bench": []}
    for section, cases in (("checks", CHECKS), ("bench", [] if quick else BENCH)):
        for case in cases:
            name, kind, sizes, inputs, ref, tol = case[:6]
            if only and section == "bench" and name not in only:
                continue
            work = case[6] if len(case) > 6 else {}
            builds = [(name, sizes)]
            if variant and section == "bench":
                builds.append((name + variant[0], with_configs(sizes, variant[1])))
            for built, built_sizes in builds:
                started = time.perf_counter()
                kernel = compile_kernel(kind, built_sizes, {})
                path = ARTIFACTS / f"{section}_{built}.tilelab"
                kernel.export(path)
                seconds = time.perf_counter() - started
                print(f"{section:6} {built:22} compiled in {seconds:5.2f} s "
                      f"({kernel.trace.resources.get('registers')} registers)")
                manifest[section].append({"name": built, "artifact": path.name,
                                          "inputs": inputs, "reference": ref,
                                          "tolerance": tol, "work": work,
                                          "resources": kernel.trace.resources})
    (ARTIFACTS / "manifest.json").write_text(json.dumps(manifest, indent=1))


# ---------------------------------------------------------------- run (torch + driver only)


def references():
    import torch
    import torch.nn.functional as F

    def rms(x, w, eps=1e-6):
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * w.float()).to(
            x.dtype)

    return {
        "add": lambda a, b: a + b,
        "swiglu": lambda g, u: F.silu(g) * u,
        "row_sum": lambda x: x.sum(-1),
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "layer_norm": lambda x, g, b: F.layer_norm(x, (x.shape[-1],), g, b, 1e-5),
        "rms_norm": rms,
        "rms_norm_torch": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
        "matmul": lambda a, b: a @ b,
        "matmul_bias_relu": lambda a, b, bias: torch.relu(a @ b + bias),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "sdpa_causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "twice_matmul": lambda a, b: 2 * (a.float() @ b.float()),
        "column_sum": lambda x, y: x.sum(0),
        "scale_plus_row": lambda x: x * 2 + (torch.arange(x.shape[0], device=x.device) % 64
                                             )[:, None].to(x.dtype),
    }


def make_inputs(specs):
    import torch

    make = {"randn": torch.randn, "zeros": torch.zeros}
    return [make[kind](shape, device="cuda", dtype=getattr(torch, dtype))
            for kind, shape, dtype in specs]


def time_ms(fn, warmup=10, rep=50):
    from tilelab.profiler import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, backend="event")


def ceilings() -> dict:
    """The card's measured copy bandwidth and bf16 matmul rate."""
    import torch

    n = 1 << 28
    src = torch.empty(n, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = time_ms(lambda: a @ b)
    return {"copy_GBps": 2 * 4 * n / ms / 1e6, "bf16_matmul_TFLOPs": 2 * 8192 ** 3 / mm / 1e9}


def run(json_path: str | None) -> int:
    import torch

    import tilelab

    assert "tvm" not in sys.modules
    manifest = json.loads((ARTIFACTS / "manifest.json").read_text())
    refs = references()
    results = {"device": torch.cuda.get_device_name(), "checks": [], "bench": []}
    failures = 0
    print(f"device: {results['device']}")
    for case in manifest["checks"]:
        kernel = tilelab.load(ARTIFACTS / case["artifact"])
        errors = []
        for seed in range(3):  # fresh inputs each time; a moving error would be a race
            torch.manual_seed(seed)
            inputs = make_inputs(case["inputs"])
            out = kernel(*inputs)
            if out is None:  # a kernel that accumulates into its last argument
                out = inputs[-1]
            expected = refs[case["reference"]](*inputs)
            torch.cuda.synchronize()
            errors.append((out.float() - expected.float()).abs().max().item())
        ok = all(e <= case["tolerance"] * (1 + expected.float().abs().max().item())
                 for e in errors) and all(not math.isnan(e) for e in errors)
        failures += not ok
        print(f"check {case['name']:22} max|err| {max(errors):.2e}  {'ok' if ok else 'FAIL'}")
        results["checks"].append({"name": case["name"], "max_abs_error": errors, "ok": ok})
    if manifest["bench"]:
        results["ceilings"] = ceilings()
        print(f"ceilings: copy {results['ceilings']['copy_GBps']:.0f} GB/s, bf16 matmul "
              f"{results['ceilings']['bf16_matmul_TFLOPs']:.0f} TFLOP/s")
    for case in manifest["bench"]:
        kernel = tilelab.load(ARTIFACTS / case["artifact"])
        torch.manual_seed(0)
        inputs = make_inputs(case["inputs"])
        ref = refs[case["reference"]]
        out, expected = kernel(*inputs), ref(*inputs)
        err = (out.float() - expected.float()).abs().max().item()
        # alternate the two three times and keep the medians: clocks drift during a run
        ours_fn = functools.partial(kernel, *inputs)
        theirs_fn = functools.partial(ref, *inputs)
        pairs = [(time_ms(ours_fn), time_ms(theirs_fn)) for _ in range(3)]
        ours = sorted(p[0] for p in pairs)[1]
        theirs = sorted(p[1] for p in pairs)[1]
        row = {"name": case["name"], "ms": ours, "torch_ms": theirs, "speedup": theirs / ours,
               "max_abs_error": err, "shapes": [s for _, s, _ in case["inputs"]]}
        work = case["work"]
        if "bytes" in work:
            row["GBps"] = work["bytes"] / ours / 1e6
            row["torch_GBps"] = work["bytes"] / theirs / 1e6
        if "flops" in work:
            row["TFLOPs"] = work["flops"] / ours / 1e9
            row["torch_TFLOPs"] = work["flops"] / theirs / 1e9
        rate = (f"{row['GBps']:7.0f} GB/s vs {row['torch_GBps']:7.0f}" if "GBps" in row else
                f"{row['TFLOPs']:7.1f} TFLOP/s vs {row['torch_TFLOPs']:7.1f}")
        print(f"bench {case['name']:16} {ours:8.3f} ms  torch {theirs:8.3f} ms  {rate}  "
              f"x{row['speedup']:.2f}  err {err:.1e}")
        results["bench"].append(row)
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))
    return 1 if failures else 0


def bench_cases() -> dict:
    """The built timings of the manifest, by name."""
    return {case["name"]: case for case in
            json.loads((ARTIFACTS / "manifest.json").read_text())["bench"]}


def alternated(calls: list, rounds: int) -> list[list[float]]:
    """Each call timed `rounds` times, the calls taking turns: list i holds call i's times
    (milliseconds)."""
    times = [[] for _ in calls]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            times[i].append(time_ms(call))
    return times


def ab(pairs: list[tuple[str, str]], rounds: int, json_path: str | None) -> int:
    """Two builds of one kernel, A and B, timed alternately on the same inputs `rounds`
    times: where a sequence of rows drifts with the card's clocks by a few percent, the
    paired ratio of neighbouring timings does not. B named `torch` is A's PyTorch baseline,
    so that B/A is A's speedup over it."""
    import statistics

    import torch

    import tilelab

    manifest = bench_cases()
    refs = references()
    results = {"device": torch.cuda.get_device_name(), "rounds": rounds, "pairs": []}
    print(f"device: {results['device']}")
    for a, b in pairs:
        kernels = [refs[manifest[a]["reference"]] if name == "torch" else
                   tilelab.load(ARTIFACTS / manifest[name]["artifact"]) for name in (a, b)]
        torch.manual_seed(0)
        inputs = make_inputs(manifest[a]["inputs"])
        outputs = [kernel(*inputs) for kernel in kernels]
        same = None if any(out is None for out in outputs) else \
            (outputs[0].float() - outputs[1].float()).abs().max().item()
        times = alternated([functools.partial(kernel, *inputs) for kernel in kernels], rounds)
        ratios = [tb / ta for ta, tb in zip(*times)]
        row = {"a": a, "b": b, "a_ms": statistics.median(times[0]),
               "b_ms": statistics.median(times[1]), "b_over_a": statistics.median(ratios),
               "ratios": ratios, "max_abs_difference": same}
        results["pairs"].append(row)
        print(f"ab {a} {row['a_ms']:.3f} ms | {b} {row['b_ms']:.3f} ms | B/A median "
              f"{row['b_over_a']:.3f} (rounds {min(ratios):.3f}..{max(ratios):.3f})")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["build", "run", "ab"])
    parser.add_argument("--quick", action="store_true", help="build the checks only")
    parser.add_argument("--only", help="comma-separated timings to build (every check is)")
    parser.add_argument("--variant", help="build: SUFFIX:KEY=VALUE,... - each timing built "
                        "again with these pass configs (VALUE in JSON), named with the suffix")
    parser.add_argument("--json", help="write results here (run, ab)")
    parser.add_argument("--pairs", help="ab: comma-separated A:B, each B timed beside its A")
    parser.add_argument("--rounds", type=int, default=8, help="ab: alternations")
    args = parser.parse_args()
    if args.mode == "ab":
        return ab([tuple(pair.split(":")) for pair in args.pairs.split(",")], args.rounds,
                  args.json)
    if args.mode == "build":
        variant = None
        if args.variant:
            suffix, _, assignments = args.variant.partition(":")
            variant = (suffix, {key: json.loads(value) for key, value in
                                (item.split("=") for item in assignments.split(","))})
        build(args.quick, set(args.only.split(",")) if args.only else None, variant)
        return 0
    return run(args.json)


if __name__ == "__main__":
    sys.exit(main())
