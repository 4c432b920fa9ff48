#!/usr/bin/python3
"""Parallel-equivalence grid (issue 4): every (pp, dp, vpp, schedule, zero) trains the
same losses as pp=1 dp=1 within 1e-5 relative over 5 steps (DESIGN.md section 5, oracle 3).

The global batch is fixed (dp * microbatches * batch), so every configuration trains on
exactly the same data (canonical sampling). The model is a generated 8-layer GPT, so
pp=4 x vpp=2 still has a layer per chunk. Runs with oversubscribed `mpirun`, one thread
per rank. CI runs a subset (runtime test `compiled_parallel`); this script runs the grid:

    parallel_grid.py --opt build/bin/pipemesh-opt --run build/bin/pipemesh-run \\
        [--pp 1,2,3,4] [--dp 1,2] [--vpp 1,2] [--zero 0,1,2,3] [--microbatches 16]
        [--schedules gpipe,1f1b,interleaved,bfs,zb-h1,zb-h2,elastic:3+1/2+2] [--extra OPTS]
        [--ref-extra OPTS] [--ref-dp N] [--model MODEL.onnx]
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--opt", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--pp", default="1,2,3,4")
    ap.add_argument("--dp", default="1,2")
    ap.add_argument("--vpp", default="1,2")
    ap.add_argument("--zero", default="0,1,2,3")
    ap.add_argument("--schedules", default="gpipe,1f1b,interleaved")
    # 16: with 4 micro-batches per replica a stage's sends to two peers never
    # complete out of order, which hid a buffer-reuse bug at pp=4 dp=2 (a4be274).
    ap.add_argument("--microbatches", type=int, default=16, help="at dp=1 (halved at dp=2)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--extra", default="", help="more --pipemesh-compile options, e.g. "
                    "'recompute=full'")
    ap.add_argument("--ref-extra", default="", help="--pipemesh-compile options of the pp=1 dp=1 "
                    "reference too, e.g. 'activations=bf16'")
    ap.add_argument("--ref-dp", type=int, default=1, help="data-parallel replicas of the pp=1 "
                    "reference (2 for options whose numerics depend on the dp sum, e.g. "
                    "'grad-reduce=bf16')")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--seq", type=int, default=8, help="tokens per sequence (at most the "
                    "model's context: 16 for the generated GPT)")
    ap.add_argument("--model", help="an ONNX model to train instead of the generated 8-layer "
                    "GPT (e.g. models/fixtures/hf_falcon_dynamo.onnx; pp at most its layers)")
    args = ap.parse_args()
    ints = lambda s: [int(x) for x in s.split(",")]
    work = tempfile.mkdtemp(prefix="pipemesh-grid-")
    model = os.path.abspath(args.model) if args.model else os.path.join(work, "gpt8.onnx")
    # Width 64: a pipeline message (batch 2 x seq 8 x 64 floats, 4 KB or more) is past Open MPI's
    # shared-memory eager limit, so it is read from the sender's buffer only once matched:
    # a plan or runtime that reused a buffer still being sent would show here.
    if not args.model:
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "gen_gpt2.py"),
                        "--layers", "8", "--embd", "64", "--heads", "2", "--vocab", "256",
                        "--ctx", "16", "-o", model], check=True, capture_output=True)
    corpus = os.path.join(work, "corpus.bin")
    subprocess.run([args.run, "--write-default-corpus", corpus], check=True,
                   capture_output=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    def losses(pp, dp, vpp, sched, zero, extra_opts=args.extra):
        m = args.microbatches // dp
        name = f"p{pp}d{dp}v{vpp}{sched.replace(':', '_').replace('/', '_').replace('+', '-')}z{zero}"
        # "elastic:2+2/4" is schedule=elastic fwd-groups=2,2 bwd-groups=4.
        extra = ""
        if ":" in sched:
            sched, groups = sched.split(":")
            fwd, bwd = groups.replace("+", ",").split("/")
            extra = f" fwd-groups={fwd} bwd-groups={bwd}"
        plan, log = os.path.join(work, name + ".plan"), os.path.join(work, name + ".jsonl")
        r = subprocess.run([args.opt, model, f"--pipemesh-compile=batch=2 seq={args.seq} "
                            f"microbatches={m} pp={pp} dp={dp} vpp={vpp} schedule={sched} "
                            f"zero={zero}{extra} {extra_opts}", "-o", plan], capture_output=True, text=True)
        if r.returncode:
            return None, "compile: " + r.stderr.strip()[-300:]
        r = subprocess.run(["mpirun", "--oversubscribe", "-np", str(pp * dp), args.run, plan,
                            "--data", corpus, "--steps", str(args.steps), "--lr", "3e-3",
                            "--grad-clip", "1.0", "--weight-decay", "0.1", "--log-json", log],
                           capture_output=True, text=True, env=env, timeout=600)
        if r.returncode:
            return None, "run: " + (r.stdout + r.stderr).strip()[-400:]
        return [json.loads(l)["loss"] for l in open(log)], None

    # The one-stage plan (one process unless --ref-dp).
    ref, err = losses(1, args.ref_dp, 1, "1f1b", 0, extra_opts=args.ref_extra)
    if ref is None:
        print("reference failed:", err)
        return 1
    print(f"reference pp=1 dp={args.ref_dp} losses:", " ".join(f"{x:.6f}" for x in ref),
          flush=True)
    passed = failed = 0
    for pp, dp, vpp, sched, zero in itertools.product(
            ints(args.pp), ints(args.dp), ints(args.vpp), args.schedules.split(","),
            ints(args.zero)):
        if (dp == 1 and zero > 0) or (vpp == 1 and sched == "interleaved"):
            continue  # zero needs replicas; interleaving needs virtual stages
        if vpp > 1 and sched.startswith("zb-"):
            continue  # the Zero Bubble schedules run one chunk per rank
        got, err = losses(pp, dp, vpp, sched, zero)
        if got is None:
            failed += 1
            print(f"FAIL pp={pp} dp={dp} vpp={vpp} {sched:11s} zero={zero}: {err}", flush=True)
            continue
        rel = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        ok = rel <= args.rtol
        passed += ok
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} pp={pp} dp={dp} vpp={vpp} {sched:11s} zero={zero} "
              f"max rel err {rel:.2e}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
