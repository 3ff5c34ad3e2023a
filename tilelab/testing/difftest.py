"""Differential testing: generated programs on the CPU backend against CUDA.

    python -m tilelab.testing.difftest --count N --seed S [--target cpu|cuda] [--jobs J]
                                       [--save DIR] [--family hopper|roles|attention]
                                       [--pass-configs JSON]

Each program `i` of seed `S` (see `generator`) is written as a Python module,
compiled through `tilelab.compile` for both backends, and checked twice:

1. the CPU backend (the reference semantics) against the generator's own
   torch reading of the program: this catches CPU bugs;
2. with `--target cuda` (on a GPU machine), the CUDA kernel against the CPU
   backend on the same inputs, element by element, within a tolerance set by
   the least precise type the program uses. With `--target cpu` the CUDA
   kernel is only compiled (nvcc, sm_90a), which still catches compile errors.

`--family hopper` draws only the generator's TMA-shaped GEMMs, `--family roles` the same
GEMMs with warp roles written by hand (`T.ws`, mbarriers, `T.tma_copy`), `--family
attention` FlashAttention's forward loop (two T.gemm with an online softmax between), and
`--pass-configs` compiles the CUDA side with settings (say
`{"tl.force_warp_specialized": true}`), to reach paths the defaults take rarely.
A program the generator deems valid that fails to compile on either backend
is a bug too. Every failure is shrunk (delta debugging over steps, sizes,
types and expressions) to a small program with the same symptom, printed,
and with `--save DIR` written as a regression test module. A worker process
that dies (a crash in native code) takes the programs it had in flight with it:
each of them is checked again in a process of its own, so a crash is a finding
like any other. The last line is always `difftest: N programs, M mismatches,
E compile errors` (and `, W worker deaths not reproduced` when a worker died
and none of its programs fails alone).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

from .generator import FAMILIES, FLOATS, Program, generate, validate

COMPILE_ONLY_ARCH = "cuda:sm_90a"


# ---------------------------------------------------------------- one program


def load_module(path: Path):
    """Import a program module from its file (the front end reads kernels' source there)."""
    name = f"_tilelab_difftest_{path.stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_inputs(p: Program):
    """Fresh random inputs for every tensor (outputs start at zero), fixed by the seed."""
    import torch

    gen = torch.Generator().manual_seed(p.seed * 1_000_003 + p.index)
    tensors = {}
    for t in p.tensors:
        shape, dtype = p.tensor_shape(t["kind"]), getattr(torch, t["dtype"])
        if t["output"]:
            tensors[t["name"]] = torch.zeros(shape, dtype=dtype)
        elif t["dtype"] in FLOATS:
            tensors[t["name"]] = torch.randn(shape, generator=gen).to(dtype)
        else:
            tensors[t["name"]] = torch.randint(-4, 5, shape, generator=gen, dtype=dtype)
    return tensors


_FLOAT16_MAX = 65504.0


def _has_float16(p: Program) -> bool:
    return any(b["dtype"] == "float16" for b in p.tensors + p.buffers)


def compare(p: Program, actual: dict, expected: dict, what: str) -> str | None:
    """None when every output agrees within the program's tolerance, else what differs."""
    import torch

    tol = p.tolerance()
    for name, want in expected.items():
        got = actual[name].detach().cpu().double()
        want = want.detach().cpu().double()
        if torch.isnan(got).any() and not torch.isnan(want).any():
            return f"{what}: {name} holds NaN"
        # equal values agree, infinities included (inf - inf would be NaN); elsewhere the
        # tolerance scales with the largest finite expected value, or, where larger, with
        # the element's size: the largest magnitude it was computed from
        # (Program.reference), which exceeds the values where terms cancelled
        err = torch.where(got == want, 0.0, (got - want).abs())
        finite = want[torch.isfinite(want)]
        scale = finite.abs().max().item() if finite.numel() else 0.0
        size = p.output_sizes.get(name)
        size = torch.zeros_like(want) if size is None else \
            torch.nan_to_num(size.double(), nan=0.0, posinf=0.0)
        limit = tol * (1 + torch.clamp(size, min=scale))
        # the reference computes in float64; a backend that multiplies float16 operands in
        # float16 overflows where a partial result passed float16's largest value: there
        # an infinity is that type's answer, not a wrong one
        if size.numel() and _FLOAT16_MAX < size.max().item() and _has_float16(p):
            err = torch.where(torch.isinf(got) & (size > _FLOAT16_MAX), 0.0, err)
        excess = torch.where(err <= limit, 0.0, err / limit.clamp(min=1e-300))
        if excess.max().item() > 0 or torch.isnan(err).any():
            excess = torch.nan_to_num(excess, nan=float("inf"))
            flat = int(excess.reshape(-1).argmax())
            index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), err.shape))
            return (f"{what}: {name}{list(index)} is {got.reshape(-1)[flat].item():.6g}, "
                    f"expected {want.reshape(-1)[flat].item():.6g} (|err| "
                    f"{err.reshape(-1)[flat].item():.3g} > {limit.reshape(-1)[flat].item():.3g}; "
                    f"{int((err > limit).sum())} of {err.numel()} elements)")
    return None


