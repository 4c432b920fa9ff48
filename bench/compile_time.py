#!/usr/bin/python3
"""How long pipemesh-opt takes to compile the paper-setting plans (issue 5: "the search
should take seconds, not minutes, for 64 ranks and 128 micro-batches").

The 1.3B shapes-only model (bench/sim_paper.py's) on 64 ranks (pp=4, dp=16, vpp=3, all
three bf16 options), compiled
  - as one bfs plan (defer-w=chunk, recompute=auto mem-limit=40GiB) at each micro-batch
    count of --microbatches, and
  - with schedule=elastic groups=auto (the same memory options, cluster a100-40g-25gbps)
    at --groups-auto micro-batches: the plan records the search's own seconds.
Wall time, peak RSS and plan size for each; with --baseline-opt the same compiles by
another pipemesh-opt binary (an older build) in the same run, and their ratio.

    bench/compile_time.py [--opt build/bin/pipemesh-opt] [--baseline-opt OLD/pipemesh-opt]
                          [--microbatches 8,32,128] [--groups-auto 128] [--single-thread]
                          [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_paper import ROOT, model_file  # noqa: E402  (the same shapes-only models)

COMMON = ("batch=1 seq=2048 pp=4 dp=16 vpp=3 zero=1 recompute=auto mem-limit=40GiB "
          "shapes-only=true activations=bf16 params=bf16 grad-reduce=bf16")


def compile_once(opt, model, options, workdir, extra=()):
    """(seconds, peak RSS bytes, plan bytes, the plan's manifest or None)."""
    plan = os.path.join(workdir, "plan")
    t0 = time.monotonic()
    proc = subprocess.Popen([opt, model, f"--pipemesh-compile={options}", "-o", plan, *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
    seconds = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"compile failed ({opt}, {options}): {err.strip()[-400:]}")
    rss = usage.ru_maxrss * 1024
    raw = open(plan, "rb").read()
    start = raw.index(b'{"')
    manifest, _ = json.JSONDecoder().raw_decode(raw[start:].decode("utf-8", "replace"))
    return seconds, rss, len(raw), manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opt", default=os.path.join(ROOT, "build", "bin", "pipemesh-opt"))
    ap.add_argument("--baseline-opt", help="another pipemesh-opt to time on the same plans")
    ap.add_argument("--microbatches", default="8,16,32,64,128")
    ap.add_argument("--groups-auto", type=int, default=128,
                    help="micro-batches of the groups=auto compile (0: none)")
    ap.add_argument("--single-thread", action="store_true",
                    help="compile with --mlir-disable-threading (the ranks emitted one by one)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    model = model_file("1.3B")
    jobs = [(f"bfs M={m}", f"{COMMON} microbatches={m} schedule=bfs defer-w=chunk")
            for m in map(int, args.microbatches.split(","))]
    if args.groups_auto:
        jobs.append((f"elastic groups=auto M={args.groups_auto}",
                     f"{COMMON} microbatches={args.groups_auto} schedule=elastic groups=auto "
                     "cluster=a100-40g-25gbps"))
    opts = [("baseline", args.baseline_opt)] if args.baseline_opt else []
    opts.append(("this", args.opt))
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, options in jobs:
            row = {"plan": name, "options": options}
            for label, opt in opts:
                s, rss, size, m = compile_once(
                    opt, model, options, work,
                    ("--mlir-disable-threading",) if args.single_thread else ())
                row[label] = {"seconds": round(s, 2), "rss_bytes": rss, "plan_bytes": size}
                search = m.get("parallel", {}).get("groups_search")
                if search:
                    row[label]["search_seconds"] = round(search["seconds"], 2)
                    row[label]["candidates"] = search["candidates"]
            if "baseline" in row:
                row["speedup"] = round(row["baseline"]["seconds"] / row["this"]["seconds"], 2)
            rows.append(row)
            cells = "  ".join(
                f"{label}: {row[label]['seconds']:.1f} s, {row[label]['rss_bytes'] / 2**30:.1f} GiB"
                + (f" (search {row[label]['search_seconds']:.1f} s)"
                   if "search_seconds" in row[label] else "")
                for label, _ in opts)
            print(f"{name:34s} {cells}" +
                  (f"  x{row['speedup']:.1f}" if "speedup" in row else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
