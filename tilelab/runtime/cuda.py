"""Launch a compiled CUDA kernel (a cubin) on torch's current stream, without TVM.

A `CudaLauncher` holds one cubin and its launch configuration. On its first
call on a device it loads the cubin into torch's CUDA context through NVIDIA's
driver bindings (`cuda.bindings.driver`, from the cuda-bindings or cuda-python
package); every call then only writes the tensors' data pointers into a
kernel-parameter array built once, and calls `cuLaunchKernel` with the raw
address of that array. Nothing here imports TVM, and torch is imported on the
first launch, so an exported kernel runs where only torch and a driver exist.

The kernel's parameters are, in order, one device pointer per tensor
(`param_dtypes`) and then, optionally, scalars passed by value
(`scalar_params`, e.g. ``["int32"]``): call the launcher with the tensors
followed by the scalar values. A kernel that copies with TMA also takes
descriptors (`tensor_maps`): 128 bytes each, passed by value, that describe a
tensor's shape and the box one copy moves. They hold the tensor's address, so
the launcher encodes them (`cuTensorMapEncodeTiled`) when a tensor's address
changes and otherwise reuses them.

A launcher keeps its parameter array in the object, so one launcher must not
be called from two threads at the same time (the driver copies the parameter
values during `cuLaunchKernel`, so consecutive calls are safe).
"""

from __future__ import annotations

import ctypes
import math
import time

from ..errors import TileLabArgumentError, TileLabError

__all__ = ["CudaError", "CudaLauncher", "CudaUnavailableError", "KernelSequence", "driver",
           "launch_overhead_us", "launcher_for"]

# Kernels may use this much dynamic shared memory without opting in.
STATIC_SMEM_LIMIT = 48 * 1024

# Scalar kernel parameters passed by value: dtype -> ctypes type of the same size.
SCALAR_CTYPES = {
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "bool": ctypes.c_bool,
}

_INSTALL_HINT = "pip install cuda-bindings (or cuda-python) into this environment"


class CudaUnavailableError(TileLabError):
    """CUDA cannot be used here: no driver bindings, no driver, or no GPU."""


class CudaError(TileLabError):
    """A CUDA driver call failed; `result` is the CUresult name (``"CUDA_ERROR_..."``)."""

    def __init__(self, message: str, result: str | None = None, hint: str = ""):
        self.result = result
        super().__init__(message, hint=hint)


# ---------------------------------------------------------------- driver bindings

_DRIVER = None


def driver():
    """NVIDIA's driver-API module (`cuda.bindings.driver`), imported on first use."""
    global _DRIVER
    if _DRIVER is None:
        try:
            from cuda.bindings import driver as drv
        except ImportError:
            try:  # cuda-python before 12.6 had the same API under another name
                from cuda import cuda as drv  # type: ignore[no-redef]
            except ImportError:
                raise CudaUnavailableError(
                    "running a CUDA kernel needs NVIDIA's driver bindings "
                    "(the module cuda.bindings.driver), which are not installed",
                    hint=_INSTALL_HINT) from None
        _DRIVER = drv
    return _DRIVER


def _result_name(drv, err) -> str:
    name = getattr(err, "name", None)
    if name:
        return name
    try:
        res, text = drv.cuGetErrorName(err)
        if not res and text:
            return text.decode()
    except Exception:  # noqa: BLE001 - only for the message
        pass
    return f"CUresult {int(err)}"


def _result_text(drv, err) -> str:
    try:
        res, text = drv.cuGetErrorString(err)
        if not res and text:
            return text.decode()
    except Exception:  # noqa: BLE001 - only for the message
        pass
    return ""


def _error(what: str, err, hint: str = "") -> CudaError:
    drv = driver()
    name = _result_name(drv, err)
    text = _result_text(drv, err)
    message = f"{what} failed: {name}" + (f" ({text})" if text else "")
    return CudaError(message, result=name, hint=hint or _HINTS.get(name, ""))


