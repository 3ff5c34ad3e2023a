"""Run exported kernels on the GPU and report their launch overhead; needs no TVM, no nvcc.

Loads every `.tilelab` file in a folder (default: bench/artifacts/runtime, made
by bench/build_runtime_artifacts.py), runs each kernel on random CUDA tensors,
checks the known test kernels against torch, and measures the host time per
call of the raw `CudaLauncher` and of the `tilelab.Kernel` around it (argument
checks and output allocation), next to a torch op for scale.

    python bench/runtime_gpu.py [folder] [--n 5000] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _inputs(artifact, torch):
    tensors = []
    for p in artifact.params:
        dtype = getattr(torch, p["dtype"])
        if dtype.is_floating_point:
            tensors.append(torch.randn(p["shape"], dtype=dtype, device="cuda"))
        else:
            tensors.append(torch.randint(0, 100, p["shape"], dtype=dtype, device="cuda"))
    return tensors


def _scalars(artifact):
    if artifact.name == "scale_prefix":
        return [1000, 2.5]
    return [1 if d.startswith(("int", "uint")) else 1.0 for d in artifact.scalar_params]


def _check(artifact, ins, outs, scalars, torch):
    """Compare with torch for the kernels of build_runtime_artifacts.py; None if unknown."""
    if artifact.name == "vector_add":
        expected = [ins[0] + ins[1]]
    elif artifact.name == "smem_reverse":
        chunk = artifact.dynamic_smem // 4
        expected = [ins[0].view(-1, chunk).flip(1).reshape(-1)]
    elif artifact.name == "scale_prefix":
        n, alpha = scalars
        y = torch.zeros_like(ins[0])
        y[:n] = alpha * ins[0][:n]
        expected = [y]
    else:
        return None
    return all(torch.allclose(o, e) for o, e in zip(outs, expected, strict=True))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=os.path.join(ROOT, "bench", "artifacts",
                                                                  "runtime"))
    parser.add_argument("--n", type=int, default=5000, help="calls per measurement")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)

    import torch

    from tilelab.kernel import Kernel
    from tilelab.runtime import launch_overhead_us, load_artifact

    paths = sorted(glob.glob(os.path.join(args.folder, "*.tilelab")))
    if not paths:
        print(f"no .tilelab files in {args.folder}", file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | "
          f"{len(paths)} kernel(s) from {args.folder}")
    results, ok = [], True
    for path in paths:
        artifact = load_artifact(path)
        launcher = artifact.launcher()
        arrays = _inputs(artifact, torch)  # every tensor, in signature order
        for i, p in enumerate(artifact.params):
            if p["output"]:
                arrays[i].zero_()
        inputs = [t for t, p in zip(arrays, artifact.params, strict=True) if not p["output"]]
        outs = [t for t, p in zip(arrays, artifact.params, strict=True) if p["output"]]
        scalars = _scalars(artifact)
        launcher(*arrays, *scalars)
        torch.cuda.synchronize()
        correct = _check(artifact, inputs, outs, scalars, torch)
        ok &= correct is not False
        row = {"kernel": artifact.name, "arch": artifact.arch, "grid": list(artifact.grid),
               "block": list(artifact.block), "dynamic_smem": artifact.dynamic_smem,
               "correct": correct,
               "launcher_us": launch_overhead_us(launcher, (*arrays, *scalars), n=args.n)}
        if not artifact.scalar_params:
            kernel = Kernel.from_artifact(artifact)
            row["kernel_us"] = launch_overhead_us(kernel, inputs, n=args.n)
        results.append(row)
    a = torch.randn(1 << 16, device="cuda")
    c = torch.empty_like(a)
    torch_us = launch_overhead_us(lambda x, y: torch.add(x, y, out=c), (a, a), n=args.n)

    print(f"{'kernel':<14} {'correct':>8} {'CudaLauncher':>13} {'tilelab.Kernel':>15}")
    for row in results:
        kernel_us = f"{row['kernel_us']:.2f} us" if "kernel_us" in row else "-"
        print(f"{row['kernel']:<14} {str(row['correct']):>8} {row['launcher_us']:>10.2f} us "
              f"{kernel_us:>15}")
    print(f"{'torch.add(out=)':<23} {torch_us:>10.2f} us  (for scale)")
    if "tvm" in sys.modules:
        print("ERROR: tvm was imported", file=sys.stderr)
        ok = False
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "kernels": results, "torch_add_us": torch_us}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
