"""`@tilelab.autotune`: try a kernel's configurations in parallel, check each, keep the fastest.

Block sizes, pipeline stages and thread counts decide how fast a tile kernel
runs, and the best values depend on the sizes and the GPU. The autotuner
tries a list of keyword values (*configurations*) for a `@tilelab.jit`
kernel, in four steps:

1. **candidates**: the configurations (a list of dicts, a dict of lists for
   their cartesian product, or a callable of the call's arguments), with the
   kernel's own defaults first: the *default* every speed-up is measured
   against, and the reference each candidate's output must match (unless a
   `ref_prog` is given);
2. **compile phase**: every candidate is compiled in worker processes, one
   per CPU core (forked, so kernels defined in a notebook need no pickling),
   or in Ray tasks on a cluster's CPUs. What comes back is a *built kernel*:
   the compile cache entry (cubin and launch data, or the CPU's shared
   library), which any process can run without the kernel's source. A
   candidate that does not compile (too much shared memory, a block size the
   layout rules reject) is recorded with its reason;
3. **benchmark phase**: one worker per visible GPU (a process pinned with
   `CUDA_VISIBLE_DEVICES`, or a Ray actor with `num_gpus=1`) loads each built
   kernel, runs it on seeded random inputs (or on the tensors given with
   `with tilelab.autotune_inputs(...)`, for kernels that random values would
   mislead: indices, masks), compares its output with the
   reference (a wrong one is recorded, not timed; a kernel that returns nothing
   is compared by the tensors it writes into, each candidate called on copies of
   the same inputs), and times it exactly as
   `tilelab.bench` does (`tilelab.profiler.do_bench`). With many timed calls
   per candidate (a GPU's default 100) every candidate is first *screened*
   with a few (3 warm-ups, 10 timed); only those within 25% of the fastest
   screened time are then timed in full. Each row says how many calls its
   median comes from;
4. **result**: the fastest correct candidate wins. The times are cached on
   disk (key: kernel source, sizes, dtypes, configurations, device name,
   tilelab and toolchain versions), so another process or session skips the
   tuning; the winner is compiled here (a compile cache hit) and carries
   `kernel.config` and `kernel.autotune_result`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import itertools
import json
import linecache
import math
import os
import pickle
import platform
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TileLabArgumentError, TileLabError
from .errors import raised_at_the_caller as _user_error
from .kernel import JITFunction, Kernel, _dtype_name, _freeze, _is_tensor
from .viz.measurements import AutotuneView

__all__ = ["AutoTuner", "AutotuneResult", "BuiltKernel", "autotune", "autotune_inputs"]


# ---------------------------------------------------------------- what travels between processes


@dataclass
class KernelSpec:
    """A `@tilelab.jit` kernel in a form another process can rebuild: the function, its
    decorator's options, and its source file's lines (a notebook cell exists nowhere else)."""

    fn: object
    out_idx: object
    pass_configs: dict
    filename: str
    lines: list

    @staticmethod
    def of(jit: JITFunction) -> KernelSpec:
        filename = jit.fn.__code__.co_filename
        return KernelSpec(jit.fn, jit.out_idx, dict(jit.pass_configs), filename,
                          list(jit.source.lines))

    def jit(self) -> JITFunction:
        if not linecache.getlines(self.filename):
            linecache.cache[self.filename] = (sum(map(len, self.lines)), None, self.lines,
                                              self.filename)
        return JITFunction(self.fn, out_idx=self.out_idx, pass_configs=self.pass_configs)


@dataclass(frozen=True)
class TensorShape:
    """An eager kernel's tensor argument, by shape and dtype (workers need no data)."""

    shape: tuple
    dtype: str

    @staticmethod
    def of(tensor) -> TensorShape:
        return TensorShape(tuple(int(s) for s in tensor.shape), _dtype_name(tensor))

    def meta(self):
        import torch

        return torch.empty(self.shape, dtype=getattr(torch, self.dtype), device="meta")


@dataclass
class BuiltKernel:
    """A compiled candidate: its compile cache files, runnable in any process (`load`)."""

    name: str
    target: str
    params: list  # dicts: name, shape, dtype, output
    files: dict
    resources: dict = field(default_factory=dict)
    compile_seconds: float = 0.0

    def load(self) -> Kernel:
        from .runtime.artifact import RuntimeParam

        params = [RuntimeParam(p["name"], tuple(p["shape"]), p["dtype"], p["output"])
                  for p in self.params]
        if self.target == "cuda":
            from .runtime.cuda import launcher_for

            launch = json.loads(self.files["launch.json"])
            runner = launcher_for(self.files["kernel.cubin"], launch, [p.dtype for p in params])
        else:
            from .backends.cpu import CPURunner

            with tempfile.TemporaryDirectory(prefix="tilelab-autotune-") as folder:
                path = Path(folder) / "kernel.so"
                path.write_bytes(self.files["kernel.so"])
                runner = CPURunner.load(path, self.name, params)  # loaded: the file may go
        return Kernel(self.name, params, runner, self.target)


def _reason(err: BaseException) -> str:
    """One line saying why a candidate failed (a TileLabError's message names the line)."""
    if isinstance(err, TileLabError):
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{text} (hint: {err.hint})" if err.hint else text
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}".rstrip(": ")


def _result(fn, inputs: list, returns: bool):
    """What a call of `fn` produces: what it `returns`, or, from a kernel that returns
    nothing (it writes into tensors it is given: no `out_idx`), those tensors after a call
    on copies of them - copies, so that every candidate starts from the same values (a
    kernel that accumulates into its outputs would otherwise see the last one's)."""
    if returns:
        return fn(*inputs)
    copies = _copies(inputs)
    fn(*copies)
    return tuple(t for t in copies if hasattr(t, "clone"))


