"""`@tilelab.jit`: from a Python function to a callable, cached kernel.

Two program styles are accepted, as in the tutorial:

* **factory**: a function that returns a `@T.prim_func`; calling the factory
  with sizes compiles a `Kernel` (`kernel = matmul(1024, 1024, 1024)`);
* **eager**: the function body declares its tensors (`A: T.Tensor((M, N), ...)`)
  and outputs (`C = T.empty(...)`); calling it with tensors compiles for their
  shapes on first use and returns the outputs (`c = vector_add(a, b)`).

A `Kernel` checks its arguments against the signature, allocates outputs,
and runs on the backend it was compiled for.
"""

from __future__ import annotations

import ast
import functools
import inspect

from .errors import TileLabArgumentError, TileLabError, TileLabSyntaxError, raised_at_the_caller


def _is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and \
        hasattr(value, "__dlpack__")


def _dtype_name(value) -> str:
    text = str(value.dtype)
    return text.removeprefix("torch.")


def _device_of(value) -> str:
    return getattr(getattr(value, "device", None), "type", "cpu") or "cpu"


class Kernel:
    """A compiled kernel: call it with tensors; outputs are allocated and returned."""

    def __init__(self, name: str, params, runner, target: str, trace=None, program=None,
                 launch=None, cubin=None, files=None):
        self.name = name
        self.launch = launch  # CUDA: kernel symbol, grid, block, shared memory, arch
        self.cubin = cubin
        self.files = files or {}  # the compile cache entry: what another process needs to run it
        self.config = None  # the autotuner's winning keyword values, when it chose this kernel
        self.autotune_result = None  # and every configuration it tried
        self.params = params  # ParamInfo-like: name, shape, dtype, output, location
        self.target = target
        self.trace = trace
        self.program = program  # the TileProgram, when compiled in this process
        self._runner = runner  # called with every tensor, in signature order
        self._fast = None  # checks and allocators for torch tensors, made on the first call
        # an eager kernel returns what its `return` names (None: no return, every output);
        # other T.empty tensors are scratch outputs, written but not returned
        self.returned = getattr(program, "returned", None)
        flags = [p.output for p in params]
        self._outputs_last = flags == sorted(flags)  # inputs first, then outputs

    @classmethod
    def from_artifact(cls, artifact) -> Kernel:
        """The Kernel of an exported kernel file (`runtime.load_artifact`): CUDA, no TVM."""
        from .runtime.artifact import TileLabArtifactError

        if artifact.scalar_params:
            raise TileLabArtifactError(
                f"kernel {artifact.name} takes scalar parameters "
                f"({', '.join(artifact.scalar_params)}), which tilelab.Kernel cannot pass yet",
                hint="use tilelab.runtime.load_artifact(path).launcher() and call it with the "
                     "tensors followed by the scalars")
        kernel = cls(artifact.name, artifact.runtime_params(), artifact.launcher(), "cuda",
                     trace=artifact.trace(), program=None)
        kernel.config = artifact.config
        return kernel

    @property
    def inputs(self):
        return [p for p in self.params if not p.output]

    @property
    def outputs(self):
        return [p for p in self.params if p.output]

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.inputs)
        outs = ", ".join(f"{p.dtype}{list(p.shape)}" for p in self.outputs)
        return f"<tilelab.Kernel {self.name}({sig}) -> ({outs}) on {self.target}>"

    @raised_at_the_caller
    def __call__(self, *args, **kwargs):
        if kwargs:
            names = ", ".join(p.name for p in self.inputs)
            raise TileLabArgumentError(
                f"{self.name} takes its tensors by position ({names}); unexpected keyword "
                f"argument(s): {', '.join(kwargs)}",
                self.inputs[0].location if self.inputs else None)
        fast = self._fast_path()
        if fast and len(args) == len(fast[0]):
            # the common case in a few comparisons; any mismatch takes the explaining path
            for a, (t, d, s, c) in zip(args, fast[0]):
                if type(a) is not t or a.dtype is not d or a.shape != s or a.is_cuda is not c \
                        or not (c or a.is_cpu) or not a.is_contiguous():
                    break
            else:
                device = args[0].device if args else None
                return self._launch(args, [alloc(device) for alloc in fast[1]])
        inputs = self.inputs
        if len(args) != len(inputs):
            names = ", ".join(p.name for p in inputs)
            raise TileLabArgumentError(
                f"{self.name} takes {len(inputs)} tensor(s) ({names}) but {len(args)} were given",
                inputs[0].location if inputs else None)
        for param, value in zip(inputs, args):
            self._check(param, value)
        return self._launch(args, [self._allocate(p, args) for p in self.outputs])

    def _launch(self, args, outputs):
        if self._outputs_last:  # the usual signature: inputs, then outputs
            self._runner(*args, *outputs)
        else:
            arrays, it_in, it_out = [], iter(args), iter(outputs)
            for p in self.params:
                arrays.append(next(it_out) if p.output else next(it_in))
            self._runner(*arrays)
        if self.returned is not None:
            outputs = outputs[:self.returned]
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _fast_path(self):
        """Per-input (type, dtype, shape, on GPU) and output allocators for torch tensors."""
        if self._fast is None:
            try:
                import torch
            except ImportError:
                self._fast = False
                return False
            cuda = self.target == "cuda"
            expected = [(torch.Tensor, getattr(torch, p.dtype), torch.Size(p.shape), cuda)
                        for p in self.inputs]

            def allocator(p):
                dtype, shape = getattr(torch, p.dtype), tuple(p.shape)
                if cuda:
                    return lambda device: torch.empty(shape, dtype=dtype, device=device or "cuda")
                return lambda device: torch.empty(shape, dtype=dtype)

            self._fast = (expected, [allocator(p) for p in self.outputs])
        return self._fast

    def _check(self, param, value):
        where = param.location
        if not _is_tensor(value):
            raise TileLabArgumentError(
                f"{param.name} must be a tensor, got {type(value).__name__}", where)
        device = _device_of(value)
        if device != "cpu" and self.target == "cpu":
            raise TileLabArgumentError(
                f"{param.name} is a {device} tensor but this kernel was compiled for the CPU",
                where, hint="move the tensors to the CPU, or compile with target='cuda'")
        if device != "cuda" and self.target == "cuda":
            raise TileLabArgumentError(
                f"{param.name} must be a CUDA tensor, got a {device} "
                f"{type(value).__name__}", where,
                hint=f"move it to the GPU: {param.name}.cuda()")
        if tuple(value.shape) != tuple(param.shape):
            raise TileLabArgumentError(
                f"{param.name} must have shape {tuple(param.shape)}, got {tuple(value.shape)}",
                where)
        if _dtype_name(value) != param.dtype:
            raise TileLabArgumentError(
                f"{param.name} must be {param.dtype}, got {_dtype_name(value)}", where)
        contiguous = value.is_contiguous() if hasattr(value, "is_contiguous") else \
            value.flags["C_CONTIGUOUS"]
        if not contiguous:
            raise TileLabArgumentError(f"{param.name} must be contiguous", where,
                                       hint="pass tensor.contiguous()")
        flags = getattr(value, "flags", None)
        if flags is not None and not flags["WRITEABLE"]:  # DLPack cannot pass read-only arrays
            raise TileLabArgumentError(f"{param.name} is a read-only numpy array", where,
                                       hint=f"pass a writable copy: {param.name}.copy()")

    def _allocate(self, param, args):
        if self.target == "cuda":  # on the inputs' GPU; no tilelab.language (it imports TVM)
            import torch

            device = args[0].device if args else torch.device("cuda", torch.cuda.current_device())
            return torch.empty(param.shape, dtype=getattr(torch, str(param.dtype)), device=device)
        if args and not hasattr(args[0], "is_contiguous"):  # numpy in, numpy out
            import numpy as np

            return np.empty(param.shape, dtype=param.dtype)
        import torch

        from .ir.dtypes import as_dtype, torch_dtype

        return torch.empty(param.shape, dtype=torch_dtype(as_dtype(param.dtype)))

    # -- introspection as in the tutorial

    def get_kernel_source(self) -> str:
        """The generated code: CUDA C on GPUs, LLVM IR on the CPU."""
        return self.trace.code.get("cuda") or self.trace.code.get("llvm", "")

    def export(self, path) -> None:
        """Write a self-contained `.tilelab` file that `tilelab.load` runs without TVM."""
        if self.target != "cuda" or self.cubin is None:
            raise TileLabError("only CUDA kernels can be exported; compile with target='cuda'")
        from .runtime.artifact import save_artifact

        save_artifact(path, name=self.name, kernel_name=self.launch["kernel_name"],
                      cubin=self.cubin, grid=self.launch["grid"], block=self.launch["block"],
                      dynamic_smem=self.launch["dynamic_smem"],
                      params=[{"name": p.name, "shape": list(p.shape), "dtype": p.dtype,
                               "output": p.output} for p in self.params],
                      arch=self.launch["arch"], arg_order=self.launch["arg_order"],
                      trace_json=self.trace.to_json() if self.trace
                      else None, source=self.trace.code.get("cuda") if self.trace else None,
                      config=self.config, tensor_maps=self.launch.get("tensor_maps", ()),
                      next_kernels=self.launch.get("next_kernels", ()),
                      scratch=self.launch.get("scratch", ()),
                      cooperative=self.launch.get("cooperative", False))

    def get_profiler(self, tensor_supply_type=None):
        """A Profiler whose random inputs follow `tensor_supply_type` (a TensorSupplyType)."""
        from .profiler import Profiler

        return Profiler(self, tensor_supply_type)


