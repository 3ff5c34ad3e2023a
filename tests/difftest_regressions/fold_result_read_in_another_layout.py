# Found by: python -m tilelab.testing.difftest --seed 25 (program 110), then shrunk.
# Symptom (compile_error on cuda): TileLabTypeError: /tmp/tilelab-difftest-xe4a8ps4/difftest_25_110_37.py:10:5: T.reduce_min: 'f1' does not keep row (4,) on thread 1, which holds part of it
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
# The fold over i became a T.reduce_min (spill_fragments.as_reduction), but f1's layout
# came from the loop that reads f1[j] beside f0: it did not keep each column on the
# threads holding its parts. ops/reduce.py now reduces into the reduction's own layout
# and moves the results to f1's through shared memory (move_through_shared).
"""difftest program 110 of seed 25 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 1, "N": 1, "bk": 16, "bm": 64, "bn": 16, "buffers": [{"dtype": "float16", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float32", "kind": "n", "name": "f1", "scope": "fragment"}], "family": "", "index": 110, "seed": 25, "slots": 1, "steps": [{"dst": "s0", "op": "load", "src": "X0"}, {"dst": "f1", "op": "fill", "value": 0}, {"dim": 0, "dst": "f1", "expr": ["ld", "s0", "ij"], "kind": "min", "op": "fold", "over": "mn", "swap": true}, {"dst": "f0", "expr": ["ld", "f1", "j"], "op": "ew"}, {"dst": "Y0", "op": "store", "src": "f1"}], "tensors": [{"dtype": "float16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "on", "name": "Y0", "output": true}], "threads": 32, "walk": []}'


def make():
    @T.prim_func
    def difftest_25_110(X0: T.Tensor((1, 1), T.float16), Y0: T.Tensor((1, 1), T.float32)):
        with T.Kernel(1, 1, threads=32) as (bx, by):
            s0 = T.alloc_shared((64, 16), T.float16)
            f0 = T.alloc_fragment((64, 16), T.float16)
            f1 = T.alloc_fragment((16,), T.float32)
            T.copy(X0[by * 64, bx * 16], s0)
            T.clear(f1)
            for i, j in T.Parallel(64, 16):
                f1[j] = T.min(s0[i, j], f1[j])
            for i, j in T.Parallel(64, 16):
                f0[i, j] = f1[j]
            T.copy(f1, Y0[by, bx * 16])
    return difftest_25_110
