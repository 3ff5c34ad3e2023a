"""The `T` namespace of tile programs: `import tilelab.language as T`."""

from ..ir import tile_ops as _tile_ops  # noqa: F401 - registers the tile ops with TVM
from ..ir.dtypes import (  # noqa: F401
    DType,
    bfloat16,
    boolean,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
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
from .primitives import (  # noqa: F401
    Buffer,
    Fragment,
    GemmWarpPolicy,
    Kernel,
    Layout,
    Parallel,
    Pipelined,
    Tensor,
    alloc_fragment,
    alloc_local,
    alloc_shared,
    alloc_var,
    annotate_layout,
    atomic_add,
    clear,
    const,
    copy,
    empty,
    fill,
    gemm,
    macro,
    prim_func,
    print,
    reduce_absmax,
    reduce_abssum,
    reduce_max,
    reduce_min,
    reduce_sum,
    serial,
    unroll,
    use_swizzle,
    vectorized,
)

bool = boolean  # noqa: A001 - T.bool, as TileLang spells it


def _report_at_the_users_line():
    """Primitives called as plain Python (outside a kernel) raise from one entry frame."""
    from ..errors import raised_at_the_caller
    from . import primitives

    for name in ("alloc_shared", "alloc_fragment", "alloc_local", "alloc_var", "atomic_add",
                 "clear", "const", "copy", "empty", "fill", "gemm", "print", "reduce_abssum",
                 "reduce_absmax", "reduce_max", "reduce_min", "reduce_sum", "use_swizzle",
                 "annotate_layout", "prim_func"):
        globals()[name] = raised_at_the_caller(getattr(primitives, name))


_report_at_the_users_line()
