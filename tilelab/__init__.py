"""tilelab: a tile-level GPU kernel language and compiler with a notebook around it.

`import tilelab` is cheap and imports no TVM: compiling (which needs TVM) loads
it on first use, so exported GPU kernels can run where only torch and a
driver exist.
"""

from __future__ import annotations

from .errors import (  # noqa: F401
    TileLabArgumentError,
    TileLabCompileError,
    TileLabError,
    TileLabSyntaxError,
    TileLabTypeError,
    TileLabWarning,
)

__version__ = "0.1.0"

_LAZY = {
    "jit": ("kernel", "jit"),
    "compile": ("kernel", "compile"),
    "lower": ("kernel", "lower"),
    "Kernel": ("kernel", "Kernel"),
    "JITFunction": ("kernel", "JITFunction"),
    "PassConfigKey": ("compiler", "PassConfigKey"),
    "Trace": ("trace", "Trace"),
    "load": ("kernel", "load"),
    "language": ("language", None),
    "profiler": ("profiler", None),
    "viz": ("viz", None),
    "bench": ("benchmark", "bench"),
    "autotune": ("autotuner", "autotune"),
    "autotune_inputs": ("autotuner", "autotune_inputs"),
    "AutoTuner": ("autotuner", "AutoTuner"),
}


def load_ipython_extension(ipython):
    """`%load_ext tilelab`: the %%tilekernel and %tilelab magics (tilelab.notebook)."""
    from .notebook import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):
    from .notebook import unload_ipython_extension as unload

    unload(ipython)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'tilelab' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(f".{module_name}", __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value
