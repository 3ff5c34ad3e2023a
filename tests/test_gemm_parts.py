"""`T.gemm` on parts of shared tiles: `Q_s[:, 0:512]`, `V_s[:, 64:128]`.

TileLang programs (DeepSeek's sparse MLA) keep one shared tile of a query's 576
columns and multiply its first 512 and its last 64 by two T.gemm. A part is a
rectangle of a shared tile's last two dimensions at constant offsets; the tile keeps
the layout chosen for all of it, and each instruction reads its piece of the part
where that layout stored it: `ldmatrix` row addresses (mma.sync) or matrix
descriptors that start at the part's offset (wgmma), where the offset lies on the
boundaries those instructions need - else the T.gemm takes a slower path and the
Trace says why. Fragments are taken whole.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.test_wgmma import check_pieces
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def split_scores(Q, K, head: int = 128, tail: int = 64, threads: int = 128):
    """S = Q Kᵀ over head + tail columns, as two T.gemm on the two parts of each tile."""
    M, N = T.const("M, N")
    Q: T.Tensor((M, head + tail), T.float16)
    K: T.Tensor((N, head + tail), T.float16)
    S = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=threads) as (bx, by):
        q_s = T.alloc_shared((64, head + tail), T.float16)
        k_s = T.alloc_shared((64, head + tail), T.float16)
        acc = T.alloc_fragment((64, 64), T.float32)
        T.copy(Q[by * 64, 0], q_s)
        T.copy(K[bx * 64, 0], k_s)
        T.clear(acc)
        T.gemm(q_s[:, 0:head], k_s[:, 0:head], acc, transpose_B=True)
        T.gemm(q_s[:, head:head + tail], k_s[:, head:head + tail], acc, transpose_B=True)
        T.copy(acc, S[by * 64, bx * 64])
    return S


@tilelab.jit
def column_part(A, V, first: int = 64, width: int = 64, stages: int = 2):
    """O = A @ V[:, first:first + width], V's tile loaded whole (K x 128) and multiplied
    by its columns `first` on: B stored K x N, a part along its contiguous dimension."""
    M, K = T.const("M, K")
    A: T.Tensor((M, K), T.float16)
    V: T.Tensor((K, 128), T.float16)
    O = T.empty((M, width), T.float32)  # noqa: E741
    with T.Kernel(T.ceildiv(M, 64), threads=128) as bx:
        a_s = T.alloc_shared((64, 32), T.float16)
        v_s = T.alloc_shared((32, 128), T.float16)
        acc = T.alloc_fragment((64, width), T.float32)
        T.clear(acc)
        for ko in T.Pipelined(T.ceildiv(K, 32), num_stages=stages):
            T.copy(A[bx * 64, ko * 32], a_s)
            T.copy(V[ko * 32, 0], v_s)
            T.gemm(a_s, v_s[:, first:first + width], acc)
        T.copy(acc, O[bx * 64, 0])
    return O


@tilelab.jit
def row_part(A, B, first: int = 32):
    """C = A[first:first + 32, :] @ B: a part of A's tile along its rows (M)."""
    A: T.Tensor((64, 64), T.float16)
    B: T.Tensor((64, 64), T.float16)
    C = T.empty((32, 64), T.float32)
    with T.Kernel(1, threads=128):
        a_s = T.alloc_shared((64, 64), T.float16)
        b_s = T.alloc_shared((64, 64), T.float16)
        acc = T.alloc_fragment((32, 64), T.float32)
        T.copy(A, a_s)
        T.copy(B, b_s)
        T.clear(acc)
        T.gemm(a_s[first:first + 32, :], b_s, acc)
        T.copy(acc, C)
    return C


def _scores_inputs(m=200, n=136, head=128, tail=64, device="cpu"):
    q = torch.randn(m, head + tail, dtype=torch.float16, device=device)
    k = torch.randn(n, head + tail, dtype=torch.float16, device=device)
    return q, k


def _column_inputs(m=136, k=200, device="cpu"):
    return (torch.randn(m, k, dtype=torch.float16, device=device),
            torch.randn(k, 128, dtype=torch.float16, device=device))


def _gemms(kernel) -> list:
    return [r for r in kernel.trace.instructions if r["op"] == "gemm"]


def _check_every_part(run, device):
    """Each kernel above against torch, `run(program, *inputs, **options)` running it."""
    q, k = _scores_inputs(device=device)
    torch.testing.assert_close(run(split_scores, q, k), q.float() @ k.float().T,
                               rtol=1e-3, atol=1e-3)
    a, v = _column_inputs(device=device)
    for first, width in ((64, 64), (8, 32), (4, 32)):
        torch.testing.assert_close(run(column_part, a, v, first=first, width=width),
                                   a.float() @ v.float()[:, first:first + width],
                                   rtol=1e-3, atol=1e-3)
    a, b = (torch.randn(64, 64, dtype=torch.float16, device=device) for _ in range(2))
    for first in (0, 8, 32):
        torch.testing.assert_close(run(row_part, a, b, first=first),
                                   a.float()[first:first + 32] @ b.float(), rtol=1e-3, atol=1e-3)