class Outcome:
    """What checking one program found: status ok | mismatch | compile_error; `kernels`,
    the kernels it compiled by backend (for a caller that looks at their code)."""

    def __init__(self, status: str, message: str = "", where: str = "", kernels=None):
        self.status, self.message, self.where = status, message, where
        self.kernels = kernels or {}

    @property
    def signature(self) -> tuple:
        """What a shrunk program must keep: the kind of failure, where it showed and, for
        an error, its message without paths and numbers (another error is another bug)."""
        if self.status == "mismatch":
            return self.status, self.where, self.message.startswith("crashed")
        text = re.sub(r"\S+\.py:\d+:\d+: ", "", self.message)
        return self.status, self.where, re.sub(r"\d+", "#", text)[:120]

    def __repr__(self) -> str:
        return f"Outcome({self.status}, {self.where}: {self.message})"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


# An illegal memory access leaves a process's CUDA context unusable: every later launch
# fails with the same error. After one, this process checks programs in fresh child
# processes (`--one`), so that each is judged on its own.
_CONTEXT_LOST = False


def check_program(p: Program, target: str, workdir: Path, module_path: Path | None = None,
                  attempt: int = 0) -> Outcome:
    """Compile `p` for both backends, run what this machine can, compare."""
    global _CONTEXT_LOST
    import tilelab

    if target == "cuda" and _CONTEXT_LOST:
        return _check_in_child(p, module_path, target)

    if module_path is None:
        module_path = workdir / f"{p.name}_{attempt}.py"
        module_path.write_text(p.source())
    cuda_target = "cuda" if target == "cuda" else COMPILE_ONLY_ARCH
    kernels = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backend, name in (("cpu", "cpu"), ("cuda", cuda_target)):
            configs = cuda_pass_configs() if backend == "cuda" else None
            try:
                kernels[backend] = tilelab.compile(load_module(module_path).make(), target=name,
                                                   pass_configs=configs)
            except Exception as err:  # noqa: BLE001 - every failure is a finding
                return Outcome("compile_error", _first_line(err), backend)
    inputs = make_inputs(p)
    expected = p.reference(inputs)
    cpu = {k: v.clone() for k, v in inputs.items()}
    try:
        kernels["cpu"](*cpu.values())
    except Exception as err:  # noqa: BLE001
        return Outcome("mismatch", "crashed: " + _first_line(err), "cpu")
    message = compare(p, cpu, expected, "CPU backend vs torch")
    if message:
        return Outcome("mismatch", message, "cpu")
    if target == "cuda":
        import torch

        gpu = {k: v.cuda() for k, v in inputs.items()}
        try:
            kernels["cuda"](*gpu.values())
            torch.cuda.synchronize()
        except Exception as err:  # noqa: BLE001
            _CONTEXT_LOST = True
            return Outcome("mismatch", "crashed: " + _first_line(err), "cuda")
        message = compare(p, gpu, {k: cpu[k] for k in expected}, "CUDA vs CPU backend")
        if message:
            return Outcome("mismatch", message, "cuda")
    return Outcome("ok", kernels=kernels)


CONFIGS_VARIABLE = "TILELAB_DIFFTEST_PASS_CONFIGS"  # --pass-configs, for workers and children


def cuda_pass_configs() -> dict:
    """The pass configs the CUDA side compiles with (`--pass-configs`, as JSON): to check
    a path the defaults take rarely, `{"tl.force_warp_specialized": true}` say."""
    import json

    return json.loads(os.environ.get(CONFIGS_VARIABLE) or "{}")


