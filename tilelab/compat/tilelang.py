"""TileLang's Python API on tilelab: `import tilelang; import tilelang.language as T`.

A TileLang program runs here with one change: its imports. Either replace
`import tilelang` by `import tilelab.compat.tilelang as tilelang`, or call
`install()` once so that `import tilelang`, `import tilelang.language as T` and
`from tilelang.autotuner import autotune` find tilelab (the examples runner,
`scripts/tilelang_examples.py`, does this). What the package offers is tilelab's
own: `tilelang.jit` is `tilelab.jit` (with TileLang's rule that global tensors read
as 0 and are not written outside their shapes, `tl.safe_global_access`),
`tilelang.language` is `tilelab.language`.
Names of TileLang's that tilelab does not have raise a `TileLabError` saying so.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.abc
import importlib.machinery
import os
import sys
import types

from .. import kernel as _kernel
from ..cache import cache_dir
from ..compiler import TILELANG_ONLY_CONFIGS
from ..compiler import PassConfigKey as _PassConfigKey
from ..errors import TileLabError
from ..ir.dtypes import as_dtype as _as_dtype
from ..profiler import Profiler, TensorSupplyType, do_bench, get_tensor_supply  # noqa: F401


def _pass_config_key():
    """`tilelang.PassConfigKey`: tilelab's keys, and TileLang's others under TileLang's names
    (`TL_DISABLE_WARP_SPECIALIZED`, ...), which compile with one warning and no effect."""
    members = {k.name: k.value for k in _PassConfigKey}
    for key in sorted(TILELANG_ONLY_CONFIGS):
        prefix, _, rest = key.partition(".")
        members.setdefault({"tl": "TL_", "tirx": "TIR_"}.get(prefix, prefix.upper() + "_")
                           + rest.upper(), key)
    return enum.Enum("PassConfigKey", members, type=str, module=__name__)


PassConfigKey = _pass_config_key()
DataType = _as_dtype  # `DataType("float16").bits`
JITKernel = _kernel.Kernel
SAFE_GLOBAL_ACCESS = _PassConfigKey.TL_SAFE_GLOBAL_ACCESS.value
SAFE_MEMORY_OFF = "tl.disable_safe_memory_legalize"  # TileLang's key for turning it off


def tilelang_configs(pass_configs) -> dict:
    """The pass configs of a program compiled through TileLang's API: TileLang's rule for
    global tensors' edges (reads outside give 0, writes there are skipped;
    passes/safe_global_access.py) unless the program turns it off with TileLang's key."""
    configs = {}
    off = False
    for key, value in (pass_configs or {}).items():
        if str(getattr(key, "value", key)) == SAFE_MEMORY_OFF:
            off = bool(value)
        else:
            configs[key] = value
    if not any(str(getattr(k, "value", k)) == SAFE_GLOBAL_ACCESS for k in configs):
        configs[SAFE_GLOBAL_ACCESS] = not off
    return configs


def jit(fn=None, *, out_idx=None, target="auto", pass_configs=None, **options):
    """`@tilelang.jit`: tilelab's, with TileLang's rule for global tensors' edges."""
    return _kernel.jit(fn, out_idx=out_idx, target=target,
                       pass_configs=tilelang_configs(pass_configs), **options)


def compile(program, out_idx=None, target="auto", pass_configs=None, **_options):  # noqa: A001
    """`tilelang.compile`: tilelab's, with TileLang's rule for global tensors' edges."""
    return _kernel.compile(program, out_idx=out_idx, target=target,
                           pass_configs=tilelang_configs(pass_configs))


def cdiv(a, b):
    """ceil(a / b); with kernel values it builds the expression (as `T.ceildiv`)."""
    from ..language import ceildiv

    return ceildiv(a, b)


def next_power_of_2(x: int) -> int:
    """The smallest power of two that is >= x (1 for x <= 1)."""
    return 1 << max(int(x) - 1, 0).bit_length()


