"""Run the examples of a TileLang checkout on tilelab and write a compatibility table.

    python scripts/tilelang_examples.py PATH_TO_TILELANG_CHECKOUT [--timeout 60] [--only gemm]
        [--jobs 4] [--json rows.json] [--gpu-results rows_from_a_gpu_machine.json]
        [--update rows.json --only norm/ --only gemv/]

Each example file under `examples/` that defines a TileLang kernel and runs something
(a `main()`, a `__main__` block, or checks at its top level) is run in its own
process, as its author wrote it (`main()` called, or the file run as a script), with
these things changed around it (the file itself is not edited):

* `import tilelang` finds tilelab (`tilelab.compat.tilelang.install()`);
* sizes are cut down: integer defaults above 256 of `main()` and of its argparse
  options become 256, except block, thread, stage and split settings; so do such
  arguments a script's `__main__` block passes to the script's own functions (head
  dimensions kept);
* without a GPU, tensors the example puts on "cuda" stay on the CPU, so kernels
  run on tilelab's CPU backend, and its benchmarks (`do_bench`) make two timed
  calls after one warm-up; with a GPU they run there as written;
* without a GPU, the example's own code is told there is one (an H200: its name and
  compute capability too), so that examples which stop themselves without CUDA run
  their kernels, and an autotuner tries the first two of its configurations;
* without a GPU, references written in Triton (the example's own kernels, or
  flash-linear-attention's) run in Triton's interpreter (TRITON_INTERPRET=1), with
  what scripts/triton_interpreted.py changes there: each autotuned kernel in the first
  of its configurations, untimed; the libdevice functions the interpreter lacks as
  their `tl.math` twins; builtins imported under names of their own; bfloat16
  computed as numbers (the interpreter computes on its bit patterns).

Examples whose references need other packages say so ("needs a package"), but
for flash-attn, which installs only with CUDA: where it is missing, its two
attention functions come from scripts/flash_attn_standin.py (torch; the row says
so). The rows of `bench/results/tilelang_compat_cpu.json` were made with these
beside tilelab (`pip install --target DIR`, DIR on PYTHONPATH): triton 3.5.1 (3.7.0 for the
rows of gdn/, kda/ and linear_attention/: its interpreter runs linear attention's
references, and 3.9.0 refuses flash-linear-attention's autotuner keys),
flash-linear-attention and fla-core 0.4.2 (linear_attention/, deepseek_nsa/; for gdn/
the tree of flash-linear-attention's commit f03cb3ae, June 2025, which its examples name -
`git archive f03cb3ae fla` of its repository, with transformers 4.52.4, which it imports:
its functions took `scale` where 0.4.2 takes a new `g_gamma`), scipy, tqdm, einops; the
H200's own image has all but flash-linear-attention.

The example's own checks against its torch reference (`assert_close`,
`assert_allclose`, ...) decide "correct": an example that finishes but checks
nothing is reported as "ran, no check". A check that reports instead of failing
(`if torch.allclose(out, ref): print("match") else: print("mismatch")`, a printed
"Verification FAILED") is watched: where it reports a failure the row is WRONG.
Every kernel the example compiles is also compiled for CUDA sm_90a (compile
only) to fill the CUDA column. The table goes to `docs/TILELANG_COMPAT.md`. Run
on a GPU machine with `--json`, the rows say what the examples did there;
`--gpu-results` of that file fills the table's H200 column. Nothing of
TileLang's is copied into tilelab.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = re.compile(r"assert_close|assert_allclose|torch_assert_close|allclose|"
                    r"assert_(?:tensors_)?similar|"
                    r"\bassert\b.*(?:diff|err|close)", re.IGNORECASE)
KEEP = re.compile(r"block|thread|stage|split|warp|tile|group_size|panel|rep|warmup|iter",
                  re.IGNORECASE)
CUT = 256
# an example whose own code fails at that cut (its checks of its sizes, a split that no
# longer sums) is run again with larger sizes, then uncut
CUTS = (256, 1024, None)
# examples whose own reference is undefined at the first cut, though it runs: each starts
# at the cut named, and its row says why
FIRST_CUT = {
    "flash_decoding/example_gqa_decode.py": (
        1024, "cut to 256, its split reference divides by zero: each of its 16 splits holds "
        "16 keys, fewer than its 32-key block, so its loop over blocks never runs and every "
        "output is 0 / 0 (the kernel agreed with its other reference)"),
    "blocksparse_attention/example_tilelang_sparse_gqa_decode_varlen_mask.py": (
        1024, "cut to 256, most of its key splits hold none of the chosen blocks, and its "
        "combining kernel weighs each such split below the last one that has blocks by its "
        "log-sum of 0, exp2(0 - max), where the split should weigh nothing: the kernel "
        "computes that as written (4.8e-4 from torch evaluating the example's combine, "
        "0.03 from its reference), as TileLang's would"),
}
# a script's own functions take head dimensions (DQK=576, DV=512, d_v, dim) that its
# kernels are written for: a call from its `__main__` block keeps them
DIMS = re.compile(r"^d|dim", re.IGNORECASE)


KERNEL = re.compile(r"tilelang\.jit|T\.prim_func|^@(?:tl\.)?jit\b", re.MULTILINE)
MAIN = re.compile(r"^def main\(", re.MULTILINE)
RUNS = re.compile(rf"{MAIN.pattern}|^if __name__ == [\"']__main__[\"']", re.MULTILINE)


def is_example(text: str) -> bool:
    """A file that defines a TileLang kernel and does something when run: a `main()`, a
    `__main__` block, or a check of its own at the top level (TileLang's quickstart)."""
    import ast

    if not KERNEL.search(text):
        return False
    if RUNS.search(text):
        return True
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Expr) and CHECKS.search(ast.unparse(node)) for node in body)


def find_examples(checkout: Path, only: list[str] | None) -> list[Path]:
    """The example files under `examples/` (their tests and regression benchmarks left out),
    those whose path contains one of `only` where it is given."""
    found = []
    for path in sorted((checkout / "examples").rglob("*.py")):
        if path.name.startswith(("test_", "regression_")) or path.name == "__init__.py":
            continue
        if is_example(path.read_text(errors="replace")):
            if not only or any(part in str(path) for part in only):
                found.append(path)
    return found


# ---------------------------------------------------------------- inside the child process