_HINTS = {
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "the cubin was built for another GPU architecture; "
                                    "recompile it for this GPU",
    "CUDA_ERROR_INVALID_IMAGE": "the cubin is damaged or was built for another architecture",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the NVIDIA driver is older than the compiler that "
                                          "built the kernel; update the driver",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "the kernel accessed memory out of bounds; the CUDA context "
                                  "is unusable now, restart the process",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES": "the block needs more registers or threads than an "
                                          "SM has; use fewer threads per block",
    "CUDA_ERROR_NOT_FOUND": "the cubin has no kernel of that name (it must be extern \"C\")",
}


def _call(what: str, fn, *args):
    """Call a driver function; raise CudaError unless it returned CUDA_SUCCESS."""
    try:
        out = fn(*args)
    except RuntimeError as err:  # the bindings could not load libcuda
        raise CudaUnavailableError(f"{what} failed: {err}",
                                   hint="is an NVIDIA driver installed on this machine?") from None
    err = out[0]
    if err:
        raise _error(what, err)
    if len(out) == 1:
        return None
    return out[1] if len(out) == 2 else out[1:]


# ---------------------------------------------------------------- torch hooks


def _first_get_device() -> int:
    """Initialize torch's CUDA state once, then swap in the fast device/stream queries."""
    global _get_device, _get_stream
    try:
        import torch
    except ImportError:
        raise CudaUnavailableError("running a CUDA kernel needs torch, which is not installed",
                                   hint="pip install torch (a CUDA build)") from None
    if not torch.cuda.is_available():
        raise CudaUnavailableError("no CUDA GPU is available to torch",
                                   hint="run on a machine with an NVIDIA GPU and a CUDA build "
                                        "of torch")
    torch.cuda.init()
    get_device = getattr(torch._C, "_cuda_getDevice", None)
    get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _get_device = get_device or torch.cuda.current_device
    if get_stream is None:
        def get_stream(device):
            return torch.cuda.current_stream(device).cuda_stream
    _get_stream = get_stream
    return _get_device()


_get_device = _first_get_device  # replaced by torch's own query on first use


def _get_stream(device: int) -> int:  # replaced by _first_get_device
    import torch

    return torch.cuda.current_stream(device).cuda_stream


_PRIMARY_CONTEXTS: dict = {}  # device -> retained primary context


def _ensure_context(drv, device: int):
    """Make torch's context for `device` (the device's primary context) current."""
    ctx = _call("cuCtxGetCurrent", drv.cuCtxGetCurrent)
    if ctx is not None and int(ctx) != 0:
        current = _call("cuCtxGetDevice", drv.cuCtxGetDevice)
        if int(current) == device:
            return ctx
    primary = _PRIMARY_CONTEXTS.get(device)
    if primary is None:
        handle = _call("cuDeviceGet", drv.cuDeviceGet, device)
        primary = _call("cuDevicePrimaryCtxRetain", drv.cuDevicePrimaryCtxRetain, handle)
        _PRIMARY_CONTEXTS[device] = primary
    _call("cuCtxSetCurrent", drv.cuCtxSetCurrent, primary)
    ctx = _call("cuCtxGetCurrent", drv.cuCtxGetCurrent)
    if ctx is None or int(ctx) == 0:
        raise CudaUnavailableError(f"no CUDA context is current on cuda:{device}")
    return ctx


