#!/usr/bin/env bash
# The GPU check: tilelab on a machine with an NVIDIA GPU, used as its users use it —
# kernels compiled in process (TVM and nvcc there), the course in real Jupyter kernels.
# Run it on a GPU machine in every session that touches the compiler or the course.
#
#   scripts/gpu_check.sh                 # every step below, in order
#   scripts/gpu_check.sh tests course    # some steps (each fits a 10-minute slot)
#
# Steps:
#   env        what the machine has: GPU, nvcc, torch, TVM, tilelab's choice of arch
#   tests      pytest -m gpu: suite kernels compiled in process and from exported
#              artifacts, every target spelling, every notebook view on a GPU kernel,
#              the measured pipeline replay; the exercise checkers on GPU tensors
#   course     every notebook 00-.. top to bottom in a real kernel with the solutions'
#              answers: no error, every check correct; -> $RESULTS/course_<gpu>.json
#   compile    cold and warm compile of the course GEMM and FlashAttention from a cell
#              -> $RESULTS/compile_<gpu>.json
#   sanitize   compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the
#              course and suite kernels (tilelab.testing.sanitize)
#   difftest   generated programs on the CPU backend and the GPU, compared
#              (tilelab.testing.difftest), DIFFTEST_COUNT of them from DIFFTEST_START, or
#              as many as DIFFTEST_SECONDS allow (the summary says which were checked)
#
# Environment: PYTHON (default python3), RESULTS (default bench/results),
# GPU_TAG (file-name tag, default h200), DIFFTEST_COUNT (default 500), DIFFTEST_SEED (0),
# DIFFTEST_START (0), DIFFTEST_SECONDS (480: a 10-minute slot),
# DIFFTEST_SHRINK (seconds to shrink each failure, default 30),
# COURSE_SAVE (a folder: keep the executed notebooks there).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PYTHON:-python3}
RESULTS=${RESULTS:-bench/results}
TAG=${GPU_TAG:-h200}
export PYTHONUNBUFFERED=1
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
mkdir -p "$RESULTS"

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(env tests course compile sanitize difftest)

step_env() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || return 1
    "$PY" - <<'EOF'
import shutil, torch, tvm, tilelab
from tilelab.backends.cuda import nvcc
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name())
print("tvm", tvm.__version__, "tilelab", tilelab.__file__)
print("nvcc", nvcc.find_nvcc(), "arch", nvcc.default_arch(), "sanitizer",
      shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer")
EOF
}

step_tests() {
    "$PY" -m pytest -q -m gpu tests/ -p no:cacheprovider &&
        "$PY" -m pytest -q -p no:cacheprovider tests/test_notebooks.py -k checker
}

step_course() {
    "$PY" scripts/run_course.py --json "$RESULTS/course_$TAG.json" ${COURSE_SAVE:+--save "$COURSE_SAVE"}
}

step_compile() { "$PY" bench/notebook_magic.py --target cuda --json "$RESULTS/compile_$TAG.json"; }

step_sanitize() { "$PY" -m tilelab.testing.sanitize; }

step_difftest() {
    # --seconds: a slot that ends still gets the summary line, with the programs checked
    "$PY" -m tilelab.testing.difftest --target cuda --seed "${DIFFTEST_SEED:-0}" \
        --start "${DIFFTEST_START:-0}" --count "${DIFFTEST_COUNT:-500}" --jobs "$(nproc)" \
        --shrink-seconds "${DIFFTEST_SHRINK:-30}" --seconds "${DIFFTEST_SECONDS:-480}"
}

failed=()
for step in "${steps[@]}"; do
    if ! declare -F "step_$step" >/dev/null; then
        echo "gpu_check: unknown step '$step'" >&2
        exit 2
    fi
    echo "==> $step"
    started=$SECONDS
    if "step_$step"; then
        echo "==> $step passed ($((SECONDS - started)) s)"
    else
        echo "==> $step FAILED ($((SECONDS - started)) s)"
        failed+=("$step")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_check: failed: ${failed[*]}"
    exit 1
fi
echo "gpu_check: all passed (${steps[*]})"