def _cut(name: str, value):
    if CUT is not None and isinstance(value, int) and not isinstance(value, bool) and \
            value > CUT and not KEEP.search(name):
        return CUT
    return value


def _keep_tensors_on_cpu(examples: Path):
    """Without a GPU, `device="cuda"` means the CPU (tilelab then picks its CPU backend).
    The questions examples ask about the GPU are answered as on an H200: its name, its
    compute capability and, asked by the example's own code (a file under `examples`),
    whether there is one, which it is and its properties - so that an example which
    stops itself without CUDA runs its kernels; tilelab and torch are told the truth."""
    import torch

    def as_an_h200(name: str, answer):
        truth = getattr(torch.cuda, name)

        def ask(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            return answer if caller.startswith(str(examples)) else truth(*args, **kwargs)

        setattr(torch.cuda, name, ask)

    as_an_h200("is_available", True)
    as_an_h200("current_device", 0)
    as_an_h200("get_device_properties", types.SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
        total_memory=150_000_000_000, shared_memory_per_block_optin=232_448))

    def cpu(device):
        text = str(device) if device is not None else None
        return "cpu" if text is not None and text.startswith("cuda") else device

    def wrap(fn):
        def call(*args, **kwargs):
            if "device" in kwargs:
                kwargs["device"] = cpu(kwargs["device"])
            return fn(*args, **kwargs)
        return call

    for name in ("randn", "rand", "randint", "zeros", "ones", "empty", "full", "arange",
                 "tensor", "zeros_like", "ones_like", "empty_like", "randn_like", "rand_like",
                 "full_like", "linspace", "eye", "randperm", "as_tensor", "empty_strided",
                 "normal", "randint_like"):
        setattr(torch, name, wrap(getattr(torch, name)))
    original_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        args = tuple(cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
        if "device" in kwargs:
            kwargs["device"] = cpu(kwargs["device"])
        return original_to(self, *args, **kwargs)

    torch.Tensor.to = to
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.cuda.synchronize = lambda *a, **k: None
    class Generator(torch.Generator):  # a class still: `torch.Generator | None` annotates
        def __new__(cls, device="cpu"):
            return super().__new__(cls, device=cpu(device))

        def __init__(self, device="cpu"):
            pass

    torch.Generator = Generator
    # one stream on the CPU: `torch.cuda.stream(None)` is torch's own no-op context
    torch.cuda.Stream = torch.cuda.default_stream = torch.cuda.current_stream = \
        lambda *a, **k: None
    # `with torch.cuda.device(i)` (and flash-linear-attention's `torch.<device>.device(i)`);
    # a class still: torch asks isinstance(x, torch.cuda.device) (`torch.cuda.stream(s)`)
    class Device(contextlib.nullcontext):
        def __init__(self, *args, **kwargs):
            super().__init__()

    torch.cuda.device = torch.cpu.device = Device
    # examples time themselves with CUDA events after their checks: the CPU's clock
    torch.cuda.Event = _ClockEvent
    # examples pick their configs by the GPU's generation: answer as the H200 would
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
    torch.set_default_device = lambda *a, **k: None
    torch.cuda.profiler.start = torch.cuda.profiler.stop = lambda *a, **k: None
    profile = torch.profiler.profile  # the profiler records the CPU's activity instead

    def cpu_profile(*args, activities=None, **kwargs):
        return profile(*args, activities=[torch.profiler.ProfilerActivity.CPU], **kwargs)

    torch.profiler.profile = cpu_profile
    _script("triton_interpreted").install()  # Triton references, as a GPU computes them


def _script(name: str) -> types.ModuleType:
    """One of the scripts beside this one, as a module (scripts/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _ClockEvent:
    """`torch.cuda.Event(enable_timing=True)` on the CPU: `record()` reads the clock,
    `elapsed_time(end)` gives milliseconds (the CPU runs each call to its end)."""

    def __init__(self, *args, **kwargs):
        self.at = None

    def record(self, *args, **kwargs):
        self.at = time.perf_counter()

    def synchronize(self):
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end) -> float:
        return (end.at - self.at) * 1000.0


def _also_compile_for_cuda(record: dict):
    """Every kernel the example compiles is compiled once more for sm_90a (no launch).
    Without a GPU, a kernel the example compiles for "cuda" is compiled for the CPU."""
    import torch

    import tilelab.kernel as kernel_module

    original = kernel_module.compile
    gpu = torch.cuda.is_available()

    def compile_both(program, out_idx=None, target="auto", pass_configs=None):
        if str(target).startswith("cuda") and not gpu:  # the example's own target="cuda"
            target = "auto"
        kernel = original(program, out_idx=out_idx, target=target, pass_configs=pass_configs)
        if kernel.target == "cpu":
            try:
                original(program, out_idx=out_idx, target="cuda:sm_90a",
                         pass_configs=pass_configs)
                record["cuda_ok"] += 1
            except Exception as err:  # noqa: BLE001 - recorded, the run goes on
                record["cuda_failed"].append(_first_line(err))
        else:
            record["cuda_ok"] += 1
        return kernel

    kernel_module.compile = compile_both


def _few_timings() -> None:
    """On the CPU backend the examples' benchmarks (`do_bench(..., warmup=500)`) time
    nothing this table reports, after the check that it does: a few calls each."""
    import inspect

    import tilelab.profiler as profiler_module

    original = profiler_module.do_bench
    signature = inspect.signature(original)

    def do_bench(*args, **kwargs):
        try:  # a call TileLang's do_bench refuses fails here too
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"do_bench() {err}") from None
        bound.apply_defaults()
        given = bound.arguments
        warmup = given.pop("_n_warmup") or given["warmup"]
        rep = given.pop("_n_repeat") or given["rep"]
        return original(**{**given, "warmup": min(warmup, 1), "rep": min(rep, 2)})

    profiler_module.do_bench = do_bench


def _first_configurations() -> None:
    """On the CPU an autotuner tries the first two of its configurations: each is compiled
    for the CPU and for sm_90a and run, and examples list dozens (a hundred compiles take
    longer than the row's time); the winner is checked against the reference as before."""
    import tilelab.autotuner as autotuner

    expand = autotuner.expand_configs
    autotuner.expand_configs = lambda *args, **kwargs: expand(*args, **kwargs)[:2]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _from_a_missing_package(path: Path, err: BaseException) -> str | None:
    """The package a NameError's name was to be imported from, when it is not installed."""
    import ast
    import importlib.util

    if not isinstance(err, NameError) or not err.name:
        return None
    for node in ast.walk(ast.parse(path.read_text(errors="replace"))):
        if isinstance(node, ast.ImportFrom) and node.module and \
                any((a.asname or a.name) == err.name for a in node.names):
            package = node.module.split(".")[0]
            if importlib.util.find_spec(package) is None:
                return package
    return None


def _finished(path: Path, record: dict) -> dict:
    failed = record.pop("failed_checks", [])
    if failed:  # its own check failed, said so and went on
        record["cpu"], record["reason"] = "WRONG", "; ".join(failed)[:300]
        return record
    record["cpu"] = "correct" if CHECKS.search(path.read_text(errors="replace")) else \
        "ran, no check"
    return record


# What an example prints where its own check failed and it went on ("❌ Tilelang and Torch
# mismatch", "Verification FAILED", "... failed ✗", a similarity helper's "name Error: 0.3");
# "max error: 1e-5" and "(nibble mismatch: 3/4096 bytes from tie-breaking)" are measurements
FAILED = re.compile(r"(?i:mismatch(?!\s*:)|\bfailed\b)|✗|❌|\bError: |\bERROR: ")
COLOURS = re.compile(r"\x1b\[[0-9;]*m")  # a terminal's colour codes around a printed verdict


def _watch_checks(examples: Path, record: dict):
    """A check that reports instead of failing counts as failed where it reports a failure:
    `if torch.allclose(out, ref): print("match") else: print("mismatch")` in the example's
    own code (a file under `examples`) answering False, or a failure verdict (FAILED) that
    its code prints as one line (a kernel's source or a tensor, printed whole, is not a
    verdict). Without this a run to the end of such an example read as correct whatever
    its kernel computed. Returns the function that stops the watch."""
    import builtins

    import torch

    failed = record.setdefault("failed_checks", [])
    originals = torch.allclose, torch.Tensor.allclose, builtins.print

    def in_example(frame) -> bool:
        return frame.f_code.co_filename.startswith(str(examples))

    def watched(original):
        def allclose(*args, **kwargs):
            agrees = original(*args, **kwargs)
            caller = sys._getframe(1)
            if not agrees and in_example(caller):
                where = f"{Path(caller.f_code.co_filename).name}:{caller.f_lineno}"
                failed.append(f"torch.allclose at {where} answered False")
            return agrees
        return allclose

    def print_(*args, sep=" ", **kwargs):
        if in_example(sys._getframe(1)):
            line = COLOURS.sub("", (sep or " ").join(map(str, args)))
            if "\n" not in line and FAILED.search(line):
                failed.append(f"it printed {line.strip()[:120]!r}")
        return originals[2](*args, sep=sep, **kwargs)

    torch.allclose, torch.Tensor.allclose = watched(originals[0]), watched(originals[1])
    builtins.print = print_

    def stop():
        torch.allclose, torch.Tensor.allclose, builtins.print = originals
    return stop


def _flash_attn_where_missing():
    """flash-attn installs only with CUDA: where it is missing, the examples that compare
    against its attention functions get scripts/flash_attn_standin.py's, in torch (the row
    says so); None where the package is there."""
    import importlib.util

    if importlib.util.find_spec("flash_attn") is not None:
        return None
    standin = _script("flash_attn_standin")
    sys.modules["flash_attn"] = sys.modules["flash_attn.flash_attn_interface"] = standin
    return standin


SHIM = (
    "from tilelab.compat import tilelang\n\n"
    "tilelang.install()  # this module becomes tilelab's\n")


def _children_import_tilelab(where: Path) -> None:
    """Processes the example starts import tilelab for `tilelang` too: a spawned process
    (an autotuner's benchmark worker) imports the example's main file afresh, `import
    tilelang` first, and `install()` in this process does not reach it. A `tilelang`
    package that installs tilelab's when imported does: on `sys.path` (a spawned process
    takes its parent's) and on PYTHONPATH (a subprocess reads that)."""
    (where / "tilelang").mkdir(parents=True, exist_ok=True)
    (where / "tilelang" / "__init__.py").write_text(SHIM)
    sys.path.append(str(where))  # after the examples' own folders
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(where), *filter(None, [os.environ.get("PYTHONPATH")])])


