"""Timing kernels: `do_bench` as in the tutorial, and a Kernel's profiler.

On a GPU, time is measured with CUDA events around many launches, after a
warm-up, with the L2 cache flushed before each launch so that every run
reads from memory; the median is reported. On the CPU the same protocol
uses the wall clock (and says so).
"""

from __future__ import annotations

import statistics
import time


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def do_bench(fn, warmup: int = 25, rep: int = 100, backend: str = "event",
             flush_l2: bool = True, return_mode: str = "median"):
    """Median time of `fn()` in milliseconds (`return_mode="all"` gives every sample).

    `warmup` and `rep` count calls. With backend "event" on a machine with a
    GPU, CUDA events time each call; otherwise the wall clock does.
    """
    use_events = backend == "event" and _cuda_available()
    for _ in range(max(warmup, 1)):
        fn()
    samples = []
    if use_events:
        import torch

        cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
        torch.cuda.synchronize()
        for i in range(rep):
            if flush_l2:
                cache.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    else:
        for _ in range(rep):
            start = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - start) * 1e3)
    if return_mode == "all":
        return samples
    if return_mode == "min":
        return min(samples)
    if return_mode == "mean":
        return statistics.fmean(samples)
    return statistics.median(samples)


class Profiler:
    """`kernel.get_profiler()`: benchmark a kernel on fresh random inputs."""

    def __init__(self, kernel):
        self.kernel = kernel

    def random_inputs(self, seed: int | None = None):
        import torch

        from .ir.dtypes import as_dtype, torch_dtype

        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        device = "cuda" if self.kernel.target == "cuda" else "cpu"
        tensors = []
        for p in self.kernel.inputs:
            dtype = torch_dtype(as_dtype(p.dtype))
            if dtype.is_floating_point:
                t = torch.randn(p.shape, generator=gen).to(dtype)
            else:
                t = torch.randint(-8, 8, p.shape, generator=gen).to(dtype)
            tensors.append(t.to(device))
        return tensors

    def do_bench(self, func=None, warmup: int = 25, rep: int = 100, backend: str = "event",
                 inputs=None):
        inputs = inputs if inputs is not None else self.random_inputs()
        target = func or self.kernel
        return do_bench(lambda: target(*inputs), warmup=warmup, rep=rep, backend=backend)

    def assert_allclose(self, reference, inputs=None, rtol=1e-2, atol=1e-2):
        import torch

        inputs = inputs if inputs is not None else self.random_inputs()
        actual = self.kernel(*inputs)
        expected = reference(*inputs)
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
