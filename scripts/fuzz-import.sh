#!/usr/bin/env bash
# Fuzzes the ONNX importer with libFuzzer (+ASan/UBSan) for a bounded time.
#   scripts/fuzz-import.sh [SECONDS]   (default 300)
# Builds a separate clang tree in build-fuzz/ whose libraries are instrumented
# for coverage, seeds the corpus with the committed ONNX fixtures, and reports
# the number of executions. A crash leaves its input in build-fuzz/crashes/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-300}
bash scripts/setup.sh
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang-14 CXX=clang++-14 cmake -G Ninja -B build-fuzz \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
    -DPIPEMESH_ENABLE_FUZZER=ON \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
fi
cmake --build build-fuzz --target pipemesh-fuzz-import
mkdir -p build-fuzz/corpus build-fuzz/crashes
# Seeds: small models only (mutating megabytes of weights teaches the fuzzer
# nothing): the shapes-only GPTs, and every ONNX text and binary test input.
cp -n models/fixtures/*shapes_only*.onnx build-fuzz/corpus/ 2>/dev/null || true
find test/Import \( -name '*.onnxtxt' -o -name '*.onnx' \) -size -64k \
  -exec cp -n {} build-fuzz/corpus/ \; 2>/dev/null || true
# ... and the ONNX text models written inline in the lit tests (split-file sections).
/usr/bin/python3 - <<'EOF'
import glob, os, re
for test in glob.glob("test/Import/*.test"):
    parts = re.split(r"^#--- (\S+)\n", open(test).read(), flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2]):
        seed = f"build-fuzz/corpus/{os.path.basename(test)[:-len('.test')]}-{name}"
        if name.endswith(".onnxtxt") and not os.path.exists(seed):
            with open(seed, "w") as f:
                f.write(body)
EOF
# Leak checking off: the fuzz target keeps one MLIRContext for all inputs.
ASAN_OPTIONS=detect_leaks=0 build-fuzz/bin/pipemesh-fuzz-import build-fuzz/corpus \
  -max_total_time="$SECONDS_TO_RUN" -max_len=300000 -rss_limit_mb=4096 -timeout=20 \
  -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 2>&1 | tee build-fuzz/fuzz.log | tail -20