def _cutting(fn):
    """`fn` with its integer arguments above 256 cut by their parameters' names, as
    `main()`'s defaults are, head dimensions kept."""
    import functools
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)  # the example's own mistake, as it would be raised
        for name, value in bound.arguments.items():
            if not DIMS.search(name):
                bound.arguments[name] = _cut(name, value)
        return fn(*bound.args, **bound.kwargs)

    return call


def _own_function(value) -> bool:
    """A function the example's file defines (the runner runs it as `__tilelab_example__`)."""
    import types

    return isinstance(value, types.FunctionType) and value.__module__ == "__tilelab_example__"


def _example_globals(module: dict) -> dict:
    """The example's module globals: runpy hands back a copy, its functions hold the real
    ones (where `_own_timings_few` puts its wrappers and a `__main__` block binds names)."""
    first = next((value for value in module.values() if _own_function(value)), None)
    return first.__globals__ if first else dict(module)


def _run_cutting_calls(path: Path, module: dict, statements: list, name: str) -> dict:
    """Run `statements` (nodes of the example file's syntax tree) in its module's globals as
    module `name`, each call they make to one of the example's own functions taking sizes
    cut (`test(4096, 4096)` runs `test(256, 256)`; the functions' calls to each other are
    as written). Returns those globals."""
    import ast

    namespace = _example_globals(module)
    functions = {key: value for key, value in namespace.items() if _own_function(value)}
    namespace["__tilelab_cut__"] = {key: _cutting(fn) for key, fn in functions.items()}

    class CutCalls(ast.NodeTransformer):
        def visit_Call(self, node):  # noqa: N802 - ast's name
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id in functions:
                node.func = ast.Subscript(ast.Name("__tilelab_cut__", ast.Load()),
                                          ast.Constant(node.func.id), ast.Load())
            return node

    namespace["__name__"] = name
    body = ast.fix_missing_locations(CutCalls().visit(ast.Module(body=statements,
                                                                 type_ignores=[])))
    exec(compile(body, str(path), "exec"), namespace)  # noqa: S102
    return namespace


