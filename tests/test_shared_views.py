"""`T.view(tile, shape, dtype)` of a shared tile: its bytes as a tile of another type, the
scratch reuse of TileLang's sparse MLA backward (dsa_sparse_finetune), where a bfloat16 key
tile, done with for the iteration, holds float32 sums on their way to global memory. The
barriers treat the view as the tile (passes/insert_barriers.py), a pipelined loop keeps such
a tile in one slot; the CPU and the GPU agree with torch.

And the warning for an output read before anything writes it: that example adds into an
output it never zeroes (`T.empty` is uninitialized memory, as `torch.empty`)."""

import warnings

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError, TileLabWarning

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")


@tilelab.jit
def banded_sums(n=64, d=32, blocks=3, steps=2, stages=0):
    """Y[rows of block b] += 2 * X[rows of block b] summed over `steps` reads; the float32
    sums leave in two bands through a view of the bfloat16 tile the loop reads."""
    @T.prim_func
    def kernel(X: T.Tensor((blocks * n, d), T.bfloat16), Y: T.Tensor((blocks * n, d), T.float32)):
        with T.Kernel(blocks, threads=128) as bx:
            tile = T.alloc_shared((n, d), T.bfloat16)
            sums = T.view(tile, (n // 2, d), T.float32)
            acc = T.alloc_fragment((n, d), T.float32)
            T.clear(acc)
            for _ in T.Pipelined(steps, num_stages=stages):
                T.copy(X[bx * n, 0], tile)
                for i, j in T.Parallel(n, d):
                    acc[i, j] += T.cast(tile[i, j], T.float32)
            for band in range(2):
                for i, j in T.Parallel(n, d):
                    if i < n // 2:
                        sums[i, j] = acc[i + band * (n // 2), j]
                for i, j in T.Parallel(n // 2, d):
                    T.atomic_add(Y[bx * n + band * (n // 2) + i, j], sums[i, j])
    return kernel


def _expected(x, steps=2):
    return steps * x.float()


def test_the_cpu_sees_the_bytes_as_floats():
    for stages in (0, 2):
        torch.manual_seed(stages)
        x = torch.randn(192, 32, dtype=torch.bfloat16)
        y = torch.zeros(192, 32)
        banded_sums(stages=stages)(x, y)
        torch.testing.assert_close(y, _expected(x))


def test_a_view_larger_than_its_tile_is_an_error_at_its_line():
    with pytest.raises(TileLabError, match=r"needs 8192 bytes; tile has 4096") as info:
        @T.prim_func
        def too_big(X: T.Tensor((64,), T.float32)):
            with T.Kernel(1, threads=32):
                tile = T.alloc_shared((64, 32), T.bfloat16)
                T.view(tile, (64, 32), T.float32)
                X[0] = 0.0
    assert info.value.location is not None
    with pytest.raises(TileLabError, match="views of kernel tensors and fragments keep"):
        @T.prim_func
        def of_a_fragment(X: T.Tensor((64,), T.float32)):
            with T.Kernel(1, threads=32):
                frag = T.alloc_fragment((64,), T.float32)
                T.view(frag, (32,), T.float64)
                X[0] = 0.0


@needs_nvcc
def test_the_barriers_see_the_view_as_its_tile():
    """Reading the tile (the loop) and writing its view (the bands): a barrier between."""
    source = banded_sums.compile(target="cuda:sm_90a").get_kernel_source()
    body = source[source.index('extern "C" __global__'):]
    loop_end = body.index("for (int band")
    assert "__syncthreads()" in body[loop_end - 200:loop_end + 400]
    banded_sums.compile(target="cuda:sm_90a", stages=2)  # the viewed tile keeps one slot


def test_an_output_read_before_it_is_written_warns():
    @tilelab.jit(out_idx=[-1])
    def adds_into_empty(n=64):
        @T.prim_func
        def kernel(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), T.float32)):
            with T.Kernel(2, threads=64) as bx:
                for i in T.Parallel(n):
                    T.atomic_add(Y[i], X[i] * bx)
        return kernel

    @tilelab.jit(out_idx=[-1])
    def writes_first(n=64):
        @T.prim_func
        def kernel(X: T.Tensor((n,), T.float32), Y: T.Tensor((n,), T.float32)):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(n):
                    Y[i] = X[i]
                for i in T.Parallel(n):
                    T.atomic_add(Y[i], X[i])
        return kernel

    with pytest.warns(TileLabWarning, match="output 'Y' is read before anything writes it"):
        adds_into_empty.compile(target="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", TileLabWarning)
        x = torch.randn(64)
        torch.testing.assert_close(writes_first.compile(target="cpu")(x), 2 * x)


@pytest.mark.gpu
def test_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for stages in (0, 2):
        torch.manual_seed(stages)
        x = torch.randn(192, 32, dtype=torch.bfloat16, device="cuda")
        y = torch.zeros(192, 32, device="cuda")
        banded_sums.compile(target="cuda", stages=stages)(x, y)
        torch.testing.assert_close(y, _expected(x))


def test_a_view_read_before_it_is_written_warns():
    @T.prim_func
    def reinterprets(X: T.Tensor((64, 16), T.bfloat16), Y: T.Tensor((32, 16), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((64, 16), T.bfloat16)
            bits = T.view(tile, (32, 16), T.float32)
            T.copy(X, tile)
            T.copy(bits, Y)

    with pytest.warns(TileLabWarning, match="'bits', a view of a shared tile in another type, "
                                            "is read before anything writes it"):
        tilelab.compile(reinterprets, target="cpu")


@tilelab.jit(out_idx=[-1])
def carried_state(initialized=True, n=4, m=64):
    """As TileLang's gated delta rule forward: a state tile written at the end of each
    iteration and read at the start of the next - written before the loop only when there
    is an initial state."""
    @T.prim_func
    def kernel(X: T.Tensor((n, m), T.float32), H0: T.Tensor((m,), T.float32),
               Y: T.Tensor((n, m), T.float32)):
        with T.Kernel(1, threads=64):
            state = T.alloc_shared((m,), T.float32)
            acc = T.alloc_fragment((m,), T.float32)
            if initialized:
                T.copy(H0, state)
            for k in T.serial(n):
                T.copy(state, Y[k, :])
                for i in T.Parallel(m):
                    acc[i] = state[i] * 0.5 + X[k, i]
                T.copy(acc, state)
    return kernel


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90a"])
def test_a_shared_tile_read_before_it_is_written_warns(target):
    with pytest.warns(TileLabWarning, match="shared tile 'state' is read before anything "
                                            "writes it"):
        carried_state.compile(initialized=False, target=target)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TileLabWarning)
        carried_state.compile(initialized=True, target=target)


def test_shared_tiles_another_role_writes_do_not_warn():
    """Roles that wait at mbarriers run in the barriers' order, not the text's: a consumer
    written before its producer reads the tiles the producer writes."""
    from tests.test_warp_roles import ws_gemm

    with warnings.catch_warnings():
        warnings.simplefilter("error", TileLabWarning)
        tilelab.compile(ws_gemm(128, 128, 192, consumer_first=True), target="cpu")
