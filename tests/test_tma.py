"""TMA copies in pipelined GEMM loops on sm_90a (passes/pipeline_loops.py, ops/copy.py).

Where a pipelined loop only multiplies with warpgroup MMA (the default on sm_90a;
`tl.disable_tma_lower` turns it off), thread 0 asks the Tensor Memory
Accelerator for each operand tile (one box per wgmma panel) and the threads wait on an
mbarrier per slot. The descriptors are encoded by the launcher (runtime/cuda.py) from the
spec the compiler records in the launch configuration.
"""

from __future__ import annotations

import os

import pytest
import torch

import tilelab
import tilelab.language as T
from tests.test_wgmma import CONFIGS, _inputs, _reference, matmul
from tilelab.backends.cuda.nvcc import find_nvcc

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
OFF = {"tl.disable_tma_lower": True}
ONE_ROLE = {"tl.disable_warp_specialized": True}  # TMA, every thread waits and multiplies


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _compile(cfg, m=1000, n=776, k=520, pass_configs=None):
    a, b = _inputs(cfg, m, n, k)
    return matmul.compile(a.to("meta"), b.to("meta"), target="cuda:sm_90a",
                          pass_configs=pass_configs, **cfg)


@needs_nvcc
@pytest.mark.parametrize("name", ["course", "trans_a", "trans_b", "bf16", "two_groups_cols"])
def test_pipelined_wgmma_loops_copy_with_tma(name):
    kernel = _compile(CONFIGS[name])
    source = kernel.get_kernel_source()
    assert "tl::tma_load" in source and "tl::mbar_wait" in source
    maps = kernel.launch["tensor_maps"]
    assert sorted(m["tensor"] for m in maps) == [0, 1]
    for spec in maps:  # a box is one swizzle atom wide and the tile's rows tall
        assert spec["box"][0] * 2 == spec["swizzle"] and spec["bytes"] > 0
    plan = kernel.trace.pipelines[0]
    assert plan["copies"].startswith("TMA") and "mbarrier" in plan["waits"]


@needs_nvcc
def test_loops_that_wait_for_their_mmas_copy_with_tma_too():
    """Two stages (each T.gemm waited for at once), and FlashAttention's key loop, whose
    softmax sits between its two T.gemms: K and V tiles come by TMA, 4-D tensors sliced
    to one (batch, head)."""
    from examples.flash_attention import flash_attention_kernel as fa

    two = _compile({"stages": 2}, 256, 256, 128)
    assert "tl::tma_load" in two.get_kernel_source()
    assert two.trace.pipelines[0]["ahead"] == 1
    attention = tilelab.compile(fa.fn(2, 4, 1000, 128, causal=True), out_idx=fa.out_idx,
                                target="cuda:sm_90a")
    maps = attention.launch["tensor_maps"]
    assert sorted(m["tensor"] for m in maps) == [1, 2]  # K and V; Q is copied once
    assert all(m["shape"] == [2, 4, 1000, 128] and m["box"] == [64, 64, 1, 1] for m in maps)
    assert attention.trace.pipelines[0]["copies"].startswith("TMA")


@needs_nvcc
def test_tma_boxes_follow_the_wgmma_panels():
    """A 128x64 A tile is one 128-byte panel: one box; a 64x128 B tile is two panels."""
    kernel = _compile({"block_k": 64, "stages": 4})  # 128 KB: split between roles
    by_tensor = {m["tensor"]: m for m in kernel.launch["tensor_maps"]}
    assert by_tensor[0]["box"] == [64, 128] and by_tensor[0]["panels"] == 1
    assert by_tensor[1]["box"] == [64, 64] and by_tensor[1]["panels"] == 2
    assert by_tensor[0]["shape"] == [1000, 520] and by_tensor[1]["shape"] == [520, 776]
    # a producer warp issues every copy from one loop; without it, the prologue and the loop
    assert kernel.get_kernel_source().count("tl::tma_load(") == 1 + 2
    shared = _compile({"block_k": 64, "stages": 4}, pass_configs=ONE_ROLE)
    assert shared.get_kernel_source().count("tl::tma_load(") == (2 + 1) * (1 + 2)


