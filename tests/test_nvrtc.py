"""NVRTC compiles the CUDA backend's output when nvcc is absent (TILELAB_CUDA_COMPILER=nvrtc)."""

import pytest

import tilelab
import tilelab.language as T
from tilelab.backends.cuda import nvcc

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")


def make_scale(N):
    @T.prim_func
    def scale(A: T.Tensor((N,), T.float16), B: T.Tensor((N,), T.float16)):
        with T.Kernel(T.ceildiv(N, 256), threads=128) as bx:
            tile = T.alloc_fragment((256,), T.float16)
            T.copy(A[bx * 256], tile)
            for i in T.Parallel(256):
                tile[i] = tile[i] * 2.0
            T.copy(tile, B[bx * 256])

    return scale


def test_nvrtc_builds_a_cubin_with_a_resource_report(monkeypatch, tmp_path):
    monkeypatch.setenv("TILELAB_CUDA_COMPILER", "nvrtc")
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path))
    kernel = tilelab.compile(make_scale(1000), out_idx=[1], target="cuda:sm_90a")
    assert kernel.cubin[:4] == b"\x7fELF"
    assert kernel.trace.code["ptx"] == ""  # NVRTC gives the cubin, not both
    assert kernel.trace.resources["registers"] > 0


def test_nvrtc_and_nvcc_compile_the_course_gemm(monkeypatch, tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.gemm import gemm_kernel

    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path))
    source = gemm_kernel.compile(M=256, N=256, K=256, target="cuda:sm_80").trace.code["cuda"]
    result = nvcc.compile_nvrtc(source, "sm_80")
    assert result["cubin"][:4] == b"\x7fELF" and result["resources"]["registers"] > 100


def test_a_syntax_error_is_reported():
    with pytest.raises(tilelab.TileLabCompileError, match="NVRTC rejected"):
        nvcc.compile_nvrtc('#include "tilelab.cuh"\n__global__ void k() { oops }', "sm_90a")
