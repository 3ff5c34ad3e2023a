"""Eager kernels may declare their tensors in the signature, as TileLang allows:
`@jit def scale(A: T.Tensor((4, n), T.float32), s)` is the same kernel as one whose body
begins with `A: T.Tensor((4, n), T.float32)`. (The parameter was taken as a compile-time
value, and indexing it failed with "object of type 'Var' has no len()".)"""

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.kernels.eager_signature import copy_of
from tilelab.errors import TileLabError


def scaled(n: int):
    @tilelab.jit
    def scale(A: T.Tensor((4, n), T.float32), s, C):
        C: T.Tensor((4, n), T.float32)  # declared in the body: the two ways mix
        B = T.empty((4, n), T.float32)
        with T.Kernel(4, threads=128) as bx:
            for i in T.Parallel(n):
                B[bx, i] = A[bx, i] * s + C[bx, i]
        return B

    return scale


def test_signature_tensors_are_parameters():
    a, c = torch.randn(4, 300), torch.randn(4, 300)
    torch.testing.assert_close(scaled(300)(a, 3.0, c), a * 3 + c)
    torch.testing.assert_close(scaled(300)(a, -1.0, c), c - a)  # s: a value, as before


def test_annotations_kept_as_text():
    x = torch.randn(300)
    torch.testing.assert_close(copy_of(300)(x), x)


def test_a_tensor_of_the_wrong_shape_is_refused():
    with pytest.raises(TileLabError, match="shape"):
        scaled(300)(torch.randn(4, 299), 1.0, torch.randn(4, 300))