def determine_fp8_type(fp8_format: str = "e4m3", device=None):
    """TileLang's pick of the float8 type for the platform: NVIDIA's formats here."""
    from .. import language as T

    if fp8_format not in ("e4m3", "e5m2"):
        raise ValueError(f"Unsupported FP8 format: {fp8_format}")
    return T.float8_e4m3fn if fp8_format == "e4m3" else T.float8_e5m2


def determine_torch_fp8_type(fp8_format: str = "e4m3"):
    """The torch dtype of `determine_fp8_type` (NVIDIA's formats here)."""
    import torch

    determine_fp8_type(fp8_format)  # the same formats, the same error for others
    return torch.float8_e4m3fn if fp8_format == "e4m3" else torch.float8_e5m2


def simplify_prim_func(fn):
    """TileLang's decorator that simplifies the PrimFunc a factory returns. tilelab's
    compiler simplifies every program itself, so the function is returned as it is."""
    return fn


def make_mma_swizzle_layout(buffer, is_smooth: bool = False):
    """TileLang's swizzled layout for tiles that tensor-core loads read
    (`tilelang.cuda.intrinsics`): tilelab's own bank-conflict-free layout for the tile
    (`make_swizzled_layout`), or the plain row-major one with `is_smooth=True`."""
    from ..ir.layout import Layout
    from ..language.tilelang_names import make_swizzled_layout

    if is_smooth:
        return Layout.row_major([int(s) for s in buffer.shape])
    return make_swizzled_layout(buffer)


def autotune(configs=None, warmup=None, rep=None, timeout=None, ref_prog=None, rtol=1e-2,
             atol=1e-2, skip_check=False, max_mismatched_ratio=0.01, **_options):
    """`@tilelang.autotune(configs=...)` above `@tilelang.jit`: tilelab's autotuner
    (`tilelab.autotune`), for kernels of either style: the first call with arguments it
    has not seen tries every configuration the call leaves open, checks each against the
    first, and keeps the fastest. `warmup`/`rep` default to tilelab's (fewer on the CPU);
    TileLang's options about how inputs are made are accepted and not needed here. As in
    TileLang, 1% of a candidate's values may lie outside rtol/atol."""
    from ..autotuner import autotune as tilelab_autotune

    return tilelab_autotune(configs=configs, warmup=warmup, rep=rep, ref_prog=ref_prog,
                            rtol=rtol, atol=atol, skip_check=skip_check, show=False,
                            max_mismatched_ratio=max_mismatched_ratio)


class AutotuneResult:
    """What TileLang's `AutoTuner.run` returns: the best `config`, its compiled `kernel`
    and its `latency` (ms); `ref_latency` is not measured here (None)."""

    def __init__(self, kernel):
        self.kernel, self.config = kernel, kernel.config
        times = [r["median_ms"] for r in kernel.autotune_result.rows
                 if r["status"] == "ok" and r["median_ms"] is not None]
        self.latency = min(times) if times else None  # the winner is the fastest
        self.ref_latency = None

    def __repr__(self) -> str:
        return f"AutotuneResult(config={self.config}, latency={self.latency})"


class AutoTuner:
    """TileLang's builder over a kernel factory, run by tilelab's autotuner:

        AutoTuner.from_kernel(kernel=make, configs=[{...}, ...])
            .set_compile_args(out_idx=[-1], target="auto")
            .set_profile_args(ref_prog=reference, skip_check=False)
            .run(warmup=3, rep=20)              # -> .config, .kernel, .latency

    `make(**config)` returns the `@T.prim_func`. Options about how TileLang makes inputs or
    caches results are accepted; tilelab makes random inputs of the kernel's shapes."""

    def __init__(self, fn, configs):
        self.fn, self.configs = fn, configs
        self.compile_args: dict = {"out_idx": None, "target": "auto", "pass_configs": None}
        self.profile_args: dict = {"ref_prog": None, "skip_check": False, "rtol": 1e-2,
                                   "atol": 1e-2, "max_mismatched_ratio": 0.01}

    @classmethod
    def from_kernel(cls, kernel, configs):
        return cls(kernel, configs)

    def set_compile_args(self, out_idx=None, target="auto", pass_configs=None, **_options):
        self.compile_args.update(out_idx=out_idx, target=target, pass_configs=pass_configs)
        return self

    def set_profile_args(self, ref_prog=None, skip_check=False, rtol=1e-2, atol=1e-2,
                         max_mismatched_ratio=0.01, **_options):
        self.profile_args.update(ref_prog=ref_prog, skip_check=skip_check, rtol=rtol,
                                 atol=atol, max_mismatched_ratio=max_mismatched_ratio)
        return self

    def run(self, warmup=None, rep=None, timeout=None, **_options):
        from ..autotuner import autotune as tilelab_autotune

        target = self.compile_args["target"]
        tuned_jit = jit(out_idx=self.compile_args["out_idx"],
                        pass_configs=self.compile_args["pass_configs"], target=target)(self.fn)
        tuned = tilelab_autotune(configs=self.configs, warmup=warmup, rep=rep, show=False,
                                 **self.profile_args)(tuned_jit)
        return AutotuneResult(tuned.compile())


