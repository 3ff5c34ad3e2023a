"""`T.sync_grid()`: a barrier of every block of the grid (TileLang's persistent kernels).

Each block of `normalized` sums its part of the input and publishes the sum; after the
barrier every block reads all the sums and scales its own part - kept in a fragment from
the first phase - by their total. On the CPU the blocks run one phase after the other
(the fragment has a copy per block); for CUDA the kernel calls cooperative groups' grid
sync and is launched cooperatively.
"""

from __future__ import annotations

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError
from tilelab.runtime.artifact import load_artifact
from tilelab.runtime.cuda import launcher_for

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")

PART = 64


@tilelab.jit(out_idx=[-1])
def normalized(n, blocks=4, with_atomics=False):
    """out = A / sum(A); each of `blocks` blocks owns the parts b, b + blocks, ... of A
    (a persistent kernel's loop over tiles); n need not be a multiple of PART."""
    parts = (n + PART - 1) // PART
    rounds = (parts + blocks - 1) // blocks

    @T.prim_func
    def kernel(A: T.Tensor((n,), T.float32), sums: T.Tensor((blocks,), T.float32),
               out: T.Tensor((n,), T.float32)):
        with T.Kernel(blocks, threads=64) as b:
            kept = T.alloc_fragment((rounds, PART), T.float32)
            part = T.alloc_fragment((PART,), T.float32)
            total = T.alloc_fragment((1,), T.float32)
            grand = T.alloc_var(T.float32)
            T.clear(kept)
            for r in T.serial(rounds):
                T.copy(A[(r * blocks + b) * PART], part)
                for i in T.Parallel(PART):
                    kept[r, i] = part[i]
            T.reduce_sum(kept, part, dim=0)
            T.reduce_sum(part, total, dim=0)
            if with_atomics:
                T.atomic_add(sums[b], total[0])
            else:
                sums[b] = total[0]
            T.sync_grid()
            grand = 0.0
            for k in T.serial(blocks):
                grand = grand + sums[k]
            for r, i in T.Parallel(rounds, PART):
                if (r * blocks + b) * PART + i < n:
                    out[(r * blocks + b) * PART + i] = kept[r, i] / grand
    return kernel


@pytest.mark.parametrize(("n", "blocks", "with_atomics"),
                         [(1000, 4, False), (64 * 9 + 5, 3, False), (300, 2, True)])
def test_blocks_read_what_all_blocks_wrote_before_the_barrier(n, blocks, with_atomics):
    kernel = normalized(n, blocks, with_atomics)
    for seed in range(2):
        torch.manual_seed(seed)
        a = torch.rand(n) + 0.1
        sums = torch.zeros(blocks)
        torch.testing.assert_close(kernel(a, sums), a / a.sum(), rtol=1e-5, atol=1e-7)


