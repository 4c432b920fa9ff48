"""The CPU benchmarks' model and tools (bench/cpu_step.py, pipeline_step.py,
bf16_storage.py): GPT-2 style L=6, C=384, H=6, V=8192, ctx 256, written once by
models/gen_gpt2.py into bench/out/."""
import argparse
import json
import os
import re
import subprocess

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "out")
MODEL = os.path.join(WORK, "gpt_L6_C384_V8192.onnx")


def tools(build):
    """(pipemesh-opt, pipemesh-run) of a build directory."""
    return tuple(os.path.join(build, "bin", t) for t in ("pipemesh-opt", "pipemesh-run"))


def ensure_model():
    """The benchmark model's path, generated on first use."""
    os.makedirs(WORK, exist_ok=True)
    if not os.path.exists(MODEL):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "gen_gpt2.py"),
                        "--layers", "6", "--embd", "384", "--heads", "6", "--vocab", "8192",
                        "--ctx", "256", "-o", MODEL], check=True, capture_output=True)
    return MODEL


def parser(doc, steps):
    """The options every CPU benchmark takes: --build, --steps, --json."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=steps, help="steps per run")
    ap.add_argument("--json", help="write the results here")
    return ap


def setup(args):
    """(pipemesh-opt, pipemesh-run, work folder, model) for parsed options."""
    opt, run = tools(args.build)
    return opt, run, WORK, ensure_model()


def random_token_shard(path, vocab, count=200_000, seed=0):
    """Writes `count` random tokens below `vocab` as an llm.c shard (uint16) at `path`."""
    tokens = np.random.default_rng(seed).integers(0, vocab, count).astype(np.uint16)
    header = np.zeros(256, np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.tobytes())
    return path


def alternating_runs(sides, rounds, steps, work, data=None):
    """Trains every side `steps` steps per run, the sides taking turns for `rounds` rounds
    (the machine's load drifts; alternating spreads it over both). `sides` maps a name to
    (pipemesh-run, plan). Returns, by name: step_ms (every run's steps after its first),
    loss_last, arena_bytes, staging_bytes (bf16 storage's f32 copies) and peak_rss_bytes."""
    out = {name: {"step_ms": [], "peak_rss_bytes": 0} for name in sides}
    for r in range(rounds):
        for name, (run, plan) in sides.items():
            s = out[name]
            log = os.path.join(work, re.sub(r"[^\w.-]", "_", name) + ".jsonl")
            cmd = ["/usr/bin/time", "-f", "maxrss_kb %M", run, plan, "--steps", str(steps),
                   "--log-json", log] + (["--data", data] if data else [])
            p = subprocess.run(cmd, check=True, capture_output=True, text=True)
            rss = re.search(r"maxrss_kb (\d+)", p.stderr)
            s["peak_rss_bytes"] = max(s["peak_rss_bytes"], int(rss.group(1)) * 1024)
            rows = [json.loads(line) for line in open(log) if line.strip()]
            s["step_ms"] += [row["ms"] for row in rows[1:]]
            s["loss_last"] = rows[-1]["loss"]
            m = re.search(r"arena (\d+) bytes(?: \(\+ (\d+) bytes of f32 staging)?", p.stdout)
            s["arena_bytes"], s["staging_bytes"] = int(m.group(1)), int(m.group(2) or 0)
            print(f"round {r}: {name:8s} " + " ".join(f"{row['ms']:.1f}" for row in rows) +
                  f" ms, arena {s['arena_bytes'] / 2**20:.1f} MiB", flush=True)
    return out


def require_same_loss(runs, a, b, rel_tol=1e-5):
    """Exits when sides `a` and `b` of alternating_runs end on different losses: the
    builds compared compute the same math, a difference is a bug, not a speed-up."""
    la, lb = runs[a]["loss_last"], runs[b]["loss_last"]
    if abs(la - lb) > rel_tol * abs(lb):
        raise SystemExit(f"the two builds train differently: last loss {la} ({a}) vs {lb} ({b})")
