"""Split loops that compute between their T.gemm (passes/pipeline_loops.py, _take_turns;
passes/specialize_warps.py).

FlashAttention's key loop multiplies, computes the softmax in registers, and multiplies
again. Split between a producer warpgroup and two consumer warpgroups (asked for with
`tl.force_warp_specialized`), each T.gemm waits for its MMAs and an iteration releases
its own slot at its end, and the producer's registers go to the consumers (setmaxnreg);
asked for (`tl.enable_warpgroup_turns`), the consumers take turns at the tensor cores
(named barriers 14 and 15).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tilelab
import tilelab.language as T
from tests.cuda_source import loop_text
from tilelab import PassConfigKey
from tilelab.backends.cuda.nvcc import find_nvcc
from tilelab.passes.specialize_warps import _registers

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="compiling for CUDA needs nvcc")
SPLIT = {PassConfigKey.TL_FORCE_WARP_SPECIALIZED.value: True}
TURNS = {PassConfigKey.TL_ENABLE_WARPGROUP_TURNS.value: True}


def _attention(shape=(2, 4, 1000, 128), configs=None, target="cuda:sm_90a", **options):
    from examples.flash_attention import flash_attention_kernel as fa

    options = {"block_m": 128, "threads": 256, **options}
    return tilelab.compile(fa.fn(*shape, **options), out_idx=fa.out_idx, target=target,
                           pass_configs={**fa.pass_configs, **SPLIT, **(configs or {})})


@needs_nvcc
@pytest.mark.parametrize("causal, configs, turns", [
    (False, {}, True),  # split by measurement, the same trip count in every block
    (True, {}, False),  # the causal bound: the count depends on the block
    (False, {PassConfigKey.TL_ENABLE_WARPGROUP_TURNS.value: False}, False),
])
def test_turns_where_they_were_measured_to_pay(causal, configs, turns):
    """Not asked for: 128x128 tiles at d128 split by default (Roles.pays) and take turns
    where the key loop is as long in every block (H200: x0.97-1.00 of SDPA with turns,
    x0.90-0.95 without; causal x0.88-0.97 with, x0.94 without)."""
    from examples.flash_attention import flash_attention_kernel as fa

    kernel = tilelab.compile(fa.fn(2, 4, 1000, 128, block_m=128, block_n=128, threads=256,
                                   causal=causal),
                             out_idx=fa.out_idx, target="cuda:sm_90a",
                             pass_configs={**fa.pass_configs, **configs})
    assert "warp_specialized" in kernel.trace.pipelines[0]
    assert ("tl::turn_pass();" in kernel.get_kernel_source()) is turns


def test_the_consumers_take_the_registers_the_producer_gives_back():
    assert _registers(256) == 240  # 128 x 24 + 256 x 240 <= 65,536; the launch gives 168
    assert _registers(384) == 160  # the launch gives 128
    assert _registers(128) is None  # one warpgroup already has 255 at launch


@needs_nvcc
def test_attention_split_takes_turns_and_moves_registers():
    kernel = _attention(configs=TURNS)
    source = kernel.get_kernel_source()
    plan = kernel.trace.pipelines[0]
    assert plan["warp_specialized"] == {"consumer_threads": 256, "producer_threads": 128}
    assert "at the iteration's end" in plan["waits"] and plan["ahead"] == 1
    assert kernel.launch["block"] == [384, 1, 1]
    # the consumers take registers before their loop; the producer warpgroup gives them
    # back before its one thread issues the copies
    order = ["if (((int)threadIdx.x) < 256) {", "tl::registers_up<240>();",
             "for (int key_block = 0;", "tl::registers_down<24>();",
             "if (((int)threadIdx.x) == 256) {"]
    assert [source.index(text) for text in order] == sorted(source.index(t) for t in order)
    assert kernel.trace.resources["registers"] == 168  # what 384 threads get: the pool holds
    loop = loop_text(source, "key_block")
    assert "consumer_sync" not in loop and "__syncthreads" not in loop
    # the second warpgroup waits for the first's first product; a turn is handed over once
    # the first T.gemm's MMAs are issued (before its wgmma.wait_group 0) and taken before
    # the last
    assert loop.index("key_block == 0") < loop.index("tl::turn_first()")
    issued, first_wait = loop.index("commit_group"), loop.index("wait_group_sync_aligned_0")
    assert issued < loop.index("tl::turn_pass()") < first_wait < loop.index("tl::turn_wait()")
    assert loop.index("tl::turn_wait()") < loop.index("wgmma_f16_rs")  # before O += P V
    assert loop.rindex("tl::mbar_arrive_warp") > loop.rindex("wait_group_sync_aligned_0")
    after = source.split(loop)[1]
    assert after.index("tl::turn_last()") < after.index("tl::consumer_sync(256)")


@needs_nvcc
def test_the_consumers_compile_with_the_registers_they_take():
    """128x128 tiles: S, P and O outgrow the 168 registers 384 threads get at launch; the
    consumers' 240 hold them (with the producer's branch first ptxas kept the consumers
    at 168: 24 bytes spilled)."""
    kernel = _attention((4, 32, 4096, 128), TURNS, block_n=128)
    assert kernel.trace.resources["registers"] == 168  # the launch's, as before
    assert kernel.trace.resources.get("spill_stores_bytes", 0) == 0


@needs_nvcc
def test_registers_stay_where_the_launch_gives_too_few_to_move():
    """d64 needs 107 registers a thread: at launch the producer would free 128 x (112 -
    24), the consumers ask for 256 x (240 - 112) and would wait forever. The turns go
    with the moves (measured twice as slow on the launch's registers)."""
    kernel = _attention((2, 4, 1000, 64), TURNS)
    source = kernel.get_kernel_source()
    assert "tl::registers_" not in source and "tl::turn_" not in source
    moves = kernel.trace.resources["register_moves"]
    assert moves.startswith("no register moves") and moves.endswith("either")


@needs_nvcc
def test_one_consumer_warpgroup_splits_without_turns_or_registers():
    kernel = _attention(configs=TURNS, block_m=64, threads=128)
    source = kernel.get_kernel_source()
    assert kernel.trace.pipelines[0]["warp_specialized"]["consumer_threads"] == 128
    assert "tl::turn_" not in source and "tl::registers_" not in source


@needs_nvcc
def test_gemm_splits_keep_the_registers_of_their_launch():
    """A loop that only multiplies keeps its MMAs in flight and takes no turns; its
    accumulators fit in what the launch gives (the persistent GEMMs: 168)."""
    from examples.gemm import gemm_kernel

    kernel = gemm_kernel.compile(torch.empty(512, 256, dtype=torch.float16, device="meta"),
                                 torch.empty(256, 512, dtype=torch.float16, device="meta"),
                                 target="cuda:sm_90a", block_n=256, block_k=64, num_stages=4,
                                 threads=256, pass_configs={**SPLIT, **TURNS})
    assert kernel.trace.pipelines[0]["warp_specialized"]["consumer_threads"] == 256
    source = kernel.get_kernel_source()
    assert "tl::registers_" not in source and "tl::turn_" not in source


@needs_nvcc
def test_without_the_forcing_key_attention_keeps_one_role():
    from examples.flash_attention import flash_attention_kernel as fa

    kernel = tilelab.compile(fa.fn(2, 4, 1000, 128, block_m=128, threads=256),
                             out_idx=fa.out_idx, target="cuda:sm_90a",
                             pass_configs=fa.pass_configs)
    assert "warp_specialized" not in kernel.trace.pipelines[0]
    assert "tl::turn_" not in kernel.get_kernel_source()


@tilelab.jit
def through_shared(Q, K, V, block_m: int = 128, block_n: int = 64, threads: int = 256,
                   stages: int = 2, keep_registers: bool = False):
    """S = Q Kᵀ goes through a shared tile before O += S V: every consumer writes it and the
    second T.gemm reads it, so the loop needs a barrier of all consumers. `keep_registers`:
    TileLang's hint T.disable_warp_group_reg_alloc()."""
    M, N, D = T.const("M, N, D")
    Q: T.Tensor((M, D), T.float16)
    K: T.Tensor((N, D), T.float16)
    V: T.Tensor((N, D), T.float16)
    O = T.empty((M, D), T.float32)  # noqa: E741
    with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
        if keep_registers:
            T.disable_warp_group_reg_alloc()
        q = T.alloc_shared((block_m, D), T.float16)
        k = T.alloc_shared((block_n, D), T.float16)
        v = T.alloc_shared((block_n, D), T.float16)
        s_shared = T.alloc_shared((block_m, block_n), T.float16)
        s = T.alloc_fragment((block_m, block_n), T.float32)
        o = T.alloc_fragment((block_m, D), T.float32)
        T.copy(Q[bx * block_m, 0], q)
        T.clear(o)
        for j in T.Pipelined(T.ceildiv(N, block_n), num_stages=stages):
            T.copy(K[j * block_n, 0], k)
            T.copy(V[j * block_n, 0], v)
            T.clear(s)
            T.gemm(q, k, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(s, s_shared)
            T.gemm(s_shared, v, o, policy=T.GemmWarpPolicy.FullRow)
        T.copy(o, O[bx * block_m, 0])


def _through_shared_inputs(device):
    torch.manual_seed(1)
    q = torch.randn(300, 64, dtype=torch.float16, device=device) / 4
    k = torch.randn(200, 64, dtype=torch.float16, device=device) / 4
    v = torch.randn(200, 64, dtype=torch.float16, device=device)
    return q, k, v


def _through_shared_reference(q, k, v):
    s = (q.float() @ k.float().T).half().float()
    return s @ v.float()


@needs_nvcc
def test_a_loop_that_needs_a_barrier_of_all_consumers_keeps_no_turns():
    q, k, v = _through_shared_inputs("cpu")
    kernel = through_shared.compile(q.to("meta"), k.to("meta"), v.to("meta"),
                                    target="cuda:sm_90a", pass_configs={**SPLIT, **TURNS})
    source = kernel.get_kernel_source()
    assert "warp_specialized" in kernel.trace.pipelines[0]
    assert "tl::consumer_sync" in loop_text(source, "j")
    assert "tl::turn_" not in source  # waiting for a turn there would deadlock


@needs_nvcc
def test_tilelangs_hint_keeps_the_registers_of_the_launch():
    """T.disable_warp_group_reg_alloc() in the program is tl.disable_setmaxnreg for it."""
    for keep in (False, True):
        kernel = through_shared.compile(M=256, N=256, D=128, keep_registers=keep,
                                        target="cuda:sm_90a", pass_configs=SPLIT)
        source = kernel.get_kernel_source()
        assert ("tl::registers_down<24>();" in source) is not keep
        assert ("tl::registers_up<" in source) is not keep


def test_the_cpu_reads_the_same_programs():
    q, k, v = _through_shared_inputs("cpu")
    out = through_shared(q, k, v, target="cpu", pass_configs=SPLIT)
    torch.testing.assert_close(out, _through_shared_reference(q, k, v), rtol=1e-2, atol=1e-2)


def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs a Hopper GPU (sm_90a)")


@pytest.mark.gpu
@pytest.mark.parametrize("options, configs", [
    ({}, TURNS),
    ({"causal": True}, TURNS),
    ({"block_n": 128}, TURNS),
    ({}, {}),
    ({}, {**TURNS, PassConfigKey.TL_DISABLE_SETMAXNREG.value: True}),
    ({"block_m": 64, "threads": 128, "causal": True}, TURNS),
])
def test_split_attention_matches_torch_on_the_gpu(options, configs):
    attention_matches_torch(configs, options, "warp_specialized")


def attention_matches_torch(configs, options, planned: str,
                            shapes=((1, 4, 777, 128), (2, 3, 1000, 64), (1, 2, 64, 128))):
    """The example's attention, split with `configs` and `options`, against torch on fresh
    inputs of each shape (partial tiles, head dims 64 and 128, one key tile); its plan
    names `planned`."""
    _hopper()
    causal = options.get("causal", False)
    for shape in shapes:
        torch.manual_seed(shape[2])
        q, k, v = (torch.randn(*shape, dtype=torch.float16, device="cuda") for _ in range(3))
        kernel = _attention(shape, configs, target="cuda", **options)
        assert planned in kernel.trace.pipelines[0]
        out = kernel(q, k, v)
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_a_loop_without_turns_matches_torch_on_the_gpu():
    _hopper()
    q, k, v = _through_shared_inputs("cuda")
    out = through_shared(q, k, v, pass_configs=SPLIT)
    torch.testing.assert_close(out, _through_shared_reference(q, k, v), rtol=1e-2, atol=2e-2)
