# Found by: python -m tilelab.testing.difftest --seed 25 (program 7), then shrunk.
# Symptom (compile_error on cuda): TileLabTypeError: /tmp/tilelab-difftest-d_s7os00/difftest_25_7_23.py:10:5: T.reduce_sum: layouts of 'f2_parts' and 'f2' do not line up
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
# The fold into f2 became a T.reduce_sum of f2_parts, and f2's layout came from the
# T.reduce_abssum of f0 beside it: the two sources' rows did not line up with it.
# ops/reduce.py now moves such a reduction's results through shared memory.
"""difftest program 7 of seed 25 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 1, "N": 1, "bk": 16, "bm": 64, "bn": 8, "buffers": [{"dtype": "float16", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float32", "kind": "n", "name": "f2", "scope": "fragment"}], "family": "", "index": 7, "seed": 25, "slots": 1, "steps": [{"dst": "s0", "op": "load", "src": "X0"}, {"dst": "f0", "op": "load", "src": "X1"}, {"dst": "f2", "op": "fill", "value": 0}, {"dim": 0, "dst": "f2", "expr": ["ld", "s0", "ij"], "kind": "sum", "op": "fold", "over": "mn", "swap": false}, {"clear": false, "dim": 0, "dst": "f2", "kind": "abssum", "op": "reduce", "src": "f0"}, {"dst": "Y3", "op": "store", "src": "f2"}], "tensors": [{"dtype": "float16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float16", "kind": "mn", "name": "X1", "output": false}, {"dtype": "float32", "kind": "on", "name": "Y3", "output": true}], "threads": 32, "walk": []}'


def make():
    @T.prim_func
    def difftest_25_7(X0: T.Tensor((1, 1), T.float16), X1: T.Tensor((1, 1), T.float16), Y3: T.Tensor((1, 1), T.float32)):
        with T.Kernel(1, 1, threads=32) as (bx, by):
            s0 = T.alloc_shared((64, 8), T.float16)
            f0 = T.alloc_fragment((64, 8), T.float16)
            f2 = T.alloc_fragment((8,), T.float32)
            T.copy(X0[by * 64, bx * 8], s0)
            T.copy(X1[by * 64, bx * 8], f0)
            T.clear(f2)
            for i, j in T.Parallel(64, 8):
                f2[j] = (f2[j] + s0[i, j])
            T.reduce_abssum(f0, f2, dim=0, clear=False)
            T.copy(f2, Y3[by, bx * 8])
    return difftest_25_7
