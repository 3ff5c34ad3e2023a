"""TileLang programs as TileLang users write them.

Each test is a small kernel of the project's own written in TileLang's spellings,
run on the CPU against torch on fresh random inputs (sizes with tails).
"""

from __future__ import annotations

import importlib
import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.errors import TileLabError, TileLabWarning

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- truth values (issue 15 item 3)


def _masked(x, flag):
    """A plain-Python helper (no @T.macro): `flag == 1` must stay a kernel comparison."""
    return T.if_then_else(flag == 1, x, -x)


@pytest.mark.parametrize("N", [8, 37])
def test_plain_helper_comparison_reaches_if_then_else_as_ir(N):
    @T.prim_func
    def alternate(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 16), threads=16) as bx:
            for i in T.Parallel(16):
                if bx * 16 + i < N:
                    flag = T.if_then_else((bx * 16 + i) % 2 == 0, 1, 0)
                    B[bx * 16 + i] = _masked(A[bx * 16 + i], flag)

    a = _rand(N, seed=N)
    expected = torch.where(torch.arange(N) % 2 == 0, a, -a)
    torch.testing.assert_close(tilelab.compile(alternate, out_idx=[1])(a), expected)


def _is_one(flag):
    return flag == 1


def test_plain_helper_result_drives_a_kernel_if():
    N = 21

    @T.prim_func
    def keep_odd(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                B[i] = 0.0
                if _is_one(i % 2):
                    B[i] = A[i]

    a = _rand(N, seed=3)
    expected = torch.where(torch.arange(N) % 2 == 1, a, torch.zeros(()))
    torch.testing.assert_close(tilelab.compile(keep_odd, out_idx=[1])(a), expected)


def _branchy(x, flag):
    if flag == 1:  # a Python `if` on a kernel value: no compile-time answer
        return x
    return -x


def _both(x, i):
    return x if (x > 0 and i < 1) else -x


@pytest.mark.parametrize("helper, line_text", [(_branchy, "if flag == 1:"),
                                               (_both, "x > 0 and i < 1")])
def test_python_truth_of_a_kernel_value_is_an_error_at_the_helpers_line(helper, line_text):
    def program():
        @T.prim_func
        def k(A: T.Tensor((8,), T.float32), B: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=8):
                for i in T.Parallel(8):
                    B[i] = helper(A[i], i % 2)

        return k

    with pytest.raises(TileLabError) as info:
        program()
    err = info.value
    assert err.location is not None and err.location.filename == __file__
    assert line_text in err.location.excerpt()
    assert "T.if_then_else" in str(err)


def test_compile_time_comparisons_still_decide_python_ifs():
    def scale(x, n):
        if n % 4 == 0 and n > 2:  # Python ints: an ordinary compile-time `if`
            return x * 2.0
        return x

    N = 12

    @T.prim_func
    def k(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=16):
            for i in T.Parallel(N):
                B[i] = scale(A[i], N)

    a = _rand(N, seed=5)
    torch.testing.assert_close(tilelab.compile(k, out_idx=[1])(a), a * 2)


def test_a_builtin_asking_a_kernel_value_for_true_or_false_is_an_error_at_its_line():
    """`sorted` compares kernel values: the error names the kernel's line that called it
    (it named the decorator's: the first frame outside tilelab above the interpreter)."""
    def program():
        @T.prim_func
        def k(A: T.Tensor((8,), T.float32), B: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=8):
                for i in T.Parallel(8):
                    B[i] = sorted([A[i], 0.5])[0]

        return k

    with pytest.raises(TileLabError, match="no True/False") as info:
        program()
    assert "sorted([A[i], 0.5])" in info.value.location.excerpt()


def test_python_abs_min_max_of_kernel_values_in_the_kernel():
    """Written in the kernel's own code, Python's abs/min/max of kernel values are T.abs,
    T.min and T.max (they asked a kernel comparison for True/False, an error placed at
    the decorator's line)."""
    N = 40

    @T.prim_func
    def k(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                B[i] = abs(A[i]) + max(A[i], 0.5) + min(A[i], -0.5, A[(i + 1) % N]) + \
                    max(i, 7)

    a = _rand(N, seed=11)
    expected = a.abs() + a.clamp(min=0.5) + torch.minimum(a.clamp(max=-0.5), a.roll(-1)) + \
        torch.arange(N).clamp(min=7)
    torch.testing.assert_close(tilelab.compile(k, out_idx=[1])(a), expected)


# ---------------------------------------------------------------- TileLang's names (item 1)

tilelang = pytest.importorskip("tilelab.compat.tilelang")
tilelang.install()
TL = __import__("tilelang.language").language  # `import tilelang.language as T`, installed


def test_install_makes_tilelang_imports_find_tilelab():
    import tilelang.language as tl_language
    from tilelang.autotuner import autotune
    from tilelang.math import next_power_of_2

    assert tl_language is T and TL is T and callable(autotune)
    assert [next_power_of_2(x) for x in (1, 2, 3, 64, 65)] == [1, 2, 4, 64, 128]
    assert tilelang.cdiv(65, 64) == 2
    with pytest.raises(ImportError, match="tilelab does not provide"):
        importlib.import_module("tilelang.cuda.intrinsics.macro")


def test_tilelang_env_names_the_cache_folder(tmp_path, monkeypatch):
    """TileLang's minference example keeps its torch extension under TILELANG_CACHE_DIR: the
    folder tilelab's cache is in when the example asks, not when tilelang was imported."""
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path))
    assert tilelang.env.TILELANG_CACHE_DIR == str(tmp_path)
    with pytest.raises(AttributeError, match="TILELANG_CACHE_DIR only"):
        tilelang.env.TILELANG_HOME  # noqa: B018


def test_the_roller_is_importable_and_refused_where_used():
    """TileLang's autotuning examples import the roller's names at the top and use them
    only with `with_roller=True`."""
    from tilelang.carver.roller.rasterization import NoRasterization
    from tilelang.carver.template import MatmulTemplate

    assert isinstance(NoRasterization, type)
    with pytest.raises(AttributeError, match="MatmulTemplate recommends tile configurations"):
        MatmulTemplate(M=256, N=256, K=256, in_dtype=T.float16, out_dtype=T.float16,
                       accum_dtype=T.float32)


def test_get_kernel_source_on_the_decorated_function_and_datatype():
    """TileLang's examples print `kernel_fn.get_kernel_source(sizes...)` and size tiles with
    `DataType(dtype).bits`."""

    @tilelang.jit
    def copy_kernel(A, block=32):
        N = T.const("N")
        A: T.Tensor((N,), T.float32)
        B = T.empty((N,), T.float32)
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    B[bx * block + i] = A[bx * block + i]
        return B

    source = copy_kernel.get_kernel_source(N=100)
    assert "copy_kernel" in source and source == copy_kernel.compile(N=100).get_kernel_source()
    assert tilelang.DataType("float16").bits == 16 and tilelang.DataType("int8").bits == 8


