#!/usr/bin/python3
"""What reading a plan, writing a checkpoint and resuming from one cost a pipemesh-run process.

Each of these reads or writes every byte of a file as big as the model (the plan's weights;
a checkpoint's parameters and AdamW moments, three times that) and checksums it, so their
cost grows with the model. This compiles a real-weights GPT (default: GPT-2 small's shape,
124M parameters, made by models/gen_gpt2.py with a 128-position table; batch 1 x seq 64 so
a training step stays short on a CPU) with each pipemesh-opt, then times single-rank runs of
the matching pipemesh-run (--run/--opt, and --baseline-run/--baseline-opt: an older build,
measured in the same run, alternating):

  load      `pipemesh-run PLAN --check-rank 0`: map the plan, check its checksum, parse;
  step      `pipemesh-run PLAN --steps 1`: the same plus one training step;
  save      `... --steps 1 --checkpoint-dir D` minus `step`: writing (and fsyncing)
            step-1's checkpoint;
  resume    `... --steps 1 --checkpoint-dir D --resume` with D at step 1 ("nothing to do"):
            loading and verifying the checkpoint, no step.

Wall seconds, median of --repeat, and baseline / new ratios.

    bench/checkpoint_io.py [--run build/bin/pipemesh-run --opt build/bin/pipemesh-opt]
                           [--baseline-run OLD/bin/pipemesh-run --baseline-opt OLD/bin/pipemesh-opt]
                           [--repeat 3] [--model M.onnx] [--json OUT]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def seconds(cmd, expect):
    """Wall seconds of one run, checked to have exited 0 and printed `expect`."""
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    s = time.monotonic() - t0
    if r.returncode or expect not in r.stdout + r.stderr:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}, expected '{expect}':\n"
                 f"{(r.stdout + r.stderr)[-800:]}")
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bin_dir = os.path.join(ROOT, "build", "bin")
    ap.add_argument("--run", default=os.path.join(bin_dir, "pipemesh-run"))
    ap.add_argument("--opt", default=os.path.join(bin_dir, "pipemesh-opt"))
    ap.add_argument("--baseline-run", help="an older build's pipemesh-run, timed alike")
    ap.add_argument("--baseline-opt", help="the pipemesh-opt of the same build")
    ap.add_argument("--model", help="ONNX model (default: GPT-2 small's shape, see above)")
    ap.add_argument("--compile", default="batch=1 seq=64 microbatches=1",
                    help="the --pipemesh-compile options")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the medians here")
    args = ap.parse_args()
    if bool(args.baseline_run) != bool(args.baseline_opt):
        ap.error("--baseline-run and --baseline-opt go together (each build reads its own plans)")

    builds = [("new", args.run, args.opt)]
    if args.baseline_run:
        builds.append(("baseline", args.baseline_run, args.baseline_opt))
    times = {name: {k: [] for k in ("load", "step", "save", "resume")} for name, _, _ in builds}
    sizes = {}
    with tempfile.TemporaryDirectory(prefix="checkpoint-io-", dir=os.environ.get("TMPDIR")) as tmp:
        model = args.model
        if not model:
            model = os.path.join(tmp, "gpt2-124M.onnx")
            subprocess.run([sys.executable, os.path.join(ROOT, "models", "gen_gpt2.py"),
                            "--layers", "12", "--embd", "768", "--heads", "12", "--vocab",
                            "50257", "--ctx", "128", "--seed", "1", "-o", model],
                           check=True, capture_output=True)
        plans = {}
        for name, _, opt in builds:
            plans[name] = os.path.join(tmp, f"{name}.plan")
            subprocess.run([opt, model, f"--pipemesh-compile={args.compile}", "-o", plans[name]],
                           check=True, capture_output=True)
            sizes["plan"] = os.path.getsize(plans[name])
        for i in range(args.repeat):
            for name, run, _ in builds:
                plan, ckpt = plans[name], os.path.join(tmp, f"ckpt-{name}")
                shutil.rmtree(ckpt, ignore_errors=True)
                t = times[name]
                t["load"].append(seconds([run, plan, "--check-rank", "0"], "rank 0 of 1"))
                step = seconds([run, plan, "--steps", "1"], "step 1/1")
                t["step"].append(step)
                t["save"].append(seconds([run, plan, "--steps", "1", "--checkpoint-dir", ckpt],
                                         "step 1/1") - step)
                t["resume"].append(seconds([run, plan, "--steps", "1", "--checkpoint-dir", ckpt,
                                            "--resume"], "nothing to do"))
                sizes["checkpoint"] = sum(e.stat().st_size
                                          for e in os.scandir(os.path.join(ckpt, "step-1")))
            print(f"round {i + 1} of {args.repeat} done", flush=True)

    med = {name: {k: statistics.median(v) for k, v in t.items()} for name, t in times.items()}
    print(f"\nplan {sizes['plan'] / 1e9:.2f} GB, checkpoint {sizes['checkpoint'] / 1e9:.2f} GB; "
          f"seconds, median of {args.repeat}:")
    print(f"{'':>9} " + " ".join(f"{k:>8}" for k in ("load", "step", "save", "resume")))
    for name, m in med.items():
        print(f"{name:>9} " + " ".join(f"{m[k]:8.2f}" for k in ("load", "step", "save", "resume")))
    if "baseline" in med:
        print(f"{'base/new':>9} " + " ".join(f"{med['baseline'][k] / med['new'][k]:8.2f}"
                                             for k in ("load", "step", "save", "resume")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": sizes, "median_s": med, "runs_s": times}, f, indent=1)


if __name__ == "__main__":
    main()