def _run_main_block(path: Path, module: dict) -> None:
    """Run a script's `if __name__ == "__main__":` block (if it has one) in its module's
    globals, as `python example.py` runs it (a name the block binds is a global the
    example's functions may read), the example's own functions it calls taking sizes cut."""
    import ast

    tree = ast.parse(path.read_text(errors="replace"))
    blocks = [node for node in tree.body if isinstance(node, ast.If) and
              "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)]
    for block in blocks:  # none: its checks stand at the top level, and have run
        _run_cutting_calls(path, module, block.body, "__main__")


def _main_cutting_calls(path: Path, module: dict):
    """The example's `main()` taking no arguments (nothing of its own to cut), redefined so
    that its calls to the example's other functions take sizes cut: KDA's `main()` calls
    `run_test(B=1, S=8192, H=64, ...)`, a run of hours for Triton's interpreter on a CPU."""
    import ast

    tree = ast.parse(path.read_text(errors="replace"))
    mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and
             node.name == "main"]
    return _run_cutting_calls(path, module, mains[-1:], "__tilelab_example__")["main"]


def _own_timings_few(module: dict) -> None:
    """Any benchmark function the example's module holds, but tilelab's (KDA's `do_bench(fn,
    warmup=20, rep=10)`, from a file beside it; Triton's, whose counts are milliseconds), makes
    a few calls on the CPU, as tilelab's does (`_few_timings`): a function with "bench" in its
    name, a `warmup` parameter and one that counts the timed calls (`REPEATS`: TileLang's NSA
    benchmark times `iterations=100` CPU launches after its `warmup=10`)."""
    import inspect
    import types

    namespace = _example_globals(module)
    for name, fn in list(namespace.items()):
        if not isinstance(fn, types.FunctionType) or "bench" not in name or \
                (fn.__module__ or "").startswith(("tilelab", "tilelang")):
            continue
        signature = inspect.signature(fn)
        repeats = [p for p in signature.parameters if p in REPEATS]
        if "warmup" in signature.parameters and repeats:
            namespace[name] = _few_calls(fn, signature, repeats[0])


REPEATS = ("rep", "repeat", "iterations", "iters", "num_iters")  # names of timed-call counts


def _few_calls(fn, signature, repeats: str):
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        for key, most in (("warmup", 1), (repeats, 2)):
            value = bound.arguments.get(key, most)
            bound.arguments[key] = min(value, most) if isinstance(value, (int, float)) else value
        return fn(*bound.args, **bound.kwargs)

    return call


def run_one(path: Path) -> dict:
    import argparse as argparse_module
    import inspect
    import runpy

    import torch

    if not torch.cuda.is_available():
        _few_timings()  # before tilelang's modules take do_bench by name
    from tilelab.compat import tilelang as compat

    compat.install()
    _children_import_tilelab(Path(tempfile.mkdtemp(prefix="tilelang-shim-")))
    record = {"cuda_ok": 0, "cuda_failed": []}
    examples = next((p for p in path.parents if p.name == "examples"), path.parent)
    if not torch.cuda.is_available():
        _keep_tensors_on_cpu(examples)
        _first_configurations()
    _also_compile_for_cuda(record)
    stop_watching = _watch_checks(examples, record)
    flash_attn = _flash_attn_where_missing()

    original_add = argparse_module.ArgumentParser.add_argument

    def add_argument(self, *names, **kwargs):
        if "default" in kwargs:
            kwargs["default"] = _cut(names[-1].lstrip("-"), kwargs["default"])
        return original_add(self, *names, **kwargs)

    argparse_module.ArgumentParser.add_argument = add_argument
    sys.argv = [str(path)]
    sys.path.insert(0, str(path.parent))
    os.chdir(path.parent)
    try:
        module = runpy.run_path(str(path), run_name="__tilelab_example__")
        if not torch.cuda.is_available():
            _own_timings_few(module)
        if not MAIN.search(path.read_text(errors="replace")):
            # no `main()`: the file is a script, run as `python example.py` runs it
            # (its `__main__` block after its definitions, sizes it passes cut)
            _run_main_block(path, module)
            return _finished(path, record)
        main = module["main"]
        params = inspect.signature(main).parameters
        if not params:
            main = _main_cutting_calls(path, module)
        kwargs = {n: _cut(n, p.default) for n, p in params.items()
                  if p.default is not inspect.Parameter.empty and _cut(n, p.default) != p.default}
        if any(p.default is inspect.Parameter.empty and p.kind != p.VAR_POSITIONAL
               for p in params.values()):
            # `main(args)`: the example's own `__main__` block parses its command line
            # (the defaults cut as above) and calls it
            runpy.run_path(str(path), run_name="__main__")
        else:
            main(**kwargs)
        return _finished(path, record)
    except AssertionError as err:
        # torch's own "not compiled with CUDA" is an AssertionError too: a GPU-only call;
        # and an assertion before any kernel was compiled is the example's own check of
        # its sizes (cut to 256 here), not a result
        gpu_only = "not compiled with CUDA" in str(err)
        compiled = record["cuda_ok"] or record["cuda_failed"]
        record["cpu"] = "needs a GPU" if gpu_only else "WRONG" if compiled else "error"
        record["reason"] = _first_line(err) if compiled or gpu_only else \
            f"before any kernel: {_first_line(err)}"
    except Exception as err:  # noqa: BLE001 - every failure is a row of the table
        from tilelab.errors import TileLabError

        record["cpu"] = "refused" if isinstance(err, (TileLabError, ImportError)) else "error"
        if type(err).__name__ == "InterpreterError":  # Triton's interpreter (no GPU here)
            record["cpu"] = "needs a GPU"  # cannot run the example's Triton reference
        if isinstance(err, ModuleNotFoundError) and not (err.name or "").startswith("tilelang"):
            record["cpu"] = "needs a package"  # not tilelab's to provide (einops, ...)
        record["reason"] = _first_line(err)
        missing = _from_a_missing_package(path, err)
        if missing:  # `try: from fla... import ref` / `except ImportError:`, then ref(...)
            record["cpu"] = "needs a package"
            record["reason"] = f"ModuleNotFoundError: No module named {missing!r} " \
                               f"(the example's {err.name} comes from it)"
    finally:
        stop_watching()
        if flash_attn is not None and flash_attn.used:
            record["reason"] = " ".join(filter(None, [record.get("reason"), STANDIN]))
    record.pop("failed_checks", None)  # it stopped: the exception says more
    return record


