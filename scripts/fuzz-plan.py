#!/usr/bin/env python3
"""Structure-aware fuzzing of what pipemesh-run and pipemesh-sim read: plan
manifests and cluster files.

    /usr/bin/python3 scripts/fuzz-plan.py [--build build] [--seed 1] [--count 300]
        [--target manifest,program,bytes,checkpoint,cluster]   (one or several)

ctest runs it with a dozen mutants of each target (runtime.fuzz-plan), as a
regression guard; longer runs find more.

manifest: one JSON node of a compiled plan's manifest is deleted, duplicated,
swapped, nudged (numbers +-1, +-2) or replaced (null, -1, 2**40, nan, "", [],
{}, ...); the plan is rewritten with a valid checksum (so the mutation gets
past the header checks) and read by `pipemesh-run --check-rank R` for every
rank and by `pipemesh-sim`; single-rank plans also train one step.
program: the same, confined to rank 0's instruction stream of the pp=1 plan,
which then trains one step. bytes: the file itself cut short, grown, a byte
flipped, or a length in its header changed (checksum not recomputed), read by
pipemesh-run --check-rank 0, pipemesh-sim and pipemesh-opt --print-plan.
checkpoint: one JSON node of a checkpoint's manifest.json mutated, then --resume; a
refusal must name what is wrong.
cluster: one to two fields of a cluster preset's
JSON replaced or deleted, simulated on three plans; the JSON written must parse
and its step time, throughput and bubble be finite.

A finding is a signal, an exit status other than 0, 1 or 2, an assertion or
sanitizer message, a hang (30 s), an error that is the JSON library's own (no
field named), or (cluster) output that is not finite JSON.
Each finding's input is kept in the work directory. A bad plan that is refused
with a message, or accepted, is not a finding: whether an accepted mutation
trains what the user meant is beyond a fuzzer.
"""
import argparse
import copy
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "runtime", "tools"))
import make_test_plan as mtp  # noqa: E402

MODEL = os.path.join(REPO, "models", "fixtures", "torch_gpt2_tiny_op17_dyn_fold.onnx")
PLANS = {  # name: compile options (batch=2 seq=16)
    "pp1": "microbatches=2",
    "pp1-full-recompute": "microbatches=2 recompute=full",  # pp1's model: resumes it resharded
    "pp2dp2z1": "pp=2 dp=2 zero=1 microbatches=2 schedule=1f1b",
    "pp2dp2z3": "pp=2 dp=2 zero=3 microbatches=2 schedule=bfs prefetch=2",
    "zb-recompute": "pp=2 microbatches=4 schedule=zb-h1 recompute=auto mem-limit=1600KB",
    "elided-pp2dp4": "pp=2 dp=4 zero=2 microbatches=2 schedule=1f1b",
}
REPLACEMENTS = [None, -1, 0, 1, 2, 3, 7, 2**31, 2**40, -2**31, 1.5, 1e300, float("nan"), "",
                "x", [], {}, [0], True, False]
CRASH_WORDS = ("Assertion", "terminate called", "UNREACHABLE", "Stack dump", "Segmentation",
               "AddressSanitizer", "runtime error:")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def read_plan(path):
    data = open(path, "rb").read()
    manifest_len, weights_len = struct.unpack("<QQ", data[16:32])
    return json.loads(data[40:40 + manifest_len]), data[40 + manifest_len:40 + manifest_len + weights_len]


def write_plan(path, manifest, weights):
    m = json.dumps(manifest, separators=(",", ":")).encode()
    body = m + weights
    head = mtp.MAGIC + struct.pack("<II", mtp.VERSION, 0) + struct.pack(
        "<QQQ", len(m), len(weights), mtp.checksum64(body))
    with open(path, "wb") as f:
        f.write(head + body)


