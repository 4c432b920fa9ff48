#!/usr/bin/python3
"""Long context: transformers' Llama as PyTorch 2 exports it (the fixture
hf_llama_dynamo: 2 layers, 4 query / 2 key-value heads, its causal mask computed from
positions, added as where(mask, 0, finfo.min), and PyTorch's NaN guard on the
probabilities) compiled at SEQ tokens by two builds in the same run: --build (this one)
and --baseline-build (e.g. a worktree of commit 35523f6, whose raise left that attention
decomposed past 4096 tokens).

For each build: the compile's time and peak memory and how many attentions it fused; then
batch 1 x SEQ trains on the same tokens, the builds alternating: the step time (median
after each run's first step), the arena (planned activations and gradients), the peak
RSS and the last loss, which must agree (the same math, fused or not). Then, this build
alone, the compile at longer contexts (--long-seqs).

    bench/long_context.py --baseline-build /tmp/base/build [--build build] [--seq 8192]
                          [--long-seqs 16384,32768] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "out", "long_context")
MODEL = os.path.join(ROOT, "models", "fixtures", "hf_llama_dynamo.onnx")


def compile_plan(opt, seq, out):
    """Compiles MODEL at batch 1 x seq into `out`; returns seconds, peak RSS bytes and the
    number of fused attentions and of softmaxes left (from the imported module)."""
    start = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb %M", opt, MODEL,
                        f"--pipemesh-compile=batch=1 seq={seq} microbatches=1", "-o", out],
                       check=True, capture_output=True, text=True)
    seconds = time.monotonic() - start
    rss = int(re.search(r"maxrss_kb (\d+)", p.stderr).group(1)) * 1024
    module = subprocess.run([opt, MODEL, "--batch", "1", "--seq", str(seq),
                             "--mlir-elide-elementsattrs-if-larger=4"],
                            check=True, capture_output=True, text=True).stdout
    return {"compile_s": seconds, "compile_peak_rss_bytes": rss,
            "attention": module.count("pmesh.attention"), "softmax": module.count("pmesh.softmax")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline-build", required=True,
                    help="a build whose raise leaves long-context attention decomposed")
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--long-seqs", default="16384,32768",
                    help="compile only, this build: comma-separated lengths ('' for none)")
    ap.add_argument("--steps", type=int, default=3, help="steps per run (the first is left out)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    os.makedirs(WORK, exist_ok=True)
    builds = {"new": args.build, "baseline": args.baseline_build}

    compiled, plans = {}, {}
    for name, build in builds.items():
        opt, _ = cpu_model.tools(build)
        plans[name] = os.path.join(WORK, f"{name}_{args.seq}.plan")
        compiled[name] = compile_plan(opt, args.seq, plans[name])
        print(f"{name:8s} compile at {args.seq}: {compiled[name]['compile_s']:.2f} s, "
              f"{compiled[name]['compile_peak_rss_bytes'] / 2**20:.0f} MiB; "
              f"{compiled[name]['attention']} attention, {compiled[name]['softmax']} softmax",
              flush=True)
    shard = cpu_model.random_token_shard(os.path.join(WORK, "tokens.bin"), 256)
    runs = cpu_model.alternating_runs(
        {n: (cpu_model.tools(b)[1], plans[n]) for n, b in builds.items()},
        args.rounds, args.steps, WORK, data=shard)
    med = {n: statistics.median(r["step_ms"]) for n, r in runs.items()}
    loss = {n: r["loss_last"] for n, r in runs.items()}
    cpu_model.require_same_loss(runs, "new", "baseline")

    longer = {}
    opt, _ = cpu_model.tools(args.build)
    for seq in [int(s) for s in args.long_seqs.split(",") if s]:
        longer[seq] = compile_plan(opt, seq, os.path.join(WORK, f"new_{seq}.plan"))
        print(f"new      compile at {seq}: {longer[seq]['compile_s']:.2f} s, "
              f"{longer[seq]['compile_peak_rss_bytes'] / 2**20:.0f} MiB; "
              f"{longer[seq]['attention']} attention, {longer[seq]['softmax']} softmax",
              flush=True)

    result = {"model": os.path.basename(MODEL), "seq": args.seq, "compile": compiled,
              "step_ms": med, "step_ms_all": {n: r["step_ms"] for n, r in runs.items()},
              "arena_bytes": {n: r["arena_bytes"] for n, r in runs.items()},
              "peak_rss_bytes": {n: r["peak_rss_bytes"] for n, r in runs.items()},
              "last_loss": loss, "time_ratio_new_over_baseline": med["new"] / med["baseline"],
              "arena_ratio_new_over_baseline":
                  runs["new"]["arena_bytes"] / runs["baseline"]["arena_bytes"],
              "compile_longer": longer, "load_average": os.getloadavg()}
    print(f"batch 1 x {args.seq}: step {med['new']:.0f} ms vs {med['baseline']:.0f} ms baseline "
          f"({result['time_ratio_new_over_baseline']:.3f}x); arena "
          f"{runs['new']['arena_bytes'] / 2**20:.1f} vs {runs['baseline']['arena_bytes'] / 2**20:.1f}"
          f" MiB ({result['arena_ratio_new_over_baseline']:.4f}x); peak RSS "
          f"{runs['new']['peak_rss_bytes'] / 2**20:.0f} vs "
          f"{runs['baseline']['peak_rss_bytes'] / 2**20:.0f} MiB; last loss {loss['new']:.6f} vs "
          f"{loss['baseline']:.6f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
