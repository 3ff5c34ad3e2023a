# Found by: python -m tilelab.testing.difftest --seed 1 (program 19273), then shrunk.
# Symptom (mismatch on cuda): CUDA vs CPU backend: Y0[0, 0] is -0, expected -1.5 (|err| 1.5 > 0.025; 1 of 1 elements)
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 19273 of seed 1 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 6, "M": 1, "N": 1, "bk": 8, "bm": 8, "bn": 32, "buffers": [{"dtype": "float16", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float16", "kind": "mn", "name": "s2", "scope": "shared"}, {"dtype": "float32", "kind": "mn", "name": "f2", "scope": "fragment"}, {"dtype": "float16", "kind": "mn", "name": "f3", "scope": "fragment"}, {"dtype": "float32", "kind": "n", "name": "f4", "scope": "fragment"}], "index": 19273, "seed": 1, "steps": [{"dst": "s0", "op": "load", "shift": [0, 0], "src": "X0"}, {"dst": "s2", "op": "fill", "value": 1.5}, {"dst": "f2", "expr": ["sel", "<", ["ld", "s0", "ij"], ["c", 0], ["ld", "s0", "ij"], ["un", "neg", ["ld", "s2", "ij"]]], "op": "ew"}, {"dst": "f3", "op": "copy", "src": "s0"}, {"clear": true, "dim": 0, "dst": "f4", "kind": "max", "op": "reduce", "src": "f3"}, {"dst": "Y0", "op": "store", "src": "f2"}], "tensors": [{"dtype": "float16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "mn", "name": "Y0", "output": true}], "threads": 256}'


def make():
    @T.prim_func
    def difftest_1_19273(X0: T.Tensor((1, 1), T.float16), Y0: T.Tensor((1, 1), T.float32)):
        with T.Kernel(1, 1, threads=256) as (bx, by):
            s0 = T.alloc_shared((8, 32), T.float16)
            s2 = T.alloc_shared((8, 32), T.float16)
            f2 = T.alloc_fragment((8, 32), T.float32)
            f3 = T.alloc_fragment((8, 32), T.float16)
            f4 = T.alloc_fragment((32,), T.float32)
            T.copy(X0[by * 8, bx * 32], s0)
            T.fill(s2, 1.5)
            for i, j in T.Parallel(8, 32):
                f2[i, j] = T.if_then_else(s0[i, j] < 0, s0[i, j], (-s2[i, j]))
            T.copy(s0, f3)
            T.reduce_max(f3, f4, dim=0, clear=True)
            T.copy(f2, Y0[by * 8, bx * 32])
    return difftest_1_19273