@needs_nvcc
@pytest.mark.parametrize("why, cfg, sizes, configs", [
    ("tl.disable_tma_lower", {}, (1000, 776, 520), OFF),
    ("are 200 bytes apart: TMA strides are multiples of 16", {}, (256, 256, 100), None),
    ("not a warpgroup MMA operand", {"block_m": 64, "threads": 64}, (256, 256, 128), None),
])
def test_other_loops_keep_cp_async(why, cfg, sizes, configs):
    """...and the pipeline plan (the --pipeline view) says why."""
    kernel = _compile(cfg, *sizes, pass_configs=configs)
    source = kernel.get_kernel_source()
    assert "tl::tma_load" not in source and "tl::cp_async<" in source
    assert "tensor_maps" not in kernel.launch
    plan = kernel.trace.pipelines[0]
    assert plan["copies"].startswith("cp.async") and why in plan["copies"]


@needs_nvcc
def test_a_copy_may_refuse_tma():
    """TileLang's `T.copy(..., disable_tma=True)` keeps its loop on cp.async."""

    @tilelab.jit
    def no_tma(A, B):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), T.float16)
        B: T.Tensor((K, N), T.float16)
        C = T.empty((M, N), T.float16)
        with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
            a_tile = T.alloc_shared((128, 32), T.float16)
            b_tile = T.alloc_shared((32, 128), T.float16)
            acc = T.alloc_fragment((128, 128), T.float32)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, 32), num_stages=3):
                T.copy(A[by * 128, ko * 32], a_tile, disable_tma=True)
                T.copy(B[ko * 32, bx * 128], b_tile)
                T.gemm(a_tile, b_tile, acc)
            T.copy(acc, C[by * 128, bx * 128])
        return C

    kernel = no_tma.compile(_meta(256, 256), _meta(256, 256), target="cuda:sm_90a")
    assert "tl::tma_load" not in kernel.get_kernel_source()


@needs_nvcc
def test_export_keeps_the_descriptor_specs(tmp_path):
    from tilelab.runtime.artifact import load_artifact

    kernel = _compile({})
    path = tmp_path / "gemm.tilelab"
    kernel.export(path)
    artifact = load_artifact(path)
    assert [(m["param"], m["tensor"], m["box"], m["swizzle"]) for m in artifact.tensor_maps] == \
        [(m["param"], m["tensor"], m["box"], m["swizzle"]) for m in kernel.launch["tensor_maps"]]


def test_damaged_descriptor_specs_are_refused(tmp_path):
    from tilelab.runtime.artifact import TileLabArtifactError, _tensor_maps

    good = {"param": 0, "tensor": 0, "dtype": "float16", "shape": [64, 64], "box": [64, 64],
            "swizzle": 128}
    assert _tensor_maps([good]) == [good]
    for bad in ([dict(good, shape=[64, -1])], [dict(good, box=[64])], [{"param": 0}],
                "not a list", [good] * 17, [dict(good, shape=[1] * 6, box=[1] * 6)]):
        with pytest.raises(TileLabArtifactError):
            _tensor_maps(bad)


def test_a_misaligned_tensor_says_how_to_turn_tma_off():
    """The launcher's check runs before any driver call: its error names the key that keeps
    the loop on cp.async (tl.disable_tma_lower), to be given, not left out."""
    from tilelab.runtime.cuda import _TensorMap

    shifted = torch.empty(257, dtype=torch.float16)[1:]  # 2 bytes past 16-byte alignment
    with pytest.raises(tilelab.TileLabError, match="16 bytes") as info:
        _TensorMap({"param": 0, "tensor": 0}).point_at(shifted, "matmul_kernel")
    assert "compile with pass_configs={'tl.disable_tma_lower': True}" in str(info.value)


# ---------------------------------------------------------------- on the H200


def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")


@pytest.mark.gpu
@pytest.mark.parametrize("roles", [{}, ONE_ROLE])
@pytest.mark.parametrize("sizes", [(1000, 776, 520), (7, 24, 8), (130, 264, 1000),
                                   (4096, 4096, 64)])
@pytest.mark.parametrize("name", ["course", "trans_b", "bf16", "two_groups_cols", "two_stages"])
def test_tma_gemm_results_on_the_gpu(name, sizes, roles):
    """Edge tiles (zero-filled by TMA), boxes taller or wider than the tensor, both dtypes;
    with a producer warp (the default) and without."""
    _hopper()
    cfg = {"stages": 2} if name == "two_stages" else CONFIGS[name]
    for seed in range(2):
        torch.manual_seed(seed)
        a, b = _inputs(cfg, *sizes, device="cuda")
        kernel = matmul.compile(a, b, target="cuda:sm_90a", pass_configs=roles, **cfg)
        assert "tensor_maps" in kernel.launch
        out = kernel(a, b)
        torch.testing.assert_close(out.float(), _reference(cfg, a, b), rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("roles", [{}, ONE_ROLE])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq, dim, options", [(1000, 128, {}), (333, 64, {}),
                                               (777, 128, {"block_m": 128, "threads": 256})])
