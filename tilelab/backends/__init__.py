"""Backends: what turns a tile program into a runnable kernel, one object per target.

A backend has four parts, which `compiler.py` calls in this order:

* `build`: run its pass list (tilelab's tile-level passes, then TVM's lowering)
  and TVM's code generator on the program;
* `finish`: turn what TVM generated into the kernel's files (a shared library;
  a cubin compiled by tilelab's own nvcc step) and record code and resources in
  the Trace;
* `load`: make a runnable kernel again from those files (a compile-cache hit);
* `cache_target`: what the cache key must name besides the program (the host
  CPU for LLVM code, the CUDA toolchain for cubins).

`backend_for(target)` picks one by the target's kind (`cpu`, `cuda:sm_90a` -> `cuda`).
"""

from __future__ import annotations

import contextvars


class CompiledArtifact:
    """What a backend produced: a runner for the kernel, its Trace, and (CUDA) launch data."""

    def __init__(self, runner, trace, launch: dict | None = None, cubin: bytes | None = None):
        self.runner = runner
        self.trace = trace
        self.launch = launch  # kernel_name, grid, block, dynamic_smem, arch, arg_order
        self.cubin = cubin
        self.files: dict = {}  # the cache entry (kernel.so, or kernel.cubin and launch.json)


class Backend:
    """The interface every backend implements (see the module's docstring)."""

    kind = ""

    def cache_target(self, target: str) -> str:
        raise NotImplementedError

    def build(self, mod, program, target: str, configs: dict, trace):
        raise NotImplementedError

    def finish(self, program, trace, executable, recorder, target: str, configs: dict):
        """-> (CompiledArtifact, {file name: bytes}) for the cache."""
        raise NotImplementedError

    def load(self, entry, program, trace) -> CompiledArtifact:
        raise NotImplementedError


def backend_for(target: str) -> Backend:
    """The backend of a resolved target (`cpu`, `cuda`, `cuda:sm_80`)."""
    kind = target.partition(":")[0]
    if kind == "cpu":
        from .cpu import BACKEND
    elif kind == "cuda":
        from .cuda import BACKEND
    else:
        from ..errors import TileLabError

        raise TileLabError(f"no backend for target {target!r}; choose cpu or cuda")
    return BACKEND


# ---------------------------------------------------------------- running a pass list
#
# `tvm.tirx.build` takes its pass pipeline by name, from a registry of factories. Each
# backend registers one factory, once, that reads the pass list of the build under way
# from this context variable; a build sets it for its own duration.

_PASS_LIST: contextvars.ContextVar = contextvars.ContextVar("tilelab_pass_list")


def register_pipeline(name: str, finalize_host_passes, finalize_device_passes) -> None:
    """Register the pipeline `name`, whose passes are those `run_pipeline` hands over."""
    import tvm
    from tvm import tirx

    def factory():
        return tvm.transform.Sequential(_PASS_LIST.get(), name=name), \
            finalize_host_passes, finalize_device_passes

    tirx.compilation_pipeline.register_tir_pipeline(name, factory)


def run_pipeline(name: str, passes: list, mod, target):
    """`tvm.tirx.build` with the registered pipeline `name` running `passes`."""
    import tvm

    token = _PASS_LIST.set(passes)
    try:
        return tvm.tirx.build(mod, target=target, pipeline=name)
    finally:
        _PASS_LIST.reset(token)