def test_parts_multiply_as_the_whole_tile_on_the_cpu():
    torch.manual_seed(0)
    _check_every_part(lambda program, *inputs, **options: program(*inputs, **options), "cpu")


@pytest.mark.parametrize("k_major, rows, cols, width, piece_mn, first", [
    (True, 64, 192, 128, 64, (0, 128)),  # the tail of a 576-column query, K-major
    (True, 128, 128, 128, 64, (64, 16)),  # rows and K both offset
    (True, 64, 96, 64, 32, (8, 32)),
    (False, 32, 128, 128, 64, (0, 64)),  # B stored K x N: the second 64-column panel
    (False, 64, 256, 128, 128, (16, 128))])
def test_descriptors_of_a_part_reach_its_elements(k_major, rows, cols, width, piece_mn,
                                                  first):
    """Each instruction's piece of a part, addressed from the part's offset, reaches the
    bytes where `Layout.wgmma_panels` stored the tile's elements."""
    check_pieces(k_major, rows, cols, width, piece_mn, first)


@needs_nvcc
def test_aligned_parts_take_wgmma_and_the_others_say_why():
    q, k = _scores_inputs()
    kernel = split_scores.compile(q, k, target="cuda:sm_90a")
    assert [g["instruction"] for g in _gemms(kernel)] == ["wgmma.mma_async"] * 2
    a, v = _column_inputs()
    kernel = column_part.compile(a, v, first=64, width=64, target="cuda:sm_90a")
    assert [g["instruction"] for g in _gemms(kernel)] == ["wgmma.mma_async"]
    # 8 columns in: off the 32-column panel (a 64-byte swizzle, for 32-wide MMAs) that a
    # descriptor steps by, though on the 16-byte line ldmatrix needs
    kernel = column_part.compile(a, v, first=8, width=32, target="cuda:sm_90a")
    (gemm,) = _gemms(kernel)
    assert gemm["instruction"] == "mma.sync"
    assert "starting at column 8, not a multiple of 32" in gemm["why"]
    # 4 columns in: off the 16-byte line ldmatrix reads
    kernel = column_part.compile(a, v, first=4, width=32, target="cuda:sm_90a")
    (gemm,) = _gemms(kernel)
    assert gemm["instruction"] == "fma" and "off a 16-byte line" in gemm["why"]


@needs_nvcc
def test_parts_on_ampere_take_mma_sync():
    q, k = _scores_inputs()
    kernel = split_scores.compile(q, k, target="cuda:sm_80")
    assert [g["instruction"] for g in _gemms(kernel)] == ["mma.sync"] * 2


def test_a_part_of_a_fragment_or_at_a_moving_offset_is_refused():
    @tilelab.jit
    def fragment_part(A):
        A: T.Tensor((64, 64), T.float16)
        C = T.empty((64, 32), T.float32)
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((64, 64), T.float16)
            b = T.alloc_shared((32, 32), T.float16)
            acc = T.alloc_fragment((64, 32), T.float32)
            T.copy(A, a)
            T.copy(A[0:32, 0:32], b)
            T.clear(acc)
            T.gemm(a[:, 0:32], b, acc)
            T.copy(acc, C)
        return C

    a = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(TileLabError, match="a fragment is taken whole") as error:
        fragment_part(a)
    assert "test_gemm_parts.py" in str(error.value)

    @tilelab.jit
    def moving_part(A):
        A: T.Tensor((64, 128), T.float16)
        C = T.empty((64, 64), T.float32)
        with T.Kernel(2, threads=128) as bx:
            a = T.alloc_shared((64, 128), T.float16)
            acc = T.alloc_fragment((64, 64), T.float32)
            T.copy(A, a)
            T.clear(acc)
            T.gemm(a[:, bx * 32:bx * 32 + 64], a[:, 0:64], acc, transpose_B=True)
            T.copy(acc, C)
        return C

    with pytest.raises(TileLabError, match="at constant offsets"):
        moving_part(torch.randn(64, 128, dtype=torch.float16))


@pytest.mark.gpu
@pytest.mark.parametrize("configs", [{}, {PassConfigKey.TL_DISABLE_WGMMA.value: True}])
def test_parts_on_the_gpu(configs):
    """On the H200: wgmma where the parts allow it (else mma.sync or FMAs), and the
    Ampere path with wgmma turned off."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")

    def run(program, *inputs, **options):
        kernel = program.compile(*inputs, target="cuda:sm_90a", pass_configs=configs,
                                 **options)
        return kernel(*inputs)

    for seed in range(2):
        torch.manual_seed(seed)
        _check_every_part(run, "cuda")
