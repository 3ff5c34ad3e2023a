"""Write tilelab_views.ipynb: a notebook with saved tilelab outputs, for the e2e test.

The notebook is executed on the CPU (no GPU needed; the FlashAttention cell
compiles for CUDA when the CUDA compiler is there, since CUDA C and PTX need no
GPU, and falls back to the CPU) and saved with its outputs, so the browser test
opens it with no kernel work at all: the views render from the saved JSON.

    .venv/bin/python extension/ui-tests/make_notebook.py

Cells: a %%tilekernel vector add (check, bench, source), GEMM layouts, bank
conflicts, the pipeline and the dataflow graph, the pass explorer of GEMM and
of FlashAttention (every pass), an error at the user's line, and views of a
kernel named `<img src=x onerror=alert(1)>` whose IR holds a <script>: the
extension must show those as text.

The static HTML fallbacks of the biggest outputs (the pass explorers' every IR
and diff, the LLVM listing: megabytes) are left out of the saved file to keep
it small; the extension renders the JSON payload, which is kept whole.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "tilelab_views.ipynb"

EVIL = "<img src=x onerror=alert(1)>"
HTML_LIMIT = 200_000  # characters of text/html kept per output

CELLS = [
    ("markdown", "# tilelab views\n\nSaved outputs for the JupyterLab extension's end-to-end test "
                 "(`extension/ui-tests/`). Regenerate with "
                 "`.venv/bin/python extension/ui-tests/make_notebook.py`."),
    ("code", "%load_ext tilelab\n"
             "import torch\n"
             "import tilelab\n"
             "import tilelab.language as T\n"
             "import tilelab.viz as viz\n"
             "from tilelab.notebook import passes_view"),
    ("code", '%%tilekernel --target cpu --args "x, y" --check "x + y" --bench "x + y" --source\n'
             "@tilelab.jit\n"
             "def vector_add(A, B, block_size: int = 256):\n"
             '    N = T.const("N")\n'
             "    A: T.Tensor((N,), T.float32)\n"
             "    B: T.Tensor((N,), T.float32)\n"
             "    C = T.empty((N,), T.float32)\n"
             "    with T.Kernel(T.ceildiv(N, block_size), threads=block_size) as block:\n"
             "        for i in T.Parallel(block_size):\n"
             "            index = block * block_size + i\n"
             "            if index < N:  # the last block may stick out\n"
             "                C[index] = A[index] + B[index]\n"
             "    return C\n"
             "\n"
             "x = torch.randn(100_000)\n"
             "y = torch.randn(100_000)"),
    ("code", '%%tilekernel --target cpu --kernel gemm_kernel --args "M=256, N=256, K=256" '
             "--layout c_fragment --layout a_shared --pipeline --dataflow\n"
             "from examples.gemm import gemm_kernel"),
    ("code", 'gemm = gemm_kernel.compile(M=256, N=256, K=256, target="cpu")\n'
             'viz.bank_conflict_view(gemm.trace, "a_shared")'),
    ("code", 'passes_view(gemm.trace, "all")'),
    ("code", "from examples.flash_attention import flash_attention_kernel\n"
             "\n"
             "try:  # CUDA C and PTX need the CUDA compiler, not a GPU\n"
             '    flash = flash_attention_kernel.compile(1, 2, 256, 64, target="cuda")\n'
             "except Exception:\n"
             '    flash = flash_attention_kernel.compile(1, 2, 256, 64, target="cpu")\n'
             'passes_view(flash.trace, "all")'),
    ("code", '%%tilekernel --args "N=64"\n'
             "@tilelab.jit\n"
             "def broken(X):\n"
             '    N = T.const("N")\n'
             "    X: T.Tensor((N,), T.float32)\n"
             "    with T.Kernel(1, threads=128) as block:\n"
             "        tile = T.alloc_fragment((64,), T.float32)\n"
             "        T.copy(X[0], undefined_buffer)"),
    ("code", "# Names and IR are data, never markup: the views must show these as text.\n"
             "import copy\n"
             "from IPython.display import display\n"
             "from tilelab.notebook import CheckView\n"
             "\n"
             f"evil = {EVIL!r}\n"
             "trace = copy.deepcopy(gemm.trace)\n"
             "trace.kernel = evil\n"
             "for later in trace.passes[1:]:\n"
             "    later.ir += '\\n# <script>window.__tilelab_xss = 1</script>'\n"
             "trace.layouts[evil] = trace.layouts['c_fragment']\n"
             'display(passes_view(trace, "changed"))\n'
             "display(viz.layout_view(trace, evil))\n"
             "display(CheckView(evil, evil, {'passed': False, 'max_abs_error': 1.0, "
             "'max_rel_error': 1.0, 'mismatched': 1, 'total': 2, 'rtol': 0.01, 'atol': 0.01, "
             "'message': evil}))"),
]


def main() -> int:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    for kind, source in CELLS:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        notebook.cells.append(make(source))
    started = time.time()
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    for cell in notebook.cells:  # tidy: no execution timing noise in the saved file
        cell.get("metadata", {}).pop("execution", None)
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html")
            if html is not None and len(html) > HTML_LIMIT:
                del output["data"]["text/html"]
    nbformat.write(notebook, OUT)
    size = OUT.stat().st_size
    print(f"wrote {OUT.relative_to(ROOT)} ({size / 1e6:.1f} MB) in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
