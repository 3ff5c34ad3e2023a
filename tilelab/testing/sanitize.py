"""NVIDIA compute-sanitizer over every course kernel, suite kernel and a sample of programs.

    python -m tilelab.testing.sanitize [--tools memcheck,racecheck,synccheck,initcheck]
                                       [--programs 20] [--seed 0] [--only NAME,...] [--list]
                                       [--artifacts]

For each tool, one child process per group of kernels runs under
`compute-sanitizer --tool TOOL`: the course examples (each example's own
`check("cuda")`, which compiles in process and launches its kernel at shapes
with tails), the GPU suite's checks (`bench/gpu_suite.py`, each kernel once on
fresh inputs, its PyTorch reference computed on the CPU so that no library kernel
runs in its window) and `--programs` generated programs
(`tilelab.testing.generator`, compared with the CPU backend as difftest does).
With `--artifacts` only the suite's checks run, loaded as `bench/gpu_suite.py
build` exported them, so a GPU machine without TVM can be checked too.
The child prints a marker
line before each kernel and synchronizes after it, so every report the
sanitizer prints is charged to the kernel that was running; after a kernel that
loses the CUDA context (an illegal access), the rest run in a fresh child. The parent
prints, per tool, the number of reports and the kernels they came from, and
ends with one line:

    sanitize: memcheck 0, racecheck 0, synccheck 0, initcheck 0 reports (N kernels)

Reports are counted from the sanitizer's record lines (`========= Invalid
__global__ read ...`, `========= Error: Race reported between ...`); its own
summary line (`ERROR SUMMARY: n errors`) is taken when it says more (records
past `--print-limit` are not printed). Listing kernels, building the command
lines and parsing need no GPU (tests/test_sanitize.py checks them).

racecheck loses the order of a barrier once the threads meeting at it have handed
something over with `bar.arrive`: scripts/racecheck_bar_arrive.cu, two warpgroups
passing turns and then exchanging rows of a shared tile across `bar.sync`, gets
thousands of RAW reports with `bar.arrive` and none when the same hand-over is a
`bar.sync`, with the same results. tilelab's kernels hand turns over that way where two
consumer warpgroups take turns at the tensor cores (FlashAttention's default for
128-row blocks). The child says which kernels do (`hands-over`), and racecheck's
reports in them are counted apart and do not fail the run; the same kernel compiled
with `tl.enable_warpgroup_turns=False` keeps the rest of its synchronization and is
checked as any other (the suite's `_ws` checks).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SANITIZER = "/usr/local/cuda/bin/compute-sanitizer"
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
MARKER = "@@tilelab-sanitize"
# records printed per child: a report is charged to its kernel only if printed, and
# racecheck prints one per hazard - thousands for one launch (the suite's three checks with
# warpgroup turns together about 11,000 on an H100), a few hundred bytes each
PRINT_LIMIT = 100000
GROUPS = ("examples", "suite", "generated", "artifacts")


# ---------------------------------------------------------------- the kernels


def example_names() -> list[str]:
    """Course examples: every script in examples/ that has a `check(device)`."""
    names = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.stem in ("__init__", "common"):
            continue
        if re.search(r"^def check\(device", path.read_text(), re.M):
            names.append(path.stem)
    return names


def _gpu_suite():
    """bench/gpu_suite.py, imported from the repository's root (bench is no package of
    tilelab's)."""
    sys.path.insert(0, str(ROOT))
    try:
        from bench import gpu_suite
    finally:
        sys.path.remove(str(ROOT))
    return gpu_suite


def suite_names() -> list[str]:
    """The GPU suite's checks (bench/gpu_suite.py CHECKS), by name."""
    return [case[0] for case in _gpu_suite().CHECKS]


def _exported_checks() -> dict | None:
    """The suite's checks that `bench/gpu_suite.py build` exported, name -> its manifest
    entry (None: none built)."""
    import json

    manifest = _gpu_suite().ARTIFACTS / "manifest.json"
    if not manifest.exists():
        return None
    return {case["name"]: case for case in json.loads(manifest.read_text())["checks"]}


def artifact_names() -> list[str] | None:
    checks = _exported_checks()
    return None if checks is None else list(checks)


def generated_names(seed: int, count: int) -> list[str]:
    return [f"{seed}_{i}" for i in range(count)]


def list_kernels(seed: int = 0, programs: int = 20) -> dict[str, list[str]]:
    return {"examples": example_names(), "suite": suite_names(),
            "generated": generated_names(seed, programs)}


# ---------------------------------------------------------------- command lines


