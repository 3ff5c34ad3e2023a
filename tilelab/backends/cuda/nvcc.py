"""Turning CUDA C into a cubin with nvcc (or NVRTC), and reading what ptxas reports.

`compile_cuda` writes the source next to tilelab's device header, runs nvcc
for the target architecture (`sm_90` gets `sm_90a`, which unlocks Hopper's
own instructions), and returns the cubin, the PTX and the resource report
(registers, spills, shared and local memory) that `ptxas -v` prints.
Without nvcc (or with TILELAB_CUDA_COMPILER=nvrtc) NVIDIA's runtime compiler
does the same through the `cuda-bindings` package; it needs the CUDA headers,
which the `nvidia-cuda-runtime` and `nvidia-cuda-cccl` wheels carry.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ...errors import TileLabCompileError

INCLUDE_DIR = Path(__file__).parent / "include"


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@functools.lru_cache(maxsize=1)
def toolchain_version() -> str:
    """Which compiler will build cubins here, and its version (part of the cache key)."""
    nvcc = find_nvcc()
    if nvcc is not None and os.environ.get("TILELAB_CUDA_COMPILER") != "nvrtc":
        run = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
        release = re.findall(r"release [^\n]*", run.stdout)
        return f"nvcc {release[-1] if release else run.stdout.strip()[-60:]}"
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        return f"nvrtc {major}.{minor}"
    except ImportError:
        return "no CUDA compiler"


def arch_flag(arch: str) -> str:
    """`sm_90a` -> `-gencode=arch=compute_90a,code=sm_90a`."""
    number = arch.removeprefix("sm_")
    return f"-gencode=arch=compute_{number},code=sm_{number}"


def default_arch() -> str:
    """The arch of the visible GPU, else Hopper (sm_90a)."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"
    except ImportError:
        pass
    return "sm_90a"


def parse_ptxas(report: str) -> dict:
    """Registers, spills, shared/local memory from `ptxas -v` output."""
    out: dict = {}
    patterns = {
        "registers": r"Used (\d+) registers",
        "spill_stores_bytes": r"(\d+) bytes spill stores",
        "spill_loads_bytes": r"(\d+) bytes spill loads",
        "stack_bytes": r"(\d+) bytes stack frame",
        "shared_bytes": r"(\d+) bytes smem",
        "constant_bytes": r"(\d+) bytes cmem\[0\]",
    }
    for key, pattern in patterns.items():
        match = re.search(pattern, report)
        if match:
            out[key] = int(match.group(1))
    return out


def compile_cuda(source: str, arch: str, fast_math: bool = False) -> dict:
    """Compile CUDA C to a cubin; returns cubin bytes, PTX text and the resource report."""
    nvcc = find_nvcc()
    if nvcc is None or os.environ.get("TILELAB_CUDA_COMPILER") == "nvrtc":
        return compile_nvrtc(source, arch, fast_math)
    flags = ["-O3", "-std=c++17", f"-I{INCLUDE_DIR}", arch_flag(arch), "-lineinfo"]
    if fast_math:
        flags.append("--use_fast_math")
    ptxas = find_ptxas(nvcc)
    with tempfile.TemporaryDirectory(prefix="tilelab-nvcc-") as tmp:
        cu = Path(tmp) / "kernel.cu"
        cu.write_text(source)
        cubin, ptx = Path(tmp) / "kernel.cubin", Path(tmp) / "kernel.ptx"
        # CUDA C -> PTX once; then ptxas assembles the cubin and reports resources
        timings, started = {}, time.perf_counter()
        run = subprocess.run([nvcc, "-ptx", *flags, "-o", str(ptx), str(cu)],
                             capture_output=True, text=True)
        timings["nvcc_ms"] = round(1e3 * (time.perf_counter() - started), 1)
        if run.returncode == 0:
            started = time.perf_counter()
            run = subprocess.run([ptxas, f"-arch={arch}", "-O3", "-v", "-lineinfo", "-o",
                                  str(cubin), str(ptx)], capture_output=True, text=True)
            timings["ptxas_ms"] = round(1e3 * (time.perf_counter() - started), 1)
        if run.returncode != 0:
            kept = Path(tempfile.mkdtemp(prefix="tilelab-failed-")) / "kernel.cu"
            kept.write_text(source)
            raise TileLabCompileError(
                _too_many_registers(run.stderr) + "nvcc rejected the generated CUDA code:\n" +
                first_errors(run.stderr.replace(str(cu), str(kept)), source),
                hint=f"the generated source is kept in {kept}")
        return {
            "cubin": cubin.read_bytes(),
            "ptx": ptx.read_text(),
            "ptxas": run.stderr,
            "resources": dict(parse_ptxas(run.stderr), toolchain_ms=timings),
        }


_ERROR_LINE = re.compile(
    r"^(?P<file>[^\s(]+)\((?P<line>\d+)\): (?:catastrophic )?error:? (?P<msg>.*)$")


