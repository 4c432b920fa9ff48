#!/usr/bin/env bash
# One command for a machine with one NVIDIA GPU (docs/cuda-backend.md):
#   1. builds pipemesh-opt, pipemesh-run and the CUDA tests/bench (build-gpu/);
#   2. runs the GPU tests (ctest -L gpu);
#   3. cuBLASLt GEMM TFLOP/s at GPT-2 124M / 350M shapes (B=16, T=1024) against
#      the device's peak, and the attention kernels (pipemesh-cuda-bench);
#   4. GPT-2 124M and 350M training on one GPU (B=16, T=1024, bf16 matmul
#      operands): tokens/s and MFU over the steps after the first, planned
#      versus actual device memory;
# and writes bench/out/gpu/gpu.json plus a short table (bench/out/gpu/gpu.txt; bench/out is not tracked).
# Budget: about 8 minutes on a 16-core H200 machine. Without a GPU it exits 1
# with a message. Environment: JOBS (build parallelism), BUILD_DIR (build-gpu),
# STEPS (training steps per model, default 6), PEAK_BF16 / PEAK_FP32 (TFLOP/s;
# default the H100/H200 SXM datasheet's 989 / 67), SKIP_BUILD=1 (use BUILD_DIR
# as is), MODELS ("124M 350M").
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench/gpu.sh: no NVIDIA GPU on this machine (nvidia-smi finds none): nothing to benchmark" >&2
  exit 1
fi
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-6}
PEAK_BF16=${PEAK_BF16:-989}
PEAK_FP32=${PEAK_FP32:-67}
MODELS=${MODELS:-"124M 350M"}
OUT=bench/out/gpu
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu-device.txt"

# --- 1. build --------------------------------------------------------------------
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  stamp "building into $BUILD_DIR (-j$JOBS)"
  export CCACHE_BASEDIR="$REPO" CCACHE_NOHASHDIR=1
  if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
    cmake -G Ninja -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPIPEMESH_ENABLE_CUDA=ON \
      -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
      -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py > "$WORK/cmake.log" 2>&1 || {
        tail -30 "$WORK/cmake.log"
        echo "bench/gpu.sh: configure failed (the runtime needs OpenBLAS, Open MPI, nlohmann-json," \
             "protobuf/ONNX; pipemesh-opt needs MLIR 19: docs/cuda-backend.md, 'On a GPU machine')" >&2
        exit 1; }
  fi
  ninja -C "$BUILD_DIR" -j"$JOBS" pipemesh-run pipemesh-opt pipemesh-cuda-kernels-test \
    pipemesh-cuda-bench > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
fi
BIN=$REPO/$BUILD_DIR/bin

# --- 2. GPU tests ----------------------------------------------------------------------
stamp "GPU tests"
(cd "$BUILD_DIR" && ctest -L gpu --output-on-failure --timeout 300) 2>&1 | tee "$OUT/gpu-tests.txt" | tail -15 || true
TESTS_OK=$(grep -q "100% tests passed" "$OUT/gpu-tests.txt" && echo true || echo false)

# --- 3. kernels ---------------------------------------------------------------------------
stamp "GEMM and attention benchmark"
"$BIN/pipemesh-cuda-bench" --json "$OUT/gpu-kernels.json" --peak-bf16 "$PEAK_BF16" \
  --peak-fp32 "$PEAK_FP32" | tee "$OUT/gpu-kernels.txt"

# --- 4. training ------------------------------------------------------------------------------
for m in $MODELS; do
  stamp "GPT-2 $m: model, plan, $STEPS steps"
  $PY models/gen_gpt2.py --preset "$m" --external-data -o "$WORK/gpt2-$m.onnx" > /dev/null
  "$BIN/pipemesh-opt" "$WORK/gpt2-$m.onnx" \
    --pipemesh-compile="batch=16 seq=1024 microbatches=1" -o "$WORK/gpt2-$m.plan" \
    > "$WORK/opt-$m.log" 2>&1 || { tail -20 "$WORK/opt-$m.log"; exit 1; }
  rm -f "$WORK/gpt2-$m.onnx" "$WORK/gpt2-$m.onnx.data"
  "$BIN/pipemesh-run" "$WORK/gpt2-$m.plan" --backend cuda --precision bf16 --steps "$STEPS" \
    --log-json "$OUT/gpu-train-$m.jsonl" > "$OUT/gpu-train-$m.txt" 2>&1 \
    || { tail -20 "$OUT/gpu-train-$m.txt"; exit 1; }
  cat "$OUT/gpu-train-$m.txt"
  # The plan's FLOPs per step, for MFU.
  $PY - "$WORK/gpt2-$m.plan" > "$WORK/flops-$m.txt" <<'PYEOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(40)
    n = struct.unpack("<Q", head[16:24])[0]
    man = json.loads(f.read(n))
print(man["model"].get("flops_per_step", 0), man["ranks"][0]["arena_bytes"])
PYEOF
  rm -f "$WORK/gpt2-$m.plan"
done

# --- summary ------------------------------------------------------------------------------------
stamp "summary"
$PY - "$OUT" "$WORK" "$PEAK_BF16" "$TESTS_OK" $MODELS <<'PYEOF'
import json, os, re, sys
out, work, peak, tests_ok, models = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "true", sys.argv[5:]
k = json.load(open(os.path.join(out, "gpu-kernels.json")))
res = {"device": k["device"], "peak_bf16_tflops": peak, "gpu_tests_passed": tests_ok,
       "gemms": k["gemms"], "attention": k["attention"], "training": []}
lines = [f"device: {k['device']}  (peak bf16 {peak:.0f} TFLOP/s)", f"gpu tests passed: {tests_ok}", "",
         "GEMM (bf16)                        TFLOP/s  % peak"]
for g in k["gemms"]:
    if g["type"] == "bf16":
        lines.append(f"  {g['model']:<10} {g['gemm']:<14} {g['tflops']:10.1f} {g['percent_of_peak']:6.1f}%")
lines += ["", "training (B=16, T=1024, bf16 matmuls)   tok/s      MFU   planned MiB  in use MiB"]
for m in models:
    log = [json.loads(l) for l in open(os.path.join(out, f"gpu-train-{m}.jsonl"))]
    steady = log[1:] or log
    ms = sorted(r["ms"] for r in steady)[len(steady) // 2]
    flops, arena = map(float, open(os.path.join(work, f"flops-{m}.txt")).read().split())
    tok = 16 * 1024 / (ms / 1000)
    mfu = flops / (ms / 1000) / (peak * 1e12) if flops else float("nan")
    txt = open(os.path.join(out, f"gpu-train-{m}.txt")).read()
    used = re.search(r"measured in use after start-up ([0-9.]+) MiB", txt)
    used = float(used.group(1)) if used else float("nan")
    res["training"].append({"model": m, "median_step_ms": ms, "tokens_per_s": tok, "mfu": mfu,
                            "flops_per_step": flops, "planned_arena_mib": arena / 2**20,
                            "device_mib_in_use": used, "losses": [r["loss"] for r in log]})
    lines.append(f"  GPT-2 {m:<6} {ms:9.1f} ms/step {tok:10.0f} {100*mfu:6.1f}%  {arena/2**20:10.0f}  {used:10.0f}")
json.dump(res, open(os.path.join(out, "gpu.json"), "w"), indent=1)
open(os.path.join(out, "gpu.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
stamp "done: $OUT/gpu.json, $OUT/gpu.txt"
