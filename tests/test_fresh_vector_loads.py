"""A fragment copied (with a cast) to shared memory, changed, and copied again: the second
copy must store the changed values. TVM's CUDA code generator reused the first copy's
vector temporaries by their text (passes/fresh_vector_loads.py)."""

from __future__ import annotations

import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc


def copy_scale_copy(rows=64, cols=32, threads=128):
    @T.prim_func
    def kernel(A: T.Tensor((rows, cols), "float32"), B: T.Tensor((rows, cols), "bfloat16"),
               C: T.Tensor((rows, cols), "bfloat16")):
        with T.Kernel(1, threads=threads):
            f = T.alloc_fragment((rows, cols), "float32")
            s = T.alloc_shared((rows, cols), "bfloat16")
            T.copy(A, f)
            T.copy(f, s)
            T.copy(s, B)
            for i, j in T.Parallel(rows, cols):
                f[i, j] = f[i, j] * 2
            T.copy(f, s)
            T.copy(s, C)

    return kernel


def _check(device):
    a = torch.randn(64, 32, device=device)
    b = torch.zeros(64, 32, dtype=torch.bfloat16, device=device)
    c = torch.zeros_like(b)
    tilelab.compile(copy_scale_copy(), target="cpu" if device == "cpu" else "cuda")(a, b, c)
    torch.testing.assert_close(b.float(), a.bfloat16().float())
    torch.testing.assert_close(c.float(), (a * 2).bfloat16().float())


def test_the_second_copy_stores_the_changed_values_on_the_cpu():
    _check("cpu")


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_each_copy_reads_the_fragment_afresh_in_the_cuda_source():
    source = tilelab.compile(copy_scale_copy(), target="cuda:sm_90a").get_kernel_source()
    body = source[source.rindex("__global__"):]
    scaled = body.rindex("f_ptr[15] = ")  # the last lane the loop doubles
    first, second = body[:scaled], body[scaled:]
    loads = r"= \*\(float4\*\)\(f_ptr \+ (\d+)\)"
    # the second copy loads its own temporaries, after the doubling...
    assert sorted(re.findall(loads, second)) == ["0", "12", "4", "8"]
    # ...and uses no temporary of the first copy
    used = set(re.findall(r"\((v_\w+)\.x\)", second))
    assert not used & set(re.findall(r"float4 (v_\w+) = ", first))


@pytest.mark.gpu
def test_the_second_copy_stores_the_changed_values_on_the_gpu():
    _check("cuda")