STANDIN = ("(flash_attn is not installed: its attention functions, the example's reference, "
           "from the runner's torch stand-in, scripts/flash_attn_standin.py)")


# ---------------------------------------------------------------- the table


def run_example(path: Path, checkout: Path, timeout: int) -> dict:
    """One example in a process of its own: its row of the table. Sizes are cut to 256;
    where the example's own code then fails (an error, neither a refusal nor a wrong
    result) or hands a kernel a tensor of another shape than the kernel's, larger cuts
    are tried in the time left (CUTS), and the row says which cut it ran at."""
    name = str(path.relative_to(checkout / "examples"))
    start = time.time()
    failed_at = []
    first, why_first = FIRST_CUT.get(name, (CUTS[0], ""))
    for next_cut in CUTS[CUTS.index(first):]:
        left = timeout - (time.time() - start)
        if left < 1:
            break
        cut, row = next_cut, _run_child(path, next_cut, left)
        # a tensor whose shape disagrees with its kernel's is the cut's doing where the
        # example builds the tensor from one size and the kernel from another (both cut)
        if row["cpu"] != "error" and "must have shape" not in row.get("reason", ""):
            break
        failed_at.append((cut, row.get("reason", "")))
    first_cut, why = failed_at[0] if failed_at else (None, "")
    if failed_at and failed_at[-1][0] != cut:  # a larger cut got further
        row["reason"] = (row.get("reason", "") + " " if row.get("reason") else "") + \
            f"(sizes {'uncut' if cut is None else f'cut to {cut}'}: cut to {first_cut} the " \
            f"example stopped first: {why[:160]})"
    elif len(failed_at) > 1:  # it stopped at every cut: the first one's reason, as before
        last = row.get("reason", "")
        row["reason"] = why if last == why else f"{why} (larger sizes: {last[:160]})"
    if why_first:
        row["reason"] = " ".join(filter(None, [row.get("reason"), f"(sizes cut to {first}: "
                                               f"{why_first})"]))
    row["example"], row["seconds"] = name, round(time.time() - start, 1)
    print(f"{name}: {row['cpu']} ({row['seconds']} s) {row.get('reason', '')}", flush=True)
    return row


def _run_child(path: Path, cut: int | None, timeout: float) -> dict:
    """The example's row from a child process that cuts sizes above `cut` (None: uncut)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),  # TVM may be on it too
        "TILELAB_EXAMPLE_CUT": str(cut)}
    try:
        done = subprocess.run([sys.executable, __file__, "--one", str(path)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"cpu": "timeout", "cuda_ok": 0, "cuda_failed": [],
                "reason": f"over {round(timeout)} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{\"cuda_ok\"")]
    # no record: the process died, or the example itself exited (say, "GPU Device is
    # not detected"); its last words say which
    said = done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or \
        [f"crashed (exit status {done.returncode})"]
    return json.loads(lines[-1]) if lines else {
        "cpu": "error", "cuda_ok": 0, "cuda_failed": [], "reason": said[-1][:300]}


def run_all(checkout: Path, timeout: int, only: list[str] | None, jobs: int = 1,
            on_row=None) -> list[dict]:
    """Every example's row, in the order of the examples; `on_row(rows so far)` after each
    (so that a run cut short keeps what it did)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    done, lock = [], threading.Lock()

    def run(path):
        row = run_example(path, checkout, timeout)
        with lock:
            done.append(row)
            if on_row is not None:
                on_row(list(done))
        return row

    with ThreadPoolExecutor(max(jobs, 1)) as pool:
        return list(pool.map(run, find_examples(checkout, only)))


