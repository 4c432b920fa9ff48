#!/usr/bin/python3
"""What a validation batch (--val-data) costs against a training step, on the CPU backend.

Model: the CPU-step benchmark's GPT-2 style L=6, C=384, H=6, V=8192, T=256, micro-batch B=4
(models/gen_gpt2.py), 2 micro-batches per step, one rank. One run trains --steps steps and
evaluates --eval-iters batches after every --eval-interval steps; the step time is the median
of the steps after the first, a batch's evaluation time the median of the evaluations' mean.
An evaluation runs the step's program without the backward, weight-gradient and optimizer
instructions (runtime/lib/exec/Evaluation.cpp), so the forward's share of a step is what to
expect: about a third of the FLOPs.

    bench/evaluation_cost.py [--build build] [--steps 12] [--json OUT]
"""
import json
import os
import statistics
import subprocess

import cpu_model


def main():
    ap = cpu_model.parser(__doc__, steps=12)
    ap.add_argument("--eval-interval", type=int, default=3)
    ap.add_argument("--eval-iters", type=int, default=4)
    args = ap.parse_args()
    opt, run, work, model = cpu_model.setup(args)
    plan = os.path.join(work, "gpt_L6_eval.plan")
    subprocess.run([opt, model, "--pipemesh-compile=batch=4 seq=256 microbatches=2", "-o", plan],
                   check=True)
    val = os.path.join(work, "val.bin")
    subprocess.run([run, "--write-default-corpus", val], check=True, capture_output=True)
    log = os.path.join(work, "evaluation_cost.jsonl")
    subprocess.run([run, plan, "--steps", str(args.steps), "--val-data", val, "--eval-interval",
                    str(args.eval_interval), "--eval-iters", str(args.eval_iters), "--log-json",
                    log], check=True, capture_output=True)
    entries = [json.loads(line) for line in open(log) if line.strip()]
    steps = [e["ms"] for e in entries if "loss" in e][1:]
    batches = [e["ms"] / e["val_batches"] for e in entries if "val_loss" in e]
    result = {"model": "L6 C384 H6 V8192 T256 B4 M2", "steps": args.steps,
              "median_step_ms": statistics.median(steps),
              "median_eval_batch_ms": statistics.median(batches),
              "evaluations": len(batches), "batches_per_evaluation": args.eval_iters}
    result["eval_batch_over_step"] = result["median_eval_batch_ms"] / result["median_step_ms"]
    print("| median step ms | median evaluation ms per batch | batch / step |")
    print("|---|---|---|")
    print(f"| {result['median_step_ms']:.1f} | {result['median_eval_batch_ms']:.1f} | "
          f"{result['eval_batch_over_step']:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
