"""Running compiled kernels without TVM: the CUDA launcher and the exported kernel file.

Only torch and NVIDIA's driver bindings (cuda-bindings) are needed here, so a
kernel exported with `save_artifact` runs on a machine without TVM or a
compiler: ``kernel = tilelab.load("vector_add.tilelab"); c = kernel(a, b)``.
"""

from .artifact import (  # noqa: F401
    FORMAT_VERSION,
    Artifact,
    RuntimeParam,
    TileLabArtifactError,
    load_artifact,
    save_artifact,
)
from .cuda import (  # noqa: F401
    CudaError,
    CudaLauncher,
    CudaUnavailableError,
    launch_overhead_us,
)
