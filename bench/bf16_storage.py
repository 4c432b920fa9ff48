#!/usr/bin/python3
"""bf16 storage on the CPU backend (activations=bf16, params=bf16, both): step time, arena,
staging space and peak RSS against the same plan in f32, measured in the same run.

Model: the CPU-step benchmark's GPT-2 style L=6, C=384, H=6, V=8192, T=256, micro-batch B=4
(models/gen_gpt2.py). The plans run in alternating rounds (the machine's load drifts); each
side's time is the median of all rounds' steps after the first. The CPU kernels compute in
f32 on widened copies of the bf16 buffers, so this measures what the storage types cost and
save on this backend, not bf16 arithmetic.

    bench/bf16_storage.py [--build build] [--steps 4] [--rounds 2] [--json OUT]
"""
import json
import os
import statistics
import subprocess

import cpu_model

SIDES = {  # name: compile options
    "f32": "",
    "activations=bf16": "activations=bf16",
    "params=bf16": "params=bf16",
    "both": "activations=bf16 params=bf16",
}


def main():
    ap = cpu_model.parser(__doc__, steps=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    opt, run, work, model = cpu_model.setup(args)
    plans, sides = {}, {}
    for name, options in SIDES.items():
        tag = name.replace("=", "_")
        plans[name] = os.path.join(work, f"gpt_L6_{tag}.plan")
        subprocess.run([opt, model, f"--pipemesh-compile=batch=4 seq=256 {options}", "-o",
                        plans[name]], check=True)
    runs = cpu_model.alternating_runs({n: (run, p) for n, p in plans.items()}, args.rounds,
                                      args.steps, work)
    for name, options in SIDES.items():
        sides[name] = {"options": options, **runs[name]}
    base = sides["f32"]
    for s in sides.values():
        s["median_step_ms"] = statistics.median(s["step_ms"])
        s["step_time_over_f32"] = s["median_step_ms"] / base["median_step_ms"]
        s["arena_over_f32"] = s["arena_bytes"] / base["arena_bytes"]
        s["arena_plus_staging_over_f32"] = (s["arena_bytes"] + s["staging_bytes"]) / \
            base["arena_bytes"]
        s["peak_rss_over_f32"] = s["peak_rss_bytes"] / base["peak_rss_bytes"]
    result = {"model": "L6 C384 H6 V8192 T256 B4", "steps": args.steps, "rounds": args.rounds,
              "sides": sides}
    print("| plan | median step ms | arena MB | staging MB | peak RSS MB | last loss | "
          "step / f32 | arena + staging / f32 | peak RSS / f32 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, s in sides.items():
        print(f"| {name} | {s['median_step_ms']:.1f} | {s['arena_bytes'] / 1e6:.1f} | "
              f"{s['staging_bytes'] / 1e6:.1f} | {s['peak_rss_bytes'] / 1e6:.0f} | "
              f"{s['loss_last']:.6f} | {s['step_time_over_f32']:.3f} | "
              f"{s['arena_plus_staging_over_f32']:.3f} | {s['peak_rss_over_f32']:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