# ---------------------------------------------------------------- jit


def _is_factory(source) -> bool:
    """Eager kernels launch `with T.Kernel(...)` in their own body; factories return one."""
    for stmt in source.node.body:
        if isinstance(stmt, ast.With):
            return False
    return True


_GONE = object()


def _checks() -> str:
    """TILELAB_CHECK_BOUNDS as set now: CPU kernels are built with or without access checks."""
    import os

    return os.environ.get("TILELAB_CHECK_BOUNDS", "")


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    try:
        hash(value)
        return value
    except TypeError:
        return repr(value)


class JITFunction:
    """The object `@tilelab.jit` returns; see the module docstring."""

    def __init__(self, fn, out_idx=None, target="auto", pass_configs=None):
        from .language.frontend import FunctionSource, eager_tensor_params, signature_tensors

        functools.update_wrapper(self, fn)
        self.fn = fn
        self.out_idx = out_idx
        self.target = target
        self.pass_configs = pass_configs or {}
        self.source = FunctionSource.of(fn)
        self.style = "factory" if _is_factory(self.source) else "eager"
        self._kernels: dict = {}
        self._seen: dict = {}  # positional-call key -> (its _kernels key, tensor positions)
        # read once: an eager call is on the launch path, and inspect.signature alone costs
        # tens of microseconds
        self._signature = inspect.signature(fn)
        self._signature_tensors = signature_tensors(fn, self.source) \
            if self.style == "eager" else {}
        self._tensor_names = frozenset(eager_tensor_params(self.source,
                                                           self._signature_tensors))
        self._where = self.source.location(self.source.node)  # the `def` line, for errors

    def __repr__(self) -> str:
        return f"<tilelab.jit {self.style} {self.fn.__name__}>"

    @property
    def compiled(self) -> list:
        """The kernels its calls have compiled so far, oldest first (its in-memory cache)."""
        return list(self._kernels.values())

    @raised_at_the_caller
    def __call__(self, *args, **kwargs):
        if self.style == "factory":
            return self._factory_kernel(args, kwargs)
        # an eager call takes compile's target= and pass_configs= too (unless the kernel has
        # parameters of those names); any other unknown keyword is an error while tracing
        if not kwargs:  # the common call, f(x, y): straight to the kernel it compiled before
            seen = self._seen.get(self._call_key(args))
            kernel = self._cached(seen[0]) if seen is not None else None
            if kernel is not None:
                return kernel(*(args[i] for i in seen[1]))
        own = self._signature.parameters
        options = {k: kwargs.pop(k) for k in ("target", "pass_configs")
                   if k in kwargs and k not in own}
        kernel, tensors = self._eager_kernel(args, kwargs, need_tensors=True, **options)
        return kernel(*tensors)

    def _call_key(self, args) -> tuple | None:
        """What decides an eager call's kernel when it passes only positional arguments:
        each tensor's shape, dtype and device, the other values, the bounds-check setting.
        None where a value cannot be a key (the full path then decides)."""
        parts = []
        for value in args:
            if _is_tensor(value):
                device = getattr(value, "device", None)
                parts.append((tuple(value.shape), str(value.dtype), str(device)))
            else:
                parts.append(value)
        key = (tuple(parts), _checks())
        try:
            hash(key)
        except TypeError:
            return None
        return key

    @raised_at_the_caller
    def compile(self, *args, target=None, pass_configs=None, **kwargs) -> Kernel:
        """Compile without running: with example tensors, or with sizes as keywords."""
        if self.style == "factory":
            return self._factory_kernel(args, kwargs, target, pass_configs)
        kernel, _ = self._eager_kernel(args, kwargs, need_tensors=False, target=target,
                                       pass_configs=pass_configs)
        return kernel

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The generated code of the kernel these arguments compile to (TileLang's name)."""
        return self.compile(*args, **kwargs).get_kernel_source()

    def lower(self, *args, **kwargs):
        """The Trace of a compilation (the IR after every pass)."""
        return self.compile(*args, **kwargs).trace

    def get_tir(self, *args, **kwargs):
        """TileLang's name: the program these arguments trace, as its tile-level PrimFunc
        (compiled for the CPU on the way, and cached like any compile)."""
        return self.compile(*args, target="cpu", **kwargs).program.func

    # -- factory style

    def _configs(self, extra) -> dict:
        """The decorator's pass configs, updated by those given to .compile()."""
        return {**self.pass_configs, **(extra or {})}

    def _factory_kernel(self, args, kwargs, target=None, pass_configs=None):
        configs = self._configs(pass_configs)
        key = ("factory", _freeze(args), _freeze(kwargs), target, _checks(),
               _freeze({str(k): v for k, v in configs.items()}))
        kernel = self._cached(key)
        if kernel is None:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as err:
                raise TileLabArgumentError(f"{self.fn.__name__}: {err}",
                                           self.source.location(self.source.node)) from None
            from .language.frontend import in_factory

            with in_factory(self.fn.__name__):
                program = self.fn(*args, **kwargs)
            kernel = self._store(key, compile(program, out_idx=self.out_idx,
                                              target=target or self.target,
                                              pass_configs=configs))
        return kernel

    # -- the in-memory cache: a kernel stays valid while the globals it read keep their values

    def _cached(self, key):
        kernel = self._kernels.get(key)
        if kernel is None:
            return None
        captured = getattr(kernel.program, "captured", None) or {}
        for name, value in captured.items():
            current = self.fn.__globals__.get(name, _GONE)
            if current is not value and _freeze(current) != _freeze(value):
                del self._kernels[key]  # a global it baked in has changed: trace again
                return None
        return kernel

    def _store(self, key, kernel):
        self._kernels[key] = kernel
        return kernel

    # -- eager style

    def _eager_kernel(self, args, kwargs, need_tensors: bool, target=None, pass_configs=None):
        from .compiler import resolve_target

        signature = self._signature
        tensor_names = self._tensor_names
        params = list(signature.parameters)
        extra = {k: v for k, v in kwargs.items() if k not in signature.parameters}
        named = {k: v for k, v in kwargs.items() if k in signature.parameters}
        where = self._where

        def declared(name):  # the `X: T.Tensor(...)` line of a tensor parameter
            for stmt in self.source.node.body:
                if isinstance(stmt, ast.AnnAssign) and getattr(stmt.target, "id", None) == name:
                    return self.source.location(stmt)
            return where

        try:
            bound = signature.bind_partial(*args, **named)
        except TypeError as err:
            raise TileLabArgumentError(f"{self.fn.__name__}: {err}", where) from None
        bound.apply_defaults()
        tensors, examples, values = [], {}, {}
        for name in params:
            if name in tensor_names:
                value = bound.arguments.get(name)
                if value is None:
                    if need_tensors:
                        raise TileLabArgumentError(f"{self.fn.__name__} needs a tensor for "
                                                   f"{name}", declared(name))
                    continue
                if not _is_tensor(value):
                    raise TileLabArgumentError(f"{name} must be a tensor, got "
                                               f"{type(value).__name__}", declared(name))
                tensors.append(value)
                examples[name] = tuple(int(s) for s in value.shape)
            elif name in bound.arguments:
                values[name] = bound.arguments[name]
            else:
                raise TileLabArgumentError(f"{self.fn.__name__} needs a value for {name}", where)
        resolved = resolve_target(target or self.target, tensors)
        dtypes = tuple(_dtype_name(t) for t in tensors)
        configs = self._configs(pass_configs)
        key = ("eager", tuple(sorted(examples.items())), dtypes, _checks(), _freeze(values),
               _freeze(extra), resolved, _freeze({str(k): v for k, v in configs.items()}))
        kernel = self._cached(key)
        if kernel is None:
            from .language.frontend import trace_eager

            program = trace_eager(self.fn, self.source, values, extra, examples,
                                  self._signature_tensors)
            kernel = self._store(key, compile(program, target=resolved, pass_configs=configs))
        if need_tensors and not kwargs and target is None and pass_configs is None:
            positions = tuple(i for i, value in enumerate(args) if any(value is t for t in tensors))
            call_key = self._call_key(args)
            if call_key is not None and len(positions) == len(tensors):
                self._seen[call_key] = (key, positions)
        return kernel, tensors


@raised_at_the_caller
def jit(fn=None, *, out_idx=None, target="auto", pass_configs=None, **_ignored):
    """Decorate a kernel (eager style) or a kernel factory; see `JITFunction`."""
    if fn is None:
        return lambda f: jit(f, out_idx=out_idx, target=target, pass_configs=pass_configs)
    return JITFunction(fn, out_idx=out_idx, target=target, pass_configs=pass_configs)


@raised_at_the_caller
def compile(program, out_idx=None, target="auto", pass_configs=None) -> Kernel:  # noqa: A001
    """Compile a `@T.prim_func` program into a Kernel."""
    from .compiler import PassConfigKey, compile_program, normalize_configs, resolve_target
    from .language.frontend import RefusedKernel, ShapedByCall, TileProgram

    if isinstance(program, RefusedKernel):  # a factory's kernel that could not be traced
        raise program.error
    if isinstance(program, ShapedByCall):
        return ShapedKernel(program, out_idx, target, pass_configs)
    if not isinstance(program, TileProgram):
        raise TileLabSyntaxError(f"expected a @T.prim_func kernel, got {type(program).__name__}",
                                 hint="the factory must return the function decorated with "
                                      "@T.prim_func")
    program = program.with_outputs(out_idx)
    resolved = resolve_target(target)
    try:
        configs = normalize_configs(pass_configs)
    except TileLabError as err:  # a misspelt key, shown at the kernel
        raise err.with_location(program.source.location(program.source.node)) from None
    blocks = configs.get(PassConfigKey.TL_INSTRUMENT_PIPELINE.value)
    if blocks:
        from .instrument import instrument_program

        program = instrument_program(program, int(blocks))
    artifact = compile_program(program, resolved, configs)
    return Kernel(program.name, program.params, artifact.runner, resolved.partition(":")[0],
                  artifact.trace, program, artifact.launch, artifact.cubin, artifact.files)


class ShapedKernel:
    """A kernel that each call completes (`T.dynamic` sizes, scalar parameters): compiled
    for the shapes of its tensors and the values of its scalars (once per shape, dtypes
    and values), then called like a `Kernel` with its tensors."""

    def __init__(self, program, out_idx, target, pass_configs):
        self.program, self.out_idx = program, out_idx
        self.target, self.pass_configs = target, pass_configs
        self.name = program.name
        self._kernels: dict = {}

    def __repr__(self) -> str:
        return f"<tilelab.ShapedKernel {self.name}: compiled per call shape and scalar values>"

    @property
    def compiled(self) -> list:
        """The kernels its calls have compiled so far, oldest first."""
        return list(self._kernels.values())

    def specialize(self, *args, target=None) -> Kernel:
        """The Kernel for these arguments, tensors and scalars (compiled on first use);
        `target` overrides the kernel's (the autotuner compiles for a GPU from shapes
        alone). The Kernel takes the tensors only."""
        names = list(inspect.signature(self.program.fn).parameters)
        outputs = [] if self.out_idx is None else \
            [self.out_idx] if isinstance(self.out_idx, int) else list(self.out_idx)
        outputs = sorted({i % len(names) for i in outputs})
        inputs = [n for i, n in enumerate(names) if i not in outputs]
        if len(args) != len(inputs):
            raise TileLabArgumentError(f"{self.name} takes {len(inputs)} argument(s) "
                                       f"({', '.join(inputs)})")
        tensors = {n: a for n, a in zip(inputs, args) if _is_tensor(a)}
        scalars = {n: a for n, a in zip(inputs, args) if not _is_tensor(a)}
        shapes = {n: tuple(int(s) for s in t.shape) for n, t in tensors.items()}
        key = (tuple(shapes.items()), tuple(_dtype_name(t) for t in tensors.values()),
               tuple(_device_of(t) for t in tensors.values()),
               tuple((n, type(v).__name__, v) for n, v in scalars.items()), target)
        if key not in self._kernels:
            from .compiler import resolve_target

            traced = self.program.trace(shapes, scalars)
            traced_names = [p.name for p in traced.params]
            stray = [n for n in scalars if n in traced_names]
            if stray:
                raise TileLabArgumentError(f"{self.name}: {', '.join(stray)} must be a "
                                           "tensor, got a number")
            # the outputs by name: the traced kernel has no scalar parameters
            out_idx = None if self.out_idx is None else \
                [traced_names.index(names[i]) for i in outputs]
            target = resolve_target(target or self.target, list(tensors.values()))
            self._kernels[key] = compile(traced, out_idx=out_idx, target=target,
                                         pass_configs=self.pass_configs)
        return self._kernels[key]

    @raised_at_the_caller
    def __call__(self, *args):
        kernel = self.specialize(*args)
        return kernel(*(a for a in args if _is_tensor(a)))

    def get_profiler(self, tensor_supply_type=None):
        raise TileLabError(f"{self.name} is compiled per call (T.dynamic sizes or scalar "
                           "parameters): profile the kernel for one call, "
                           "`kernel.specialize(*args).get_profiler()`")


def lower(program_or_jit, *args, out_idx=None, target="auto", pass_configs=None, **kwargs):
    """The Trace of compiling a program (or a jit function with these arguments)."""
    if isinstance(program_or_jit, JITFunction):
        return program_or_jit.lower(*args, **kwargs)
    return compile(program_or_jit, out_idx=out_idx, target=target,
                   pass_configs=pass_configs).trace


def load(path) -> Kernel:
    """Load an exported kernel (`kernel.export(path)`) as a callable Kernel: CUDA, no TVM."""
    from .runtime.artifact import load_artifact

    return Kernel.from_artifact(load_artifact(path))