# What a result means, where the table's one word would mislead; each was looked into.
EXPLAINED = {
    "blocksparse_attention/example_tilelang_sparse_gqa_decode_varlen_indice.py":
        "its check asks rtol = atol = 1e-3 of float16 outputs against a reference computed in "
        "float16 and fails on some random draws (2 of 6 tried): against a float64 reading "
        "of the same reference the kernel is off by 5.8e-4 at most, the float16 reference "
        "by 1.8e-3",
    "blocksparse_attention/example_tilelang_sparse_gqa_decode_varlen_mask.py":
        "at 1024 its check, as example_tilelang_sparse_gqa_decode_varlen_indice's, fails on "
        "some draws by its float16 reference's rounding: against a float64 reading the "
        "kernel is off by 5.9e-4 at most, the float16 reference by 1.3e-3",
    "attention_sink/example_gqa_sink_bwd_bhsd.py":
        "the example fills and reads sinks[i] for i < block_M, a fragment of `heads` (8) "
        "elements: past its end on every run. Both targets refuse it when compiling "
        "(passes/check_loop_bounds.py); before, the CPU stopped at run time and the GPU read "
        "what lay beyond (its check passed there in the ninth session's run: luck, not a "
        "correct program)",
    "attention_sink/example_mha_sink_bwd_bhsd.py":
        "the example fills and reads sinks[i] for i < block_M, a fragment of `heads` (1) "
        "elements: past its end on every run. Both targets refuse it when compiling "
        "(passes/check_loop_bounds.py); before, the CPU stopped at run time and the GPU read "
        "what lay beyond (its check passed there in the ninth session's run: luck, not a "
        "correct program)",
    "attention_sink/example_gqa_sink_bwd_varlen.py":
        "tilelab's bug, seen on the H200: a T.Pipelined(start, stop) loop (its causal key loop "
        "starts at a block-dependent start) loaded iterations 0, 1, ... in its prologue; fixed "
        "(pipeline_loops._from_zero, tests/test_tma.py); correct on the H200 since. The CPU "
        "row: run with torch.cuda.get_device_capability answering (9, 0)",
    "minference/example_vertical_slash_sparse_attn.py":
        "on the CPU its reference builds a CUDA extension (CUDA_HOME). On a GPU (an H100, "
        "thirty-ninth session) the kernel stopped inside tilelab's CUDA pass list: a T.gemm on "
        "K_shared[stage], stage from a T.alloc_var, lost its warp grid (fixed: "
        "tests/test_gemm_register_index.py; it compiles for sm_90a now); not re-run on a GPU "
        "since",
    "gemm_sp/example_gemm_sp.py":
        "its compressor (sparse_utils._compress_fn) counts a group's nonzeros into a "
        "two-element register array and, for every element after the second nonzero, reads "
        "and writes nz_idx[2], one past its end: the CPU stops there; a GPU reads and writes "
        "back what lies beyond. T.gemm_sp itself (tests/test_gemm_sp.py) computes the dense "
        "product on the CPU and compiles for sm_90a",
    "block_causal_attention/block_causal_attention_varlen.py":
        "over 240 s beside another example in the full run; correct in 420 s alone, then "
        "in 317 s beside another after layout inference's checks were cached (thirty-first "
        "session; 60 kernels compiled for the CPU and for sm_90a)",
    "cast/example_group_per_split_token_cast_to_fp8.py":
        "its hard-coded split (2048 + 6144 rows) needs the uncut 8192 rows. The kernel "
        "divides by the scale as the example writes it, x / (amax / 448), and its reference "
        "multiplies, x * (448 / amax): the two round differently at float8 ties (0.06% of "
        "the values, one float8 step); the kernel's output is bit-identical to torch "
        "evaluating the kernel's own arithmetic (checked at 1024 x 1024, split 256 + 768: 0 "
        "of 1,572,864 differ, 984 from the reference's arithmetic). TileLang's "
        "torch_assert_close lets 0.1% of the values differ by default; tilelab's stand-in "
        "let none until the thirty-first session, and the row said WRONG",
    "deepseek_v4/act_quant.py":
        "the kernel computes the scale as the example writes it, amax * (1 / 448), and its "
        "reference as amax / 448: one float32 step apart, which moves 47 of 16,384 values "
        "across a float8 rounding tie, and the check asks atol = 0; the kernel's output is "
        "bit-identical to torch evaluating the kernel's own arithmetic. On the H200 that "
        "check passed and the example went on to a float4 (e2m1) kernel",
    "linear_attention/example_mamba_chunk_state.py":
        "the example's float16 torch reference is the less accurate side: against a float64 "
        "evaluation of the same reference on the same inputs, on the CPU 344 of the kernel's "
        "outputs fall outside the example's tolerance and 1,930 of the reference's (65,536 "
        "outputs); on the H200 (5,242,880 outputs) 12,596 of the kernel's and 82,483 of the "
        "reference's. Against its own arithmetic (float32 scale, float16 operand tile, "
        "float32 sums) the kernel has none outside",
    "linear_attention/example_mamba_chunk_scan.py":
        "as chunk_state: against a float64 evaluation of the reference, on the CPU 387 of "
        "the kernel's outputs fall outside the example's tolerance and 1,573 of the float16 "
        "reference's (131,072); on the H200 27,761 of the kernel's and 113,606 of the "
        "reference's (10,485,760)",
    "dsa_sparse_finetune/sparse_mla_fwd.py":
        "the sizes its __main__ block passes are cut (S = 4096 and topk = 1024 to 256), and "
        "the example asserts that each of its two sequences (S / 2 - 1 rows) holds topk "
        "rows: too small to run; uncut, the CPU outlasts the limit. Its gathers at the "
        "sentinel index past KV's end read 0 now, as TileLang defines such reads "
        "(passes/safe_global_access.py; before, the H200 check failed on them)",
    "kda/wy_fast.py":
        "prints its differences from the reference (compare_tensors) instead of checking "
        "them. It found two tilelab bugs: with 2+ stages the CUDA compile failed inside TVM "
        "(a float32 tile reusing a bfloat16 tile's bytes kept a bfloat16 pointer; "
        "passes/typed_access_pointers.py), and every configuration with a warpgroup MMA "
        "stopped on the H200 (its static-scoped Beta vector pushed the tiles off wgmma's 1 KiB "
        "boundary; every shared tile is dynamic now). On the H200 all 60 of its tuning "
        "configurations now match a torch evaluation of its formulas. The CPU row needs "
        "triton (its reference)",
    "deepseek_v32/fp8_lighting_indexer.py":
        "it prints its check's verdict without raising (should_raise=False): 1 - correlation "
        "<= 1e-14 between the kernel's logits, computed from float8 copies of q and kv, and "
        "a reference computed from their bfloat16 originals - a bound no float8 kernel meets "
        "on any device. The kernel's logits correlate with the reference to 1 - 6.6e-4",
    "gdn/example_chunk_delta_bwd.py":
        "its kernel runs; then the example times it as `do_bench(fn, Q, K, W, ...,"
        " chunk_size=...)`, the timed function's arguments after it, which TileLang's "
        "do_bench refuses as well (it takes none): the example stops there, before its check",
    "gdn/example_chunk_delta_h.py":
        "as example_chunk_delta_bwd: `do_bench(fn, k=..., ...)` stops it after its kernel ran "
        "and before its check, with TileLang's own TypeError. On the H200 its autotuner "
        "stopped first: every configuration differed from the default in every value. Two "
        "causes, both seen on an H100 in the thirty-ninth session: its main passes "
        "use_initial_state=False, and then the state tile b_h_shared is read before anything "
        "writes it (tilelab warns at its line), so each run reads what shared memory held; "
        "and tilelab's bug: with one pipeline stage the second copy of V_new_fragment into "
        "V_new_shared stored the values of the first (TVM's CUDA code generator reused a "
        "vector temporary by its text; passes/fresh_vector_loads.py). With an initial state "
        "every configuration now agrees with the CPU",
    "gdn/example_chunk_o_bwd.py":
        "the example's kernel is not flash-linear-attention's formula: it scales dk by "
        "exp(G_last_local - G) with G_last_local cleared and never set (the chunk's last gate "
        "goes to another variable), and masks its score matrix by the sign of the gate "
        "difference instead of by position. tilelab computes the program as written: against "
        "a torch transcription of the kernel (same inputs, 256 rows, 8 heads) 1 - similarity "
        "is 1.4e-6 for dq and dk, where the example's check (1e-5) measures 0.14 and 0.42 "
        "from the reference; its dw, which follows the reference's formula, agrees to 4e-12",
    "gdn/example_wy_fast.py":
        "12 of its 1,048,576 W outputs miss the check's 1e-2 where a sum of 64 terms up to "
        "400 cancels to below 1: one key scaled by exp(g) rounds to the other bfloat16 "
        "neighbour in the reference, whose exp is numpy's (Triton's interpreter; numpy's "
        "and torch's float32 exp differ in the last bit for 3,248 of its 8,192 gates). The "
        "kernel's W and U equal a torch evaluation of the formula with 0 outside the "
        "tolerance, and its U passes the example's own check",
    "kda/chunk_intra_token_parallel.py":
        "the time goes to its reference, flash-linear-attention's Triton kernel of one "
        "program per token, in Triton's interpreter (py-spy, thirty-fourth session); "
        "tilelab's kernel is not reached",
    "gemm/example_gemm_autotune_early_stop.py":
        "on the CPU it tunes 4096^3 GEMMs past the limit (its sizes are module constants, not "
        "cut). On the H200 the runner's own import hook did not reach the autotuner's "
        "benchmark process (spawned, it imports the example afresh: `import tilelang` failed "
        "and the pool broke); the runner now puts a `tilelang` package on the path",
    "dsa_sparse_finetune/sparse_mla_bwd.py":
        "its forward kernel gathers KV rows at a sentinel index past KV's end, which read 0 "
        "now as TileLang defines it (passes/safe_global_access.py; the CPU's bounds check "
        "stopped it before). Its backward kernel (a shared tile viewed as another type, "
        "T.view, since the thirtieth session) adds into its dKV output, a T.empty it never "
        "zeroes: memory as torch.empty leaves it, on the CPU anything (dQ, which it writes, "
        "matches: cosine 0.99993 at S = 128, H = 16, topk = 64), on a GPU often zeros. "
        "tilelab warns at the T.empty line that the output is read before anything writes "
        "it",
    "dsa_sparse_finetune/indexer_topk_reducesum.py":
        "the example prints its top-k's overlap with the reference instead of checking it. "
        "It found a tilelab bug: a name bound to a loaded value re-read its buffer where "
        "used, so its bitonic sort's swaps copied and 126 of 128 rows differed (a small "
        "run, S = 128); fixed, rows now differ only where the 64th score is a near-tie "
        "(5 of 128, scores within 0.4%: float32 sums against the reference's bfloat16). "
        "CUDA: the example turns TileLang's barrier pass off "
        "(`tl.disable_thread_storage_sync`): the barriers of its T.Parallel swaps are its own",
    "amd/example_amd_flash_attn_fwd.py":
        "the example stops itself without a GPU (and asks whether it is an AMD Radeon); "
        "told it runs on an H200, it runs. On the H200 every configuration had failed: "
        "T.copy's `coalesced_width` was not taken, and its persistent while loop allocates "
        "its tiles inside the loop (on the CPU LLVM refused that); both fixed. Then each "
        "failed with 'Cannot re-initialize CUDA in forked subprocess': its kernel asks torch "
        "for the GPU's name while traced, in the tuner's forked compile workers. The "
        "workers now answer torch's questions about the GPU from what the tuning process "
        "read before forking (autotuner._answer_from): every configuration compiled and "
        "tuned, correct in 238 s on an H100 (thirty-fourth session)",
    "amd/example_amd_flash_attn_bwd.py":
        "as amd/example_amd_flash_attn_fwd.py; and its backward kernel writes into the "
        "tensors it is given (no out_idx), which the autotuner compared as None",
    "dsa_hisa/pool_mqa_fp8.py":
        "the sizes its __main__ block passes, cut to 256 or 1024, leave fewer key blocks "
        "than its block_N, which the example asserts against; uncut it reaches its first "
        "kernel",
    "deepseek_mhc/example_mhc_pre.py":
        "its `if T.get_thread_binding() < 32: ... else: ...` around tile ops runs as two "
        "warp roles (passes/thread_code.py)",
    "deepseek_mla/example_mla_decode.py":
        "the example asks rtol = atol = 1e-4 of float16 outputs: 18% of them differ from its "
        "float16 torch reference by one float16 step (4.9e-4 near 0.5); against a float64 "
        "reading the kernel is off by 1.6e-4 at most, the float16 reference by 7.6e-4",
    "deepseek_mla/example_mla_decode_ws.py":
        "its three warp roles (two consumers, a producer copying with T.ptx_cp_async) take "
        "turns on the CPU (passes/role_turns.py). Its check is example_mla_decode's, rtol = "
        "atol = 1e-4 of float16 outputs, and fails as that one's does: against a float64 "
        "reading of its reference (batch 1, 128 heads, 256 keys) the kernel is off by 2.4e-4 "
        "at most, the float16 reference by 5.8e-4",
    "gemm_int4/example_tilelang_gemm_int4.py":
        "its T.int4 tensors come packed two to a byte in int8 tensors "
        "(passes/packed_int4.py)",
    "deepseek_v32/sparse_mla_fwd_pipelined.py":
        "its producer role copies rows with T.ptx_cp_async, thread by thread; the roles "
        "take turns on the CPU (passes/role_turns.py)",
    "warp_specialize/example_warp_specialize_flashmla.py":
        "its two consumer roles hand score tiles to each other through mbarriers and take "
        "turns on the CPU (passes/role_turns.py); its T.unroll loops over parts of the head "
        "dimension are written out while tracing, each T.gemm part at a constant offset",
    "deepseek_v32/sparse_mla_fwd_seesaw.py":
        "as sparse_mla_fwd_pipelined; its producer keeps prefetched indices in a fragment "
        "only its thread code touches, each thread's own. On the GPU it hung (the timeout): "
        "a barrier between its producer and consumer roles, kept because index arithmetic "
        "the two consumers share stood between; fixed since (passes/warp_roles.py): "
        "correct on an H100 in 69 s (thirty-fourth session)",
}