def _copies(inputs: list) -> list:
    return [t.clone() if hasattr(t, "clone") else t for t in inputs]


def split_config(config: dict) -> tuple[dict, dict | None]:
    """A candidate's kernel parameters, and its `pass_configs` entry (TileLang's way of
    tuning compiler settings beside the parameters), which goes to the compile."""
    params = dict(config)
    return params, params.pop("pass_configs", None)


def compile_candidate(spec: KernelSpec, args: tuple, kwargs: dict, target: str,
                      call: tuple = ()) -> dict:
    """Compile one candidate (in a worker process): {"built": BuiltKernel} or {"reason"}.
    `call`: what a kernel that each call completes (`T.dynamic` sizes, scalar parameters)
    is called with: the shapes of its tensors, and its scalars."""
    started = time.perf_counter()
    try:
        jit = spec.jit()
        args = tuple(a.meta() if isinstance(a, TensorShape) else a for a in args)
        params, pass_configs = split_config(kwargs)
        kernel = jit.compile(*args, target=target, pass_configs=pass_configs, **params)
        if call:
            kernel = kernel.specialize(*(a.meta() if isinstance(a, TensorShape) else a
                                         for a in call), target=target)
    except Exception as err:  # noqa: BLE001 - every failure is a result, with its reason
        return {"reason": _reason(err)}
    trace = kernel.trace
    return {"built": BuiltKernel(
        kernel.name, kernel.target,
        [{"name": p.name, "shape": list(p.shape), "dtype": p.dtype, "output": p.output}
         for p in kernel.params],
        {k: v for k, v in kernel.files.items() if k != "trace.json"},
        dict(trace.resources) if trace else {}, time.perf_counter() - started)}


