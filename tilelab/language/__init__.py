"""The `T` namespace of tile programs: `import tilelab.language as T`."""

from ..ir.dtypes import (  # noqa: F401
    DType,
    bfloat16,
    boolean,
    float4_e2m1fn,
    float8_e4m3fn,
    float8_e5m2,
    float16,
    float32,
    float64,
    int4,
    int8,
    int16,
    int32,
    int64,
    uint4,
    uint8,
    uint16,
    uint32,
    uint64,
)
from ..ops.gemm import GemmWarpPolicy  # noqa: F401 - T.GemmWarpPolicy
from .expr import (  # noqa: F401
    Cast,
    abs,
    ceil,
    ceildiv,
    cos,
    erf,
    exp,
    exp2,
    floor,
    if_then_else,
    infinity,
    log,
    log2,
    max,
    min,
    pow,
    rsqrt,
    sigmoid,
    sin,
    sqrt,
    tanh,
)
from .frontend import prim_func  # noqa: F401
from .primitives import (  # noqa: F401
    Buffer,
    Fragment,
    Kernel,
    Layout,
    Parallel,
    Persistent,
    Pipelined,
    Tensor,
    alloc_fragment,
    alloc_global,
    alloc_local,
    alloc_shared,
    alloc_var,
    annotate_layout,
    const,
    empty,
    get_block_binding,
    get_block_bindings,
    get_block_extent,
    get_block_extents,
    get_thread_binding,
    get_thread_bindings,
    get_thread_extent,
    get_thread_extents,
    macro,
    make_tensor,
    reshape,
    serial,
    thread_binding,
    unroll,
    use_swizzle,
    vectorized,
    view,
    ws,
)
from .random import rng_init, rng_rand, rng_rand_float  # noqa: F401
from .tilelang_names import (  # noqa: F401, A004 - TileLang's other spellings
    FragmentBuffer,
    LocalBuffer,
    Serial,
    SharedBuffer,
    Unroll,
    access_ptr,
    alloc_buffer,
    alloc_reducer,
    annotate_consumer_reg_alloc,
    annotate_producer_reg_dealloc,
    assume,
    attr,
    cast,
    clamp,
    comm_reducer,
    cp_async_barrier_noinc,
    disable_warp_group_reg_alloc,
    double,
    dtype,
    dynamic,
    evaluate,
    finalize_reducer,
    float,
    float8_e4m3,
    floordiv,
    floormod,
    gemm_sp,
    half,
    im2col,
    int,
    long,
    no_set_max_nreg,
    parallel,
    ptr,
    ptx_commit_group,
    ptx_cp_async,
    ptx_wait_group,
    reinterpret,
    set_max_nreg,
    shfl_down,
    shfl_sync,
    shfl_up,
    shfl_xor,
    shift_left,
    shift_right,
    short,
    symbolic,
    sync_grid,
    sync_threads,
    tfloat32,
    truncdiv,
    truncmod,
    tvm_thread_allreduce,
    tvm_warp_shuffle,
    tvm_warp_shuffle_down,
    tvm_warp_shuffle_up,
    tvm_warp_shuffle_xor,
    uint,
    wait_wgmma,
    wgmma_gemm,
)

bool = boolean  # noqa: A001 - T.bool, as TileLang spells it


def __getattr__(name: str):
    """`T.<name>` that does not exist: a TileLabError naming the feature, not a bare
    AttributeError (the error is an AttributeError too, so `hasattr` still works)."""
    if name.startswith("__"):
        raise AttributeError(name)
    from .tilelang_names import missing

    raise missing(name)


def _report_at_the_users_line():
    """Primitives called as plain Python (outside a kernel) raise from one entry frame.

    The tile ops' primitives come from their modules in tilelab/ops/, each
    exported under its own name (`T.copy`, `T.reduce_sum`, ...).
    """
    from .. import ops
    from ..errors import raised_at_the_caller
    from . import frontend, primitives

    for name in ("alloc_shared", "alloc_fragment", "alloc_local", "alloc_var", "alloc_global",
                 "const", "empty", "use_swizzle", "annotate_layout"):
        globals()[name] = raised_at_the_caller(getattr(primitives, name))
    globals()["prim_func"] = raised_at_the_caller(frontend.prim_func)
    for op in ops.all_ops():
        for primitive in op.primitives:
            globals()[primitive.__name__] = raised_at_the_caller(primitive)


_report_at_the_users_line()
