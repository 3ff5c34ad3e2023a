"""IR in, IR out: layout inference, software pipelining and barrier insertion, each run
alone on a front-end program, and what each leaves in the IR (or records beside it)."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx
from tvm.tirx.tile_primitive import TilePrimitiveCall

import tilelab.language as T
from tilelab.ir.keys import LAYOUT_PLAN, PIPELINE_PLAN, facts_in, without_facts
from tilelab.ir.visit import rewrite, walk
from tilelab.passes.infer_layouts import InferLayouts
from tilelab.passes.insert_barriers import InsertBarriers
from tilelab.passes.pipeline_loops import PipelineLoops


def module(program):
    return tvm.IRModule({program.name: program.func})


def make_gemm(stages: int = 3):
    @T.prim_func
    def gemm(A: T.Tensor((128, 256), T.float16), B: T.Tensor((256, 128), T.float16),
             C: T.Tensor((128, 128), T.float32)):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((128, 32), T.float16)
            b = T.alloc_shared((32, 128), T.float16)
            acc = T.alloc_fragment((128, 128), T.float32)
            T.clear(acc)
            for k in T.Pipelined(8, num_stages=stages):
                T.copy(A[0, k * 32], a)
                T.copy(B[k * 32, 0], b)
                T.gemm(a, b, acc)
            T.copy(acc, C)

    return gemm


def make_shared_round_trip():
    @T.prim_func
    def round_trip(X: T.Tensor((64,), T.float32), Y: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            tile = T.alloc_shared((64,), T.float32)
            T.copy(X, tile)
            for i in T.Parallel(64):
                tile[i] = tile[63 - i] * 2.0
            T.copy(tile, Y)

    return round_trip


def barriers(mod) -> list[str]:
    """The statement kinds of the kernel body's top level, barriers by name."""
    names = []

    def visit(node):
        if isinstance(node, tirx.Evaluate) and "tvm_storage_sync" in str(node):
            names.append("barrier")
        elif isinstance(node, TilePrimitiveCall):
            names.append(str(node.op.name).removeprefix("tilelab."))
        elif isinstance(node, tirx.For) and node.kind == tirx.ForKind.PARALLEL:
            names.append("parallel")

    walk(next(iter(mod.functions.values())).body, object, visit)
    return [n for i, n in enumerate(names) if not (n == "parallel" and names[i - 1] == "parallel")]


def test_insert_barriers_between_a_write_and_other_threads_reads():
    out = InsertBarriers()(module(make_shared_round_trip()))
    # a barrier after the tile is filled (others read it) and after the loop rewrote it
    assert barriers(out) == ["copy", "barrier", "parallel", "barrier", "copy"]


def test_insert_barriers_inside_an_if_of_the_block():
    """An `if` every thread takes alike (here on the block index; T.Persistent guards its
    waves so) holds the block's work: the barrier between the copy and the loop that reads
    the tile goes inside it, and one after the `if` covers what either branch left. (TVM's
    ThreadSync does not see a T.Parallel loop's body, so nothing else puts them there.)"""

    @T.prim_func
    def guarded(X: T.Tensor((64,), T.float32), Y: T.Tensor((2, 64), T.float32)):
        with T.Kernel(2, threads=64) as bx:
            tile = T.alloc_shared((64,), T.float32)
            if bx > 0:
                T.copy(X, tile)
                for i in T.Parallel(64):
                    Y[bx, i] = tile[63 - i]
            else:
                T.fill(tile, 1.0)
            T.copy(tile, Y[bx, 0])

    out = InsertBarriers()(module(guarded))
    assert barriers(out) == ["copy", "barrier", "parallel", "fill", "barrier", "copy"]


def test_insert_barriers_leaves_a_race_free_program_alone():
    @T.prim_func
    def no_sharing(X: T.Tensor((64,), T.float32), Y: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=64):
            values = T.alloc_fragment((64,), T.float32)
            T.copy(X, values)
            T.copy(values, Y)

    mod = module(no_sharing)
    assert tvm_ffi.structural_equal(InsertBarriers()(mod), mod)


def test_pipeline_loops_stages_the_tiles_and_records_the_plan():
    out = PipelineLoops()(module(make_gemm(stages=3)))
    (plan,) = facts_in(out)[PIPELINE_PLAN]  # the schedule rides on the pipelined loop
    assert plan["num_stages"] == 3 and plan["loop"] == "k"
    assert plan["slots"] == {"a": 3, "b": 3}
    staged = {}

    def on_alloc(node):
        staged[str(node.buffer.name)] = [int(s) for s in node.buffer.shape]

    walk(next(iter(out.functions.values())).body, tirx.AllocBuffer, on_alloc)
    assert staged["a"] == [3, 128, 32] and staged["b"] == [3, 32, 128]
    text = out.script()
    assert "cp_async_commit" in text and "cp_async_wait" in text
    assert text.count("asynchronous=True") >= 2  # the prologue and steady-state copies


def test_pipeline_loops_leaves_one_stage_loops_alone():
    mod = module(make_gemm(stages=1))
    assert tvm_ffi.structural_equal(PipelineLoops()(mod), mod)


