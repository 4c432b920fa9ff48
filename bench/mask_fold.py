#!/usr/bin/python3
"""Import of a model whose causal mask the importer folds (up to 4096 tokens, 2^24
elements): `pipemesh-opt MODEL --batch 1 --seq T` by two builds in the same run,
alternating, --repeat times each; reports the median wall time, the peak RSS and their
ratios, and requires the two builds to write the same module (folding is exact, so any
difference is a bug in one of them).

    bench/mask_fold.py --baseline-build /tmp/base/build [--build build]
                       [--models models/fixtures/hf_llama_dynamo.onnx,...] [--seqs 2048,4096]
                       [--repeat 3] [--json OUT]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = [os.path.join(ROOT, "models", "fixtures", name) for name in
                  ("hf_llama_dynamo.onnx", "hf_bloom_dynamo.onnx", "hf_mistral_sliding_dynamo.onnx")]


def import_once(opt, model, seq, out):
    """Seconds, peak RSS bytes and the module text of one import."""
    start = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kb %M", opt, model, "--batch", "1",
                        "--seq", str(seq), "-o", out], capture_output=True, text=True)
    seconds = time.monotonic() - start
    if p.returncode != 0:
        sys.exit(f"{opt} {model} --seq {seq} failed:\n{p.stderr}")
    rss = int(re.search(r"maxrss_kb (\d+)", p.stderr).group(1)) * 1024
    with open(out) as f:
        return seconds, rss, f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline-build", required=True)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--seqs", default="2048,4096")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    builds = {"new": args.build, "baseline": args.baseline_build}
    opts = {n: os.path.join(b, "bin", "pipemesh-opt") for n, b in builds.items()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for seq in [int(s) for s in args.seqs.split(",")]:
                times = {n: [] for n in builds}
                rss, text = {}, {}
                for _ in range(args.repeat):
                    for name, opt in opts.items():
                        s, r, t = import_once(opt, model, seq, os.path.join(tmp, name + ".mlir"))
                        times[name].append(s)
                        rss[name] = max(rss.get(name, 0), r)
                        text[name] = t
                if text["new"] != text["baseline"]:
                    sys.exit(f"{os.path.basename(model)} at {seq}: the builds' modules differ")
                med = {n: statistics.median(v) for n, v in times.items()}
                row = {"model": os.path.basename(model), "seq": seq, "seconds": med,
                       "seconds_all": times, "peak_rss_bytes": rss,
                       "time_ratio_new_over_baseline": med["new"] / med["baseline"],
                       "rss_ratio_new_over_baseline": rss["new"] / rss["baseline"]}
                rows.append(row)
                print(f"{row['model']:40s} {seq:6d}: {med['new']:.2f} s vs {med['baseline']:.2f} s"
                      f" ({row['time_ratio_new_over_baseline']:.3f}x), peak RSS "
                      f"{rss['new'] / 2**20:.0f} vs {rss['baseline'] / 2**20:.0f} MiB, same module",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "load_average": os.getloadavg()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
