# Found by: python -m tilelab.testing.difftest --target cuda --seed 0 (program 44) on the H200.
# Symptom (compile_error on cuda): TileLabCompileError: ... failed after tilelab.InferLayouts: 'IntImm' object has no attribute 'b'
# Cause: the swizzle rewrite kept matching after it had split off a vector lane.
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 44 of seed 0 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 5, "N": 16, "bk": 16, "bm": 8, "bn": 8, "buffers": [{"dtype": "bfloat16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "nm", "name": "f1", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "n", "name": "s0", "scope": "shared"}, {"dtype": "bfloat16", "kind": "nm", "name": "s1", "scope": "shared"}, {"dtype": "bfloat16", "kind": "nm", "name": "f2", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "nm", "name": "s2", "scope": "shared"}], "index": 44, "seed": 0, "steps": [{"dst": "f0", "op": "load", "shift": [1, 0], "src": "X0"}, {"dst": "f1", "op": "load", "shift": [0, 0], "src": "X1"}, {"dst": "s0", "op": "load", "shift": [0], "src": "X2"}, {"dst": "s1", "op": "copy", "src": "f1"}, {"dst": "f2", "op": "copy", "src": "f1"}, {"dst": "s1", "expr": ["un", "exp", ["ld", "s0", "i"]], "op": "ew"}, {"dst": "s2", "op": "fill", "value": 1.5}, {"dst": "s2", "from": [1, 2], "op": "subcopy", "size": [7, 6], "src": "f1", "to": [0, 2]}, {"dst": "Y0", "op": "store", "src": "s0"}, {"dst": "Y1", "op": "store", "src": "s2"}, {"dst": "Y2", "op": "store", "src": "f0"}], "tensors": [{"dtype": "bfloat16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "bfloat16", "kind": "nm", "name": "X1", "output": false}, {"dtype": "bfloat16", "kind": "vn", "name": "X2", "output": false}, {"dtype": "bfloat16", "kind": "on", "name": "Y0", "output": true}, {"dtype": "bfloat16", "kind": "nm", "name": "Y1", "output": true}, {"dtype": "bfloat16", "kind": "mn", "name": "Y2", "output": true}], "threads": 128}'


def make():
    @T.prim_func
    def difftest_0_44(X0: T.Tensor((5, 16), T.bfloat16), X1: T.Tensor((16, 5), T.bfloat16), X2: T.Tensor((16,), T.bfloat16), Y0: T.Tensor((1, 16), T.bfloat16), Y1: T.Tensor((16, 5), T.bfloat16), Y2: T.Tensor((5, 16), T.bfloat16)):
        with T.Kernel(2, 1, threads=128) as (bx, by):
            f0 = T.alloc_fragment((8, 8), T.bfloat16)
            f1 = T.alloc_fragment((8, 8), T.bfloat16)
            s0 = T.alloc_shared((8,), T.bfloat16)
            s1 = T.alloc_shared((8, 8), T.bfloat16)
            f2 = T.alloc_fragment((8, 8), T.bfloat16)
            s2 = T.alloc_shared((8, 8), T.bfloat16)
            T.copy(X0[by * 8 + 1, bx * 8], f0)
            T.copy(X1[bx * 8, by * 8], f1)
            T.copy(X2[bx * 8], s0)
            T.copy(f1, s1)
            T.copy(f1, f2)
            for i, j in T.Parallel(8, 8):
                s1[i, j] = T.exp(T.min(s0[i], 2.0))
            T.fill(s2, 1.5)
            T.copy(f1[1:8, 2:8], s2[0:7, 2:8])
            T.copy(s0, Y0[by, bx * 8])
            T.copy(s2, Y1[bx * 8, by * 8])
            T.copy(f0, Y2[by * 8, bx * 8])
    return difftest_0_44