def test_infer_layouts_leaves_its_plan_on_the_kernel_loop_and_changes_nothing_else():
    mod = module(make_gemm())
    out = InferLayouts()(mod)
    (plan,) = facts_in(out)[LAYOUT_PLAN]

    def strip(loop):  # without the plan, the IR is what it was
        return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                        thread_binding=loop.thread_binding,
                        annotations=without_facts(loop.annotations))

    func = next(iter(out.functions.values()))
    stripped = func.with_body(rewrite(func.body, tirx.For, strip))
    assert tvm_ffi.structural_equal(stripped, next(iter(mod.functions.values())))
    accumulator = plan.fragments["acc"]
    assert accumulator.recipe["kind"] == "accumulator" and accumulator.threads == 128
    assert set(plan.shared_layouts) == {"a", "b"}  # 16-bit tensor-core operands: swizzled
    assert list(plan.gemm_warps.values()) == [(2, 2)]


def test_shared_tiles_live_until_the_next_barrier():
    """ThreadSync places barriers as if each tile had bytes of its own: thread t reading
    `s0[t]` and then writing `scratch[t]` needs none. The merge must then not put `scratch`
    over `s0` (difftest seed 1, 19273: a float reduction scratch over a half tile lost
    other threads' elements): before each barrier a marker touches every tile accessed
    since the previous one, so all of them are alive together up to the barrier."""
    from tilelab.passes.separate_shared_lifetimes import MARKER, _keep_until_barrier

    s0 = tirx.decl_buffer((256,), "float16", name="s0", scope="shared.dyn")
    scratch = tirx.decl_buffer((256,), "float32", name="scratch", scope="shared.dyn")
    mine = tirx.decl_buffer((1,), "float16", name="mine", scope="local")
    tx = tirx.Var("tx", "int32")
    sync = tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))
    body = tirx.SeqStmt([
        tirx.BufferStore(s0, tirx.const(1.5, "float16"), [tx]), sync,
        tirx.BufferStore(mine, tirx.BufferLoad(s0, [tx]), [0]),
        tirx.BufferStore(scratch, tirx.Cast("float32", tirx.BufferLoad(mine, [0])), [tx]),
        sync])
    out = list(_keep_until_barrier(body).seq)
    markers = [i for i, s in enumerate(out) if MARKER in str(s)]
    assert [out[i + 1].same_as(sync) for i in markers] == [True, True]
    last = out[markers[1]].value
    assert {str(v) for v in last.args[1:]} == {str(s0.data), str(scratch.data)}


def test_tiles_allocated_inside_a_statement_are_not_kept_past_it():
    """A tile allocated inside a statement (the mbarriers of a pipelined loop inside a
    persistent block's `if`) is out of scope after it: the marker before the next barrier
    of the outer list leaves it out (TVM's StorageRewrite refused the kernel: TileLang's
    examples/gemm/example_gemm_persistent.py on the H200)."""
    from tilelab.passes.separate_shared_lifetimes import MARKER, _keep_until_barrier

    outer = tirx.decl_buffer((64,), "float16", name="outer", scope="shared.dyn")
    inner = tirx.decl_buffer((3,), "uint64", name="inner", scope="shared.dyn")
    tx = tirx.Var("tx", "int32")
    sync = tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))
    nested = tirx.IfThenElse(tx < 4, tirx.SeqStmt([
        tirx.AllocBuffer(inner),
        tirx.BufferStore(inner, tirx.const(0, "uint64"), [0]),
        tirx.BufferStore(outer, tirx.const(1.0, "float16"), [tx])]), None)
    out = list(_keep_until_barrier(tirx.SeqStmt([nested, sync])).seq)
    (marker,) = [s for s in out if MARKER in str(s)]
    assert {str(v) for v in marker.value.args[1:]} == {str(outer.data)}


def test_a_tile_read_through_an_access_pointer_is_not_kept_to_the_end():
    """TVM 0.27 names a tile's pointer `buffer_data(tile)` in its stores but as a variable in
    `tvm_access_ptr` (ldmatrix, wgmma descriptors, TMA). Both must name one tile: a tile
    whose last access is such a read is not "written last" (those keep their bytes to the
    end of the block). Seen as TileLang's gqa_bwd_tma_reduce example asking 248 KB of shared
    memory where 225 KB suffice."""
    from tilelab.passes.separate_shared_lifetimes import _last_written

    tile = tirx.decl_buffer((256,), "float16", name="tile", scope="shared.dyn")
    pointer = tirx.Var("tile", tvm.ir.PointerType(tvm.ir.PrimType("float16"), "shared.dyn"))
    tx = tirx.Var("tx", "int32")

    def access(rw_mask):
        return tirx.Evaluate(tirx.call_extern("void", "tl::ldmatrix_x4", tirx.call_intrin(
            "handle", "tirx.tvm_access_ptr", tirx.type_annotation("float16"), pointer, 0, 8,
            rw_mask)))

    write = tirx.BufferStore(tile, tirx.const(1.0, "float16"), [tx])
    assert _last_written(tirx.SeqStmt([write, access(1)])) == []
    assert [str(t) for t in _last_written(tirx.SeqStmt([write, access(1), access(2)]))] == \
        ["tile.data"]
