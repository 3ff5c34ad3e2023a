# Found by: python -m tilelab.testing.difftest --seed 1 (program 3317), then shrunk.
# Symptom (compile_error on cuda, H200 run of 2026-12-01): TVM's FlattenBuffer divided by zero (shown as "divides an integer by a value that is 0").
# Cause: the swizzled column of a fragment region copied to a shifted place simplifies to `x % 8 * 8 - (x % 8 + 5) % 8 * 8`, which TVM's iterator analysis reads as a constant; the wrap is kept as `&` (passes/lower_tile_ops_to_threads._placed).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 3317 of seed 1 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 0, "M": 1, "N": 1, "bk": 16, "bm": 8, "bn": 64, "buffers": [{"dtype": "float16", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "float16", "kind": "mn", "name": "s0", "scope": "shared"}, {"dtype": "float16", "kind": "mn", "name": "f1", "scope": "fragment"}, {"dtype": "float32", "kind": "n", "name": "f2", "scope": "fragment"}], "index": 3317, "seed": 1, "steps": [{"dst": "f0", "op": "load", "src": "X0"}, {"dst": "s0", "op": "fill", "value": 1.5}, {"dst": "s0", "from": [0, 53], "op": "subcopy", "size": [1, 5], "src": "f0", "to": [6, 31]}, {"dst": "f1", "op": "copy", "src": "s0"}, {"clear": true, "dim": 0, "dst": "f2", "kind": "max", "op": "reduce", "src": "f1"}, {"dst": "Y0", "op": "store", "src": "f2"}], "tensors": [{"dtype": "float16", "kind": "mn", "name": "X0", "output": false}, {"dtype": "float32", "kind": "on", "name": "Y0", "output": true}], "threads": 64}'


def make():
    @T.prim_func
    def difftest_1_3317(X0: T.Tensor((1, 1), T.float16), Y0: T.Tensor((1, 1), T.float32)):
        with T.Kernel(1, 1, threads=64) as (bx, by):
            f0 = T.alloc_fragment((8, 64), T.float16)
            s0 = T.alloc_shared((8, 64), T.float16)
            f1 = T.alloc_fragment((8, 64), T.float16)
            f2 = T.alloc_fragment((64,), T.float32)
            T.copy(X0[by * 8, bx * 64], f0)
            T.fill(s0, 1.5)
            T.copy(f0[0:1, 53:58], s0[6:7, 31:36])
            T.copy(s0, f1)
            T.reduce_max(f1, f2, dim=0, clear=True)
            T.copy(f2, Y0[by, bx * 64])
    return difftest_1_3317
