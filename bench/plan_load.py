#!/usr/bin/python3
"""How long one pipemesh-run process takes to read a large elided plan, and its peak RSS.

pipemesh-opt writes one program per pipeline rank for dp > 1 (parallel.replicas_elided);
every process of the job reads the plan. A reader that derives every replica in every
process parses world_size programs per process (time and memory grow with dp); one that
derives only its own parses pp + 1. This compiles a real-weights GPT with 12 layers (GPT-2
small's depth, narrow so the weights stay small; models/gen_gpt2.py) for each PPxDP of
--worlds, then times, per pipemesh-run binary (--run, and --baseline-run: an older build,
measured in the same run), these one-process runs (no mpirun, no ranks launched):

  refused     `pipemesh-run PLAN --steps 1`: a one-process job reads the plan as rank 0 and
              refuses to run it ("compiled for world size ..."); any binary can do it;
  check-rank  `pipemesh-run PLAN --check-rank R`, R = the last rank (a dp replica that is
              derived): the reading, derivation and cross-rank checks rank R's process does
              before its first communication; binaries that have the option;
  floor       `pipemesh-run --help`: the process's start-up alone (BLAS set-up), to read the
              others against.

Wall seconds (median of --repeat) and peak RSS (the child's ru_maxrss) of each, and the
baseline / new ratios.

    bench/plan_load.py [--run build/bin/pipemesh-run] [--baseline-run OLD/pipemesh-run]
                       [--opt build/bin/pipemesh-opt] [--worlds 2x64,4x256] [--model M.onnx]
                       [--repeat 3] [--json OUT]
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def run_child(cmd):
    """(seconds, peak RSS bytes, exit code, stdout + stderr) of one run."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.monotonic() - t0
        log.seek(0)
        return seconds, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), log.read()


def timed(cmd, expect_rc, expect_text, repeat):
    """Median seconds and largest peak RSS over `repeat` runs, each checked to have got as
    far as meant (exit code and a line it prints)."""
    secs, rss = [], []
    for _ in range(repeat):
        s, r, rc, text = run_child(cmd)
        if rc != expect_rc or expect_text not in text:
            sys.exit(f"{' '.join(cmd)}: exit {rc}, expected {expect_rc} and '{expect_text}':\n"
                     f"{text[-800:]}")
        secs.append(s)
        rss.append(r)
    return statistics.median(secs), max(rss)


def has_check_rank(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, env=ENV)
    return "--check-rank" in r.stdout


def manifest_info(plan):
    with open(plan, "rb") as f:
        head = f.read(40)
        L, W = struct.unpack("<QQ", head[16:32])
        m = json.loads(f.read(L))
    return L, W, len(m["ranks"]), bool(m["parallel"].get("replicas_elided"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=os.path.join(ROOT, "build", "bin", "pipemesh-run"))
    ap.add_argument("--baseline-run", help="another pipemesh-run (an older build) to time alike")
    ap.add_argument("--opt", default=os.path.join(ROOT, "build", "bin", "pipemesh-opt"))
    ap.add_argument("--worlds", default="2x64,4x256", help="PPxDP configurations, comma-separated")
    ap.add_argument("--model", help="ONNX model to compile (default: a 12-layer GPT written by "
                    "models/gen_gpt2.py: embd 64, 4 heads, vocab 512, ctx 64)")
    ap.add_argument("--compile", default="batch=2 seq=64 microbatches=8 schedule=1f1b zero=1",
                    help="the other --pipemesh-compile options")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()

    binaries = [("new", args.run)] + ([("baseline", args.baseline_run)] if args.baseline_run else [])
    checks_rank = {b: has_check_rank(b) for _, b in binaries}
    rows = []
    with tempfile.TemporaryDirectory(prefix="plan-load-") as tmp:
        model = args.model
        if not model:
            model = os.path.join(tmp, "gpt12.onnx")
            subprocess.run([sys.executable, os.path.join(ROOT, "models", "gen_gpt2.py"), "--layers",
                            "12", "--embd", "64", "--heads", "4", "--vocab", "512", "--ctx", "64",
                            "--seed", "1", "-o", model], check=True, capture_output=True)
        floor = {name: timed([b, "--help"], 0, "usage:", args.repeat) for name, b in binaries}
        for name, (s, r) in floor.items():
            rows.append({"world": None, "binary": name, "mode": "floor", "seconds": s, "rss": r})
        for world in args.worlds.split(","):
            pp, dp = (int(x) for x in world.lower().split("x"))
            plan = os.path.join(tmp, f"pp{pp}-dp{dp}.plan")
            t0 = time.monotonic()
            r = subprocess.run([args.opt, model, f"--pipemesh-compile=pp={pp} dp={dp} {args.compile}",
                                "-o", plan], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"compile failed: {r.stderr[-800:]}")
            L, W, listed, elided = manifest_info(plan)
            print(f"pp={pp} dp={dp} (world {pp * dp}): compiled in {time.monotonic() - t0:.1f} s; "
                  f"manifest {L / 1e6:.1f} MB with {listed} programs"
                  f"{' (replicas elided)' if elided else ''}, weights {W / 1e6:.1f} MB", flush=True)
            for name, b in binaries:
                modes = [("refused", [b, plan, "--steps", "1"], 1,
                          f"compiled for world size {pp * dp}")]
                if checks_rank[b]:
                    last = pp * dp - 1
                    modes.append(("check-rank", [b, plan, "--check-rank", str(last)], 0,
                                  f"rank {last} of {pp * dp}"))
                for mode, cmd, rc, text in modes:
                    s, rss = timed(cmd, rc, text, args.repeat)
                    rows.append({"world": f"{pp}x{dp}", "pp": pp, "dp": dp, "manifest_bytes": L,
                                 "binary": name, "mode": mode, "seconds": s, "rss": rss})

    print(f"\n{'world':>8} {'binary':>9} {'mode':>11} {'seconds':>8} {'peak RSS MB':>12} "
          f"{'above floor MB':>15}")
    for row in rows:
        fl = floor[row["binary"]][1]
        print(f"{row['world'] or '-':>8} {row['binary']:>9} {row['mode']:>11} {row['seconds']:8.2f} "
              f"{row['rss'] / 2**20:12.0f} {(row['rss'] - fl) / 2**20:15.0f}")
    if args.baseline_run:
        print("\nbaseline / new (the same mode; 'refused' for the baseline against the new "
              "binary's check-rank, which also derives a replica and runs the cross-rank checks):")
        for world in args.worlds.split(","):
            w = world.lower()
            base = next(r for r in rows if r["world"] == w and r["binary"] == "baseline"
                        and r["mode"] == "refused")
            for mode in ("refused", "check-rank"):
                new = next((r for r in rows if r["world"] == w and r["binary"] == "new"
                            and r["mode"] == mode), None)
                if not new:
                    continue
                above = [(x["rss"] - floor[x["binary"]][1]) for x in (base, new)]
                print(f"  {w:>8} baseline refused / new {mode:<10}: time {base['seconds'] / new['seconds']:6.1f}x, "
                      f"peak RSS {base['rss'] / new['rss']:5.1f}x "
                      f"({above[0] / max(above[1], 1):.1f}x above the floor)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"floor": {k: {"seconds": s, "rss": r} for k, (s, r) in floor.items()},
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
