# Found by: python -m tilelab.testing.difftest --seed 1 (program 3064).
# Symptom (mismatch on cuda): crashed: AcceleratorError: CUDA error: unspecified launch failure (H200, 2026-12-01)
# Cause: the 512-byte B tile of a wgmma GEMM (32-byte swizzle, 256-byte period) was merged at byte 64 of shared memory, after a 32-byte vector; wgmma_check_aligned stopped the kernel. Tiles of 256 bytes or more now start on their swizzle period (passes/prepare_shared_merge.py).
# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.
"""difftest program 3064 of seed 1 (tilelab.testing.generator)."""

import tilelab.language as T

SPEC = '{"K": 16, "M": 128, "N": 22, "bk": 16, "bm": 64, "bn": 16, "buffers": [{"dtype": "bfloat16", "kind": "km", "name": "s0", "scope": "shared"}, {"dtype": "bfloat16", "kind": "kn", "name": "s1", "scope": "shared"}, {"dtype": "float32", "kind": "mn", "name": "f0", "scope": "fragment"}, {"dtype": "bfloat16", "kind": "n", "name": "s2", "scope": "shared"}, {"dtype": "bfloat16", "kind": "mn", "name": "s3", "scope": "shared"}], "index": 3064, "seed": 1, "steps": [{"A": "X0", "B": "X1", "a": "s0", "b": "s1", "clear_accum": false, "dst": "f0", "op": "gemm", "policy": "FullCol", "stages": 1, "transpose_A": true, "transpose_B": false}, {"dst": "s2", "op": "load", "shift": [0], "src": "X2"}, {"dst": "s3", "expr": ["bin", "+", ["bin", "*", ["ld", "f0", "ij"], ["c", 0.5]], ["ld", "s2", "j"]], "op": "ew"}, {"dst": "Y0", "op": "store", "src": "f0"}, {"dst": "Y1", "op": "store", "src": "s3"}], "tensors": [{"dtype": "bfloat16", "kind": "at", "name": "X0", "output": false}, {"dtype": "bfloat16", "kind": "b", "name": "X1", "output": false}, {"dtype": "bfloat16", "kind": "vn", "name": "X2", "output": false}, {"dtype": "float32", "kind": "mn", "name": "Y0", "output": true}, {"dtype": "bfloat16", "kind": "mn", "name": "Y1", "output": true}], "threads": 128}'


def make():
    @T.prim_func
    def difftest_1_3064(X0: T.Tensor((16, 128), T.bfloat16), X1: T.Tensor((16, 22), T.bfloat16), X2: T.Tensor((22,), T.bfloat16), Y0: T.Tensor((128, 22), T.float32), Y1: T.Tensor((128, 22), T.bfloat16)):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            s0 = T.alloc_shared((16, 64), T.bfloat16)
            s1 = T.alloc_shared((16, 16), T.bfloat16)
            f0 = T.alloc_fragment((64, 16), T.float32)
            s2 = T.alloc_shared((16,), T.bfloat16)
            s3 = T.alloc_shared((64, 16), T.bfloat16)
            T.clear(f0)
            for k in T.Pipelined(1, num_stages=1):
                T.copy(X0[k * 16, by * 64], s0)
                T.copy(X1[k * 16, bx * 16], s1)
                T.gemm(s0, s1, f0, transpose_A=True, policy=T.GemmWarpPolicy.FullCol)
            T.copy(X2[bx * 16], s2)
            for i, j in T.Parallel(64, 16):
                s3[i, j] = ((f0[i, j] * 0.5) + s2[j])
            T.copy(f0, Y0[by * 64, bx * 16])
            T.copy(s3, Y1[by * 64, bx * 16])
    return difftest_1_3064