def set_autotune_inputs(*inputs, **_options):
    """`with set_autotune_inputs(q, k, ...)`: tunes inside the block run their candidates
    on these tensors (tilelab.autotune_inputs)."""
    from ..autotuner import autotune_inputs

    return autotune_inputs(*inputs)


def set_random_seed(seed: int = 42) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def torch_assert_close(actual, expected, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001,
                       **_options):
    """TileLang's check: like `torch.testing.assert_close`, but a fraction of the elements
    (by default 0.1%, with TileLang's default tolerances) may differ."""
    from ..profiler import mismatches

    mismatches(actual, expected, rtol, atol, max_mismatched_ratio)


def get_num_sms(device_id: int = 0) -> int:
    """`tilelang.carver.arch.driver.get_num_sms()`: how many blocks run at once, the wave
    size of a persistent kernel: the GPU's multiprocessors, or on a machine without a
    GPU this CPU's cores (the CPU backend runs a kernel's blocks on them)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_id).multi_processor_count
    return os.cpu_count() or 1


def get_target_compute_version(target=None) -> str:
    """`tilelang.contrib.nvcc.get_target_compute_version()`: the compute capability tilelab
    compiles CUDA for, as "major.minor" - the GPU's, or without one the default target's
    (sm_90a: "9.0"), so that examples written for Hopper compile for it here."""
    from ..backends.cuda.nvcc import default_arch

    arch = str(target).partition("sm_")[2] if target is not None and "sm_" in str(target) \
        else default_arch().removeprefix("sm_")
    digits = arch.rstrip("af")
    return f"{digits[:-1]}.{digits[-1]}"


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    major, _, minor = str(compute_version).partition(".")
    return int(major), int(minor or 0)


def register_cuda_postproc_callback(func=None, override: bool = True):
    """TileLang runs such a callback on its generated CUDA code before nvcc; tilelab does
    not let code be edited between its passes and nvcc, so using it is an error (importing
    it is not: examples import it and keep their use commented out)."""
    from ..language.tilelang_names import TileLangFeatureError

    raise TileLangFeatureError(
        "tilelang.engine.callback.register_cuda_postproc_callback edits the generated CUDA "
        "code before nvcc, which tilelab does not allow",
        hint="express the change in the tile program; `%%tilekernel --source` shows the code")


def get_device_name(device_id: int = 0) -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(device_id)
    return "cpu"


class CUDA:
    """`tilelang.carver.arch.CUDA(target)`: the device model TileLang's analyzer reads.
    `"cuda"` is the visible GPU (as in TileLang); a device name (`"H200"`, `"H100 PCIe"`)
    is that device's datasheet figures, so that a kernel can be analyzed without one."""

    def __init__(self, target="cuda"):
        from ..benchmark import PEAKS, device_peak

        name = str(target)
        if name.split()[0] == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise TileLabError(
                    "CUDA(\"cuda\") describes the visible GPU, and there is none here",
                    hint="name a device instead: " + ", ".join(f"CUDA({p.name!r})"
                                                            for p in PEAKS))
            name = torch.cuda.get_device_name()
        self.name = name
        self.peak = device_peak(name)
        if self.peak is None:
            raise TileLabError(f"no datasheet figures for {name!r}",
                               hint="known: " + ", ".join(p.name for p in PEAKS))
        self.bandwidth_GBps = self.peak.memory_tbps * 1000  # noqa: N815 - TileLang's name
        self.tflops = self.peak.fp16_tflops