def random_inputs(params: list, device: str, seed: int) -> list:
    """Seeded random tensors for a kernel's inputs: every worker makes the same ones."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for p in params:
        if p["output"]:
            continue
        dtype = getattr(torch, p["dtype"])
        if dtype.is_floating_point:
            t = torch.randn(tuple(p["shape"]), generator=generator).to(dtype)
        else:
            t = torch.randint(-8, 8, tuple(p["shape"]), generator=generator).to(dtype)
        tensors.append(t.to(device))
    return tensors


_GIVEN_INPUTS = contextvars.ContextVar("tilelab_autotune_inputs", default=None)


@contextlib.contextmanager
def autotune_inputs(*tensors):
    """`with tilelab.autotune_inputs(idx, x):` tunes that start inside the block run each
    candidate on these tensors (the kernel's inputs, in order, outputs left out) instead
    of seeded random ones: for kernels whose inputs must mean something (indices in
    range, a mask, a sorted list). TileLang spells it `set_autotune_inputs`."""
    token = _GIVEN_INPUTS.set(tuple(tensors))
    try:
        yield
    finally:
        _GIVEN_INPUTS.reset(token)


def _given_inputs(params: list) -> list | None:
    """The tensors of `autotune_inputs`, checked against the kernel's inputs, on the CPU
    (they travel to the benchmark workers by pickle); None outside such a block."""
    given = _GIVEN_INPUTS.get()
    if given is None:
        return None
    wanted = [p for p in params if not p["output"]]
    if len(given) != len(wanted):
        raise TileLabArgumentError(f"autotune_inputs gave {len(given)} tensors; the kernel "
                                   f"takes {len(wanted)} inputs (outputs left out)")
    for i, (t, p) in enumerate(zip(given, wanted)):
        if not _is_tensor(t):
            raise TileLabArgumentError(f"autotune_inputs: input {i} is a "
                                       f"{type(t).__name__}, not a tensor")
        shape, dtype = [int(n) for n in t.shape], _dtype_name(t)
        if shape != [int(n) for n in p["shape"]] or dtype != p["dtype"]:
            raise TileLabArgumentError(f"autotune_inputs: input {i} is {dtype} {shape}; the "
                                       f"kernel wants {p['dtype']} {list(p['shape'])}")
    return [t.detach().cpu() for t in given]


class BenchWorker:
    """Runs, checks and times candidates on one device (a process per GPU, or a Ray actor).

    A task names a candidate (a BuiltKernel, or a pickled callable such as a PyTorch
    baseline), the reference to compare with, and the timing settings. Inputs and the
    reference's outputs are made once per tune and kept.
    """

    def __init__(self):
        self._inputs: dict = {}
        self._expected: dict = {}

    def device(self, target: str) -> str:
        return "cuda" if target == "cuda" else "cpu"

    def device_name(self, target: str) -> str:
        if target == "cuda":
            import torch

            return torch.cuda.get_device_name()
        return cpu_name()

    @staticmethod
    def _callable(candidate):
        if isinstance(candidate, BuiltKernel):
            return candidate.load()
        return pickle.loads(candidate)

    def run(self, task: dict) -> dict:
        from .benchmark import compare
        from .profiler import do_bench

        tune = task["tune"]
        try:
            if tune not in self._inputs:
                device = self.device(task["target"])
                self._inputs = {tune: [t.to(device) for t in task["inputs"]]
                                if task.get("inputs") is not None else
                                random_inputs(task["params"], device, task["seed"])}
                self._expected = {}
            inputs = self._inputs[tune]
            fn = self._callable(task["candidate"])
            returns = any(p["output"] for p in task["params"])
            output = _result(fn, inputs, returns)
            if task["reference"] is not None:
                if tune not in self._expected:
                    self._expected = {tune: _result(self._callable(task["reference"]), inputs,
                                                    returns)}
                comparison = compare(output, self._expected[tune], task["rtol"], task["atol"],
                                     task["max_mismatched_ratio"])
                if not comparison["passed"]:
                    return {"status": "wrong result", "reason": (
                        f"differs from the reference: max abs error "
                        f"{comparison['max_abs_error']}, {comparison['mismatched']} of "
                        f"{comparison['total']} values outside rtol={comparison['rtol']}, "
                        f"atol={comparison['atol']} {comparison['message']}").strip()}
            timed = inputs if returns else _copies(inputs)  # the originals stay as given
            ms = do_bench(lambda: fn(*timed), warmup=task["warmup"], rep=task["rep"])
        except Exception as err:  # noqa: BLE001 - a launch that fails is a result too
            failed = {"status": "run failed", "reason": _reason(err)}
            if task["target"] == "cuda" and _context_lost():
                # the candidate faulted; CUDA now fails every later call in this process
                failed["reason"] += " (the kernel faulted on the GPU)"
                failed["context_lost"] = True
            return failed
        return {"status": "ok", "ms": ms}


def _context_lost() -> bool:
    """Is this process's CUDA context unusable? After a kernel faults (an illegal address, a
    trap), every later CUDA call in the process returns the same error: a candidate that
    faults would fail every candidate after it, unless its worker is replaced."""
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - the sticky error itself
        return True
    return False


@functools.cache
def cpu_name() -> str:
    from tvm.target import codegen

    return f"CPU ({platform.machine()}, {codegen.llvm_get_system_cpu()}, {os.cpu_count()} cores)"


# ---------------------------------------------------------------- where the work runs


_FORKED: list = []  # the compile jobs of the tune in progress, inherited by forked workers
_WORKER: BenchWorker | None = None  # the BenchWorker of a benchmark process


def _compile_forked(index: int) -> dict:
    return compile_candidate(*_FORKED[index])


def _gpu_facts() -> dict | None:
    """What a kernel factory may ask torch about the GPUs while it is traced (TileLang's AMD
    FlashAttention asks for the GPU's name), read here before the compile workers fork: a
    process forked after its parent used CUDA cannot start CUDA, and torch refuses even
    these questions there. None where this process has not used CUDA (a fork may then)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    devices = range(torch.cuda.device_count())
    try:
        return {"current": torch.cuda.current_device(),
                "names": [torch.cuda.get_device_name(d) for d in devices],
                "capabilities": [torch.cuda.get_device_capability(d) for d in devices],
                "properties": [torch.cuda.get_device_properties(d) for d in devices]}
    except Exception:  # noqa: BLE001 - a broken context: the workers ask for themselves
        return None


def _answer_from(facts: dict | None) -> None:
    """In a forked compile worker: torch's questions about the GPUs answered from `facts`,
    read by the tuning process (`_gpu_facts`). Anything else of CUDA still fails here."""
    if facts is None:
        return
    import torch
    from torch.cuda._utils import _get_device_index

    def index(device=None) -> int:  # as torch reads a device: None, 1, "cuda:1", ...
        return _get_device_index(device, optional=True)

    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: len(facts["names"])
    cuda.current_device = lambda: facts["current"]
    cuda.get_device_name = lambda device=None: facts["names"][index(device)]
    cuda.get_device_capability = lambda device=None: facts["capabilities"][index(device)]
    cuda.get_device_properties = lambda device=None: facts["properties"][index(device)]


def _needs_this_process(result: dict) -> bool:
    """Did a forked compile worker fail because the kernel's Python used CUDA while it was
    traced (beyond the questions `_answer_from` answers: a factory that makes a tensor on
    the GPU, say) after this process had? CUDA cannot start again in a fork; such a
    candidate is compiled here instead."""
    return "re-initialize CUDA in forked subprocess" in result.get("reason", "")


def _start_bench_process(visible: str) -> None:
    global _WORKER
    os.environ["CUDA_VISIBLE_DEVICES"] = visible  # before this process touches CUDA
    _WORKER = BenchWorker()


def _bench_in_process(method: str, argument):
    return getattr(_WORKER, method)(argument)


def _visible_gpus() -> list[str]:
    import torch

    count = torch.cuda.device_count()
    listed = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def heaviest_first(jobs: list) -> list[int]:
    """The order in which compile jobs go to the workers: those likely to compile longest
    first. A pool hands out jobs in order, so a long compile handed out last runs alone at
    the end of the phase while the other workers idle (longest-processing-time-first
    scheduling). Bigger tiles and more stages unroll more code; the estimate is the product
    of a candidate's integer knobs (`jobs[i][2]`: its keyword arguments). It is crude (more
    threads give each thread less code), but it hands out a sweep's big configurations
    first, and with them those refused at once for their shared memory."""
    def size(job) -> int:
        return math.prod(v for v in job[2].values()
                         if isinstance(v, int) and not isinstance(v, bool) and v > 0)

    return sorted(range(len(jobs)), key=lambda i: -size(jobs[i]))


class LocalBackend:
    """This machine: compiles in forked processes on every core; benchmarks in one process per
    visible GPU (spawned, `CUDA_VISIBLE_DEVICES` set), or here on the CPU target."""

    name = "local"

    def __init__(self, compile_workers: int | None = None, bench_processes: bool | None = None,
                 gpus: list | None = None):
        self.compile_workers = compile_workers or len(os.sched_getaffinity(0))
        self.bench_processes = bench_processes  # None: processes for GPUs, in-process for CPU
        self.gpus = [str(g) for g in gpus] if gpus is not None else None  # None: every one
        self._executors: list = []
        self._workers: list = []

    def compile(self, jobs: list, on_done) -> list:
        workers = min(self.compile_workers, len(jobs))
        results: list = [None] * len(jobs)
        if workers <= 1 or not hasattr(os, "fork"):
            for i, job in enumerate(jobs):
                results[i] = compile_candidate(*job)
                on_done(i, results[i])
            return results
        import multiprocessing

        _FORKED[:] = jobs
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                     initializer=_answer_from, initargs=(_gpu_facts(),)) as pool:
                futures = {pool.submit(_compile_forked, i): i for i in heaviest_first(jobs)}
                from concurrent.futures import as_completed

                for future in as_completed(futures):
                    i = futures[future]
                    try:
                        results[i] = future.result()
                    except Exception as err:  # noqa: BLE001 - a worker that died
                        results[i] = {"reason": f"the compile worker died: {_reason(err)}"}
                    if not _needs_this_process(results[i]):
                        on_done(i, results[i])
        finally:
            _FORKED.clear()
        for i, result in enumerate(results):  # those a forked worker could not trace
            if _needs_this_process(result):
                results[i] = compile_candidate(*jobs[i])
                on_done(i, results[i])
        return results

    def start(self, target: str) -> str:
        """Start the benchmark workers; the name of the device they time on."""
        processes = self.bench_processes if self.bench_processes is not None \
            else target == "cuda"
        if not processes:
            self._workers = [BenchWorker()]
            return self._workers[0].device_name(target)
        visible = (self.gpus or _visible_gpus()) if target == "cuda" else [""]
        if not visible:
            raise TileLabError("tuning a CUDA kernel needs a visible GPU")
        self._executors = [self._bench_process(gpu) for gpu in visible]
        return self._executors[0].submit(_bench_in_process, "device_name", target).result()

    @staticmethod
    def _bench_process(gpu: str) -> ProcessPoolExecutor:
        import multiprocessing

        spawn = multiprocessing.get_context("spawn")  # a fork would inherit a used CUDA context
        return ProcessPoolExecutor(1, mp_context=spawn, initializer=_start_bench_process,
                                   initargs=(gpu,))

    @property
    def workers(self) -> int:
        return len(self._executors) or len(self._workers)

    def run(self, worker: int, task: dict) -> dict:
        if self._workers:
            return self._workers[worker].run(task)
        try:
            result = self._executors[worker].submit(_bench_in_process, "run", task).result()
        except Exception as err:  # noqa: BLE001 - the process died (a crash in the kernel)
            result = {"status": "run failed", "context_lost": True,
                      "reason": f"the benchmark worker died: {_reason(err)}"}
        if result.get("context_lost"):  # a fresh process for the candidates after this one
            self._executors[worker].shutdown(wait=False, cancel_futures=True)
            self._executors[worker] = self._bench_process(
                (self.gpus or _visible_gpus())[worker] if task["target"] == "cuda" else "")
        return result

    def stop(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=True, cancel_futures=True)
        self._executors, self._workers = [], []


