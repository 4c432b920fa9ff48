#!/usr/bin/python3
"""Pipeline benchmark (issue 4): step time of pp=2 dp=1 against pp=1 for a model that fits
one process, measured in the same run, with each rank's compute / communication / idle
split from the runtime's own counters (--log-json `ranks`), for calibrating the simulator.

Model: GPT-2 style L=6, C=384, H=6, V=8192 (the CPU-step benchmark's model), batch 4,
seq 256, 4 micro-batches, 1F1B. Both use the machine's 2 cores: pp=1 one rank with 2
threads, pp=2 two ranks with 1 thread each.

    bench/pipeline_step.py [--build build] [--steps 6] [--json OUT]
"""
import json
import os
import statistics
import subprocess

import cpu_model

def main():
    args = cpu_model.parser(__doc__, steps=6).parse_args()
    opt, run, work, model = cpu_model.setup(args)
    corpus = os.path.join(work, "corpus.bin")
    subprocess.run([run, "--write-default-corpus", corpus], check=True, capture_output=True)
    result = {}
    for pp in (1, 2):
        threads = str(max(1, (os.cpu_count() or 2) // pp))
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
        plan = os.path.join(work, f"pipeline_pp{pp}.plan")
        subprocess.run([opt, model, f"--pipemesh-compile=batch=4 seq=256 microbatches=4 "
                        f"pp={pp} schedule=1f1b", "-o", plan], check=True)
        log = os.path.join(work, f"pipeline_pp{pp}.jsonl")
        subprocess.run(["mpirun", "--oversubscribe", "-np", str(pp), run, plan, "--data", corpus,
                        "--steps", str(args.steps), "--log-json", log], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        rows = [json.loads(l) for l in open(log)][1:]  # step 0 warms up
        ranks = []
        for r in range(pp):
            per = [row["ranks"][r] for row in rows]
            ranks.append({k: statistics.median(p[k] for p in per)
                          for k in ("compute_ms", "comm_ms", "idle_ms")})
        result[f"pp{pp}"] = {"step_ms": statistics.median(r["ms"] for r in rows),
                             "ranks": ranks}
    ratio = result["pp2"]["step_ms"] / result["pp1"]["step_ms"]
    result["step_time_ratio_pp2_over_pp1"] = ratio
    for pp in (1, 2):
        res = result[f"pp{pp}"]
        print(f"pp={pp}: step {res['step_ms']:.1f} ms")
        for r, split in enumerate(res["ranks"]):
            print(f"   rank {r}: compute {split['compute_ms']:.1f} ms, comm {split['comm_ms']:.1f}"
                  f" ms, idle {split['idle_ms']:.1f} ms")
    print(f"pp=2 / pp=1 step time: {ratio:.3f} (same cores; the 1F1B bubble alone is "
          f"(p-1)/(m+p-1) = 0.2 of the pipelined step)")
    if args.json:
        json.dump(result, open(args.json, "w"), indent=2)


if __name__ == "__main__":
    main()
