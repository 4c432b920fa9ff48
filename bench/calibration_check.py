#!/usr/bin/python3
"""Simulated vs measured time per op of one plan on this machine.

Issue 5's acceptance check for `pipemesh-sim --calibrate`: calibrate (or take a
cluster file), simulate the plan with `--per-op 0`, run it with `pipemesh-run
--profile` a few times, and print a table: op, simulated ms, measured ms (the
median of the runs, with their min and max), ratio sim/measured, and the share
of the measured step that lies in ops within 20% of their measurement.

The measurement per step leaves out the first step (page faults, first-touch,
BLAS warm-up): each repeat runs `--steps N` and `--steps 1` and takes
(profile(N) - profile(1)) / (N - 1). The two runs of a repeat run back to
back, so a busy machine (another build) shows as a wide min..max spread
rather than as a silently skewed median.

    python3 bench/calibration_check.py --build build-cal [--plan P] [--cluster C.json]
        [--calibrate] [--steps 6] [--repeats 3] [--json out.json] [--one-rate-attention]

Without --plan it builds the main job's model (scripts/run-main.sh: a 4-layer,
128-wide GPT, batch=8 seq=128 microbatches=2) under BUILD/main-job. Without
--cluster (or with --calibrate) it runs `mpirun -np 1 pipemesh-sim --calibrate`
first and writes BUILD/main-job/cal.json.

--one-rate-attention also simulates with the attention rows as they were before they had a
time per query row (a line, flops / rate + overhead, through the three shapes the
calibration then timed: 8x128x32, 32x128x32, 16x256x32, refitted from the cluster file's
own raw samples) and prints those ratios and their share within 20% beside the others.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITHIN = 0.20


def mpirun():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return ["mpirun", "--oversubscribe", "-np", "1"], env


def run(cmd, env=None):
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        sys.exit(f"calibration_check: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


def main_plan(build):
    out = os.path.join(build, "main-job")
    os.makedirs(os.path.join(ROOT, out), exist_ok=True)
    model = os.path.join(out, "default_gpt.onnx")
    plan = os.path.join(out, "default_gpt.plan")
    if not os.path.exists(os.path.join(ROOT, model)):
        run([sys.executable, "models/gen_gpt2.py", "--layers", "4", "--embd", "128", "--heads",
             "4", "--vocab", "256", "--ctx", "128", "--seed", "0", "-o", model])
    run([os.path.join(build, "bin", "pipemesh-opt"), model,
         "--pipemesh-compile=batch=8 seq=128 microbatches=2", "-o", plan])
    return plan


PROFILE_LINE = re.compile(r"^\s+(\S+)\s+([0-9.]+) ms\s+[0-9.]+%$")
STEP_LINE = re.compile(r"^step (\d+)/\d+ .*\| ([0-9.]+) ms \|")


def profile(build, plan, steps):
    """Per-op ms over steps 2..N and the step times, from pipemesh-run --profile."""
    pre, env = mpirun()
    text = run(pre + [os.path.join(build, "bin", "pipemesh-run"), plan, "--steps", str(steps),
                      "--profile"], env)
    ops, step_ms, in_profile = {}, [], False
    for line in text.splitlines():
        if line.startswith("pipemesh-run: time per op"):
            in_profile = True
            continue
        m = STEP_LINE.match(line)
        if m:
            step_ms.append(float(m.group(2)))
        m = PROFILE_LINE.match(line)
        if in_profile and m:
            ops[m.group(1)] = float(m.group(2))
    if not ops:
        sys.exit(f"calibration_check: no profile in pipemesh-run's output:\n{text}")
    return ops, step_ms


def one_rate_attention(cluster, out):
    """The cluster file with attention rows of one flop rate (no row_s): relative least
    squares of t = overhead + flops / rate over the three small shapes of its raw
    samples, the overhead non-negative."""
    with open(os.path.join(ROOT, cluster)) as f:
        c = json.load(f)
    for op in ("attention", "attention_grad"):
        pts = [(p["flops"], p["seconds"]) for p in c["calibration"]["kernels"][op]
               if (p["bh"], p["t"], p["d"]) in ((8, 128, 32), (32, 128, 32), (16, 256, 32))]
        if len(pts) < 2:
            sys.exit(f"calibration_check: {cluster} has no raw {op} samples at the small "
                     "shapes (a --quick calibration?)")
        w = [1 / (t * t) for _, t in pts]
        sw, sx = sum(w), sum(wi * x for wi, (x, _) in zip(w, pts))
        st = sum(wi * t for wi, (_, t) in zip(w, pts))
        sxx = sum(wi * x * x for wi, (x, _) in zip(w, pts))
        sxt = sum(wi * x * t for wi, (x, t) in zip(w, pts))
        det = sw * sxx - sx * sx
        a = (sw * sxt - sx * st) / det if det else 0.0
        b = (sxx * st - sx * sxt) / det if det else 0.0
        if a <= 0:  # a flat or falling series: through 0 and the largest point
            x, t = max(pts)
            a, b = t / x, 0.0
        elif b < 0:  # no negative overhead: the best line through 0
            a = sum(x / t for x, t in pts) / sum(x * x / (t * t) for x, t in pts)
            b = 0.0
        c["device"]["kernels"][op] = {"flop_rate": 1 / a, "overhead_s": b}
    with open(os.path.join(ROOT, out), "w") as f:
        json.dump(c, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--plan")
    ap.add_argument("--cluster")
    ap.add_argument("--calibrate", action="store_true", help="calibrate even with --cluster")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the table as JSON")
    ap.add_argument("--one-rate-attention", action="store_true",
                    help="also simulate with single-rate attention rows (see above)")
    a = ap.parse_args()
    if a.steps < 2:
        sys.exit("calibration_check: --steps must be 2 or more")

    plan = a.plan or main_plan(a.build)
    cluster = a.cluster or os.path.join(a.build, "main-job", "cal.json")
    if a.calibrate or not a.cluster:
        pre, env = mpirun()
        print(run(pre + [os.path.join(a.build, "bin", "pipemesh-sim"), "--calibrate", "-o",
                         cluster], env), end="")

    sim_json = os.path.join(a.build, "main-job", "calibration_check.sim.json")
    run([os.path.join(a.build, "bin", "pipemesh-sim"), plan, "--cluster", cluster, "--per-op",
         "0", "--quiet", "--json", sim_json])
    with open(os.path.join(ROOT, sim_json)) as f:
        sim = json.load(f)
    sim_ms = {op: s * 1e3 for op, s in sim["per_op_s"].items()}
    sim_step = sim["step_time_s"] * 1e3
    one_rate_ms = {}
    if a.one_rate_attention:
        one_cluster = os.path.join(a.build, "main-job", "cal-one-rate.json")
        one_rate_attention(cluster, one_cluster)
        one_json = os.path.join(a.build, "main-job", "calibration_check.one-rate.sim.json")
        run([os.path.join(a.build, "bin", "pipemesh-sim"), plan, "--cluster", one_cluster,
             "--per-op", "0", "--quiet", "--json", one_json])
        with open(os.path.join(ROOT, one_json)) as f:
            one_rate_ms = {op: s * 1e3 for op, s in json.load(f)["per_op_s"].items()}

    per_op = {}  # op -> [ms per step, one per repeat]
    steps_ms = []  # step times of steps 2..N of every repeat
    load_before = os.getloadavg()[0]
    for _ in range(a.repeats):
        # --profile leaves out the first step (its one-time costs).
        later, step_ms = profile(a.build, plan, a.steps)
        steps_ms += step_ms[1:]
        for op, ms in later.items():
            per_op.setdefault(op, []).append(ms / (a.steps - 1))

    rows = []
    for op in sorted(set(sim_ms) | set(per_op), key=lambda o: -statistics.median(
            per_op.get(o, [0.0]))):
        meas = per_op.get(op, [0.0])
        med = statistics.median(meas)
        s = sim_ms.get(op, 0.0)
        rows.append({"op": op, "sim_ms": s, "measured_ms": med, "measured_min_ms": min(meas),
                     "measured_max_ms": max(meas), "ratio": s / med if med > 0 else None})
        if one_rate_ms:
            rows[-1]["one_rate_sim_ms"] = one_rate_ms.get(op, 0.0)
    load_after = os.getloadavg()[0]
    total = sum(r["measured_ms"] for r in rows)
    within = sum(r["measured_ms"] for r in rows
                 if r["ratio"] is not None and abs(r["ratio"] - 1) <= WITHIN)
    # Against each op's fastest repeat (the least disturbed one).
    total_min = sum(r["measured_min_ms"] for r in rows)
    within_min = sum(r["measured_min_ms"] for r in rows
                     if r["measured_min_ms"] > 0
                     and abs(r["sim_ms"] / r["measured_min_ms"] - 1) <= WITHIN)
    sim_total = sum(r["sim_ms"] for r in rows)

    print(f"plan {plan}, cluster {cluster}; measured: {a.repeats} x (steps 2..{a.steps}), "
          f"median per op (min..max over repeats)")
    print(f"| {'op':<20} | {'sim ms':>8} | {'measured ms':>11} | {'min..max':>15} | "
          f"{'sim/meas':>8} |")
    print(f"|{'-' * 22}|{'-' * 10}:|{'-' * 13}:|{'-' * 17}:|{'-' * 10}:|")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        flag = "" if r["ratio"] is None or abs(r["ratio"] - 1) <= WITHIN else " *"
        print(f"| {r['op']:<20} | {r['sim_ms']:8.2f} | {r['measured_ms']:11.2f} | "
              f"{r['measured_min_ms']:6.2f}..{r['measured_max_ms']:7.2f} | {ratio:>8}{flag} |")
    print(f"| {'all ops':<20} | {sim_total:8.2f} | {total:11.2f} | {'':>15} | "
          f"{sim_total / total if total else 0:8.2f} |")
    step_med = statistics.median(steps_ms) if steps_ms else 0.0
    print(f"step: simulated {sim_step:.1f} ms, measured median {step_med:.1f} ms "
          f"(min {min(steps_ms):.1f}, max {max(steps_ms):.1f} over {len(steps_ms)} steps)")
    print(f"within {WITHIN:.0%}: {100 * within / total:.1f}% of the measured op time "
          f"(* marks the ops outside); against each op's fastest repeat "
          f"{100 * within_min / total_min:.1f}%")
    one_rate_within = None
    if one_rate_ms:
        one_rate_within = sum(r["measured_ms"] for r in rows if r["measured_ms"] > 0 and
                              abs(r["one_rate_sim_ms"] / r["measured_ms"] - 1) <= WITHIN) / total
        for r in rows:
            if r["op"].startswith("attention") and r["measured_ms"] > 0:
                print(f"{r['op']}: sim/meas {r['ratio']:.2f}, with one flop rate (no per-row "
                      f"time) {r['one_rate_sim_ms'] / r['measured_ms']:.2f}")
        print(f"within {WITHIN:.0%} with one-rate attention rows: "
              f"{100 * one_rate_within:.1f}% of the measured op time")
    print(f"load average (1 min) {load_before:.2f} before the runs, {load_after:.2f} after; "
          f"pipemesh-run itself keeps {os.cpu_count()} cores busy, so much more than "
          f"{os.cpu_count()} means other work shared them and the measured times grew")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"plan": plan, "cluster": cluster, "steps": a.steps, "repeats": a.repeats,
                       "rows": rows, "sim_step_ms": sim_step, "measured_step_ms": step_med,
                       "measured_step_ms_all": steps_ms, "within_share": within / total,
                       "within_share_fastest": within_min / total_min,
                       "one_rate_within_share": one_rate_within,
                       "load_average": [load_before, load_after]},
                      f, indent=2)


if __name__ == "__main__":
    main()