def cuda_column(row: dict) -> str:
    if row["cuda_failed"]:
        return f"failed ({len(row['cuda_failed'])} of {row['cuda_ok'] + len(row['cuda_failed'])})"
    return f"ok ({row['cuda_ok']})" if row["cuda_ok"] else "not reached"


def write_table(rows: list[dict], checkout: Path, out: Path, command: str,
                gpu: dict | None = None) -> None:
    """`gpu`: the rows of a run on a GPU machine (its `--json`), by example, or None."""
    git = ["git", "-C", str(checkout), "rev-parse", "--show-toplevel", "--short", "HEAD"]
    top, _, commit = subprocess.run(git, capture_output=True, text=True).stdout.strip() \
        .partition("\n")
    if not top or Path(top).resolve() != checkout.resolve():
        commit = "unknown"  # a copy without its history (inside another repository, say)
    correct = [r for r in rows if r["cpu"] == "correct"]
    runnable = [r for r in rows if r["cpu"] != "needs a package"]
    both = [r for r in correct if r["cuda_ok"] and not r["cuda_failed"]]
    counts: dict = {}
    for r in rows:
        counts[r["cpu"]] = counts.get(r["cpu"], 0) + 1
    first = re.split(r" \(|; ", command, maxsplit=1)[0]  # the history goes to the end
    lines = [
        "# TileLang's examples on tilelab",
        "",
        f"Written by `{first}` against TileLang commit {commit} (the runs behind each row: "
        "at the end): each example file with a "
        "kernel that runs something (a `main()`, a `__main__` block or checks at its top "
        "level) run unchanged but for its imports, sizes above 256 cut to 256 (where the "
        "example's own code then stops, cut to 1024, then uncut: the row says so), on the "
        "CPU backend; every kernel it compiles also compiled for CUDA sm_90a (no launch). "
        "\"correct\" means the example's own comparison with its torch reference passed. " +
        ("H200: the same examples run on the GPU machine, kernels compiled there in the "
         "notebook's way and launched on the H200." if gpu else "H200: not run here."),
        "",
        f"{len(rows)} examples: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) +
        f"; correct on the CPU and compiled for sm_90a: {len(both)} "
        f"({100 * len(both) / max(len(runnable), 1):.0f}% of the {len(runnable)} whose "
        "packages are installed)." +
        (f" Correct on the H200: {sum(g['cpu'] == 'correct' for g in gpu['rows'].values())}."
         if gpu else ""),
        "",
        "| example | CPU | CUDA compile (kernels) | H200 | reason |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        reason = r.get("reason") or (r["cuda_failed"][0] if r["cuda_failed"] else "")
        if r["example"] in EXPLAINED:
            reason = f"{reason} ({EXPLAINED[r['example']]})"
        on_gpu = gpu["rows"].get(r["example"]) if gpu else None
        if on_gpu is not None and on_gpu["cpu"] != "correct" and on_gpu.get("reason") and \
                on_gpu.get("reason") != r.get("reason"):
            reason = f"{reason} (H200: {on_gpu['reason']})" if reason else \
                f"H200: {on_gpu['reason']}"
        reason = reason.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['example']} | {r['cpu']} | {cuda_column(r)} | "
                     f"{on_gpu['cpu'] if on_gpu else 'not run'} | {reason} |")
    lines += ["", "## The runs behind the rows", "", f"CPU: `{command}`."]
    if gpu:
        lines += ["", f"H200: {gpu['command']}."]
    out.write_text("\n".join(lines) + "\n")


