#!/usr/bin/env bash
# Import benchmark: generates the GPT-2 124M (embedded weights) and 1.5B
# (external data) models with models/gen_gpt2.py, then times
# `pipemesh-opt MODEL --batch=8 --seq=1024` and reports wall time and peak
# RSS. Target (issue 2): 1.5B in under 5 s and under 1.5 GB RSS - the weights
# are never copied into the IR.
#   bench/import.sh [OUT_DIR]      (default bench/out; needs ~7 GB of disk)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/out}
mkdir -p "$OUT"
OPT=${PIPEMESH_OPT:-build/bin/pipemesh-opt}
[[ -x "$OPT" ]] || bash scripts/build.sh

gen() { # preset file [flags]
  local preset=$1 file=$2; shift 2
  if [[ ! -f "$file" ]]; then
    echo "generating $preset -> $file"
    /usr/bin/python3 models/gen_gpt2.py --preset "$preset" -o "$file" "$@"
  fi
}
gen 124M "$OUT/gpt2_124M.onnx"
gen 1.5B "$OUT/gpt2_1.5B.onnx" --external-data

printf "%-14s %10s %10s %12s\n" model "file MB" "wall s" "peak RSS MB"
for m in gpt2_124M gpt2_1.5B; do
  f="$OUT/$m.onnx"
  size=$(du -m "$f" | cut -f1)
  [[ -f "$f.data" ]] && size=$((size + $(du -m "$f.data" | cut -f1)))
  /usr/bin/time -f "%e %M" -o "$OUT/$m.time" "$OPT" "$f" --batch=8 --seq=1024 -o "$OUT/$m.mlir"
  read -r wall rss < "$OUT/$m.time"
  printf "%-14s %10s %10s %12s\n" "$m" "$size" "$wall" "$((rss / 1024))"
done