def test_attention_with_tma_on_the_gpu(causal, seq, dim, options, roles):
    """K and V tiles by TMA in a loop that waits for its MMAs (softmax in between); the
    last key tile runs past the sequence and TMA zero-fills it."""
    import torch.nn.functional as F

    from examples.flash_attention import flash_attention_kernel as fa

    _hopper()
    torch.manual_seed(seq + causal)
    q, k, v = (torch.randn(2, 3, seq, dim, dtype=torch.float16, device="cuda") for _ in range(3))
    kernel = tilelab.compile(fa.fn(2, 3, seq, dim, causal=causal, **options),
                             out_idx=fa.out_idx, pass_configs={**fa.pass_configs, **roles})
    assert "tensor_maps" in kernel.launch
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    torch.testing.assert_close(kernel(q, k, v).float(), expected, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_new_tensors_get_new_descriptors_and_exports_run(tmp_path):
    """The launcher re-encodes a descriptor when its tensor moves; an exported kernel
    (tilelab.load, no TVM) encodes its own."""
    _hopper()
    a, b = _inputs({}, 512, 512, 256, device="cuda")
    kernel = matmul.compile(a, b, target="cuda:sm_90a")
    for _ in range(3):
        a, b = _inputs({}, 512, 512, 256, device="cuda")
        torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float(), rtol=2e-2,
                                   atol=5e-2)
    path = tmp_path / "gemm.tilelab"
    kernel.export(path)
    loaded = tilelab.load(path)
    torch.testing.assert_close(loaded(a, b).float(), a.float() @ b.float(), rtol=2e-2,
                               atol=5e-2)


@pytest.mark.gpu
def test_a_misaligned_tensor_is_a_clear_error():
    _hopper()
    a, b = _inputs({}, 256, 256, 128, device="cuda")
    kernel = matmul.compile(a, b, target="cuda:sm_90a")
    shifted = torch.empty(256 * 128 + 1, dtype=torch.float16, device="cuda")[1:].view(256, 128)
    shifted.copy_(a)
    with pytest.raises(tilelab.TileLabError, match="16 bytes"):
        kernel(shifted, b)
    torch.testing.assert_close(kernel(a, b).float(), a.float() @ b.float(), rtol=2e-2,
                               atol=5e-2)


# ---------------------------------------------------------------- a loop that starts later


@tilelab.jit
def partial_k_matmul(A, B, first: int = 2, stages: int = 3, block_k: int = 32):
    """C = A[:, first*bk:] @ B[first*bk:, :], by a pipelined loop from `first` (as causal
    attention's key loops start at a block that depends on the query block)."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(T.ceildiv(N, 128), T.ceildiv(M, 128), threads=128) as (bx, by):
        a_tile = T.alloc_shared((128, block_k), T.float16)
        b_tile = T.alloc_shared((block_k, 128), T.float16)
        acc = T.alloc_fragment((128, 128), T.float32)
        T.clear(acc)
        for ko in T.Pipelined(first + by % 2, T.ceildiv(K, block_k), num_stages=stages):
            T.copy(A[by * 128, ko * block_k], a_tile)
            T.copy(B[ko * block_k, bx * 128], b_tile)
            T.gemm(a_tile, b_tile, acc)
        T.copy(acc, C[by * 128, bx * 128])
    return C


def _partial_reference(a, b, first, block_k=32):
    out = torch.empty(a.shape[0], b.shape[1])
    for row in range(0, a.shape[0], 128):
        start = (first + (row // 128) % 2) * block_k
        out[row:row + 128] = a[row:row + 128, start:].float() @ b[start:].float()
    return out


def test_a_loop_from_a_later_start_on_the_cpu():
    torch.manual_seed(0)
    a, b = torch.randn(300, 200).half(), torch.randn(200, 136).half()
    torch.testing.assert_close(partial_k_matmul(a, b).float(), _partial_reference(a, b, 2),
                               rtol=2e-2, atol=5e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("configs", [{}, OFF])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_a_loop_from_a_later_start_on_the_gpu(stages, configs):
    """The prologue loads the loop's first iterations, not iterations 0, 1, ...: the
    H200 found TileLang's varlen attention backward wrong (its key loop starts late)."""
    _hopper()
    torch.manual_seed(stages)
    a, b = torch.randn(300, 200).half().cuda(), torch.randn(200, 136).half().cuda()
    kernel = partial_k_matmul.compile(a, b, stages=stages, target="cuda:sm_90a",
                                      pass_configs=configs)
    torch.testing.assert_close(kernel(a, b).float().cpu(), _partial_reference(a.cpu(), b.cpu(), 2),
                               rtol=2e-2, atol=5e-2)


