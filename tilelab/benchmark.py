"""`tilelab.bench`: a kernel beside its baseline, checked first, then timed in one run.

The protocol, in order:

1. **check**: on every input set, the kernel's output is compared with the
   baseline's (`compare`, rtol/atol as in `torch.testing`); a wrong kernel
   raises `CheckFailed` instead of getting a fast time;
2. **time**: kernel and baseline alternate, per input set, under
   `tilelab.profiler.do_bench` (on a GPU: CUDA events, warm-up, L2 flushed
   before every launch; on the CPU: the wall clock, labelled so). With
   `args` a callable, each of `input_sets` fresh sets is timed and the median
   over sets is reported;
3. **report**: a `BenchResult` (a `BenchView`: table and bar chart in a
   notebook) with the median latency, TFLOP/s and GB/s from the declared
   `flops`/`bytes`, the percentage of the device's roofline when its peaks are
   known (`PEAKS`), and the speedup over the baseline.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass

from .profiler import do_bench
from .viz.measurements import BenchView


@dataclass(frozen=True)
class DevicePeak:
    """A GPU's peak figures: memory bandwidth and dense fp16/bf16 tensor-core math."""

    name: str  # matched as a substring of torch.cuda.get_device_name()
    memory_tbps: float
    fp16_tflops: float
    source: str


# From NVIDIA's datasheets; tensor-core figures are dense (half the "with sparsity" ones).
# More specific names come first (they are matched in order).
PEAKS = (
    DevicePeak("H200 NVL", 4.8, 835.5, "NVIDIA H200 datasheet (NVL): 4.8 TB/s HBM3e, "
               "FP16 Tensor Core 1,671 TFLOPS with sparsity"),
    DevicePeak("H200", 4.8, 989.4, "NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, "
               "FP16 Tensor Core 1,979 TFLOPS with sparsity"),
    DevicePeak("H100 PCIe", 2.0, 756.0, "NVIDIA H100 datasheet (PCIe): 2 TB/s HBM2e, "
               "FP16 Tensor Core 1,513 TFLOPS with sparsity"),
    DevicePeak("H100", 3.35, 989.4, "NVIDIA H100 datasheet (SXM): 3.35 TB/s HBM3, "
               "FP16 Tensor Core 1,979 TFLOPS with sparsity"),
    DevicePeak("A100-SXM4-80GB", 2.039, 312.0, "NVIDIA A100 datasheet (80GB SXM): "
               "2,039 GB/s HBM2e, FP16 Tensor Core 312 TFLOPS dense"),
)


def device_peak(device_name: str) -> DevicePeak | None:
    return next((p for p in PEAKS if p.name in device_name), None)


class CheckFailed(AssertionError):
    """The kernel's output differs from the baseline's: it is not worth timing."""

    def __init__(self, name: str, baseline_name: str, comparison: dict):
        self.name, self.baseline_name, self.comparison = name, baseline_name, comparison
        super().__init__(f"{name} differs from {baseline_name}: max abs error "
                         f"{comparison['max_abs_error']}, {comparison['mismatched']} of "
                         f"{comparison['total']} values outside rtol={comparison['rtol']}, "
                         f"atol={comparison['atol']}. {comparison['message']}".rstrip())


def _finite(value) -> float | None:
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def compare(actual, expected, rtol: float = 1e-2, atol: float = 1e-2,
            max_mismatched_ratio: float = 0.0) -> dict:
    """How far `actual` is from `expected` (tensors, arrays or tuples of them).

    Returns JSON-ready data: passed, max_abs_error, max_rel_error, mismatched,
    total, rtol, atol, message (why it failed when the shapes disagree). It passes where
    at most `max_mismatched_ratio` of the values (rounded down to a count) lie outside
    rtol/atol, and none is NaN or infinite where the reference's is not.
    """
    import torch

    result = {"passed": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "mismatched": 0,
              "total": 0, "rtol": rtol, "atol": atol, "message": ""}
    actual_list = list(actual) if isinstance(actual, (tuple, list)) else [actual]
    expected_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(actual_list) != len(expected_list):
        return {**result, "passed": False, "max_abs_error": None, "max_rel_error": None,
                "message": f"{len(actual_list)} outputs, but the reference gives "
                           f"{len(expected_list)}"}
    for a, e in zip(actual_list, expected_list):
        # on the output's device: copying a large GPU output to the host and comparing it
        # there took longer than timing the kernel (an 8192² GEMM: about a second)
        a = torch.as_tensor(a).detach().double()
        e = torch.as_tensor(e).detach().to(a.device).double()
        if a.shape != e.shape:
            return {**result, "passed": False, "max_abs_error": None, "max_rel_error": None,
                    "message": f"the output has shape {tuple(a.shape)}, the reference "
                               f"{tuple(e.shape)}"}
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        # NaN where the reference has NaN, and an infinity where it has the same one, agree
        # (as `close` says); any other NaN or infinity is an infinite error
        same = (a == e) | (a.isnan() & e.isnan())
        inf = float("inf")
        error = (a - e).abs().masked_fill(same, 0.0).nan_to_num(nan=inf, posinf=inf)
        nonzero = e != 0
        relative = (error[nonzero] / e[nonzero].abs()) if bool(nonzero.any()) else error[:0]
        result["mismatched"] += int((~close).sum())
        result["total"] += a.numel()
        if a.numel():
            result["max_abs_error"] = max(result["max_abs_error"], float(error.max()))
        if relative.numel():
            result["max_rel_error"] = max(result["max_rel_error"], float(relative.max()))
    result["passed"] = result["mismatched"] <= int(result["total"] * max_mismatched_ratio)
    result["max_abs_error"] = _finite(result["max_abs_error"])
    result["max_rel_error"] = _finite(result["max_rel_error"])
    if result["max_abs_error"] is None:
        result["message"] = "the output holds NaN or infinite values where the reference does not"
        result["passed"] = False
    return result


