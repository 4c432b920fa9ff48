#!/bin/bash
# How far a plan's simulated step is from what no schedule can beat: the busiest rank's
# collective stream (pipemesh-sim's collective_busy_s: gradient reductions and parameter
# gathers, which no overlap removes) and the busiest rank's compute.
#
#   bench/sim_floor.sh NAME MODEL NET "compile options"
#   bench/sim_floor.sh 1.3B@64-bfs 1.3B 25 "batch=1 pp=4 dp=16 vpp=3 microbatches=8 zero=1 schedule=bfs"
#
# MODEL: 1.3B, 7B or 13B (bench/out/sim_paper/gpt_MODEL.onnx, written by bench/sim_paper.py);
# NET: 25 or 100 (a100-40g-NETgbps); the options are added to "seq=2048 recompute=auto
# mem-limit=40GiB shapes-only=true", as bench/sim_paper.py compiles. BUILD (default build/)
# holds the binaries.
set -euo pipefail
name=$1 model=$2 net=$3 opts=$4
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BUILD:-$root/build}/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/pipemesh-opt" "$root/bench/out/sim_paper/gpt_$model.onnx" \
  --pipemesh-compile="seq=2048 recompute=auto mem-limit=40GiB shapes-only=true $opts" -o "$work/plan"
"$bin/pipemesh-sim" "$work/plan" --cluster "a100-40g-${net}gbps" --json "$work/sim.json" --quiet
python3 - "$work/sim.json" "$name" "$net" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<28} {sys.argv[3]:>3}G step {d['step_time_s']:.3f} s  "
      f"tok/s {d['tokens_per_s']:8.0f}  collective floor {d['collective_floor_s']:.3f} s  "
      f"compute {d['compute_max_s']:.3f} s  step / floor {d['step_time_s'] / d['floor_s']:.2f}")
PY