@needs_nvcc
def test_a_loop_from_a_later_start_compiles_for_cuda():
    a, b = _meta(300, 200), _meta(200, 136)
    for configs in ({}, OFF):
        kernel = partial_k_matmul.compile(a, b, target="cuda:sm_90a", pass_configs=configs)
        # the loop counts iterations from 0; its trip count depends on the block
        assert "for (int ko = 0; ko < (5 - (((int)blockIdx.y) & 1)); ++ko)" in \
            kernel.get_kernel_source()


# ---------------------------------------------------------------- the views of a TMA build


@needs_nvcc
@pytest.mark.parametrize("which", ["gemm", "attention"])
def test_every_view_draws_a_tma_build(which):
    """The course's views on the kernels a Hopper GPU builds (the GPU check found the bank
    view dividing by the zero vector width of a TMA copy): every shared tile and fragment,
    as text, HTML and the extension's payload."""
    from examples.flash_attention import flash_attention_kernel as fa
    from examples.gemm import gemm_kernel
    from tilelab.viz import bank_conflict_view, dataflow_view, layout_view, pipeline_view

    if which == "gemm":
        kernel = gemm_kernel.compile(_meta(4096, 4096), _meta(4096, 4096), target="cuda:sm_90a")
    else:
        kernel = tilelab.compile(fa.fn(2, 4, 1000, 128), out_idx=fa.out_idx,
                                 target="cuda:sm_90a", pass_configs=fa.pass_configs)
    trace = kernel.trace
    assert "tensor_maps" in kernel.launch
    buffers = trace.program["buffers"]
    shared = [b["name"] for b in buffers if b["scope"].startswith("shared")]
    fragments = [b["name"] for b in buffers if b["scope"] == "local.fragment"]
    views = [pipeline_view(trace), dataflow_view(trace)]
    views += [layout_view(trace, name) for name in shared + fragments]
    views += [bank_conflict_view(trace, name) for name in shared]
    for view in views:
        assert view.text() and view.html() and view.data
    by_tma = bank_conflict_view(trace, "a_shared" if which == "gemm" else "k_shared")
    assert not by_tma.accesses and "TMA copies" in by_tma.text()
    replay = pipeline_view(trace)  # the replay names the TMA copies and mbarrier waits
    assert "copies: TMA" in replay.text() and "waits: mbarrier" in replay.text()
    labels = [row["label"] for row in replay.data["timeline"]]
    assert any(label.startswith("TMA copy(") for label in labels)
    assert any("(mbarrier of slot 1, phase 0)" in label for label in labels)


