#!/usr/bin/env bash
# Build tilelab's JupyterLab extension (extension/) from source with this machine's
# node and npm, and install it into the venv. Safe to run again: a step whose inputs
# have not changed is skipped.
#
#   1. npm ci in extension/ (exactly package-lock.json), unless node_modules has it already;
#   2. the build: TypeScript -> extension/lib/, then `jupyter labextension build`
#      (@jupyterlab/builder, against the venv's JupyterLab) -> extension/build/tilelab_labextension/
#      (git-ignored: webpack's file names depend on where the venv is, so a build here must
#      not touch the tracked prebuilt copy in extension/tilelab_labextension/, which the
#      Python package ships through pyproject.toml's data-files);
#   3. link $VENV/share/jupyter/labextensions/tilelab to the build: an editable install
#      (`pip install -e`) skips data files, and a link follows later rebuilds.
#
# Usage: scripts/build_extension.sh [--force] [--no-build] [--prebuilt]
#   --force      rebuild even if the sources did not change
#   --no-build   only step 3, with the tracked prebuilt files (what setup.sh does without node)
#   --prebuilt   (for developers who changed extension/src) rebuild the tracked prebuilt copy
#                extension/tilelab_labextension/ and link the venv to it; commit the result
#
# Environment: VENV (default .venv), the virtualenv with JupyterLab.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

FORCE=0
BUILD=1
PREBUILT=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        --no-build) BUILD=0 ;;
        --prebuilt) PREBUILT=1 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "build_extension.sh: unknown option '$arg'" >&2; usage >&2; exit 2 ;;
    esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VENV="${VENV:-.venv}"
EXT=extension
TRACKED="$EXT/tilelab_labextension"
OUT="$EXT/build/tilelab_labextension"
[ "$PREBUILT" -eq 1 ] && OUT=$TRACKED
[ "$BUILD" -eq 0 ] && OUT=$TRACKED

log() { echo "==> $*"; }
die() { echo "build_extension.sh: error: $*" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || die "no $VENV/bin/python: run scripts/setup.sh first"
"$VENV/bin/python" -c 'import jupyterlab' 2>/dev/null ||
    die "JupyterLab is not installed in $VENV (pip install jupyterlab, or scripts/setup.sh)"

# The sources' fingerprint: the same files and format as tests/test_extension.py checks.
sources_hash() {
    "$VENV/bin/python" - "$EXT" <<'EOF'
import hashlib, sys
from pathlib import Path
root = Path(sys.argv[1])
files = [root / name for name in ("package.json", "package-lock.json", "tsconfig.json",
                                  "install.json", "scripts/build-labextension.mjs")]
files += [p for folder in ("src", "style") for p in (root / folder).rglob("*") if p.is_file()]
digest = hashlib.sha256()
for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
    digest.update(f"{path.relative_to(root).as_posix()}\n".encode())
    digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
print(digest.hexdigest())
EOF
}

if [ "$BUILD" -eq 1 ]; then
    command -v node >/dev/null 2>&1 || die "node not found (install Node.js >= 20 with npm)"
    command -v npm >/dev/null 2>&1 || die "npm not found"
    node_major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$node_major" -ge 20 ] || die "node $(node --version) is too old: the build needs Node.js >= 20"

    # 1. dependencies, exactly as locked
    lock_hash=$(sha256sum "$EXT/package-lock.json" | cut -d' ' -f1)
    if [ "$FORCE" -eq 0 ] && [ -f "$EXT/node_modules/.tilelab-lock" ] &&
        [ "$(cat "$EXT/node_modules/.tilelab-lock")" = "$lock_hash" ]; then
        log "extension: node_modules matches package-lock.json"
    else
        log "extension: npm ci"
        started=$SECONDS
        (cd "$EXT" && npm ci --no-audit --no-fund)
        echo "$lock_hash" >"$EXT/node_modules/.tilelab-lock"
        log "extension: npm ci took $((SECONDS - started)) s"
    fi

    # 2. the build
    hash=$(sources_hash)
    if [ "$FORCE" -eq 0 ] && [ -f "$OUT/sources.sha256" ] &&
        [ "$(cat "$OUT/sources.sha256")" = "$hash" ] && [ "$PREBUILT" -eq 0 ]; then
        log "extension: built already (sources unchanged)"
    else
        log "extension: building into $OUT"
        started=$SECONDS
        if [ "$PREBUILT" -eq 1 ]; then
            (cd "$EXT" && JUPYTER="$ROOT/$VENV/bin/jupyter" npm run build)
        else
            (cd "$EXT" && JUPYTER="$ROOT/$VENV/bin/jupyter" npm run build:lib &&
                JUPYTER="$ROOT/$VENV/bin/jupyter" node scripts/build-labextension.mjs \
                    --out "$ROOT/$OUT")
        fi
        echo "$hash" >"$OUT/sources.sha256"
        log "extension: build took $((SECONDS - started)) s"
    fi
fi

# 3. install into the venv
[ -f "$OUT/package.json" ] || die "no prebuilt extension in $OUT"
target="$VENV/share/jupyter/labextensions/tilelab"
mkdir -p "$(dirname "$target")"
if [ -L "$target" ] && [ "$(readlink "$target")" = "$ROOT/$OUT" ]; then
    log "extension: $target links to $OUT"
else
    rm -rf "$target"
    ln -s "$ROOT/$OUT" "$target"
    log "extension: linked $target -> $OUT"
fi
