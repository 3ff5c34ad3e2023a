"""A Triton kernel of bfloat16 arithmetic, for tests/test_tilelang_compat.py (Triton's
interpreter, as the compatibility runner uses it). Triton decorates kernels when they are
defined, so this module is imported only once the test has changed the interpreter."""

import torch
import triton
import triton.language as tl

exp = tl.exp  # a builtin under a name of its own, as flash-linear-attention binds them


@triton.jit
def _kernel(x, y, product, dot, maximum, exponent, greater, count, N: tl.constexpr):
    i = tl.arange(0, N)
    a, b = tl.load(x + i), tl.load(y + i)
    tl.store(product + i, a * b + a)
    tile = i[:, None] * N + i[None, :]
    A, B = tl.load(x + tile), tl.load(y + tile)
    tl.store(dot + tile, tl.dot(A, B))
    tl.store(maximum + i, tl.max(A, axis=1))
    tl.store(exponent + i, exp(a.to(tl.float32)).to(tl.bfloat16))
    tl.store(greater + i, (a > b).to(tl.int32))
    total = 0
    for _ in range(tl.load(count)):  # a loop over a loaded count
        total += 1
    tl.store(count, total * 2)


def run(x: torch.Tensor, y: torch.Tensor) -> dict:
    """x, y: (N, N) bfloat16. The row-0 results are of x[0] and y[0]; "count" counts a
    loop of 5 twice."""
    n = x.shape[0]
    out = {"product": torch.empty(n, dtype=torch.bfloat16), "dot": torch.empty(n, n),
           "max": torch.empty(n), "exp": torch.empty(n, dtype=torch.bfloat16),
           "greater": torch.empty(n, dtype=torch.int32), "count": torch.tensor([5])}
    _kernel[(1,)](x, y, out["product"], out["dot"], out["max"], out["exp"], out["greater"],
                  out["count"], n)
    return out
