"""A select decided alike by every element of a T.Parallel tile is decided once for the
tile (passes/uniform_selects.py): causal attention masks only its diagonal tiles."""

import itertools
import random
import sys
from pathlib import Path

import pytest
import torch
import tvm
from tvm import sym, tirx

import tilelab
import tilelab.language as T
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.ir.visit import substitute, walk
from tilelab.passes.uniform_selects import UniformSelects, _everywhere

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.flash_attention import flash_attention_kernel, reference  # noqa: E402

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
COMPARISONS = [tirx.LT, tirx.LE, tirx.GT, tirx.GE]


def _value(expr, values: dict) -> bool:
    out = sym.Analyzer().simplify(substitute(expr, values))
    assert isinstance(out, tirx.IntImm), out
    return bool(out.value)


def test_the_tile_condition_holds_exactly_when_every_element_holds():
    """Random linear comparisons (and their conjunctions) over a 2-d nest, against brute
    force over every element, for every value of the two outer indices tried."""
    rng = random.Random(0)
    i, j, k, q = (tirx.Var(n, "int32") for n in "ijkq")
    for _ in range(60):
        def comparison():
            lhs = rng.randint(-3, 3) * i + rng.randint(-3, 3) * j + rng.randint(-4, 4) * k
            rhs = rng.randint(-4, 4) * q + rng.randint(-6, 6)
            return rng.choice(COMPARISONS)(lhs, rhs)

        cond = comparison() if rng.random() < 0.6 else tirx.And(comparison(), comparison())
        nest = [(i, rng.randint(1, 4)), (j, rng.randint(1, 4))]
        tile = _everywhere(cond, nest)
        assert tile is not None
        for kv, qv in itertools.product(range(-3, 4), repeat=2):
            every = all(_value(cond, {i: a, j: b, k: kv, q: qv})
                        for a in range(nest[0][1]) for b in range(nest[1][1]))
            assert _value(tile, {k: kv, q: qv}) == every, (cond, nest, kv, qv)


def test_conditions_it_cannot_decide_for_the_tile_are_left_alone():
    i, j, k = (tirx.Var(n, "int32") for n in "ijk")
    nest = [(i, 4), (j, 4)]
    assert _everywhere(tirx.EQ(i + k, 3), nest) is None
    assert _everywhere(tirx.Or(tirx.LT(i, k), tirx.LT(j, k)), nest) is None
    assert _everywhere(tirx.LT(i * j, k), nest) is None  # not linear in the indices


def _program(causal, sequence=300):
    kernel = flash_attention_kernel.compile(1, 2, sequence, 64, causal=causal, block_m=64,
                                            threads=128, target="cpu")
    return kernel.program.func


def _versioned(func):
    out = UniformSelects(tvm.IRModule({"main": func}))["main"]
    branches = []
    walk(out.body, tirx.IfThenElse, branches.append)
    return [b for b in branches if isinstance(b.then_case, tirx.For) or
            isinstance(b.else_case, tirx.For)]


def test_the_causal_mask_is_skipped_where_the_whole_tile_is_kept():
    (branch,) = _versioned(_program(causal=True))
    # the mask keeps the score, so the kept side is empty: only `if not (whole tile kept)`
    assert isinstance(branch.condition, tirx.Not) and branch.else_case is None
    assert "key_block" in str(branch.condition) and "query_block" in str(branch.condition)


def test_a_mask_read_from_memory_or_stored_to_shared_is_left_alone():
    import tilelab.language as T

    @T.prim_func
    def masked(A: T.Tensor((64, 64), T.float32), keep: T.Tensor((64,), T.int32),
               B: T.Tensor((64, 64), T.float32)):
        with T.Kernel(1, threads=128):
            tile = T.alloc_fragment((64, 64), T.float32)
            shared = T.alloc_shared((64, 64), T.float32)
            T.copy(A, tile)
            for i, j in T.Parallel(64, 64):  # decided by memory: every element its own
                tile[i, j] = T.if_then_else(keep[j] > 0, tile[i, j], 0.0)
            for k in T.serial(2):
                for i, j in T.Parallel(64, 64):  # linear, but stored to shared memory
                    shared[i, j] = T.if_then_else(i + k * 64 < 96, tile[i, j], 1.0)
            T.copy(shared, B)

    assert _versioned(tilelab.compile(masked, target="cpu").program.func) == []


@T.prim_func
def partial_sums(X: T.Tensor((64, 8), T.float32), Y: T.Tensor((64,), T.float32)):
    """A select on the index of a T.serial inside the T.Parallel: uniform across the tile,
    but bound inside it - no `if` outside the loop may test it."""
    with T.Kernel(1, threads=64):
        x = T.alloc_shared((64, 8), T.float32)
        acc = T.alloc_fragment((64,), T.float32)
        T.copy(X, x)
        T.clear(acc)
        for i in T.Parallel(64):
            for k in T.serial(8):
                acc[i] += T.if_then_else(k < 5, x[i, k], 0.0)
        T.copy(acc, Y)


def test_an_index_bound_inside_the_loop_is_not_tested_outside_it():
    assert _versioned(tilelab.compile(partial_sums, target="cpu").program.func) == []
    x = torch.randn(64, 8)
    y = torch.zeros(64)
    tilelab.compile(partial_sums, target="cpu")(x, y)
    torch.testing.assert_close(y, x[:, :5].sum(1))


@needs_nvcc
def test_an_index_bound_inside_the_loop_compiles_for_cuda():
    tilelab.compile(partial_sums, target="cuda")  # an `if` on k outside k's loop: no CUDA


@needs_nvcc
def test_cuda_compile_versions_the_mask_and_the_key_turns_it_off():
    def compiled(configs):
        return flash_attention_kernel.compile(1, 2, 300, 64, causal=True, block_m=64,
                                              threads=128, target="cuda",
                                              pass_configs=configs)

    on = [p for p in compiled({}).trace.passes if p.name == "tilelab.UniformSelects"]
    assert on and on[0].changed
    off = compiled({"tl.disable_uniform_selects": True}).trace.passes
    assert not any(p.name == "tilelab.UniformSelects" for p in off)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("configs", [{}, {"tl.disable_uniform_selects": True}])
def test_gpu_attention_matches_torch(causal, configs):
    q, k, v = (torch.randn(2, 4, 333, 128, device="cuda", dtype=torch.float16)
               for _ in range(3))
    kernel = flash_attention_kernel.compile(2, 4, 333, 128, causal=causal, block_m=128,
                                            threads=256, target="cuda", pass_configs=configs)
    torch.testing.assert_close(kernel(q, k, v), reference(q, k, v, causal),
                               rtol=2e-2, atol=2e-2)