def update(record: Path, rows: list[dict], command: str) -> tuple[list[dict], str]:
    """Put re-run `rows` into the record of an earlier run (by example), say so in its
    command, write it back; the merged rows and command."""
    done = json.loads(record.read_text())
    merged = {r["example"]: r for r in done["rows"]}
    merged.update({r["example"]: r for r in rows})
    rerun = command.replace("python scripts/tilelang_examples.py TILELANG_CHECKOUT ", "")
    chosen = re.findall(r"--only \S+ ?", rerun)
    if len(chosen) > 6:  # the rows say which examples they are: name a few
        rerun = rerun.replace("".join(chosen), "".join(chosen[:3]) +
                              f"(and {len(chosen) - 3} more) ")
    done["rows"] = sorted(merged.values(), key=lambda r: r["example"])
    done["command"] += f"; {time.strftime('%Y-%m-%d')}: {len(rows)} re-run with {rerun}"
    record.write_text(json.dumps(done, indent=1))
    return done["rows"], done["command"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", nargs="?", help="a TileLang checkout (has examples/)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per example")
    parser.add_argument("--only", action="append", help="run only examples whose path "
                        "contains this (may be given more than once)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "TILELANG_COMPAT.md"))
    parser.add_argument("--jobs", type=int, default=1, help="examples run at a time")
    parser.add_argument("--json", help="also write the rows here (a GPU machine's run)")
    parser.add_argument("--gpu-results", help="the --json of a run on a GPU machine: fills "
                        "the table's H200 column")
    parser.add_argument("--cpu-results", help="the --json of an earlier run here: write the "
                        "table from it instead of running the examples again")
    parser.add_argument("--update", help="the --json of an earlier full run: run the examples "
                        "chosen (--only), put their rows in it, and write the table from it")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one example
    args = parser.parse_args(argv)
    if args.one:
        global CUT
        CUT = None if os.environ.get("TILELAB_EXAMPLE_CUT") == "None" else \
            int(os.environ.get("TILELAB_EXAMPLE_CUT", CUT))
        print(json.dumps(run_one(Path(args.one))), flush=True)
        return
    if not args.checkout:
        parser.error("give the path of a TileLang checkout")
    checkout = Path(args.checkout).resolve()
    chosen = "".join(f" --only {part}" for part in args.only or [])
    command = f"python scripts/tilelang_examples.py TILELANG_CHECKOUT{chosen} " \
              f"--timeout {args.timeout} --jobs {args.jobs}"

    def save(rows):
        if args.json:
            Path(args.json).write_text(json.dumps({"command": command, "rows": rows}, indent=1))

    if args.cpu_results:
        done = json.loads(Path(args.cpu_results).read_text())
        rows, command = done["rows"], done["command"]
    elif args.update:
        rows, command = update(Path(args.update), run_all(checkout, args.timeout, args.only,
                                                         args.jobs), command)
    else:
        rows = run_all(checkout, args.timeout, args.only, args.jobs, save)
        save(rows)
    gpu = None
    if args.gpu_results:
        done = json.loads(Path(args.gpu_results).read_text())
        gpu = {"command": done["command"], "rows": {r["example"]: r for r in done["rows"]}}
        command += f" --gpu-results {Path(args.gpu_results).name}"
    write_table(rows, checkout, Path(args.out), command, gpu)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
