"""What the example scripts share: the command line, the timing and the report.

Each script in examples/ keeps what is its own (the kernel, a PyTorch
`reference`, `check` and a short `main`) and takes the rest from here:

    args = common.parser(__doc__, sizes={"m": "rows", "n": "columns"}, block_m=1).parse_args()
    m = common.pick_size(args.m, args.device, gpu=8192, cpu=2048)
    ...
    tilelab_ms, torch_ms = common.time_against(lambda: kernel(x), lambda: reference(x),
                                               args.device)
    common.report(f"M = {m}, on {args.device}", tilelab_ms, torch_ms, gigabytes=...)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from tilelab.profiler import do_bench


def default_device() -> str:
    """"cuda" when PyTorch sees a GPU, else "cpu" (the CPU backend runs every kernel too)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def parser(description: str, sizes: dict[str, str | None] | None = None, *,
           block_m: int | None = None) -> argparse.ArgumentParser:
    """A command line with --device, one option per problem size and, if asked, --block-m.

    `description` is the script's docstring; --help shows its first line.
    `sizes` maps each size to its help text: {"m": "rows"} adds `--m`, an
    integer left at None when not given, so that `pick_size` can choose a size
    that suits the device. `block_m`, when given, is the default of --block-m.
    The script adds its own options to the parser this returns.
    """
    result = argparse.ArgumentParser(description=description.splitlines()[0])
    result.add_argument("--device", choices=["cpu", "cuda"], default=default_device())
    for name, help_text in (sizes or {}).items():
        result.add_argument(f"--{name}", type=int, default=None, help=help_text)
    if block_m is not None:
        result.add_argument("--block-m", type=int, default=block_m)
    return result


def pick_size(given: int | None, device: str, *, gpu: int, cpu: int) -> int:
    """The size from the command line if there is one, else `gpu` or `cpu` by device.

    The CPU backend is much slower than a GPU, so its default problems are smaller.
    """
    return given or (gpu if device == "cuda" else cpu)


def time_against(kernel_fn: Callable[[], object], baseline_fn: Callable[[], object],
                 device: str, *, cpu_runs: tuple[int, int] = (5, 20)) -> tuple[float, float]:
    """Median milliseconds of one call of `kernel_fn` and of `baseline_fn`: (ours, baseline).

    Both are timed the same way by `tilelab.profiler.do_bench`: `warmup` calls
    untimed, then `rep` timed calls. That is 25 and 100 on a GPU, and
    `cpu_runs` = (warmup, rep) on the CPU, where slow kernels (GEMM, attention)
    ask for fewer.
    """
    warmup, rep = (25, 100) if device == "cuda" else cpu_runs
    ours_ms = do_bench(kernel_fn, warmup=warmup, rep=rep)
    baseline_ms = do_bench(baseline_fn, warmup=warmup, rep=rep)
    return ours_ms, baseline_ms


def report(title: str, ours_ms: float, baseline_ms: float, *, gigabytes: float | None = None,
           flop: float | None = None,
           labels: tuple[str, str] = ("tilelab", "PyTorch")) -> None:
    """Print `title`, a line per timing, and how many times faster ours is than the baseline.

    With `gigabytes` (memory one call reads and writes, in 1e9 bytes) each line
    also shows the bandwidth, with `flop` (floating-point operations in one call)
    the throughput. `labels` names the two lines, ours first.
    """
    print(title)
    width = max(len(label) for label in labels) + 1  # room for the colon
    for label, ms in zip(labels, (ours_ms, baseline_ms)):
        line = f"  {label + ':':<{width}} {ms:8.4f} ms"
        if gigabytes is not None:
            line += f"  {gigabytes / ms * 1e3:7.1f} GB/s"
        if flop is not None:
            line += f"  {flop / ms * 1e-9:8.4f} TFLOP/s"
        print(line)
    print(f"  speedup: {baseline_ms / ours_ms:.2f}x")
