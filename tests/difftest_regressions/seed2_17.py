# Found by: python -m tilelab.testing.difftest --seed 2 (program 17), then shrunk.
# Symptom (compile_error on cuda): KeyError: "'int32x2'"
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 17 of seed 2 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 1, "N": 2, "bk": 16, "bm": 64, "bn": 16, "buffers": [{"dtype": "int32", "kind": "mn", "name": "s0", "scope": "shared"}], "index": 17, "seed": 2, "steps": [{"dst": "s0", "op": "load", "src": "X1"}, {"dst": "Y0", "op": "store", "src": "s0"}], "tensors": [{"dtype": "int32", "kind": "mn", "name": "X1", "output": false}, {"dtype": "int32", "kind": "mn", "name": "Y0", "output": true}], "threads": 32}'


def make():
    @T.prim_func
    def difftest_2_17(X1: T.Tensor((1, 2), T.int32), Y0: T.Tensor((1, 2), T.int32)):
        with T.Kernel(1, 1, threads=32) as (bx, by):
            s0 = T.alloc_shared((64, 16), T.int32)
            T.copy(X1[by * 64, bx * 16], s0)
            T.copy(s0, Y0[by * 64, bx * 16])
    return difftest_2_17