def sanitizer_command(tool: str, group: str, names: list[str],
                      sanitizer: str = SANITIZER, python: str = sys.executable) -> list[str]:
    """compute-sanitizer running this module's child mode over `names` of `group`."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}; choose from {', '.join(TOOLS)}")
    command = [sanitizer, "--tool", tool, "--print-limit", str(PRINT_LIMIT)]
    if tool == "racecheck":
        command += ["--racecheck-report", "all"]  # hazards, not only the analysis summary
    return command + [python, "-m", "tilelab.testing.sanitize", "--child", group,
                      "--names", ",".join(names)]


# ---------------------------------------------------------------- parsing


_PREFIX = "========= "
_NOT_A_REPORT = re.compile(
    r"^(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|Target application "
    r"returned|Saved host backtrace|Internal Sanitizer Error|This tool is deprecated)")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
# racecheck's: "RACECHECK SUMMARY: 30 hazards displayed (2049 errors, 0 warnings)"
_RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, "
                                r"(\d+) warnings?\)")
# Not a kernel's fault: PyTorch and the CUDA runtime ask the driver for entry points it may
# not have (cuGetProcAddress answers "named symbol not found" by design); memcheck reports
# each such call as an API error. They are counted apart and do not fail the run.
_HOST_PROBE = re.compile(r"Program hit \S+ .* on CUDA API call to cuGetProcAddress")


@dataclass
class Report:
    kernel: str
    text: list = field(default_factory=list)  # the record's lines, without the prefix

    @property
    def title(self) -> str:
        return self.text[0] if self.text else ""

    @property
    def details(self) -> list[str]:
        """The record's lines after its title: memcheck's `at ... in file:line` frame and
        the thread that made the access, racecheck's two accesses (each thread and the
        instruction's offset in the kernel, for `nvdisasm` of the cubin)."""
        return [line.strip() for line in self.text[1:]]


