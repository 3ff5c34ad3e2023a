"""`T.gemm` on Hopper: warpgroup MMA (`wgmma.mma_async`) for sm_90a, mma.sync elsewhere.

Without a GPU the tests check what can be checked against the PTX ISA itself:

* the accumulator fragment is the ISA's figure for `wgmma .m64nNk16` D registers,
  its rows reduce to where the rows live, and a register A operand lines up
  with an accumulator converted in place (FlashAttention's P);
* the shared tiles' panel layout is the swizzle the tensor cores apply to address
  bits, and the matrix descriptors tilelab builds (start, leading and stride byte
  offsets) reach, through the ISA's canonical layouts, exactly the bytes where
  the layout stored each element of every instruction's piece;
* compiling for `cuda:sm_90a` gives PTX with `wgmma.mma_async` (ptxas assembles it),
  for `cuda:sm_80` or with `PassConfigKey.TL_DISABLE_WGMMA` `mma.sync`; tiles
  wgmma cannot take fall back and the Trace says why;
* the CPU semantics do not depend on any of it.

The GPU test runs the kernels on fresh random inputs with tails against torch.
"""

from __future__ import annotations

import itertools
import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.ir.layout import Fragment, Layout, owner_table
from tilelab.ops._gemm_wgmma import descriptor_strides, piece_offset

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")


@tilelab.jit
def matmul(A, B, block_m: int = 128, block_n: int = 128, block_k: int = 32, stages: int = 3,
           threads: int = 128, trans_a: bool = False, trans_b: bool = False, dtype=T.float16,
           policy=T.GemmWarpPolicy.Square, a_in_registers: bool = False):
    M, N, K = T.const("M, N, K")
    A: T.Tensor((K, M) if trans_a else (M, K), dtype)
    B: T.Tensor((N, K) if trans_b else (K, N), dtype)
    C = T.empty((M, N), dtype)
    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=threads) as (bx, by):
        a_tile = T.alloc_shared((block_k, block_m) if trans_a else (block_m, block_k), dtype)
        b_tile = T.alloc_shared((block_n, block_k) if trans_b else (block_k, block_n), dtype)
        acc = T.alloc_fragment((block_m, block_n), T.float32)
        T.clear(acc)
        for ko in T.Pipelined(T.ceildiv(K, block_k), num_stages=stages):
            if trans_a:
                T.copy(A[ko * block_k, by * block_m], a_tile)
            else:
                T.copy(A[by * block_m, ko * block_k], a_tile)
            if trans_b:
                T.copy(B[bx * block_n, ko * block_k], b_tile)
            else:
                T.copy(B[ko * block_k, bx * block_n], b_tile)
            if a_in_registers:
                a_regs = T.alloc_fragment((block_m, block_k), dtype)
                T.copy(a_tile, a_regs)
                T.gemm(a_regs, b_tile, acc, policy=policy)
            else:
                T.gemm(a_tile, b_tile, acc, transpose_A=trans_a, transpose_B=trans_b,
                       policy=policy)
        T.copy(acc, C[by * block_m, bx * block_n])
    return C


# The configurations the GPU test runs and the compile tests compile.
CONFIGS = {
    "course": {},
    "trans_a": {"trans_a": True},
    "trans_b": {"trans_b": True},
    "trans_ab": {"trans_a": True, "trans_b": True},
    "bf16": {"dtype": T.bfloat16},
    "two_groups_rows": {"block_n": 256, "block_k": 64, "threads": 256,
                        "policy": T.GemmWarpPolicy.FullRow},
    "two_groups_cols": {"block_n": 256, "block_k": 64, "threads": 256},
    "k16_n32": {"block_m": 64, "block_n": 32, "block_k": 16},
    "a_in_registers": {"a_in_registers": True},
    "a_in_registers_two_groups": {"a_in_registers": True, "threads": 256,
                                  "policy": T.GemmWarpPolicy.FullRow},
}


def _inputs(cfg, m=1000, n=776, k=520, device="cpu"):
    torch_dtype = torch.bfloat16 if cfg.get("dtype") is T.bfloat16 else torch.float16
    a = torch.randn((k, m) if cfg.get("trans_a") else (m, k), dtype=torch_dtype, device=device)
    b = torch.randn((n, k) if cfg.get("trans_b") else (k, n), dtype=torch_dtype, device=device)
    return a, b


def _reference(cfg, a, b):
    a = a.float().T if cfg.get("trans_a") else a.float()
    b = b.float().T if cfg.get("trans_b") else b.float()
    return a @ b


