"""The TVM-free CUDA runtime and the exported kernel file (`.tilelab`).

CPU tests check the file format, `tilelab.load` and that nothing here imports
TVM. GPU tests (marked `gpu`) run the kernels of bench/build_runtime_artifacts.py:
from the prebuilt files in bench/artifacts/runtime/ when present (the GPU
machine has no nvcc), else built with nvcc into a temporary folder.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import pytest

import tilelab
from tilelab.errors import TileLabArgumentError, TileLabError
from tilelab.runtime import artifact as art
from tilelab.runtime import cuda as rcuda

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREBUILT = os.path.join(ROOT, "bench", "artifacts", "runtime")
NAMES = ("vector_add", "smem_reverse", "scale_prefix")


def _builder():
    spec = importlib.util.spec_from_file_location(
        "build_runtime_artifacts", os.path.join(ROOT, "bench", "build_runtime_artifacts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILD = _builder()


def _nvcc():
    return BUILD.find_nvcc()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Freshly nvcc-built artifacts (skips without nvcc)."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    return BUILD.build(str(tmp_path_factory.mktemp("runtime-artifacts")), nvcc)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """Prebuilt artifacts from bench/artifacts/runtime/, else built with nvcc."""
    paths = {n: os.path.join(PREBUILT, f"{n}.tilelab") for n in NAMES}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no prebuilt artifacts in bench/artifacts/runtime and no nvcc")
    return BUILD.build(str(tmp_path_factory.mktemp("runtime-artifacts")), nvcc)


FAKE_PARAMS = [dict(name="A", shape=(8,), dtype="float32", output=False),
               dict(name="B", shape=(8,), dtype="float32", output=False),
               dict(name="C", shape=(8,), dtype="float32", output=True)]


def _save_fake(path, **overrides):
    kwargs = dict(name="vadd", kernel_name="vadd_kernel", cubin=b"\x7fELF not really a cubin",
                  grid=(1, 1, 1), block=(8, 1, 1), dynamic_smem=0, params=FAKE_PARAMS,
                  arch="sm_90a", trace_json=None, source="// source")
    kwargs.update(overrides)
    return art.save_artifact(path, **kwargs)


# ---------------------------------------------------------------- imports


def test_runtime_imports_no_tvm(tmp_path):
    path = _save_fake(tmp_path / "k.tilelab")
    code = f"""
import sys
import tilelab.runtime, tilelab.runtime.cuda, tilelab.runtime.artifact, tilelab.kernel
import tilelab
kernel = tilelab.load({str(path)!r})
assert kernel.target == "cuda" and kernel.get_kernel_source() == "// source"
import torch
try:
    kernel(torch.zeros(8), torch.zeros(8))
except tilelab.TileLabError as err:
    assert "must be a CUDA tensor" in str(err), err
else:
    raise AssertionError("a CPU tensor was accepted")
