"""Turning CUDA C into a cubin with nvcc, and reading what ptxas reports.

`compile_cuda` writes the source next to tilelab's device header, runs nvcc
for the target architecture (`sm_90` gets `sm_90a`, which unlocks Hopper's
own instructions), and returns the cubin, the PTX and the resource report
(registers, spills, shared and local memory) that `ptxas -v` prints.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...errors import TileLabCompileError

INCLUDE_DIR = Path(__file__).parent / "include"


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


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
    if nvcc is None:
        raise TileLabCompileError(
            "compiling for CUDA needs nvcc, which was not found",
            hint="install the CUDA toolkit (nvcc) or add it to PATH")
    flags = ["-O3", "-std=c++17", f"-I{INCLUDE_DIR}", arch_flag(arch), "-lineinfo"]
    if fast_math:
        flags.append("--use_fast_math")
    ptxas = find_ptxas(nvcc)
    with tempfile.TemporaryDirectory(prefix="tilelab-nvcc-") as tmp:
        cu = Path(tmp) / "kernel.cu"
        cu.write_text(source)
        cubin, ptx = Path(tmp) / "kernel.cubin", Path(tmp) / "kernel.ptx"
        # CUDA C -> PTX once; then ptxas assembles the cubin and reports resources
        run = subprocess.run([nvcc, "-ptx", *flags, "-o", str(ptx), str(cu)],
                             capture_output=True, text=True)
        if run.returncode == 0:
            run = subprocess.run([ptxas, f"-arch={arch}", "-O3", "-v", "-lineinfo", "-o",
                                  str(cubin), str(ptx)], capture_output=True, text=True)
        if run.returncode != 0:
            kept = Path(tempfile.mkdtemp(prefix="tilelab-failed-")) / "kernel.cu"
            kept.write_text(source)
            lines = [ln.replace(str(cu), str(kept)) for ln in run.stderr.splitlines()
                     if "error" in ln] or run.stderr.splitlines()
            raise TileLabCompileError("nvcc rejected the generated CUDA code: " +
                                      "; ".join(lines[:3]),
                                      hint=f"the generated source is kept in {kept}")
        return {
            "cubin": cubin.read_bytes(),
            "ptx": ptx.read_text(),
            "ptxas": run.stderr,
            "resources": parse_ptxas(run.stderr),
            "sass": disassemble(cubin),
        }


def find_ptxas(nvcc: str) -> str:
    """ptxas next to nvcc, or on PATH."""
    beside = Path(nvcc).with_name("ptxas")
    return str(beside) if beside.exists() else (shutil.which("ptxas") or "ptxas")


def disassemble(cubin: Path) -> str:
    """SASS of a cubin, when cuobjdump or nvdisasm is installed."""
    for tool, args in (("cuobjdump", ["-sass"]), ("nvdisasm", [])):
        path = shutil.which(tool)
        if path:
            run = subprocess.run([path, *args, str(cubin)], capture_output=True, text=True)
            if run.returncode == 0:
                return run.stdout
    return ""
