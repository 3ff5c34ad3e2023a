# Found by: python -m tilelab.testing.difftest --seed 1 (program 15605), then shrunk.
# Symptom (mismatch on cpu): CPU backend vs torch: Y3[11, 0] is -0.125, expected -0.157959 (max |err| 0.033 > 0.0285; 1 of 15 elements)
# Not a compiler bug: `(-s1) + (s1 - f0)` with s1 in the hundreds in float16 cancels; a backend
# that rounds after each operation is off by half a float16 step of s1 - f0; the comparison's
# tolerance now follows each element's size (the magnitudes it was computed from: Program.reference).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 15605 of seed 1 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 45, "M": 15, "N": 1, "bk": 16, "bm": 32, "bn": 16, "buffers": [{"dtype": "float16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float16", "kind": "mk", "name": "s0", "scope": "shared"}, {"dtype": "float16", "kind": "mk", "name": "f1", "scope": "fragment"}, {"dtype": "float32", "kind": "m", "name": "f2", "scope": "fragment"}, {"dtype": "float16", "kind": "m", "name": "s1", "scope": "shared"}], "index": 15605, "seed": 1, "steps": [{"dst": "f0", "op": "load", "src": "X0"}, {"dst": "f2", "op": "ksum", "src": "X1", "stage": "s0", "stages": 1, "tmp": "f1"}, {"dst": "s1", "expr": ["bin", "*", ["ld", "f2", "i"], ["ix", "i"]], "op": "ew"}, {"dst": "Y3", "expr": ["bin", "+", ["un", "neg", ["ld", "s1", "i"]], ["bin", "-", ["ld", "s1", "i"], ["ld", "f0", "ij"]]], "op": "gstore"}], "tensors": [{"dtype": "float16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float16", "kind": "a", "name": "X1", "output": false}, {"dtype": "float16", "kind": "mn", "name": "Y3", "output": true}], "threads": 32}'


def make():
    @T.prim_func
    def difftest_1_15605(X0: T.Tensor((15, 1), T.float16), X1: T.Tensor((15, 45), T.float16), Y3: T.Tensor((15, 1), T.float16)):
        with T.Kernel(1, 1, threads=32) as (bx, by):
            f0 = T.alloc_fragment((32, 16), T.float16)
            s0 = T.alloc_shared((32, 16), T.float16)
            f1 = T.alloc_fragment((32, 16), T.float16)
            f2 = T.alloc_fragment((32,), T.float32)
            s1 = T.alloc_shared((32,), T.float16)
            T.copy(X0[by * 32, bx * 16], f0)
            T.clear(f2)
            for k in T.Pipelined(3, num_stages=1):
                T.copy(X1[by * 32, k * 16], s0)
                T.copy(s0, f1)
                T.reduce_sum(f1, f2, dim=1, clear=False)
            for i in T.Parallel(32):
                s1[i] = (f2[i] * i)
            for i, j in T.Parallel(32, 16):
                if by * 32 + i < 15 and bx * 16 + j < 1:
                    Y3[by * 32 + i, bx * 16 + j] = ((-s1[i]) + (s1[i] - f0[i, j]))
    return difftest_1_15605
