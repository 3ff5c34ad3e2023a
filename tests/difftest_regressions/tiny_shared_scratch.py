# Found by: python -m tilelab.testing.difftest --seed 8 (program 77).
# Symptom (compile_error on cuda): Check failed: (it != scope.buffer_byte_offsets.end()) is false
# Cause: a fragment copy of two bfloat16 values passes through a 4-byte shared scratch tile, which TVM's MergeSharedMemoryAllocations never places (passes/prepare_shared_merge.py).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 77 of seed 8 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 4, "N": 16, "bk": 16, "bm": 8, "bn": 8, "buffers": [{"dtype": "bfloat16", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "bfloat16", "kind": "mn", "name": "s1", "scope": "shared"}, {"dtype": "bfloat16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "local", "name": "l0", "scope": "local"}, {"dtype": "bfloat16", "kind": "mn", "name": "f1", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "nm", "name": "f2", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "mn", "name": "f3", "scope": "fragment"}], "index": 77, "seed": 8, "steps": [{"dst": "s0", "op": "load", "shift": [0, 0], "src": "X0"}, {"dst": "s1", "op": "load", "shift": [1, 3], "src": "X1"}, {"dst": "f0", "expr": ["ld", "s1", "ij"], "op": "ew"}, {"dst": "f0", "expr": ["sel", ">", ["ld", "s1", "ij"], ["c", 0], ["ld", "f0", "ij"], ["ld", "s0", "ij"]], "guard": 2, "op": "ew", "tmp": "l0"}, {"dst": "f1", "op": "copy", "src": "s1"}, {"dst": "f2", "expr": ["bin", "+", ["bin", "-", ["un", "neg", ["ix", "i"]], ["sel", "<", ["ld", "s1", "ji"], ["c", 0], ["c", 2.0], ["c", 0.5]]], ["un", "exp", ["bin", "+", ["ix", "j"], ["ld", "s1", "ji"]]]], "op": "ew"}, {"dst": "f3", "op": "fill", "value": 0}, {"dst": "f3", "from": [2, 0], "op": "subcopy", "size": [1, 2], "src": "f0", "to": [6, 6]}, {"dst": "Y0", "op": "store", "src": "f2"}, {"dst": "Y1", "op": "store", "src": "f3"}, {"dst": "Y2", "op": "scatter", "src": "f0"}, {"dst": "Y3", "expr": ["bin", "*", ["bin", "min", ["ld", "f1", "ij"], ["ld", "f1", "ij"]], ["c", 0.5]], "op": "gstore"}], "tensors": [{"dtype": "bfloat16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "bfloat16", "kind": "mn", "name": "X1", "output": false}, {"dtype": "bfloat16", "kind": "nm", "name": "Y0", "output": true}, {"dtype": "bfloat16", "kind": "mn", "name": "Y1", "output": true}, {"dtype": "float32", "kind": "hist", "name": "Y2", "output": true}, {"dtype": "bfloat16", "kind": "mn", "name": "Y3", "output": true}], "threads": 32}'


def make():
    @T.prim_func
    def difftest_8_77(X0: T.Tensor((4, 16), T.bfloat16), X1: T.Tensor((4, 16), T.bfloat16), Y0: T.Tensor((16, 4), T.bfloat16), Y1: T.Tensor((4, 16), T.bfloat16), Y2: T.Tensor((8,), T.float32), Y3: T.Tensor((4, 16), T.bfloat16)):
        with T.Kernel(2, 1, threads=32) as (bx, by):
            s0 = T.alloc_shared((8, 8), T.bfloat16)
            s1 = T.alloc_shared((8, 8), T.bfloat16)
            f0 = T.alloc_fragment((8, 8), T.bfloat16)
            l0 = T.alloc_local((1,), T.bfloat16)
            f1 = T.alloc_fragment((8, 8), T.bfloat16)
            f2 = T.alloc_fragment((8, 8), T.bfloat16)
            f3 = T.alloc_fragment((8, 8), T.bfloat16)
            T.copy(X0[by * 8, bx * 8], s0)
            T.copy(X1[by * 8 + 1, bx * 8 + 3], s1)
            for i, j in T.Parallel(8, 8):
                f0[i, j] = s1[i, j]
            if bx % 2 == 1:
                for i, j in T.Parallel(8, 8):
                    l0[0] = T.if_then_else(s1[i, j] > 0, f0[i, j], s0[i, j])
                    f0[i, j] = l0[0] + 1
            T.copy(s1, f1)
            for i, j in T.Parallel(8, 8):
                f2[i, j] = (((-i) - T.if_then_else(s1[j, i] < 0, 2.0, 0.5)) + T.exp(T.min((j + s1[j, i]), 2.0)))
            T.clear(f3)
            T.copy(f0[2:3, 0:2], f3[6:7, 6:8])
            T.copy(f2, Y0[bx * 8, by * 8])
            T.copy(f3, Y1[by * 8, bx * 8])
            for i, j in T.Parallel(8, 8):
                if by * 8 + i < 4 and bx * 8 + j < 16:
                    T.atomic_add(Y2[(i + 3 * j) % 8], f0[i, j])
            for i, j in T.Parallel(8, 8):
                if by * 8 + i < 4 and bx * 8 + j < 16:
                    Y3[by * 8 + i, bx * 8 + j] = (T.min(f1[i, j], f1[i, j]) * 0.5)
    return difftest_8_77
