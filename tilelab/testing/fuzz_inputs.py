"""Fuzz tilelab with bad input: mutated course kernels and wrong calls (issue 12).

    python -m tilelab.testing.fuzz_inputs --count 1000 --seed 0

Two kinds of cases, all on the CPU backend:

* **mutated programs**: the source of a course kernel (`examples/*.py`) with one
  random change to its body (a constant, an operator, an index shifted by one, a
  statement deleted or repeated, a block size or thread count changed...), run
  through the example's own `check()`, which compares with PyTorch on fresh
  inputs. Some changes keep the meaning (`+ 0`, `if True:`, an unused variable):
  those programs must pass `check()`, or fail with a `TileLabError`.
* **call-time cases**: a course kernel called with a wrong dtype, shape, rank,
  device, contiguity, keyword, size, or an empty, read-only or meta tensor;
  each must give a `TileLabError` (a well-formed call must give PyTorch's result).

The judge, per case: no crash (each batch runs in its own process), no hang (a
time limit per case), no raw traceback (an exception that is not a
`TileLabError`, or one whose message shows TVM's internals), no silently wrong
result (a meaning-preserving mutation that compiles must give the right answer).
The report counts each outcome; any failure is listed with its program.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
# cheap kernels are mutated more often than the slow ones (GEMM, attention on the CPU)
KERNELS = {"vector_add": 4, "row_sum": 4, "softmax": 3, "online_softmax": 2, "rms_norm": 3,
           "layer_norm": 2, "gemm": 1, "gemm_bias_relu": 1}
INTERNALS = ("Check failed", "tvm/", "Traceback", "site-packages", "tvm_ffi", "libtvm")
CASE_SECONDS = 120


# ---------------------------------------------------------------- mutations


def _kernel_defs(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and any(
        "jit" in ast.unparse(d) for d in n.decorator_list)]


def _statements(fn):
    out = []
    for node in ast.walk(fn):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and node is not fn or field == "body" and node is fn:
                out += [(block, i) for i in range(len(block or []))]
    return [(b, i) for b, i in out if isinstance(b, list)]


def _pick(rng, items):
    return rng.choice(items) if items else None


def mutate(source: str, rng: random.Random) -> tuple[str, str, bool]:
    """One random change to a kernel body: (new source, description, meaning kept?)."""
    tree = ast.parse(source)
    fn = _pick(rng, _kernel_defs(tree))
    kinds = ["constant", "operator", "index", "delete", "repeat", "compare", "call_arg",
             "keep_plus_zero", "keep_if_true", "keep_unused"]
    for _ in range(20):
        kind = rng.choice(kinds)
        backup = copy.deepcopy(fn)
        done = _apply(kind, fn, rng)
        if done:
            text = ast.unparse(tree)
            try:
                compile(text, "<mutant>", "exec")
            except SyntaxError:  # not a Python program (a repeated keyword...): try again
                fn.__dict__.update(backup.__dict__)
                continue
            return text, f"{fn.name}: {done}", kind.startswith("keep")
    return source, f"{fn.name}: unchanged", True


def _apply(kind, fn, rng):  # noqa: C901 - one branch per kind of change
    nodes = list(ast.walk(fn))
    body_nodes = [n for n in nodes if n is not fn]
    if kind == "constant":
        consts = [n for n in body_nodes if isinstance(n, ast.Constant) and
                  isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]
        node = _pick(rng, consts)
        if node is None:
            return None
        old = node.value
        node.value = rng.choice([0, -1, 1, 2, 3, 7, 31, 33, 100, 1025, 4096, 10**6, 2**31,
                                 old + 1, old - 1, old * 2, 0.5, -0.0])
        return f"constant {old!r} -> {node.value!r}"
    if kind == "operator":
        ops = [n for n in body_nodes if isinstance(n, ast.BinOp)]
        node = _pick(rng, ops)
        if node is None:
            return None
        old = type(node.op).__name__
        node.op = rng.choice([ast.Add(), ast.Sub(), ast.Mult(), ast.Div(), ast.FloorDiv(),
                              ast.Mod(), ast.Pow(), ast.BitXor(), ast.LShift()])
        return f"operator {old} -> {type(node.op).__name__}"
    if kind == "compare":
        comps = [n for n in body_nodes if isinstance(n, ast.Compare)]
        node = _pick(rng, comps)
        if node is None:
            return None
        node.ops = [rng.choice([ast.Lt(), ast.LtE(), ast.Gt(), ast.GtE(), ast.Eq(),
                                ast.NotEq()])]
        return f"comparison -> {type(node.ops[0]).__name__}"
    if kind == "index":
        subs = [n for n in body_nodes if isinstance(n, ast.Subscript)]
        node = _pick(rng, subs)
        if node is None:
            return None
        shift = rng.choice([-1, 1, 2, -100, 1000])
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else None
        if elts:
            i = rng.randrange(len(elts))
            if isinstance(elts[i], ast.Slice):
                return None
            elts[i] = ast.BinOp(elts[i], ast.Add(), ast.Constant(shift))
        elif not isinstance(node.slice, ast.Slice):
            node.slice = ast.BinOp(node.slice, ast.Add(), ast.Constant(shift))
        else:
            return None
        return f"index {ast.unparse(node)} shifted by {shift}"
    if kind in ("delete", "repeat"):
        spots = [(b, i) for b, i in _statements(fn) if b is not fn.body or i > 0]
        spot = _pick(rng, spots)
        if spot is None:
            return None
        block, i = spot
        stmt = block[i]
        if kind == "delete":
            if len(block) == 1:
                block[i] = ast.Pass()
            else:
                del block[i]
        else:
            block.insert(i, copy.deepcopy(stmt))
        return f"{kind} `{ast.unparse(stmt).splitlines()[0]}`"
    if kind == "call_arg":
        calls = [n for n in body_nodes if isinstance(n, ast.Call) and (n.args or n.keywords)]
        node = _pick(rng, calls)
        if node is None:
            return None
        choice = rng.random()
        if choice < 0.4 and node.args:
            node.args.pop(rng.randrange(len(node.args)))
        elif choice < 0.7:
            node.keywords.append(ast.keyword(rng.choice(["threads", "dim", "clear", "msg",
                                                         "num_stages", "bogus"]),
                                             ast.Constant(rng.choice([True, -1, 0, 2000, "x",
                                                                      1.5]))))
        else:
            node.args.append(ast.Constant(rng.choice([0, -8, 3, 1.5, "s", None])))
        return f"call changed: {ast.unparse(node)[:80]}"
    if kind == "keep_plus_zero":
        stores = [n for n in body_nodes if isinstance(n, ast.Assign) and
                  isinstance(n.targets[0], ast.Subscript)]
        node = _pick(rng, stores)
        if node is None:
            return None
        node.value = ast.BinOp(node.value, ast.Add(), ast.Constant(0))
        return f"`+ 0` added to `{ast.unparse(node)[:60]}`"
    if kind == "keep_if_true":
        spot = _pick(rng, [(b, i) for b, i in _statements(fn) if b is not fn.body])
        if spot is None:
            return None
        block, i = spot
        block[i] = ast.If(ast.Constant(True), [block[i]], [])
        return f"`if True:` around `{ast.unparse(block[i].body[0]).splitlines()[0]}`"
    if kind == "keep_unused":
        spot = _pick(rng, [(b, i) for b, i in _statements(fn) if b is not fn.body])
        if spot is None:
            return None
        block, i = spot
        block.insert(i, ast.parse("_fuzz_unused = 3 * 7").body[0])
        return "an unused variable added"
    return None


def mutated_programs(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    names = [n for n, w in KERNELS.items() for _ in range(w)]
    sources = {n: (EXAMPLES / f"{n}.py").read_text() for n in KERNELS}
    cases = []
    for k in range(count):
        name = rng.choice(names)
        text, what, keeps = mutate(sources[name], rng)
        cases.append({"id": f"program-{k}", "kind": "program", "example": name,
                      "source": text, "mutation": what, "keeps_meaning": keeps})
    return cases


# ---------------------------------------------------------------- call-time cases

CALLS = [  # (example, kernel, expression of the arguments, well-formed?)
    ("vector_add", "vector_add_kernel", "torch.randn(100), torch.randn(100)", True),
    ("vector_add", "vector_add_kernel", "torch.randn(100), torch.randn(100).double()", False),
    ("vector_add", "vector_add_kernel", "torch.randn(100), torch.randn(99)", False),
    ("vector_add", "vector_add_kernel", "torch.randn(100), torch.randn(10, 10)", False),
    ("vector_add", "vector_add_kernel", "torch.randn(100), torch.randn(200)[::2]", False),
    ("vector_add", "vector_add_kernel", "torch.randn(0), torch.randn(0)", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.empty(8, device='meta')", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), torch.randn(8)", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8)", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), [1.0] * 8", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), None", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), bogus=1", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), block_size=0", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), block_size=-4", False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), block_size=True",
     False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), block_size=2.5",
     False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), block_size=10**6",
     False),
    ("vector_add", "vector_add_kernel", "torch.randn(8), torch.randn(8), block_size='x'", False),
    ("vector_add", "vector_add_kernel", "ro(8), ro(8)", False),
    ("vector_add", "vector_add_kernel", "np.ones(8, np.float32), np.ones(8, np.float32)", True),
    ("vector_add", "vector_add_kernel", "torch.randn(8, dtype=torch.complex64), "
     "torch.randn(8, dtype=torch.complex64)", False),
    ("vector_add", "vector_add_kernel", "torch.ones(8, dtype=torch.bool), "
     "torch.ones(8, dtype=torch.bool)", False),
    ("row_sum", "row_sum_kernel", "torch.randn(29, 50)", True),
    ("row_sum", "row_sum_kernel", "torch.randn(29, 50), block_m=0", False),
    ("row_sum", "row_sum_kernel", "torch.randn(4, 0)", False),
    ("row_sum", "row_sum_kernel", "torch.randn(29)", False),
    ("row_sum", "row_sum_kernel", "torch.randn(29, 50).t()", False),
    ("row_sum", "row_sum_kernel", "torch.randn(29, 50), out=torch.zeros(29)", False),
    ("softmax", "softmax_kernel", "torch.randn(4, 0, dtype=torch.float16)", False),
    ("softmax", "softmax_kernel", "torch.randn(6, 70, dtype=torch.float16)", True),
    ("softmax", "softmax_kernel", "torch.randn(6, 70)", False),
    ("softmax", "softmax_kernel", "torch.randn(6, 70, dtype=torch.float16), threads=True",
     False),
    ("softmax", "softmax_kernel", "torch.randn(6, 70, dtype=torch.float16), threads=4096",
     False),
    ("softmax", "softmax_kernel", "torch.randn(6, 70, dtype=torch.float16), threads=0", False),
    ("softmax", "softmax_kernel", "torch.randn(6, 70, dtype=torch.float16), block_m=100000",
     False),
    ("softmax", "softmax_kernel.compile", "M=-5, N=8", False),
    ("softmax", "softmax_kernel.compile", "M=2**31, N=8", False),
    ("softmax", "softmax_kernel.compile", "M=True, N=8", False),
    ("softmax", "softmax_kernel.compile", "M=4, N=8, K=3", False),
    ("rms_norm", "rms_norm_kernel", "torch.randn(5, 64, dtype=torch.float16), "
     "torch.randn(64, dtype=torch.float16)", True),
    ("rms_norm", "rms_norm_kernel", "torch.randn(5, 64, dtype=torch.float16), "
     "torch.randn(65, dtype=torch.float16)", False),
    ("rms_norm", "rms_norm_kernel", "torch.randn(5, 64, dtype=torch.float16), "
     "torch.randn(64, dtype=torch.float16), eps='x'", False),
    ("gemm", "gemm_kernel", "torch.randn(64, 0, dtype=torch.float16), "
     "torch.randn(0, 64, dtype=torch.float16)", False),
    ("gemm", "gemm_kernel", "torch.randn(64, 32, dtype=torch.float16), "
     "torch.randn(31, 64, dtype=torch.float16)", False),
]


def call_cases(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed + 1)
    cases = []
    for k in range(count):
        example, kernel, args, ok = CALLS[k] if k < len(CALLS) else rng.choice(CALLS)
        cases.append({"id": f"call-{k}", "kind": "call", "example": example, "kernel": kernel,
                      "args": args, "well_formed": ok})
    return cases


# ---------------------------------------------------------------- running one case (worker)


def _judge_exception(err) -> str:
    from tilelab import TileLabError

    text = str(err)
    if isinstance(err, TileLabError):
        return "raw" if any(word in text for word in INTERNALS) else "error"
    return "raw"


def _run_program(case, workdir: Path) -> tuple[str, str]:
    import importlib

    name = f"fuzz_{case['example']}_{case['id'].replace('-', '_')}"
    path = workdir / f"{name}.py"
    path.write_text(case["source"])
    try:
        module = importlib.import_module(name)
        module.check("cpu")
    except AssertionError as err:  # check() found a different result
        if case["keeps_meaning"]:
            return "wrong", str(err)[:300]
        return "changed", ""  # a different program computes something else: expected
    except Exception as err:  # noqa: BLE001 - the judge looks at every exception
        outcome = _judge_exception(err)
        return outcome, f"{type(err).__name__}: {str(err)[:400]}"
    return "ran", ""


def _run_call(case) -> tuple[str, str]:
    import importlib

    import numpy as np
    import torch

    module = importlib.import_module(f"examples.{case['example']}")

    def ro(n):
        array = np.ones(n, np.float32)
        array.flags.writeable = False
        return array

    fn = eval(case["kernel"], vars(module))  # noqa: S307 - our own case table
    namespace = {"torch": torch, "np": np, "ro": ro}
    args, kwargs = eval(f"(lambda *a, **k: (a, k))({case['args']})", namespace)  # noqa: S307
    try:
        result = fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001
        outcome = _judge_exception(err)
        if outcome == "error" and case["well_formed"]:
            return "raw", f"a well-formed call failed: {err}"
        return outcome, f"{type(err).__name__}: {str(err)[:300]}"
    if not case["well_formed"]:
        return "accepted", "a wrong call was accepted"
    expected = module.reference(*[torch.as_tensor(a) for a in args])
    try:
        torch.testing.assert_close(torch.as_tensor(result), expected, rtol=1e-2, atol=1e-2)
    except AssertionError as err:
        return "wrong", str(err)[:300]
    return "ran", ""


def worker(batch_file: str, progress_file: str) -> None:
    import faulthandler
    import warnings

    warnings.simplefilter("ignore")
    cases = json.loads(Path(batch_file).read_text())
    workdir = Path(tempfile.mkdtemp(prefix="tilelab-fuzz-"))
    sys.path[:0] = [str(workdir), str(EXAMPLES), str(ROOT)]
    with open(progress_file, "a") as progress:
        for case in cases:
            progress.write(json.dumps({"id": case["id"], "start": True}) + "\n")
            progress.flush()
            faulthandler.dump_traceback_later(CASE_SECONDS, exit=True)  # a hang ends the worker
            started = time.perf_counter()
            if case["kind"] == "program":
                outcome, detail = _run_program(case, workdir)
            else:
                outcome, detail = _run_call(case)
            faulthandler.cancel_dump_traceback_later()
            progress.write(json.dumps({"id": case["id"], "outcome": outcome, "detail": detail,
                                       "seconds": round(time.perf_counter() - started, 2)})
                           + "\n")
            progress.flush()


# ---------------------------------------------------------------- the driver

FAILURES = ("crash", "hang", "raw", "wrong", "accepted")


def run(cases: list[dict], batch: int = 25, log=print) -> dict:
    """Run `cases` in worker processes of `batch` cases; returns counts and failures."""
    results: dict[str, dict] = {}
    pending = list(cases)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.setdefault("TILELAB_CACHE_DIR", tempfile.mkdtemp(prefix="tilelab-fuzz-cache-"))
    while pending:
        chunk, pending = pending[:batch], pending[batch:]
        with tempfile.TemporaryDirectory() as tmp:
            batch_file, progress_file = Path(tmp) / "batch.json", Path(tmp) / "progress.jsonl"
            batch_file.write_text(json.dumps(chunk))
            progress_file.write_text("")
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "tilelab.testing.fuzz_inputs",
                                   "--worker", str(batch_file), str(progress_file)],
                                  env=env, capture_output=True, text=True,
                                  timeout=CASE_SECONDS * len(chunk) + 60)
            last_started = None
            for line in progress_file.read_text().splitlines():
                record = json.loads(line)
                if record.get("start"):
                    last_started = record["id"]
                else:
                    results[record["id"]] = record
                    last_started = None
            if last_started is not None:  # the worker died inside this case
                hang = "Timeout" in proc.stderr or time.perf_counter() - started > CASE_SECONDS
                results[last_started] = {"id": last_started, "outcome": "hang" if hang
                                         else "crash", "detail": proc.stderr[-600:]}
                done = {c["id"] for c in chunk}
                rest = [c for c in chunk if c["id"] not in results and c["id"] in done]
                pending = rest + pending
        log(f"  {len(results)}/{len(cases)} cases judged")
    counts: dict[str, int] = {}
    for record in results.values():
        counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
    by_id = {c["id"]: c for c in cases}
    failures = [dict(by_id[r["id"]], **r) for r in results.values()
                if r["outcome"] in FAILURES]
    return {"counts": counts, "failures": failures, "cases": len(cases)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000, help="mutated programs")
    parser.add_argument("--calls", type=int, default=100, help="call-time cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=25, help="cases per worker process")
    parser.add_argument("--json", help="write the report here")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    started = time.perf_counter()
    cases = mutated_programs(args.count, args.seed) + call_cases(args.calls, args.seed)
    report = run(cases, args.batch)
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["command"] = " ".join(["python -m tilelab.testing.fuzz_inputs"] + (argv or
                                                                              sys.argv[1:]))
    print(json.dumps(report["counts"], sort_keys=True))
    for failure in report["failures"]:
        what = failure.get("mutation") or failure.get("args")
        print(f"FAIL {failure['id']} {failure['outcome']}: {what}\n    {failure['detail'][:300]}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
