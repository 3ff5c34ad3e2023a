"""The names under which facts travel with the IR, and the pass settings users give.

Facts the front end or a pass records for later passes are attributes of the IR
itself (loop annotations, PrimFunc attributes, tile-op config), under these keys,
so that every pass, the Trace and the cache see the same program.
"""

from __future__ import annotations

import enum
import math

# loop annotations
KERNEL = "tilelab.kernel"  # the outermost block loop of a T.Kernel
THREADS = "tilelab.threads"  # on that loop: the block's thread extents
NUM_STAGES = "num_stages"  # a T.Pipelined loop's stages (TileLang's name)
PIPELINED = "tilelab.pipelined"  # a loop PipelineLoops has already rewritten

# PrimFunc attributes
SOURCE_FILE = "tilelab.source_file"  # the kernel's file; a tile op's `loc` is relative to it

# tile-op config
LOC = "loc"  # "line:col" (or "file:line:col") of the statement that wrote the op
ASYNCHRONOUS = "asynchronous"  # a copy issued by a software pipeline (cp.async)


def block_threads(kernel_loop) -> int:
    """The number of threads of the block a T.Kernel loop launches."""
    return math.prod(int(t) for t in kernel_loop.annotations[THREADS])


class PassConfigKey(str, enum.Enum):
    """Settings that change how a kernel is compiled (`pass_configs={...}`)."""

    # nvcc --use_fast_math: exp, log, division by the GPU's fast approximate instructions
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    # keep loops scalar: no 16-byte vector loads and stores (VectorizeLoop makes them serial)
    TL_DISABLE_VECTORIZE = "tl.disable_vectorize"
    # record %globaltimer in the first N blocks' pipelined loops (see tilelab/instrument.py)
    TL_INSTRUMENT_PIPELINE = "tl.instrument_pipeline"
    # sm_90a: T.gemm by warpgroup MMA (wgmma) - opt-in for now: an operand tile must start on
    # its swizzle pattern (up to 1024 B) in merged shared memory, which the planner does not
    # yet guarantee (the GEMM + bias kernel of the suite trapped on the H200, 2026-12-01)
    TL_ENABLE_WGMMA = "tl.enable_wgmma"
    # sm_90a: keep T.gemm on the Ampere path (mma.sync + ldmatrix); wins over TL_ENABLE_WGMMA
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