@dataclass
class ToolRun:
    tool: str
    reports: list = field(default_factory=list)
    summary_total: int = 0  # what the sanitizer's summary lines add up to
    probes: int = 0  # driver entry-point probes (_HOST_PROBE), not kernel errors
    started: list = field(default_factory=list)  # kernels the child began
    failed: dict = field(default_factory=dict)  # kernel -> the child's error line
    finished: bool = False  # the child reached its end
    hands_over: list = field(default_factory=list)  # kernels with bar.arrive hand-overs

    @property
    def count(self) -> int:
        return max(len(self.reports), self.summary_total - self.probes)

    def apart(self) -> list[Report]:
        """racecheck's reports in kernels that hand turns over with bar.arrive (see the
        module's docstring): counted apart, not failing the run."""
        if self.tool != "racecheck":
            return []
        return [r for r in self.reports if r.kernel in self.hands_over]

    def by_kernel(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.reports:
            counts[r.kernel] = counts.get(r.kernel, 0) + 1
        return counts


def parse(output: str, tool: str) -> ToolRun:
    """Sanitizer records and the child's markers, from the combined output of one run.

    A record starts at a prefixed line whose text is not indented (`========= Invalid
    __global__ write of size 4 bytes`) and goes on over the indented lines after it
    (`=========     at kernel+0x20 in file.cu:6`) until a blank prefixed line or the
    next record. Lines before the first marker are charged to "(startup)".
    """
    run = ToolRun(tool)
    kernel = "(startup)"
    current: Report | None = None
    for raw in output.splitlines():
        line = raw.rstrip("\n")
        if line.startswith(MARKER):
            current = None
            words = line[len(MARKER):].strip().split(" ", 2)
            if words[0] == "kernel" and len(words) > 1:
                kernel = words[1]
                run.started.append(kernel)
            elif words[0] == "failed" and len(words) > 1:
                run.failed[words[1]] = words[2] if len(words) > 2 else ""
            elif words[0] == "hands-over" and len(words) > 1:
                run.hands_over.append(words[1])
            elif words[0] == "done":
                run.finished = True
            continue
        if not line.startswith("========="):
            continue
        text = line[len("========="):]
        summary = _SUMMARY.search(text)
        racecheck_summary = _RACECHECK_SUMMARY.search(text)
        if summary or racecheck_summary:
            run.summary_total += (int(summary.group(1)) if summary else
                                  sum(int(n) for n in racecheck_summary.groups()))
            current = None
            continue
        if not text.strip():
            current = None
            continue
        body = text[1:] if text.startswith(" ") else text
        if body.startswith(" ") and current is not None:  # an indented continuation
            current.text.append(body.rstrip())
            continue
        if body.startswith(" ") or _NOT_A_REPORT.match(body):
            current = None
            continue
        if _HOST_PROBE.match(body):
            run.probes += 1
            current = None
            continue
        current = Report(kernel, [body.rstrip()])
        run.reports.append(current)
    return run


# ---------------------------------------------------------------- the child


def _say(*words):
    print(MARKER, *words, flush=True)


def _run_example(name: str):
    import importlib

    from ..kernel import JITFunction, ShapedKernel

    sys.path.insert(0, str(ROOT))
    module = importlib.import_module(f"examples.{name}")
    module.check("cuda")
    # the kernels its check compiled, kept by its jitted functions
    return [kernel for jitted in vars(module).values()
            if isinstance(jitted, (JITFunction, ShapedKernel)) for kernel in jitted.compiled]


def _run_suite(name: str):
    import torch

    gpu_suite = _gpu_suite()
    case = next(c for c in gpu_suite.CHECKS if c[0] == name)
    _, kind, sizes, inputs, reference, tolerance = case[:6]
    kernel = gpu_suite.compile_kernel(kind, sizes, {})
    torch.manual_seed(0)
    _check_against_pytorch(kernel, gpu_suite.make_inputs(inputs), reference, tolerance)
    return [kernel]


def _run_artifact(name: str):
    """A suite check as `bench/gpu_suite.py build` exported it: no compiler needed."""
    import torch

    import tilelab

    gpu_suite = _gpu_suite()
    case = _exported_checks()[name]
    kernel = tilelab.load(gpu_suite.ARTIFACTS / case["artifact"])
    torch.manual_seed(0)
    _check_against_pytorch(kernel, gpu_suite.make_inputs(case["inputs"]), case["reference"],
                           case["tolerance"])
    return [kernel]


def _check_against_pytorch(kernel, tensors, reference: str, tolerance: float):
    import torch

    gpu_suite = _gpu_suite()
    out = kernel(*tensors)
    out = tensors[-1] if out is None else out
    torch.cuda.synchronize()
    # the reference runs on the CPU: a library's GPU kernels (cuBLAS's Hopper GEMMs) would
    # run inside this kernel's window, and their reports would be charged to it
    expected = gpu_suite.references()[reference](*(t.cpu().float() for t in tensors))
    error = (out.cpu().float() - expected.float()).abs().max().item()
    if not error <= tolerance * (1 + expected.float().abs().max().item()):
        raise AssertionError(f"max |error| {error:.3g} against PyTorch")


def _run_generated(name: str):
    import tempfile

    from .difftest import check_program
    from .generator import generate

    seed, index = (int(x) for x in name.split("_"))
    with tempfile.TemporaryDirectory() as tmp:
        outcome = check_program(generate(seed, index), "cuda", Path(tmp))
    if outcome.status != "ok":
        raise AssertionError(f"{outcome.status} on {outcome.where}: {outcome.message}")
    return [outcome.kernels["cuda"]]


_RUNNERS = {"examples": _run_example, "suite": _run_suite, "generated": _run_generated,
            "artifacts": _run_artifact}


def child(group: str, names: list[str]) -> int:
    """Run each kernel of the group in turn; a failure is reported and the next one runs."""
    import torch

    for name in names:
        _say("kernel", name)
        try:
            kernels = _RUNNERS[group](name)  # the kernels it ran
            torch.cuda.synchronize()
            # tilelab.cuh's turn_pass is the one bar.arrive tilelab emits
            if any("tl::turn_pass" in kernel.get_kernel_source() for kernel in kernels):
                _say("hands-over", name)
        except Exception as err:  # noqa: BLE001 - the parent reports it; go on
            message = " ".join(str(err).split())[:300]
            _say("failed", name, f"{type(err).__name__}: {message}")
    _say("done")
    return 0


# ---------------------------------------------------------------- the parent


# A failure that leaves the process's CUDA context unusable: every later kernel of that
# child would fail the same way, so the rest run in a new child.
_CONTEXT_LOST = re.compile(r"illegal (memory )?(access|address|instruction)|unspecified launch "
                           r"failure|misaligned address|LaunchFailure|context is destroyed",
                           re.IGNORECASE)


def _run_child(tool: str, group: str, names: list, sanitizer: str, timeout: float):
    command = sanitizer_command(tool, group, names, sanitizer)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=ROOT)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode(errors="replace") if isinstance(
            err.stdout, bytes) else (err.stdout or "")
        output += f"\n{MARKER} failed {group}-timeout after {timeout:.0f} s\n"
    return parse(output, tool), output


def _lost_at(run: ToolRun, names: list) -> int | None:
    """Index of the kernel after which this child's results mean nothing more: the first
    whose failure lost the CUDA context, or the last started if the child died."""
    for i, name in enumerate(names):
        if _CONTEXT_LOST.search(run.failed.get(name, "")):
            return i
    if not run.finished and run.started and run.started[-1] in names:
        return names.index(run.started[-1])
    return None


