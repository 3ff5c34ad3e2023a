# Found by: python -m tilelab.testing.difftest --target cuda --seed 0 (program 155) on the H200.
# Symptom (mismatch on cuda): CUDA vs CPU backend: Y3[3] is -2660.75, expected -10.3934
# Cause: T.atomic_add in a T.Parallel loop over a replicated layout: every copy added (now copy 0 only).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 155 of seed 0 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 15, "N": 16, "bk": 16, "bm": 8, "bn": 16, "buffers": [{"dtype": "bfloat16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "mn", "name": "f1", "scope": "fragment"}, {"dtype": "float32", "kind": "n", "name": "f2", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float32", "kind": "n", "name": "s1", "scope": "shared"}, {"dtype": "float32", "kind": "local", "name": "l0", "scope": "local"}], "index": 155, "seed": 0, "steps": [{"dst": "f0", "op": "load", "shift": [0, 0], "src": "X0"}, {"dst": "f1", "expr": ["ld", "f0", "ij"], "op": "ew"}, {"clear": true, "dim": 0, "dst": "f2", "kind": "max", "op": "reduce", "src": "f0"}, {"dst": "s0", "op": "fill", "value": 0}, {"dst": "s0", "from": [7, 2], "op": "subcopy", "size": [1, 13], "src": "f0", "to": [5, 2]}, {"dst": "s1", "expr": ["un", "abs", ["sel", ">", ["ix", "i"], ["c", 3], ["un", "exp", ["c", 0.5]], ["bin", "+", ["c", 0.5], ["ix", "i"]]]], "op": "ew", "tmp": "l0"}, {"dst": "Y0", "op": "store", "src": "f2"}, {"dst": "Y1", "op": "store", "src": "s0"}, {"dst": "Y2", "op": "store", "src": "s1"}, {"dst": "Y3", "op": "scatter", "src": "f0"}], "tensors": [{"dtype": "bfloat16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "on", "name": "Y0", "output": true}, {"dtype": "bfloat16", "kind": "mn", "name": "Y1", "output": true}, {"dtype": "float32", "kind": "on", "name": "Y2", "output": true}, {"dtype": "float32", "kind": "hist", "name": "Y3", "output": true}], "threads": 256}'


def make():
    @T.prim_func
    def difftest_0_155(X0: T.Tensor((15, 16), T.bfloat16), Y0: T.Tensor((2, 16), T.float32), Y1: T.Tensor((15, 16), T.bfloat16), Y2: T.Tensor((2, 16), T.float32), Y3: T.Tensor((8,), T.float32)):
        with T.Kernel(1, 2, threads=256) as (bx, by):
            f0 = T.alloc_fragment((8, 16), T.bfloat16)
            f1 = T.alloc_fragment((8, 16), T.bfloat16)
            f2 = T.alloc_fragment((16,), T.float32)
            s0 = T.alloc_shared((8, 16), T.bfloat16)
            s1 = T.alloc_shared((16,), T.float32)
            l0 = T.alloc_local((1,), T.float32)
            T.copy(X0[by * 8, bx * 16], f0)
            for i, j in T.Parallel(8, 16):
                f1[i, j] = f0[i, j]
            T.reduce_max(f0, f2, dim=0, clear=True)
            T.clear(s0)
            T.copy(f0[7:8, 2:15], s0[5:6, 2:15])
            for i in T.Parallel(16):
                l0[0] = T.abs(T.if_then_else(i > 3, T.exp(T.min(0.5, 2.0)), (0.5 + i)))
                s1[i] = l0[0] + 1
            T.copy(f2, Y0[by, bx * 16])
            T.copy(s0, Y1[by * 8, bx * 16])
            T.copy(s1, Y2[by, bx * 16])
            for i, j in T.Parallel(8, 16):
                if by * 8 + i < 15 and bx * 16 + j < 16:
                    T.atomic_add(Y3[(i + 3 * j) % 8], f0[i, j])
    return difftest_0_155
