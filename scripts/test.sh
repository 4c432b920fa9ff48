#!/usr/bin/env bash
# Sets up, builds and runs every test (lit + FileCheck and ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" --output-on-failure
