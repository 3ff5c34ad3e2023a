"""A fragment read at a computed index inside T.Parallel (`f[63 - i]`, `f[(i + 1) % 64]`,
`f[k]` of an outer serial loop): the CPU ran it, CUDA refused it. A small fragment only
read that way is now kept whole by every thread (passes/infer_layouts.py), so any element
is in the thread's registers. (A fragment written at a computed index is kept in shared
memory instead: tests/test_spill_fragments.py.)"""

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")

N = 64


def permuted_read(variant: str):
    @T.prim_func
    def kernel(X: T.Tensor((N,), T.float32), Y: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((N,), T.float32)
            g = T.alloc_fragment((N,), T.float32)
            T.copy(X, f)
            if variant == "reversed":
                for i in T.Parallel(N):
                    g[i] = f[N - 1 - i]
            elif variant == "rotated":
                for i in T.Parallel(N):
                    g[i] = f[(i + 1) % N] * 2.0
            else:  # a running sum of the first eight elements, broadcast
                for i in T.Parallel(N):
                    g[i] = 0.0
                for k in T.serial(8):
                    for i in T.Parallel(N):
                        g[i] = g[i] + f[k]
            T.copy(g, Y)

    return kernel


def expected(variant: str, x: torch.Tensor) -> torch.Tensor:
    if variant == "reversed":
        return x.flip(0)
    if variant == "rotated":
        return x.roll(-1) * 2
    return x[:8].sum().expand(N)


VARIANTS = ["reversed", "rotated", "outer_loop"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_on_the_cpu(variant):
    x = torch.randn(N)
    y = tilelab.compile(permuted_read(variant), out_idx=[1], target="cpu")(x)
    torch.testing.assert_close(y, expected(variant, x))


@needs_nvcc
@pytest.mark.parametrize("variant", VARIANTS)
def test_compiles_with_the_fragment_kept_whole(variant):
    trace = tilelab.compile(permuted_read(variant), out_idx=[1], target="cuda:sm_90a").trace
    assert trace.layouts["f"]["recipe"]["kind"] == "replicated"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_on_the_gpu(variant):
    x = torch.randn(N, device="cuda")
    y = tilelab.compile(permuted_read(variant), out_idx=[1], target="cuda")(x)
    torch.testing.assert_close(y, expected(variant, x))