class CDNA:
    """`tilelang.carver.arch.CDNA`: AMD's GPUs. Importable (examples pick CUDA or CDNA by
    the torch build), refused when made: tilelab compiles for NVIDIA GPUs and the CPU."""

    def __init__(self, target="hip"):
        raise TileLabError(f"CDNA({target!r}) describes an AMD GPU; tilelab compiles for "
                           "NVIDIA GPUs and the CPU", hint="use CUDA(\"cuda\") or a device "
                           "name such as CUDA(\"H200\")")


class MatmulTemplate:
    """`tilelang.carver.template.MatmulTemplate`: TileLang's roller, which recommends tile
    configurations from a model of the device. Importable (autotuning examples import it
    and use it only with `with_roller=True`), refused when made: tilelab's autotuner tries
    the configurations it is given."""

    def __init__(self, *_args, **_options):
        from ..language.tilelang_names import TileLangFeatureError

        raise TileLangFeatureError(
            "tilelang.carver.template.MatmulTemplate recommends tile configurations from a "
            "model of the device (TileLang's roller), which tilelab does not have",
            hint="give the autotuner the configurations to try: "
                 "AutoTuner.from_kernel(kernel, configs=[{...}, ...]) or "
                 "@tilelang.autotune(configs=...)")


class NoRasterization:
    """`tilelang.carver.roller.rasterization.NoRasterization`: the roller's plan of blocks
    in launch order. Only the roller's hints carry plans (see MatmulTemplate)."""


@dataclasses.dataclass(frozen=True)
class AnalysisResult:
    """What `Analyzer.analysis` finds (TileLang's field names; tilelab.analysis counts)."""

    total_flops: int
    total_global_bytes: int
    estimated_time: float  # seconds: the roofline's least time
    expected_tflops: float | None
    expected_bandwidth_GBps: float  # noqa: N815 - TileLang's name


class Analyzer:
    """`tilelang.tools.Analyzer`: a kernel's work and traffic, counted from its tile ops
    (tilelab/analysis.py), against a device's peaks."""

    @staticmethod
    def analysis(fn, device) -> AnalysisResult:
        from ..analysis import work

        done = work(fn)
        return AnalysisResult(done.flops, done.global_bytes,
                              done.roofline_seconds(device.tflops, device.bandwidth_GBps),
                              device.tflops, device.bandwidth_GBps)


def _module(name: str, doc: str, **names) -> types.ModuleType:
    module = types.ModuleType(name, doc)
    module.__dict__.update(names)
    return module


def _env_value(name: str) -> str:
    """`tilelang.env.TILELANG_CACHE_DIR`: tilelab's cache folder as it is when asked (it
    follows TILELAB_CACHE_DIR set after the import)."""
    if name == "TILELANG_CACHE_DIR":
        return str(cache_dir())
    raise AttributeError(f"tilelang.env has TILELANG_CACHE_DIR only, not {name}")


def _dtype_names() -> dict:
    """`tilelang.language.dtypes.float16`, ...: tilelab's types under their names and
    TileLang's other spellings of them (`float`, `float8_e4m3`, ...)."""
    from ..ir import dtypes

    return {**dtypes.ALL, **{alias: dtypes.ALL[name] for alias, name in dtypes.ALIASES.items()
                             if alias.isidentifier()}}


def _torch_dtype_names(name: str) -> dict:
    """TileLang's `_TORCH_DTYPE_TO_STR`, torch's dtypes -> the names tilelab knows them by
    (made when asked for: importing torch is not free)."""
    if name != "_TORCH_DTYPE_TO_STR":
        raise AttributeError(f"tilelang.language.dtypes has no {name}")
    import torch

    from ..ir import dtypes

    return {getattr(torch, n): n for n in dtypes.ALL if hasattr(torch, n)}