assert "tvm" not in sys.modules, "tvm imported"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_missing_bindings_say_what_to_install(monkeypatch):
    monkeypatch.setattr(rcuda, "_DRIVER", None)
    monkeypatch.setitem(sys.modules, "cuda", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(rcuda.CudaUnavailableError) as info:
        rcuda.driver()
    assert "pip install cuda-bindings" in str(info.value)
    assert isinstance(info.value, TileLabError)


# ---------------------------------------------------------------- the launcher without a GPU


def test_launcher_validates_its_configuration():
    launcher = rcuda.CudaLauncher(b"x", "k", 4, (128, 2), 0, ["float32", "float16"], ["int32"])
    assert launcher.grid == (4, 1, 1) and launcher.block == (128, 2, 1)
    assert "k(float32*, float16*, int32)" in repr(launcher)
    with pytest.raises(TileLabArgumentError, match="grid"):
        rcuda.CudaLauncher(b"x", "k", (0, 1, 1), 1)
    with pytest.raises(TileLabArgumentError, match="block"):
        rcuda.CudaLauncher(b"x", "k", 1, (1, 1, 1, 1))
    with pytest.raises(TileLabArgumentError, match="cubin"):
        rcuda.CudaLauncher(b"", "k", 1, 1)
    with pytest.raises(TileLabArgumentError, match="scalar"):
        rcuda.CudaLauncher(b"x", "k", 1, 1, scalar_params=["complex64"])


def test_launch_without_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    launcher = rcuda.CudaLauncher(b"x", "k", 1, 1, 0, ["float32"])
    with pytest.raises(rcuda.CudaUnavailableError):
        launcher(torch.zeros(1))


# ---------------------------------------------------------------- the file format


def test_round_trip(tmp_path):
    path = _save_fake(tmp_path / "sub" / "k.tilelab", trace_json='{"kernel": "vadd"}')
    loaded = art.load_artifact(path)
    assert loaded == art.Artifact(
        name="vadd", kernel_name="vadd_kernel", cubin=b"\x7fELF not really a cubin",
        grid=(1, 1, 1), block=(8, 1, 1), dynamic_smem=0,
        params=[dict(p, shape=tuple(p["shape"])) for p in FAKE_PARAMS], arch="sm_90a",
        trace_json='{"kernel": "vadd"}', source="// source", scalar_params=[],
        version=art.FORMAT_VERSION)
    assert sorted(zipfile.ZipFile(path).namelist()) == [
        "kernel.cu", "kernel.cubin", "meta.json", "trace.json"]
    # optional parts stay absent
    bare = art.load_artifact(_save_fake(tmp_path / "bare.tilelab", source=None))
    assert bare.source is None and bare.trace_json is None


def test_round_trip_real_cubin(built, tmp_path):
    spec = BUILD.KERNELS["vector_add"]
    cubin = BUILD.compile_cubin(spec["source"], _nvcc())
    assert cubin[:4] == b"\x7fELF"
    path = art.save_artifact(tmp_path / "v.tilelab", name="vector_add",
                             kernel_name=spec["kernel_name"], cubin=cubin, grid=spec["grid"],
                             block=spec["block"], dynamic_smem=0, params=spec["params"],
                             arch="sm_90a", trace_json=None, source=spec["source"])
    loaded = art.load_artifact(path)
    assert loaded.cubin == cubin
    assert (loaded.grid, loaded.block, loaded.kernel_name) == \
        (spec["grid"], spec["block"], "vector_add")
    assert [p["name"] for p in loaded.params] == ["A", "B", "C"]
    assert art.load_artifact(built["vector_add"]).cubin[:4] == b"\x7fELF"


def test_saving_is_atomic_and_deterministic(tmp_path):
    path = tmp_path / "k.tilelab"
    _save_fake(path)
    first = path.read_bytes()
    _save_fake(path)
    assert path.read_bytes() == first
    with pytest.raises(TileLabError):  # a failed save keeps the old file
        _save_fake(path, params=[dict(name="A", shape=("x",), dtype="float32")])
    assert path.read_bytes() == first
    assert os.listdir(tmp_path) == ["k.tilelab"]


def test_missing_or_corrupt_files(tmp_path):
    with pytest.raises(TileLabError, match="no kernel file"):
        art.load_artifact(tmp_path / "missing.tilelab")
    with pytest.raises(TileLabError, match="directory"):
        art.load_artifact(tmp_path)
    junk = tmp_path / "junk.tilelab"
    junk.write_bytes(b"this is not a zip file")
    with pytest.raises(TileLabError, match="damaged or not a tilelab kernel file"):
        art.load_artifact(junk)
    good = _save_fake(tmp_path / "good.tilelab")
    data = open(good, "rb").read()
    truncated = tmp_path / "truncated.tilelab"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(TileLabError):
        art.load_artifact(truncated)
    # damage the stored cubin: the zip's CRC check catches it
    with zipfile.ZipFile(tmp_path / "stored.tilelab", "w") as zf:
        zf.writestr("meta.json", zipfile.ZipFile(good).read("meta.json"))
        zf.writestr("kernel.cubin", b"A" * 64)
    raw = bytearray((tmp_path / "stored.tilelab").read_bytes())
    raw[raw.index(b"A" * 64) + 10] ^= 0xFF
    (tmp_path / "stored.tilelab").write_bytes(bytes(raw))
    with pytest.raises(TileLabError, match="damaged"):
        art.load_artifact(tmp_path / "stored.tilelab")


def _rewrite_meta(src, dst, **changes):
    with zipfile.ZipFile(src) as zf:
        meta = json.loads(zf.read("meta.json"))
        cubin = zf.read("kernel.cubin")
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    with zipfile.ZipFile(dst, "w") as zf:
        zf.writestr("meta.json", json.dumps(meta))
        zf.writestr("kernel.cubin", cubin)
    return dst


def test_wrong_version_or_format(tmp_path):
    good = _save_fake(tmp_path / "good.tilelab")
    newer = _rewrite_meta(good, tmp_path / "newer.tilelab", version=art.FORMAT_VERSION + 1)
    with pytest.raises(TileLabError, match="format version 2; this tilelab reads version 1"):
        art.load_artifact(newer)
    with pytest.raises(TileLabError, match="version"):
        art.load_artifact(_rewrite_meta(good, tmp_path / "nov.tilelab", version=None))
    with pytest.raises(TileLabError, match="not a tilelab kernel file"):
        art.load_artifact(_rewrite_meta(good, tmp_path / "fmt.tilelab", format="other"))
    with pytest.raises(TileLabError, match="grid"):
        art.load_artifact(_rewrite_meta(good, tmp_path / "grid.tilelab", grid=None))
    with zipfile.ZipFile(tmp_path / "nometa.tilelab", "w") as zf:
        zf.writestr("kernel.cubin", b"x")
    with pytest.raises(TileLabError, match="no meta.json"):
        art.load_artifact(tmp_path / "nometa.tilelab")


def test_load_gives_a_kernel(tmp_path):
    trace = tilelab.Trace(kernel="vadd", target="cuda", code={"cuda": "// traced"})
    kernel = tilelab.load(_save_fake(tmp_path / "k.tilelab", trace_json=trace.to_json()))
    assert isinstance(kernel, tilelab.Kernel)
    assert kernel.target == "cuda" and kernel.program is None
    assert [p.name for p in kernel.inputs] == ["A", "B"]
    assert [p.name for p in kernel.outputs] == ["C"]
    assert kernel.params[0].shape == (8,) and kernel.params[0].location is None
    assert repr(kernel) == "<tilelab.Kernel vadd(A: float32[8], B: float32[8]) -> (float32[8]) on cuda>"
    assert kernel.get_kernel_source() == "// traced"
    assert isinstance(kernel._runner, rcuda.CudaLauncher)
    # without a trace, the source still shows
    plain = tilelab.load(_save_fake(tmp_path / "p.tilelab"))
    assert plain.get_kernel_source() == "// source"
    assert plain.trace.kernel == "vadd"


def test_load_rejects_cpu_tensors(tmp_path):
    import torch

    kernel = tilelab.load(_save_fake(tmp_path / "k.tilelab"))
    with pytest.raises(TileLabArgumentError, match="A must be a CUDA tensor") as info:
        kernel(torch.zeros(8), torch.zeros(8))
    assert ".cuda()" in str(info.value)
    with pytest.raises(TileLabArgumentError, match="takes 2 tensor"):
        kernel(torch.zeros(8))


def test_scalar_kernels_load_as_launchers(tmp_path):
    path = _save_fake(tmp_path / "s.tilelab", params=FAKE_PARAMS[:2],
                      scalar_params=["int32", "float32"])
    loaded = art.load_artifact(path)
    assert loaded.scalar_params == ["int32", "float32"]
    assert loaded.launcher().scalar_params == ["int32", "float32"]
    with pytest.raises(TileLabError, match="scalar parameters"):
        tilelab.load(path)


def test_prebuilt_artifacts_match_the_builder():
    """bench/artifacts/runtime/ holds the kernels that bench/build_runtime_artifacts.py describes."""
    if not all(os.path.exists(os.path.join(PREBUILT, f"{n}.tilelab")) for n in NAMES):
        pytest.skip("no prebuilt artifacts")
    for name in NAMES:
        loaded = art.load_artifact(os.path.join(PREBUILT, f"{name}.tilelab"))
        spec = BUILD.KERNELS[name]
        assert loaded.kernel_name == spec["kernel_name"]
        assert loaded.grid == spec["grid"] and loaded.dynamic_smem == spec["dynamic_smem"]
        assert loaded.source == spec["source"].lstrip()
        assert loaded.cubin[:4] == b"\x7fELF"


# ---------------------------------------------------------------- on the GPU


@pytest.mark.gpu
def test_gpu_vector_add_with_tail(artifacts):
    import torch

    kernel = tilelab.load(artifacts["vector_add"])
    n = BUILD.VECTOR_N
    assert n % 256 != 0
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    c = kernel(a, b)
    assert c.device == a.device and c.shape == (n,)
    torch.testing.assert_close(c, a + b)
    torch.testing.assert_close(c[-100:], (a + b)[-100:])  # the tail block


@pytest.mark.gpu
def test_gpu_runs_on_the_current_stream_and_other_threads(artifacts):
    import torch

    kernel = tilelab.load(artifacts["vector_add"])
    a = torch.randn(BUILD.VECTOR_N, device="cuda")
    b = torch.randn(BUILD.VECTOR_N, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        c = kernel(a, b)
    stream.synchronize()
    torch.testing.assert_close(c, a + b)
    results = {}

    def worker():
        results["c"] = kernel(a, b)
        torch.cuda.synchronize()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    torch.testing.assert_close(results["c"], a + b)


@pytest.mark.gpu
def test_gpu_dynamic_shared_memory_over_48k(artifacts):
    import torch

    loaded = art.load_artifact(artifacts["smem_reverse"])
    assert loaded.dynamic_smem > 48 * 1024
    kernel = tilelab.Kernel.from_artifact(loaded)
    x = torch.randn(BUILD.CHUNKS * BUILD.CHUNK, device="cuda")
    y = kernel(x)
    expected = x.view(BUILD.CHUNKS, BUILD.CHUNK).flip(1).reshape(-1)
    torch.testing.assert_close(y, expected)


@pytest.mark.gpu
def test_gpu_scalar_parameters(artifacts):
    import torch

    launcher = art.load_artifact(artifacts["scale_prefix"]).launcher()
    x = torch.randn(BUILD.PREFIX_SIZE, device="cuda")
    y = torch.zeros_like(x)
    launcher(x, y, 1000, 2.5)
    torch.cuda.synchronize()
    torch.testing.assert_close(y[:1000], 2.5 * x[:1000])
    assert torch.count_nonzero(y[1000:]) == 0
    with pytest.raises(TileLabArgumentError, match="int32"):
        launcher(x, y, 1.5, 2.5)
    with pytest.raises(TileLabArgumentError, match="takes 2 tensor"):
        launcher(x, y)


@pytest.mark.gpu
def test_gpu_launch_overhead(artifacts, capsys):
    import torch

    kernel = tilelab.load(artifacts["vector_add"])
    n = BUILD.VECTOR_N
    a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
    launcher = kernel._runner
    raw = rcuda.launch_overhead_us(launcher, (a, b, c), n=2000)
    wrapped = rcuda.launch_overhead_us(kernel, (a, b), n=2000)
    torch_add = rcuda.launch_overhead_us(lambda x, y: torch.add(x, y, out=c), (a, b), n=2000)
    with capsys.disabled():
        print(f"\nlaunch overhead: CudaLauncher {raw:.2f} us, tilelab.Kernel {wrapped:.2f} us, "
              f"torch.add(out=) {torch_add:.2f} us")
    assert raw < 20.0


@pytest.mark.gpu
def test_gpu_argument_errors(artifacts):
    import torch

    kernel = tilelab.load(artifacts["vector_add"])
    n = BUILD.VECTOR_N
    a = torch.randn(n, device="cuda")
    with pytest.raises(TileLabArgumentError, match="must be a CUDA tensor"):
        kernel(a, torch.randn(n))
    with pytest.raises(TileLabArgumentError, match="must be float32, got float16"):
        kernel(a, a.half())
    with pytest.raises(TileLabArgumentError, match="must have shape"):
        kernel(a, a[:-1])
    with pytest.raises(TileLabArgumentError, match="contiguous"):
        kernel(a, torch.randn(2 * n, device="cuda")[::2])
    with pytest.raises(TileLabArgumentError, match="takes 3 tensor"):
        kernel._runner(a, a)
    if torch.cuda.device_count() > 1:
        other = torch.randn(n, device="cuda:1")
        with pytest.raises(TileLabArgumentError, match="current device"):
            kernel(other, other)


@pytest.mark.gpu
def test_gpu_driver_errors_are_readable(artifacts):
    import torch

    loaded = art.load_artifact(artifacts["vector_add"])
    launcher = rcuda.CudaLauncher(loaded.cubin, "no_such_kernel", 1, 1, 0, ["float32"])
    with pytest.raises(rcuda.CudaError) as info:
        launcher(torch.zeros(1, device="cuda"))
    assert info.value.result == "CUDA_ERROR_NOT_FOUND"
    assert "no_such_kernel" in str(info.value)
    too_much = rcuda.CudaLauncher(loaded.cubin, "vector_add", 1, 1, 10 << 20, ["float32"] * 3)
    x = torch.zeros(1, device="cuda")
    with pytest.raises(rcuda.CudaError, match="shared memory"):
        too_much(x, x, x)


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/bin/nvcc"),
                    reason="nvcc not found")
def test_builder_script_runs(tmp_path):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "build_runtime_artifacts.py"),
                          "--out", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert sorted(os.listdir(tmp_path)) == sorted(f"{n}.tilelab" for n in NAMES)
