# Sourced by bench/gpu.sh and bench/gpu_bundle.sh: the GPU benchmark's GPT-2 plan (B=16,
# T=1024, one micro-batch), shapes only (bench/fill_plan_weights.py draws its weights).
#   gpt2_shapes_plan PRESET PIPEMESH_OPT PYTHON OUT.plan     (from the repository root)
gpt2_shapes_plan() {
  local preset=$1 opt=$2 py=$3 out=$4 onnx rc
  onnx=$(mktemp --suffix=.onnx)
  "$py" models/gen_gpt2.py --preset "$preset" --shapes-only -o "$onnx" > /dev/null &&
    "$opt" "$onnx" "--pipemesh-compile=batch=16 seq=1024 microbatches=1 shapes-only=true" \
      -o "$out" > /dev/null
  rc=$?
  rm -f "$onnx"
  return $rc
}
