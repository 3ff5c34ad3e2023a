#!/usr/bin/env bash
# Set up tilelab on a fresh Debian machine, then start it. Safe to run again:
# every step checks first and does only what is missing.
#
#   1. system packages: graphviz (pass and dataflow graphs) and chromium (renders
#      HTML views to images); python3-venv too if Python cannot make a venv;
#   2. .venv with python3 (>= 3.10);
#   3. torch, then tilelab itself: pip install -e '.[dev]';
#   4. the JupyterLab extension: built from source with node and npm when Node.js >= 20
#      is here (scripts/build_extension.sh: npm ci, then the build), else the prebuilt
#      one in extension/tilelab_labextension; either is linked into .venv;
#   5. unless --no-run: JupyterLab on notebooks/ (if there are notebooks),
#      otherwise the runnable example examples/vector_add.py.
#
# Usage: scripts/setup.sh [--run | --no-run]
#
# Environment:
#   PYTHON                 the interpreter that makes the venv (default: python3)
#   TILELAB_JUPYTER_ARGS   extra arguments for `jupyter lab` (e.g. "--port 8890")
#
# GPU users: install any recent CUDA build of torch (>= 2.4) into .venv before
# running this script (e.g. `python3 -m venv .venv && .venv/bin/pip install torch`);
# an importable torch is left alone. Without one, this script installs torch==2.13.0.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

RUN=1
for arg in "$@"; do
    case "$arg" in
        --run) RUN=1 ;;
        --no-run) RUN=0 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "setup.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
    esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { echo "==> $*"; }
warn() { echo "setup.sh: warning: $*" >&2; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

PYTHON="${PYTHON:-python3}"
VENV=.venv
TORCH_VERSION=2.13.0

# ---------------------------------------------------------------- 1. system packages

python_can_make_venv() {
    command -v "$PYTHON" >/dev/null 2>&1 && "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1
}

# Debian names; a package is wanted only when what it provides is missing.
wanted=()
command -v dot >/dev/null 2>&1 || wanted+=(graphviz)
[ -x /usr/bin/chromium ] || wanted+=(chromium)
if [ ! -x "$VENV/bin/python" ] && ! python_can_make_venv; then
    wanted+=(python3 python3-venv)
fi

if [ ${#wanted[@]} -eq 0 ]; then
    log "system packages present (dot, chromium)"
else
    log "installing system packages: ${wanted[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 && SUDO=sudo || warn "not root and no sudo"
    fi
    apt_ok=1
    if ! command -v apt-get >/dev/null 2>&1; then
        warn "apt-get not found (not a Debian system?)"
        apt_ok=0
    elif ! $SUDO apt-get update; then
        apt_ok=0
    elif ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y "${wanted[@]}"; then
        apt_ok=0
    fi

    missing=()
    command -v dot >/dev/null 2>&1 || missing+=("dot (apt package graphviz)")
    [ -x /usr/bin/chromium ] || missing+=("/usr/bin/chromium (apt package chromium)")
    if [ ! -x "$VENV/bin/python" ] && ! python_can_make_venv; then
        missing+=("$PYTHON with the venv module (apt packages python3, python3-venv)")
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        printf 'setup.sh: error: still missing after apt-get:\n' >&2
        printf '    %s\n' "${missing[@]}" >&2
        die "install them (as root: apt-get install ${wanted[*]}) and run this script again"
    fi
    if [ "$apt_ok" -eq 0 ]; then
        warn "apt-get failed, but dot, chromium and python are present; continuing"
    fi
fi

# ---------------------------------------------------------------- 2. the virtualenv

python_is_recent() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; }

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    python_is_recent "$VENV/bin/python" ||
        die "$VENV has Python $("$VENV/bin/python" -V 2>&1); tilelab needs >= 3.10 (remove $VENV and rerun with PYTHON=python3.x)"
    log "using $VENV ($("$VENV/bin/python" -V 2>&1))"
else
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python >= 3.10"
    python_is_recent "$PYTHON" ||
        die "$PYTHON is $("$PYTHON" -V 2>&1); tilelab needs Python >= 3.10 (set PYTHON=python3.x)"
    [ -e "$VENV" ] && warn "$VENV exists but its python does not run; recreating it"
    log "creating $VENV with $("$PYTHON" -V 2>&1)"
    "$PYTHON" -m venv --clear "$VENV"
    "$VENV/bin/python" -m pip install --upgrade pip
fi
PIP=("$VENV/bin/python" -m pip)

# ---------------------------------------------------------------- 3. torch, then tilelab

# torch goes first: left to pip, `torch>=2.4` in pyproject.toml would pull the
# multi-gigabyte CUDA build even on machines that have no GPU.
if "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    log "torch present: $("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
else
    # On the project's CPU machines (CI included) this pin resolves to a local CPU
    # build; elsewhere it is PyPI's default build, which also runs on GPUs.
    log "installing torch==$TORCH_VERSION"
    "${PIP[@]}" install "torch==$TORCH_VERSION"
fi

log "installing tilelab (editable, with dev tools)"
"${PIP[@]}" install -e '.[dev]'

# ---------------------------------------------------------------- 4. the JupyterLab extension

# It ships prebuilt (pip install brings it, no node needed); here it is built from source
# when this machine can, and linked into the venv (an editable install skips data files).
node_major=0
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
fi
if [ "$node_major" -ge 20 ]; then
    log "building the JupyterLab extension from source (node $(node --version))"
    if ! VENV="$VENV" bash scripts/build_extension.sh; then
        warn "the extension's build failed; using the prebuilt one in extension/tilelab_labextension"
        VENV="$VENV" bash scripts/build_extension.sh --no-build
    fi
else
    warn "Node.js >= 20 with npm not found: using the prebuilt JupyterLab extension" \
        "(install Node.js to build it from source)"
    VENV="$VENV" bash scripts/build_extension.sh --no-build
fi

# ---------------------------------------------------------------- 5. run

if [ "$RUN" -eq 0 ]; then
    log "setup done"
    exit 0
fi

if compgen -G 'notebooks/*.ipynb' >/dev/null; then
    # Word splitting of TILELAB_JUPYTER_ARGS is intended: it holds several arguments.
    # shellcheck disable=SC2206
    jupyter_args=(${TILELAB_JUPYTER_ARGS:-})
    # Jupyter refuses to run as root (containers) unless told it may.
    [ "$(id -u)" -eq 0 ] && jupyter_args+=(--allow-root)
    log "starting JupyterLab on notebooks/ (open the URL it prints; Ctrl-C stops it)"
    exec "$VENV/bin/jupyter" lab notebooks/ "${jupyter_args[@]}"
elif [ -f examples/vector_add.py ]; then
    log "running examples/vector_add.py"
    exec "$VENV/bin/python" examples/vector_add.py
else
    log "setup done (no notebooks/ or examples/vector_add.py to run yet)"
fi