def _submodules() -> dict[str, types.ModuleType]:
    from .. import language
    from ..language.tilelang_names import SPARSE_GROUPS, make_swizzled_layout, sparse_e_factor

    this = sys.modules[__name__]
    return {
        "tilelang": this,
        "tilelang.language": language,
        "tilelang.language.fp8": _module("tilelang.language.fp8", "float8 types.",
                                         determine_fp8_type=determine_fp8_type,
                                         determine_torch_fp8_type=determine_torch_fp8_type),
        "tilelang.math": _module("tilelang.math", "Integer helpers.", cdiv=cdiv,
                                 next_power_of_2=next_power_of_2),
        "tilelang.layout": _module("tilelang.layout", "Layouts.",
                                   make_swizzled_layout=make_swizzled_layout),
        "tilelang.autotuner": _module("tilelang.autotuner", "Autotuning.", autotune=autotune,
                                      set_autotune_inputs=set_autotune_inputs,
                                      AutoTuner=AutoTuner, AutotuneResult=AutotuneResult,
                                      __all__=["autotune", "set_autotune_inputs",
                                               "AutoTuner", "AutotuneResult"]),
        "tilelang.profiler": _module("tilelang.profiler", "Timing.", do_bench=do_bench,
                                     Profiler=Profiler),
        "tilelang.transform": _module("tilelang.transform", "Pass settings.",
                                      PassConfigKey=PassConfigKey,
                                      simplify_prim_func=simplify_prim_func),
        "tilelang.cuda": _module("tilelang.cuda", "CUDA helpers."),
        "tilelang.cuda.intrinsics": _module("tilelang.cuda.intrinsics", "Tensor-core layouts.",
                                            make_mma_swizzle_layout=make_mma_swizzle_layout),
        "tilelang.cuda.intrinsics.sparse_layout": _module(
            "tilelang.cuda.intrinsics.sparse_layout", "2:4 sparse operands' metadata.",
            GROUP_CONFIG=SPARSE_GROUPS, get_e_factor=sparse_e_factor,
            get_e_replicate_factor=lambda a_dtype: 1 if _as_dtype(a_dtype).bits <= 8 else 2),
        "tilelang.language.dtypes": _module("tilelang.language.dtypes", "Data types.",
                                            dtype=_as_dtype, **_dtype_names(),
                                            __getattr__=_torch_dtype_names),
        "tilelang.utils": _module("tilelang.utils", "Utilities."),
        "tilelang.utils.tensor": _module("tilelang.utils.tensor", "Tensor helpers.",
                                         torch_assert_close=torch_assert_close,
                                         TensorSupplyType=TensorSupplyType,
                                         get_tensor_supply=get_tensor_supply),
        "tilelang.tileop": _module("tilelang.tileop", "Tile operators.",
                                   GemmWarpPolicy=language.GemmWarpPolicy),
        "tilelang.tileop.base": _module("tilelang.tileop.base", "Tile operators.",
                                        GemmWarpPolicy=language.GemmWarpPolicy),
        "tilelang.carver": _module("tilelang.carver", "Hardware facts."),
        "tilelang.tools": _module("tilelang.tools", "Analysis.", Analyzer=Analyzer),
        "tilelang.carver.template": _module("tilelang.carver.template", "The roller.",
                                            MatmulTemplate=MatmulTemplate),
        "tilelang.carver.roller": _module("tilelang.carver.roller", "The roller."),
        "tilelang.carver.roller.rasterization": _module(
            "tilelang.carver.roller.rasterization", "The roller's block orders.",
            NoRasterization=NoRasterization),
        "tilelang.carver.arch": _module("tilelang.carver.arch", "Hardware facts.", CUDA=CUDA,
                                        CDNA=CDNA,
                                        driver=_module("tilelang.carver.arch.driver",
                                                       "The device's properties.",
                                                       get_num_sms=get_num_sms,
                                                       get_device_name=get_device_name)),
        "tilelang.contrib": _module("tilelang.contrib", "Toolchain helpers."),
        "tilelang.contrib.nvcc": _module("tilelang.contrib.nvcc", "The CUDA target.",
                                         get_target_compute_version=get_target_compute_version,
                                         parse_compute_version=parse_compute_version),
        "tilelang.engine": _module("tilelang.engine", "Compilation."),
        "tilelang.engine.callback": _module(
            "tilelang.engine.callback", "Compilation hooks.",
            register_cuda_postproc_callback=register_cuda_postproc_callback),
        "tilelang.env": _module("tilelang.env", "Where things are kept.",
                                __getattr__=_env_value),
        "tilelang.testing": _module("tilelang.testing", "Test helpers.",
                                    set_random_seed=set_random_seed,
                                    torch_assert_close=torch_assert_close,
                                    requires_package=_requires_package),
    }


