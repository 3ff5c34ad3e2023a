"""Compile and run in the same process, on the GPU machine — the way users work there.

The artifact tests (test_gpu_suite.py, test_runtime.py) load kernels built
elsewhere; these compile every suite kernel here, with TVM and nvcc on a machine
that has a GPU (where TVM would otherwise compile the CUDA source itself), and
compare with PyTorch on fresh random inputs whose shapes have tails. They also
drive `%%tilekernel` and every view on kernels compiled for the GPU. Without a
GPU they are skipped; `scripts/gpu_check.sh` runs them on one.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]


def _suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", ROOT / "bench" / "gpu_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SUITE = _suite()


def _close(out, expected, tolerance):
    error = (out.float() - expected.float()).abs().max().item()
    scale = 1 + expected.float().abs().max().item()
    return not math.isnan(error) and error <= tolerance * scale, error


@pytest.mark.parametrize("case", SUITE.CHECKS, ids=[c[0] for c in SUITE.CHECKS])
def test_suite_kernel_compiled_in_process_matches_pytorch(case):
    import torch

    name, kind, sizes, inputs, reference, tolerance = case[:6]
    kernel = SUITE.compile_kernel(kind, sizes, {})
    assert kernel.trace.target.startswith("cuda") and kernel.trace.code["cuda"]
    for seed in range(3):
        torch.manual_seed(seed)
        args = SUITE.make_inputs(inputs)
        out = kernel(*args)
        if out is None:  # a kernel that accumulates into its last argument
            out = args[-1]
        ok, error = _close(out, SUITE.references()[reference](*args), tolerance)
        assert ok, (name, seed, error)


@pytest.mark.parametrize("target", ["auto", "cuda", "cuda:sm_90a"])
def test_every_target_spelling_compiles_and_runs(target):
    import torch

    from examples.gemm import gemm_kernel

    if target == "cuda:sm_90a" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("an sm_90a cubin runs on Hopper only")
    a = torch.randn(200, 72, device="cuda", dtype=torch.float16)
    b = torch.randn(72, 136, device="cuda", dtype=torch.float16)
    if target == "auto":  # the eager style: the tensors decide
        out = gemm_kernel(a, b)
    else:
        out = gemm_kernel.compile(M=200, N=136, K=72, target=target)(a, b)
    assert out.is_cuda
    ok, error = _close(out, a @ b, 2e-2)
    assert ok, error


def test_transpose_through_two_shared_tiles():
    """Two shared tiles alive in one statement (read one, write the other transposed)
    must not share memory: a race the CPU backend never shows."""
    import torch

    from tests.kernels.transpose_shared import transpose_through_shared

    for seed in range(3):
        torch.manual_seed(seed)
        a = torch.randn(1000, 777, device="cuda")
        torch.testing.assert_close(transpose_through_shared(a), a.T.contiguous())


def test_copies_to_and_from_part_of_a_fragment():
    import torch

    from tests.kernels import fragment_regions as k

    for seed, shape in enumerate([(100, 77), (64, 64), (33, 129)]):
        torch.manual_seed(seed)
        a = torch.randn(*shape, device="cuda")
        torch.testing.assert_close(k.fragment_region_to_shared(a), k.expected_to_shared(a))
        torch.testing.assert_close(k.fragment_regions_between_fragments(a),
                                   k.expected_between_fragments(a))


def test_a_branch_on_a_read_only_tensor():
    import torch

    from tests.kernels import fragment_regions as k

    for seed in range(3):
        torch.manual_seed(seed)
        a = torch.randn(1000, device="cuda")
        flags = torch.randint(-1, 2, (32,), dtype=torch.int32, device="cuda")
        torch.testing.assert_close(k.reverse_flagged_tiles(a, flags),
                                   k.expected_reverse_flagged(a, flags))


# ---------------------------------------------------------------- the notebook on the GPU


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tilelab")
    shell.run_cell("import torch, tilelab\nimport tilelab.language as T\n"
                   "from examples.gemm import gemm_kernel")
    yield shell
    shell.run_line_magic("unload_ext", "tilelab")


GEMM_CELL = '''%%tilekernel --args "a, b" {flags}
@tilelab.jit
def small_gemm(A, B, block_m: int = 64, block_n: int = 64, block_k: int = 32):
    M, N, K = T.const("M"), T.const("N"), T.const("K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=128) as (bx, by):
        a_shared = T.alloc_shared((block_m, block_k), T.float16)
        b_shared = T.alloc_shared((block_k, block_n), T.float16)
        c_fragment = T.alloc_fragment((block_m, block_n), T.float32)
        T.clear(c_fragment)
        for k in T.Pipelined(T.ceildiv(K, block_k), num_stages=3):
            T.copy(A[by * block_m, k * block_k], a_shared)
            T.copy(B[k * block_k, bx * block_n], b_shared)
            T.gemm(a_shared, b_shared, c_fragment)
        T.copy(c_fragment, C[by * block_m, bx * block_n])
    return C
'''


def _bundles(shell, cell):
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        result = shell.run_cell(cell)
    assert result.error_in_exec is None and result.error_before_exec is None, captured.stdout
    shown = {}
    for output in captured.outputs:
        for mime, data in output.data.items():
            if mime.startswith("application/vnd.tilelab."):
                view = mime.removeprefix("application/vnd.tilelab.").removesuffix("+json")
                json.dumps(data)  # JSON-ready, as a notebook saves it
                shown.setdefault(view, []).append(data)
    return shown, captured


def test_every_view_on_a_kernel_compiled_for_the_gpu(shell):
    import torch

    shell.user_ns["a"] = torch.randn(1000, 520, device="cuda", dtype=torch.float16)
    shell.user_ns["b"] = torch.randn(520, 264, device="cuda", dtype=torch.float16)
    flags = ("--passes --diff --source --layout c_fragment --pipeline --dataflow "
             '--check "A @ B" --bench "A @ B"')
    shown, captured = _bundles(shell, GEMM_CELL.format(flags=flags))
    trace = shell.user_ns["small_gemm"].compile(shell.user_ns["a"], shell.user_ns["b"]).trace
    assert trace.target.startswith("cuda") and "__global__" in trace.code["cuda"]
    # --source: CUDA, PTX and the resource report of the cubin that runs
    languages = {d["language"]: d for d in shown["source"]}
    assert {"cuda", "ptx"} <= set(languages)
    hopper = torch.cuda.get_device_capability() == (9, 0)  # sm_90a: warpgroup MMA
    assert ("wgmma.mma_async" if hopper else "mma.sync") in languages["ptx"]["code"]
    resources = languages["cuda"]["resources"]
    assert resources["registers"] > 0 and resources.get("spill_stores_bytes", 0) == 0
    assert resources["dynamic_smem_bytes"] > 0
    # --layout, --pipeline, --dataflow drawn from the GPU's plans
    assert shown["layout"] and shown["pipeline"] and shown["dataflow"]
    assert trace.pipelines and trace.pipelines[0]["num_stages"] == 3
    # --check and --bench ran on the GPU, beside torch.matmul
    check = shown["check"][0]
    assert check["passed"], check
    bench = shown["bench"][0]
    assert bench["timing"] == "cuda-events"
    assert bench["device"] == torch.cuda.get_device_name()
    assert [r["name"] for r in bench["rows"]] == ["small_gemm", "A @ B"]
    assert all(r["median_ms"] > 0 for r in bench["rows"])


def test_measured_pipeline_replay_in_process():
    import torch

    import tilelab
    from examples.gemm import gemm_kernel
    from tilelab.instrument import measured_rows

    kernel = gemm_kernel.compile(
        M=1024, N=1024, K=1024, num_stages=3, target="cuda",
        pass_configs={tilelab.PassConfigKey.TL_INSTRUMENT_PIPELINE: 2})
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    c, timeline = kernel(a, b)
    torch.cuda.synchronize()
    ok, error = _close(c, a @ b, 2e-2)
    assert ok, error
    rows = measured_rows(timeline.cpu())
    iterations = math.ceil(1024 / 32)  # the course GEMM's block_k
    assert {r["iteration"] for r in rows} == set(range(iterations))
    assert all(0 <= r["start_ns"] <= r["end_ns"] for r in rows)
    view = tilelab.viz.pipeline_view(kernel.trace, measured=rows)
    assert view.payload()["measured"]