class RayBackend:
    """A Ray cluster: compile tasks on its CPUs, one benchmark actor per GPU (`num_gpus=1`).

    It uses the cluster `ray.init(address=...)` connected to; without one, `ray.init()`
    (which reads RAY_ADDRESS, else starts a local cluster). CPU kernels are timed on one
    actor with one CPU.
    """

    name = "ray"

    def __init__(self):
        try:
            import ray
        except ImportError:
            raise TileLabError("backend='ray' needs Ray",
                               hint="pip install 'tilelab[ray]'") from None
        self.ray = ray
        if not ray.is_initialized():
            ray.init()
        self._actors: list = []
        self._actor = None  # the BenchWorker actor class, to replace one that failed

    def compile(self, jobs: list, on_done) -> list:
        ray = self.ray
        task = ray.remote(num_cpus=1)(compile_candidate)
        spec = ray.put(jobs[0][0]) if jobs else None  # the kernel's function, shipped once
        refs = {task.remote(spec, *jobs[i][1:]): i for i in heaviest_first(jobs)}
        results: list = [None] * len(jobs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            i = refs[done[0]]
            try:
                results[i] = ray.get(done[0])
            except Exception as err:  # noqa: BLE001 - a task or its worker failed
                results[i] = {"reason": f"the Ray compile task failed: {_reason(err)}"}
            on_done(i, results[i])
        return results

    def start(self, target: str) -> str:
        ray = self.ray
        if target == "cuda":
            count = int(ray.cluster_resources().get("GPU", 0))
            if not count:
                raise TileLabError("the Ray cluster has no GPU to tune a CUDA kernel on")
            self._actor = ray.remote(num_gpus=1)(BenchWorker)
        else:
            count, self._actor = 1, ray.remote(num_cpus=1)(BenchWorker)
        self._actors = [self._actor.remote() for _ in range(count)]
        return ray.get(self._actors[0].device_name.remote(target))

    @property
    def workers(self) -> int:
        return len(self._actors)

    def run(self, worker: int, task: dict) -> dict:
        try:
            result = self.ray.get(self._actors[worker].run.remote(task))
        except Exception as err:  # noqa: BLE001 - the actor died
            result = {"status": "run failed", "context_lost": True,
                      "reason": f"the Ray actor failed: {_reason(err)}"}
        if result.get("context_lost"):  # a fresh actor for the candidates after this one
            self.ray.kill(self._actors[worker])
            self._actors[worker] = self._actor.remote()
        return result

    def stop(self) -> None:
        for actor in self._actors:
            self.ray.kill(actor)
        self._actors = []


BACKENDS = {"local": LocalBackend, "ray": RayBackend}


# ---------------------------------------------------------------- progress


# Screening: warm-ups and timed calls of the first, quick timing of every candidate, and
# how far from the fastest screened time a candidate may be to be timed in full.
SCREEN_WARMUP, SCREEN_REP, SCREEN_KEEP = 3, 10, 1.25


class Progress:
    """compiled / benchmarked / failed (and, after screening, timed in full), live: a
    widget in a notebook, else a line on stderr once the tune has taken two seconds."""

    def __init__(self, name: str, total: int, show: bool):
        self.name, self.total, self.show = name, total, show
        self.compiled = self.benchmarked = self.failed = 0
        self.finalists, self.timed_in_full = 0, 0
        self.started = time.perf_counter()
        self.widget = None
        self.printing = False
        self._lock = threading.Lock()
        shell = _ipython_kernel()
        if show and shell is not None:
            import ipywidgets
            from IPython.display import display

            self.bar = ipywidgets.IntProgress(value=0, max=2 * total, description="autotune")
            self.label = ipywidgets.HTML()
            self.widget = ipywidgets.HBox([self.bar, self.label])
            display(self.widget)
            self._draw()

    def text(self) -> str:
        text = (f"autotune {self.name}: {self.compiled}/{self.total} compiled, "
                f"{self.benchmarked}/{self.total} benchmarked, {self.failed} failed")
        if self.finalists:
            text += f", {self.timed_in_full}/{self.finalists} timed in full"
        return text

    def finals(self, count: int) -> None:
        """The screening is over: `count` candidates are timed again, in full."""
        with self._lock:
            self.finalists = count
            if self.widget is not None:
                self.bar.max = 2 * self.total + count
            self._draw()

    def step(self, compiled: int = 0, benchmarked: int = 0, failed: int = 0,
             timed_in_full: int = 0) -> None:
        with self._lock:
            self.compiled += compiled
            self.benchmarked += benchmarked
            self.failed += failed
            self.timed_in_full += timed_in_full
            self._draw()

    def _draw(self) -> None:
        if self.widget is not None:
            self.bar.value = self.compiled + self.benchmarked + self.failed + self.timed_in_full
            self.label.value = self.text().split(": ", 1)[1]
        elif self.show and (self.printing or time.perf_counter() - self.started > 2.0):
            self.printing = True
            print(f"\r{self.text()}", end="", file=sys.stderr)

    def close(self) -> None:
        if self.widget is not None:
            self.widget.close()
        elif self.printing:
            print(file=sys.stderr)


def _ipython_kernel():
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if getattr(shell, "kernel", None) is not None else None


# ---------------------------------------------------------------- configurations


def expand_configs(configs, args: tuple, kwargs: dict, where) -> list[dict]:
    """A list of dicts, from a list of dicts, a dict of lists (the cartesian product), or a
    callable of the call's arguments returning either."""
    if callable(configs):
        configs = configs(*args, **kwargs)
    if isinstance(configs, dict):
        keys = list(configs)
        values = [v if isinstance(v, (list, tuple, range)) else [v] for v in configs.values()]
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]
    configs = list(configs or [])
    for config in configs:
        if not isinstance(config, dict):
            raise TileLabArgumentError(
                f"autotune: a configuration must be a dict of keyword values, got "
                f"{type(config).__name__} {config!r}", where,
                hint="configs=[{'block_m': 64}, ...], or a dict of lists such as "
                     "{'block_m': [64, 128]}")
    return configs


