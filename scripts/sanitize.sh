#!/usr/bin/env bash
# Builds PipeMesh with AddressSanitizer and UndefinedBehaviorSanitizer (float
# casts included) into build-asan/ (or $BUILD_DIR) and runs every ctest test
# there. Each process the tests start (tools, mpirun ranks) writes its
# sanitizer reports to <build>/sanitizer-reports/; the script fails if there
# is any.
#   scripts/sanitize.sh [ctest arguments, e.g. -R runtime]
# About 15 minutes of build on 2 cores (ccache helps later runs), then the
# suite at a few times its usual time. The CUDA kernels are not instrumented.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
BUILD_DIR=${BUILD_DIR:-build-asan}
# No vptr check: Debian's LLVM and MLIR are built without RTTI, so the dynamic
# type of an object they made (an LLVM command-line option, for one) cannot be
# checked, and every member call on one would be reported.
sanitizers="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize=vptr"
# Undefined behaviour aborts the process (so a test fails even where its
# environment loses UBSAN_OPTIONS) instead of printing and going on.
compile_flags="-fno-omit-frame-pointer -fno-sanitize-recover=undefined,float-cast-overflow"
# Configured every time (a no-op when nothing changed), so a tree made with
# other flags gets these.
cmake -G Ninja -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
  -DCMAKE_C_FLAGS="$sanitizers $compile_flags" \
  -DCMAKE_CXX_FLAGS="$sanitizers $compile_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" \
  -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers" \
  -DCMAKE_MODULE_LINKER_FLAGS="$sanitizers"
cmake --build "$BUILD_DIR"
reports="$PWD/$BUILD_DIR/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# Leak checking off: the tools keep their MLIR context until exit. The BLAS
# re-exec test preloads a fake BLAS ahead of the ASan runtime.
export ASAN_OPTIONS="detect_leaks=0:verify_asan_link_order=0:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$reports/ubsan"
status=0
(cd "$BUILD_DIR" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  ctest -j2 --timeout 3000 --output-on-failure "$@") || status=$?
found=$(find "$reports" -type f | wc -l)
if [[ $found -gt 0 ]]; then
  echo "sanitize: $found report file(s) in $reports:"
  head -n 40 "$reports"/*
  exit 1
fi
echo "sanitize: no sanitizer reports (ctest exit $status)"
exit $status
