"""The Trace every compilation records, and the compile cache behind it (CPU target).

A Trace lists the passes in order with the IR after each one, round-trips
through JSON, answers questions (diff, first_change_of), and is what
`kernel.trace`, `tilelab.lower` and `jit_fn.lower` hand out. Compiling the same
program again, in this process or in a fresh one, comes from the cache.
"""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from itertools import pairwise
from pathlib import Path

import pytest
import torch

import tilelab
import tilelab.language as T
from tilelab import Trace
from tilelab.cache import CacheCorruptionWarning
from tilelab.trace import PassRecord

TILE_PASSES = ["tilelab.CheckLoopBounds", "tilelab.CheckFragmentReads",
               "tilelab.LowerTileOpsToLoops", "tilelab.CheckAccesses", "tilelab.KernelToCPULoops"]


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test starts with an empty compile cache of its own."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(root))
    monkeypatch.delenv("TILELAB_DISABLE_CACHE", raising=False)
    return root


# ---------------------------------------------------------------- programs


def make_gemm(M, N, K, bm=16, bn=16, bk=8):
    """C = 2 * A @ B.T; sizes that are not multiples of the blocks."""

    @T.prim_func
    def gemm_nt(A: T.Tensor((M, K), T.float32), B: T.Tensor((N, K), T.float32),
                C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a_shared = T.alloc_shared((bm, bk), T.float32)
            b_shared = T.alloc_shared((bn, bk), T.float32)
            acc = T.alloc_fragment((bm, bn), T.float32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=2):
                T.copy(A[by * bm, k * bk], a_shared)
                T.copy(B[bx * bn, k * bk], b_shared)
                T.gemm(a_shared, b_shared, acc, transpose_B=True)
            for i, j in T.Parallel(bm, bn):
                acc[i, j] = acc[i, j] * 2.0
            T.copy(acc, C[by * bm, bx * bn])

    return gemm_nt


def make_scale(N, factor=3.0):
    @T.prim_func
    def scale(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i] * factor

    return scale


@tilelab.jit
def eager_add(A, B, block: int = 32):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B: T.Tensor((N,), T.float32)
    C = T.empty((N,), T.float32)
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
    return C


@tilelab.jit
def scale_factory(N, factor=5.0):
    # the @T.prim_func must be nested here: that is how jit tells a factory from an eager kernel
    @T.prim_func
    def scale(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i] * factor

    return scale


def check_gemm(kernel, M=40, N=24, K=20):
    a, b = torch.randn(M, K), torch.randn(N, K)
    c = torch.empty(M, N)
    kernel(a, b, c)
    torch.testing.assert_close(c, 2 * a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def gemm_kernel(tmp_path_factory):
    """Compiled once for the tests that only read its Trace (in a cache of its own)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILELAB_CACHE_DIR", str(tmp_path_factory.mktemp("gemm-cache")))
        kernel = tilelab.compile(make_gemm(40, 24, 20))
    assert not kernel.trace.cache_hit
    return kernel


# ---------------------------------------------------------------- the pass list


def test_passes_come_in_the_documented_order(gemm_kernel):
    trace = gemm_kernel.trace
    names = trace.pass_names()
    assert names[0] == "tilelab.FrontEnd"
    positions = [names.index(n) for n in TILE_PASSES]
    assert positions == sorted(positions) and positions[0] >= 1, names
    first_tvm = min(i for i, n in enumerate(names) if n.startswith("tirx."))
    assert max(i for i, n in enumerate(names) if n.startswith("tilelab.")) < first_tvm
    for tvm_pass in ("tirx.FlattenBuffer", "tirx.MakePackedAPI"):
        assert tvm_pass in names, names
    assert names.index("tirx.FlattenBuffer") < names.index("tirx.MakePackedAPI")

    stages = [p.stage for p in trace.passes]
    assert stages[0] == "input" and "input" not in stages[1:]
    finalize = [i for i, s in enumerate(stages) if s == "finalize"]
    assert finalize, stages
    assert finalize == list(range(finalize[0], len(stages))), "finalize passes must come last"
    assert "tirx.LowerTVMBuiltin" in [names[i] for i in finalize]
    assert names.index("tirx.MakePackedAPI") < finalize[0]


def test_every_record_has_its_fields(gemm_kernel):
    trace = gemm_kernel.trace
    assert trace.kernel == "gemm_nt" and trace.target == "cpu"
    assert len(trace.passes) >= 10
    for record in trace.passes:
        assert isinstance(record, PassRecord)
        assert isinstance(record.name, str) and record.name
        assert isinstance(record.ir, str)
        assert isinstance(record.changed, bool)
        assert isinstance(record.duration_ms, float) and record.duration_ms >= 0
        expected_owner = "tilelab" if record.name.startswith("tilelab.") else "tvm"
        assert record.owner == expected_owner, record.name
    assert sum(p.duration_ms for p in trace.passes) > 0
    assert [p["name"] for p in trace.params] == ["A", "B", "C"]
    assert trace.source["filename"] == __file__ or \
        Path(trace.source["filename"]).resolve() == Path(__file__).resolve()
    assert "def gemm_nt" in trace.source["text"]


def test_changed_flag_is_truthful(gemm_kernel):
    passes = gemm_kernel.trace.passes
    assert passes[0].changed and "T.tile.gemm" in passes[0].ir
    differing = 0
    for previous, record in pairwise(passes):
        if not record.changed:
            assert record.ir == previous.ir, f"{record.name} says unchanged but its IR differs"
        elif record.ir != previous.ir:
            differing += 1
    # the tile passes do visibly change the IR, and are flagged so
    for name in ("tilelab.LowerTileOpsToLoops", "tilelab.KernelToCPULoops",
                 "tirx.FlattenBuffer", "tirx.MakePackedAPI"):
        index = gemm_kernel.trace.pass_names().index(name)
        assert passes[index].changed, name
        assert passes[index].ir != passes[index - 1].ir, name
    assert not gemm_kernel.trace.get_pass("tilelab.CheckFragmentReads").changed
    assert differing >= 4
    assert 0 < len(gemm_kernel.trace.pass_names(changed_only=True)) < len(passes)


def test_json_round_trip(gemm_kernel):
    trace = gemm_kernel.trace
    text = trace.to_json()
    assert json.loads(text)["passes"][0]["name"] == "tilelab.FrontEnd"
    again = Trace.from_json(text)
    assert again == trace
    assert all(isinstance(p, PassRecord) for p in again.passes)
    assert Trace.from_json(trace.to_json(indent=2)) == trace
    assert Trace.from_dict(json.loads(json.dumps(dataclasses.asdict(trace)))) == trace
    changed = Trace.from_json(text)
    changed.passes[2].ir += "\n# edited"
    assert changed != trace  # equality really compares the records


def test_diff_shows_tile_ops_lowered(gemm_kernel):
    trace = gemm_kernel.trace
    diff = trace.diff("tilelab.CheckFragmentReads", "tilelab.LowerTileOpsToLoops")
    lines = diff.splitlines()
    assert lines[0].startswith("--- tilelab.CheckFragmentReads")
    assert lines[1].startswith("+++ tilelab.LowerTileOpsToLoops")
    removed = [ln for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    added = [ln for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    for op in ("T.tile.copy", "T.tile.gemm", "T.tile.fill"):
        assert any(op in ln for ln in removed), op
    assert not any("T.tile." in ln for ln in added)
    assert any("for " in ln for ln in added)
    # by index too, and an unchanged pass has an empty diff
    assert trace.diff(2, 3) == diff
    assert trace.diff("tilelab.FrontEnd", "tilelab.CheckFragmentReads") == ""


def test_first_change_of(gemm_kernel):
    trace = gemm_kernel.trace
    assert trace.first_change_of("a_shared") == "tilelab.LowerTileOpsToLoops"
    assert trace.first_change_of("blockIdx") == "tilelab.KernelToCPULoops"
    assert trace.first_change_of("no_such_buffer_anywhere") is None


def test_kernel_lower_and_jit_expose_the_trace(gemm_kernel):
    program = make_gemm(40, 24, 20)
    lowered = tilelab.lower(program)
    assert isinstance(lowered, Trace)
    assert lowered.pass_names() == gemm_kernel.trace.pass_names()
    assert lowered.ir_after("tilelab.FrontEnd") == gemm_kernel.trace.ir_after("tilelab.FrontEnd")

    a, b = torch.randn(50), torch.randn(50)
    eager_trace = eager_add.lower(a, b)
    assert isinstance(eager_trace, Trace) and eager_trace.kernel == "eager_add"
    assert "(50,)" in eager_trace.ir_after("tilelab.FrontEnd")
    assert eager_add.compile(a, b).trace is eager_trace or \
        eager_add.compile(a, b).trace == eager_trace
    assert tilelab.lower(eager_add, a, b).pass_names() == eager_trace.pass_names()

    factory_trace = scale_factory.lower(70)
    assert factory_trace.kernel == "scale"
    assert "T.float32(5.0)" in factory_trace.ir_after("tilelab.FrontEnd")
    assert factory_trace.pass_names()[:6] == ["tilelab.FrontEnd", *TILE_PASSES]
    check_gemm(gemm_kernel)


def test_trace_keeps_the_llvm_ir(gemm_kernel):
    code = gemm_kernel.trace.code.get("llvm", "")
    assert "define" in code and "gemm_nt" in code


def test_get_kernel_source(gemm_kernel):
    source = gemm_kernel.get_kernel_source()
    assert source.strip() and "gemm_nt" in source


def test_each_record_is_the_ir_after_its_pass(gemm_kernel):
    trace = gemm_kernel.trace
    assert '"target"' in trace.ir_after("tilelab.LowerTileOpsToLoops")
    assert '"target"' in trace.ir_after("tilelab.CheckFragmentReads")
    diff = trace.diff("tilelab.CheckFragmentReads", "tilelab.LowerTileOpsToLoops")
    assert "T.func_attr" not in diff


# ---------------------------------------------------------------- the compile cache


def test_compiling_twice_hits_the_cache(isolated_cache):
    first = tilelab.compile(make_gemm(40, 24, 20))
    assert first.trace.cache_hit is False
    assert list(isolated_cache.rglob("kernel.so")), "nothing was written to the cache"
    second = tilelab.compile(make_gemm(40, 24, 20))
    assert second.trace.cache_hit is True
    assert second.trace.pass_names() == first.trace.pass_names()
    assert [p.ir for p in second.trace.passes] == [p.ir for p in first.trace.passes]
    check_gemm(second)
    # a different program is a different entry
    other = tilelab.compile(make_gemm(40, 24, 12))
    assert other.trace.cache_hit is False
    check_gemm(other, K=12)


def test_tilelab_compile_can_be_called_twice():
    """Regression: `tilelab.compile` was shadowed by the submodule tilelab/compile.py."""
    first = tilelab.compile(make_scale(64))
    second = tilelab.compile(make_scale(64))
    assert not first.trace.cache_hit and second.trace.cache_hit
    assert callable(tilelab.compile) and callable(tilelab.jit)


@pytest.mark.parametrize("first", ["tilelab.compile", "tilelab.PassConfigKey",
                                   "tilelab.Trace", "tilelab.lower"])
def test_lazy_exports_survive_submodule_imports(first):
    """Regression: touching one lazy export imported a submodule named like another one
    (tilelab/jit.py, tilelab/compile.py), which then replaced that export."""
    code = textwrap.dedent(f"""
        import types
        import tilelab
        {first}
        exports = {{n: getattr(tilelab, n) for n in ("jit", "compile", "lower")}}
        print(sorted(n for n, v in exports.items() if isinstance(v, types.ModuleType)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


WARM_SCRIPT = '''
import json
import time

import torch

import tilelab
import tilelab.language as T


def make_triple(N):
    @T.prim_func
    def triple(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(T.ceildiv(N, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < N:
                    B[bx * 32 + i] = A[bx * 32 + i] * 3.0

    return triple


if __name__ == "__main__":
    program = make_triple(100)
    start = time.perf_counter()
    kernel = tilelab.compile(program)
    seconds = time.perf_counter() - start
    a = torch.randn(100)
    b = torch.empty(100)
    kernel(a, b)
    print(json.dumps({"cache_hit": kernel.trace.cache_hit, "seconds": seconds,
                      "correct": bool(torch.allclose(b, a * 3))}))
'''


def test_a_fresh_process_starts_warm(tmp_path, isolated_cache):
    script = tmp_path / "warm_kernel.py"
    script.write_text(WARM_SCRIPT)
    spec = importlib.util.spec_from_file_location("warm_kernel", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cold = tilelab.compile(module.make_triple(100))
    assert cold.trace.cache_hit is False

    env = {k: v for k, v in os.environ.items() if k != "TILELAB_DISABLE_CACHE"}
    env["TILELAB_CACHE_DIR"] = str(isolated_cache)

    def run_fresh_process() -> dict:
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    def entries() -> int:
        return sum(1 for p in isolated_cache.glob("*/*") if p.is_dir())

    result = run_fresh_process()
    if not result["cache_hit"] and entries() == 2:
        # The key names the compiler's source, hashed once per process: if tilelab/ was
        # edited since this process hashed it, the keys differ. Then a second fresh
        # process must hit the entry the first one wrote.
        result = run_fresh_process()
    assert result["cache_hit"] is True, f"{result}; {entries()} cache entries"
    assert result["correct"] is True, result
    assert result["seconds"] < 0.5, f"warm compile took {result['seconds']:.3f} s (goal 0.05 s)"


def test_a_corrupt_kernel_is_rebuilt(isolated_cache):
    first = tilelab.compile(make_scale(100))
    assert not first.trace.cache_hit
    [library] = isolated_cache.rglob("kernel.so")
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    library.unlink()  # a new file: never rewrite a library in place
    library.write_bytes(bytes(data))

    with pytest.warns(CacheCorruptionWarning):
        rebuilt = tilelab.compile(make_scale(100))
    assert rebuilt.trace.cache_hit is False
    a, b = torch.randn(100), torch.empty(100)
    rebuilt(a, b)
    torch.testing.assert_close(b, a * 3)

    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheCorruptionWarning)
        again = tilelab.compile(make_scale(100))  # the rebuilt entry is sound
    assert again.trace.cache_hit is True
    b2 = torch.empty(100)
    again(a, b2)
    torch.testing.assert_close(b2, a * 3)


def test_warm_compile_is_fast_in_process(isolated_cache):
    tilelab.compile(make_scale(100))
    start = time.perf_counter()
    kernel = tilelab.compile(make_scale(100))
    seconds = time.perf_counter() - start
    assert kernel.trace.cache_hit
    assert seconds < 0.5
    assert isinstance(kernel.trace.compile_seconds, float)
    assert kernel.trace.compile_seconds <= seconds


def test_diff_keeps_last_lines_apart():
    """IR text without a trailing newline must not glue '-y' and '+z' into one line."""
    trace = Trace(kernel="k", target="cpu", passes=[
        PassRecord("a", "x\ny", True, 0.0, "tvm"), PassRecord("b", "x\nz", True, 0.0, "tvm")])
    assert trace.diff("a", "b").splitlines()[-2:] == ["-y", "+z"]
