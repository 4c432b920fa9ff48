#!/usr/bin/python3
"""activations=bf16 on the CPU backend: step time, arena, staging space and peak RSS against
the same plan with f32 activations, measured in the same run.

Model: the CPU-step benchmark's GPT-2 style L=6, C=384, H=6, V=8192, T=256, micro-batch B=4
(models/gen_gpt2.py). The two plans run in alternating rounds (the machine's load drifts);
each side's time is the median of all rounds' steps after the first. The CPU kernels compute
in f32 on widened copies of the bf16 buffers, so this measures what the storage type costs
and saves on this backend, not bf16 arithmetic.

    bench/activations_bf16.py [--build build] [--steps 4] [--rounds 2] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess

import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    opt, run = cpu_model.tools(args.build)
    work = cpu_model.WORK
    model = cpu_model.ensure_model()
    plans, sides = {}, {}
    for act in ("f32", "bf16"):
        plans[act] = os.path.join(work, f"gpt_L6_{act}.plan")
        subprocess.run([opt, model, f"--pipemesh-compile=batch=4 seq=256 activations={act}",
                        "-o", plans[act]], check=True)
        sides[act] = {"step_ms": [], "peak_rss_bytes": 0}
    for _ in range(args.rounds):
        for act in ("f32", "bf16"):
            log = os.path.join(work, f"activations_{act}.jsonl")
            r = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb %M", run, plans[act],
                                "--steps", str(args.steps), "--log-json", log],
                               check=True, capture_output=True, text=True)
            s = sides[act]
            rss = re.search(r"maxrss_kb (\d+)", r.stderr)
            s["peak_rss_bytes"] = max(s["peak_rss_bytes"], int(rss.group(1)) * 1024)
            steps = [json.loads(l) for l in open(log) if l.strip()]
            s["step_ms"] += [e["ms"] for e in steps[1:]]
            s["loss_last"] = steps[-1]["loss"]
            m = re.search(r"arena (\d+) bytes(?: \(\+ (\d+) bytes of f32 staging)?", r.stdout)
            s["arena_bytes"], s["staging_bytes"] = int(m.group(1)), int(m.group(2) or 0)
    for s in sides.values():
        s["median_step_ms"] = statistics.median(s["step_ms"])
    f, b = sides["f32"], sides["bf16"]
    result = {"model": "L6 C384 H6 V8192 T256 B4", "steps": args.steps, "rounds": args.rounds,
              "sides": sides,
              "step_time_bf16_over_f32": b["median_step_ms"] / f["median_step_ms"],
              "arena_bf16_over_f32": b["arena_bytes"] / f["arena_bytes"],
              "arena_plus_staging_bf16_over_f32":
                  (b["arena_bytes"] + b["staging_bytes"]) / f["arena_bytes"],
              "peak_rss_bf16_over_f32": b["peak_rss_bytes"] / f["peak_rss_bytes"]}
    print("| activations | median step ms | arena MB | staging MB | peak RSS MB | last loss |")
    print("|---|---|---|---|---|---|")
    for act, s in sides.items():
        rss = f"{s['peak_rss_bytes'] / 1e6:.0f}"
        print(f"| {act} | {s['median_step_ms']:.1f} | {s['arena_bytes'] / 1e6:.1f} | "
              f"{s['staging_bytes'] / 1e6:.1f} | {rss} | {s['loss_last']:.6f} |")
    print(f"bf16 / f32: step time {result['step_time_bf16_over_f32']:.3f}, arena "
          f"{result['arena_bf16_over_f32']:.3f}, arena + staging "
          f"{result['arena_plus_staging_bf16_over_f32']:.3f}, peak RSS "
          f"{result['peak_rss_bf16_over_f32']:.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
