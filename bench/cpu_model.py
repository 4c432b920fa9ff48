"""The CPU benchmarks' model and tools (bench/cpu_step.py, pipeline_step.py,
bf16_storage.py): GPT-2 style L=6, C=384, H=6, V=8192, ctx 256, written once by
models/gen_gpt2.py into bench/out/."""
import argparse
import os
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
