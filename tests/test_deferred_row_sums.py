"""A loop's row sum that only feeds a running total is combined across the threads of each
row once, after the loop (passes/deferred_row_sums.py, the default; `tl.disable_deferred_row_sums`
keeps the shuffles in the loop): the program's result unchanged."""

from __future__ import annotations

import re

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.cuda_source import loop_end, loop_text
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
ROWS, COLS, TILES = 64, 32, 5
KEPT = {"tl.disable_deferred_row_sums": True}


def running_sums(start: float = 0.0, part_read_after: bool = False,
                 total_read_inside: bool = False):
    """Y[i] = sum over tiles t of 0.5^(TILES-1-t) * sum_j X[t, i, j] (+ start scaled), the
    way FlashAttention keeps its row sums; variants that must keep the shuffles in the loop."""

    @T.prim_func
    def sums(X: T.Tensor((TILES, ROWS, COLS), T.float32), Y: T.Tensor((ROWS,), T.float32),
             Z: T.Tensor((ROWS,), T.float32)):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((ROWS, COLS), T.float32)
            part = T.alloc_fragment((ROWS,), T.float32)
            total = T.alloc_fragment((ROWS,), T.float32)
            scale = T.alloc_fragment((ROWS,), T.float32)
            seen = T.alloc_fragment((ROWS,), T.float32)
            T.fill(total, start)
            T.fill(scale, 0.5)
            T.fill(seen, 0)
            for t in T.serial(TILES):
                T.copy(X[t, 0, 0], x)
                T.reduce_sum(x, part, dim=1)
                for i in T.Parallel(ROWS):
                    total[i] = total[i] * scale[i] + part[i]
                if total_read_inside:
                    for i in T.Parallel(ROWS):
                        seen[i] = T.max(seen[i], total[i])
            T.copy(total, Y)
            if part_read_after:
                T.copy(part, Z)
            else:
                T.copy(seen, Z)

    return sums


def _expected(x: torch.Tensor, start: float) -> torch.Tensor:
    total = torch.full((ROWS,), start, dtype=x.dtype, device=x.device)
    for t in range(TILES):
        total = total * 0.5 + x[t].sum(1)
    return total


def _loop_and_after(source: str) -> tuple[str, str]:
    body = source[source.rindex("__global__"):]
    return loop_text(body, "t"), body[loop_end(body, "t"):]


def _shuffled(text: str) -> set[str]:
    return set(re.findall(r"(\w+)_ptr\[\d\] = \(\w+_ptr\[\d\] \+ tl::shfl_xor", text))


@needs_nvcc
def test_the_running_total_is_combined_once_after_the_loop():
    program = running_sums()
    loop, after = _loop_and_after(tilelab.compile(program, target="cuda:sm_80").get_kernel_source())
    assert not _shuffled(loop) and "tl::shfl_xor" not in loop
    assert _shuffled(after) == {"total"}
    every = tilelab.compile(program, target="cuda:sm_80", pass_configs=KEPT)
    loop, after = _loop_and_after(every.get_kernel_source())
    assert "part_partial" in _shuffled(loop) and "tl::shfl_xor" not in after


@needs_nvcc
@pytest.mark.parametrize("variant", [{"start": 1.0}, {"part_read_after": True},
                                     {"total_read_inside": True}])
def test_where_the_threads_partial_sums_would_show_the_loop_keeps_its_shuffles(variant):
    """A running total that starts at 1 (each thread's share would count it once per
    thread), a tile sum read after the loop, a running total read inside it."""
    loop, after = _loop_and_after(tilelab.compile(running_sums(**variant),
                                                  target="cuda:sm_80").get_kernel_source())
    assert "part_partial" in _shuffled(loop) and "tl::shfl_xor" not in after


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("start", [0.0, 1.0])
def test_running_sums_match_torch(device, start):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernel = tilelab.compile(running_sums(start=start), target=device)
    torch.manual_seed(3)
    x = torch.randn(TILES, ROWS, COLS, device=device)
    y, z = (torch.zeros(ROWS, device=device) for _ in range(2))
    kernel(x, y, z)
    torch.testing.assert_close(y, _expected(x, start), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
def test_flash_attention_with_its_row_sums_after_the_loop_matches_sdpa():
    """The course kernel, d128 128x128 (split, the consumers taking turns) and causal,
    sequences with tails."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import torch.nn.functional as F

    from examples.flash_attention import flash_attention_kernel as fa

    for causal in (False, True):
        for sequence in (1000, 1037):
            program = fa.fn(2, 4, sequence, 128, block_m=128, block_n=128, threads=256,
                            causal=causal)
            kernel = tilelab.compile(program, out_idx=fa.out_idx, target="cuda",
                                     pass_configs=fa.pass_configs)
            assert "shfl_xor(running_sum" in kernel.get_kernel_source()
            torch.manual_seed(sequence)
            q, k, v = (torch.randn(2, 4, sequence, 128, device="cuda", dtype=torch.float16)
                       for _ in range(3))
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            torch.testing.assert_close(kernel(q, k, v), expected, rtol=2e-2, atol=2e-2)


@needs_nvcc
def test_the_testers_attention_programs_take_the_split():
    """The differential tester's attention family writes its row sums this way: with the key,
    its programs run the split (what `difftest --family attention` checks on a GPU)."""
    import tempfile
    from pathlib import Path

    from tilelab.testing import difftest
    from tilelab.testing.generator import generate

    split = 0
    for index in range(4):
        path = Path(tempfile.mkdtemp()) / f"attention_{index}.py"
        path.write_text(generate(4201, index, family="attention").source())
        kernel = tilelab.compile(difftest.load_module(path).make(), target="cuda:sm_90a")
        split += 'split="across"' in kernel.trace.get_pass("tilelab.DeferredRowSums").ir
    assert split >= 2
