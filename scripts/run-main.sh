#!/usr/bin/env bash
# The main job: set up, build, compile the default GPT model and train it on the
# embedded default corpus with `mpirun -np 1 pipemesh-run` (CPU backend).
#
# The default model is a small GPT-2 (4 layers, 128 wide, byte-level vocab of 256,
# written by models/gen_gpt2.py, deterministic from its seed); the corpus is the
# byte-level text embedded in pipemesh-run. Extra arguments go to pipemesh-run
# (e.g. --steps 50).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
OUT="$BUILD_DIR/main-job"
mkdir -p "$OUT"
MODEL="$OUT/default_gpt.onnx"
if [[ ! -f "$MODEL" ]]; then
  /usr/bin/python3 models/gen_gpt2.py --layers 4 --embd 128 --heads 4 --vocab 256 --ctx 128 \
    --seed 0 -o "$MODEL"
fi
"$BUILD_DIR/bin/pipemesh-opt" "$MODEL" \
  --pipemesh-compile="batch=8 seq=128 microbatches=2" -o "$OUT/default_gpt.plan"
"$BUILD_DIR/bin/pipemesh-opt" --print-plan "$OUT/default_gpt.plan" | sed -n '1,5p'
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun -np 1 "$BUILD_DIR/bin/pipemesh-run" "$OUT/default_gpt.plan" \
  --steps 150 --lr 2e-3 --warmup-steps 10 --lr-schedule cosine --min-lr 2e-4 \
  --weight-decay 0.1 --grad-clip 1.0 --log-json "$OUT/train.jsonl" "$@"
echo "main job: per-step log in $OUT/train.jsonl"
