# Found by: python -m tilelab.testing.difftest --seed 0 (program 695).
# Symptom (compile_error on cuda): Check failed: (it != scope.buffer_byte_offsets.end()) is false
# Cause: lifetime markers put before StorageRewrite kept a tile it had replaced by a float32x4 one (the markers are now dropped after it and put again before the merge).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 695 of seed 0 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 108, "N": 191, "bk": 16, "bm": 64, "bn": 64, "buffers": [{"dtype": "bfloat16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float32", "kind": "m", "name": "f1", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "mn", "name": "f2", "scope": "fragment"}, {"dtype": "float32", "kind": "m", "name": "s0", "scope": "shared"}, {"dtype": "float32", "kind": "nm", "name": "s1", "scope": "shared"}], "index": 695, "seed": 0, "steps": [{"dst": "f0", "op": "load", "shift": [0, 0], "src": "X0"}, {"clear": true, "dim": 1, "dst": "f1", "kind": "abssum", "op": "reduce", "src": "f0"}, {"dst": "f2", "op": "fill", "value": 0}, {"dst": "f2", "from": [5, 11], "op": "subcopy", "size": [52, 48], "src": "f0", "to": [6, 16]}, {"dst": "s0", "op": "copy", "src": "f1"}, {"dst": "s1", "expr": ["sel", ">", ["ix", "i"], ["c", 3], ["ld", "s0", "j"], ["ld", "s0", "j"]], "op": "ew"}, {"dst": "Y0", "op": "store", "src": "s0"}, {"dst": "Y1", "op": "store", "src": "s1"}], "tensors": [{"dtype": "bfloat16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "om", "name": "Y0", "output": true}, {"dtype": "float32", "kind": "nm", "name": "Y1", "output": true}], "threads": 256}'


def make():
    @T.prim_func
    def difftest_0_695(X0: T.Tensor((108, 191), T.bfloat16), Y0: T.Tensor((3, 108), T.float32), Y1: T.Tensor((191, 108), T.float32)):
        with T.Kernel(3, 2, threads=256) as (bx, by):
            f0 = T.alloc_fragment((64, 64), T.bfloat16)
            f1 = T.alloc_fragment((64,), T.float32)
            f2 = T.alloc_fragment((64, 64), T.bfloat16)
            s0 = T.alloc_shared((64,), T.float32)
            s1 = T.alloc_shared((64, 64), T.float32)
            T.copy(X0[by * 64, bx * 64], f0)
            T.reduce_abssum(f0, f1, dim=1, clear=True)
            T.clear(f2)
            T.copy(f0[5:57, 11:59], f2[6:58, 16:64])
            T.copy(f1, s0)
            for i, j in T.Parallel(64, 64):
                s1[i, j] = T.if_then_else(i > 3, s0[j], s0[j])
            T.copy(s0, Y0[bx, by * 64])
            T.copy(s1, Y1[bx * 64, by * 64])
    return difftest_0_695
