#!/usr/bin/env bash
# Pack TileLang 0.1.15 for the GPU machine, where nothing installs from a registry, for
# bench/peer_tilelang.py. Its wheels (about 80 MB) travel in two parts, one `run` each
# (64 MiB a call), into a directory of their own: TileLang brings its own TVM, which
# cannot share a path with apache-tvm 0.27.
#
#   bash scripts/peer_pack.sh                                    # here: .peerpack/a, b
#   (device) carry [".peerpack/a"]: bash .peerpack/a/unpack.sh
#   (device) carry [".peerpack/b", ...]: bash .peerpack/b/unpack.sh && \
#       python3 bench/peer_tilelang.py --tilelang-site /tmp/tilelang-site --json OUT
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python

download() {
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$@"
}

rm -rf .peerpack
mkdir -p .peerpack/a .peerpack/b
download .peerpack/a tilelang==0.1.15 apache-tvm-ffi==0.1.12 torch-c-dlpack-ext cloudpickle
download .peerpack/b z3-solver==4.15.4.0
for part in a b; do
  cat > .peerpack/$part/unpack.sh <<UNPACK
set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \\
  --target /tmp/tilelang-site .peerpack/$part/*.whl
echo "TileLang part $part unpacked"
UNPACK
done
du -sh .peerpack/a .peerpack/b