@needs_nvcc
def test_sass_is_disassembled_when_a_view_asks_for_it(tmp_path, monkeypatch):
    """A compile leaves SASS out (a cuobjdump run is most of a second of a cold compile on a
    GPU host); the source views of a Kernel disassemble its cubin the first time, once."""
    from tilelab.notebook.views import source_views

    runs = tmp_path / "runs"
    tool = tmp_path / "cuobjdump"  # stands in for CUDA's, which this machine may lack
    tool.write_text(f'#!/bin/sh\necho run >> "{runs}"\necho "SASS of $(wc -c < "$2") bytes"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    kernel = _compile({}, 1000, 776, 264)
    assert "sass" not in kernel.trace.code and not runs.exists()
    views = source_views(kernel)
    assert [view.language for view in views] == ["cuda", "ptx", "sass"]
    assert views[2].payload()["code"].strip() == f"SASS of {len(kernel.cubin)} bytes"
    source_views(kernel)
    assert runs.read_text().split() == ["run"]


@needs_nvcc
def test_sass_from_nvidias_pip_disassembler(tmp_path, monkeypatch):
    """Without a CUDA toolkit on PATH, the source view's SASS comes from nvdisasm in NVIDIA's
    pip wheel (nvidia-cuda-nvdisasm, a dev dependency)."""
    from tilelab.backends.cuda import nvcc

    if not nvcc._wheel_tools("nvdisasm"):
        pytest.skip("nvidia-cuda-nvdisasm is not installed")
    kernel = _compile({})
    monkeypatch.setenv("PATH", str(tmp_path))  # no cuobjdump, no nvdisasm there
    assert "HGMMA" in nvcc.disassemble(kernel.cubin)


@needs_nvcc
def test_the_source_view_says_what_each_tile_op_became_and_why():
    """`--source` beside the CUDA code: T.gemm -> wgmma, T.copy -> TMA (or cp.async, with the
    reason its loop could not use TMA), each once although the prologue issues copies too;
    the store of the sums through a shared tile (or from registers), with its widths."""
    from tilelab.notebook.views import source_views

    ops = source_views(_compile({}))[0].ops
    assert [row["op"] for row in ops] == [
        "T.gemm(a_tile, b_tile -> acc)", "T.copy(A -> a_tile)", "T.copy(B -> b_tile)",
        "T.copy(acc -> acc_staged)", "T.copy(acc_staged -> C)"]
    assert ops[0]["instruction"] == "wgmma.mma_async" and "in flight" in ops[0]["why"]
    assert all(row["instruction"].startswith("TMA") and "mbarrier" in row["why"]
               for row in ops[1:3])
    assert [row["instruction"] for row in ops[3:]] == ["stmatrix.x4 16 B per lane",
                                                       "ld.shared 16 B per lane"]
    assert "8x8 matrices" in ops[3]["why"]
    (store,) = source_views(_compile({}, pass_configs={"tl.disable_stage_stores": True}))[0].ops[3:]
    assert store["instruction"] == "st.global 4 B per lane" and "shared tile" in store["why"]
    narrow = source_views(_compile({}, 256, 256, 100))
    assert "TMA strides are multiples of 16" in narrow[0].ops[1]["why"]
    assert "TMA strides" in narrow[0].text() and "TMA strides" in narrow[0].html()
    assert all(not view.ops for view in narrow[1:])  # PTX and SASS: the code only


@needs_nvcc
def test_the_layout_view_draws_warpgroups():
    """Two warpgroups (256 threads) on a 128x256 accumulator: colored by warpgroup, with red
    lines where one warpgroup's rows end."""
    from tilelab.viz import layout_view

    kernel = _compile(CONFIGS["two_groups_rows"])
    view = layout_view(kernel.trace, "acc", color_by="warpgroup")
    svg = view.html()
    assert "warpgroups:" in svg and "#d62728" in svg and "warpgroup boundaries" in svg
    plain = layout_view(_compile({}).trace, "acc")  # one warpgroup: no red lines
    assert "#d62728" not in plain.html()


@tilelab.jit
def persistent_gemm(A, B, waves_of: int = 3, bm: int = 128, bn: int = 128, bk: int = 64,
                    stages: int = 3, threads: int = 128):
    """`waves_of` blocks walk over the output tiles (T.Persistent); each tile's K loop is a
    TMA pipeline whose mbarriers live inside the loop over tiles."""
    M, N, K = T.const("M, N, K")
    A: T.Tensor((M, K), T.float16)
    B: T.Tensor((K, N), T.float16)
    C = T.empty((M, N), T.float16)
    with T.Kernel(waves_of, threads=threads) as block_id:
        a = T.alloc_shared((bm, bk), T.float16)
        b = T.alloc_shared((bk, bn), T.float16)
        acc = T.alloc_fragment((bm, bn), T.float32)
        out = T.alloc_shared((bm, bn), T.float16)
        for bx, by in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], waves_of, block_id):
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[bx * bm, k * bk], a)
                T.copy(B[k * bk, by * bn], b)
                T.gemm(a, b, acc)
            T.copy(acc, out)
            T.copy(out, C[bx * bm, by * bn])
    return C


def test_a_persistent_tma_gemm_on_the_cpu():
    torch.manual_seed(3)
    a, b = torch.randn(300, 256).half(), torch.randn(256, 200).half()
    torch.testing.assert_close(persistent_gemm(a, b, target="cpu").float(),
                               a.float() @ b.float(), rtol=2e-2, atol=5e-2)