def run_tool(tool: str, kernels: dict, sanitizer: str, timeout: float) -> ToolRun:
    """One sanitizer run per group (a new child after a kernel loses the CUDA context);
    the runs of a tool are merged."""
    merged = ToolRun(tool, finished=True)
    for group, names in kernels.items():
        remaining, started, count, ran = list(names), time.perf_counter(), 0, 0
        while remaining:
            run, output = _run_child(tool, group, remaining, sanitizer, timeout)
            lost = _lost_at(run, remaining)
            if lost is not None and lost < len(remaining) - 1:
                judged = set(remaining[:lost + 1])  # later kernels go to a new child
                rest = len(remaining) - lost - 1
                print(f"    {remaining[lost]} lost the CUDA context; the {rest} kernels after "
                      "it run in a new child", flush=True)
                run.reports = [r for r in run.reports if r.kernel in judged or
                               r.kernel == "(startup)"]
                run.summary_total = 0  # the summary counted the others too: records count
                run.failed = {k: v for k, v in run.failed.items() if k in judged}
                run.started = [k for k in run.started if k in judged]
                run.finished = True
                remaining = remaining[lost + 1:]
            else:
                remaining = []
                if not run.finished:
                    tail = "\n    ".join(output.strip().splitlines()[-8:])
                    print(f"    the child stopped early; its last lines:\n    {tail}")
            count += run.count
            ran += len(run.started)
            merged.reports += run.reports
            merged.summary_total += run.summary_total
            merged.probes += run.probes
            merged.started += run.started
            merged.failed.update(run.failed)
            merged.hands_over += run.hands_over
            merged.finished &= run.finished
        if names:
            print(f"  {tool:9} {group:9} {ran:3}/{len(names)} kernels, {count} reports, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    return merged


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--programs", type=int, default=20, help="generated programs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated programs")
    parser.add_argument("--only", help="comma-separated kernel names to run (any group)")
    parser.add_argument("--sanitizer", default=SANITIZER)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per child run")
    parser.add_argument("--artifacts", action="store_true",
                        help="only the suite's checks, as `bench/gpu_suite.py build` exported "
                             "them (bench/artifacts/suite): no compiler needed here")
    parser.add_argument("--list", action="store_true", help="list the kernels and commands")
    parser.add_argument("--child", choices=GROUPS, help=argparse.SUPPRESS)
    parser.add_argument("--names", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        return child(args.child, [n for n in args.names.split(",") if n])
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    for tool in tools:
        if tool not in TOOLS:
            parser.error(f"unknown tool {tool!r}; choose from {', '.join(TOOLS)}")
    if args.artifacts:
        names = artifact_names()
        if names is None:
            parser.error("no exported suite kernels: run `python bench/gpu_suite.py build` "
                         "(where TVM is) and bring bench/artifacts/suite here")
        kernels = {"artifacts": names}
    else:
        kernels = list_kernels(args.seed, args.programs)
    if args.only:
        wanted = set(args.only.split(","))
        kernels = {g: [n for n in names if n in wanted] for g, names in kernels.items()}
    total = sum(len(v) for v in kernels.values())
    if args.list:
        for group, names in kernels.items():
            print(f"{group}: {', '.join(names)}")
        for tool in tools:
            for group, names in kernels.items():
                if names:
                    print(" ".join(sanitizer_command(tool, group, names, args.sanitizer)))
        return 0
    if not Path(args.sanitizer).exists():
        print(f"compute-sanitizer not found at {args.sanitizer}; pass --sanitizer PATH")
        return 2
    counts, apart, problems = {}, {}, 0
    for tool in tools:
        print(f"{tool}:", flush=True)
        run = run_tool(tool, kernels, args.sanitizer, args.timeout)
        set_apart = run.apart()
        apart[tool] = len(set_apart)
        counts[tool] = run.count - apart[tool]
        kernels_apart = {r.kernel for r in set_apart}
        for kernel, n in sorted(run.by_kernel().items()):
            first = next(r for r in run.reports if r.kernel == kernel)
            aside = " (bar.arrive hand-overs: counted apart)" if kernel in kernels_apart else ""
            print(f"    {kernel}: {n} report(s){aside}; first: {first.title}")
            for line in first.details[:4]:
                print(f"        {line}")
        for kernel, message in run.failed.items():
            print(f"    {kernel}: did not finish: {message}")
        if run.probes:
            print(f"    ({run.probes} driver entry-point probes by the host, not counted)")
        problems += len(run.failed) + (not run.finished)
    summary = ", ".join(f"{tool} {counts[tool]}" + (
        f" (+{apart[tool]} in kernels handing turns over with bar.arrive)" if apart[tool]
        else "") for tool in tools)
    print(f"sanitize: {summary} reports ({total} kernels"
          f"{f', {problems} runs failed' if problems else ''})")
    return 1 if any(counts.values()) or problems else 0


if __name__ == "__main__":
    sys.exit(main())
