# Written by hand after issue 11 (a held-out program that went wrong on the H200).
# Symptom (mismatch on cuda): CUDA vs CPU backend: wrong values (relative error ~0.8 on the H200)
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 9001 of seed 0 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 70, "N": 50, "bk": 16, "bm": 32, "bn": 32, "buffers": [{"dtype": "float32", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float32", "kind": "nm", "name": "s1", "scope": "shared"}], "index": 9001, "seed": 0, "steps": [{"dst": "s0", "op": "load", "shift": [0, 0], "src": "X0"}, {"dst": "s1", "expr": ["ld", "s0", "ji"], "op": "ew"}, {"dst": "Y0", "op": "store", "src": "s1"}], "tensors": [{"dtype": "float32", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "nm", "name": "Y0", "output": true}], "threads": 256}'



def make():
    @T.prim_func
    def difftest_0_9001(X0: T.Tensor((70, 50), T.float32), Y0: T.Tensor((50, 70), T.float32)):
        with T.Kernel(2, 3, threads=256) as (bx, by):
            s0 = T.alloc_shared((32, 32), T.float32)
            s1 = T.alloc_shared((32, 32), T.float32)
            T.copy(X0[by * 32, bx * 32], s0)
            for i, j in T.Parallel(32, 32):
                s1[i, j] = s0[j, i]
            T.copy(s1, Y0[bx * 32, by * 32])
    return difftest_0_9001
