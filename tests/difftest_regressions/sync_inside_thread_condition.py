# Found by: python -m tilelab.testing.difftest --target cuda --seed 0 (program 265) on the H200.
# Symptom (compile_error on cuda): Check failed: condition_counter() == 0 (1 vs. 0) : Cannot insert syncs inside condition
# Cause: statements of a T.Parallel body under one `if tx < n`: ThreadSync wanted a barrier between them (each gets its own `if` now).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 265 of seed 0 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 7, "M": 12, "N": 16, "bk": 32, "bm": 8, "bn": 8, "buffers": [{"dtype": "float32", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float32", "kind": "mk", "name": "s1", "scope": "shared"}, {"dtype": "float32", "kind": "mk", "name": "f0", "scope": "fragment"}, {"dtype": "float32", "kind": "m", "name": "f1", "scope": "fragment"}, {"dtype": "float32", "kind": "mn", "name": "f2", "scope": "fragment"}, {"dtype": "float32", "kind": "m", "name": "f3", "scope": "fragment"}, {"dtype": "float32", "kind": "nm", "name": "s2", "scope": "shared"}, {"dtype": "float32", "kind": "local", "name": "l0", "scope": "local"}, {"dtype": "float32", "kind": "nm", "name": "s3", "scope": "shared"}], "index": 265, "seed": 0, "steps": [{"dst": "s0", "op": "load", "shift": [0, 0], "src": "X0"}, {"dst": "f1", "op": "ksum", "src": "X1", "stage": "s1", "stages": 3, "tmp": "f0"}, {"dst": "f2", "op": "copy", "src": "s0"}, {"clear": true, "dim": 1, "dst": "f3", "kind": "max", "op": "reduce", "src": "f2"}, {"dst": "s2", "expr": ["sel", "<", ["ld", "s0", "ji"], ["c", 0], ["bin", "min", ["ld", "s0", "ji"], ["c", -1.5]], ["bin", "max", ["sel", "<", ["ld", "s0", "ji"], ["c", 0], ["ix", "j"], ["c", 2.0]], ["bin", "*", ["ld", "s0", "ji"], ["c", 0.5]]]], "op": "ew", "tmp": "l0"}, {"dst": "s3", "expr": ["bin", "*", ["ld", "s2", "ij"], ["bin", "-", ["ix", "j"], ["ld", "s2", "ij"]]], "op": "ew"}, {"dst": "Y0", "op": "store", "src": "f2"}, {"dst": "Y1", "op": "store", "src": "s0"}, {"dst": "Y2", "op": "store", "src": "s3"}, {"dst": "Y3", "expr": ["ld", "f2", "ij"], "op": "gstore"}], "tensors": [{"dtype": "float32", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "a", "name": "X1", "output": false}, {"dtype": "float32", "kind": "mn", "name": "Y0", "output": true}, {"dtype": "float32", "kind": "mn", "name": "Y1", "output": true}, {"dtype": "float32", "kind": "nm", "name": "Y2", "output": true}, {"dtype": "float32", "kind": "mn", "name": "Y3", "output": true}], "threads": 256}'


def make():
    @T.prim_func
    def difftest_0_265(X0: T.Tensor((12, 16), T.float32), X1: T.Tensor((12, 7), T.float32), Y0: T.Tensor((12, 16), T.float32), Y1: T.Tensor((12, 16), T.float32), Y2: T.Tensor((16, 12), T.float32), Y3: T.Tensor((12, 16), T.float32)):
        with T.Kernel(2, 2, threads=256) as (bx, by):
            s0 = T.alloc_shared((8, 8), T.float32)
            s1 = T.alloc_shared((8, 32), T.float32)
            f0 = T.alloc_fragment((8, 32), T.float32)
            f1 = T.alloc_fragment((8,), T.float32)
            f2 = T.alloc_fragment((8, 8), T.float32)
            f3 = T.alloc_fragment((8,), T.float32)
            s2 = T.alloc_shared((8, 8), T.float32)
            l0 = T.alloc_local((1,), T.float32)
            s3 = T.alloc_shared((8, 8), T.float32)
            T.copy(X0[by * 8, bx * 8], s0)
            T.clear(f1)
            for k in T.Pipelined(1, num_stages=3):
                T.copy(X1[by * 8, k * 32], s1)
                T.copy(s1, f0)
                T.reduce_sum(f0, f1, dim=1, clear=False)
            T.copy(s0, f2)
            T.reduce_max(f2, f3, dim=1, clear=True)
            for i, j in T.Parallel(8, 8):
                l0[0] = T.if_then_else(s0[j, i] < 0, T.min(s0[j, i], -1.5), T.max(T.if_then_else(s0[j, i] < 0, j, 2.0), (s0[j, i] * 0.5)))
                s2[i, j] = l0[0] + 1
            for i, j in T.Parallel(8, 8):
                s3[i, j] = (s2[i, j] * (j - s2[i, j]))
            T.copy(f2, Y0[by * 8, bx * 8])
            T.copy(s0, Y1[by * 8, bx * 8])
            T.copy(s3, Y2[bx * 8, by * 8])
            for i, j in T.Parallel(8, 8):
                if by * 8 + i < 12 and bx * 8 + j < 16:
                    Y3[by * 8 + i, bx * 8 + j] = f2[i, j]
    return difftest_0_265
