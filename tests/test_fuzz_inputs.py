"""The fast part of the bad-input fuzzer (tilelab.testing.fuzz_inputs): a few dozen mutated
course kernels and every call-time case, judged for crashes, hangs, raw tracebacks and
silently wrong results. The long run: `python -m tilelab.testing.fuzz_inputs --count 1000`.
"""

import random

from tilelab.testing import fuzz_inputs


def test_mutations_change_the_source_and_say_how():
    rng = random.Random(0)
    source = (fuzz_inputs.EXAMPLES / "vector_add.py").read_text()
    changed = [fuzz_inputs.mutate(source, rng) for _ in range(20)]
    assert sum(text != source for text, _, _ in changed) >= 18
    assert all(what.startswith("vector_add_kernel: ") for _, what, _ in changed)


def test_fuzz_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path / "cache"))
    cases = fuzz_inputs.mutated_programs(16, seed=7) + \
        fuzz_inputs.call_cases(len(fuzz_inputs.CALLS), seed=7)
    report = fuzz_inputs.run(cases, batch=len(cases), log=lambda *_: None)
    assert sum(report["counts"].values()) == len(cases)
    assert report["failures"] == [], report["failures"]
    # every wrong call was refused with a TileLabError; the well-formed ones ran
    assert report["counts"].get("error", 0) >= sum(not ok for *_, ok in fuzz_inputs.CALLS)