def nodes(x, path=()):
    yield path, x
    if isinstance(x, dict):
        for k, v in x.items():
            yield from nodes(v, path + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from nodes(v, path + (i,))


def mutate(doc, rng, prefix=""):
    """One mutation of a JSON node under `prefix`; returns (doc, description)."""
    doc = copy.deepcopy(doc)
    every = list(nodes(doc))
    candidates = [n for n in every[1:] if "/".join(map(str, n[0])).startswith(prefix)]
    path, value = rng.choice(candidates)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    op = rng.randrange(6)
    if op == 0 and isinstance(parent, dict):
        del parent[key]
        what = "deleted"
    elif op == 1 and isinstance(parent, list):
        if rng.random() < 0.5:
            del parent[key]
            what = "deleted from the list"
        else:
            parent.insert(key, copy.deepcopy(parent[key]))
            what = "duplicated in the list"
    elif op == 2 and isinstance(value, (int, float)) and not isinstance(value, bool):
        new = value + rng.choice([-2, -1, 1, 2]) if isinstance(value, int) else value * rng.choice([-1, 0, 2])
        parent[key] = new
        what = f"{value} -> {new}"
    elif op == 3 and isinstance(parent, list) and len(parent) > 1:
        j = rng.randrange(len(parent))
        parent[key], parent[j] = parent[j], parent[key]
        what = f"swapped with [{j}]"
    elif op == 4 and isinstance(value, str):
        parent[key] = rng.choice([v for _, v in every if isinstance(v, str)])
        what = f"{value!r} -> {parent[key]!r}"
    else:
        parent[key] = rng.choice(REPLACEMENTS)
        what = f"{str(value)[:40]} -> {parent[key]!r}"
    return doc, "/".join(map(str, path)) + ": " + what


def verdict(cmd):
    """None when the tool answered (ran, or refused with a message), else why not."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=ENV)
    except subprocess.TimeoutExpired:
        return "hang (30 s)", ""
    out = r.stdout + r.stderr
    if r.returncode < 0 or r.returncode > 2 or any(w in out for w in CRASH_WORDS):
        return f"exit {r.returncode}", out[-1200:]
    if "type_error" in out or "out_of_range" in out:  # a JSON library error, no field named
        return "an error that names no field", out[-1200:]
    return None, out


def compile_plans(opt, work):
    paths = {}
    for name, options in PLANS.items():
        path = os.path.join(work, name + ".plan")
        subprocess.run([opt, MODEL, f"--pipemesh-compile=batch=2 seq=16 {options}", "-o", path],
                       check=True, capture_output=True)
        paths[name] = path
    return paths


def fuzz_plans(args, bins, plans, work, rng):
    findings = 0
    sources = [plans["pp1"]] if args.target == "program" else list(plans.values())
    prefix = "ranks/0/program" if args.target == "program" else ""
    for i in range(args.count):
        src = rng.choice(sources)
        manifest, weights = read_plan(src)
        world = manifest["parallel"]["world_size"]
        mutated, desc = mutate(manifest, rng, prefix)
        path = os.path.join(work, f"mutant-{args.seed}-{i}.plan")
        write_plan(path, mutated, weights)
        cmds = [[bins["run"], path, "--check-rank", str(r)] for r in range(world)]
        cmds.append([bins["sim"], path, "--cluster", "a100-40g-25gbps", "--quiet"])
        if world == 1:
            cmds.append([bins["run"], path, "--steps", "1"])
        for cmd in cmds:
            why, out = verdict(cmd)
            if why:
                findings += 1
                print(f"[{i}] {why}: {os.path.basename(src)} {desc}\n  {' '.join(cmd)}\n  "
                      + out.strip().replace("\n", "\n  "), flush=True)
                break
        else:
            os.remove(path)
    return findings


def fuzz_bytes(args, bins, plans, work, rng):
    findings = 0
    for i in range(args.count):
        src = rng.choice(list(plans.values()))
        original = open(src, "rb").read()
        data = bytearray(original)
        op = rng.randrange(4)
        if op == 0:
            cut = rng.choice([rng.randrange(41), rng.randrange(len(data))])
            data, desc = data[:cut], f"cut to {cut} bytes"
        elif op == 1:
            data, desc = data + bytes(rng.randrange(1, 64)), "grown"
        elif op == 2:
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
            desc = f"bit flipped at byte {at}"
        else:
            field = rng.choice([16, 24])  # manifest / weights length
            value = rng.choice([0, 1, 40, len(data), 2**31, 2**63, 2**64 - 1,
                                struct.unpack("<Q", data[field:field + 8])[0] + rng.choice([-1, 1])])
            data[field:field + 8] = struct.pack("<Q", value % 2**64)
            desc = f"header length at {field} set to {value}"
        path = os.path.join(work, f"bytes-{args.seed}-{i}.plan")
        with open(path, "wb") as f:
            f.write(bytes(data))
        # Every change but one to the reserved header bytes (12..15) breaks the
        # container (magic, version, lengths, checksum): each reader must refuse it.
        must_refuse = data != original and not (
            op == 2 and 12 <= at < 16)
        for cmd in ([bins["run"], path, "--check-rank", "0"],
                    [bins["sim"], path, "--quiet"], [bins["opt"], "--print-plan", path]):
            why, out = verdict(cmd)
            if not why and must_refuse and "error" not in out:
                why = "accepted a damaged container"
            if why:
                findings += 1
                print(f"[{i}] {why}: {os.path.basename(src)} {desc}\n  {' '.join(cmd)}\n  "
                      + out.strip()[-600:].replace("\n", "\n  "), flush=True)
                break
        else:
            os.remove(path)
    return findings


def fuzz_checkpoints(args, bins, plans, work, rng):
    plan, good = plans["pp1"], os.path.join(work, "checkpoint")
    subprocess.run([bins["run"], plan, "--steps", "2", "--checkpoint-dir", good], check=True,
                   capture_output=True, env=ENV)
    docs = {name: json.load(open(os.path.join(good, "step-2", name)))
            for name in ("manifest.json", "index.json")}
    findings = 0
    for i in range(args.count):
        ckpt = os.path.join(work, f"checkpoint-{args.seed}-{i}")
        shutil.copytree(good, ckpt)
        # Half resume with another plan of the model, which reads index.json (mutated
        # instead of the manifest in half of those).
        resharded = rng.random() < 0.5
        name = "index.json" if resharded and rng.random() < 0.5 else "manifest.json"
        mutated, desc = mutate(docs[name], rng)
        desc = f"{name}: {desc}" + (" (resumed resharded)" if resharded else "")
        with open(os.path.join(ckpt, "step-2", name), "w") as f:
            json.dump(mutated, f, indent=1)
        if name == "index.json":  # past the checksum, to the parser
            m = dict(docs["manifest.json"])
            with open(os.path.join(ckpt, "step-2", name), "rb") as f:
                data = f.read()
            m["index"] = dict(m["index"], bytes=len(data), xxh3_64="0x%016x" % mtp.checksum64(data))
            with open(os.path.join(ckpt, "step-2", "manifest.json"), "w") as f:
                json.dump(m, f, indent=1)
        resume = plans["pp1-full-recompute"] if resharded else plan
        cmd = [bins["run"], resume, "--steps", "3", "--checkpoint-dir", ckpt, "--resume"]
        why, out = verdict(cmd)
        if why:
            findings += 1
            print(f"[{i}] {why}: {desc}\n  {' '.join(cmd)}\n  {out.strip()[-600:]}", flush=True)
        else:
            shutil.rmtree(ckpt)
    return findings


def fuzz_clusters(args, bins, plans, work, rng):
    base = json.loads(subprocess.run([bins["sim"], "--cluster", "a100-40g-25gbps", "--print-cluster"],
                                     capture_output=True, text=True, check=True).stdout)
    findings = 0
    cluster, summary = os.path.join(work, "cluster.json"), os.path.join(work, "summary.json")
    for i in range(args.count):
        doc = base
        for _ in range(rng.choice([1, 1, 2])):
            doc, _ = mutate(doc, rng)
        text = json.dumps(doc)
        with open(cluster, "w") as f:
            f.write(text)
        if os.path.exists(summary):
            os.remove(summary)
        plan = rng.choice([plans["pp2dp2z1"], plans["elided-pp2dp4"], plans["zb-recompute"]])
        why, out = verdict([bins["sim"], plan, "--cluster", cluster, "--quiet", "--json", summary])
        if not why and os.path.exists(summary):
            try:
                s = json.load(open(summary))
                if not all(isinstance(s[k], (int, float)) and math.isfinite(s[k])
                           for k in ("step_time_s", "tokens_per_s", "bubble_frac")):
                    why = "non-finite summary"
            except (ValueError, KeyError) as e:
                why = f"summary is not the JSON it should be ({e})"
        if why:
            findings += 1
            kept = os.path.join(work, f"cluster-{args.seed}-{i}.json")
            with open(kept, "w") as f:
                f.write(text)
            print(f"[{i}] {why}: {kept}\n  {out.strip()[-600:]}", flush=True)
    return findings


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=300)
    targets = ("manifest", "program", "bytes", "checkpoint", "cluster")
    ap.add_argument("--target", default="manifest",
                    help="comma-separated, of " + ", ".join(targets) + " (default %(default)s)")
    ap.add_argument("--work", help="keep mutants and findings here (default: a temporary directory)")
    args = ap.parse_args()
    chosen = args.target.split(",")
    if not set(chosen) <= set(targets):
        ap.error(f"--target takes {', '.join(targets)}, got {args.target}")
    # The binaries: under --build, or as ctest names them.
    bins = {k: os.environ.get(env) or os.path.join(args.build, "bin", v) for k, v, env in
            (("opt", "pipemesh-opt", "PIPEMESH_OPT"), ("run", "pipemesh-run", "PIPEMESH_RUN"),
             ("sim", "pipemesh-sim", "PIPEMESH_SIM"))}
    work = args.work or tempfile.mkdtemp(prefix="pipemesh-fuzz-")
    os.makedirs(work, exist_ok=True)
    plans = compile_plans(bins["opt"], work)
    total = 0
    for target in chosen:
        args.target = target
        rng = random.Random(args.seed)
        fuzz = {"cluster": fuzz_clusters, "bytes": fuzz_bytes,
                "checkpoint": fuzz_checkpoints}.get(target, fuzz_plans)
        findings = fuzz(args, bins, plans, work, rng)
        print(f"{target}, seed {args.seed}: {args.count} mutants, {findings} findings")
        total += findings
    if total == 0 and not args.work:
        shutil.rmtree(work)  # nothing to keep
    else:
        print(f"inputs kept in {work}")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
