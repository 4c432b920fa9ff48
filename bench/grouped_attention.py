#!/usr/bin/python3
"""Grouped-query attention read in place against its key/value heads copied out to every
query head (what PipeMesh did before the attention took grouped k and v), measured in the
same run with two builds: --build (this one) and --baseline-build (one without grouped
attention, e.g. a worktree of commit 8ca2f19 built with scripts/build.sh).

Two measurements, each on both builds:
  1. CPU: a GPT with 8 query heads and 2 key/value heads (models/gen_gpt2.py --kv-heads,
     repeated as Llama's repeat_kv) trains on the same random tokens: the step time
     (median after each run's first step, runs alternating), the rank's arena (the
     runtime's planned activation + gradient memory) and the last loss, which must agree
     (the same math).
  2. Simulation at scale: a 7B-like shapes-only model (32 layers, d 4096, 32 query heads,
     8 key/value heads, seq 4096) compiled for pp=4 with 8 micro-batches and no
     recomputation: each rank's simulated peak memory and the step time on
     a100-40g-100gbps (pipemesh-sim).

    bench/grouped_attention.py --baseline-build /tmp/old/build [--build build] [--json OUT]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "out", "grouped_attention")
GEN = os.path.join(ROOT, "models", "gen_gpt2.py")


def gen(out, *flags):
    if not os.path.exists(out):
        subprocess.run(["/usr/bin/python3", GEN, *flags, "-o", out], check=True,
                       capture_output=True)
    return out


def bins(build):
    return {t: os.path.join(build, "bin", t) for t in ("pipemesh-opt", "pipemesh-run",
                                                       "pipemesh-sim")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline-build", required=True,
                    help="a build without grouped attention (the k/v copies materialized)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="steps per run (the first is left out)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    builds = {"grouped": bins(args.build), "copied": bins(args.baseline_build)}

    # --- 1. CPU training step ------------------------------------------------------------
    model = gen(os.path.join(WORK, f"gqa_L4_C512_H8_KV2_ctx{args.seq}.onnx"), "--layers", "4",
                "--embd", "512", "--heads", "8", "--kv-heads", "2", "--vocab", "8192", "--ctx",
                str(args.seq), "--causal-mask", "computed")
    shard = cpu_model.random_token_shard(os.path.join(WORK, "tokens.bin"), 8192)
    plans = {}
    for name, b in builds.items():
        plans[name] = os.path.join(WORK, f"cpu_{name}.plan")
        subprocess.run([b["pipemesh-opt"], model, f"--pipemesh-compile=batch={args.batch} "
                        f"seq={args.seq} microbatches=1", "-o", plans[name]], check=True)
    runs = cpu_model.alternating_runs({n: (b["pipemesh-run"], plans[n]) for n, b in builds.items()},
                                      args.rounds, args.steps, WORK, data=shard)
    times = {n: r["step_ms"] for n, r in runs.items()}
    arena = {n: r["arena_bytes"] for n, r in runs.items()}
    loss = {n: r["loss_last"] for n, r in runs.items()}
    med = {n: statistics.median(t) for n, t in times.items()}
    cpu_model.require_same_loss(runs, "grouped", "copied")

    # --- 2. simulated 7B-like model ------------------------------------------------------
    big = gen(os.path.join(WORK, "gqa_7B_shapes.onnx"), "--layers", "32", "--embd", "4096",
              "--heads", "32", "--kv-heads", "8", "--vocab", "32000", "--ctx", "4096",
              "--causal-mask", "computed", "--with-loss", "--loss-only", "--shapes-only")
    sim = {}
    for name, b in builds.items():
        plan = os.path.join(WORK, f"sim_{name}.plan")
        subprocess.run([b["pipemesh-opt"], big, "--pipemesh-compile=batch=1 seq=4096 pp=4 "
                        "microbatches=8 recompute=none shapes-only=true activations=bf16 "
                        "params=bf16", "-o", plan], check=True)
        summary = os.path.join(WORK, f"sim_{name}.json")
        subprocess.run([b["pipemesh-sim"], plan, "--cluster", "a100-40g-100gbps", "--json",
                        summary], check=True, capture_output=True)
        sim[name] = json.load(open(summary))
    gib = 2**30
    result = {
        "cpu": {"model": os.path.basename(model), "batch": args.batch, "seq": args.seq,
                "step_ms": med, "arena_bytes": arena, "last_loss": loss,
                "time_ratio_grouped_over_copied": med["grouped"] / med["copied"],
                "arena_ratio_grouped_over_copied": arena["grouped"] / arena["copied"],
                "step_ms_all": times, "load_average": os.getloadavg()},
        "sim_7B": {n: {"peak_mem_bytes": s["peak_mem_bytes"], "step_time_s": s["step_time_s"]}
                   for n, s in sim.items()},
    }
    print(f"CPU, 8 query / 2 key-value heads, batch {args.batch} x seq {args.seq}: step "
          f"{med['grouped']:.1f} ms grouped vs {med['copied']:.1f} ms copied "
          f"({result['cpu']['time_ratio_grouped_over_copied']:.3f}x); arena "
          f"{arena['grouped'] / 2**20:.1f} vs {arena['copied'] / 2**20:.1f} MiB "
          f"({result['cpu']['arena_ratio_grouped_over_copied']:.3f}x); last loss "
          f"{loss['grouped']:.6f} vs {loss['copied']:.6f}")
    for name, s in sim.items():
        print(f"7B-like, 32 / 8 heads, pp=4, 8 micro-batches of 4096 tokens, {name:8s}: peak "
              + ", ".join(f"{p / gib:.2f}" for p in s["peak_mem_bytes"])
              + f" GiB per rank; step {s['step_time_s']:.3f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
