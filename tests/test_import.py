"""`import tilelab` must not import TVM: exported GPU kernels run where TVM is absent."""

import subprocess
import sys


def test_import_tilelab_does_not_import_tvm():
    code = "import sys, tilelab; assert 'tvm' not in sys.modules, 'tvm imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_compiling_imports_tvm_lazily():
    code = ("import sys, tilelab; tilelab.jit; import tilelab.language as T; "
            "assert 'tvm' in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
