#!/usr/bin/python3
"""What a validation batch (--val-data) costs against a training step, on the CPU backend.

Model: the CPU-step benchmark's GPT-2 style L=6, C=384, H=6, V=8192, T=256, micro-batch B=4
(models/gen_gpt2.py), one rank with 2 micro-batches per step, or (--pp N) a pipeline of N
ranks under mpirun with 2N micro-batches. One run trains --steps steps and evaluates
--eval-iters batches after every --eval-interval steps; the step time is the median of the
steps after the first, a batch's evaluation time the median of the evaluations' mean.
An evaluation runs the step's program without the backward, weight-gradient and optimizer
instructions and without the messages that carry their values (runtime/lib/exec/
Evaluation.cpp), so the forward's share of a step is what to expect: about a third of the
FLOPs. --baseline-run OTHER/pipemesh-run measures another build's runtime on the same plan
in the same way, alternating runs (--rounds).

    bench/evaluation_cost.py [--build build] [--pp 2] [--baseline-run OLD] [--rounds 3]
        [--steps 12] [--json OUT]
"""
import json
import os
import statistics
import subprocess

import cpu_model

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def measure(run, plan, val, log, args):
    """(median step ms, median evaluation ms per batch) of one run."""
    cmd = [run, plan, "--steps", str(args.steps), "--val-data", val, "--eval-interval",
           str(args.eval_interval), "--eval-iters", str(args.eval_iters), "--log-json", log]
    if args.pp > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(args.pp)] + cmd
    subprocess.run(cmd, check=True, capture_output=True, env=ENV)
    entries = [json.loads(line) for line in open(log) if line.strip()]
    steps = [e["ms"] for e in entries if "loss" in e][1:]
    batches = [e["ms"] / e["val_batches"] for e in entries if "val_loss" in e]
    return statistics.median(steps), statistics.median(batches)


def main():
    ap = cpu_model.parser(__doc__, steps=12)
    ap.add_argument("--eval-interval", type=int, default=3)
    ap.add_argument("--eval-iters", type=int, default=4)
    ap.add_argument("--pp", type=int, default=1, help="pipeline ranks (mpirun -np PP)")
    ap.add_argument("--baseline-run", help="another pipemesh-run to measure alike")
    ap.add_argument("--rounds", type=int, default=1, help="alternating runs of each runtime")
    args = ap.parse_args()
    opt, run, work, model = cpu_model.setup(args)
    micro = 2 * args.pp
    plan = os.path.join(work, f"gpt_L6_eval_pp{args.pp}.plan")
    subprocess.run([opt, model, f"--pipemesh-compile=batch=4 seq=256 microbatches={micro} "
                    f"pp={args.pp}", "-o", plan], check=True)
    val = os.path.join(work, "val.bin")
    subprocess.run([run, "--write-default-corpus", val], check=True, capture_output=True)
    runs = {"pipemesh-run": run}
    if args.baseline_run:
        runs["baseline"] = args.baseline_run
    measured = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, binary in runs.items():
            measured[name].append(measure(binary, plan, val,
                                          os.path.join(work, f"evaluation_cost_{name}.jsonl"), args))
    result = {"model": f"L6 C384 H6 V8192 T256 B4 M{micro} pp{args.pp}", "steps": args.steps,
              "evaluations_per_run": args.steps // args.eval_interval,
              "batches_per_evaluation": args.eval_iters, "rounds": args.rounds, "runtimes": {}}
    print("| runtime | median step ms | median evaluation ms per batch | batch / step |")
    print("|---|---|---|---|")
    for name, rows in measured.items():
        step = statistics.median(r[0] for r in rows)
        batch = statistics.median(r[1] for r in rows)
        result["runtimes"][name] = {"median_step_ms": step, "median_eval_batch_ms": batch,
                                    "eval_batch_over_step": batch / step, "runs": rows}
        print(f"| {name} | {step:.1f} | {batch:.1f} | {batch / step:.3f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