class BenchResult(BenchView):
    """What `bench` measured; displays as a table and a bar chart."""

    def __init__(self, kernel, device, timing, rows, check=None, peak=None):
        super().__init__(kernel, device, timing, rows)
        self.check = check  # the comparison with the baseline, when one was made
        self.peak = peak

    @property
    def median_ms(self) -> float:
        return self.rows[0]["median_ms"]

    @property
    def speedup(self) -> float | None:
        return self.rows[0]["speedup"]


class _Progress:
    """k of n timing steps, shown once a run has taken a second: a bar in a kernel, else a line."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.done = total, label, 0
        self.start = time.perf_counter()
        self.bar = None
        self.printing = False

    def step(self) -> None:
        self.done += 1
        if self.bar is None and not self.printing and time.perf_counter() - self.start > 1.0:
            self._open()
        if self.bar is not None:
            self.bar.value = self.done
        elif self.printing:
            print(f"\r{self.label}: {self.done}/{self.total}", end="", file=sys.stderr)

    def _open(self) -> None:
        ipython = sys.modules.get("IPython")  # not imported: not in a notebook either
        shell = ipython.get_ipython() if ipython is not None else None
        if getattr(shell, "kernel", None) is not None:
            import ipywidgets
            from IPython.display import display

            self.bar = ipywidgets.IntProgress(value=self.done, max=self.total,
                                              description=self.label[:20])
            display(self.bar)
        else:
            self.printing = True

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.printing:
            print(file=sys.stderr)


def _device_of(input_sets) -> tuple[str, str, DevicePeak | None]:
    """(device name, timing method, peaks) for where the inputs live."""
    on_gpu = any(getattr(getattr(a, "device", None), "type", None) == "cuda"
                 for inputs in input_sets for a in inputs)
    if on_gpu:
        import torch

        name = torch.cuda.get_device_name()
        return name, "cuda-events", device_peak(name)
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)", "wall-clock (CPU)", None


def _row(name, ms, baseline_name, baseline_ms, flops, nbytes, peak) -> dict:
    row = {"name": name, "median_ms": ms, "baseline_name": baseline_name,
           "baseline_ms": baseline_ms, "speedup": baseline_ms / ms if baseline_ms else None}
    seconds = ms * 1e-3
    if flops:
        row["tflops"] = flops / seconds / 1e12
    if nbytes:
        row["gbps"] = nbytes / seconds / 1e9
    if peak is not None and (flops or nbytes):
        # the roofline's time for this work: the slower of doing the math and moving the bytes
        bound = max((flops or 0) / (peak.fp16_tflops * 1e12),
                    (nbytes or 0) / (peak.memory_tbps * 1e12))
        row["roofline_pct"] = 100.0 * bound / seconds
    return row


def _name(fn, default: str) -> str:
    return getattr(fn, "name", None) or getattr(fn, "__name__", None) or default


def bench(fn, baseline=None, args=(), warmup: int | None = None, rep: int | None = None,
          flops: float | None = None, bytes: float | None = None,
          check: bool = True, rtol: float = 1e-2, atol: float = 1e-2, input_sets: int = 3,
          name: str | None = None, baseline_name: str | None = None) -> BenchResult:
    """Check `fn(*args)` against `baseline(*args)`, then time both in one run.

    `args` is a tuple of inputs, or a callable returning a fresh tuple (then
    `input_sets` sets are checked and timed). `warmup`/`rep` count calls
    (default 25/100 on a GPU, 2/10 on the CPU). `flops` and `bytes` are the
    work of one call, for TFLOP/s, GB/s and the roofline percentage.
    """
    sets = [tuple(args()) for _ in range(max(input_sets, 1))] if callable(args) else [tuple(args)]
    device, timing, peak = _device_of(sets)
    on_gpu = timing == "cuda-events"
    warmup = warmup if warmup is not None else (25 if on_gpu else 2)
    rep = rep if rep is not None else (100 if on_gpu else 10)
    name = name or _name(fn, "kernel")
    baseline_name = baseline_name or _name(baseline, "baseline")

    comparison = None
    if check and baseline is not None:
        for inputs in sets:
            comparison = compare(fn(*inputs), baseline(*inputs), rtol, atol)
            if not comparison["passed"]:
                raise CheckFailed(name, baseline_name, comparison)

    candidates = [fn] + ([baseline] if baseline is not None else [])
    samples: list[list[float]] = [[] for _ in candidates]
    progress = _Progress(len(sets) * len(candidates), f"bench {name}")
    for inputs in sets:
        for f, times in zip(candidates, samples):
            times.append(do_bench(lambda f=f, inputs=inputs: f(*inputs), warmup=warmup, rep=rep))
            progress.step()
    progress.close()

    kernel_ms, *others = [statistics.median(times) for times in samples]
    base_ms = others[0] if others else None
    base = baseline_name if others else None
    rows = [_row(name, kernel_ms, base, base_ms, flops, bytes, peak)]
    if others:
        rows.append(_row(baseline_name, base_ms, base, base_ms, flops, bytes, peak))
    return BenchResult(name, device, timing, rows, comparison, peak)

