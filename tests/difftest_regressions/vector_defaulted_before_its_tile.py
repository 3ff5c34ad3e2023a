# Found by: python -m tilelab.testing.difftest --seed 7 (program 72; not shrunk here).
# Symptom (compile_error on cuda): TileLabTypeError: T.reduce_sum: 'f4' does not keep row (0,) on thread 1, which holds part of it
# Cause: layout defaults went to fragments in allocation order, so a vector was given one
# before the tile it is reduced from; now the largest free fragment goes first.
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 72 of seed 7 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 35, "M": 13, "N": 22, "bk": 16, "bm": 32, "bn": 16, "buffers": [{"dtype": "float16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float16", "kind": "nm", "name": "f1", "scope": "fragment"}, {"dtype": "float16", "kind": "m", "name": "f2", "scope": "fragment"}, {"dtype": "float16", "kind": "mk", "name": "s0", "scope": "shared"}, {"dtype": "float16", "kind": "mk", "name": "f3", "scope": "fragment"}, {"dtype": "float32", "kind": "m", "name": "f4", "scope": "fragment"}, {"dtype": "float16", "kind": "mn", "name": "f5", "scope": "fragment"}, {"dtype": "float16", "kind": "m", "name": "f6", "scope": "fragment"}, {"dtype": "float16", "kind": "local", "name": "l0", "scope": "local"}, {"dtype": "float16", "kind": "mn", "name": "s1", "scope": "shared"}, {"dtype": "float16", "kind": "m", "name": "f7", "scope": "fragment"}, {"dtype": "float16", "kind": "local", "name": "l1", "scope": "local"}], "index": 72, "seed": 7, "steps": [{"dst": "f0", "op": "load", "shift": [0, 0], "src": "X0"}, {"dst": "f1", "op": "load", "shift": [0, 0], "src": "X1"}, {"dst": "f2", "op": "load", "shift": [0], "src": "X2"}, {"dst": "f4", "op": "ksum", "src": "X3", "stage": "s0", "stages": 3, "tmp": "f3"}, {"dst": "f5", "op": "fill", "value": 0}, {"dst": "f5", "from": [0, 2], "op": "subcopy", "size": [31, 14], "src": "f0", "to": [1, 0]}, {"dst": "f6", "expr": ["bin", "-", ["bin", "*", ["sel", "<", ["ld", "f2", "i"], ["c", 0], ["c", -1.5], ["ld", "f2", "i"]], ["ld", "f2", "i"]], ["bin", "min", ["bin", "+", ["ld", "f2", "i"], ["ld", "f4", "i"]], ["bin", "-", ["ld", "f4", "i"], ["ix", "i"]]]], "op": "ew", "tmp": "l0"}, {"dst": "s1", "expr": ["bin", "-", ["ld", "f0", "ij"], ["ld", "f0", "ij"]], "op": "ew"}, {"dst": "f7", "expr": ["bin", "-", ["bin", "-", ["ld", "f6", "i"], ["ld", "f2", "i"]], ["ld", "f4", "i"]], "op": "ew", "tmp": "l1"}, {"dst": "f1", "expr": ["un", "abs", ["ld", "s1", "ji"]], "guard": 2, "op": "ew"}, {"dst": "Y0", "op": "store", "src": "f7"}], "tensors": [{"dtype": "float16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float16", "kind": "nm", "name": "X1", "output": false}, {"dtype": "float16", "kind": "vm", "name": "X2", "output": false}, {"dtype": "float16", "kind": "a", "name": "X3", "output": false}, {"dtype": "float16", "kind": "om", "name": "Y0", "output": true}], "threads": 32}'


def make():
    @T.prim_func
    def difftest_7_72(X0: T.Tensor((13, 22), T.float16), X1: T.Tensor((22, 13), T.float16), X2: T.Tensor((13,), T.float16), X3: T.Tensor((13, 35), T.float16), Y0: T.Tensor((2, 13), T.float16)):
        with T.Kernel(2, 1, threads=32) as (bx, by):
            f0 = T.alloc_fragment((32, 16), T.float16)
            f1 = T.alloc_fragment((16, 32), T.float16)
            f2 = T.alloc_fragment((32,), T.float16)
            s0 = T.alloc_shared((32, 16), T.float16)
            f3 = T.alloc_fragment((32, 16), T.float16)
            f4 = T.alloc_fragment((32,), T.float32)
            f5 = T.alloc_fragment((32, 16), T.float16)
            f6 = T.alloc_fragment((32,), T.float16)
            l0 = T.alloc_local((1,), T.float16)
            s1 = T.alloc_shared((32, 16), T.float16)
            f7 = T.alloc_fragment((32,), T.float16)
            l1 = T.alloc_local((1,), T.float16)
            T.copy(X0[by * 32, bx * 16], f0)
            T.copy(X1[bx * 16, by * 32], f1)
            T.copy(X2[by * 32], f2)
            T.clear(f4)
            for k in T.Pipelined(3, num_stages=3):
                T.copy(X3[by * 32, k * 16], s0)
                T.copy(s0, f3)
                T.reduce_sum(f3, f4, dim=1, clear=False)
            T.clear(f5)
            T.copy(f0[0:31, 2:16], f5[1:32, 0:14])
            for i in T.Parallel(32):
                l0[0] = ((T.if_then_else(f2[i] < 0, -1.5, f2[i]) * f2[i]) - T.min((f2[i] + f4[i]), (f4[i] - i)))
                f6[i] = l0[0] + 1
            for i, j in T.Parallel(32, 16):
                s1[i, j] = (f0[i, j] - f0[i, j])
            for i in T.Parallel(32):
                l1[0] = ((f6[i] - f2[i]) - f4[i])
                f7[i] = l1[0] + 1
            if bx % 2 == 1:
                for i, j in T.Parallel(16, 32):
                    f1[i, j] = T.abs(s1[j, i])
            T.copy(f7, Y0[bx, by * 32])
    return difftest_7_72
