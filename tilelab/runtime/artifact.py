"""The exported kernel: one self-contained file that runs without TVM.

A `.tilelab` file is a zip archive holding

* ``meta.json``: the format name and version, the kernel's name, the name of its
  entry point in the cubin, the launch configuration (grid, block, dynamic
  shared memory), its tensor parameters (name, shape, dtype, output), its scalar
  parameters (dtypes, passed after the tensors), the GPU architecture, and the
  configuration the autotuner chose (`config`, when it chose this kernel);
* ``kernel.cubin``: the compiled device code;
* ``trace.json`` (optional): the compilation's `tilelab.Trace`;
* ``kernel.cu`` (optional): the generated CUDA C.

`save_artifact` writes it atomically; `load_artifact` reads it back into an
`Artifact`; `load` (also `tilelab.load`) turns it into a callable
`tilelab.Kernel` that launches through `tilelab.runtime.cuda.CudaLauncher`.
Neither reading nor running needs TVM or a compiler.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field

from ..errors import TileLabError, TileLabWarning

__all__ = ["FORMAT", "FORMAT_VERSION", "Artifact", "RuntimeParam", "TileLabArtifactError",
           "load_artifact", "save_artifact"]

FORMAT = "tilelab-kernel"
FORMAT_VERSION = 1
SUFFIX = ".tilelab"

_META, _CUBIN, _TRACE, _SOURCE = "meta.json", "kernel.cubin", "trace.json", "kernel.cu"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed zip timestamps: the same kernel gives the same bytes
# What a kernel file may hold, checked before anything is decompressed (a zip bomb's
# headers announce its size): bytes per member, and members in all.
_LIMITS = {_META: 1 << 20, _CUBIN: 256 << 20, _TRACE: 256 << 20, _SOURCE: 64 << 20}
_MAX_MEMBERS = 64
_MAX_DEPTH = 64  # JSON nesting in meta.json (a Trace nests a handful of levels)


class TileLabArtifactError(TileLabError):
    """A kernel file that is missing, damaged, or written by an incompatible tilelab."""


@dataclass(frozen=True)
class RuntimeParam:
    """A tensor parameter of a loaded kernel (what `tilelab.Kernel` needs of a parameter)."""

    name: str
    shape: tuple
    dtype: str
    output: bool = False
    location: object = None  # no source location: the kernel was compiled elsewhere


@dataclass
class Artifact:
    """The contents of a `.tilelab` file."""

    name: str
    kernel_name: str
    cubin: bytes
    grid: tuple
    block: tuple
    dynamic_smem: int
    params: list  # dicts: name, shape (tuple), dtype, output
    arch: str
    trace_json: str | None = None
    source: str | None = None
    scalar_params: list = field(default_factory=list)  # dtypes, after the tensors
    version: int = FORMAT_VERSION
    arg_order: list | None = None  # kernel parameter k is tensor arg_order[k]
    config: dict | None = None  # the autotuner's winning keyword values (tilelab.autotune)
    tensor_maps: list = field(default_factory=list)  # TMA descriptors the launcher encodes
    next_kernels: list = field(default_factory=list)  # a program's later `with T.Kernel`s
    scratch: list = field(default_factory=list)  # T.alloc_global tensors made for each call
    cooperative: bool = False  # T.sync_grid: launched cooperatively

    def runtime_params(self) -> list[RuntimeParam]:
        return [RuntimeParam(p["name"], tuple(p["shape"]), p["dtype"], bool(p["output"]))
                for p in self.params]

    def launcher(self):
        """A `CudaLauncher` for this kernel (tensors in signature order, then scalars), or a
        `KernelSequence` for a program of several kernels or with scratch tensors."""
        from .cuda import launcher_for

        return launcher_for(self.cubin, {
            "kernel_name": self.kernel_name, "grid": self.grid, "block": self.block,
            "dynamic_smem": self.dynamic_smem, "arch": self.arch, "arg_order": self.arg_order,
            "tensor_maps": self.tensor_maps, "next_kernels": self.next_kernels,
            "scratch": self.scratch, "cooperative": self.cooperative},
            [p["dtype"] for p in self.params], self.scalar_params)

    def trace(self):
        """The compilation's Trace, or a small one holding the CUDA source."""
        from ..trace import Trace

        trace = None
        if self.trace_json:
            try:
                trace = Trace.from_json(self.trace_json)
            except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as err:
                warnings.warn(f"the trace in kernel {self.name} could not be read ({err}); "
                              f"it was written by another tilelab version", TileLabWarning,
                              stacklevel=3)
        if trace is None:
            trace = Trace(kernel=self.name, target="cuda",
                          params=[dict(p, shape=list(p["shape"])) for p in self.params])
        if self.source and not trace.code.get("cuda"):
            trace.code["cuda"] = self.source
        return trace


# ---------------------------------------------------------------- writing


