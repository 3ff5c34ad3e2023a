"""Differential testing: generated programs, the regression files it saved, and its parts.

* `test_difftest_cpu_batch` runs the CI-sized command: generated programs compiled for
  both backends (CUDA compile-only without a GPU) and run on the CPU against torch.
* `test_regression_*` runs every program in tests/difftest_regressions/ (each a shrunk
  failure, with its symptom in its header): on the CPU, and on CUDA when a GPU is present.
  A file may name a bug not fixed yet in `KNOWN_BUG = {"cuda": "why"}`; its test is then
  an expected failure, strict, so that the fix shows up as a test to update.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from tilelab.testing import difftest
from tilelab.testing.generator import Program, generate, validate

REGRESSIONS = sorted((Path(__file__).parent / "difftest_regressions").glob("*.py"))
CI_COUNT, CI_SEED = 24, 0


def test_generation_is_reproducible_and_valid():
    for index in range(150):
        p = generate(5, index)
        assert validate(p), p.to_json()
        assert p.source() == generate(5, index).source()
        ast.parse(p.source())
        assert Program.from_json(p.to_json()) == p
    assert generate(5, 0).source() != generate(5, 1).source()
    assert generate(5, 0).source() != generate(6, 0).source()


def test_generator_covers_the_language():
    """Over a few hundred programs every feature the brief lists appears."""
    text = "\n".join(generate(0, i).source() for i in range(300))
    for needle in ("T.float32", "T.float16", "T.bfloat16", "T.int32", "T.alloc_shared",
                   "T.alloc_fragment", "T.alloc_local", "[j, i]", "T.reduce_sum",
                   "T.reduce_max", "T.reduce_min", "T.reduce_abssum", "T.reduce_absmax",
                   "dim=0", "dim=1", "transpose_A=True", "transpose_B=True", "FullRow",
                   "FullCol", "clear_accum=True", "T.atomic_add", "if bx % 2 ==",
                   "T.if_then_else", "T.exp"):
        assert needle in text, needle
    for stages in range(1, 5):
        assert f"num_stages={stages}" in text
    assert re.search(r"T\.copy\(\w+\[\d+:\d+, \d+:\d+\], \w+\[\d+:\d+, \d+:\d+\]\)", text)
    assert re.search(r"\[by \* \d+ \+ [1-9]", text)  # a copy at a shifted region
    # a block-uniform branch on an element of an input (barriers may go inside it)
    assert re.search(r"if X\d+\[by \* \d+, bx \* \d+\] > 0:", text)
    # a serial loop over flags every thread keeps whole, a branch on each (block-uniform)
    assert re.search(r"T\.copy\(X\d+\[by \* 4\], (f\d+)\)", text)
    assert re.search(r"for k in T\.serial\(4\):\n\s+if f\d+\[k\] > 0:", text)


def _selects(expr):
    if expr[0] in ("ld", "c", "ix"):
        return
    if expr[0] == "sel":
        yield expr
    for part in expr[2:]:
        if isinstance(part, list):
            yield from _selects(part)


def test_a_masked_loop_never_branches_on_values_it_computed():
    """A step applied once per set flag reads, on its second pass, values it computed on the
    first: a select on them could go either way within rounding. Seed 5001's program 131 had
    `s0 = s0 - (... if s0 > 0 ...) + k` in such a loop and the CPU backend, rounding each
    fp16 operation, took the other side from the float64 reference (|err| 2.5)."""
    masked = 0
    for seed, index in [(5001, 131)] + [(7, i) for i in range(300)]:
        for step in generate(seed, index).steps:
            if step.get("mask"):
                masked += 1
                for sel in _selects(step["expr"]):
                    assert sel[2][:2] != ["ld", step["dst"]], (seed, index, step)
    assert masked > 10
    step = next(s for s in generate(5001, 131).steps if s.get("mask"))
    assert [sel[2] for sel in _selects(step["expr"])] == [["ix", "i"], ["ix", "i"]]


def test_reference_reads_programs_as_the_cpu_backend_runs_them(tmp_path):
    """A dozen programs of another seed agree with the torch reading (CUDA not compiled)."""
    for index in range(12):
        p = generate(11, index)
        path = tmp_path / f"p{index}.py"
        path.write_text(p.source())
        import tilelab

        kernel = tilelab.compile(difftest.load_module(path).make(), target="cpu")
        inputs = difftest.make_inputs(p)
        expected = p.reference(inputs)
        kernel(*inputs.values())
        assert difftest.compare(p, inputs, expected, "cpu") is None, p.source()


def test_compare_reports_a_wrong_element():
    p = generate(3, 2)
    inputs = difftest.make_inputs(p)
    expected = p.reference(inputs)
    wrong = {name: value.clone() for name, value in expected.items()}
    name = next(iter(wrong))
    wrong[name].view(-1)[-1] += 1 + 10 * wrong[name].abs().max()
    message = difftest.compare(p, wrong, expected, "CUDA vs CPU backend")
    assert message and message.startswith(f"CUDA vs CPU backend: {name}[")
    assert difftest.compare(p, expected, expected, "same") is None


def test_compare_takes_equal_infinities_as_equal():
    """fp16 overflows to inf on both sides agree (inf - inf is NaN); an inf where a
    finite value was expected, or one of the wrong sign, does not."""
    import torch

    p = generate(3, 2)
    name = p.tensors[-1]["name"]
    want = torch.tensor([1.0, float("inf"), -float("inf"), 2.0])
    assert difftest.compare(p, {name: want.clone()}, {name: want}, "same") is None
    for bad in (float("inf"), -float("inf")):
        got = want.clone()
        got[0 if bad > 0 else 1] = bad
        assert difftest.compare(p, {name: got}, {name: want}, "CUDA vs CPU backend")


def test_an_infinity_past_float16s_range_is_that_types_answer(monkeypatch):
    """The reference computes in float64: where a partial result of an element passed
    float16's largest value (its size), a backend that multiplies float16 operands in
    float16 may answer inf (threads family seed 280, program 68: s * s of a tile holding
    362); an inf where every partial result was in range stays a mismatch."""
    import torch

    p = generate(3, 2)
    assert difftest._has_float16(p)
    name = p.tensors[-1]["name"]
    want = torch.tensor([364211.0, 2.0])
    got = torch.tensor([float("inf"), 2.0])
    monkeypatch.setattr(type(p), "output_sizes", {name: torch.tensor([131044.0, 2.0])})
    assert difftest.compare(p, {name: got}, {name: want}, "same") is None
    monkeypatch.setattr(type(p), "output_sizes", {name: torch.tensor([364211.0, 2.0])})
    assert difftest.compare(p, {name: got.flip(0)}, {name: want.flip(0)}, "CUDA vs CPU")
    got[0] = 1.0  # a finite wrong value is wrong whatever its size
    assert difftest.compare(p, {name: got}, {name: want}, "CUDA vs CPU")


def test_a_worker_that_dies_is_reported_and_the_rest_are_checked(tmp_path, monkeypatch):
    """A worker that aborts (as a heap corruption does) fails every program in flight;
    those are checked again one by one, the culprit is reported, and the run goes on
    in a fresh pool to the last program."""
    (tmp_path / "difftest_aborts_on_3.py").write_text(
        "import os\n"
        "def run(item):\n"
        "    if item[1] == 3:\n"
        "        os.abort()\n"
        "    return {'index': item[1], 'status': 'ok', 'message': '', 'where': ''}\n"
        "def alone(item):\n"
        "    bad = item[1] == 3\n"
        "    return {'index': item[1], 'status': 'mismatch' if bad else 'ok',\n"
        "            'message': 'crashed: SIGABRT' if bad else '', 'where': 'cpu'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import difftest_aborts_on_3 as crashy

    work = [(0, i, "cpu", 0) for i in range(10)]
    results = list(difftest.in_workers(work, 2, str(tmp_path), run=crashy.run,
                                       alone=crashy.alone))
    assert sorted(r["index"] for r in results) == list(range(10))
    failed = [r for r in results if r["status"] != "ok"]
    assert [(r["index"], r["worker_died"]) for r in failed] == [(3, 1)]


def test_a_program_checked_alone_in_a_child_process():
    result = difftest.run_alone((0, 0, "cpu", 0))
    assert result["index"] == 0 and result["status"] == "ok", result


def test_shrink_keeps_the_symptom_and_drops_the_rest():
    """With a stand-in check that fails whenever a reduction is present, the shrunk
    program keeps one reduction, what it needs, and one output."""
    p = next(q for q in (generate(0, i) for i in range(200))
             if any(s["op"] == "reduce" for s in q.steps) and len(q.steps) > 7)

    def check(q):
        failing = any(s["op"] == "reduce" for s in q.steps)
        return difftest.Outcome("mismatch" if failing else "ok", "stand-in", "cpu")

    small, outcome = difftest.shrink(p, check(p), check, budget_s=60)
    assert outcome.status == "mismatch" and validate(small)
    assert sum(s["op"] == "reduce" for s in small.steps) == 1
    assert len(small.steps) < len(p.steps) and len(small.steps) <= 4
    assert small.M <= p.M and small.N <= p.N


def test_difftest_cpu_batch(capsys):
    """The CI size: every program compiles for both backends and agrees with torch."""
    code = difftest.main(["--count", str(CI_COUNT), "--seed", str(CI_SEED), "--jobs", "2",
                          "--shrink-seconds", "0"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"difftest: {CI_COUNT} programs, 0 mismatches, 0 compile errors", \
        "\n".join(lines)
    assert code == 0


def test_pass_configs_reach_the_cuda_compiles(capsys, monkeypatch):
    """`--pass-configs` compiles the CUDA side with them, in the workers too (through the
    environment, which they inherit): here every loop a producer warp can run is split."""
    cache_before = os.environ.get("TILELAB_CACHE_DIR")
    monkeypatch.setenv(difftest.CONFIGS_VARIABLE, "")  # restored after the test
    forced = '{"tl.force_warp_specialized": true}'
    seen = []
    start_workers = difftest.in_workers

    def in_workers(*args):  # what the workers inherit when they start
        seen.append(difftest.cuda_pass_configs())
        return start_workers(*args)

    monkeypatch.setattr(difftest, "in_workers", in_workers)
    code = difftest.main(["--count", "6", "--seed", str(CI_SEED), "--jobs", "2",
                          "--shrink-seconds", "0", "--pass-configs", forced])
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        "difftest: 6 programs, 0 mismatches, 0 compile errors"
    assert code == 0 and seen == [{"tl.force_warp_specialized": True}]
    # the caller's environment is as it was: the configs and the (removed) cache folder gone
    assert difftest.cuda_pass_configs() == {}
    assert os.environ.get("TILELAB_CACHE_DIR") == cache_before
    with pytest.raises(ValueError):
        difftest.main(["--count", "1", "--pass-configs", "{not json"])


def test_the_hopper_family_reaches_tma_and_the_split(capsys, monkeypatch):
    """`--family hopper` draws GEMMs that sm_90a feeds to wgmma by TMA (most of them; the
    other programs almost never); with `tl.force_warp_specialized` many loops are split.
    Some walk the tiles with persistent blocks (T.Persistent), their producer running
    across tiles. A few of them compiled for sm_90a and run on the CPU against torch, as
    in CI."""
    import warnings

    import tilelab
    from tilelab.testing.generator import FAMILIES

    assert FAMILIES == ("", "hopper", "roles", "attention", "threads")
    programs = [generate(0, i, "hopper") for i in range(12)]
    assert all(p.family == "hopper" and p.name.startswith("difftest_hopper_0_")
               for p in programs)
    assert programs[3].source() == generate(0, 3, "hopper").source()
    assert Program.from_json(programs[3].to_json()).source() == programs[3].source()
    assert "T.Persistent(" in programs[0].source() and programs[0].walk
    tma = split = across = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in programs[:6]:
            kernel = tilelab.compile(_make(p), target="cuda:sm_90a",
                                     pass_configs={"tl.force_warp_specialized": True})
            tma += sum(bool(plan.get("tma")) for plan in kernel.trace.pipelines)
            split += sum("warp_specialized" in plan for plan in kernel.trace.pipelines)
            across += sum("across_tiles" in plan for plan in kernel.trace.pipelines)
    assert tma >= 4 and split >= 1 and across >= 1, (tma, split, across)
    monkeypatch.setenv(difftest.CONFIGS_VARIABLE, "")
    code = difftest.main(["--family", "hopper", "--count", "6", "--jobs", "2",
                          "--shrink-seconds", "0", "--pass-configs",
                          '{"tl.force_warp_specialized": true}'])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("family hopper, seed 0, programs 0..5 all checked")
    assert lines[-1] == "difftest: 6 programs, 0 mismatches, 0 compile errors"
    assert code == 0
    with pytest.raises(ValueError, match="no program family"):
        generate(0, 0, "ampere")


def test_the_roles_family_writes_warp_roles_by_hand(capsys):
    """`--family roles`: the hopper family's GEMMs with a producer warpgroup and a consumer
    role of one or two warpgroups written with T.ws, mbarriers and T.tma_copy into slotted
    tiles (or copied by the producer's threads), one consumer role or two that both take
    every slot, in either order of the block's numbering; most copies TMA's. A few compiled
    for sm_90a and run on the CPU against torch, as in CI."""
    import tilelab

    programs = [generate(0, i, "roles") for i in range(16)]
    assert all(p.family == "roles" and p.name.startswith("difftest_roles_0_")
               for p in programs)
    steps = [p.steps[0] for p in programs]
    assert {s["producer"] == 0 for s in steps} == {True, False}
    assert {len(s["consumer"]) for s in steps} == {1, 2}
    assert len({p.slots for p in programs}) >= 3
    assert all("with T.ws(" in p.source() for p in programs)
    by_threads = [p for p in programs if p.steps[0]["thread_copies"]]
    assert 0 < len(by_threads) < len(programs) // 2
    assert all(("T.tma_copy(" in p.source()) != (p in by_threads) for p in programs)
    two = [p for p in programs if p.steps[0].get("two_consumers")]  # a role per warpgroup
    assert two and all(p.source().count("with T.ws(") == 3 for p in two)
    tma = 0
    for p in programs[:4]:
        source = tilelab.compile(_make(p), target="cuda:sm_90a").get_kernel_source()
        tma += "tl::mbar_expect_tx" in source
        assert "tl::role_sync" in source or "tl::mbar_wait" in source
    assert tma >= 2, tma
    code = difftest.main(["--family", "roles", "--count", "6", "--jobs", "2",
                          "--shrink-seconds", "0"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("family roles, seed 0, programs 0..5 all checked")
    assert lines[-1] == "difftest: 6 programs, 0 mismatches, 0 compile errors"
    assert code == 0


def test_the_attention_family_splits_with_turns(capsys):
    """`--family attention`: FlashAttention's forward loop (two T.gemm, an online softmax
    between them), causal or not, tails in queries and keys. With the split forced and
    turns asked for, loops split, two-warpgroup blocks take turns and query blocks pair
    in clusters (here two pairs of them); a few run on the CPU against torch, as in CI
    (the H200 run compares them with CUDA)."""
    import warnings

    import tilelab

    programs = [generate(0, i, "attention") for i in range(24)]
    assert all(p.family == "attention" and p.grid[0] == 1 for p in programs)
    steps = [p.steps[0] for p in programs]
    assert {s["causal"] for s in steps} == {True, False}
    assert {p.threads for p in programs} == {128, 256}
    assert any(p.M % p.bm for p in programs) and any(p.N % p.bn for p in programs)
    assert generate(0, 4, "attention").source() == programs[4].source()
    configs = {"tl.force_warp_specialized": True, "tl.enable_warpgroup_turns": True}
    split = turns = pairs = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in [p for p in programs if p.threads == 256 and p.steps[0]["stages"] > 1][:2]:
            kernel = tilelab.compile(_make(p), target="cuda:sm_90a", pass_configs=configs)
            split += any("warp_specialized" in plan for plan in kernel.trace.pipelines)
            turns += "tl::turn_pass()" in kernel.get_kernel_source()
            # query blocks paired in clusters, more than one pair of them
            pairs += kernel.launch.get("cluster") == [1, 2, 1] and p.grid[1] >= 4
    assert split == 2 and turns >= 1 and pairs >= 1, (split, turns, pairs)
    code = difftest.main(["--family", "attention", "--count", "4", "--jobs", "2",
                          "--shrink-seconds", "0"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("family attention, seed 0, programs 0..3 all checked")
    assert lines[-1] == "difftest: 4 programs, 0 mismatches, 0 compile errors"
    assert code == 0


def test_the_attention_family_keeps_q_in_registers_now_and_then():
    """Some attention programs copy Q into a fragment once and multiply by it in every
    iteration (a loop-invariant register operand of wgmma: passes/keep_wgmma_operands.py)."""
    import tilelab

    programs = [generate(0, i, "attention") for i in range(24)]
    kept = [p for p in programs if "q_frag" in p.steps[0]]
    assert 0 < len(kept) < len(programs)
    assert f"T.gemm({kept[0].steps[0]['q_frag']}, " in kept[0].source()
    source = tilelab.compile(_make(kept[0]), target="cuda:sm_90a").get_kernel_source()
    assert "tl::keep_registers<" in source


def _make(p):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{p.name}.py"
        path.write_text(p.source())
        return difftest.load_module(path).make()


def test_a_time_budget_still_ends_with_the_summary(capsys):
    """--seconds stops taking programs; the summary counts those checked and says which."""
    code = difftest.main(["--count", "40", "--seed", "3", "--seconds", "0",
                          "--shrink-seconds", "0"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3] == "stopped after 0 s (--seconds)"
    assert lines[-2].startswith("seed 3, programs 0..0 all checked, target cpu")
    assert lines[-1] == "difftest: 1 programs, 0 mismatches, 0 compile errors"
    assert code == 0


def _check_regression(path: Path, target: str, tmp_path: Path):
    module = difftest.load_module(path)
    program = Program.from_json(module.SPEC)
    known = getattr(module, "KNOWN_BUG", {}).get(target)
    crash = getattr(module, "KNOWN_CRASH", {}).get(target)
    if crash:  # not run: an illegal access leaves the process's CUDA context unusable
        pytest.xfail(crash)
    outcome = difftest.check_program(program, target, tmp_path, module_path=path)
    if known:
        assert outcome.status != "ok", f"fixed? remove KNOWN_BUG[{target!r}] from {path.name}"
        pytest.xfail(known)
    assert outcome.status == "ok", outcome


@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_cpu(path, tmp_path):
    _check_regression(path, "cpu", tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("path", REGRESSIONS, ids=[p.stem for p in REGRESSIONS])
def test_regression_cuda(path, tmp_path):
    _check_regression(path, "cuda", tmp_path)


def test_the_threads_family_writes_code_for_one_thread(capsys):
    """`--family threads`: shared tiles rewritten element by element by thread code
    (`T.get_thread_binding`), some threads idle under an `if` on the index; against the
    generator's torch reading on the CPU and compiled for sm_90a, as in CI."""
    programs = [generate(0, i, "threads") for i in range(16)]
    assert all(p.family == "threads" and "T.get_thread_binding()" in p.source()
               for p in programs)
    assert any("if tx < " in p.source() for p in programs)
    assert all(validate(p) for p in programs)
    code = difftest.main(["--family", "threads", "--count", "6", "--jobs", "2",
                          "--shrink-seconds", "0"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("family threads, seed 0, programs 0..5 all checked")
    assert lines[-1] == "difftest: 6 programs, 0 mismatches, 0 compile errors"
    assert code == 0


def _guide_lane(mode, lane, b, width):
    """The lane CUDA's programming guide says `__shfl*_sync(mask, var, b, width)` reads, for
    the generator's PTX-rule model to agree with: srcLane modulo width in the caller's
    segment; delta lanes below or above it, the caller's own where that leaves the
    segment; lane xor laneMask, the caller's own where that lies in a later segment."""
    first, b = lane - lane % width, b % 32
    last = first + width - 1
    j = {"idx": first + b % width, "up": lane - b, "down": lane + b, "bfly": lane ^ b}[mode]
    return j if (mode == "up" and j >= first or mode != "up" and j <= last) else lane


def test_the_threads_family_shuffles_warps(capsys):
    """`--family threads` also writes warp shuffles (every spelling tilelab takes, widths 1
    to 32, in block-uniform loops, float32 and int32 registers), blocks of 1 to 4 warps and
    partial ones whose size every width divides, so that every lane read exists; the
    reference reads lanes by PTX's rule, independently of tilelab's lowering. A few of
    them against it on the CPU (and compiled for sm_90a)."""
    from tilelab.testing.generator import _SHUFFLE_MODE, _ptx_source

    for mode in set(_SHUFFLE_MODE.values()):
        for width in (1, 2, 4, 8, 16, 32):
            for lane in range(32):
                for b in range(-40, 70):
                    assert _ptx_source(mode, lane, b, width) == \
                        _guide_lane(mode, lane, b, width), (mode, width, lane, b)
    programs = [generate(0, i, "threads") for i in range(40)]
    shuffled = [p for p in programs if any(s["op"] == "shfl" for s in p.steps)]
    assert len(shuffled) >= 15 and all(validate(p) for p in shuffled)
    text = "\n".join(p.source() for p in shuffled)
    for call in ("T.shfl_xor(", "T.shfl_down(", "T.shfl_up(", "T.shfl_sync(",
                 "T.shfl_sync(0xFFFFFFFF, ", "T.tvm_warp_shuffle(", "T.tvm_warp_shuffle_up(",
                 "T.tvm_warp_shuffle_down(", "T.tvm_warp_shuffle_xor(", " >> r",
                 "for r in T.serial(", "T.int32)", "T.float32)"):
        assert call in text, call
    widths = {sh["width"] for p in shuffled for s in p.steps if s["op"] == "shfl"
              for item in s["body"] for sh in item["shuffles"]}
    assert widths == {1, 2, 4, 8, 16, 32}
    assert any(p.threads % 32 for p in shuffled) and all(p.threads <= 128 or p.threads == 256
                                                         for p in shuffled)
    wide = next(p for p in shuffled if any(
        sh["width"] > 8 for s in p.steps if s["op"] == "shfl" for item in s["body"]
        for sh in item["shuffles"]))
    wide.threads = 24  # a segment past the block's end: lanes CUDA leaves undefined
    assert not validate(wide)
    assert [p.index for p in programs[6:9]] == [6, 7, 8] and all(
        p in shuffled for p in programs[6:9])
    code = difftest.main(["--family", "threads", "--start", "6", "--count", "3", "--jobs", "2",
                          "--shrink-seconds", "0"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("family threads, seed 0, programs 6..8 all checked")
    assert lines[-1] == "difftest: 3 programs, 0 mismatches, 0 compile errors"
    assert code == 0