def test_four_bit_types_are_names_int4_tensors_come_packed_float4_ones_are_refused():
    """TileLang's dequantization helpers key tables by T.int4 (lop3.py's
    `{T.float16: "f16", T.int4: "i4", ...}`): the names exist. An int4 tensor is passed in
    packed, two values to a byte (tests/test_packed_int4.py), and its size named by T.const
    counts values, not bytes; a float4 tensor is refused at its line."""
    assert {T.float16: "f16", T.int4: "i4"}[T.int4] == "i4" and T.int4.bits == 4
    assert T.uint4 in [T.int8, T.uint4] and T.float4_e2m1fn == "float4_e2m1fn"

    @tilelab.jit
    def widen(X, dtype=T.int4):
        N = T.const("N")
        X: T.Tensor((N,), dtype)
        Y = T.empty((N,), T.float32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                Y[i] = X[i]
        return Y

    values = torch.tensor([-8, 7, 3, -1, 0, 5, -4, 2], dtype=torch.int16)
    packed = ((values[0::2] & 15) | ((values[1::2] & 15) << 4)).to(torch.int8)
    assert torch.equal(widen(packed), values.float())
    with pytest.raises(TileLabError, match="no float4_e2m1fn tensors or tiles") as info:
        widen(torch.zeros(8, dtype=torch.int8), dtype=T.float4_e2m1fn)
    assert "test_tilelang_compat.py" in str(info.value) and "uint8" in str(info.value)


def test_torch_assert_close_allows_what_tilelangs_does():
    """TileLang's `torch_assert_close`: rtol 1e-2, atol 1e-3, and 0.1% of the elements may
    differ (its cast examples' float8 ties need that allowance)."""
    from tilelang.utils.tensor import torch_assert_close

    expected = torch.ones(2000)
    torch_assert_close(expected + 0.005, expected)  # inside rtol
    torch_assert_close(torch.cat([expected[:2] + 1, expected[2:]]), expected)  # 2 of 2000
    with pytest.raises(AssertionError, match="3 of 2000 elements differ"):
        torch_assert_close(torch.cat([expected[:3] + 1, expected[3:]]), expected)
    with pytest.raises(AssertionError):
        torch_assert_close(expected + 0.02, expected)


def test_determine_fp8_type_names_nvidias_formats():
    from tilelang.language.fp8 import determine_fp8_type

    assert determine_fp8_type() == T.float8_e4m3fn
    assert determine_fp8_type("e5m2") == T.float8_e5m2
    with pytest.raises(ValueError):
        determine_fp8_type("e3m4")


def test_determine_torch_fp8_type_gives_torchs_dtype():
    from tilelang.language.fp8 import determine_torch_fp8_type

    assert determine_torch_fp8_type() is torch.float8_e4m3fn
    assert determine_torch_fp8_type("e5m2") is torch.float8_e5m2
    with pytest.raises(ValueError):
        determine_torch_fp8_type("e3m4")


def test_simplify_prim_func_keeps_the_program():
    """`@simplify_prim_func` on a factory's PrimFunc (TileLang's bitnet kernels): the
    program compiles and runs as without it."""
    from tilelang.transform import simplify_prim_func

    @simplify_prim_func
    @T.prim_func
    def double(A: T.Tensor((64,), T.float32), B: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[i] * 2

    a = _rand(64, seed=3)
    torch.testing.assert_close(tilelang.compile(double, out_idx=[1], target="cpu")(a), a * 2)


def test_tilelang_pass_config_names_compile_with_a_warning():
    """TileLang's examples pass `tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED` and the
    like: the names exist, tilelab's own keys keep their effect, the others warn once."""
    import warnings

    key = tilelang.PassConfigKey
    assert key.TL_DISABLE_WARP_SPECIALIZED.value == "tl.disable_warp_specialized"
    assert key.TL_DISABLE_TMA_LOWER.value == "tl.disable_tma_lower"
    assert key.TL_ENABLE_FAST_MATH.value == tilelab.PassConfigKey.TL_ENABLE_FAST_MATH.value

    @tilelang.jit(out_idx=[-1], pass_configs={key.TL_DISABLE_WARP_SPECIALIZED: True,
                                              key.TL_DISABLE_TMA_LOWER: True})
    def double(N, block=64):
        @T.prim_func
        def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N:
                        B[bx * block + i] = A[bx * block + i] * 2
        return main

    a = _rand(100)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        torch.testing.assert_close(double(100)(a), a * 2)


@pytest.mark.parametrize("spelling, expected", [
    (T.float, "float32"), (T.half, "float16"), (T.double, "float64"), (T.int, "int32"),
    (T.uint, "uint32"), (T.long, "int64"), ("float", "float32"), (torch.bfloat16, "bfloat16"),
    (torch.uint16, "uint16"), (float, "float32"), (int, "int32"), (T.tfloat32, "float32"),
    ("tfloat32", "float32"), (T.float8_e4m3, "float8_e4m3fn")])
def test_dtype_spellings(spelling, expected):
    """TileLang's tf32 is float32 storage; tilelab computes with all of float32's bits."""
    assert T.dtype(spelling) == expected


def dtype_program(M, N, block, dtype, index_dtype):
    @tilelang.jit(out_idx=[2])
    def factory(M, N):
        @T.prim_func
        def gather_rows(X: T.Tensor((M, N), dtype), Idx: T.Tensor((M,), index_dtype),
                        Y: T.Tensor((M, N), dtype)):
            with T.Kernel(tilelang.cdiv(M, block), threads=32) as bx:
                for i, j in T.Parallel(block, N):
                    r = bx * block + i
                    if r < M:
                        src = T.floormod(T.cast(Idx[r], T.int32), M)
                        Y[r, j] = T.clamp(X[src, j] * 2, -1.5, 1.5)

        return gather_rows

    return factory(M, N)


@pytest.mark.parametrize("dtype, index_dtype", [("float", T.uint32), (T.half, "uint16"),
                                                (torch.float32, T.uint64)])
def test_dtype_aliases_and_unsigned_indices_run_on_cpu(dtype, index_dtype):
    M, N = 37, 20
    kernel = dtype_program(M, N, 16, dtype, index_dtype)
    torch_dtype = getattr(torch, str(T.dtype(dtype)))
    x = _rand(M, N, seed=1).to(torch_dtype)
    idx = torch.randint(0, 1000, (M,), dtype=torch.int64).to(getattr(torch, str(index_dtype)))
    expected = (x.float()[idx.to(torch.int64) % M] * 2).clamp(-1.5, 1.5)
    torch.testing.assert_close(kernel(x, idx).float(), expected, rtol=1e-3, atol=1e-3)


@tilelang.jit
def strided_window_sum(x, w, block, S, dtype=T.float):
    """An eager kernel whose output size is arithmetic on T.const sizes, written before
    the tensor that gives them is declared."""
    B, W, K = T.const("B, W, K")
    OW = (W - K) // S + 1
    x: T.Tensor((B, W), dtype)
    w: T.Tensor((K,), dtype)
    y = T.empty((B, OW), dtype)
    with T.Kernel(T.ceildiv(OW, block), B, threads=32) as (bx, b):
        acc = T.alloc_fragment((block,), T.float32)
        T.clear(acc)
        for k in T.Serial(K):
            for i in T.Parallel(block):
                o = bx * block + i
                if o < OW:
                    acc[i] += x[b, o * S + k] * w[k]
        for i in T.Parallel(block):
            if bx * block + i < OW:
                y[b, bx * block + i] = acc[i]
    return y


@pytest.mark.parametrize("B, W, K, S", [(3, 50, 5, 2), (2, 33, 3, 1)])
def test_const_arithmetic_before_the_tensor_declarations(B, W, K, S):
    x, w = _rand(B, W, seed=W), _rand(K, seed=K)
    expected = torch.nn.functional.conv1d(x[:, None], w[None, None], stride=S)[:, 0]
    torch.testing.assert_close(strided_window_sum(x, w, 16, S), expected, rtol=1e-5, atol=1e-5)


def _transpose_through_shared(layout: str):
    from tilelang.cuda.intrinsics import make_mma_swizzle_layout

    M, N = 64, 64

    @T.prim_func
    def transpose_through_shared(A: T.Tensor((M, N), T.float16), B: T.Tensor((N, M), T.float16)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared((M, N), T.float16)
            if layout == "list":
                T.annotate_layout({tile: T.Layout((M, N), lambda i, j: [i // 8, j, i % 8])})
            elif layout == "mma":  # TileLang's tilelang.cuda.intrinsics spelling
                T.annotate_layout({tile: make_mma_swizzle_layout(tile)})
            else:
                T.annotate_layout({tile: tilelang.layout.make_swizzled_layout(tile)})
            T.copy(A, tile)
            for j, i in T.Parallel(N, M):
                B[j, i] = tile[i, j]

    return transpose_through_shared


@pytest.mark.parametrize("layout", ["list", "swizzled", "mma"])
def test_layout_returning_coordinates_and_swizzled_layout(layout):
    transpose_through_shared = _transpose_through_shared(layout)
    a = _rand(64, 64, seed=7).half()
    kernel = tilelang.compile(transpose_through_shared, out_idx=[1], target="cpu")
    torch.testing.assert_close(kernel(a), a.t())
    if layout == "list":  # CUDA applies row swizzles only; this one is left out
        with pytest.warns(TileLabWarning, match="the layout annotated for 'tile' is not "
                          "applied on the GPU"):
            cuda = tilelang.compile(transpose_through_shared, out_idx=[1], target="cuda:sm_90a")
    else:
        cuda = tilelang.compile(transpose_through_shared, out_idx=[1], target="cuda:sm_90a")
    assert "__global__" in cuda.get_kernel_source()


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["list", "swizzled", "mma"])
def test_annotated_shared_layouts_on_the_gpu(layout):
    a = torch.randn(64, 64, device="cuda").half()
    kernel = tilelang.compile(_transpose_through_shared(layout), out_idx=[1],
                              target="cuda")
    torch.testing.assert_close(kernel(a), a.t())


def test_list_layout_is_a_bijection_onto_its_coordinates():
    layout = T.Layout((4, 16, 8), lambda b, s, d: [b, s // 8, d // 8, d % 2,
                                                   4 * (s % 8) + (d % 8) // 2])
    offsets = layout.table().ravel()
    assert sorted(offsets.tolist()) == list(range(4 * 16 * 8))


def test_integer_helpers_match_python():
    for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2)]:
        assert T.floordiv(a, b) == a // b and T.floormod(a, b) == a % b
        assert T.truncdiv(a, b) == int(a / b) and T.truncmod(a, b) == a - b * int(a / b)


def _uses(name):
    N = 8

    @T.prim_func
    def k(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            tx = getattr(T, name)()  # noqa: F841
            B[0] = A[0]

    return k


@pytest.mark.parametrize("name, says", [
    ("any_sync", "T.shfl_xor"), ("alloc_tmem", "T.Pipelined"),
    ("sync_warp", "inserts the barriers"), ("mbarrier_expect_tx", "T.copy"),
    ("no_such_primitive", "tilelab has no")])
def test_tilelang_features_tilelab_lacks_are_named_at_the_users_line(name, says):
    with pytest.raises(TileLabError) as info:
        _uses(name)
    message = str(info.value)
    assert says in message and "has no attribute" not in message
    assert "getattr(T, name)" in info.value.location.excerpt()
    assert not hasattr(T, name)


def split_then_combine(N, splits=3):
    """TileLang's split-KV shape: kernel 1 leaves partial sums in a global scratch
    tensor, kernel 2 combines them."""

    @T.prim_func
    def total(A: T.Tensor((N,), T.float32), S: T.Tensor((N,), T.float32)):
        partial = T.alloc_global((splits, N), T.float32)
        with T.Kernel(T.ceildiv(N, 64), splits, threads=64) as (bx, part):
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    partial[part, bx * 64 + i] = A[bx * 64 + i] * (part + 1)
        with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < N:
                    S[bx * 64 + i] = 0.0
                    for p in T.serial(splits):
                        S[bx * 64 + i] += partial[p, bx * 64 + i]

    return total


def test_alloc_global_is_scratch_between_the_kernels_of_a_program():
    a = _rand(1000, seed=5)
    s = torch.zeros(1000)
    tilelab.compile(split_then_combine(1000), target="cpu")(a, s)
    torch.testing.assert_close(s, a * 6)  # 1 + 2 + 3
    s.zero_()
    tilelab.compile(split_then_combine(1000), target="cpu")(a, s)  # allocated per call
    torch.testing.assert_close(s, a * 6)


def test_alloc_global_inside_a_kernel_is_a_clear_error():
    N = 64
    with pytest.raises(TileLabError, match="before `with T.Kernel") as info:
        @T.prim_func
        def inside(A: T.Tensor((N,), T.float32)):
            with T.Kernel(1, threads=32):
                scratch = T.alloc_global((N,), T.float32)  # noqa: F841
    assert "T.alloc_global((N,), T.float32)" in info.value.location.excerpt()


def twice_then_plus_one(N):
    """Two kernels in order: the second reads what the first wrote into an output."""

    @T.prim_func
    def chain(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32),
              C: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < N:
                    B[bx * 128 + i] = A[bx * 128 + i] * 2.0
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    C[bx * 32 + i] = B[bx * 32 + i] + 1.0

    return chain


@needs_nvcc
def test_programs_of_several_kernels_and_scratch_compile_for_cuda(tmp_path):
    """Each `with T.Kernel` is a kernel of the cubin, launched in program order with its own
    grid and threads; T.alloc_global tensors are allocated by the launcher for each call
    (launch.json: the first kernel, `next_kernels`, `scratch`), in exported files too."""
    from tilelab.runtime.artifact import load_artifact
    from tilelab.runtime.cuda import KernelSequence

    kernel = tilelab.compile(split_then_combine(1000), target="cuda:sm_90a")
    launch = kernel.launch
    assert launch["grid"] == [16, 3, 1] and launch["arg_order"] == [0, 2]  # A, then partial
    [second] = launch["next_kernels"]
    assert second["grid"] == [16, 1, 1] and second["arg_order"] == [1, 2]  # S, partial
    assert launch["scratch"] == [{"name": "partial", "shape": [3, 1000], "dtype": "float32"}]
    assert isinstance(kernel._runner, KernelSequence)
    chain = tilelab.compile(twice_then_plus_one(1000), target="cuda:sm_90a")
    assert [chain.launch["block"], chain.launch["next_kernels"][0]["block"]] == \
        [[128, 1, 1], [32, 1, 1]]
    assert "scratch" not in chain.launch
    path = tmp_path / "split.tilelab"
    kernel.export(path)
    artifact = load_artifact(path)
    assert artifact.next_kernels == launch["next_kernels"]
    assert artifact.scratch == launch["scratch"]
    assert isinstance(artifact.launcher(), KernelSequence)


@pytest.mark.gpu
def test_programs_of_several_kernels_and_scratch_on_the_gpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    for seed in range(2):
        a = _rand(1000, seed=seed).cuda()
        s = torch.zeros(1000, device="cuda")
        kernel = tilelab.compile(split_then_combine(1000), target="cuda")
        kernel(a, s)
        torch.testing.assert_close(s, a * 6)
        b, c = torch.zeros_like(a), torch.zeros_like(a)
        tilelab.compile(twice_then_plus_one(1000), target="cuda")(a, b, c)
        torch.testing.assert_close(c, a * 2 + 1)
    kernel.export(tmp_path / "split.tilelab")
    s.zero_()
    tilelab.load(tmp_path / "split.tilelab")(a, s)
    torch.testing.assert_close(s, a * 6)


def test_atomic_add_memory_order():
    N = 40

    @T.prim_func
    def total(A: T.Tensor((N,), T.float32), S: T.Tensor((1,), T.float32)):
        with T.Kernel(T.ceildiv(N, 8), threads=32) as bx:
            for i in T.Parallel(8):
                if bx * 8 + i < N:
                    T.atomic_add(S[0], A[bx * 8 + i], memory_order="relaxed")

    a = _rand(N, seed=11)
    s = torch.zeros(1)
    tilelang.compile(total)(a, s)
    torch.testing.assert_close(s, a.sum(0, keepdim=True), rtol=1e-5, atol=1e-5)

    def seq_cst():
        @T.prim_func
        def k(A: T.Tensor((N,), T.float32), S: T.Tensor((1,), T.float32)):
            with T.Kernel(1, threads=32):
                T.atomic_add(S[0], A[0], memory_order="seq_cst")

        return k

    with pytest.raises(TileLabError, match="memory_order='seq_cst'"):
        seq_cst()


def test_atomic_add_of_a_tile_takes_the_tma_hint():
    """TileLang's `T.atomic_add(dst, tile, use_tma=True)` (a bulk reduction into global
    memory on Hopper): the same sums here, every thread adding its elements."""
    N, B = 40, 8

    @T.prim_func
    def fold(A: T.Tensor((N, B), T.float32), S: T.Tensor((B,), T.float32)):
        with T.Kernel(N, threads=32) as bx:
            row = T.alloc_shared((B,), T.float32)
            T.copy(A[bx, 0], row)
            T.atomic_add(S[0:B], row, use_tma=True)

    a = _rand(N, B, seed=12)
    s = torch.zeros(B)
    tilelang.compile(fold)(a, s)
    torch.testing.assert_close(s, a.sum(0), rtol=1e-5, atol=1e-5)
    with pytest.raises(TileLabError, match="use_tma"):
        @T.prim_func
        def bad(A: T.Tensor((N, B), T.float32), S: T.Tensor((B,), T.float32)):
            with T.Kernel(1, threads=32):
                T.atomic_add(S[0:B], A[0, 0:B], use_tma="yes")


@tilelang.jit(out_idx=[1])
def scale_rows(cols, block=16):
    rows = T.dynamic("rows")

    @T.prim_func
    def scale(X: T.Tensor((rows, cols), T.float32), Y: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(T.ceildiv(rows, block), threads=32) as bx:
            for i, j in T.Parallel(block, cols):
                if bx * block + i < rows:
                    Y[bx * block + i, j] = X[bx * block + i, j] * (bx * block + i)

    return scale


def test_dynamic_sizes_compile_for_each_call_shape():
    kernel = scale_rows(12)
    for rows in (5, 40, 17):
        x = _rand(rows, 12, seed=rows)
        torch.testing.assert_close(kernel(x), x * torch.arange(rows)[:, None].float())
    cuda = tilelang.compile(scale_rows.fn(12), out_idx=[1], target="cuda:sm_90a")
    assert "__global__" in cuda.specialize(_rand(33, 12)).get_kernel_source()
    with pytest.raises(TileLabError, match="must have shape"):
        kernel(_rand(5, 13))


def test_two_kernels_run_on_the_cpu_and_compile_for_cuda():
    N = 50
    a = _rand(N, seed=2)
    b, c = tilelang.compile(twice_then_plus_one(N), out_idx=[1, 2])(a)
    torch.testing.assert_close(b, a * 2)
    torch.testing.assert_close(c, a * 2 + 1)
    if find_nvcc() is not None:  # the kernels run in turn (tests: ..._several_kernels_...)
        kernel = tilelang.compile(twice_then_plus_one(N), out_idx=[1, 2], target="cuda:sm_90a")
        assert len(kernel.launch["next_kernels"]) == 1


def persistent_gemm(M, N, K, block_M=32, block_N=32, block_K=32, waves_of=3, group_size=8):
    """TileLang's persistent GEMM: `waves_of` blocks walk all the output tiles, numbered in
    groups of `group_size` columns."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), T.float16), B: T.Tensor((K, N), T.float16),
             C: T.Tensor((M, N), T.float32)):
        with T.Kernel(waves_of, threads=128) as block_id:
            A_shared = T.alloc_shared((block_M, block_K), T.float16)
            B_shared = T.alloc_shared((block_K, block_N), T.float16)
            C_local = T.alloc_fragment((block_M, block_N), T.float32)
            for bx, by in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)],
                                       waves_of, block_id, group_size):
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                    T.copy(A[bx * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, by * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C[bx * block_M, by * block_N])

    return gemm


@pytest.mark.parametrize("M, N, K, waves_of, group_size",
                         [(96, 64, 64, 3, 8), (70, 90, 40, 4, 8), (32, 32, 32, 5, 8),
                          (96, 160, 32, 4, 2), (96, 160, 32, 2, 3), (64, 160, 32, 3, 1)])
def test_persistent_blocks_cover_every_tile_once(M, N, K, waves_of, group_size):
    """Tiles (3x2, 3x3, 1x1, 3x5, 2x5) that the wave size does not divide, tails in every
    dimension, more blocks than tiles, groups of columns that do and do not divide the
    columns (the last group sticks out): the result is that of one block per tile."""
    kernel = tilelab.compile(persistent_gemm(M, N, K, waves_of=waves_of,
                                             group_size=group_size), target="cpu")
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_persistent_compiles_for_cuda_and_the_driver_gives_a_wave_size():
    from tilelang.carver.arch import driver

    assert isinstance(driver.get_num_sms(), int) and driver.get_num_sms() >= 1
    kernel = tilelab.compile(persistent_gemm(96, 64, 64, waves_of=driver.get_num_sms()),
                             target="cuda:sm_90a")
    assert "for (int bx_wave = 0; bx_wave <" in kernel.get_kernel_source()
    # wgmma tiles: the pipeline's cp.async refill sits in a branch inside the wave's guard;
    # both are block-uniform, so barriers may go inside
    big = persistent_gemm(256, 384, 512, block_M=128, block_N=128, block_K=32, waves_of=132)
    assert "wgmma" in tilelab.compile(big, target="cuda:sm_90a").get_kernel_source()


def test_persistent_names_as_many_indices_as_its_domain():
    with pytest.raises(TileLabError, match="1 dimension") as info:
        @T.prim_func
        def wrong(A: T.Tensor((64,), T.float32)):
            with T.Kernel(2, threads=32) as block_id:
                for bx, _by in T.Persistent([4], 2, block_id):
                    A[bx] = 1.0
    assert "T.Persistent([4], 2, block_id)" in info.value.location.excerpt()


def test_from_tilelang_import_tvm():
    import tvm
    from tilelang import tvm as tl_tvm

    assert tl_tvm is tvm and tl_tvm.tirx.const(3, "int32").value == 3


def test_tvm_testing_requires_package():
    """TileLang's TVM marks a test that needs a package (`@tvm.testing.requires_package`,
    also `tilelang.testing`'s); apache-tvm 0.27 has no such mark: the test runs where the package is installed, and
    calling it elsewhere names the missing package."""
    import tilelang.testing
    from tilelang import tvm

    def test():
        return "ran"

    for requires_package in (tvm.testing.requires_package,
                             tilelang.testing.requires_package):
        assert requires_package("torch")(test)() == "ran"
        with pytest.raises(ModuleNotFoundError, match="no_such_package_here"):
            requires_package("torch", "no_such_package_here")(test)()


@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K", [(1000, 1000, 1000), (256, 384, 512)])
def test_persistent_gemm_on_the_gpu(M, N, K):
    from tilelang.carver.arch import driver

    gemm = persistent_gemm(M, N, K, block_M=128, block_N=128, block_K=32,
                           waves_of=driver.get_num_sms())
    kernel = tilelab.compile(gemm, target="cuda")
    a, b = torch.randn(M, K, device="cuda").half(), torch.randn(K, N, device="cuda").half()
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)


@tilelang.jit(out_idx=[3])
def ragged_row_scale(batch, width, block=8):
    """TileLang's varlen form: sequences packed in one tensor, their starts in cu_seqlens,
    the longest length a scalar parameter that sizes the grid."""

    @T.prim_func
    def scale(X: T.Tensor((batch * 40, width), T.float32),
              cu_seqlens: T.Tensor((batch + 1,), T.int32), max_seqlen: T.int32,
              Y: T.Tensor((batch * 40, width), T.float32), factor: T.float32):
        with T.Kernel(T.ceildiv(max_seqlen, block), batch, threads=32) as (bx, bz):
            start = cu_seqlens[bz]
            length = cu_seqlens[bz + 1] - start
            for i, j in T.Parallel(block, width):
                if bx * block + i < length:
                    Y[start + bx * block + i, j] = X[start + bx * block + i, j] * factor

    return scale


def test_scalar_parameters_are_constants_of_each_call():
    kernel = ragged_row_scale(3, 16)
    x = _rand(120, 16)
    for lengths, factor in (([5, 17, 9], 2.0), ([30, 1, 12], -0.5), ([5, 17, 9], 3.0)):
        cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)
        y = kernel(x, cu, max(lengths), factor)
        total = int(cu[-1])
        torch.testing.assert_close(y[:total], x[:total] * factor)
    assert len(kernel.specialize(x, cu, 30, 3.0).params) == 3  # X, cu_seqlens, Y
    with pytest.raises(TileLabError, match="max_seqlen is a int32 scalar"):
        kernel(x, cu, 2.5, 1.0)
    with pytest.raises(TileLabError, match="takes 4 argument"):
        kernel(x, cu, 30)
    cuda = tilelang.compile(ragged_row_scale.fn(3, 16), out_idx=[3], target="cuda:sm_90a")
    assert "__global__" in cuda.specialize(x, cu, 30, 3.0).get_kernel_source()


@T.prim_func
def _bool_mask_select(M: T.Tensor((8,), T.bool), X: T.Tensor((8,), T.float32),
                      Y: T.Tensor((8,), T.float32)):
    with T.Kernel(1, threads=32):
        for k in T.serial(8):
            if M[k] != 0:  # TileLang's block-sparse attention tests its mask so
                Y[k] = X[k]
            if M[k] == False:  # noqa: E712 - the comparison is the point
                Y[k] = -X[k]


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90a"])
def test_comparisons_of_bool_values(target):
    """A bool compared with 0 or False failed in LLVM's code generator on the CPU (TVM
    compared bools as floats)."""
    kernel = tilelab.compile(_bool_mask_select, target=target)
    if target == "cpu":
        m = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0], dtype=torch.bool)
        x, y = torch.randn(8), torch.zeros(8)
        kernel(m, x, y)
        torch.testing.assert_close(y, torch.where(m, x, -x))


def block_masked_sum(batches=3, nblocks=5, block=32, width=16):
    """TileLang's block-sparse attention form: a small bool mask every thread keeps whole,
    read with the loop variable outside T.Parallel, decides whole-block work (a copy to
    shared memory, so barriers sit inside the `if`)."""

    @T.prim_func
    def masked(Mask: T.Tensor((batches, nblocks), T.bool),
               X: T.Tensor((batches, nblocks * block, width), T.float32),
               Y: T.Tensor((batches, block, width), T.float32)):
        with T.Kernel(batches, threads=128) as b:
            mask = T.alloc_fragment((nblocks,), T.bool)
            acc = T.alloc_fragment((block, width), T.float32)
            tile = T.alloc_shared((block, width), T.float32)
            T.copy(Mask[b, :], mask)
            T.clear(acc)
            for k in T.Pipelined(nblocks, num_stages=2):
                if mask[k] != 0:
                    T.copy(X[b, k * block, 0], tile)
                    for i, j in T.Parallel(block, width):
                        acc[i, j] += tile[i, j]
            T.copy(acc, Y[b, 0, 0])

    return masked


def _check_block_masked_sum(kernel, device):
    torch.manual_seed(3)
    mask = torch.rand(3, 5, device=device) > 0.5
    x, y = torch.randn(3, 160, 16, device=device), torch.zeros(3, 32, 16, device=device)
    kernel(mask, x, y)
    expected = (x.view(3, 5, 32, 16) * mask[:, :, None, None]).sum(1)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


def test_a_whole_kept_fragment_indexed_by_a_serial_loop_on_both_backends():
    _check_block_masked_sum(tilelab.compile(block_masked_sum(), target="cpu"), "cpu")
    source = tilelab.compile(block_masked_sum(), target="cuda:sm_90a").get_kernel_source()
    assert "mask_ptr[k]" in source  # each thread's own copy, read with the loop variable
    assert source.count("__syncthreads()") >= 2  # barriers inside the block-uniform `if`


@pytest.mark.gpu
def test_a_whole_kept_fragment_indexed_by_a_serial_loop_on_the_gpu():
    _check_block_masked_sum(tilelab.compile(block_masked_sum(), target="cuda"), "cuda")


def test_a_spread_fragment_indexed_by_a_serial_loop_goes_to_shared_memory_for_cuda():
    """Every thread runs the loop and reads every element, which the fragment spreads over
    the block's threads: CUDA keeps it in shared memory and says why, at its line (it
    refused the program before; tests/test_spill_fragments.py runs such a kernel)."""
    @T.prim_func
    def spread(X: T.Tensor((128,), T.float32), Y: T.Tensor((1,), T.float32)):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((128,), T.float32)
            T.copy(X, f)
            for k in T.serial(128):
                Y[0] = f[k]

    with pytest.warns(TileLabWarning, match="fragment 'f' is kept in shared memory.*spread "
                                            "over the block's threads"):
        tilelab.compile(spread, target="cuda:sm_90a")


def test_copy_takes_tilelangs_disable_tma():
    N = 100

    @T.prim_func
    def twice(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            tile = T.alloc_shared((32,), T.float32)
            T.copy(A[bx * 32], tile, disable_tma=True)
            T.copy(tile, B[bx * 32])

    a, b = _rand(N, seed=7), torch.zeros(N)
    tilelab.compile(twice, target="cpu")(a, b)
    torch.testing.assert_close(b, a)
    with pytest.raises(TileLabError, match="disable_tma"):
        @T.prim_func
        def wrong(A: T.Tensor((N,), T.float32)):
            with T.Kernel(1, threads=32):
                tile = T.alloc_shared((32,), T.float32)
                T.copy(A[0], tile, disable_tma="yes")


def _staged_copy(coalesced_width, eviction_policy=None):
    """Rows of 64 float16 through a shared tile; both copies with TileLang's hints."""
    @T.prim_func
    def staged(A: T.Tensor((100, 64), T.float16), B: T.Tensor((100, 64), T.float16)):
        with T.Kernel(T.ceildiv(100, 16), threads=128) as bx:
            tile = T.alloc_shared((16, 64), T.float16)
            T.copy(A[bx * 16, 0], tile, coalesced_width=coalesced_width,
                   eviction_policy=eviction_policy)
            T.copy(tile, B[bx * 16, 0], coalesced_width=coalesced_width)

    return staged


def test_copy_takes_tilelangs_coalesced_width_and_eviction_policy():
    a = _rand(100, 64, seed=3).half()
    for width, policy in ((None, None), (2, "evict_first"), (4, "evict_last"), (1, None)):
        b = torch.zeros_like(a)
        tilelab.compile(_staged_copy(width, policy), target="cpu")(a, b)
        torch.testing.assert_close(b, a)
    for wrong in (0, 2.5, True):
        with pytest.raises(TileLabError, match="coalesced_width"):
            _staged_copy(wrong)
    with pytest.raises(TileLabError, match="eviction_policy"):
        _staged_copy(4, "evict_soon")


@needs_nvcc
def test_coalesced_width_narrows_each_threads_accesses():
    """Without the hint a thread moves 16 bytes (eight float16, a uint4) at once; with
    `coalesced_width=4`, four (a half4: 8 bytes); with 2, two (a half2)."""
    def vector_types(width):
        source = tilelab.compile(_staged_copy(width), target="cuda:sm_90a").trace.code["cuda"]
        body = source[source.index('extern "C" __global__'):]
        return set(re.findall(r"\*\((\w+)\*\)\(A_ptr \+", body))

    assert vector_types(None) == {"uint4"}
    assert vector_types(4) == {"half4"}
    assert vector_types(2) == {"half2"}


def test_the_profiler_checks_and_times_as_tilelang_examples_call_it():
    kernel = tilelang.compile(split_then_combine(300), out_idx=[1])
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Randn)
    profiler.assert_allclose(lambda a: a * 6, rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError):
        profiler.assert_allclose(lambda a: a * 6 + 1e-3, rtol=1e-5, atol=1e-5)
    # as in TileLang, 1% of the elements may differ unless the call says otherwise
    a = torch.randn(300)

    def off_by(count):
        return lambda x: torch.cat([x[:count] * 6 + 1, x[count:] * 6])

    profiler.assert_allclose(off_by(3), [a], rtol=1e-5, atol=1e-5)  # 3 of 300
    with pytest.raises(AssertionError, match="4 of 300 elements differ"):
        profiler.assert_allclose(off_by(4), [a], rtol=1e-5, atol=1e-5)
    with pytest.raises(AssertionError):
        profiler.assert_allclose(off_by(1), [a], rtol=1e-5, atol=1e-5, max_mismatched_ratio=0)
    calls = []
    profiler.do_bench(lambda a: calls.append(1), n_warmup=2, n_repeat=3)
    assert len(calls) == 5  # TileLang's iteration counts
    calls.clear()
    profiler.do_bench(lambda a: calls.append(1), warmup=1, rep=4)
    assert len(calls) == 5
    calls.clear()  # the module's do_bench takes them as _n_warmup/_n_repeat (varlen attention)
    from tilelang.profiler import do_bench

    do_bench(lambda: calls.append(1), _n_warmup=2, _n_repeat=4)
    assert len(calls) == 6
    # TileLang's private _get_inputs, which its MLA decode benchmark calls
    [a] = profiler._get_inputs()
    torch.testing.assert_close(kernel(a), a * 6)
    torch.testing.assert_close(profiler.func(a), a * 6)  # the paged MLA decode calls this
    assert [tuple(t.shape) for t in profiler._get_inputs(with_output=True)] == \
        [tuple(p.shape) for p in kernel.params]


def _branch_on_flags(written: bool, N=256):
    @T.prim_func
    def flagged(Flags: T.Tensor((4,), T.int32), X: T.Tensor((N,), T.float32),
                Y: T.Tensor((N,), T.float32)):
        with T.Kernel(4, threads=64) as b:
            tile = T.alloc_shared((64,), T.float32)
            if Flags[b] > 0:
                T.copy(X[b * 64], tile)
                for i in T.Parallel(64):
                    Y[b * 64 + i] = tile[63 - i]
            if written:
                Flags[b] = 0

    return flagged


def test_a_branch_on_a_tensor_the_kernel_writes_is_not_block_uniform():
    """Threads may see such an element differently (another thread may have written it):
    a barrier inside the branch could hang the block. Only read-only tensors count; the
    buffers are compared themselves (`buffer.data` is a new expression at each access)."""
    source = tilelab.compile(_branch_on_flags(False), target="cuda:sm_90a").get_kernel_source()
    body = source.split("extern \"C\"")[-1]
    assert "__syncthreads()" in body.split("if (")[1]  # the barrier inside the branch
    with pytest.raises(TileLabError, match="may not all see alike") as info:
        tilelab.compile(_branch_on_flags(True), target="cuda:sm_90a")
    assert "def flagged" in info.value.location.excerpt()
    flags, x = torch.tensor([1, 0, 1, 1], dtype=torch.int32), _rand(256, seed=9)
    y = torch.zeros(256)
    tilelab.compile(_branch_on_flags(True), target="cpu")(flags, x, y)
    expected = x.view(4, 64).flip(1) * torch.tensor([1.0, 0, 1, 1])[:, None]
    torch.testing.assert_close(y, expected.reshape(-1))


def test_tvm_names_tilelang_programs_use():
    """TileLang's TVM has `tirx.PrimExpr` and `expr.dtype`; 0.27 calls expressions
    `tvm.ir.Expr` and their type `expr.ty`. A helper annotated with the old name, reading a
    loaded value's dtype (TileLang's dequantize examples), runs."""
    import tvm
    from tvm import tirx

    def doubled(x: tirx.PrimExpr) -> tirx.PrimExpr:
        assert x.dtype == T.float32
        return x * 2

    @T.prim_func
    def kernel(A: T.Tensor((8,), T.float32), B: T.Tensor((8,), T.float32)):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):
                B[i] = doubled(A[i])

    assert tirx.PrimExpr is tvm.ir.Expr
    x = tirx.Var("x", "int32")
    assert (x + 1).dtype == T.int32 and tirx.const(1, "uint8").dtype == T.uint8
    a = _rand(8, seed=3)
    b = torch.empty(8)
    tilelang.compile(kernel, target="cpu")(a, b)
    torch.testing.assert_close(b, 2 * a)


def test_tensor_subscript_annotation():
    """`A: T.Tensor[[M, K], dtype]` (TileLang's eager examples) is `T.Tensor((M, K), dtype)`."""

    @tilelang.jit
    def scale_rows(A, block=16):
        M, K = T.const("M, K")
        A: T.Tensor[[M, K], T.float32]
        B = T.empty((M, K), T.float32)
        with T.Kernel(T.ceildiv(M, block), threads=128) as bx:
            for i, j in T.Parallel(block, K):
                if bx * block + i < M:
                    B[bx * block + i, j] = A[bx * block + i, j] * (j + 1)
        return B

    a = _rand(37, 8, seed=5)
    torch.testing.assert_close(scale_rows(a), a * torch.arange(1, 9))
    assert T.Tensor[(4, 8), T.float16] == T.Tensor((4, 8), T.float16)


def test_autotuner_builder():
    """TileLang's `AutoTuner.from_kernel(...).set_compile_args(...).set_profile_args(...)
    .run(...)` (its GEMM autotune examples) tunes with tilelab's autotuner."""
    from tilelang.autotuner import AutoTuner

    M = N = K = 64

    def make(block_M=None, block_N=None):
        @T.prim_func
        def main(A: T.Tensor((M, K), T.float32), B: T.Tensor((K, N), T.float32),
                 C: T.Tensor((M, N), T.float32)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
                acc = T.alloc_fragment((block_M, block_N), T.float32)
                a = T.alloc_shared((block_M, K), T.float32)
                b = T.alloc_shared((K, block_N), T.float32)
                T.copy(A[by * block_M, 0], a)
                T.copy(B[0, bx * block_N], b)
                T.gemm(a, b, acc, clear_accum=True)
                T.copy(acc, C[by * block_M, bx * block_N])

        return main

    configs = [{"block_M": 32, "block_N": 32}, {"block_M": 64, "block_N": 32}]
    result = (AutoTuner.from_kernel(kernel=make, configs=configs)
              .set_compile_args(out_idx=[-1], target="auto")
              .set_profile_args(ref_prog=lambda a, b: a @ b, skip_check=False)
              .run(warmup=1, rep=2))
    assert result.config in configs and result.latency > 0
    a, b = _rand(M, K, seed=1), _rand(K, N, seed=2)
    torch.testing.assert_close(result.kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_autotune_configs_may_carry_pass_configs():
    """A config's `pass_configs` entry (TileLang's per-config compiler settings) goes to the
    compile; the rest are the kernel's parameters."""
    from tilelang.autotuner import autotune

    key = tilelang.PassConfigKey.TL_DISABLE_VECTORIZE
    configs = [{"block": 32, "pass_configs": {key: flag}} for flag in (True, False)]

    @autotune(configs=configs, warmup=1, rep=2)
    @tilelang.jit(out_idx=[-1])
    def doubled(N, block=32):
        @T.prim_func
        def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    if bx * block + i < N:
                        B[bx * block + i] = A[bx * block + i] * 2.0

        return main

    kernel = doubled(100)
    rows = kernel.autotune_result.rows  # the default (no pass configs), then the two
    assert [r["status"] for r in rows] == ["ok"] * 3, rows
    shown = sorted(str(r["config"]["pass_configs"]) for r in rows)  # as the table shows it
    assert shown[-1] == "{}" and "False" in shown[0] and "True" in shown[1], shown
    assert kernel.config["block"] == 32
    a = _rand(100, seed=9)
    torch.testing.assert_close(kernel(a), 2 * a)


def test_alloc_buffer_without_a_scope():
    """`T.alloc_buffer(shape, dtype)` before `with T.Kernel` is global scratch (TVM's default
    scope; TileLang's split-K dequantize example), inside a kernel a shared tile."""
    N, parts = 64, 4

    @T.prim_func
    def split_sum(A: T.Tensor((parts, N), T.float32), B: T.Tensor((N,), T.float32)):
        partial = T.alloc_buffer((parts, N), T.float32)
        with T.Kernel(parts, threads=64) as bx:
            tile = T.alloc_buffer((N,), T.float32)
            T.copy(A[bx, 0], tile)
            for i in T.Parallel(N):
                partial[bx, i] = tile[i] * 2.0
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                B[i] = partial[0, i] + partial[1, i] + partial[2, i] + partial[3, i]

    a = _rand(parts, N, seed=4)
    b = torch.empty(N)
    tilelang.compile(split_sum, target="cpu")(a, b)
    torch.testing.assert_close(b, 2 * a.sum(0))


@tilelab.jit
def row_scaled_gemm(A, B, S, out_dtype=T.float32):
    """C = (A @ B) * S[row], with T.use_swizzle: the fragment loop reads a block index
    (TileLang's deepgemm fp8 example, float32 output)."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    S: T.Tensor((M,), T.float32)
    C = T.empty((M, N), out_dtype)
    with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
        a = T.alloc_shared((64, 32), T.float16)
        b = T.alloc_shared((32, 64), T.float16)
        c = T.alloc_shared((64, 64), out_dtype)
        acc = T.alloc_fragment((64, 64), T.float32)
        scaled = T.alloc_fragment((64, 64), T.float32)
        T.use_swizzle(panel_size=2)
        T.clear(acc)
        T.clear(scaled)
        for ko in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
            T.copy(A[by * 64, ko * 32], a)
            T.copy(B[ko * 32, bx * 64], b)
            T.gemm(a, b, acc)
        for i, j in T.Parallel(64, 64):
            if by * 64 + i < M:
                scaled[i, j] += acc[i, j] * S[by * 64 + i]
        T.copy(scaled, c)
        T.copy(c, C[by * 64, bx * 64])
    return C


def _row_scaled_inputs(device="cpu"):
    torch.manual_seed(5)
    a = torch.randn(200, 96, dtype=torch.float16, device=device)
    b = torch.randn(96, 136, dtype=torch.float16, device=device)
    s = torch.rand(200, device=device)
    return a, b, s, (a.float() @ b.float()) * s[:, None]


@pytest.mark.parametrize("out_dtype", [T.float32, T.bfloat16])
def test_a_swizzled_grid_keeps_the_layouts_of_loops_that_read_a_block_index(out_dtype):
    """T.use_swizzle renumbers the blocks after the tile ops are lowered: before, it rebuilt
    the T.Parallel loop (which reads `by`) that the layout plan knows by identity, and the
    CUDA compile refused the loop's fragments."""
    from tilelab.backends.cuda.nvcc import find_nvcc

    a, b, s, expected = _row_scaled_inputs()
    out = row_scaled_gemm(a, b, s, out_dtype=out_dtype)
    torch.testing.assert_close(out.float(), expected, rtol=2e-2, atol=5e-2)
    if find_nvcc():
        kernel = row_scaled_gemm.compile(a.to("meta"), b.to("meta"), s.to("meta"),
                                         out_dtype=out_dtype, target="cuda:sm_90a")
        assert "/ 2" in kernel.get_kernel_source() or ">> 1" in kernel.get_kernel_source()


@pytest.mark.gpu
def test_a_swizzled_grid_with_a_block_index_in_a_fragment_loop_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a, b, s, expected = _row_scaled_inputs("cuda")
    torch.testing.assert_close(row_scaled_gemm(a, b, s).float(), expected, rtol=2e-2,
                               atol=5e-2)


@tilelab.jit
def partial_rows(K, rows: int = 20, block: int = 32):
    """A copy of `rows` rows of K into a tile of `block` rows (TileLang's examples cut a key
    block to the length of a split)."""
    N, D = T.const("N, D")
    K: T.Tensor((N, D), T.float32)
    Out = T.empty((N, D), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=64) as b:
        tile = T.alloc_shared((block, D), T.float32)
        T.fill(tile, -1.0)
        T.copy(K[b * block:b * block + rows, :], tile)
        T.copy(tile, Out[b * block, 0])
    return Out


def test_a_copy_between_regions_of_different_sizes_covers_the_tile_as_in_tilelang():
    """TileLang's rule: the copy covers the region nearer the threads (the shared tile),
    reading the tensor past the 20-row slice (zeros past its end); a warning at the copy's
    line says so."""
    k = _rand(70, 16)
    with pytest.warns(TileLabWarning, match=r"test_tilelang_compat.py:\d+:\d+: T.copy between "
                                            r"regions of different sizes.*K is read over "
                                            r"\(32, 16\)"):
        out = partial_rows(k, target="cpu")
    torch.testing.assert_close(out, k)  # every row: the tile was filled wholly each time


@needs_nvcc
def test_a_copy_grown_as_in_tilelang_compiles_for_cuda():
    with pytest.warns(TileLabWarning):
        kernel = partial_rows.compile(torch.empty(70, 16, device="meta"), target="cuda:sm_90a")
    assert kernel.launch["grid"][0] == 3


def test_a_copy_that_would_grow_past_a_tile_is_still_refused():
    """Growing the far region must stay inside its tile (a global tensor clips instead);
    a copy never writes past the region it names; regions at the same level of memory
    never grow."""
    with pytest.raises(TileLabError, match="tile \\(32, 16\\) and destination Y \\(10, 16\\)"):
        @T.prim_func
        def written_past(X: T.Tensor((32, 16), T.float32), Y: T.Tensor((32, 16), T.float32)):
            with T.Kernel(1, threads=64):
                tile = T.alloc_shared((32, 16), T.float32)
                T.copy(X[0:32, :], tile)
                T.copy(tile, Y[0:10, :])

    with pytest.raises(TileLabError, match="small \\(16, 16\\) and destination frag"):
        @T.prim_func
        def past_the_tile(X: T.Tensor((32, 16), T.float32)):
            with T.Kernel(1, threads=64):
                small = T.alloc_shared((20, 16), T.float32)
                frag = T.alloc_fragment((32, 16), T.float32)
                T.copy(X[0:20, :], small)
                T.copy(small[0:16, :], frag)

    with pytest.raises(TileLabError, match="different extents"):
        @T.prim_func
        def same_level(X: T.Tensor((32, 16), T.float32), Y: T.Tensor((32, 16), T.float32)):
            with T.Kernel(1, threads=64):
                T.copy(X[0:20, :], Y[0:32, :])


@tilelab.jit
def zero_rows_from(A, rows: int):
    """TVM's lowercase T.parallel, nested as TileLang's DSA pooling example nests it."""
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
        tile = T.alloc_fragment((32, N), T.float32)
        T.copy(A[bx * 32, 0], tile)
        for i in T.parallel(32):
            for j in T.parallel(0, N):
                if i >= rows:
                    tile[i, j] = 0.0
        T.copy(tile, B[bx * 32, 0])
    return B


def test_lowercase_parallel_loops_nest_like_T_Parallel():
    a = torch.randn(80, 48)
    expected = a.clone()
    for start in range(0, 80, 32):
        expected[start + 10:start + 32] = 0
    torch.testing.assert_close(zero_rows_from(a, 10), expected)
    with pytest.raises(TileLabError, match="count from 0") as caught:
        @T.prim_func
        def from_two(X: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                for i in T.parallel(2, 8):
                    X[i] = 0.0
    assert caught.value.location is not None and caught.value.location.line > 0


@tilelab.jit
def reversed_blocks(A):
    """A shared tile read in reverse after TileLang's explicit barrier."""
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        tile = T.alloc_shared((64,), T.float32)
        T.copy(A[bx * 64], tile)
        T.sync_threads()
        for i in T.Parallel(64):
            B[bx * 64 + i] = tile[63 - i] * 2
    return B


def test_sync_threads_is_a_barrier_tilelab_counts_among_its_own():
    a = torch.randn(320)
    torch.testing.assert_close(reversed_blocks(a), a.view(5, 64).flip(1).reshape(-1) * 2)
    if find_nvcc() is not None:  # the program's barrier is the one the copy needed: no other
        source = reversed_blocks.compile(a, target="cuda:sm_90a").get_kernel_source()
        assert source.count("__syncthreads()") == 1
    with pytest.raises(TileLabError, match="inside a T.Parallel loop") as caught:
        @T.prim_func
        def in_a_loop(X: T.Tensor((64,), T.float32)):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    X[i] = 0.0
                    T.sync_threads()
    assert "T.sync_threads()" in caught.value.location.source_line
    # TileLang's named barrier of part of the block (tests/test_named_barriers.py): its
    # count must be the threads that reach it, or it is refused at its line
    @T.prim_func
    def named(X: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            tile = T.alloc_shared((64,), T.float32)
            tx = T.get_thread_binding()
            if tx < 32:
                tile[tx] = X[tx]
                T.sync_threads(3, 64)
                X[tx] = tile[31 - tx]

    with pytest.raises(TileLabError, match="waits for 64 threads, but 32 reach it") as caught:
        tilelab.compile(named, target="cpu")
    assert "T.sync_threads(3, 64)" in caught.value.location.excerpt()


@tilelab.jit
def relu_by_a_variable(A):
    """A T.alloc_var declared inside the T.Parallel body: one scalar per element, as TileLang's
    DSA indexer backward writes its ReLU derivative (the CUDA lowering lost it: KeyError)."""
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
        tile = T.alloc_fragment((32, N), T.float32)
        T.copy(A[bx * 32, 0], tile)
        for i, j in T.Parallel(32, N):
            slope = T.alloc_var(T.float32)
            if tile[i, j] > 0:
                slope = 1.0
            else:
                slope = 0.0
            tile[i, j] = tile[i, j] * slope
        T.copy(tile, B[bx * 32, 0])
    return B


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_variable_of_the_parallel_body_is_one_per_element(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    a = torch.randn(80, 48, device=device)
    torch.testing.assert_close(relu_by_a_variable(a), a.clamp(min=0))


@needs_nvcc
def test_a_variable_of_the_parallel_body_compiles_for_cuda():
    kernel = relu_by_a_variable.compile(torch.empty(80, 48, device="meta"), target="cuda:sm_90a")
    assert "slope" in kernel.get_kernel_source()


@tilelab.jit
def exponents_and_halves(x):
    """T.reinterpret as TileLang's act_quant uses it: a float32's exponent field from its
    bits, and 2^e built from bits; a float16's bits as uint16."""
    N = T.const("N")
    x: T.Tensor((N,), T.float32)
    e = T.empty((N,), T.int32)
    p = T.empty((N,), T.float32)
    h = T.empty((N,), T.int32)
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        for i in T.Parallel(64):
            if bx * 64 + i < N:
                bits = T.reinterpret(x[bx * 64 + i], T.uint32)
                e[bx * 64 + i] = T.cast((bits >> 23) & 0xFF, T.int32) - 127
                p[bx * 64 + i] = T.reinterpret(T.cast(e[bx * 64 + i] + 127, T.uint32) << 23,
                                               "float32")
                h[bx * 64 + i] = T.cast(T.reinterpret(T.cast(x[bx * 64 + i], T.float16),
                                                      T.uint16), T.int32)
    return e, p, h


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_reinterpret_reads_a_scalars_bits(device):
    x = torch.randn(100, device=device) * 100
    e, p, h = exponents_and_halves(x)
    expected_e = ((x.view(torch.int32) >> 23) & 0xFF) - 127
    torch.testing.assert_close(e, expected_e)
    torch.testing.assert_close(p, torch.pow(2.0, expected_e.float()))
    torch.testing.assert_close(h, x.half().view(torch.int16).int() & 0xFFFF)


def test_reinterpret_between_widths_is_refused():
    @tilelab.jit
    def widen(x):
        x: T.Tensor((8,), T.float32)
        y = T.empty((8,), T.int32)
        with T.Kernel(1, threads=32):
            for i in T.Parallel(8):
                y[i] = T.cast(T.reinterpret(x[i], T.uint16), T.int32)
        return y

    with pytest.raises(TileLabError, match="same width"):
        widen(torch.randn(8))


@tilelab.jit
def scale_head_rows(Q, W):
    """TileLang's dsa_hisa shape: Q's rows are `seq_len * heads`, written before the tensor
    (W) that gives seq_len and heads."""
    seq_len, heads = T.const("seq_len, heads")
    Q: T.Tensor[[seq_len * heads, 16], T.float32]
    W: T.Tensor[[seq_len, heads], T.float32]
    Out = T.empty((seq_len * heads, 16), T.float32)
    with T.Kernel(seq_len, threads=64) as bx:
        for h, d in T.Parallel(heads, 16):
            Out[bx * heads + h, d] = Q[bx * heads + h, d] * W[bx, h]
    return Out


def test_a_size_may_name_sizes_a_later_tensor_gives():
    q, w = torch.randn(12, 16), torch.randn(4, 3)
    torch.testing.assert_close(scale_head_rows(q, w), q * w.reshape(-1, 1))
    with pytest.raises(TileLabError, match=r"dimension 0 of Q is \(seq_len \* heads\) = 12, "
                       "but the tensor passed has 13") as info:
        scale_head_rows(torch.randn(13, 16), w)
    assert "Q: T.Tensor" in info.value.location.excerpt()


@tilelab.jit
def weighted_row_pairs(X, W):
    """TileLang's fp8_lighting_indexer shape: the output is made (T.empty) before the tensor
    that gives its size, with `T.dynamic` names."""
    seq = T.dynamic("seq")
    d = T.dynamic("d")
    X: T.Tensor((seq * 2, d), T.float32)  # two rows a position
    Y = T.empty((seq, d), T.float32)
    W: T.Tensor((seq,), T.float32)
    with T.Kernel(seq, threads=32) as b:
        for j in T.Parallel(d):
            Y[b, j] = (X[2 * b, j] + X[2 * b + 1, j]) * W[b]
    return Y


def test_an_output_may_be_made_before_the_tensor_that_gives_its_size():
    x, w = torch.randn(20, 8), torch.randn(10)
    torch.testing.assert_close(weighted_row_pairs(x, w), (x[0::2] + x[1::2]) * w[:, None])
    with pytest.raises(TileLabError, match=r"X must have shape \(20, 8\) but the tensor "
                                           r"passed has shape \(21, 8\)"):
        weighted_row_pairs(torch.randn(21, 8), w)
    # compiled without tensors, a size no tensor gives stays unknown, at its first use
    with pytest.raises(TileLabError, match=r"the size \(seq \* 2\) of X uses names no "
                                           "tensor has given yet") as info:
        weighted_row_pairs.compile(d=8)
    assert "X: T.Tensor" in info.value.location.excerpt()


def _script(name):
    """One of scripts/ as a module (they are scripts, not part of tilelab)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).parents[1] / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _examples_runner():
    return _script("tilelang_examples")


def test_the_runner_cuts_the_sizes_a_scripts_main_block_passes(tmp_path):
    """scripts/tilelang_examples.py runs a script's `__main__` block after its definitions,
    its own functions taking integer sizes above 256 cut (head dimensions and block,
    thread and stage settings kept), as main()'s defaults are. The block runs in the
    module's globals, as `python example.py` runs it: a name it binds is a global the
    functions read (TileLang's NSA backward reads `block_counts` so); the functions'
    calls to each other are as written."""
    import runpy

    runner = _examples_runner()
    script = tmp_path / "example.py"
    script.write_text(
        "seen = []\n\n"
        "def test(S, topk, DQK=576, d_v=512, block_N=512, threads=1024):\n"
        "    seen.append((S, topk, DQK, d_v, block_N, threads))\n\n"
        "def size(n):\n"
        "    return n\n\n"
        "def reads_a_global():\n"
        "    seen.append((flag, size(4096)))\n\n"
        "if __name__ == '__main__':\n"
        "    for s in (4096, 100):\n"
        "        test(s, topk=2048, DQK=576, d_v=512, block_N=512, threads=1024)\n"
        "    flag = 7\n"
        "    reads_a_global()\n")
    module = runpy.run_path(str(script), run_name="__tilelab_example__")
    assert module["seen"] == []  # the block waits for the runner
    runner._run_main_block(script, module)
    assert module["seen"] == [(256, 256, 576, 512, 512, 1024), (100, 256, 576, 512, 512, 1024),
                              (7, 4096)]


def test_the_runner_cuts_the_sizes_a_main_without_arguments_passes(tmp_path):
    """A `main()` that takes nothing (TileLang's KDA examples: `run_test(B=1, S=8192, ...)`)
    has no defaults to cut: its calls to the example's functions take sizes cut instead,
    and the example's own benchmark functions (KDA's, from a file beside it, or one it
    defines) run a warm-up call and two timed ones on the CPU."""
    import runpy

    runner = _examples_runner()
    (tmp_path / "bench_utils.py").write_text(
        "calls = []\n\n"
        "def do_bench(fn, *args, warmup=20, rep=10, **kwargs):\n"
        "    for _ in range(warmup + rep):\n"
        "        calls.append(fn(*args, **kwargs))\n")
    script = tmp_path / "example.py"
    script.write_text(
        "from bench_utils import calls, do_bench\n\n"
        "seen = []\n\n"
        "def run_test(B, S, H, DK=128):\n"
        "    seen.append((B, S, H, DK))\n"
        "    do_bench(len, [S])\n"
        "    do_bench(len, [S], warmup=50)\n\n"
        "def bench_here(fn, warmup=10, iterations=100):  # TileLang's NSA benchmark's names\n"
        "    for _ in range(warmup + iterations):\n"
        "        calls.append(fn())\n\n"
        "def main():\n"
        "    run_test(B=1, S=8192, H=64, DK=128)\n"
        "    bench_here(lambda: 2)\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        module = runpy.run_path(str(script), run_name="__tilelab_example__")
        runner._own_timings_few(module)
        runner._main_cutting_calls(script, module)()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("bench_utils", None)
    assert module["seen"] == [(1, 256, 64, 128)]
    assert module["calls"] == [1] * 6 + [2] * 3  # 1 + 2 calls each time


def test_the_runner_tries_larger_sizes_where_the_cut_stops_an_example(tmp_path):
    """An example whose own check of its sizes fails at the cut (256) before any kernel
    runs is run again with sizes cut to 1024, and its row says so."""
    runner = _examples_runner()
    example = tmp_path / "examples" / "sizes" / "example_sizes.py"
    example.parent.mkdir(parents=True)
    example.write_text(
        "import torch\nimport tilelang\nimport tilelang.language as T\n\n\n"
        "@tilelang.jit(out_idx=[-1])\n"
        "def double(n):\n"
        "    @T.prim_func\n"
        "    def k(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):\n"
        "        with T.Kernel(T.ceildiv(n, 128), threads=128) as b:\n"
        "            for i in T.Parallel(128):\n"
        "                B[b * 128 + i] = A[b * 128 + i] * 2\n"
        "    return k\n\n\n"
        "def main(n=2048):\n"
        "    assert n % 1024 == 0, 'n must be a multiple of 1024'\n"
        "    a = torch.randn(n)\n"
        "    torch.testing.assert_close(double(n)(a), a * 2)\n")
    row = runner.run_example(example, tmp_path, timeout=240)
    assert row["cpu"] == "correct", row
    assert "sizes cut to 1024: cut to 256 the example stopped first" in row["reason"]
    assert "n must be a multiple of 1024" in row["reason"]


_DOUBLING_EXAMPLE = (
    "import torch\nimport tilelang\nimport tilelang.language as T\n\n\n"
    "@tilelang.jit(out_idx=[-1])\n"
    "def double(n):\n"
    "    @T.prim_func\n"
    "    def k(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):\n"
    "        with T.Kernel(T.ceildiv(n, 128), threads=128) as b:\n"
    "            for i in T.Parallel(128):\n"
    "                B[b * 128 + i] = A[b * 128 + i] * 2\n"
    "    return k\n\n\n")


@pytest.mark.parametrize("check, verdict, passing", [
    # TileLang's grouped GEMM examples: a comparison in an `if`, a printed verdict
    ("if torch.allclose(out, ref):\n        print('match')\n"
     "    else:\n        print('mismatch')", "torch.allclose at example_check.py:", "correct"),
    # its paged decoding example: the largest difference against a bound, printed (no
    # comparison the table counts as a check)
    ("max_diff = (out - ref).abs().max().item()\n"
     "    print('PASSED' if max_diff < 1e-2 else '\u2717 Verification FAILED')",
     "it printed '\u2717 Verification FAILED'", "ran, no check"),
    # gdn/'s similarity helper: a verdict in a terminal's red, recorded without the colours
    ("if not torch.equal(out, ref):\n"
     "        print('\\033[31mWARNING: out Error: 0.25\\033[0m')",
     "it printed 'WARNING: out Error: 0.25'", "ran, no check"),
])
def test_the_runner_counts_a_check_that_reports_a_failure_as_failed(tmp_path, check, verdict,
                                                                      passing):
    """An example whose check prints its verdict and goes on is WRONG where the verdict
    is a failure: a run to its end is not enough (the reference here is 3 a, the kernel
    doubles). Against the right reference the row is what it was before, a measurement
    that names a mismatch ("mismatch: 0 of 256") and a kernel's source printed whole (its
    error strings name mismatches too) notwithstanding."""
    runner = _examples_runner()
    example = tmp_path / "examples" / "check" / "example_check.py"
    example.parent.mkdir(parents=True)
    for factor, row_says in ((3, "WRONG"), (2, passing)):
        example.write_text(
            _DOUBLING_EXAMPLE + "def main(n=256):\n"
            "    a = torch.randn(n)\n"
            f"    out, ref = double(n)(a), a * {factor}\n"
            f"    {check}\n"
            "    print(f'mismatch: {int((out != ref).sum())} of {n}')\n"
            "    print('define void @k() {\\n  @.str = c\"Mismatched type\"\\n}')\n")
        row = runner.run_example(example, tmp_path, timeout=240)
        assert row["cpu"] == row_says, row
        if row_says == "WRONG":
            assert verdict in row["reason"], row


def test_the_runner_starts_an_example_at_the_cut_its_reference_needs(tmp_path, monkeypatch):
    """An example whose own reference is undefined at 256 (FIRST_CUT: TileLang's GQA
    decoding splits its keys in 16 and reads 32 at a time) starts at the cut named there,
    and its row says why."""
    runner = _examples_runner()
    example = tmp_path / "examples" / "cut" / "example_cut.py"
    example.parent.mkdir(parents=True)
    example.write_text(
        _DOUBLING_EXAMPLE + "def main(n=4096):\n"
        "    a = torch.randn(n)\n"
        "    ref = a * 2 if n // 16 >= 32 else a * float('nan')\n"
        "    torch.testing.assert_close(double(n)(a), ref)\n")
    assert runner.run_example(example, tmp_path, timeout=240)["cpu"] == "WRONG"
    monkeypatch.setitem(runner.FIRST_CUT, "cut/example_cut.py", (1024, "its reference"))
    row = runner.run_example(example, tmp_path, timeout=240)
    assert row["cpu"] == "correct" and "(sizes cut to 1024: its reference)" in row["reason"]


def _flash_attn_standin():
    return _script("flash_attn_standin")


def _sdpa(q, k, v, mask=None):
    """(L, H, D) tensors through torch's attention, float32, grouped heads expanded."""
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    q, k, v = (x.float().transpose(0, 1) for x in (q, k.repeat_interleave(group, 1),
                                                    v.repeat_interleave(group, 1)))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(0, 1)


@pytest.mark.parametrize("causal", [False, True])
def test_the_flash_attn_standin_attends_each_packed_sequence_to_its_own_keys(causal):
    """The runner's flash_attn_varlen_func: sequences of 5, 17 and 9 queries against 12, 17
    and 3 keys, 8 query heads over 2 key/value heads. Causal, the mask is aligned to the
    bottom right (query i sees key j <= i + Lk - Lq), and a query that sees no key gives 0."""
    fa = _flash_attn_standin()
    torch.manual_seed(0)
    lq, lk = [5, 17, 9], [12, 17, 3]
    cq = torch.tensor([0, 5, 22, 31], dtype=torch.int32)
    ck = torch.tensor([0, 12, 29, 32], dtype=torch.int32)
    q = torch.randn(31, 8, 64, dtype=torch.float16)
    k, v = torch.randn(32, 2, 64, dtype=torch.float16), torch.randn(32, 2, 64, dtype=torch.float16)
    out = fa.flash_attn_varlen_func(q, k, v, cq, ck, max(lq), max(lk), 0.0, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype and fa.used
    for b in range(3):
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        seen = torch.ones(lq[b], lk[b], dtype=torch.bool).tril(lk[b] - lq[b]) if causal \
            else torch.ones(lq[b], lk[b], dtype=torch.bool)
        expected = _sdpa(q[qs], k[ks], v[ks], seen).nan_to_num(0.0)
        expected[~seen.any(1)] = 0
        torch.testing.assert_close(out[qs].float(), expected, rtol=2e-3, atol=2e-3)
    if causal:  # the third sequence: 9 queries, 3 keys - its first 6 queries see none
        assert out[22:28].abs().max() == 0 and out[28:31].abs().max() > 0


def test_the_flash_attn_standin_reads_a_paged_cache_as_a_contiguous_one():
    """flash_attn_with_kvcache: the first cache_seqlens[b] keys of each sequence, from a
    (batch, seqlen, kv_heads, dim) cache or from pages of 16 keys in a shuffled table."""
    fa = _flash_attn_standin()
    torch.manual_seed(1)
    batch, seqlen, page = 3, 64, 16
    q = torch.randn(batch, 1, 8, 32)
    k, v = torch.randn(batch, seqlen, 2, 32), torch.randn(batch, seqlen, 2, 32)
    lengths = torch.tensor([64, 23, 1], dtype=torch.int32)
    table = torch.randperm(batch * seqlen // page).view(batch, seqlen // page).int()
    k_pages, v_pages = torch.empty(batch * seqlen // page, page, 2, 32), \
        torch.empty(batch * seqlen // page, page, 2, 32)
    for b in range(batch):
        for i in range(seqlen // page):
            k_pages[table[b, i]] = k[b, i * page:(i + 1) * page]
            v_pages[table[b, i]] = v[b, i * page:(i + 1) * page]
    plain = fa.flash_attn_with_kvcache(q, k, v, cache_seqlens=lengths)
    paged = fa.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths,
                                       block_table=table)
    torch.testing.assert_close(paged, plain)
    for b in range(batch):
        n = int(lengths[b])
        torch.testing.assert_close(plain[b], _sdpa(q[b], k[b, :n], v[b, :n]),
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        fa.flash_attn_varlen_func(q[0], k[0], v[0], lengths[:2], lengths[:2], 1, 1, 0.1)


def test_the_runner_times_cuda_events_by_the_cpu_clock():
    """Examples time themselves with torch.cuda.Event after their checks; without a GPU
    the runner's stand-in reads the CPU's clock (TileLang's top-k selector does so)."""
    import time

    runner = _examples_runner()
    start, end = runner._ClockEvent(enable_timing=True), runner._ClockEvent(enable_timing=True)
    start.record()
    time.sleep(0.02)
    end.record()
    end.synchronize()
    assert 15 <= start.elapsed_time(end) < 2000


@tilelab.jit(out_idx=[-1])
def roles_with_register_hints(n, count=240, annotate=False):
    """TileLang's hand-written roles open with T.set_max_nreg (or `annotate`: its
    annotate_consumer_reg_alloc / annotate_producer_reg_dealloc): warpgroup 0 doubles the
    rows, warpgroup 1 negates them."""
    @T.prim_func
    def kernel(a: T.Tensor((n, 64), T.float32), out: T.Tensor((2, n, 64), T.float32)):
        with T.Kernel(T.ceildiv(n, 16), threads=256) as bx:
            tx = T.get_thread_binding()
            tile = T.alloc_shared((16, 64), T.float32)
            T.copy(a[bx * 16, 0], tile)
            if tx < 128:
                if annotate:
                    T.annotate_consumer_reg_alloc(count)
                else:
                    T.set_max_nreg(count, 1)
                for i, j in T.Parallel(16, 64):
                    out[0, bx * 16 + i, j] = tile[i, j] * 2.0
            else:
                if annotate:
                    T.annotate_producer_reg_dealloc()
                else:
                    T.set_max_nreg(24, 0)
                for i, j in T.Parallel(16, 64):
                    out[1, bx * 16 + i, j] = -tile[i, j]
    return kernel


def test_set_max_nreg_is_a_hint_the_roles_run_without():
    """T.set_max_nreg changes no result: the roles run as written on the CPU and compile
    for sm_90a (tilelab keeps the launch's registers in a program's own roles); a count
    setmaxnreg cannot take is an error at the user's line."""
    a = torch.randn(48, 64)
    for annotate in (False, True):
        torch.testing.assert_close(roles_with_register_hints(48, annotate=annotate)(a),
                                   torch.stack([a * 2, -a]))
        if find_nvcc() is not None:
            source = roles_with_register_hints.compile(48, annotate=annotate,
                                                       target="cuda:sm_90a").get_kernel_source()
            assert "setmaxnreg" not in source
    with pytest.raises(TileLabError, match=r"set_max_nreg\(250") as info:
        roles_with_register_hints.compile(48, 250, target="cpu")
    assert "T.set_max_nreg(count, 1)" in str(info.value)
    with pytest.raises(TileLabError, match=r"annotate_consumer_reg_alloc\(250\)") as info:
        roles_with_register_hints.compile(48, 250, annotate=True, target="cpu")
    assert "T.annotate_consumer_reg_alloc(count)" in str(info.value)


@tilelab.jit(out_idx=[-1])
def gemm_by_wgmma_gemm(n, wait=0):
    """TileLang's asynchronous spelling of T.gemm: issue, then wait for the MMAs."""
    @T.prim_func
    def kernel(a: T.Tensor((n, 64), T.float16), b: T.Tensor((64, 64), T.float16),
               c: T.Tensor((n, 64), T.float32)):
        with T.Kernel(T.ceildiv(n, 64), threads=128) as bx:
            a_s = T.alloc_shared((64, 64), T.float16)
            b_s = T.alloc_shared((64, 64), T.float16)
            acc = T.alloc_fragment((64, 64), T.float32)
            T.copy(a[bx * 64, 0], a_s)
            T.copy(b, b_s)
            T.clear(acc)
            T.wgmma_gemm(a_s[:, 0:32], b_s[0:32, :], acc)
            T.wgmma_gemm(a_s[:, 32:64], b_s[32:64, :], acc)
            T.wait_wgmma(wait)
            T.copy(acc, c[bx * 64, 0])
    return kernel


def test_wgmma_gemm_and_wait_wgmma_are_a_gemm():
    """T.wgmma_gemm is T.gemm (tilelab waits for its MMAs itself), T.wait_wgmma then waits
    for nothing: the sum is A @ B on the CPU, and the program compiles for sm_90a."""
    a, b = torch.randn(80, 64).half(), torch.randn(64, 64).half()
    torch.testing.assert_close(gemm_by_wgmma_gemm(80)(a, b), a.float() @ b.float(),
                               rtol=1e-3, atol=1e-3)
    if find_nvcc() is not None:
        assert "wgmma" in gemm_by_wgmma_gemm.compile(80, target="cuda:sm_90a") \
            .get_kernel_source()
    with pytest.raises(TileLabError, match=r"wait_wgmma\(-1\)"):
        gemm_by_wgmma_gemm.compile(80, -1, target="cpu")


@tilelab.jit(out_idx=[-1])
def variants(n=64, which="doubled"):
    """A factory that keeps two kernels side by side, as TileLang's examples do, and returns
    one; the other cannot be traced (its copy's sides differ in size)."""
    @T.prim_func
    def broken(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=32):
            T.copy(A, B[0:n + 5])

    @T.prim_func
    def doubled(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(n):
                B[i] = A[i] * 2

    return doubled if which == "doubled" else broken


def test_a_kernel_the_factory_does_not_return_does_not_stop_it():
    a = _rand(64, seed=9)
    torch.testing.assert_close(variants()(a), a * 2)
    with pytest.raises(TileLabError, match="different extents") as info:
        variants(which="broken")
    assert info.value.location.line == variants.source.line_offset + 8  # the copy's own line


def test_the_kernels_indices_and_extents_by_tilelangs_names():
    @T.prim_func
    def where(out: T.Tensor((3, 2, 4, 8), T.int32)):
        with T.Kernel(2, 3, threads=(8, 4)):
            bx, by = T.get_block_binding(0), T.get_block_binding(1)
            tx, ty = T.get_thread_bindings()
            gx, gy = T.get_block_extents()
            assert (T.get_thread_extent(0), T.get_thread_extents()) == (8, [8, 4])
            assert len(T.get_block_bindings()) == 2 and T.get_block_extent(1) == gy
            out[by, bx, ty, tx] = ((by * gx + bx) * 4 + ty) * 8 + tx

    out = torch.zeros(3, 2, 4, 8, dtype=torch.int32)
    tilelab.compile(where, target="cpu")(out)
    assert torch.equal(out.flatten(), torch.arange(3 * 2 * 4 * 8, dtype=torch.int32))
    with pytest.raises(TileLabError, match=r"get_block_binding\(2\): the kernel's grid has 2"):
        @T.prim_func
        def beyond(out: T.Tensor((4,), T.int32)):
            with T.Kernel(2, 2, threads=4):
                out[0] = T.get_block_binding(2)


def test_the_interpreters_bfloat16_rounds_as_torch():
    """scripts/triton_interpreted.py keeps bfloat16 values as float32 inside a Triton kernel
    and rounds them where they are converted or stored: to nearest, ties to even, as torch
    - every bfloat16 bit pattern read back exactly, and float32 values around each
    rounding point (ties both ways, a bit either side, overflow to infinity, NaN)."""
    interpreted = _script("triton_interpreted")
    every = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    values = interpreted.bfloat16_values(every.view(torch.int16).numpy().view("uint16"))
    assert torch.equal(torch.from_numpy(values).view(torch.int32),
                       every.float().view(torch.int32))
    torch.manual_seed(2)
    bits = torch.randint(-(1 << 31), 1 << 31, (1 << 16,), dtype=torch.int64)
    near = torch.cat([bits, (bits & ~0xFFFF) | 0x8000, (bits & ~0xFFFF) | 0x7FFF,
                      (bits & ~0xFFFF) | 0x8001]).to(torch.int32).view(torch.float32)
    near = torch.cat([near, torch.tensor([3.4e38, -3.4e38, float("inf"), float("nan")])])
    got = torch.from_numpy(interpreted.bfloat16_bits(near.numpy()).view("int16"))
    want = near.bfloat16().view(torch.int16)
    nan = near.isnan()
    assert torch.equal(got[~nan], want[~nan]) and got[nan].view(torch.bfloat16).isnan().all()


def test_the_interpreter_computes_with_bfloat16_numbers(monkeypatch):
    """Triton's interpreter computes on bfloat16's bit patterns as integers (a product, a
    `tl.dot`, a comparison of two bfloat16 tensors came out wrong); with the runner's
    changes each is computed as a GPU does, and a builtin bound to a name of its own
    (`exp = tl.exp`, as flash-linear-attention writes it) and a loop over a loaded count
    run. (Triton reads TRITON_INTERPRET as it is imported: the runner sets it first, and
    so does this test.)"""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton (the compatibility runner's references)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _script("triton_interpreted").install()
    from tests.kernels import triton_bfloat16 as kernels

    torch.manual_seed(3)
    x, y = torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()
    out = kernels.run(x, y)
    xf, yf = x.float(), y.float()
    # each bfloat16 operation rounds, as on a GPU: the product, then the sum
    assert torch.equal(out["product"], ((xf[0] * yf[0]).bfloat16().float() + xf[0]).bfloat16())
    torch.testing.assert_close(out["dot"], xf @ yf, rtol=1e-6, atol=1e-5)
    assert torch.equal(out["max"], xf.max(1).values)
    assert torch.equal(out["exp"], xf[0].exp().bfloat16())
    assert torch.equal(out["greater"], (xf[0] > yf[0]).int())
    assert out["count"].item() == 10


def test_the_runners_do_bench_times_few_calls_and_refuses_what_tilelang_refuses(monkeypatch):
    """On the CPU the runner's do_bench makes one warm-up and two timed calls, whatever
    counts or milliseconds the example asks for; a call TileLang's do_bench refuses - the
    timed function's own arguments after it, as gdn/example_chunk_delta_bwd passes them -
    is refused too, with TileLang's TypeError (it failed later, on a tensor taken for a
    warm-up time)."""
    import tilelab.profiler as profiler_module

    monkeypatch.setattr(profiler_module, "do_bench", profiler_module.do_bench)
    _examples_runner()._few_timings()
    calls = []
    profiler_module.do_bench(lambda: calls.append(1), warmup=500, rep=1000)
    assert len(calls) == 3
    profiler_module.do_bench(lambda: calls.append(1), _n_warmup=10, _n_repeat=50)
    assert len(calls) == 6
    with pytest.raises(TypeError, match=r"do_bench\(\) got an unexpected keyword argument"):
        profiler_module.do_bench(lambda q, k: None, torch.ones(2), torch.ones(2), chunk_size=64)


def test_the_table_names_its_command_first_and_keeps_the_runs_behind_it_at_the_end(tmp_path):
    """docs/TILELANG_COMPAT.md opens with the command that writes it; every re-run since
    (one long line after thirty sessions) goes to a section at the end, the GPU's too."""
    runner = _examples_runner()
    rows = [{"example": "a/x.py", "cpu": "correct", "cuda_ok": 1, "cuda_failed": []},
            {"example": "b/y.py", "cpu": "WRONG", "cuda_ok": 1, "cuda_failed": [],
             "reason": "AssertionError"}]
    command = ("python scripts/tilelang_examples.py TILELANG_CHECKOUT --timeout 240 (first run); "
               "2026-12-05: 1 re-run with --only b/ --timeout 600")
    gpu = {"command": "python scripts/tilelang_examples.py TILELANG_CHECKOUT --timeout 90",
           "rows": {"a/x.py": {"cpu": "correct"}}}
    out = tmp_path / "table.md"
    runner.write_table(rows, tmp_path, out, command, gpu)
    text = out.read_text()
    head, _, tail = text.partition("## The runs behind the rows")
    assert "Written by `python scripts/tilelang_examples.py TILELANG_CHECKOUT --timeout 240`" in head
    assert "re-run" not in head and "1 re-run with --only b/" in tail
    assert "H200: python scripts/tilelang_examples.py TILELANG_CHECKOUT --timeout 90" in tail
    assert "| b/y.py | WRONG | ok (1) | not run | AssertionError |" in head