def _normalize_params(params) -> list[dict]:
    out = []
    for i, p in enumerate(params):
        if not isinstance(p, dict):  # accept ParamInfo-like objects too
            p = {k: getattr(p, k) for k in ("name", "shape", "dtype", "output")}
        try:
            out.append({"name": str(p["name"]), "shape": tuple(int(s) for s in p["shape"]),
                        "dtype": str(p["dtype"]), "output": bool(p.get("output", False))})
        except (KeyError, TypeError, ValueError) as err:
            raise TileLabArtifactError(f"parameter {i} ({p!r}) needs name, a shape of "
                                       f"integers, dtype and output: {err}") from None
    return out


def _dims(value, what: str) -> tuple:
    if isinstance(value, int):
        value = (value,)
    dims = tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise TileLabArtifactError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return dims + (1,) * (3 - len(dims))


_MAP_KEYS = {"param": int, "tensor": int, "dtype": str, "shape": list, "box": list,
             "swizzle": int}


def _tensor_maps(value) -> list:
    """TMA descriptor specs as the launcher reads them (param and tensor positions, the
    tensor's dtype and shape, the box, the swizzle), checked field by field."""
    if not isinstance(value, list) or len(value) > 16:
        raise TileLabArtifactError("tensor_maps must be a list of at most 16 descriptors")
    specs = []
    for spec in value:
        if not isinstance(spec, dict) or any(not isinstance(spec.get(k), t)
                                             for k, t in _MAP_KEYS.items()):
            raise TileLabArtifactError(f"a tensor map needs {', '.join(_MAP_KEYS)}")
        if not all(isinstance(n, int) and 0 < n < 1 << 32 for n in spec["shape"] + spec["box"]) \
                or not 1 <= len(spec["shape"]) <= 5 or len(spec["box"]) != len(spec["shape"]):
            raise TileLabArtifactError("a tensor map's shape and box must be 1 to 5 positive "
                                       "sizes each")
        specs.append({k: spec[k] for k in _MAP_KEYS})
    return specs


def _next_kernels(value) -> list:
    """The later kernels of a program: symbol, grid, block, shared memory, parameters."""
    if not isinstance(value, list) or len(value) > 64:
        raise TileLabArtifactError("next_kernels must be a list of at most 64 kernels")
    kernels = []
    for k in value:
        if not isinstance(k, dict) or not isinstance(k.get("kernel_name"), str) or \
                not isinstance(k.get("arg_order"), list) or \
                not all(isinstance(i, int) and 0 <= i < 4096 for i in k["arg_order"]):
            raise TileLabArtifactError("a kernel needs kernel_name and arg_order")
        kernels.append({"kernel_name": k["kernel_name"], "grid": list(_dims(k.get("grid"), "grid")),
                        "block": list(_dims(k.get("block"), "block")),
                        "dynamic_smem": int(k.get("dynamic_smem", 0)),
                        "arg_order": list(k["arg_order"]),
                        **({"tensor_maps": _tensor_maps(k["tensor_maps"])}
                           if k.get("tensor_maps") else {}),
                        **({"cooperative": True} if k.get("cooperative") is True else {})})
    return kernels


def _scratch(value) -> list:
    """Scratch tensors (T.alloc_global): name, shape, dtype."""
    if not isinstance(value, list) or len(value) > 64:
        raise TileLabArtifactError("scratch must be a list of at most 64 tensors")
    out = []
    for t in value:
        if not isinstance(t, dict) or not isinstance(t.get("dtype"), str) or \
                not isinstance(t.get("shape"), list) or len(t["shape"]) > 8 or \
                not all(isinstance(n, int) and 0 < n < 1 << 40 for n in t["shape"]):
            raise TileLabArtifactError("a scratch tensor needs a shape of positive sizes and "
                                       "a dtype")
        out.append({"name": str(t.get("name", "")), "shape": list(t["shape"]),
                    "dtype": t["dtype"]})
    return out


