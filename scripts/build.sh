#!/usr/bin/env bash
# Sets up the machine (apt packages) and builds PipeMesh into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
# ccache: paths relative to the checkout, so clones in other folders (CI) hit the cache.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -G Ninja -B "$BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py
fi
cmake --build "$BUILD_DIR"
