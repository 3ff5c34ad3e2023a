"""Eager kernels whose tensors are annotated in the signature, with annotations kept as
text (`from __future__ import annotations`): tilelab evaluates them itself, while the
kernel is decorated (tests/test_eager_signature.py)."""

from __future__ import annotations

import tilelab
import tilelab.language as T


def copy_of(m: int):
    """`m` appears only in an annotation: not in the closure, in the factory's frame."""
    @tilelab.jit
    def copy(A: T.Tensor((m,), T.float32)):
        B = T.empty((300,), T.float32)
        with T.Kernel(3, threads=128) as bx:
            for i in T.Parallel(100):
                B[bx * 100 + i] = A[bx * 100 + i]
        return B

    return copy