def save_artifact(path, *, name: str, kernel_name: str, cubin: bytes, grid, block,
                  dynamic_smem: int, params, arch: str, trace_json: str | None = None,
                  source: str | None = None, scalar_params=(), arg_order=None,
                  config: dict | None = None, tensor_maps=(), next_kernels=(),
                  scratch=(), cooperative: bool = False) -> str:
    """Write a kernel to one `.tilelab` file (atomically); returns the path written."""
    if not isinstance(cubin, (bytes, bytearray)) or not cubin:
        raise TileLabArtifactError("cubin must be non-empty bytes")
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "name": str(name),
        "kernel_name": str(kernel_name),
        "grid": list(_dims(grid, "grid")),
        "block": list(_dims(block, "block")),
        "dynamic_smem": int(dynamic_smem),
        "params": [dict(p, shape=list(p["shape"])) for p in _normalize_params(params)],
        "scalar_params": [str(d) for d in scalar_params],
        "arch": str(arch),
    }
    if arg_order is not None:
        meta["arg_order"] = [int(i) for i in arg_order]
    if tensor_maps:
        meta["tensor_maps"] = _tensor_maps(list(tensor_maps))
    if next_kernels:
        meta["next_kernels"] = _next_kernels(list(next_kernels))
    if scratch:
        meta["scratch"] = _scratch(list(scratch))
    if cooperative:
        meta["cooperative"] = True
    if config is not None:  # values JSON cannot hold (a dtype object) are kept as their text
        meta["config"] = {str(k): v if isinstance(v, (bool, int, float, str)) or v is None
                          else str(v) for k, v in config.items()}
    entries = [(_META, json.dumps(meta, indent=1).encode()), (_CUBIN, bytes(cubin))]
    if trace_json is not None:
        entries.append((_TRACE, trace_json.encode()))
    if source is not None:
        entries.append((_SOURCE, source.encode()))

    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w") as zf:
                for entry, data in entries:
                    info = zipfile.ZipInfo(entry, date_time=_EPOCH)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = 0o644 << 16
                    zf.writestr(info, data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


# ---------------------------------------------------------------- reading


def load_artifact(path) -> Artifact:
    """Read a `.tilelab` file; TileLabError if it is missing, damaged or too new."""
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            for required in (_META, _CUBIN):
                if required not in names:
                    raise TileLabArtifactError(f"{path} is not a tilelab kernel file "
                                               f"(it has no {required})")
            _check_members(path, zf)
            meta = _parse_json(zf.read(_META).decode(), _META)
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise TileLabArtifactError(f"{path} is not a tilelab kernel file")
            version = meta.get("version")
            if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
                raise TileLabArtifactError(
                    f"{path} has kernel-file format version {version!r}; this tilelab reads "
                    f"version {FORMAT_VERSION}",
                    hint="export the kernel again with this tilelab, or update tilelab")
            cubin = zf.read(_CUBIN)
            trace_json = zf.read(_TRACE).decode() if _TRACE in names else None
            source = zf.read(_SOURCE).decode() if _SOURCE in names else None
    except FileNotFoundError:
        raise TileLabArtifactError(f"no kernel file at {path}") from None
    except IsADirectoryError:
        raise TileLabArtifactError(f"{path} is a directory, not a kernel file") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, ValueError,
            NotImplementedError, OSError, RuntimeError) as err:  # BadZipFile: also a bad CRC
        raise TileLabArtifactError(f"{path} is damaged or not a tilelab kernel file: "
                                   f"{err}") from None
    try:
        if not cubin:
            raise ValueError("the cubin is empty")
        return Artifact(
            name=str(meta["name"]),
            kernel_name=str(meta["kernel_name"]),
            cubin=cubin,
            grid=_dims(meta["grid"], "grid"),
            block=_dims(meta["block"], "block"),
            dynamic_smem=int(meta["dynamic_smem"]),
            params=_normalize_params(meta["params"]),
            arch=str(meta["arch"]),
            trace_json=trace_json,
            source=source,
            scalar_params=[str(d) for d in meta.get("scalar_params", [])],
            arg_order=meta.get("arg_order"),
            config=meta.get("config"),
            tensor_maps=_tensor_maps(meta.get("tensor_maps", [])),
            next_kernels=_next_kernels(meta.get("next_kernels", [])),
            scratch=_scratch(meta.get("scratch", [])),
            cooperative=meta.get("cooperative") is True,
            version=version,
        )
    except TileLabArtifactError as err:
        raise TileLabArtifactError(f"{path} is damaged: {err.message}") from None
    except (KeyError, TypeError, ValueError) as err:
        raise TileLabArtifactError(f"{path} is damaged: bad or missing field in "
                                   f"{_META}: {err}") from None


def _check_members(path: str, zf: zipfile.ZipFile) -> None:
    """Refuse what would cost memory or fail later: too many members, a member larger than
    its limit (judged by the sizes the headers declare; reading never goes past them),
    and encrypted members (a kernel file is never encrypted)."""
    infos = zf.infolist()
    if len(infos) > _MAX_MEMBERS:
        raise TileLabArtifactError(f"{path} is not a tilelab kernel file ({len(infos)} members)")
    for info in infos:
        if info.flag_bits & 0x1:
            raise TileLabArtifactError(f"{path} is not a tilelab kernel file: {info.filename} "
                                       "is encrypted")
        limit = _LIMITS.get(info.filename)
        if limit is not None and info.file_size > limit:
            raise TileLabArtifactError(
                f"{path} is damaged or not a tilelab kernel file: {info.filename} would "
                f"unpack to {info.file_size} bytes (at most {limit} are expected)")


def _depth(text: str) -> int:
    """The deepest nesting of brackets in JSON text (strings skipped), without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _parse_json(text: str, what: str):
    """JSON from a kernel file, refusing nesting no tilelab writes (it would exhaust
    Python's recursion)."""
    if _depth(text) > _MAX_DEPTH:
        raise ValueError(f"{what} is nested more than {_MAX_DEPTH} levels deep")
    return json.loads(text)
