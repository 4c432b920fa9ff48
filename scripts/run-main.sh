#!/usr/bin/env bash
# The main job: set up, build, import the default GPT model (a GPT-2 style
# model exported by torch.onnx.export with dynamic axes, committed under
# models/fixtures/) for batch 4 x seq 64 and print its IR summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
MODEL=${1:-models/fixtures/torch_gpt2_tiny_op17_dyn_fold.onnx}
BUILD_DIR=${BUILD_DIR:-build}
"$BUILD_DIR/bin/pipemesh-opt" "$MODEL" --batch=4 --seq=64 --pmesh-summary -o /dev/null