class _Refuse(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import tilelang.<something tilelab lacks>`: an ImportError that says so."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("tilelang.") and fullname not in sys.modules:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        raise ImportError(f"{spec.name} is part of TileLang that tilelab does not provide "
                          "(tilelab has jit, compile, cdiv, tvm, language, language.fp8, "
                          "math, layout, autotuner, profiler, transform, testing, tileop, "
                          "cuda.intrinsics (make_mma_swizzle_layout, sparse_layout), "
                          "language.dtypes, "
                          "utils.tensor, carver.arch (CUDA, CDNA, driver), carver.template "
                          "and carver.roller.rasterization (names only), contrib.nvcc, "
                          "engine.callback, tools (Analyzer), env (TILELANG_CACHE_DIR))",
                          name=spec.name)

    def exec_module(self, module):  # never reached: create_module refuses
        raise ImportError(module.__name__)


def install() -> None:
    """Make `import tilelang` (and its submodules above) import tilelab."""
    for name, module in _submodules().items():
        if not hasattr(module, "__path__"):  # a package to the import system: submodules
            module.__path__ = []  # are looked up, and _Refuse explains the missing ones
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
    if not any(isinstance(f, _Refuse) for f in sys.meta_path):
        sys.meta_path.append(_Refuse())
    _tvm_spellings()


def _tvm_spellings() -> None:
    """Names that TileLang's own TVM has and apache-tvm 0.27 spells otherwise, so that
    TileLang programs that name them (`val: tirx.PrimExpr` in a helper's signature) run."""
    import tvm
    from tvm import tirx

    if not hasattr(tirx, "PrimExpr"):
        tirx.PrimExpr = tvm.ir.Expr  # 0.27 calls every expression tvm.ir.Expr
    if "dtype" not in vars(tvm.ir.Expr):  # `val.dtype == T.uint8`: an expression's type
        # (a Var keeps TVM's own property: a buffer's element type, else AttributeError)
        tvm.ir.Expr.dtype = property(lambda expr: _as_dtype(str(expr.ty)))


def _requires_package(*packages):
    """`@tvm.testing.requires_package("bitblas")`: the test as written where its packages
    are installed; else calling it says which one is missing (as importing it would)."""
    import functools
    import importlib.util

    def mark(fn):
        missing = [p for p in packages if importlib.util.find_spec(p) is None]
        if not missing:
            return fn

        @functools.wraps(fn)
        def needs(*args, **kwargs):
            raise ModuleNotFoundError(f"No module named {missing[0]!r} (needed by "
                                      f"{fn.__name__})", name=missing[0])

        return needs

    return mark


_PROVIDED = {"language", "math", "layout", "autotuner", "profiler", "transform", "utils",
             "testing", "tileop", "carver", "tools", "env"}


def __getattr__(name: str):
    if name in _PROVIDED:
        return _submodules()[f"tilelang.{name}"]
    if name == "tvm":  # `from tilelang import tvm`: the TVM that tilelab is built on,
        import tvm.testing  # with TileLang's `@tvm.testing.requires_package(...)` (imported

        if not hasattr(tvm.testing, "requires_package"):  # here, not at install: 80 ms)
            tvm.testing.requires_package = _requires_package
        return tvm
    if name.startswith("__"):
        raise AttributeError(name)
    from ..language.tilelang_names import TileLangFeatureError

    raise TileLangFeatureError(f"tilelang.{name} is not provided by tilelab's TileLang "
                               "compatibility", hint="tilelang.jit, tilelang.compile, "
                               "tilelang.cdiv and `import tilelang.language as T` are")
