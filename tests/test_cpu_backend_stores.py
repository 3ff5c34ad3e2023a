"""Stores of the CPU backend stay inside their tensors.

Found by difftest (seed 1, program 3330): a bf16 output of 9 elements had a 10th
written after it, which corrupted the heap of the process. LLVM vectorized the
store loop, and its AVX-512 truncating masked store of the one tail lane was
turned into a 4-byte store. Each output here sits between guard elements.
"""

import pytest
import torch

import tilelab
import tilelab.language as T

GUARD = 64


def narrowing_store(n: int):
    @T.prim_func
    def store(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.bfloat16),
              C: T.Tensor((n,), T.float16)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                if i < n:
                    B[i] = A[i]
                    C[i] = A[i]

    return store


def guarded(n: int, dtype):
    whole = torch.full((GUARD + n + GUARD,), 7.0, dtype=dtype)
    return whole, whole[GUARD:GUARD + n]


@pytest.mark.parametrize("n", [1, 8, 9, 16, 17, 25, 32])
def test_narrowed_stores_stay_inside_the_output(n):
    kernel = tilelab.compile(narrowing_store(n), target="cpu")
    a = torch.randn(n)
    (b_all, b), (c_all, c) = guarded(n, torch.bfloat16), guarded(n, torch.float16)
    kernel(a, b, c)
    assert torch.equal(b, a.bfloat16()) and torch.equal(c, a.half())
    for whole in (b_all, c_all):
        outside = torch.cat([whole[:GUARD], whole[GUARD + n:]])
        assert (outside == 7.0).all(), f"n={n}: {whole.dtype} written outside the tensor"