def _too_many_registers(log: str) -> str:
    """What ptxas' failed register allocation means for the program (or "")."""
    if "Register allocation failed" not in log:
        return ""
    return ("each thread of this kernel needs more registers than a GPU thread has (255): "
            "the block's fragments (register tiles) are too large for its threads - give "
            "the block more threads (a 128 x 256 float32 accumulator needs 256) or use "
            "smaller fragments. ")


def first_errors(log: str, source: str, limit: int = 3) -> str:
    """The compiler's first errors, each with the generated line it names.

    nvcc and NVRTC print every warning of the CUDA headers before the error that
    matters; a learner needs the error lines (`kernel.cu(42): error: ...`) and the
    generated code they point at, not pages of warnings.
    """
    lines = source.splitlines()
    errors = []
    for raw in log.splitlines():
        match = _ERROR_LINE.match(raw.strip())
        if match:
            number = int(match["line"])
            shown = f"  {match['file']}:{number}: error: {match['msg'].strip()}"
            if 0 < number <= len(lines):
                shown += f"\n      {lines[number - 1].strip()}"
            errors.append(shown)
        elif ("error" in raw.lower() or "fatal" in raw.lower()) and \
                not re.search(r"\d+ errors? detected|aborted due to errors", raw):
            # ptxas and fatal errors name no line
            errors.append(f"  {raw.strip()}")
        if len(errors) == limit:
            break
    if not errors:  # no line said "error": show the end of the log, where compilers stop
        errors = [f"  {ln}" for ln in log.strip().splitlines()[-limit:]]
    return "\n".join(errors)


def find_ptxas(nvcc: str) -> str:
    """ptxas next to nvcc, or on PATH."""
    beside = Path(nvcc).with_name("ptxas")
    return str(beside) if beside.exists() else (shutil.which("ptxas") or "ptxas")


def disassemble(cubin: bytes) -> str:
    """SASS of a cubin, when cuobjdump or nvdisasm is installed ("" otherwise). Asked for by
    the source view only: a cuobjdump run is most of a second on a GPU host, which a compile
    that shows no code need not pay."""
    tools = [(shutil.which(tool), args) for tool, args in
             (("cuobjdump", ["-sass"]), ("nvdisasm", []))]
    tools += [(str(tool), []) for tool in _wheel_tools("nvdisasm")]  # pip's nvidia-cuda-nvdisasm
    with tempfile.TemporaryDirectory(prefix="tilelab-sass-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        for tool, args in tools:
            if tool:
                run = subprocess.run([tool, *args, str(path)], capture_output=True, text=True)
                if run.returncode == 0:
                    return run.stdout
    return ""


NVRTC_HINT = ("install the CUDA toolkit (nvcc), or NVRTC and the CUDA headers: "
              "pip install cuda-bindings nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cuda-cccl")


def _wheel_paths(pattern: str) -> list[Path]:
    """Paths matching `pattern` in NVIDIA's pip wheels (the `nvidia` namespace package)."""
    try:
        import nvidia
    except ImportError:
        return []
    return [path for base in nvidia.__path__ for path in sorted(Path(base).glob(pattern))]


def _wheel_tools(name: str) -> list[Path]:
    return [path for path in _wheel_paths(f"cu*/bin/{name}") if os.access(path, os.X_OK)]


def cuda_include_dirs() -> list[str]:
    """Where cuda_fp16.h and cuda/std/* live: a toolkit, or NVIDIA's pip wheels."""
    dirs = []
    for root in filter(None, (os.environ.get("CUDA_HOME"), "/usr/local/cuda")):
        dirs += [os.path.join(root, "include"), os.path.join(root, "include", "cccl")]
    for sub in _wheel_paths("cu*/include"):
        dirs += [str(sub), str(sub / "cccl")]
    return [d for d in dirs if os.path.isdir(d)]


def compile_nvrtc(source: str, arch: str, fast_math: bool = False) -> dict:
    """Compile CUDA C to a cubin with NVRTC (no PTX: NVRTC emits one or the other)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise TileLabCompileError("compiling for CUDA needs nvcc or NVRTC; neither was found",
                                  hint=NVRTC_HINT) from None
    options = [f"--gpu-architecture={arch}", f"-I{INCLUDE_DIR}", "-std=c++17", "-lineinfo",
               "--ptxas-options=-v"] + [f"-I{d}" for d in cuda_include_dirs()]
    if fast_math:
        options.append("--use_fast_math")
    err, program = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    try:
        encoded = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(program, len(encoded), encoded)
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        log_text = log.decode(errors="replace").rstrip("\x00 ")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise TileLabCompileError(_too_many_registers(log_text) +
                                      "NVRTC rejected the generated CUDA code:\n" +
                                      first_errors(log_text, source), hint=NVRTC_HINT)
        _, size = nvrtc.nvrtcGetCUBINSize(program)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(program, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return {"cubin": bytes(cubin), "ptx": "", "ptxas": log_text,
            "resources": parse_ptxas(log_text)}