def _check_in_child(p: Program, module_path: Path | None, target: str) -> Outcome:
    """Check `p` in a fresh process of its own: a crash there is this program's alone."""
    import json
    import subprocess

    command = [sys.executable, "-m", "tilelab.testing.difftest", "--one", p.to_json(),
               "--target", target]
    if module_path is not None:
        command += ["--module", str(module_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Outcome("mismatch", f"crashed: the checking process failed "
                                   f"(exit status {done.returncode}): {tail}", target)
    return Outcome(**json.loads(lines[-1]))


def _one(program_json: str, module: str | None, target: str) -> int:
    """Child mode: check one program in this fresh process; print the outcome."""
    import json

    with tempfile.TemporaryDirectory(prefix="tilelab-difftest-") as tmp:
        outcome = check_program(Program.from_json(program_json), target, Path(tmp),
                                module_path=Path(module) if module else None)
    print(json.dumps({"status": outcome.status, "message": outcome.message,
                      "where": outcome.where}))
    return 0


# ---------------------------------------------------------------- shrinking


def _without_unused(p: Program) -> Program:
    """Drop tensors and buffers that no step mentions."""
    from .generator import _used_buffers

    q = p.clone()
    used = _used_buffers(q)
    named = set()
    for step in q.steps:
        for key in ("src", "dst", "A", "B", "flag"):
            if isinstance(step.get(key), str):
                named.add(step[key])
    q.buffers = [b for b in q.buffers if b["name"] in used]
    q.tensors = [t for t in q.tensors if t["name"] in named]
    return q


def _subexpressions(expr):
    if expr is None or expr[0] in ("ld", "c", "ix"):
        return []
    return [part for part in expr[2:] if isinstance(part, list)]


def _expr_edits(expr):
    """Expressions one step simpler: a subexpression in place of the whole, recursively."""
    yield from _subexpressions(expr)
    for i, part in enumerate(expr or []):
        if isinstance(part, list) and part[0] not in ("ld", "c", "ix"):
            for smaller in _expr_edits(part):
                yield expr[:i] + [smaller] + expr[i + 1:]


# the options of each kind of step, and their plainest value (None: leave the option out)
_PLAIN = {"load": (("shift", None),), "ew": (("flag", None), ("guard", None), ("tmp", None)),
          "gemm": (("stages", 1), ("clear_accum", None), ("a_frag", None), ("policy", "Square")),
          "ksum": (("stages", 1),), "atomic": (("sliced", None),), "attn": (("q_frag", None),)}


def candidates(p: Program):
    """Smaller variants of `p`, the biggest cuts first (delta debugging)."""
    steps = p.steps
    n = len(steps)
    chunk = n // 2
    while chunk >= 1:  # remove runs of steps
        for start in range(0, n, chunk):
            q = p.clone()
            q.steps = steps[:start] + steps[start + chunk:]
            yield q
        chunk //= 2
    for attr, block in (("M", p.bm), ("N", p.bn), ("K", p.bk)):  # smaller tensors
        value = getattr(p, attr)
        for smaller in sorted({1, block, block + 1, value // 2}):
            if 0 < smaller < value:
                q = p.clone()
                setattr(q, attr, smaller)
                yield q
    if not any(s["op"] == "gemm" for s in steps):
        for dtype in sorted(p.dtypes() - {"float32"}):  # a plainer type
            q = p.clone()
            for item in q.tensors + q.buffers:
                if item["dtype"] == dtype:
                    item["dtype"] = "int32" if dtype == "int32" else "float32"
            if q.dtypes() != p.dtypes():
                yield q
        for threads in (32, 64, 128):
            if threads < p.threads:
                q = p.clone()
                q.threads = threads
                yield q
    for i, step in enumerate(steps):  # plainer steps: options back to their defaults
        for key, plain in _PLAIN.get(step["op"], ()):
            if key in step and step[key] != plain:
                q = p.clone()
                if plain is None:
                    del q.steps[i][key]
                else:
                    q.steps[i][key] = plain
                yield q
        for smaller in _expr_edits(step.get("expr")):
            q = p.clone()
            q.steps[i]["expr"] = smaller
            yield q


def shrink(p: Program, failure: Outcome, check, budget_s: float = 180.0) -> tuple:
    """Delta debugging: keep any smaller valid variant that fails the same way."""
    deadline = time.monotonic() + budget_s
    best, outcome = _without_unused(p), failure
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for q in candidates(best):
            if time.monotonic() > deadline:
                break
            if not validate(q):
                continue
            q = _without_unused(q)
            try:
                result = check(q)
            except Exception:  # noqa: BLE001 - a variant the harness cannot run is no lead
                continue
            if result.signature == failure.signature:
                best, outcome, improved = q, result, True
                break
    return best, outcome


# ---------------------------------------------------------------- saving


def regression_source(p: Program, outcome: Outcome) -> str:
    """A regression test module: the program, its symptom, and how it was found."""
    header = (f"# Found by: python -m tilelab.testing.difftest --seed {p.seed} "
              f"(program {p.index}), then shrunk.\n"
              f"# Symptom ({outcome.status} on {outcome.where}): {outcome.message}\n"
              "# tests/test_difftest.py runs it on the CPU, and on CUDA when a GPU is present.\n")
    return header + p.source()


def save(p: Program, outcome: Outcome, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"seed{p.seed}_{p.index}.py"
    path.write_text(regression_source(p, outcome))
    return path


# ---------------------------------------------------------------- driver


def _init_worker(cache_dir: str, threads: int | None = None):
    os.environ["TILELAB_CACHE_DIR"] = cache_dir
    warnings.simplefilter("ignore")
    if threads:  # one thread per worker: J workers on J cores, not J x cores threads
        import torch

        torch.set_num_threads(threads)


def run_one(args: tuple) -> dict:
    """Generate, check and (on failure) shrink program `index`: what a worker does.
    `args`: (seed, index, target, shrink seconds[, family])."""
    seed, index, target, shrink_budget, *family = args
    p = generate(seed, index, *family)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tilelab-difftest-") as tmp:
        workdir = Path(tmp)
        try:
            outcome = check_program(p, target, workdir)
        except Exception:  # noqa: BLE001 - a harness bug must not stop the run
            return {"index": index, "status": "harness_error",
                    "message": traceback.format_exc(), "seconds": 0.0}
        attempts = iter(range(1, 10**6))
        return _result(p, outcome, started, shrink_budget, lambda q: check_program(
            q, target, workdir, attempt=next(attempts)))


def run_alone(args: tuple) -> dict:
    """Program `index` checked in a child process of its own, and shrunk the same way:
    for the programs a worker had in flight when it died."""
    seed, index, target, shrink_budget, *family = args
    p = generate(seed, index, *family)
    started = time.perf_counter()
    outcome = _check_in_child(p, None, target)
    return _result(p, outcome, started, shrink_budget,
                   lambda q: _check_in_child(q, None, target))


def _result(p: Program, outcome: Outcome, started: float, shrink_budget: float,
            check) -> dict:
    result = {"index": p.index, "status": outcome.status, "message": outcome.message,
              "where": outcome.where, "seconds": time.perf_counter() - started}
    if outcome.status != "ok" and shrink_budget > 0:
        small, small_outcome = shrink(p, outcome, check, shrink_budget)
        result.update(program=small.to_json(), shrunk_message=small_outcome.message,
                      steps=(len(p.steps), len(small.steps)))
    return result


def in_workers(work: list, jobs: int, cache_dir: str, run=run_one, alone=run_alone):
    """`run` over `work` in `jobs` worker processes, results as they come.

    A worker can die in native code (a signal, a heap corruption), which ends the
    pool and fails every program in flight. Those are then checked again, each in
    a child process of its own (`alone`), so the one that crashes is reported
    as such and the others are judged on their own; a fresh pool goes on."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    def new_pool():
        return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=(cache_dir, 1))

    todo, running, pool, deaths = list(reversed(work)), {}, new_pool(), 0
    try:
        while todo or running:
            while todo and len(running) < 2 * jobs:
                item = todo.pop()
                running[pool.submit(run, item)] = item
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            lost = []
            for future in finished:
                item = running.pop(future)
                try:
                    yield future.result()
                except BrokenProcessPool:
                    lost.append(item)
            if lost:
                lost += running.values()
                running.clear()
                pool.shutdown(cancel_futures=True)
                pool, deaths = new_pool(), deaths + 1
                print(f"a worker died; its {len(lost)} programs in flight are checked "
                      "again, each in a process of its own", flush=True)
                for item in sorted(lost, key=lambda item: item[1]):
                    yield {**alone(item), "worker_died": deaths}
    finally:
        # programs still running when the time ran out are not counted: stop them
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)


def main(argv=None) -> int:
    """The command line. Run in a caller's process (as the tests do), it leaves the
    environment and the warning filters as it found them: its cache folder is gone after."""
    environment = dict(os.environ)
    try:
        with warnings.catch_warnings():
            return _main(argv)
    finally:
        os.environ.clear()
        os.environ.update(environment)


def _main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first program index")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--save", type=Path, help="write shrunk failures here as regression tests")
    parser.add_argument("--shrink-seconds", type=float, default=180.0,
                        help="time allowed to shrink each failure (0: do not shrink)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop taking programs after this long, and still end with the "
                             "summary (a GPU slot that ends keeps its count)")
    parser.add_argument("--family", choices=list(FAMILIES[1:]), default="",
                        help="only programs of this family (tilelab.testing.generator: "
                             "'hopper', GEMMs that sm_90a feeds to wgmma by TMA; 'threads', "
                             "code written for one thread)")
    parser.add_argument("--pass-configs", metavar="JSON",
                        help='pass configs of the CUDA compiles, e.g. '
                             '\'{"tl.force_warp_specialized": true}\'')
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child mode: a program as JSON
    parser.add_argument("--module", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pass_configs is not None:
        import json

        json.loads(args.pass_configs)  # a mistake stops here, not in every worker
        os.environ[CONFIGS_VARIABLE] = args.pass_configs
    if args.one:
        return _one(args.one, args.module, args.target)

    # workers still compiling when --seconds ends may write into it while it is removed
    cache = tempfile.TemporaryDirectory(prefix="tilelab-difftest-cache-",
                                        ignore_cleanup_errors=True)
    _init_worker(cache.name)
    work = [(args.seed, i, args.target, args.shrink_seconds, args.family)
            for i in range(args.start, args.start + args.count)]
    started = time.perf_counter()
    if args.jobs > 1:
        for name in ("OMP_NUM_THREADS", "TVM_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")  # the workers inherit it when they start
        runs = in_workers(work, args.jobs, cache.name)
    else:
        runs = map(run_one, work)
    try:
        results = _collect(_report(runs, args), args, started)
    finally:
        getattr(runs, "close", lambda: None)()
    seconds = time.perf_counter() - started
    cache.cleanup()
    mismatches = sum(r["status"] in ("mismatch", "harness_error") for r in results)
    errors = sum(r["status"] == "compile_error" for r in results)
    done = {r["index"] for r in results}
    last = args.start
    while last in done:
        last += 1
    family = f"family {args.family}, " if args.family else ""
    print(f"{family}seed {args.seed}, programs {args.start}..{last - 1} all checked"
          f"{f' ({len(done)} in all)' if len(done) != last - args.start else ''}, "
          f"target {args.target}: {len(results) / seconds:.2f} programs/s with {args.jobs} "
          f"job(s) ({seconds:.0f} s)")
    # a worker that died while none of its programs fails alone is still a finding
    unexplained = {r["worker_died"] for r in results if "worker_died" in r} - {
        r["worker_died"] for r in results if "worker_died" in r and r["status"] != "ok"}
    deaths = f", {len(unexplained)} worker deaths not reproduced" if unexplained else ""
    print(f"difftest: {len(results)} programs, {mismatches} mismatches, {errors} compile "
          f"errors{deaths}")
    return 1 if mismatches or errors or unexplained else 0


def _collect(results, args, started) -> list:
    """The results as they come, a progress line every 100, until `--seconds` have passed."""
    collected = []
    for r in results:
        collected.append(r)
        if len(collected) % 100 == 0:
            bad = sum(x["status"] != "ok" for x in collected)
            print(f"progress: {len(collected)} programs, {bad} failed "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
        if args.seconds is not None and time.perf_counter() - started > args.seconds:
            print(f"stopped after {args.seconds:.0f} s (--seconds)", flush=True)
            break
    return collected


def _report(results, args):
    """Print each failure as it arrives (with its shrunk program), and pass results on."""
    for r in results:
        if r["status"] != "ok":
            label = r["status"].upper().replace("_", " ")
            print(f"{label} seed={args.seed} index={r['index']} on {r.get('where', '?')}: "
                  f"{r['message']}", flush=True)
            if "program" in r:
                p = Program.from_json(r["program"])
                print(f"  shrunk from {r['steps'][0]} to {r['steps'][1]} steps: "
                      f"{r['shrunk_message']}")
                if args.save:
                    outcome = Outcome(r["status"], r["shrunk_message"], r["where"])
                    print(f"  saved {save(p, outcome, args.save)}")
                else:
                    print("  " + p.source().split("def make():")[1].strip().replace(
                        "\n", "\n  "))
        yield r


if __name__ == "__main__":
    sys.exit(main())