@tilelab.jit(out_idx=[-1])
def gemm_over_its_total(m, n, k, block=64):
    """C = (A @ B) / sum(A @ B): a pipelined GEMM per block, its sum published; after the
    barrier each block scales the tile it kept in its accumulator."""
    blocks = (m // block) * (n // block)

    @T.prim_func
    def kernel(A: T.Tensor((m, k), T.float16), B: T.Tensor((k, n), T.float16),
               sums: T.Tensor((blocks,), T.float32), C: T.Tensor((m, n), T.float32)):
        with T.Kernel(n // block, m // block, threads=128) as (bx, by):
            a = T.alloc_shared((block, 32), T.float16)
            b = T.alloc_shared((32, block), T.float16)
            acc = T.alloc_fragment((block, block), T.float32)
            rows = T.alloc_fragment((block,), T.float32)
            total = T.alloc_fragment((1,), T.float32)
            grand = T.alloc_var(T.float32)
            T.clear(acc)
            for kk in T.Pipelined(k // 32, num_stages=3):
                T.copy(A[by * block, kk * 32], a)
                T.copy(B[kk * 32, bx * block], b)
                T.gemm(a, b, acc)
            T.reduce_sum(acc, rows, dim=1)
            T.reduce_sum(rows, total, dim=0)
            sums[by * (n // block) + bx] = total[0]
            T.sync_grid()
            grand = 0.0
            for i in T.serial(blocks):
                grand = grand + sums[i]
            for i, j in T.Parallel(block, block):
                C[by * block + i, bx * block + j] = acc[i, j] / grand
    return kernel


def test_a_pipelined_gemm_before_the_barrier():
    torch.manual_seed(4)
    a, b = torch.rand(128, 96).half(), torch.rand(96, 128).half()
    product = a.float() @ b.float()
    kernel = gemm_over_its_total(128, 128, 96)
    torch.testing.assert_close(kernel(a, b, torch.zeros(4)), product / product.sum(),
                               rtol=1e-3, atol=1e-6)


@needs_nvcc
def test_no_producer_warpgroup_where_every_thread_meets_the_grid():
    """A producer warpgroup runs only its copies and would never reach the barrier:
    a kernel with T.sync_grid keeps one role, even where a pass config asks for two."""
    for configs in (None, {"tl.force_warp_specialized": True}):
        kernel = gemm_over_its_total.compile(128, 128, 96, target="cuda:sm_90a",
                                             pass_configs=configs)
        assert kernel.launch["block"] == [128, 1, 1] and kernel.launch["cooperative"]


@tilelab.jit(out_idx=[-1])
def rows_over_their_total(rows=8, blocks=3):
    """Each block keeps rows of A in a fragment it reads through a T.reshape view in both
    phases: its sum before the barrier, its values scaled by the total after it."""
    n = blocks * rows * 16

    @T.prim_func
    def kernel(A: T.Tensor((n,), T.float32), sums: T.Tensor((blocks,), T.float32),
               out: T.Tensor((n,), T.float32)):
        with T.Kernel(blocks, threads=32) as b:
            tile = T.alloc_fragment((rows, 16), T.float32)
            flat = T.reshape(tile, (rows * 16,))
            per_row = T.alloc_fragment((rows,), T.float32)
            total = T.alloc_fragment((1,), T.float32)
            grand = T.alloc_var(T.float32)
            T.copy(A[b * rows * 16], flat)
            T.reduce_sum(tile, per_row, dim=1)
            T.reduce_sum(per_row, total, dim=0)
            sums[b] = total[0]
            T.sync_grid()
            grand = 0.0
            for k in T.serial(blocks):
                grand = grand + sums[k]
            for i in T.Parallel(rows * 16):
                out[b * rows * 16 + i] = flat[i] / grand
    return kernel


def test_a_view_read_on_both_sides_of_the_barrier():
    torch.manual_seed(5)
    a = torch.rand(3 * 8 * 16)
    torch.testing.assert_close(rows_over_their_total()(a, torch.zeros(3)), a / a.sum())


def test_a_tensor_made_from_an_address_and_a_view_on_both_sides():
    """T.make_tensor's address (bound from a T.alloc_var) and a tensor view are declared
    once, before the barrier, and used on both sides of it."""
    blocks = 4

    @T.prim_func
    def kernel(P: T.Tensor((2,), T.ptr), sums: T.Tensor((blocks,), T.float32),
               X: T.Tensor((blocks * 16,), T.float32)):
        with T.Kernel(blocks, threads=32) as b:
            which = T.alloc_var(T.int32)
            which = b % 2
            A = T.make_tensor(P[which], (blocks * 16,), T.float32)
            rows = T.Tensor((blocks, 16), T.float32, X.data)
            part = T.alloc_fragment((16,), T.float32)
            total = T.alloc_fragment((1,), T.float32)
            grand = T.alloc_var(T.float32)
            T.copy(A[b * 16], part)
            T.reduce_sum(part, total, dim=0)
            sums[b] = total[0]
            T.sync_grid()
            grand = 0.0
            for k in T.serial(blocks):
                grand = grand + sums[k]
            for i in T.Parallel(16):
                rows[b, i] = A[b * 16 + i] / grand

    torch.manual_seed(6)
    sources = [torch.rand(blocks * 16) for _ in range(2)]
    picked = torch.cat([sources[b % 2][b * 16:(b + 1) * 16] for b in range(blocks)])
    x = torch.zeros(blocks * 16)
    tilelab.compile(kernel, target="cpu")(
        torch.tensor([t.data_ptr() for t in sources]), torch.zeros(blocks), x)
    torch.testing.assert_close(x, picked / picked.sum())


def test_the_barrier_stands_in_the_kernels_own_statements():
    def program(where):
        @T.prim_func
        def kernel(A: T.Tensor((64,), T.float32)):
            with T.Kernel(2, threads=32) as b:
                if where == "loop":
                    for _ in T.serial(2):
                        T.sync_grid()
                elif where == "branch":
                    if b == 0:
                        T.sync_grid()
                else:
                    for i in T.Parallel(32):
                        A[i] = 0.0
                        T.sync_grid()

        return kernel

    for where in ("loop", "branch", "parallel"):
        with pytest.raises(TileLabError, match="T.sync_grid\\(\\) stands in the kernel's own") \
                as info:
            program(where)
        assert info.value.location is not None and info.value.location.line > 0


@needs_nvcc
def test_a_grid_barrier_kernel_is_launched_cooperatively(tmp_path):
    kernel = normalized.compile(1000, 4, target="cuda:sm_90a")
    source = kernel.get_kernel_source()
    assert source.startswith("#define TILELAB_SYNC_GRID\n") and "tl::sync_grid();" in source
    assert kernel.launch["cooperative"] is True
    kernel.export(tmp_path / "normalized.tilelab")
    loaded = load_artifact(tmp_path / "normalized.tilelab")
    assert loaded.cooperative and loaded.launcher().cooperative  # (loading needs no GPU)
    plain = dict(kernel.launch, cooperative=False)
    assert not launcher_for(b"cubin", plain, ["float32"] * 3).cooperative


@pytest.mark.gpu
def test_grid_barrier_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for n, blocks in ((1000, 4), (64 * 1000 + 7, sms)):
        kernel = normalized(n, blocks)
        for seed in range(3):
            torch.manual_seed(seed)
            a = torch.rand(n, device="cuda") + 0.1
            sums = torch.zeros(blocks, device="cuda")
            torch.testing.assert_close(kernel(a, sums), a / a.sum(), rtol=1e-5, atol=1e-7)
    too_many = normalized(64 * 64 * sms, 64 * sms)
    a = torch.rand(64 * 64 * sms, device="cuda")
    with pytest.raises(TileLabError, match="T.sync_grid needs every block"):
        too_many(a, torch.zeros(64 * sms, device="cuda"))
