"""Timing kernels: `do_bench` as in the tutorial, and a Kernel's profiler.

On a GPU, time is measured with CUDA events around many launches, after a
warm-up, with the L2 cache flushed before each launch so that every run
reads from memory; the median is reported. On the CPU the same protocol
uses the wall clock (and says so).
"""

from __future__ import annotations

import enum
import statistics
import time


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def do_bench(fn, warmup: int = 25, rep: int = 100, backend: str = "event",
             flush_l2: bool = True, return_mode: str = "median", _n_warmup: int = 0,
             _n_repeat: int = 0):
    """Median time of `fn()` in milliseconds (`return_mode="all"` gives every sample).

    `warmup` and `rep` count calls; TileLang's `_n_warmup`/`_n_repeat` counts, when
    positive, take their place (TileLang's own `warmup`/`rep` are milliseconds). With
    backend "event" on a machine with a GPU, CUDA events time each call; otherwise
    the wall clock does.
    """
    warmup, rep = _n_warmup or warmup, _n_repeat or rep
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


class TensorSupplyType(enum.Enum):
    """How a profiler fills a kernel's inputs (TileLang's names)."""

    Auto = "auto"  # normal floats, small integers
    Normal = "normal"
    Randn = "normal"
    Uniform = "uniform"  # in [0, 1)
    Integer = "integer"  # integers in [-8, 8), also for float tensors
    Zero = "zero"
    One = "one"


def supply_tensor(param, supply=TensorSupplyType.Auto, device: str = "cpu", generator=None):
    """A fresh tensor for a kernel parameter (anything with `shape` and `dtype`), filled as
    `supply` says."""
    import torch

    from .ir.dtypes import as_dtype, torch_dtype

    dtype = torch_dtype(as_dtype(param.dtype))
    shape = [int(s) for s in param.shape]
    kind = TensorSupplyType(supply).value
    if kind == "auto":
        kind = "normal" if dtype.is_floating_point else "integer"
    if kind == "normal":
        t = torch.randn(shape, generator=generator)
    elif kind == "uniform":
        t = torch.rand(shape, generator=generator)
    elif kind == "integer":
        t = torch.randint(-8, 8, shape, generator=generator)
    else:
        t = torch.full(shape, 0 if kind == "zero" else 1)
    return t.to(dtype).to(device)


def get_tensor_supply(supply=TensorSupplyType.Integer, device: str | None = None):
    """TileLang's `tilelang.utils.tensor.get_tensor_supply`: a function from a kernel
    parameter to a fresh tensor (on the GPU where there is one)."""
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return lambda param: supply_tensor(param, supply, device)


class Profiler:
    """`kernel.get_profiler()`: benchmark a kernel on fresh random inputs."""

    def __init__(self, kernel, supply=None):
        self.kernel = kernel
        self.supply = TensorSupplyType(supply or TensorSupplyType.Auto)

    @property
    def func(self):
        """TileLang's name for the kernel a profiler runs (its examples call it directly)."""
        return self.kernel

    def random_inputs(self, seed: int | None = None):
        import torch

        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        device = "cuda" if self.kernel.target == "cuda" else "cpu"
        return [supply_tensor(p, self.supply, device, gen) for p in self.kernel.inputs]

    def _get_inputs(self, with_output: bool = False):
        """TileLang's (private) name for `random_inputs`, which its examples call; with
        `with_output`, a tensor for each output parameter too, in signature order."""
        if not with_output:
            return self.random_inputs()
        device = "cuda" if self.kernel.target == "cuda" else "cpu"
        return [supply_tensor(p, self.supply, device) for p in self.kernel.params]

    def do_bench(self, func=None, warmup: int = 25, rep: int = 100, backend: str = "event",
                 inputs=None, n_warmup: int = 0, n_repeat: int = 0, input_tensors=None):
        """Median milliseconds of `func` (default: the kernel) on `inputs` (default: random
        ones); the counts as the module's `do_bench` takes them (`n_warmup`/`n_repeat` are
        its `_n_warmup`/`_n_repeat`)."""
        inputs = inputs if inputs is not None else input_tensors
        inputs = inputs if inputs is not None else self.random_inputs()
        target = func or self.kernel
        return do_bench(lambda: target(*inputs), warmup=warmup, rep=rep, backend=backend,
                        _n_warmup=n_warmup, _n_repeat=n_repeat)

    def assert_allclose(self, reference, inputs=None, rtol=1e-2, atol=1e-2,
                        input_tensors=None, max_mismatched_ratio=0.01):
        """Run the kernel and `reference` on the same inputs; all outputs must agree, but
        for up to `max_mismatched_ratio` of their elements (TileLang's default: 1%)."""
        import torch

        inputs = inputs if inputs is not None else input_tensors
        inputs = inputs if inputs is not None else self.random_inputs()
        actual = self.kernel(*inputs)
        expected = reference(*inputs)
        actual = actual if isinstance(actual, (tuple, list)) else [actual]
        expected = expected if isinstance(expected, (tuple, list)) else [expected]
        if len(actual) != len(expected):
            raise AssertionError(f"the kernel returns {len(actual)} output(s), the reference "
                                 f"{len(expected)}")
        for a, e in zip(actual, expected):
            mismatches(a, torch.as_tensor(e), rtol, atol, max_mismatched_ratio)


def mismatches(actual, expected, rtol: float, atol: float, max_ratio: float) -> None:
    """TileLang's comparison: an AssertionError where more than `max_ratio` of the
    elements (rounded down to a count) are outside `rtol`/`atol`; none allowed, at 0."""
    import torch

    actual, expected = actual.float().cpu(), expected.float().cpu()
    if max_ratio == 0:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        return
    bad = ~torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    allowed = int(bad.numel() * max_ratio)
    if int(bad.sum()) > allowed:
        raise AssertionError(f"{int(bad.sum())} of {bad.numel()} elements differ beyond "
                             f"rtol={rtol}, atol={atol}; {allowed} ({max_ratio:.2%}) may")
