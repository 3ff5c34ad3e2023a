"""Build the runtime test kernels with nvcc and export them as `.tilelab` files.

Runs where nvcc is installed (no GPU needed); the GPU machine, which has no
nvcc, then loads the files with `tilelab.load` (tests/test_runtime.py,
bench/runtime_gpu.py). The kernels are hand-written CUDA C, so they test the
runtime and the file format independently of the compiler:

* ``vector_add``: c = a + b over 100003 floats (the last block has a tail);
* ``smem_reverse``: reverses each 25600-float chunk through 100 KB of dynamic
  shared memory (more than 48 KB, so the launcher must opt in);
* ``scale_prefix``: y[i] = alpha * x[i] for i < n, with scalar parameters
  ``int n`` and ``float alpha`` after the tensors.

    .venv/bin/python bench/build_runtime_artifacts.py [--out bench/artifacts/runtime]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "bench", "artifacts", "runtime")
ARCH = "sm_90a"

VECTOR_N = 100003
CHUNK = 25600  # floats per block in smem_reverse: 100 KB of shared memory
CHUNKS = 4
PREFIX_SIZE = 4096

KERNELS = {
    "vector_add": dict(
        source=f"""
#define N {VECTOR_N}
extern "C" __global__ void __launch_bounds__(256)
vector_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) c[i] = a[i] + b[i];
}}
""",
        kernel_name="vector_add",
        grid=((VECTOR_N + 255) // 256, 1, 1),
        block=(256, 1, 1),
        dynamic_smem=0,
        params=[dict(name="A", shape=(VECTOR_N,), dtype="float32", output=False),
                dict(name="B", shape=(VECTOR_N,), dtype="float32", output=False),
                dict(name="C", shape=(VECTOR_N,), dtype="float32", output=True)],
    ),
    "smem_reverse": dict(
        source=f"""
#define CHUNK {CHUNK}
extern "C" __global__ void __launch_bounds__(256)
smem_reverse(const float* __restrict__ x, float* __restrict__ y) {{
  extern __shared__ float buf[];
  const float* src = x + blockIdx.x * CHUNK;
  float* dst = y + blockIdx.x * CHUNK;
  for (int i = threadIdx.x; i < CHUNK; i += blockDim.x) buf[i] = src[i];
  __syncthreads();
  for (int i = threadIdx.x; i < CHUNK; i += blockDim.x) dst[i] = buf[CHUNK - 1 - i];
}}
""",
        kernel_name="smem_reverse",
        grid=(CHUNKS, 1, 1),
        block=(256, 1, 1),
        dynamic_smem=CHUNK * 4,
        params=[dict(name="X", shape=(CHUNKS * CHUNK,), dtype="float32", output=False),
                dict(name="Y", shape=(CHUNKS * CHUNK,), dtype="float32", output=True)],
    ),
    "scale_prefix": dict(
        source="""
extern "C" __global__ void __launch_bounds__(256)
scale_prefix(const float* __restrict__ x, float* __restrict__ y, int n, float alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i];
}
""",
        kernel_name="scale_prefix",
        grid=(PREFIX_SIZE // 256, 1, 1),
        block=(256, 1, 1),
        dynamic_smem=0,
        params=[dict(name="X", shape=(PREFIX_SIZE,), dtype="float32", output=False),
                dict(name="Y", shape=(PREFIX_SIZE,), dtype="float32", output=True)],
        scalar_params=["int32", "float32"],
    ),
}


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc") if os.path.exists(p)),
        None)


def compile_cubin(source: str, nvcc: str, arch: str = ARCH) -> bytes:
    """nvcc -cubin for one GPU architecture ("sm_90a" -> compute_90a/sm_90a)."""
    compute = "compute_" + arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory(prefix="tilelab-nvcc-") as tmp:
        cu, cubin = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.cubin")
        with open(cu, "w") as f:
            f.write(source)
        out = subprocess.run([nvcc, "-cubin", f"-gencode=arch={compute},code={arch}", "-O3",
                              "-o", cubin, cu], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{out.stderr}")
        with open(cubin, "rb") as f:
            return f.read()


def build(out_dir: str = DEFAULT_OUT, nvcc: str | None = None, names=None) -> dict[str, str]:
    """Compile the kernels and write `<name>.tilelab` files; returns name -> path."""
    sys.path.insert(0, ROOT)
    from tilelab.runtime.artifact import save_artifact
    from tilelab.trace import Trace

    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found")
    paths = {}
    for name in names or KERNELS:
        spec = KERNELS[name]
        source = spec["source"].lstrip()
        trace = Trace(kernel=name, target="cuda",
                      params=[dict(p, shape=list(p["shape"])) for p in spec["params"]],
                      code={"cuda": source},
                      resources={"dynamic_smem": spec["dynamic_smem"], "arch": ARCH})
        paths[name] = save_artifact(
            os.path.join(out_dir, f"{name}.tilelab"), name=name,
            kernel_name=spec["kernel_name"], cubin=compile_cubin(source, nvcc),
            grid=spec["grid"], block=spec["block"], dynamic_smem=spec["dynamic_smem"],
            params=spec["params"], arch=ARCH, trace_json=trace.to_json(), source=source,
            scalar_params=spec.get("scalar_params", ()))
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="folder for the .tilelab files")
    parser.add_argument("--nvcc", default=None, help="the nvcc to use (default: from PATH)")
    args = parser.parse_args(argv)
    for name, path in build(args.out, args.nvcc).items():
        print(f"{name}: {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