def _dims(value, what: str) -> tuple[int, int, int]:
    if isinstance(value, int):
        value = (value,)
    try:
        dims = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise TileLabArgumentError(f"{what} must be up to 3 integers, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise TileLabArgumentError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return dims + (1,) * (3 - len(dims))


# ---------------------------------------------------------------- the launcher


class CudaLauncher:
    """Launches one kernel of a cubin: ``launcher(*tensors, *scalars)``.

    `param_dtypes` are the dtypes of the tensor parameters (passed as device
    pointers, in the order of the call; `arg_order` permutes them into the
    kernel's parameter order); `scalar_params` the dtypes of scalar parameters that
    follow them. Tensors must be contiguous CUDA tensors on the current device;
    dtypes and shapes are checked by the `tilelab.Kernel` that wraps a launcher,
    not here.
    """

    def __init__(self, cubin: bytes, kernel_name: str, grid, block, dynamic_smem: int = 0,
                 param_dtypes=(), scalar_params=(), arch: str | None = None, arg_order=None,
                 tensor_maps=(), cooperative: bool = False):
        if not isinstance(cubin, (bytes, bytearray, memoryview)) or len(cubin) == 0:
            raise TileLabArgumentError("cubin must be non-empty bytes")
        if not kernel_name or not isinstance(kernel_name, str):
            raise TileLabArgumentError(f"kernel_name must be a non-empty string, got "
                                       f"{kernel_name!r}")
        self.cubin = bytes(cubin)
        self.kernel_name = kernel_name
        self.grid = _dims(grid, "grid")
        self.block = _dims(block, "block")
        self.dynamic_smem = int(dynamic_smem)
        if self.dynamic_smem < 0:
            raise TileLabArgumentError(f"dynamic_smem must be >= 0, got {dynamic_smem}")
        self.param_dtypes = [str(d) for d in param_dtypes]
        self.scalar_params = [str(d) for d in scalar_params]
        for dtype in self.scalar_params:
            if dtype not in SCALAR_CTYPES:
                raise TileLabArgumentError(
                    f"unsupported scalar parameter type {dtype!r}",
                    hint="supported: " + ", ".join(SCALAR_CTYPES))
        self.arch = arch
        # a kernel with T.sync_grid: launched cooperatively, all its blocks resident at once
        self.cooperative = bool(cooperative)

        n_ptr, n_scalar = len(self.param_dtypes), len(self.scalar_params)
        # The kernel's k-th pointer parameter is tensor arg_order[k] of the call (the code
        # generator may order a kernel's parameters differently from the signature, and
        # leaves out a tensor the kernel never touches).
        order = list(range(n_ptr)) if arg_order is None else [int(i) for i in arg_order]
        if len(set(order)) != len(order) or not all(0 <= i < n_ptr for i in order):
            raise TileLabArgumentError(f"arg_order {order} does not pick distinct tensors "
                                       f"among the {n_ptr} tensor parameters")
        self.arg_order = order
        self._n_ptr = n_ptr
        self._n_args = n_ptr + n_scalar  # what a call passes
        # The kernelParams array (void*[n]) points at one 8-byte slot per pointer,
        # at 128 bytes per TMA descriptor and at one ctypes value per scalar; it is
        # built once and refilled per call.
        self._ptrs = (ctypes.c_uint64 * max(n_ptr, 1))()
        self._scalars = [SCALAR_CTYPES[d]() for d in self.scalar_params]
        self.tensor_maps = [dict(m) for m in tensor_maps]
        self._maps = [_TensorMap(m) for m in self.tensor_maps]
        at_position = {m.param: m for m in self._maps}
        pointers = iter(order)
        addresses = [ctypes.addressof(at_position[p].storage) if p in at_position else
                     ctypes.addressof(self._ptrs) + 8 * next(pointers)
                     for p in range(len(order) + len(self._maps))]
        addresses += [ctypes.addressof(s) for s in self._scalars]
        self._params = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        self._params_addr = ctypes.addressof(self._params) if addresses else 0

        self._modules: dict[int, object] = {}  # device -> CUmodule
        self._functions: dict[int, object] = {}  # device -> CUfunction
        self._stream_raw = None  # the last stream, as an int and as a CUstream
        self._stream = None

    def __repr__(self) -> str:
        params = ", ".join(f"{d}*" for d in self.param_dtypes)
        if self.scalar_params:
            params += ", " + ", ".join(self.scalar_params)
        return (f"<CudaLauncher {self.kernel_name}({params}) grid={self.grid} "
                f"block={self.block} smem={self.dynamic_smem}>")

    # -- loading, once per device

    def _load(self, device: int):
        drv = driver()
        _call("cuInit", drv.cuInit, 0)
        _ensure_context(drv, device)
        try:
            module = _call("loading the cubin (cuModuleLoadData)", drv.cuModuleLoadData,
                           self.cubin)
        except CudaError as err:
            if err.result in ("CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_IMAGE",
                              "CUDA_ERROR_INVALID_PTX") and self.arch:
                err.hint = (f"the cubin was built for {self.arch} but this GPU is "
                            f"{self._device_arch(device)}; recompile for this GPU")
                err.args = (err.render(),)
            raise
        function = _call(f"finding kernel {self.kernel_name!r} in the cubin "
                         f"(cuModuleGetFunction)", drv.cuModuleGetFunction, module,
                         self.kernel_name.encode())
        # a block may use 48 KB of shared memory, static and dynamic together, without
        # opting in
        static = _call("cuFuncGetAttribute", drv.cuFuncGetAttribute,
                       drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function)
        if self.dynamic_smem + static > STATIC_SMEM_LIMIT:
            attribute = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            try:
                _call(f"allowing {self.dynamic_smem} bytes of dynamic shared memory for "
                      f"{self.kernel_name} (cuFuncSetAttribute)", drv.cuFuncSetAttribute,
                      function, attribute, self.dynamic_smem)
            except CudaError as err:
                err.hint = (f"this GPU allows at most {self._max_smem(drv, device)} bytes of "
                            f"shared memory per block")
                err.args = (err.render(),)
                raise
        self._modules[device] = module
        self._functions[device] = function
        return function

    @staticmethod
    def _device_arch(device: int) -> str:
        try:
            import torch

            major, minor = torch.cuda.get_device_capability(device)
            return f"sm_{major}{minor}"
        except Exception:  # noqa: BLE001 - only for the message
            return "another architecture"

    @staticmethod
    def _max_smem(drv, device: int) -> str:
        try:
            attr = drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
            handle = _call("cuDeviceGet", drv.cuDeviceGet, device)
            return str(_call("cuDeviceGetAttribute", drv.cuDeviceGetAttribute, attr, handle))
        except TileLabError:
            return "fewer"

    def load(self):
        """Load the cubin on the current device now (it is otherwise loaded on first call)."""
        device = _get_device()
        function = self._functions.get(device)
        return function if function is not None else self._load(device)

    def close(self):
        """Unload the cubin from every device it was loaded on."""
        if not self._modules:
            return
        drv = driver()
        for module in self._modules.values():
            try:
                drv.cuModuleUnload(module)
            except Exception:  # noqa: BLE001 - best effort
                pass
        self._modules.clear()
        self._functions.clear()

    # -- launching

    def __call__(self, *args):
        device = _get_device()
        function = self._functions.get(device)
        if function is None:
            function = self._load(device)
        if len(args) != self._n_args:
            raise self._arity_error(args)
        ptrs = self._ptrs
        i = 0
        try:
            for tensor in args[:self._n_ptr]:  # the tuple itself when there are no scalars
                if tensor.get_device() != device:
                    raise self._device_error(i, tensor, device)
                ptrs[i] = tensor.data_ptr()
                i += 1
        except AttributeError:
            raise self._device_error(i, args[i], device) from None
        if self._scalars:
            self._set_scalars(args[self._n_ptr:])
        for tensor_map in self._maps:
            tensor_map.point_at(args[tensor_map.tensor], self.kernel_name)
        raw = _get_stream(device)
        if raw != self._stream_raw:
            self._stream = driver().CUstream(raw)
            self._stream_raw = raw
        err = self._launch(function)
        if err:
            self._launch_failed(err, device)

    def _launch(self, function):
        grid, block = self.grid, self.block
        if self.cooperative:
            return _DRIVER.cuLaunchCooperativeKernel(
                function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                self.dynamic_smem, self._stream, self._params_addr)[0]
        return _DRIVER.cuLaunchKernel(function, grid[0], grid[1], grid[2],
                                      block[0], block[1], block[2], self.dynamic_smem,
                                      self._stream, self._params_addr, 0)[0]

    def _launch_failed(self, err, device: int):
        drv = _DRIVER
        if err in (drv.CUresult.CUDA_ERROR_INVALID_CONTEXT,
                   drv.CUresult.CUDA_ERROR_INVALID_HANDLE):
            # Another context was current on this thread (e.g. a new thread); retry in torch's.
            _ensure_context(drv, device)
            err = self._launch(self._functions[device])
            if not err:
                return
        where = (f"CUDA launch of {self.kernel_name} (grid={self.grid}, block={self.block},"
                 f" dynamic smem={self.dynamic_smem} B)")
        if err == drv.CUresult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
            raise TileLabError(
                f"{where}: T.sync_grid needs every block of the grid resident on the GPU at "
                f"once, and {math.prod(self.grid)} blocks of this size do not fit",
                hint="launch at most as many blocks as the GPU runs at once (one per "
                     "multiprocessor: torch.cuda.get_device_properties(0)"
                     ".multi_processor_count), each walking several tiles")
        raise _error(where, err)

    def _set_scalars(self, values):
        for dtype, slot, value in zip(self.scalar_params, self._scalars, values, strict=True):
            try:
                slot.value = value
            except TypeError:
                raise TileLabArgumentError(
                    f"{self.kernel_name}: a {dtype} scalar parameter got "
                    f"{type(value).__name__} {value!r}") from None

    def _arity_error(self, args) -> TileLabError:
        expected = f"{self._n_ptr} tensor(s)"
        if self.scalar_params:
            expected += f" and {len(self.scalar_params)} scalar(s) " \
                        f"({', '.join(self.scalar_params)})"
        return TileLabArgumentError(f"{self.kernel_name} takes {expected}, but {len(args)} "
                                    f"argument(s) were given")

    def _device_error(self, index: int, tensor, device: int) -> TileLabError:
        if not hasattr(tensor, "get_device") or not hasattr(tensor, "data_ptr"):
            return TileLabArgumentError(f"{self.kernel_name}: argument {index} must be a CUDA "
                                        f"tensor, got {type(tensor).__name__}")
        where = tensor.get_device()
        if where < 0:
            return TileLabArgumentError(f"{self.kernel_name}: argument {index} must be a CUDA "
                                        f"tensor, got a CPU tensor", hint="move it with .cuda()")
        return TileLabArgumentError(
            f"{self.kernel_name}: argument {index} is on cuda:{where} but the current device "
            f"is cuda:{device}", hint=f"call inside `with torch.cuda.device({where}):`")

    def __getstate__(self):
        raise TypeError("a CudaLauncher cannot be pickled; save the kernel with "
                        "tilelab.runtime.save_artifact instead")


# ---------------------------------------------------------------- programs of several kernels


def launcher_for(cubin: bytes, launch: dict, param_dtypes, scalar_params=()):
    """What runs a compiled program, from its launch configuration (launch.json): one
    kernel - a CudaLauncher - or, for a program of several `with T.Kernel` blocks or with
    T.alloc_global scratch tensors, a KernelSequence. `launch` describes the first kernel;
    `next_kernels` the others, in program order; `scratch` the global tensors the launcher
    allocates for each call. A kernel's `arg_order` picks from the program's tensors and
    then its scratch tensors; scalars (`scalar_params`) follow them."""
    scratch = list(launch.get("scratch", []))
    dtypes = [str(d) for d in param_dtypes] + [str(s["dtype"]) for s in scratch]
    launchers = [CudaLauncher(cubin, k["kernel_name"], k["grid"], k["block"],
                              k["dynamic_smem"], dtypes, scalar_params, arch=launch.get("arch"),
                              arg_order=k.get("arg_order"), tensor_maps=k.get("tensor_maps", ()),
                              cooperative=k.get("cooperative", False))
                 for k in [launch, *launch.get("next_kernels", [])]]
    if len(launchers) == 1 and not scratch:
        return launchers[0]
    return KernelSequence(launchers, scratch, len(param_dtypes), len(scalar_params))


class KernelSequence:
    """The kernels of one program, launched in turn on the current stream (each sees what
    the ones before it wrote), with the program's scratch tensors allocated for the call."""

    def __init__(self, launchers: list, scratch: list, n_tensors: int, n_scalars: int = 0):
        self.launchers = launchers
        self.scratch = [(tuple(int(n) for n in s["shape"]), str(s["dtype"])) for s in scratch]
        self.n_tensors, self.n_scalars = n_tensors, n_scalars

    def __call__(self, *args):
        if len(args) != self.n_tensors + self.n_scalars:
            raise TileLabArgumentError(f"{self.launchers[0].kernel_name} takes "
                                       f"{self.n_tensors} tensor(s) and {self.n_scalars} "
                                       f"scalar(s), but {len(args)} argument(s) were given")
        import torch

        device = torch.device("cuda", torch.cuda.current_device())
        scratch = [torch.empty(shape, dtype=getattr(torch, dtype), device=device)
                   for shape, dtype in self.scratch]
        tensors, scalars = args[:self.n_tensors], args[self.n_tensors:]
        for launcher in self.launchers:
            launcher(*tensors, *scratch, *scalars)

    def load(self):
        for launcher in self.launchers:
            launcher.load()

    def close(self):
        for launcher in self.launchers:
            launcher.close()

    def __repr__(self) -> str:
        return f"<KernelSequence {', '.join(k.kernel_name for k in self.launchers)}>"

    def __getstate__(self):
        raise TypeError("a KernelSequence cannot be pickled; save the kernel with "
                        "tilelab.runtime.save_artifact instead")


# the element types a descriptor is encoded for: the driver's name, bytes an element
TENSOR_MAP_DTYPES = {"float16": ("FLOAT16", 2), "bfloat16": ("BFLOAT16", 2),
                     "float32": ("FLOAT32", 4), "uint8": ("UINT8", 1), "int32": ("INT32", 4),
                     "uint16": ("UINT16", 2)}


class _TensorMap:
    """One TMA descriptor parameter: its spec and its 128 bytes, re-encoded when the
    tensor it describes moves. The spec (from backends/cuda) gives the tensor's shape
    (outermost first), the box one copy moves (innermost first) and the swizzle width."""

    def __init__(self, spec: dict):
        self.param, self.tensor = int(spec["param"]), int(spec["tensor"])
        self.spec = spec
        self.storage = (ctypes.c_uint64 * 16)()
        self.address = None  # the data pointer the descriptor holds

    def point_at(self, tensor, kernel_name: str) -> None:
        address = tensor.data_ptr()
        if address == self.address:
            return
        if address % 16:
            raise TileLabArgumentError(
                f"{kernel_name}: argument {self.tensor} starts at an address that is not a "
                "multiple of 16 bytes, which the kernel's TMA copies need",
                hint="pass a tensor of its own (.clone()), or compile with "
                     "pass_configs={'tl.disable_tma_lower': True}")
        drv = driver()
        spec = self.spec
        shape = [int(s) for s in spec["shape"]]
        name, nbytes = TENSOR_MAP_DTYPES[spec["dtype"]]
        dims = [drv.cuuint64_t(s) for s in reversed(shape)]
        strides = [drv.cuuint64_t(math.prod(shape[d:]) * nbytes)
                   for d in range(len(shape) - 1, 0, -1)]
        box = [drv.cuuint32_t(b) for b in spec["box"]]
        ones = [drv.cuuint32_t(1)] * len(shape)
        swizzle = {128: "128B", 64: "64B", 32: "32B", 0: "NONE"}[int(spec["swizzle"])]
        encoded = _call(
            f"encoding a TMA descriptor of argument {self.tensor} of {kernel_name} "
            "(cuTensorMapEncodeTiled)", drv.cuTensorMapEncodeTiled,
            getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + name),
            len(shape), address, dims, strides, box, ones,
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + swizzle),
            drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        ctypes.memmove(self.storage, encoded.getPtr(), 128)
        self.address = address


# ---------------------------------------------------------------- measuring


def launch_overhead_us(launcher, tensors, n: int = 1000, warmup: int = 10) -> float:
    """Host time per call of `launcher(*tensors)` in microseconds (mean of n calls).

    The GPU is synchronized before the timed loop and after it; the clock stops
    when the last call returns, so this is the time the host spends launching,
    as long as the kernel itself is shorter than a launch.
    """
    import torch

    for _ in range(warmup):
        launcher(*tensors)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        launcher(*tensors)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / n * 1e6