def _plain(value):
    """JSON-ready text of a configuration value (a dtype object becomes its name)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def config_label(config: dict) -> str:
    return ", ".join(f"{k}={_plain(v)}" for k, v in config.items()) or "(defaults)"


# ---------------------------------------------------------------- the result


class AutotuneResult(AutotuneView):
    """Every candidate's time or failure, sorted; shows as a table, a plot and the failures."""

    def __init__(self, kernel: str, device: str, timing: str, target: str, backend: str,
                 rows: list[dict], knobs: list[str], seconds: dict, cached: bool = False,
                 baseline: dict | None = None):
        super().__init__(kernel, device, timing, target, backend, rows, knobs, seconds,
                         cached, baseline)
        self.configs: list[dict] = []  # the candidates' keyword values, by row["index"]

    @property
    def best(self) -> dict | None:
        ok = [r for r in self.rows if r["status"] == "ok"]
        return min(ok, key=lambda r: r["median_ms"]) if ok else None

    @property
    def best_config(self) -> dict | None:
        best = self.best
        return self.configs[best["index"]] if best is not None else None

    def to_json(self) -> str:
        return json.dumps({"kernel": self.kernel, "device": self.device,
                           "timing": self.timing, "target": self.target,
                           "rows": self.rows, "knobs": self.knobs, "seconds": self.seconds,
                           "baseline": self.baseline})


# ---------------------------------------------------------------- the tuner


class TunedPerShape:
    """An autotuned kernel with `T.dynamic` sizes: the first call with tensors of new
    shapes tunes for them (cached, like every tune); later calls run the winner."""

    def __init__(self, tuner, args: tuple, kwargs: dict):
        self.tuner, self.args, self.kwargs = tuner, args, kwargs
        self.name = tuner.jit.fn.__name__
        self.config = self.autotune_result = None

    def __repr__(self) -> str:
        return f"<tilelab.autotune {self.name}: tuned per call shape>"

    def specialize(self, *args) -> Kernel:
        """The tuned Kernel for these tensors and scalars (tuning on first use); it takes
        the tensors."""
        kernel = self.tuner._kernel(self.args, self.kwargs, call=args)
        self.config, self.autotune_result = kernel.config, kernel.autotune_result
        return kernel

    @_user_error
    def __call__(self, *args):
        return self.specialize(*args)(*(a for a in args if _is_tensor(a)))


def _failures(result: AutotuneResult) -> str:
    """Why the candidates failed, by reason (the most shared first; each reason's first line),
    with how many configurations each stopped and the first of them: the reason leads, as a
    configuration's label can be long."""
    by_reason: dict[tuple[str, str], list[int]] = {}
    for row in result.rows:
        reason = (row["reason"].strip().splitlines() or [""])[0]
        by_reason.setdefault((row["status"], reason), []).append(row["index"])
    ranked = sorted(by_reason.items(), key=lambda item: -len(item[1]))
    lines = [f"{status}: {reason} ({len(indices)} of {len(result.rows)}, e.g. "
             f"{config_label(result.configs[indices[0]])})"
             for (status, reason), indices in ranked[:3]]
    if len(ranked) > 3:
        lines.append(f"and {len(ranked) - 3} more reasons")
    return "; ".join(lines)


