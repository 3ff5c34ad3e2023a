# Found by difftest (seed 1, an earlier generator), shrunk by hand to this recipe.
# Symptom (compile_error on cuda): TileLabCompileError: compiling difftest_1_21 for cuda:sm_90a failed after tilelab.InferLayouts: 'Layout' object has no attribute 'column'
# Then (H200, 2026-12-01): wrong values and an out-of-bounds shared write - a copy from a
# fragment sub-region was lowered as if the whole fragment were copied (fixed: region_map).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 21 of seed 1 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 1, "N": 1, "bk": 16, "bm": 64, "bn": 8, "buffers": [{"dtype": "bfloat16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "mn", "name": "s1", "scope": "shared"}], "index": 21, "seed": 1, "steps": [{"dst": "f0", "op": "fill", "value": 1.5}, {"dst": "s1", "op": "fill", "value": 0}, {"dst": "s1", "from": [4, 3], "op": "subcopy", "size": [49, 5], "src": "f0", "to": [1, 3]}, {"dst": "Y1", "op": "store", "src": "s1"}], "tensors": [{"dtype": "bfloat16", "kind": "mn", "name": "Y1", "output": true}], "threads": 32}'


def make():
    @T.prim_func
    def difftest_1_21(Y1: T.Tensor((1, 1), T.bfloat16)):
        with T.Kernel(1, 1, threads=32) as (bx, by):
            f0 = T.alloc_fragment((64, 8), T.bfloat16)
            s1 = T.alloc_shared((64, 8), T.bfloat16)
            T.fill(f0, 1.5)
            T.clear(s1)
            T.copy(f0[4:53, 3:8], s1[1:50, 3:8])
            T.copy(s1, Y1[by * 64, bx * 8])
    return difftest_1_21
