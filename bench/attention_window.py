#!/usr/bin/python3
"""Sliding-window attention on the CPU runtime: a training step of a GPT whose attention
sees only the last W keys, against the same GPT with full causal attention, measured in
the same run.

Both models come from models/gen_gpt2.py (same weights; --sliding-window W adds the band
to the computed causal mask), both are compiled by pipemesh-opt, whose raise turns the
band into `pmesh.attention {window = W}` (checked here), and both train on the same random
tokens with pipemesh-run. The two are run in alternating rounds; each side's time is the
median of its steps after the first of every run. Also printed: the plans' model FLOPs per
step (MFU's count, in which a band is W keys wide), to set the measured ratio against.

    bench/attention_window.py [--build build] [--seq 1024] [--window 128] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys

import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "out", "attention_window")


def plan_model_info(plan):
    """The plan's `model` section (flops_per_step and the rest)."""
    d = open(plan, "rb").read(1 << 20)
    n = struct.unpack("<Q", d[16:24])[0]
    return json.loads(d[40:40 + n])["model"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=4, help="steps per run (the first is left out)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if not 0 < args.window < args.seq:
        ap.error("--window must be between 0 and --seq")
    opt, run = (os.path.join(args.build, "bin", t) for t in ("pipemesh-opt", "pipemesh-run"))
    os.makedirs(WORK, exist_ok=True)

    plans = {}
    for name, window in (("causal", 0), ("window", args.window)):
        model = os.path.join(WORK, f"gpt_{name}.onnx")
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "gen_gpt2.py"),
                        "--layers", str(args.layers), "--embd", str(args.embd),
                        "--heads", str(args.heads), "--vocab", str(args.vocab),
                        "--ctx", str(args.seq), "--causal-mask", "computed",
                        "--sliding-window", str(window), "-o", model],
                       check=True, capture_output=True)
        ir = subprocess.run([opt, model, "--batch=1", f"--seq={args.seq}"], check=True,
                            capture_output=True, text=True).stdout
        raised = ir.count("pmesh.attention")
        windowed = ir.count(f"window = {args.window} : i64")
        if raised != args.layers or windowed != (args.layers if window else 0):
            sys.exit(f"{name}: {raised} attentions raised, {windowed} with window "
                     f"{args.window}; expected {args.layers}")
        plan = os.path.join(WORK, f"gpt_{name}.plan")
        subprocess.run([opt, model, f"--pipemesh-compile=batch=1 seq={args.seq} microbatches=1",
                        "-o", plan], check=True)
        plans[name] = plan

    shard = cpu_model.random_token_shard(os.path.join(WORK, "tokens.bin"), args.vocab)

    runs = cpu_model.alternating_runs({n: (run, p) for n, p in plans.items()}, args.rounds,
                                      args.steps, WORK, data=shard)
    times = {name: r["step_ms"] for name, r in runs.items()}
    losses = {name: r["loss_last"] for name, r in runs.items()}

    flops = {name: plan_model_info(plan)["flops_per_step"] for name, plan in plans.items()}
    med = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "seq": args.seq, "window": args.window, "layers": args.layers, "embd": args.embd,
        "heads": args.heads, "vocab": args.vocab,
        "causal_step_ms": med["causal"], "window_step_ms": med["window"],
        "time_ratio_window_over_causal": med["window"] / med["causal"],
        "model_flops_causal": flops["causal"], "model_flops_window": flops["window"],
        "flops_ratio_window_over_causal": flops["window"] / flops["causal"],
        "last_loss": losses, "step_ms_all": times, "load_average": os.getloadavg(),
    }
    print(f"seq {args.seq}, window {args.window}: causal {med['causal']:.1f} ms, window "
          f"{med['window']:.1f} ms per step: {result['time_ratio_window_over_causal']:.3f}x "
          f"the time (model FLOPs {result['flops_ratio_window_over_causal']:.3f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