class AutoTuner:
    """What `@tilelab.autotune` returns: call it like the kernel it wraps."""

    def __init__(self, jit: JITFunction, configs, warmup=None, rep=None, ref_prog=None,
                 rtol: float = 1e-2, atol: float = 1e-2, skip_check: bool = False,
                 backend: str = "local", cache_results: bool = True, seed: int = 0,
                 compile_workers: int | None = None, gpus=None, show: bool = True,
                 max_mismatched_ratio: float = 0.0):
        if not isinstance(jit, JITFunction):
            raise TileLabArgumentError(
                f"@tilelab.autotune goes above @tilelab.jit; got {type(jit).__name__}",
                hint="@tilelab.autotune(configs=...)\n@tilelab.jit\ndef kernel(...): ...")
        if backend not in BACKENDS:
            raise TileLabError(f"unknown autotune backend {backend!r}; use "
                               f"{' or '.join(map(repr, BACKENDS))}")
        functools.update_wrapper(self, jit.fn)
        self.jit, self.configs = jit, configs
        self.warmup, self.rep, self.ref_prog = warmup, rep, ref_prog
        self.rtol, self.atol, self.skip_check = rtol, atol, skip_check
        self.max_mismatched_ratio = max_mismatched_ratio
        self.backend, self.cache_results, self.seed = backend, cache_results, seed
        self.compile_workers, self.gpus, self.show = compile_workers, gpus, show
        self.display_result = True  # the table after a tune in a notebook (the magic shows its own)
        self.baseline = None  # a PyTorch function timed beside the candidates (the magic's --bench)
        self.baseline_name = "baseline"
        self._tuned: dict = {}
        self._per_shape: dict = {}  # factory arguments -> do its sizes come with the call?
        self.autotune_result: AutotuneResult | None = None  # of the latest tune

    def __repr__(self) -> str:
        return f"<tilelab.autotune {self.jit.style} {self.jit.fn.__name__}>"

    @property
    def style(self) -> str:
        return self.jit.style

    @_user_error
    def __call__(self, *args, **kwargs):
        if self.jit.style == "factory" and self._sized_by_call(args, kwargs):
            return TunedPerShape(self, args, kwargs)  # tunes when called with tensors
        kernel = self._kernel(args, kwargs)
        if self.jit.style == "factory":
            return kernel
        signature = inspect.signature(self.jit.fn).bind_partial(*args, **{
            k: v for k, v in kwargs.items() if k in inspect.signature(self.jit.fn).parameters})
        tensors = [v for v in signature.arguments.values() if _is_tensor(v)]
        return kernel(*tensors)

    @_user_error
    def compile(self, *args, **kwargs) -> Kernel:
        """The tuned kernel for these arguments, without running it. Inside
        `autotune_inputs(...)` an eager kernel compiled without tensors takes its sizes from
        the given ones (TileLang's `set_autotune_inputs` around `kernel.compile(n=16)`)."""
        given = _GIVEN_INPUTS.get()
        if given is not None and self.jit.style != "factory" and \
                not any(_is_tensor(a) for a in (*args, *kwargs.values())):
            args = (*given, *args)
        return self._kernel(args, kwargs)

    def _where(self):
        return self.jit.source.location(self.jit.source.node)

    def _sized_by_call(self, args: tuple, kwargs: dict) -> bool:
        """Does the factory make a kernel with `T.dynamic` sizes? Traced (not compiled)
        once per arguments: later calls with them go straight to the tuned kernel."""
        from .language.frontend import ShapedByCall

        key = (_freeze(args), _freeze(kwargs))
        if key not in self._per_shape:
            try:
                self._per_shape[key] = isinstance(self.jit.fn(*args, **kwargs), ShapedByCall)
            except Exception:  # noqa: BLE001 - tuning reports what is wrong, per configuration
                self._per_shape[key] = False
        return self._per_shape[key]

    def _kernel(self, args: tuple, kwargs: dict, call: tuple = ()) -> Kernel:
        """The tuned Kernel for these arguments; `call`: the tensors a kernel with
        `T.dynamic` sizes is called with (it is tuned, and cached, per their shapes)."""
        from .compiler import resolve_target

        where = self._where()
        configs = expand_configs(self.configs, args, kwargs, where)
        signature = inspect.signature(self.jit.fn)
        knobs = list(dict.fromkeys(k for c in configs for k in c))
        for knob in knobs:
            if knob not in signature.parameters and knob != "pass_configs":
                raise TileLabArgumentError(
                    f"autotune: {self.jit.fn.__name__} has no parameter {knob!r} to tune",
                    where, hint=f"its parameters: {', '.join(signature.parameters)}")
        given = [*list(signature.parameters)[:len(args)], *kwargs]
        knobs = [k for k in knobs if k not in given]  # the caller's own values win
        fixed = {k: v for k, v in kwargs.items() if k not in knobs}
        tensors = [a for a in (*args, *kwargs.values(), *call) if _is_tensor(a)]
        target = resolve_target(self.jit.target, tensors)
        if target == "cuda":
            from .backends.cuda import nvcc

            target = f"cuda:{nvcc.default_arch()}"
        key = ("tune", tuple(_freeze(a) if not _is_tensor(a) else
                             (tuple(a.shape), _dtype_name(a)) for a in args),
               _freeze({k: v if not _is_tensor(v) else (tuple(v.shape), _dtype_name(v))
                        for k, v in kwargs.items()}), target,
               self.baseline is not None,  # a baseline is timed in the same run as the rest
               tuple((tuple(t.shape), _dtype_name(t)) if _is_tensor(t) else ("scalar", t)
                     for t in call))
        if key not in self._tuned:
            # the caller gave every knob: nothing to tune, the kernel as called (TileLang's
            # autotune does the same; a varlen kernel could not even run on random inputs)
            best, result = {}, None
            if knobs:
                params = signature.parameters
                default = {k: kwargs.get(k, params[k].default) for k in knobs
                           if k in kwargs or (k in params and params[k].default is not
                                              inspect.Parameter.empty)}
                if "pass_configs" in knobs:  # by default, the decorator's settings alone
                    default["pass_configs"] = {}
                candidates: list[dict] = []
                for config in ([default] if len(default) == len(knobs) else []) + configs:
                    config = {k: config.get(k, default.get(k)) for k in knobs}
                    if config not in candidates:
                        candidates.append(config)
                shipped = tuple(TensorShape.of(a) if _is_tensor(a) else a for a in args)
                shipped_kwargs = {k: TensorShape.of(v) if _is_tensor(v) else v
                                  for k, v in fixed.items()}
                shapes = tuple(TensorShape.of(t) if _is_tensor(t) else t for t in call)
                result = self._tune(candidates, knobs, shipped, shipped_kwargs, target, shapes)
                best = result.best_config
                if best is None:
                    raise TileLabError(f"autotune: no configuration of "
                                       f"{self.jit.fn.__name__} ran correctly: "
                                       f"{_failures(result)}", where)
            params, pass_configs = split_config({**kwargs, **best})
            kernel = self.jit.compile(*args, target=target, pass_configs=pass_configs, **params)
            if call:
                kernel = kernel.specialize(*call, target=target)
            self._tuned[key] = (kernel, best, result)
        kernel, best, result = self._tuned[key]
        kernel.config, kernel.autotune_result = dict(best), result
        self.autotune_result = result
        return kernel

    # -- one tune

    def _tune(self, candidates, knobs, args, kwargs, target, call=()) -> AutotuneResult:
        from .cache import cache_key, default_cache
        from .compiler import compiler_fingerprint

        backend = self._backend()
        plain_target = target.partition(":")[0]
        show = self.show
        try:
            device = backend.start(plain_target)
            on_gpu = plain_target == "cuda"
            warmup = self.warmup if self.warmup is not None else (25 if on_gpu else 2)
            rep = self.rep if self.rep is not None else (100 if on_gpu else 10)
            key = cache_key("tilelab-autotune", self.jit.source.text, self.jit.out_idx,
                            [_plain(a) if not isinstance(a, TensorShape) else
                             [list(a.shape), a.dtype] for a in args],
                            {k: _plain(v) if not isinstance(v, TensorShape) else
                             [list(v.shape), v.dtype] for k, v in kwargs.items()},
                            [{k: _plain(v) for k, v in c.items()} for c in candidates],
                            [[list(t.shape), t.dtype] if isinstance(t, TensorShape) else
                             _plain(t) for t in call],
                            target, device, compiler_fingerprint(), _toolchain(plain_target),
                            warmup, rep, self.skip_check, self.rtol, self.atol,
                            self.max_mismatched_ratio, self.ref_prog is not None,
                            self.baseline is not None, _GIVEN_INPUTS.get() is not None)
            cached = default_cache().get(key) if self.cache_results else None
            if cached is not None:
                result = self._result_from(json.loads(cached["autotune.json"]), cached=True)
            else:
                result = self._measure(backend, candidates, knobs, args, kwargs, target,
                                       device, warmup, rep, show, call)
                if self.cache_results:
                    default_cache().put(key, {"autotune.json": result.to_json().encode()})
        finally:
            backend.stop()
        result.configs = candidates
        if show and self.display_result and _ipython_kernel() is not None:
            from IPython.display import display

            display(result)
        return result

    def _backend(self):
        if self.backend == "local":
            return LocalBackend(compile_workers=self.compile_workers, gpus=self.gpus)
        return RayBackend()

    def _result_from(self, data: dict, cached: bool) -> AutotuneResult:
        return AutotuneResult(data["kernel"], data["device"], data["timing"], data["target"],
                              self.backend, data["rows"], data["knobs"], data["seconds"],
                              cached, data.get("baseline"))

    def _measure(self, backend, candidates, knobs, args, kwargs, target, device, warmup,
                 rep, show, call=()) -> AutotuneResult:
        spec = KernelSpec.of(self.jit)
        progress = Progress(self.jit.fn.__name__, len(candidates), show)
        rows = [{"index": i, "config": {k: _plain(v) for k, v in c.items()},
                 "label": config_label(c), "default": i == 0, "status": "pending",
                 "median_ms": None, "calls": None, "reason": "", "compile_s": None,
                 "resources": {}} for i, c in enumerate(candidates)]
        try:
            started = time.perf_counter()

            def compiled(i, outcome):
                if "built" in outcome:
                    rows[i].update(compile_s=round(outcome["built"].compile_seconds, 3),
                                   resources=outcome["built"].resources)
                    progress.step(compiled=1)
                else:
                    rows[i].update(status="compile failed", reason=outcome["reason"])
                    progress.step(failed=1)

            outcomes = backend.compile([(spec, args, {**kwargs, **c}, target, call)
                                        for c in candidates], compiled)
            compile_seconds = time.perf_counter() - started
            built = {i: o["built"] for i, o in enumerate(outcomes) if "built" in o}
            reference = None
            if not self.skip_check:
                if self.ref_prog is not None:
                    reference = _pickled(self.ref_prog)
                elif built:
                    reference = built[min(built)]  # the default, when it compiled
            tune = f"{os.getpid()}-{id(self)}-{time.time_ns()}"
            params = next(iter(built.values())).params if built else []
            given = _given_inputs(params) if built else None  # (none compiled: said below)
            tasks = [(i, {"tune": tune, "target": target.partition(":")[0],
                          "params": params, "seed": self.seed, "inputs": given, "candidate": b,
                          "reference": reference, "rtol": self.rtol, "atol": self.atol,
                          "max_mismatched_ratio": self.max_mismatched_ratio,
                          "warmup": warmup, "rep": rep}) for i, b in built.items()]
            started = time.perf_counter()
            if rep >= 3 * SCREEN_REP:
                self._screen_then_time(backend, tasks, rows, progress, warmup)
            else:
                self._run_tasks(backend, tasks, rows, progress)
            baseline = None
            if self.baseline is not None and built:
                task = dict(tasks[0][1], candidate=_pickled(self.baseline), reference=None)
                outcome = backend.run(0, task)
                baseline = {"name": self.baseline_name, "median_ms": outcome.get("ms"),
                            "reason": outcome.get("reason", "")}
            seconds = {"compile": round(compile_seconds, 3),
                       "benchmark": round(time.perf_counter() - started, 3),
                       "compile_workers": getattr(backend, "compile_workers", None),
                       "bench_workers": backend.workers}
        finally:
            progress.close()
        timing = "cuda-events" if target.startswith("cuda") else "wall-clock (CPU)"
        order = {"ok": 0, "wrong result": 1, "run failed": 2, "compile failed": 3}
        rows.sort(key=lambda r: (order.get(r["status"], 4), r["median_ms"] or 0.0, r["index"]))
        default_ms = next((r["median_ms"] for r in rows if r["default"]), None)
        for r in rows:
            ms = r["median_ms"]
            r["speedup_vs_default"] = default_ms / ms if ms and default_ms else None
            base = baseline and baseline.get("median_ms")
            r["speedup_vs_baseline"] = base / ms if ms and base else None
        return AutotuneResult(self.jit.fn.__name__, device, timing, target.partition(":")[0],
                              backend.name, rows, knobs, seconds, False, baseline)

    @classmethod
    def _screen_then_time(cls, backend, tasks, rows, progress, warmup) -> None:
        """Every candidate checked and timed with a few calls; those near the fastest
        timed again in full (the check is not repeated)."""
        quick = {"warmup": min(warmup, SCREEN_WARMUP), "rep": SCREEN_REP}
        cls._run_tasks(backend, [(i, {**t, **quick}) for i, t in tasks], rows, progress)
        timed = [rows[i]["median_ms"] for i, _ in tasks if rows[i]["status"] == "ok"]
        if not timed:
            return
        cutoff = SCREEN_KEEP * min(timed)
        finalists = [(i, {**t, "reference": None}) for i, t in tasks
                     if rows[i]["status"] == "ok" and rows[i]["median_ms"] <= cutoff]
        progress.finals(len(finalists))
        cls._run_tasks(backend, finalists, rows, progress, final=True)

    @staticmethod
    def _run_tasks(backend, tasks, rows, progress, final: bool = False) -> None:
        """Each benchmark worker takes the next task when it is free."""
        queue = list(reversed(tasks))
        lock = threading.Lock()

        def worker(w):
            while True:
                with lock:
                    if not queue:
                        return
                    i, task = queue.pop()
                outcome = backend.run(w, task)
                if outcome["status"] == "ok":
                    rows[i].update(status="ok", median_ms=outcome["ms"], calls=task["rep"])
                    progress.step(**{"timed_in_full" if final else "benchmarked": 1})
                else:
                    rows[i].update(status=outcome["status"], reason=outcome["reason"])
                    progress.step(failed=1)

        threads = [threading.Thread(target=worker, args=(w,), daemon=True)
                   for w in range(backend.workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def _pickled(fn) -> bytes:
    """A reference or baseline function as bytes a worker can load: by value (cloudpickle),
    so a lambda from a notebook cell travels too."""
    import cloudpickle

    return cloudpickle.dumps(fn)


@functools.cache
def _toolchain(target: str) -> str:
    if target != "cuda":
        return "llvm"
    import subprocess

    from .backends.cuda import nvcc

    path = nvcc.find_nvcc()
    if path is None:
        return "nvrtc"
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else path


def autotune(configs=None, warmup: int | None = None, rep: int | None = None, ref_prog=None,
             rtol: float = 1e-2, atol: float = 1e-2, skip_check: bool = False,
             backend: str = "local", cache_results: bool = True, compile_workers=None,
             gpus=None, show: bool = True, max_mismatched_ratio: float = 0.0):
    """Tune a `@tilelab.jit` kernel over `configs` (see the module docstring).

    `configs`: a list of dicts of keyword values, a dict of lists (their cartesian
    product), or a callable of the call's arguments returning either. `warmup`/`rep`
    count calls per timing (default 25/100 on a GPU, 2/10 on the CPU; with `rep` ≥ 30 every
    candidate is screened with 10 calls first and only those within 25% of the fastest
    get `rep`). `ref_prog`: the function each candidate's output must match (default: the
    kernel's own defaults);
    `max_mismatched_ratio`: the fraction of its values a candidate may have outside
    `rtol`/`atol` (TileLang's autotuner allows 1%, tilelab's none unless told);
    `skip_check` times without checking. `backend`: "local" or "ray" (docs/AUTOTUNE.md).
    `compile_workers`: processes for the compile phase (default: one per core); `gpus`: the
    GPUs to benchmark on, as CUDA_VISIBLE_DEVICES names them (default: every visible one).
    """
    def decorate(jit):
        return AutoTuner(jit, configs, warmup=warmup, rep=rep, ref_prog=ref_prog, rtol=rtol,
                         atol=atol, skip_check=skip_check, backend=backend,
                         cache_results=cache_results, compile_workers=compile_workers,
                         gpus=gpus, show=show, max_mismatched_ratio=max_mismatched_ratio)

    return decorate