# ---------------------------------------------------------------- fragments


@pytest.mark.parametrize("m, n, groups_m, groups_n",
                         [(64, 64, 1, 1), (128, 128, 1, 1), (128, 256, 2, 1), (128, 128, 1, 2),
                          (256, 64, 2, 2)])
def test_accumulator_is_the_ptx_d_layout(m, n, groups_m, groups_n):
    """PTX ISA, "Register fragment layout for accumulator matrix D" of wgmma .m64nNk16:
    in a warpgroup, warp w holds rows 16w + lane/4 (+8 for registers 2, 3 of each four),
    columns 8 (r / 4) + 2 (lane % 4) + r % 2."""
    frag = Fragment.wgmma_accumulator(m, n, groups_m, groups_n)
    frag.check()
    rows, cols = m // groups_m, n // groups_n
    assert frag.threads == 128 * groups_m * groups_n and frag.local_size == rows * cols // 128
    for i, j in itertools.product(range(m), range(n)):
        thread, reg = frag.forward(i, j, 0)
        group, lane, warp = thread // 128, thread % 32, thread % 128 // 32
        piece, r = divmod(reg, cols // 2)  # one instruction per 64 rows, N/2 registers each
        assert i == group // groups_n * rows + piece * 64 + 16 * warp + lane // 4 + 8 * (r % 4 // 2)
        assert j == group % groups_n * cols + 8 * (r // 4) + 2 * (lane % 4) + r % 2


@pytest.mark.parametrize("m, n, groups_m, groups_n", [(64, 64, 1, 1), (128, 128, 2, 1),
                                                      (128, 64, 1, 2)])
def test_rows_of_the_accumulator(m, n, groups_m, groups_n):
    """A row reduction leaves row i on exactly the threads that held a part of it."""
    frag = Fragment.wgmma_accumulator(m, n, groups_m, groups_n)
    rows = frag.reduce(1)
    rows.check()
    held, reduced = owner_table(frag), owner_table(rows)
    for i in range(m):
        assert set(reduced[(i,)]) == {t for j in range(n) for t in held[(i, j)]}


def test_register_a_lines_up_with_an_accumulator():
    """P = convert(S) keeps S's layout; the second GEMM takes P as its register A."""
    assert Fragment.wgmma_operand_a(64, 64, 1, 1).same_as(Fragment.wgmma_accumulator(64, 64, 1, 1))
    assert Fragment.wgmma_operand_a(128, 128, 2, 1).same_as(
        Fragment.wgmma_accumulator(128, 128, 2, 1))
    Fragment.wgmma_operand_a(128, 64, 1, 2).check()  # copies in both warpgroups along N


# ---------------------------------------------------------------- shared tiles and descriptors


def _hardware_swizzle(byte: int, width: int) -> int:
    """Swizzle<B,4,3> on an address: bits 4.. XOR bits 7.., B = log2(width / 16) bits."""
    mask = width // 16 - 1
    return byte ^ (((byte >> 7) & mask) << 4)


@pytest.mark.parametrize("shape, width", [((64, 128), 128), ((32, 64), 64), ((128, 32), 64),
                                          ((16, 64), 32), ((64, 64), 128)])
def test_panels_are_the_hardware_swizzle(shape, width):
    layout = Layout.wgmma_panels(shape, 16, width)
    table = layout.table()
    assert sorted(table.ravel().tolist()) == list(range(shape[0] * shape[1]))
    for row, col in itertools.product(range(shape[0]), range(shape[1])):
        linear = piece_offset(shape[0], width, row, col)
        assert table[row, col] * 2 == _hardware_swizzle(linear, width)
        assert layout.place(row, col) == divmod(int(table[row, col]), shape[1])
    assert Layout.from_json(layout.to_json()).table().tolist() == table.tolist()


def _canonical_byte(start, leading, stride, width, k_major, mn, k):
    """Where the ISA's canonical layout puts element (mn, k) of an instruction's piece
    (16-bit elements; "Shared Memory Matrix Layout", strides in bytes), before the swizzle.

    K-major, swizzled: ((8, m), (T, 2k)) : ((width, stride), (1, T)) - rows of `width` bytes,
    8-row groups `stride` apart, K contiguous. MN-major, swizzled:
    ((T, width / 16, m), (8, k)) : ((1, T, leading), (width, stride)).
    """
    if k_major:
        return start + (mn % 8) * width + (mn // 8) * stride + 2 * k
    atom = width // 2
    return start + 2 * (mn % atom) + (mn // atom) * leading + (k % 8) * width + (k // 8) * stride


@pytest.mark.parametrize("k_major, rows, cols, width, piece_mn", [
    (True, 128, 64, 128, 64), (True, 128, 32, 64, 64), (True, 64, 16, 32, 64),
    (True, 256, 128, 128, 128),  # B stored N x K, two panels along K
    (False, 32, 128, 128, 128), (False, 64, 256, 128, 256), (False, 16, 64, 64, 32),
    (False, 32, 32, 32, 16)])
def test_descriptors_reach_every_element(k_major, rows, cols, width, piece_mn):
    """For each instruction's piece of a tile (piece_mn x 16), the descriptor tilelab builds
    addresses each element where `Layout.wgmma_panels` stored it."""
    check_pieces(k_major, rows, cols, width, piece_mn)


def check_pieces(k_major, rows, cols, width, piece_mn, first=(0, 0)):
    """Every piece (piece_mn x 16) of the part of a rows x cols tile from row, column
    `first` on, addressed by the descriptor tilelab builds, reaches each element's byte."""
    layout = Layout.wgmma_panels((rows, cols), 16, width)
    leading, stride = descriptor_strides(rows, width, k_major)
    r0, c0 = first
    mn_first, k_first = (r0, c0) if k_major else (c0, r0)
    mn_extent, k_extent = (rows - r0, cols - c0) if k_major else (cols - c0, rows - r0)
    for mn0, k0 in itertools.product(range(0, mn_extent - piece_mn + 1, piece_mn),
                                     range(0, k_extent - 15, 16)):
        mn_at, k_at = mn_first + mn0, k_first + k0
        start = piece_offset(rows, width, *((mn_at, k_at) if k_major else (k_at, mn_at)))
        assert start % 16 == 0
        for mn, k in itertools.product(range(piece_mn), range(16)):
            byte = _hardware_swizzle(
                _canonical_byte(start, leading, stride, width, k_major, mn, k), width)
            row, col = (mn_at + mn, k_at + k) if k_major else (k_at + k, mn_at + mn)
            assert byte == 2 * layout.offset(row, col), (mn0, k0, mn, k)


# ---------------------------------------------------------------- compiling


def _gemms(trace) -> list:
    return [r for r in trace.instructions if r["op"] == "gemm"]


def _compile(name, target="cuda:sm_90a", pass_configs=None, **extra):
    cfg = dict(CONFIGS[name], **extra)
    a, b = _inputs(cfg, 256, 264, 96)
    return matmul.compile(a, b, target=target, pass_configs=pass_configs, **cfg)


@needs_nvcc
@pytest.mark.parametrize("name", CONFIGS)
def test_sm90a_gemm_is_wgmma(name):
    kernel = _compile(name)
    ptx = kernel.trace.code["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n" in ptx and "mma.sync" not in ptx
    assert "wgmma.wait_group.sync.aligned 0" in ptx
    # tiles written by ordinary stores need a proxy fence before the tensor cores read them;
    # tiles TMA wrote do not
    assert ("fence.proxy.async" in ptx) == (not kernel.trace.pipelines[0]["tma"])
    assert kernel.trace.resources["spill_stores_bytes"] == 0
    [record] = _gemms(kernel.trace)
    assert record["instruction"] == "wgmma.mma_async" and record["loc"]
    layouts = kernel.trace.layouts
    assert layouts["acc"]["recipe"]["kind"] == "wgmma_accumulator"
    assert layouts["b_tile"]["kind"] == "wgmma_panels"
    if CONFIGS[name].get("a_in_registers"):
        assert "from registers" in record["why"]
        assert layouts["a_regs"]["recipe"]["kind"] == "wgmma_operand_a"


@needs_nvcc
def test_sm80_and_the_config_key_keep_mma_sync():
    for kernel in (_compile("course", target="cuda:sm_80"),
                   _compile("course", pass_configs={tilelab.PassConfigKey.TL_DISABLE_WGMMA: True})):
        ptx = kernel.trace.code["ptx"]
        assert "mma.sync.aligned.m16n8k16" in ptx and "wgmma" not in ptx
        assert kernel.trace.layouts["acc"]["recipe"]["kind"] == "accumulator"
        [record] = _gemms(kernel.trace)
        assert record["instruction"] == "mma.sync"
    assert "sm_90a" in _compile("course", target="cuda:sm_80").trace.instructions[0]["why"]
    assert "TL_DISABLE_WGMMA" in kernel.trace.instructions[0]["why"]


@needs_nvcc
@pytest.mark.parametrize("extra, why", [
    ({"threads": 64, "block_m": 64, "block_n": 64}, "warpgroups"),
    ({"block_m": 32, "block_n": 64}, "64-row pieces"),
    ({"block_k": 8}, "multiple of 16")])
def test_what_wgmma_cannot_take_falls_back_with_a_reason(extra, why):
    kernel = _compile("course", **extra)
    [record] = _gemms(kernel.trace)
    assert record["instruction"] in ("mma.sync", "fma") and why in record["why"]
    assert "wgmma" not in kernel.trace.code["ptx"]


@needs_nvcc
@pytest.mark.parametrize("tma", [True, False])
def test_operand_tiles_start_on_the_swizzle_period(tma):
    """A 256-byte bias tile merged before the GEMM's tiles must not shift them off 1 KiB
    (where TMA writes them, and where every thread's cp.async does)."""
    from examples.gemm_bias_relu import gemm_bias_relu_kernel

    a, b = torch.empty(1000, 512, dtype=torch.float16), torch.empty(512, 1000, dtype=torch.float16)
    kernel = gemm_bias_relu_kernel.compile(
        a, b, torch.empty(1000, dtype=torch.float16), target="cuda:sm_90a",
        pass_configs={} if tma else {"tl.disable_tma_lower": True})
    assert [r["instruction"] for r in _gemms(kernel.trace)] == ["wgmma.mma_async"]
    source = kernel.trace.code["cuda"]
    operand = r"(?:A|B)_tma" if tma else r"\(&\((?:A|B)_ptr"
    starts = {int(m) for m in re.findall(r"\(\(half\*\)buf_dyn_shmem_ptr\)\[.*\+ (\d+)\)\]\)\), "
                                         + operand, source)}
    assert starts and all(2 * s % 1024 == 0 for s in starts), sorted(starts)


_CHECKED_START = re.compile(
    r"wgmma_check_aligned<(\d+)>\(\(&\(\(\((\w+)\*\)buf_dyn_shmem_ptr\)\[(\d+)\]")


@needs_nvcc
def test_generated_gemms_place_their_operands_on_the_swizzle_period(tmp_path):
    """Every wgmma operand at a fixed place in shared memory starts on its swizzle period
    (the kernel would stop at wgmma_check_aligned): the H200 regression and generated GEMMs."""
    from pathlib import Path

    from tilelab.testing import difftest
    from tilelab.testing.generator import generate

    regression = Path(__file__).parent / "difftest_regressions" / \
        "wgmma_tile_after_a_small_vector.py"
    programs = [difftest.load_module(regression).make()]
    generated = (generate(1, i) for i in range(3000, 3400))
    for p in [p for p in generated if any(s["op"] == "gemm" for s in p.steps)][:10]:
        path = tmp_path / f"gemm_{p.seed}_{p.index}.py"
        path.write_text(p.source())
        programs.append(difftest.load_module(path).make())
    checked = 0
    every = {"tl.disable_alignment_check_once": True}  # each T.gemm's check names its offset
    for program in programs:
        source = tilelab.compile(program, target="cuda:sm_90a",
                                 pass_configs=every).trace.code["cuda"]
        for period, ctype, offset in _CHECKED_START.findall(source):
            size = 4 if ctype == "float" else 2
            assert int(offset) * size % int(period) == 0, (program, period, offset)
            checked += 1
    assert checked >= 4


def test_cpu_semantics_do_not_change():
    torch.manual_seed(0)
    for name in ("course", "trans_ab", "a_in_registers"):
        cfg = CONFIGS[name]
        a, b = _inputs(cfg, 70, 136, 48)
        out = matmul(a, b, target="cpu", **cfg)
        torch.testing.assert_close(out.float(), _reference(cfg, a, b), rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------- on a Hopper GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", CONFIGS)
def test_wgmma_results_on_the_gpu(name):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    cfg = CONFIGS[name]
    for seed in range(2):
        torch.manual_seed(seed)
        a, b = _inputs(cfg, device="cuda")
        out = matmul(a, b, target="cuda:sm_90a", **cfg)
        torch.testing.assert_close(out.float(), _reference(cfg, a, b), rtol=2e-2, atol=5e-2)
