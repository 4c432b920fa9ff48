#!/usr/bin/env bash
# One command for a machine with one NVIDIA GPU (docs/cuda-backend.md):
#   1. builds pipemesh-opt, pipemesh-run and the CUDA tests/bench (build-gpu/), or, with
#      BUNDLE=.gpu-bundle/bundle.tar.gz, unpacks what bench/gpu_bundle.sh built elsewhere
#      (for GPU machines without MLIR, Open MPI, OpenBLAS or protobuf);
#   2. runs the GPU tests (the kernels against the CPU backend; 10 training steps
#      against the CPU run);
#   3. cuBLASLt GEMM TFLOP/s at GPT-2 124M / 350M shapes (B=16, T=1024) against
#      the device's peak, and the attention kernels (pipemesh-cuda-bench);
#   4. GPT-2 124M and 350M training on one GPU (B=16, T=1024, bf16 matmul
#      operands): tokens/s and MFU over the steps after the first, planned
#      versus actual device memory; the same models in PyTorch (bench/torch_gpt2.py,
#      bf16 autocast, flash attention, fused AdamW) as the baseline of the same run;
#   5. a per-op profile of each model (steps 2-3), 124M without the runtime's fusions,
#      with staged attention operands and with 128-row attention blocks (what each
#      is worth), and compute-sanitizer
#      over the kernel tests (where the tool runs);
# and writes bench/out/gpu/gpu.json plus a short table (bench/out/gpu/gpu.txt; bench/out is
# not tracked). Budget: about 8 minutes on a 16-core H200 machine. Without a GPU it exits 1
# with a message. Environment: JOBS (build parallelism), BUILD_DIR (build-gpu),
# STEPS (training steps per model, default 6), PEAK_BF16 / PEAK_FP32 (TFLOP/s;
# default the H100/H200 SXM datasheet's 989 / 67), SKIP_BUILD=1 (use BUILD_DIR
# as is), MODELS ("124M 350M"), BUNDLE (above), SANITIZER_S (time for compute-sanitizer,
# default 90; 0 skips it), MEMCHECK_FILTER (the kernel tests memcheck runs),
# RACECHECK=0 (no racecheck of the tensor-core attention test), TORCH=0 (no
# PyTorch baseline), GPU_OUT (the output folder instead of bench/out/gpu).
set -uo pipefail
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
SANITIZER_S=${SANITIZER_S:-90}
# memcheck: the kernels without cuBLASLt inside (its own kernels are slow under the tool)
MEMCHECK_FILTER=${MEMCHECK_FILTER:-CudaKernels.*:CudaAttention.*}
OUT=${GPU_OUT:-bench/out/gpu}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The interpreter with numpy (Debian's /usr/bin/python3 here; a GPU image's own python3
# holds numpy and PyTorch).
PY=""
for p in ${PYTHON:-} /usr/bin/python3 python3; do
  if "$p" -c "import numpy" >/dev/null 2>&1; then PY=$p; break; fi
done
[[ -n $PY ]] || { echo "bench/gpu.sh: no python3 with numpy" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
FAILED=()

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu-device.txt"

# --- 1. build or unpack ----------------------------------------------------------------------
if [[ -n ${BUNDLE:-} ]]; then
  stamp "unpacking $BUNDLE"
  B=$WORK/bundle
  mkdir -p "$B" && tar -C "$B" -xzf "$BUNDLE" || { echo "bench/gpu.sh: cannot unpack $BUNDLE" >&2; exit 1; }
  BIN=$B/bin
  # The machine's cuBLASLt and NCCL (CUDA toolkit or the nvidia-* Python wheels).
  CUDA_DIRS=""
  for lib in libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
    f=$(find /usr/local /usr/lib /opt -name "$lib" 2>/dev/null | head -1)
    if [[ -n $f ]]; then
      CUDA_DIRS="$CUDA_DIRS:$(dirname "$f")"
    else
      echo "bench/gpu.sh: $lib not found on this machine" >&2
    fi
  done
  export LD_LIBRARY_PATH="$B/lib$CUDA_DIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Open MPI from the bundle, one process without mpirun.
  export OPAL_PREFIX=$B/ompi OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self OMPI_MCA_pml=ob1
  echo "bundle of commit $(cat "$B/commit"); LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  TEST_PLAN=$B/plans/gpt.plan
  TEST_PLAN_ODD=$B/plans/odd.plan
  TEST_PLAN_GQA=$B/plans/gqa.plan
  plan_of() { echo "$B/plans/gpt2-$1.shapes.plan"; }
else
  if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    stamp "building into $BUILD_DIR (-j$JOBS)"
    export CCACHE_BASEDIR="$REPO" CCACHE_NOHASHDIR=1
    if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
      cmake -G Ninja -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPIPEMESH_ENABLE_CUDA=ON \
        -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
        -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py > "$WORK/cmake.log" 2>&1 || {
          tail -30 "$WORK/cmake.log"
          echo "bench/gpu.sh: configure failed (the runtime needs OpenBLAS, Open MPI, nlohmann-json," \
               "protobuf/ONNX; pipemesh-opt needs MLIR 19). Without them: bench/gpu_bundle.sh on a" \
               "machine that has them, then BUNDLE=.gpu-bundle/bundle.tar.gz bench/gpu.sh here" >&2
          exit 1; }
    fi
    ninja -C "$BUILD_DIR" -j"$JOBS" pipemesh-run pipemesh-opt pipemesh-cuda-kernels-test \
      pipemesh-cuda-bench > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
  fi
  BIN=$REPO/$BUILD_DIR/bin
  TEST_PLAN=""
  TEST_PLAN_ODD=""
  TEST_PLAN_GQA=""
  source bench/gpt2_plan.sh
  plan_of() {
    gpt2_shapes_plan "$1" "$BIN/pipemesh-opt" "$PY" "$WORK/gpt2-$1.shapes.plan" &&
      echo "$WORK/gpt2-$1.shapes.plan"
  }
fi

# The GPT-2 plans' weights, drawn on the CPU while the GPU tests run.
for m in $MODELS; do
  ( $PY bench/fill_plan_weights.py "$(plan_of "$m")" -o "$WORK/gpt2-$m.plan" \
      > "$WORK/fill-$m.log" 2>&1 || echo failed >> "$WORK/fill-$m.log" ) &
done

# --- 2. GPU tests ----------------------------------------------------------------------------------
stamp "GPU tests: kernels against the CPU backend"
timeout 150 "$BIN/pipemesh-cuda-kernels-test" 2>&1 | tee "$OUT/gpu-kernels-test.txt" | tail -40
[[ ${PIPESTATUS[0]} == 0 ]] || FAILED+=("kernels test")
stamp "GPU tests: 10 training steps against the CPU backend"
PIPEMESH_RUN=$BIN/pipemesh-run PIPEMESH_CUDA_PROBE=$BIN/pipemesh-cuda-kernels-test \
  PIPEMESH_CUDA_TEST_PLAN=$TEST_PLAN PIPEMESH_CUDA_TEST_PLAN_ODD=$TEST_PLAN_ODD \
  PIPEMESH_CUDA_TEST_PLAN_GQA=$TEST_PLAN_GQA \
  PIPEMESH_OPT=$BIN/pipemesh-opt \
  timeout 200 $PY runtime/tests/cuda/test_cuda_training.py 2>&1 | tee "$OUT/gpu-training-test.txt" | tail -30
[[ ${PIPESTATUS[0]} == 0 ]] || FAILED+=("training test")

# --- 3. kernels ---------------------------------------------------------------------------------------
stamp "GEMM and attention benchmark"
timeout 120 "$BIN/pipemesh-cuda-bench" --json "$OUT/gpu-kernels.json" --peak-bf16 "$PEAK_BF16" \
  --peak-fp32 "$PEAK_FP32" 2>&1 | tee "$OUT/gpu-kernels.txt"
[[ ${PIPESTATUS[0]} == 0 ]] || FAILED+=("kernel benchmark")

# --- 4. training -------------------------------------------------------------------------------------
wait
for m in $MODELS; do
  cat "$WORK/fill-$m.log"
  stamp "GPT-2 $m: $STEPS steps"
  if timeout 150 "$BIN/pipemesh-run" "$WORK/gpt2-$m.plan" --backend cuda --precision bf16 --steps "$STEPS" \
      --log-json "$OUT/gpu-train-$m.jsonl" > "$OUT/gpu-train-$m.txt" 2>&1; then
    cat "$OUT/gpu-train-$m.txt"
  else
    tail -20 "$OUT/gpu-train-$m.txt"; FAILED+=("GPT-2 $m training")
  fi
  $PY - "$WORK/gpt2-$m.plan" > "$WORK/flops-$m.txt" <<'PYEOF'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    head = f.read(40)
    n = struct.unpack("<Q", head[16:24])[0]
    man = json.loads(f.read(n))
print(man["model"].get("flops_per_step", 0), man["ranks"][0]["arena_bytes"])
PYEOF
  if [[ ${TORCH:-1} != 0 ]]; then
    stamp "GPT-2 $m in PyTorch (the baseline)"
    timeout 120 $PY bench/torch_gpt2.py --preset "$m" --json "$OUT/torch-$m.json" 2>&1 | tail -3 \
      || FAILED+=("PyTorch $m")
  fi
done

# --- summary (written before the sanitizers and again after them) -------------------------------
summarize() {
$PY - "$OUT" "$WORK" "$PEAK_BF16" "$(IFS=';'; echo "${FAILED[*]:-}")" $MODELS <<'PYEOF'
import json, os, re, sys
out, work, peak, failed, models = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5:]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        return None
k = load("gpu-kernels.json") or {"device": "?", "gemms": [], "attention": []}
res = {"device": k["device"], "peak_bf16_tflops": peak, "failed": failed.split(";") if failed else [],
       "gemms": k["gemms"], "attention": k["attention"], "training": []}
lines = [f"device: {k['device']}  (peak bf16 {peak:.0f} TFLOP/s)",
         "failed: " + (failed.replace(";", ", ") or "nothing"), "", "GEMM (bf16)                        TFLOP/s  % peak"]
for g in k["gemms"]:
    if g["type"] == "bf16":
        lines.append(f"  {g['model']:<10} {g['gemm']:<14} {g['tflops']:10.1f} {g['percent_of_peak']:6.1f}%")
lines += ["", "attention (B=16, heads of 64, T=1024, causal)   fwd ms   bwd ms"]
for a in k["attention"]:
    lines.append(f"  {a['kernels']:<22} {a['heads']:>3} heads    {a['fwd_ms']:8.3f} {a['bwd_ms']:8.3f}")
lines += ["", "training (B=16, T=1024)             ms/step      tok/s    MFU  planned MiB  in use MiB"]
for m in models:
    try:
        log = [json.loads(l) for l in open(os.path.join(out, f"gpu-train-{m}.jsonl"))]
        flops, arena = map(float, open(os.path.join(work, f"flops-{m}.txt")).read().split())
    except (OSError, ValueError):
        lines.append(f"  GPT-2 {m:<6} pipemesh: no result")
        continue
    steady = log[1:] or log
    ms = sorted(r["ms"] for r in steady)[len(steady) // 2]
    tok = 16 * 1024 / (ms / 1000)
    mfu = flops / (ms / 1000) / (peak * 1e12) if flops else float("nan")
    txt = open(os.path.join(out, f"gpu-train-{m}.txt")).read()
    used = re.search(r"measured in use after start-up ([0-9.]+) MiB", txt)
    used = float(used.group(1)) if used else float("nan")
    row = {"model": m, "median_step_ms": ms, "tokens_per_s": tok, "mfu": mfu,
           "flops_per_step": flops, "planned_arena_mib": arena / 2**20,
           "device_mib_in_use": used, "losses": [r["loss"] for r in log]}
    lines.append(f"  GPT-2 {m:<6} pipemesh {ms:9.1f} {tok:10.0f} {100*mfu:5.1f}%  {arena/2**20:10.0f}  {used:10.0f}")
    t = load(f"torch-{m}.json")
    if t:
        tmfu = flops / (t["median_step_ms"] / 1000) / (peak * 1e12)
        row["torch"] = t
        row["speed_vs_torch"] = t["median_step_ms"] / ms
        lines.append(f"  GPT-2 {m:<6} torch    {t['median_step_ms']:9.1f} {t['tokens_per_s']:10.0f} "
                     f"{100*tmfu:5.1f}%  {'':10}  {t['max_memory_mib']:10.0f}  ({t['framework']})")
        lines.append(f"  GPT-2 {m:<6} pipemesh / torch throughput: {row['speed_vs_torch']:.3f}")
    try:
        nd = [json.loads(l) for l in open(os.path.join(out, f"gpu-train-{m}-nondet.jsonl"))][1:]
        nms = sorted(r["ms"] for r in nd)[len(nd) // 2]
        row["nondeterministic_median_step_ms"] = nms
        lines.append(f"  GPT-2 {m:<6} pipemesh --deterministic off {nms:9.1f} ms/step")
    except (OSError, ValueError, IndexError):
        pass
    for ab, what in (("fuse", "PIPEMESH_CUDA_FUSE=0"), ("staged", "PIPEMESH_CUDA_STAGED_ATTENTION=1"),
                     ("rows", "PIPEMESH_CUDA_ATTENTION_ROWS=128")):
        try:
            ab_log = [json.loads(l) for l in open(os.path.join(out, f"gpu-ablation-{ab}-{m}.jsonl"))][1:]
            ams = sorted(r["ms"] for r in ab_log)[len(ab_log) // 2]
            row[f"ablation_{ab}_median_step_ms"] = ams
            lines.append(f"  GPT-2 {m:<6} pipemesh with {what} {ams:9.1f} ms/step")
        except (OSError, ValueError, IndexError):
            pass
    res["training"].append(row)
json.dump(res, open(os.path.join(out, "gpu.json"), "w"), indent=1)
open(os.path.join(out, "gpu.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
}

# --- 5. profile and sanitizer -------------------------------------------------------------------------
for m in $MODELS; do
  stamp "per-op profile of GPT-2 $m (--profile synchronizes after every op; steps 2-3)"
  timeout 90 "$BIN/pipemesh-run" "$WORK/gpt2-$m.plan" --backend cuda --precision bf16 --steps 3 \
    --profile > "$OUT/gpu-profile-$m.txt" 2>&1 || FAILED+=("profile $m")
  grep "fused:" "$OUT/gpu-profile-$m.txt" | sed 's/.*backend/backend/'
  tail -50 "$OUT/gpu-profile-$m.txt"
done
m=${MODELS%% *}
stamp "GPT-2 $m with --deterministic off (cuBLASLt may split K)"
timeout 90 "$BIN/pipemesh-run" "$WORK/gpt2-$m.plan" --backend cuda --precision bf16 --steps 4 \
  --deterministic off --log-json "$OUT/gpu-train-$m-nondet.jsonl" > "$OUT/gpu-train-$m-nondet.txt" 2>&1 \
  || FAILED+=("GPT-2 $m --deterministic off")
grep "^step" "$OUT/gpu-train-$m-nondet.txt"
# What the runtime's fusions are worth, and the attention's other variants: the
# same steps with the switch (ablation-*.jsonl, in the summary).
for ab in "fuse PIPEMESH_CUDA_FUSE=0" "staged PIPEMESH_CUDA_STAGED_ATTENTION=1" \
          "rows PIPEMESH_CUDA_ATTENTION_ROWS=128"; do
  set -- $ab
  stamp "GPT-2 $m with $2"
  env "$2" timeout 90 "$BIN/pipemesh-run" "$WORK/gpt2-$m.plan" --backend cuda --precision bf16 \
    --steps 4 --log-json "$OUT/gpu-ablation-$1-$m.jsonl" > "$OUT/gpu-ablation-$1-$m.txt" 2>&1 \
    || FAILED+=("GPT-2 $m with $2")
  grep "^step" "$OUT/gpu-ablation-$1-$m.txt"
done
stamp "summary (before the sanitizers)"
summarize > /dev/null
if [[ $SANITIZER_S != 0 ]] && command -v compute-sanitizer >/dev/null 2>&1; then
  stamp "compute-sanitizer memcheck over the kernel tests (at most $SANITIZER_S s)"
  timeout "$SANITIZER_S" compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$BIN/pipemesh-cuda-kernels-test" --gtest_filter="$MEMCHECK_FILTER" > "$OUT/gpu-sanitizer.txt" 2>&1
  rc=$?
  tail -8 "$OUT/gpu-sanitizer.txt"
  case $rc in 0) echo "sanitizer: clean";; 124) echo "sanitizer: stopped at the time limit";;
    *) echo "sanitizer: exit $rc"; FAILED+=("compute-sanitizer");; esac
fi
if [[ $SANITIZER_S != 0 && ${RACECHECK:-1} != 0 ]] && command -v compute-sanitizer >/dev/null 2>&1; then
  stamp "compute-sanitizer racecheck over the attention kernels' tests (shared-memory tiles)"
  timeout "$SANITIZER_S" compute-sanitizer --tool racecheck --error-exitcode 3 \
    "$BIN/pipemesh-cuda-kernels-test" --gtest_filter='CudaAttention.TensorCoreBf16MatchesCpu' \
    > "$OUT/gpu-racecheck.txt" 2>&1
  rc=$?
  tail -4 "$OUT/gpu-racecheck.txt"
  case $rc in 0) echo "racecheck: clean";; 124) echo "racecheck: stopped at the time limit";;
    *) echo "racecheck: exit $rc"; FAILED+=("racecheck");; esac
fi

stamp "summary"
summarize
stamp "done: $OUT/gpu.json, $OUT/gpu.txt"
[[ ${#FAILED[@]} == 0 ]]
