"""How a thread folds its own registers of a row in T.reduce_* on the GPU (ops/reduce.py):
in CHAINS independent partials, then pairwise - fewer dependent steps, few live registers."""

from __future__ import annotations

import pytest
import torch
from tvm import tirx

import tilelab
import tilelab.language as T
from tilelab.ops.reduce import CHAINS, _interleaved


def _depth(expr) -> int:
    if isinstance(expr, tirx.Var):
        return 0
    return 1 + max(_depth(expr.a), _depth(expr.b))


def _leaves(expr) -> list:
    return [expr.name] if isinstance(expr, tirx.Var) else _leaves(expr.a) + _leaves(expr.b)


@pytest.mark.parametrize("kind, node", [("sum", tirx.Add), ("max", tirx.Max),
                                        ("min", tirx.Min)])
@pytest.mark.parametrize("count", [1, 2, 3, 5, 32, 64])
def test_every_register_once_in_few_steps(kind, node, count):
    values = [tirx.Var(f"r{i}", "float32") for i in range(count)]
    folded = _interleaved(kind, values)
    assert sorted(_leaves(folded)) == sorted(v.name for v in values)
    chain = -(-count // CHAINS) - 1  # steps of the longest chain
    assert _depth(folded) == chain + (min(count, CHAINS) - 1).bit_length()
    assert count == 1 or isinstance(folded, node)
    if count == 32:  # FlashAttention's 128-key tile: 32 registers of a row a thread
        assert _depth(folded) == 16


@tilelab.jit(out_idx=[1])
def row_folds(X, kind: str = "sum", threads: int = 128):
    M, N = T.const("M, N")
    X: T.Tensor((M, N), T.float32)
    Y = T.empty((M,), T.float32)
    with T.Kernel(1, threads=threads):
        x = T.alloc_fragment((M, N), T.float32)
        y = T.alloc_fragment((M,), T.float32)
        T.copy(X, x)
        getattr(T, f"reduce_{kind}")(x, y, dim=1)
        T.copy(y, Y)
    return Y


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
def test_folds_match_torch(device, kind):
    """64 x 100: rows of 100 keys split unevenly over the threads' registers."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(len(kind))
    x = torch.randn(64, 100, device=device)
    y = row_folds(x, kind=kind, **({"target": "cpu"} if device == "cpu" else {}))
    want = {"sum": x.sum(1), "max": x.amax(1), "min": x.amin(1), "abssum": x.abs().sum(1),
            "absmax": x.abs().amax(1)}[kind]
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-4)
