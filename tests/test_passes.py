"""What each tile-level pass does to the IR, and what the front end produces.

Checks are made twice where it matters: on the text a learner sees in the
Trace, and on the IR structure itself (the passes applied by hand to the
front end's module), so that a printer change cannot make a test pass or fail
by accident. Kernels are also run, so the IR shapes checked here are known to
compute the right thing.
"""

import warnings

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

import tilelab
import tilelab.language as T
from tilelab import TileLabWarning
from tilelab.language.frontend import TileProgram
from tilelab.passes.check_fragment_reads import CheckFragmentReads
from tilelab.passes.kernel_to_cpu_loops import KernelToCPULoops
from tilelab.passes.lower_tile_ops_to_loops import LowerTileOpsToLoops


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILELAB_DISABLE_CACHE", raising=False)


# ---------------------------------------------------------------- IR helpers


def nodes(ir, node_type) -> list:
    """Every node of `node_type` in a module or function body, in program order."""
    found = []

    def visit(node):
        found.append(node)

    root = ir.functions_items()[0][1].body if isinstance(ir, tvm.IRModule) else ir
    tvm_ffi.structural_walk(root, (node_type, visit), order="pre")
    return found


def module_of(program: TileProgram) -> tvm.IRModule:
    return tvm.IRModule({program.name: program.func})


def loops_of_kind(ir, kind) -> list:
    return [loop for loop in nodes(ir, tirx.For) if loop.kind == kind]


def extent(loop) -> int:
    return int(loop.extent.value)


# ---------------------------------------------------------------- programs


def make_gemm(M, N, K, bm=16, bn=8, bk=8):
    """C = 2 * A @ B.T on a (ceil(N/bn), ceil(M/bm)) grid."""

    @T.prim_func
    def gemm_nt(A: T.Tensor((M, K), T.float32), B: T.Tensor((N, K), T.float32),
                C: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            a_shared = T.alloc_shared((bm, bk), T.float32)
            b_shared = T.alloc_shared((bn, bk), T.float32)
            acc = T.alloc_fragment((bm, bn), T.float32)
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], a_shared)
                T.copy(B[bx * bn, k * bk], b_shared)
                T.gemm(a_shared, b_shared, acc, transpose_B=True)
            for i, j in T.Parallel(bm, bn):
                acc[i, j] = acc[i, j] * 2.0
            T.copy(acc, C[by * bm, bx * bn])

    return gemm_nt


def make_block_ids(X, Y, Z):
    """out[bz, by, bx] = bx + 10 * by + 100 * bz: shows how block indices are recovered."""

    @T.prim_func
    def block_ids(out: T.Tensor((Z, Y, X), T.int32)):
        with T.Kernel(X, Y, Z, threads=1) as (bx, by, bz):
            out[bz, by, bx] = bx + 10 * by + 100 * bz

    return block_ids