@needs_nvcc
@pytest.mark.parametrize("threads", [128, 256])
def test_a_persistent_tma_gemm_compiles_for_cuda(threads):
    """Its mbarriers are allocated inside the `if` of each tile: keeping shared tiles alive
    until a barrier must not reach past their scope (TVM refused the kernel). After the
    K loop every warpgroup waits for its last MMAs *before* the barrier: past it, the
    merge of shared memory may put the epilogue's tile over the A and B tiles those MMAs
    still read (TileLang's examples/gemm/example_gemm_persistent.py, 128x256 tiles on two
    warpgroups: wrong results on the H200 with the wait after the barrier)."""
    kernel = persistent_gemm.compile(torch.empty(512, 256, dtype=torch.float16, device="meta"),
                                     torch.empty(256, 512, dtype=torch.float16, device="meta"),
                                     target="cuda:sm_90a", bn=256 if threads == 256 else 128,
                                     threads=threads,
                                     pass_configs={"tl.disable_warp_specialized": True})
    assert kernel.trace.pipelines[0]["tma"]
    source = kernel.get_kernel_source()
    after_loop = source.rsplit("wait_group_sync_aligned_1();", 1)[1]  # the K loop's last
    assert "wait_group_sync_aligned_0();" in after_loop.split("__syncthreads")[0]


@needs_nvcc
@pytest.mark.parametrize("m, n, blocks", [(4096, 4096, 128), (8192, 8192, 128),
                                          (4224, 4096, 132), (1000, 776, 32)])
def test_the_persistent_example_launches_no_more_blocks_than_its_turns_need(m, n, blocks):
    """examples/persistent_gemm.py, `blocks` left to it: the fewest blocks that walk the
    128x256 tiles in as many turns as 132 would (4096^2: 512 tiles, four turns of 128
    rather than 116 blocks walking four and 16 walking three; 4224x4096: 528 tiles, four
    turns only with all 132)."""
    from examples.persistent_gemm import persistent_gemm_kernel

    kernel = persistent_gemm_kernel.compile(_meta(m, 256), _meta(256, n), target="cuda:sm_90a")
    assert kernel.trace.resources["grid"] == [blocks, 1, 1]


@needs_nvcc
@pytest.mark.parametrize("threads", [128, 256])
def test_a_persistent_pipeline_runs_ahead_across_tiles(threads):
    """Split between roles (the default for a pipeline in a walk over tiles), the producer
    walks the tiles too: slots and phases count the iterations of every tile so far (a
    counter in each role), the consumers release a tile's last slot once its MMAs are done
    and before its epilogue, and the epilogue's tile keeps memory of its own (the
    producer refills slots while the consumers store)."""
    kernel = persistent_gemm.compile(torch.empty(1000, 512, dtype=torch.float16, device="meta"),
                                     torch.empty(512, 776, dtype=torch.float16, device="meta"),
                                     target="cuda:sm_90a", waves_of=3,
                                     bn=256 if threads == 256 else 128, threads=threads)
    plan = kernel.trace.pipelines[0]
    assert plan["warp_specialized"]["consumer_threads"] == threads and "across_tiles" in plan
    assert kernel.trace.resources["block"][0] == threads + 128
    source = kernel.get_kernel_source()
    assert source.count("pipeline_done_ptr[0] = (pipeline_done_ptr[0] + 8)") == 2
    producer, consumers = source.split("} else {", 1)
    assert "for (int bx_wave_load = 0; bx_wave_load <" in producer
    tile_end = consumers.split("wait_group_sync_aligned_0();", 1)[1]
    assert tile_end.index("mbar_arrive_warp") < tile_end.index("pipeline_done_ptr[0] =") < \
        tile_end.index("tl::consumer_sync")  # the last slot released before the epilogue
    shared = kernel.trace.resources["dynamic_smem_bytes"]
    slots, out = 3 * (128 * 64 + 64 * (256 if threads == 256 else 128)) * 2, \
        128 * (256 if threads == 256 else 128) * 2
    assert shared >= slots + out


@pytest.mark.gpu
def test_a_persistent_tma_gemm_on_the_gpu():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")
    torch.manual_seed(4)
    a = torch.randn(1000, 512, dtype=torch.float16, device="cuda")
    b = torch.randn(512, 776, dtype=torch.float16, device="cuda")
    for waves_of in (3, 132):
        for wide in ({}, {"bn": 256, "threads": 256}):
            for roles in ({}, {"tl.disable_warp_specialized": True}):  # split, one role
                torch.testing.assert_close(
                    persistent_gemm(a, b, waves_of, **wide, pass_configs=roles).float(),
                    a.float() @ b.float(), rtol=2e-2, atol=5e-2)
