# Found by: python -m tilelab.testing.difftest --target cuda --seed 0 (program 436) on the H200.
# Symptom (mismatch on cuda): CUDA vs CPU backend: Y1[7, 4] is 7.74605, expected -2
# Cause: a T.Parallel body that writes a T.alloc_local scalar was vectorized: the lanes shared the scalar.
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 436 of seed 0 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 20, "N": 23, "bk": 16, "bm": 32, "bn": 8, "buffers": [{"dtype": "float32", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float32", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float32", "kind": "n", "name": "f1", "scope": "fragment"}, {"dtype": "float32", "kind": "nm", "name": "s1", "scope": "shared"}, {"dtype": "float32", "kind": "local", "name": "l0", "scope": "local"}, {"dtype": "float32", "kind": "local", "name": "l1", "scope": "local"}], "index": 436, "seed": 0, "steps": [{"dst": "s0", "op": "load", "shift": [0, 3], "src": "X0"}, {"dst": "f0", "expr": ["bin", "-", ["sel", "<", ["ld", "s0", "ij"], ["c", 0], ["c", 2.0], ["bin", "-", ["ld", "s0", "ij"], ["ix", "i"]]], ["bin", "+", ["ld", "s0", "ij"], ["c", 2.0]]], "op": "ew"}, {"clear": true, "dim": 0, "dst": "f1", "kind": "abssum", "op": "reduce", "src": "f0"}, {"dst": "s1", "expr": ["bin", "-", ["ix", "j"], ["sel", "<", ["ld", "s0", "ji"], ["c", 0], ["ix", "i"], ["ld", "s0", "ji"]]], "op": "ew", "tmp": "l0"}, {"dst": "f0", "expr": ["bin", "*", ["bin", "max", ["c", 2.0], ["ld", "f1", "j"]], ["bin", "-", ["ix", "j"], ["ld", "f1", "j"]]], "op": "ew", "tmp": "l1"}, {"dst": "Y0", "op": "store", "src": "f1"}, {"dst": "Y1", "op": "store", "src": "s1"}], "tensors": [{"dtype": "float32", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "on", "name": "Y0", "output": true}, {"dtype": "float32", "kind": "nm", "name": "Y1", "output": true}], "threads": 64}'


def make():
    @T.prim_func
    def difftest_0_436(X0: T.Tensor((20, 23), T.float32), Y0: T.Tensor((1, 23), T.float32), Y1: T.Tensor((23, 20), T.float32)):
        with T.Kernel(3, 1, threads=64) as (bx, by):
            s0 = T.alloc_shared((32, 8), T.float32)
            f0 = T.alloc_fragment((32, 8), T.float32)
            f1 = T.alloc_fragment((8,), T.float32)
            s1 = T.alloc_shared((8, 32), T.float32)
            l0 = T.alloc_local((1,), T.float32)
            l1 = T.alloc_local((1,), T.float32)
            T.copy(X0[by * 32, bx * 8 + 3], s0)
            for i, j in T.Parallel(32, 8):
                f0[i, j] = (T.if_then_else(s0[i, j] < 0, 2.0, (s0[i, j] - i)) - (s0[i, j] + 2.0))
            T.reduce_abssum(f0, f1, dim=0, clear=True)
            for i, j in T.Parallel(8, 32):
                l0[0] = (j - T.if_then_else(s0[j, i] < 0, i, s0[j, i]))
                s1[i, j] = l0[0] + 1
            for i, j in T.Parallel(32, 8):
                l1[0] = (T.max(2.0, f1[j]) * (j - f1[j]))
                f0[i, j] = l1[0] + 1
            T.copy(f1, Y0[by, bx * 8])
            T.copy(s1, Y1[bx * 8, by * 32])
    return difftest_0_436