def make_column_sums(M, N, gx=2, gy=3):
    """S[j] = sum_i A[i, j], each of the gx * gy * gz blocks adding its rows atomically."""
    gz = M // (gx * gy)

    @T.prim_func
    def column_sums(A: T.Tensor((M, N), T.float32), S: T.Tensor((N,), T.float32)):
        with T.Kernel(gx, gy, M // (gx * gy), threads=32) as (bx, by, bz):
            for j in T.Parallel(N):
                T.atomic_add(S[j], A[bx * gy * gz + by * gz + bz, j])

    return column_sums


SCALES = [3.0, 5.0, 7.0]


def make_compile_time_python(N, use_plus: bool, branches: bool = True):
    @T.prim_func
    def python_control(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(N):
                B[i] = A[i]
                for s in SCALES:  # a Python list: unrolled while tracing
                    B[i] = B[i] + A[i] * s
                if use_plus:  # a Python bool: only one branch is traced
                    B[i] = B[i] + 111.0
                else:
                    B[i] = B[i] - 222.0
                if branches:
                    if A[i] > 0.5:  # a device value: an `if` in the IR
                        B[i] = B[i] * 0.0 + 1000.0
                    else:
                        B[i] = B[i] + 0.25

    return python_control


def reference_python_control(a, use_plus, branches=True):
    b = a * (1 + sum(SCALES)) + (111.0 if use_plus else -222.0)
    if branches:
        b = torch.where(a > 0.5, torch.full_like(a, 1000.0), b + 0.25)
    return b


def make_fragment_reader(N, clear_first: bool):
    @T.prim_func
    def fragment_reader(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        with T.Kernel(1, threads=32):
            acc = T.alloc_fragment((N,), T.float32)
            if clear_first:
                T.clear(acc)
            for i in T.Parallel(N):
                B[i] = acc[i] + A[i]

    return fragment_reader


@pytest.fixture(scope="module")
def gemm_trace(tmp_path_factory):
    """Compiled once (in a cache of its own) and checked against PyTorch."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TILELAB_CACHE_DIR", str(tmp_path_factory.mktemp("gemm-cache")))
        kernel = tilelab.compile(make_gemm(40, 20, 24))
    a, b, c = torch.randn(40, 24), torch.randn(20, 24), torch.empty(40, 20)
    kernel(a, b, c)
    torch.testing.assert_close(c, 2 * a @ b.T, rtol=1e-4, atol=1e-4)
    return kernel.trace


# ---------------------------------------------------------------- the front end


def test_front_end_ir_shows_tile_ops(gemm_trace):
    ir = gemm_trace.ir_after("tilelab.FrontEnd")
    assert gemm_trace.passes[0].name == "tilelab.FrontEnd"
    assert ir.count("T.tile.copy(") == 3
    assert ir.count("T.tile.gemm(") == 1
    assert ir.count("T.tile.fill(") == 1  # T.clear
    gemm_line = next(ln for ln in ir.splitlines() if "T.tile.gemm(" in ln)
    assert "transpose_B=True" in gemm_line and "transpose_A=False" in gemm_line
    assert "a_shared[0:16, 0:8]" in gemm_line and "acc[0:16, 0:8]" in gemm_line
    assert 'annotations={"num_stages": 3}' in ir  # T.Pipelined
    assert "for i in T.parallel(16):" in ir and "for j in T.parallel(8):" in ir  # T.Parallel
    assert 'T.thread_binding(3, thread="blockIdx.x"' in ir
    assert 'T.thread_binding(3, thread="blockIdx.y"' in ir
    assert 'scope="shared.dyn"' in ir and 'scope="local.fragment"' in ir


def test_front_end_structure():
    program = make_gemm(40, 20, 24)
    tile_ops = nodes(module_of(program), TilePrimitiveCall)
    assert [str(op.op.name) for op in tile_ops] == [
        "tilelab.fill", "tilelab.copy", "tilelab.copy", "tilelab.gemm", "tilelab.copy"]
    gemm = tile_ops[3]
    assert bool(gemm.config["transpose_B"]) is True
    assert bool(gemm.config["transpose_A"]) is False
    pipelined = [lp for lp in nodes(program.func.body, tirx.For) if "num_stages" in lp.annotations]
    assert len(pipelined) == 1 and int(pipelined[0].annotations["num_stages"]) == 3
    assert pipelined[0].kind == tirx.ForKind.SERIAL and extent(pipelined[0]) == 3
    parallel = loops_of_kind(program.func.body, tirx.ForKind.PARALLEL)
    assert sorted(extent(lp) for lp in parallel) == [8, 16]


def test_tile_program_script():
    program = make_gemm(40, 20, 24)
    assert isinstance(program, TileProgram)
    script = program.script()
    assert "@T.prim_func" in script
    assert "def gemm_nt(" in script
    assert 'A: T.Buffer((40, 24), "float32")' in script
    assert 'C: T.Buffer((40, 20), "float32")' in script
    assert "T.tile.gemm(" in script
    assert [p.name for p in program.params] == ["A", "B", "C"]
    assert [p.shape for p in program.params] == [(40, 24), (20, 24), (40, 20)]
    # the Trace starts from exactly this function
    trace = tilelab.lower(program)
    body = [ln.strip() for ln in script.splitlines() if ln.strip().startswith(("for", "T.tile"))]
    front = [ln.strip() for ln in trace.ir_after("tilelab.FrontEnd").splitlines()]
    assert body and all(line in front for line in body)


def test_python_list_loop_unrolls():
    program = make_compile_time_python(8, use_plus=True)
    script = program.script()
    assert "for s" not in script
    accumulate = [ln for ln in script.splitlines() if ln.strip().startswith("B[i] = B[i] +")
                  and "A[i]" in ln]
    assert len(accumulate) == len(SCALES), script
    for scale in SCALES:
        assert f"T.float32({scale})" in script
    stores = [s for s in nodes(program.func.body, tirx.BufferStore) if s.buffer.name == "B"]
    assert len(stores) == 1 + len(SCALES) + 1 + 2  # copy, unrolled adds, one branch, if/else


@pytest.mark.parametrize("use_plus", [True, False])
def test_if_on_a_python_bool_keeps_one_branch(use_plus):
    program = make_compile_time_python(8, use_plus=use_plus, branches=False)
    script = program.script()
    assert ("T.float32(111.0)" in script) is use_plus
    assert ("T.float32(222.0)" in script) is not use_plus
    assert not nodes(program.func.body, tirx.IfThenElse)
    assert "if " not in script
    kernel = tilelab.compile(program)
    a, b = torch.rand(8), torch.empty(8)
    kernel(a, b)
    torch.testing.assert_close(b, reference_python_control(a, use_plus, branches=False))


def test_if_on_a_device_value_is_an_ir_if():
    program = make_compile_time_python(8, use_plus=False)
    script = program.script()
    assert "if A[i] > T.float32(0.5):" in script
    assert "else:" in script
    [branch] = nodes(program.func.body, tirx.IfThenElse)
    assert branch.else_case is not None
    kernel = tilelab.compile(program)
    a = torch.linspace(0, 1, 8)
    b = torch.empty(8)
    kernel(a, b)
    torch.testing.assert_close(b, reference_python_control(a, use_plus=False))


def test_factory_sizes_used_only_in_the_signature():
    """A factory argument that only the annotations use must still be visible."""

    def make_copy(N):
        @T.prim_func
        def copy_all(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
            with T.Kernel(1, threads=32):
                T.copy(A, B)

        return copy_all

    program = make_copy(12)
    assert [p.shape for p in program.params] == [(12,), (12,)]
    kernel = tilelab.compile(program)
    a, b = torch.randn(12), torch.empty(12)
    kernel(a, b)
    torch.testing.assert_close(b, a)


# ---------------------------------------------------------------- CheckFragmentReads


def test_check_fragment_reads_leaves_the_ir_unchanged(gemm_trace):
    record = gemm_trace.get_pass("tilelab.CheckFragmentReads")
    assert record.changed is False
    assert record.ir == gemm_trace.ir_after("tilelab.FrontEnd")

    for clear_first in (True, False):
        program = make_fragment_reader(8, clear_first)
        mod = module_of(program)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = CheckFragmentReads(program.buffer_locations)(mod)
        assert tvm_ffi.structural_equal(out, mod)
        ours = [w for w in caught if issubclass(w.category, TileLabWarning)]
        # it does look at the program: it warns exactly when the fragment is read unwritten
        assert len(ours) == (0 if clear_first else 1)
        if ours:
            assert "'acc'" in str(ours[0].message)


# ---------------------------------------------------------------- LowerTileOpsToLoops


def test_lower_tile_ops_to_loops(gemm_trace):
    names = gemm_trace.pass_names()
    before = gemm_trace.ir_after("tilelab.CheckFragmentReads")
    after = gemm_trace.ir_after("tilelab.LowerTileOpsToLoops")
    assert "T.tile." in before
    assert "T.tile." not in after
    assert after.count("for ") > before.count("for ")
    assert "T.grid(" in after
    # no later pass sees a tile op either
    for name in names[names.index("tilelab.LowerTileOpsToLoops"):]:
        assert "T.tile." not in gemm_trace.ir_after(name), name


def test_lower_tile_ops_to_loops_structure():
    program = make_gemm(40, 20, 24)
    mod = module_of(program)
    lowered = LowerTileOpsToLoops(mod)
    assert len(nodes(mod, TilePrimitiveCall)) == 5
    assert nodes(lowered, TilePrimitiveCall) == []
    loops_before, loops_after = nodes(mod, tirx.For), nodes(lowered, tirx.For)
    # fill: 2 loops, 3 copies: 2 each, gemm: 3
    assert len(loops_after) - len(loops_before) == 2 + 3 * 2 + 3
    # the block loops and the pipelined loop are left alone
    assert len(loops_of_kind(lowered, tirx.ForKind.THREAD_BINDING)) == 2
    assert any("num_stages" in lp.annotations for lp in loops_after)


# ---------------------------------------------------------------- KernelToCPULoops


def test_kernel_to_cpu_loops_makes_one_parallel_loop(gemm_trace):
    before = gemm_trace.ir_after("tilelab.LowerTileOpsToLoops")
    after = gemm_trace.ir_after("tilelab.KernelToCPULoops")
    assert before.count("T.thread_binding(") == 2
    assert "thread_binding" not in after and "blockIdx" not in after
    assert after.count("T.parallel(") == 1
    assert "for block in T.parallel(9):" in after  # 3 x 3 blocks


def test_kernel_to_cpu_loops_structure():
    program = make_gemm(40, 20, 24)  # grid (3, 3)
    lowered = LowerTileOpsToLoops(module_of(program))
    flat = KernelToCPULoops(False)(lowered)
    assert loops_of_kind(flat, tirx.ForKind.THREAD_BINDING) == []
    [parallel] = loops_of_kind(flat, tirx.ForKind.PARALLEL)
    assert extent(parallel) == 9
    outermost = nodes(flat, tirx.For)[0]
    assert outermost.same_as(parallel)  # the block loop encloses the whole kernel body
    # T.Parallel loops inside a block were serialized: the cores go to the blocks
    assert loops_of_kind(lowered, tirx.ForKind.PARALLEL)


@pytest.mark.parametrize("grid", [(4, 1, 1), (2, 3, 1), (2, 3, 4)])
def test_block_indices_are_recovered_from_the_flat_loop(grid):
    program = make_block_ids(*grid)
    flat = KernelToCPULoops(False)(LowerTileOpsToLoops(module_of(program)))
    [parallel] = loops_of_kind(flat, tirx.ForKind.PARALLEL)
    assert extent(parallel) == grid[0] * grid[1] * grid[2]
    kernel = tilelab.compile(program)
    out = torch.full((grid[2], grid[1], grid[0]), -1, dtype=torch.int32)
    kernel(out)
    z, y, x = torch.meshgrid(*(torch.arange(n, dtype=torch.int32) for n in grid[::-1]),
                             indexing="ij")
    torch.testing.assert_close(out, x + 10 * y + 100 * z)


def test_kernel_to_cpu_loops_is_serial_with_atomics():
    program = make_column_sums(12, 8)  # grid (2, 3, 2)
    assert program.has_atomics
    flat = KernelToCPULoops(True)(LowerTileOpsToLoops(module_of(program)))
    assert loops_of_kind(flat, tirx.ForKind.PARALLEL) == []
    assert loops_of_kind(flat, tirx.ForKind.THREAD_BINDING) == []
    block_loop = nodes(flat, tirx.For)[0]
    assert block_loop.kind == tirx.ForKind.SERIAL and extent(block_loop) == 12

    kernel = tilelab.compile(program)
    after = kernel.trace.ir_after("tilelab.KernelToCPULoops")
    assert "T.parallel" not in after and "thread_binding" not in after
    assert "for block" in after
    a, s = torch.randn(12, 8), torch.zeros(8)
    kernel(a, s)
    torch.testing.assert_close(s, a.sum(0), rtol=1e-5, atol=1e-5)

    # without atomics the same grid runs in parallel
    parallel = KernelToCPULoops(False)(LowerTileOpsToLoops(module_of(program)))
    [loop] = loops_of_kind(parallel, tirx.ForKind.PARALLEL)
    assert extent(loop) == 12
