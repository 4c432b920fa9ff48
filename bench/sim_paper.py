#!/usr/bin/python3
"""Elastic-pipeline paper setting in simulation (issue 5, "Performance").

GPT models of about 1.3B, 7B and 13B parameters (shapes-only ONNX from models/gen_gpt2.py,
seq 2048, vocab 50257) on 16 / 32 / 64 A100-40GB-class GPUs (8 per node) with 25 and 100
Gb/s between nodes (pipemesh-sim presets a100-40g-25gbps / a100-40g-100gbps), global batch
fixed at 128 sequences. For each of 1f1b, interleaved (vpp=2), bfs (vpp=2), zb-h1 (vpp=1)
and elastic (vpp=2; uniform fwd/bwd groups g=pp, 2pp, M and the mixed fwd g=M / bwd g=pp,
where g=pp and g=M are taken from the interleaved and bfs plans, see candidates()) the script
compiles plans with recompute=auto mem-limit=40GiB at zero=1, then zero=2, then zero=3, going
up a level only while the lower one failed to compile, recomputes or does not fit the
device (run_chain(): a higher level only adds communication, so once a level needs neither
recompute nor more memory the higher ones cannot be faster); with --zero-auto also
`zero=auto cluster=PRESET` (the compiler's per-chunk ZeRO search, one compile per network)
for the elastic candidates and, unless --zero-auto=elastic, the interleaved and bfs plans.
Plans that may shard parameters (zero=3, zero=auto) are compiled per network with
prefetch=auto cluster=NET (the compiler simulates ZeRO-3 gather depths 1 to 4 on it).
Every plan is simulated on both clusters (zero=auto ones on their own); per row (model, gpus,
network, schedule) table 1 keeps the fastest plan that compiled within mem-limit, table 2 the
fastest whose simulated peak fits the device (pipemesh-sim's fits_memory; since the presets
are in GiB the two agree unless the simulator's liveness peak exceeds the compiler's arena).

    bench/sim_paper.py [--build build] [--jobs 2] [--only 1.3B@16,7B@32] [--extra]
                       [--zero-auto[=elastic|all]] [--table]

Results are cached per configuration in bench/out/sim_paper/cache/, tagged with a hash of
the two binaries: a rerun skips the done ones (failures included) made by the same binaries
and redoes the rest; bench/out/sim_paper.json holds every run and the chosen rows,
bench/out/sim_paper.md the markdown tables.
"""
import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
WORK = os.path.join(OUT, "sim_paper")
CACHE = os.path.join(WORK, "cache")

MODELS = {  # name: (layers, embd, heads)
    "1.3B": (24, 2048, 16),
    "7B": (32, 4096, 32),
    "13B": (40, 5120, 40),
}
SEQ, VOCAB = 2048, 50257
GLOBAL_BATCH = 128          # sequences per step = batch * microbatches * dp (--global-batch)
ACTIVATIONS = "f32"         # storage type of activation buffers (--activations)
PARAMS = "f32"              # what F and B read of the parameters (--params)
GRAD_REDUCE = "f32"         # element type of the dp gradient sums (--grad-reduce)
DP_COLLECTIVES = "flat"     # how the dp collectives run (--dp-collectives)
PP = 4                       # pipeline stages for every GPU count; dp = gpus / pp
NETWORKS = ("a100-40g-25gbps", "a100-40g-100gbps")
MEM_LIMIT = "40GiB"
SCHEDULES = ("1f1b", "interleaved", "bfs", "zb-h1", "elastic")
# (model, gpus) rows in the order they run: the paper's diagonal (model grows with the
# cluster) plus 1.3B on 64 GPUs first; --extra adds the rest of the 3 x 3 grid.
PRIORITY = [("1.3B", 16), ("7B", 32), ("13B", 64), ("1.3B", 64)]
EXTRA = [("1.3B", 32), ("7B", 16), ("7B", 64), ("13B", 16), ("13B", 32)]

LOCK = threading.Lock()
BIN_HASH = None              # set in main(): short hash of pipemesh-opt + pipemesh-sim
COMPILE_TIMEOUT = {"fixed": 600, "auto": 420}
LADDER_RECOMPUTE = 0.0       # --ladder-recompute
ELASTIC_RECOMPUTE = None     # --elastic-max-recompute
VPPS = None                  # --vpps: the virtual stages tried (default: vpps())


def log(msg):
    with LOCK:
        print(time.strftime("%H:%M:%S"), msg, flush=True)


def model_file(name):
    """The shapes-only model of `name`, written on first use (compile_time.py calls this
    without sim_paper's main, so the folder may not exist yet)."""
    path = os.path.join(WORK, f"gpt_{name}.onnx")
    if not os.path.exists(path):
        os.makedirs(WORK, exist_ok=True)
        layers, embd, heads = MODELS[name]
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "models", "gen_gpt2.py"),
                        "--layers", str(layers), "--embd", str(embd), "--heads", str(heads),
                        "--vocab", str(VOCAB), "--ctx", str(SEQ), "--shapes-only",
                        "--with-loss", "--loss-only", "--causal-mask", "computed",
                        "-o", path], check=True, stdout=subprocess.DEVNULL)
    return path


def shape(gpus, b=None):
    """pp, dp, micro-batch size, micro-batches for a GPU count at the fixed global batch
    (micro-batch size b when given: --microbatch-sizes)."""
    dp = gpus // PP
    per_replica = GLOBAL_BATCH // dp
    if b:
        return PP, dp, b, per_replica // b
    batch = 2 if per_replica >= 4 * PP else 1   # keep at least 2 * pp micro-batches
    while per_replica // batch > 32:            # and at most 32 (compile time)
        batch *= 2
    return PP, dp, batch, per_replica // batch


def vpps(model):
    """Virtual stages per rank tried by the looping schedules: 2 and every larger divisor
    of the layers per rank (1.3B: 6 layers per rank -> 2, 3, 6; 7B: 8 -> 2, 4, 8; 13B: 10
    -> 2, 5, 10): breadth-first orders hide more communication behind smaller chunks, and
    interleaved's bubble shrinks with more of them."""
    if VPPS:
        return VPPS
    per_rank = MODELS[model][0] // PP
    return [2] + [v for v in range(3, per_rank + 1) if per_rank % v == 0]


def candidates(schedule, pp, m, model):
    """[(vpp, extra compile options, label)] tried for one schedule.

    Elastic with uniform groups g=pp is interleaved's order and g=M is bfs's (checked: the
    1.3B@16 and 7B@32 plans simulate to identical numbers), so those two are not compiled
    again for elastic: choose() counts the interleaved and bfs plans as elastic candidates.
    Compiled for elastic: uniform g=2pp (when 2pp < M) and the mixed fwd g=M / bwd g=pp;
    and with the backward split into B and W (defer-w=chunk and defer-w=all: W's fill
    the waits, the rest run before the next chunk's backwards or at the end; bucket: a
    chunk's first gradient bucket as chunk, its other buckets after the next chunk's B's):
    the g=M order all three ways and the mixed one with chunk and bucket."""
    if schedule in ("1f1b", "zb-h1"):
        return [(1, "", "")]
    tag = lambda v: "" if v == 2 else f"v{v}"
    if schedule in ("interleaved", "bfs"):
        return [(v, "", tag(v)) for v in vpps(model)]
    groups = lambda g: ",".join([str(g)] * (m // g))
    out = []
    for v in vpps(model):
        sep = "," if tag(v) else ""
        for g in (2 * pp, 4 * pp):
            if g < m and m % g == 0:
                out.append((v, f"fwd-groups={groups(g)} bwd-groups={groups(g)}",
                            f"{tag(v)}{sep}g={g}"))
        if pp < m and m % pp == 0:
            out.append((v, f"fwd-groups={m} bwd-groups={groups(pp)}",
                        f"{tag(v)}{sep}fwd={m},bwd={pp}"))
            for d in ("chunk", "bucket"):
                out.append((v, f"fwd-groups={m} bwd-groups={groups(pp)} defer-w={d}",
                            f"{tag(v)}{sep}fwd={m},bwd={pp},defer-w={d}"))
        for d in ("chunk", "all", "bucket"):
            out.append((v, f"fwd-groups={m} bwd-groups={m} defer-w={d}",
                        f"{tag(v)}{sep}g={m},defer-w={d}"))
    return out


def summarize(sim):
    ranks = sim.get("ranks", [])
    return {k: sim.get(k) for k in (
        "step_time_s", "tokens_per_s", "tokens_per_step", "mfu", "all_device_idle_frac",
        "exposed_comm_frac", "bubble_frac", "recompute_frac", "compute_frac",
        "max_peak_mem_bytes", "mem_capacity_bytes", "fits_memory",
        # What no schedule beats (pipemesh-sim's floor): the busiest collective stream
        # and the busiest compute.
        "collective_floor_s", "compute_max_s")} | {
        "max_arena_bytes": max((r.get("arena_bytes", 0) for r in ranks), default=0),
        "ranks_with_recompute": sum(1 for r in ranks if r.get("recompute_s", 0) > 0)}


def bin_hash(*paths):
    h = hashlib.sha1()
    for p in paths:
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def plan_choices(opt, plan):
    """What the searches chose, from `pipemesh-opt --print-plan`'s parallel line: the
    per-chunk ZeRO levels (a list for mixed levels, an int for one level, None when
    unreadable) and the ZeRO-3 prefetch depth (None without ZeRO-3)."""
    cp = subprocess.run([opt, "--print-plan", plan], capture_output=True, text=True)
    zero = prefetch = None
    for line in cp.stdout.splitlines():
        if line.startswith("parallel:"):
            for word in line.split():
                if word.startswith("zero-per-chunk=") and zero is None:
                    zero = [int(z) for z in word.split("=", 1)[1].split(",")]
                elif word.startswith("zero=") and zero is None:
                    zero = int(word.split("=", 1)[1])
                elif word.startswith("prefetch=") and word[9:].isdigit() and prefetch is None:
                    prefetch = int(word[9:])
    return zero, prefetch


def run_config(opt, simbin, model, gpus, schedule, vpp, extra, label, zero, net=None, b=None):
    """Compile one plan and simulate it on every network (zero=auto: on `net`, the cluster
    it was searched for); cached by key and binary hash."""
    pp, dp, batch, m = shape(gpus, b)
    key = (f"{model}_g{gpus}{'' if GLOBAL_BATCH == 128 else f'_B{GLOBAL_BATCH}'}"
           f"{f'_b{b}' if b else ''}"
           f"_{schedule}{('_' + label) if label else ''}_z{zero}"
           f"{('_' + net.split('-')[-1]) if net else ''}"
           f"{'' if ACTIVATIONS == 'f32' else '_' + ACTIVATIONS}"
           f"{'' if PARAMS == 'f32' else '_p' + PARAMS}"
           f"{'' if GRAD_REDUCE == 'f32' else '_g' + GRAD_REDUCE}"
           f"{'' if DP_COLLECTIVES == 'flat' else '_hier'}"
           .replace("=", "").replace(",", "_"))
    cache = os.path.join(CACHE, key + ".json")
    if os.path.exists(cache):
        rec = json.load(open(cache))
        # A record simulated on fewer networks than asked (--networks) is redone.
        if rec.get("bin_hash") == BIN_HASH and all(n in rec["sims"] for n in ([net] if net else NETWORKS)):
            return rec
    opts = (f"batch={batch} seq={SEQ} pp={pp} dp={dp} vpp={vpp} microbatches={m} "
            f"schedule={schedule} zero={zero} recompute=auto mem-limit={MEM_LIMIT} "
            f"shapes-only=true activations={ACTIVATIONS} params={PARAMS} "
            f"grad-reduce={GRAD_REDUCE} "
            f"{'' if DP_COLLECTIVES == 'flat' else 'dp-collectives=' + DP_COLLECTIVES + ' '}"
            f"{extra}{(' cluster=' + net) if net else ''}"
            f"{' prefetch=auto' if zero in (3, 'auto') else ''}").strip()
    rec = {"key": key, "model": model, "gpus": gpus, "schedule": schedule, "label": label,
           "pp": pp, "dp": dp, "vpp": vpp, "batch": batch, "microbatches": m, "zero": zero,
           "options": opts, "sims": {}, "bin_hash": BIN_HASH, "global_batch": GLOBAL_BATCH,
           "activations": ACTIVATIONS, "params": PARAMS, "grad_reduce": GRAD_REDUCE,
           "dp_collectives": DP_COLLECTIVES}
    plan = os.path.join(WORK, key + ".plan")
    t0 = time.time()
    limit = COMPILE_TIMEOUT["auto" if zero == "auto" else "fixed"]
    try:
        cp = subprocess.run([opt, model_file(model), f"--pipemesh-compile={opts}", "-o", plan],
                            capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        cp = subprocess.CompletedProcess([], 124, "", f"compile timed out after {limit} s")
    rec["compile_s"] = round(time.time() - t0, 1)
    if cp.returncode:
        rec["compile_error"] = (cp.stderr or cp.stdout).strip().splitlines()[-1][:400] \
            if (cp.stderr or cp.stdout).strip() else f"exit {cp.returncode}"
        log(f"{key}: compile FAILED ({rec['compile_s']} s): {rec['compile_error']}")
    else:
        if zero in (3, "auto"):
            chosen, rec["prefetch_chosen"] = plan_choices(opt, plan)
            if zero == "auto":
                rec["zero_chosen"] = chosen
        for net in ([net] if net else NETWORKS):
            out = os.path.join(WORK, f"{key}.{net}.json")
            t1 = time.time()
            sp = subprocess.run([simbin, plan, "--cluster", net, "--json", out, "--quiet"],
                                capture_output=True, text=True)
            if sp.returncode:
                msg = (sp.stderr or sp.stdout).strip().splitlines()
                rec["sims"][net] = {"error": (msg[-1] if msg else f"exit {sp.returncode}")[:400]}
            else:
                rec["sims"][net] = summarize(json.load(open(out)))
                os.remove(out)
            rec["sims"][net]["sim_s"] = round(time.time() - t1, 1)
        os.remove(plan)
        log(f"{key}: compile {rec['compile_s']} s, " + ", ".join(
            f"{n.split('-')[-1]} {v.get('tokens_per_s', 0):.0f} tok/s"
            f" rc {v.get('recompute_frac', 0) or 0:.3f}" if "error" not in v else
            f"{n}: SIM ERROR {v['error']}" for n, v in rec["sims"].items()))
    with open(cache, "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def needs_more_zero(rec):
    """Try the next zero level when this one failed, did not fit, or recomputed more than
    --ladder-recompute of the step (default 0: any recompute). A higher level can at most
    save that recompute and adds communication: at 64 GPUs zero=2/3 plans were 5-10x slower
    than zero=1 ones that recomputed 0.4-3% (bench/out/sim_paper_B512.json), and each costs
    minutes to compile, so --ladder-recompute 0.02 skips those chains."""
    if "compile_error" in rec:
        return True
    for s in rec["sims"].values():
        if "error" in s or (s.get("recompute_frac") or 0) > LADDER_RECOMPUTE or \
                not s.get("fits_memory"):
            return True
    return False


def run_chain(opt, simbin, model, gpus, schedule, vpp, extra, label, zero_auto=False, b=None):
    """zero=1, then zero=2, then zero=3, each only while the previous level failed to
    compile, recomputed or did not fit the device (ZeRO-2 reduce-scatters every backward's
    gradients, blocking; ZeRO-3 also all-gathers parameters per action: a higher level
    saves memory and adds communication, so it can only win where the lower one recomputes
    or does not fit). zero_auto: also zero=auto cluster=NET, one compile per network."""
    recs = [run_config(opt, simbin, model, gpus, schedule, vpp, extra, label, 1, b=b)]
    for zero in (2, 3):
        if not needs_more_zero(recs[-1]):
            break
        if zero == 3:  # prefetch=auto chooses its depth on each network
            recs += [run_config(opt, simbin, model, gpus, schedule, vpp, extra, label, 3, net,
                                b=b) for net in NETWORKS]
            break
        recs.append(run_config(opt, simbin, model, gpus, schedule, vpp, extra, label, zero,
                               b=b))
    if zero_auto:
        for net in NETWORKS:
            recs.append(run_config(opt, simbin, model, gpus, schedule, vpp, extra, label,
                                   "auto", net, b=b))
    return recs


def choose(recs, model, gpus, net, schedule, strict=False):
    """The fastest plan of this row that compiled (the compiler holds its fp32 arena within
    mem-limit=40GiB) and simulated; strict: only plans whose simulated peak also fits the
    device (pipemesh-sim's fits_memory against the preset's 40 GiB)."""
    same = ("interleaved", "bfs", "elastic") if schedule == "elastic" else (schedule,)
    mine = [r for r in recs if r["model"] == model and r["gpus"] == gpus
            and r["schedule"] in same]
    ok = [r for r in mine if "compile_error" not in r and net in r["sims"]
          and "error" not in r["sims"][net]]
    row = {"model": model, "gpus": gpus, "network": net, "schedule": schedule}
    if not ok:
        errs = [r.get("compile_error") or r["sims"].get(net, {}).get("error") for r in mine]
        errs = {e.split(" error: ")[-1] for e in errs if e}   # drop the file:line prefix
        row["error"] = " / ".join(sorted(errs)) or "not run (yet)"
        return row
    if strict:
        ok = [r for r in ok if r["sims"][net].get("fits_memory")]
        if not ok:
            row["error"] = "no plan's simulated peak fits the device"
            return row
    if schedule == "elastic" and ELASTIC_RECOMPUTE is not None:
        # The target holds elastic's recompute under 2 % of the step: the
        # fastest plan within it, when one exists (the row notes a faster one beyond).
        within = [r for r in ok if (r["sims"][net].get("recompute_frac") or 0) < ELASTIC_RECOMPUTE]
        fastest = max(ok, key=lambda r: r["sims"][net]["tokens_per_s"])
        if within and fastest not in within:
            row["faster_beyond_recompute_limit"] = {
                "tokens_per_s": fastest["sims"][net]["tokens_per_s"],
                "recompute_frac": fastest["sims"][net].get("recompute_frac"),
                "label": fastest["label"], "vpp": fastest["vpp"], "zero": fastest["zero"]}
        ok = within or ok
    best = max(ok, key=lambda r: r["sims"][net]["tokens_per_s"])
    row.update(best["sims"][net])
    alias = {"interleaved": f" g={best['pp']} (=interleaved)",
             "bfs": f" g={best['microbatches']} (=bfs)"}
    label = (f" {best['label']}" if best["label"] else "") + (
        alias.get(best["schedule"], "") if schedule == "elastic" else "")
    row["config"] = (f"pp={best['pp']} dp={best['dp']} vpp={best['vpp']} b={best['batch']} "
                     f"M={best['microbatches']} zero={best['zero']}"
                     f"{zero_detail(best)}{label}")
    row["options"] = best["options"]
    return row


def zero_detail(rec):
    z, p = rec.get("zero_chosen"), rec.get("prefetch_chosen")
    out = ""
    if rec["zero"] == "auto" and z is not None:
        out = "(" + (",".join(map(str, z)) if isinstance(z, list) else str(z)) + ")"
    return out + (f" prefetch={p}" if p else "")


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}"


def table(rows):
    head = ("| model | GPUs | net | schedule | best config | step s | tokens/s | all-idle % "
            "| exposed comm % | bubble % | recompute % | peak GiB | fits device | "
            "elastic / interleaved | elastic / best other |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['gpus']} | {r['network'].split('-')[-1]} | "
                         f"{r['schedule']} | FAILED: {r['error']} |  |  |  |  |  |  |  |  |  |  |")
            continue
        ratio = lambda k: f"{r[k]:.3f}" if r.get(k) is not None else ""
        beyond = r.get("faster_beyond_recompute_limit")
        note = (f" (faster: {beyond['tokens_per_s']:.0f} tok/s at "
                f"{pct(beyond['recompute_frac'])} % recompute)" if beyond else "")
        lines.append(
            f"| {r['model']} | {r['gpus']} | {r['network'].split('-')[-1]} | {r['schedule']} | "
            f"{r['config']}{note} | {r['step_time_s']:.3f} | {r['tokens_per_s']:.0f} | "
            f"{pct(r['all_device_idle_frac'])} | {pct(r['exposed_comm_frac'])} | "
            f"{pct(r['bubble_frac'])} | {pct(r['recompute_frac'])} | "
            f"{r['max_peak_mem_bytes'] / 2**30:.1f} | {'yes' if r['fits_memory'] else 'NO'} | "
            f"{ratio('elastic_over_interleaved')} | {ratio('elastic_over_best_other')} |")
    return "\n".join(lines)


def main():
    global BIN_HASH, GLOBAL_BATCH, LADDER_RECOMPUTE, ACTIVATIONS, PARAMS, GRAD_REDUCE, VPPS, \
        DP_COLLECTIVES
    global ELASTIC_RECOMPUTE, NETWORKS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="comma-separated MODEL@GPUS rows (default: the priority rows)")
    ap.add_argument("--extra", action="store_true", help="also the rest of the 3 x 3 grid")
    ap.add_argument("--vpps", help="comma-separated virtual stages for the looping schedules "
                    "(default: 2 and every larger divisor of the layers per rank)")
    ap.add_argument("--zero-auto", nargs="?", const="all", choices=("elastic", "all"),
                    help="also compile zero=auto cluster=NET: for the elastic candidates only, "
                         "or (all) also for the interleaved and bfs plans elastic includes")
    ap.add_argument("--table", action="store_true", help="only rebuild the table from the cache")
    ap.add_argument("--global-batch", type=int, default=GLOBAL_BATCH,
                    help="sequences per step (default %(default)s); results of other batches "
                         "are cached and written apart (sim_paper_B<N>.json / .md)")
    ap.add_argument("--microbatch-sizes", type=lambda v: [int(x) for x in v.split(",")],
                    help="comma-separated micro-batch sizes, each tried for every schedule "
                         "(default: one, 2 when that leaves >= 2pp micro-batches, else 1)")
    ap.add_argument("--ladder-recompute", type=float, default=LADDER_RECOMPUTE,
                    help="go up a ZeRO level only when the lower one recomputed more than "
                         "this fraction of the step (default %(default)s)")
    ap.add_argument("--elastic-max-recompute", type=float, default=ELASTIC_RECOMPUTE,
                    help="the elastic row takes the fastest plan that recomputes less than "
                         "this fraction of the step, when one does (the issue's target: 0.02); "
                         "the JSON row names a faster one beyond it")
    ap.add_argument("--networks", type=lambda v: tuple(v.split(",")), default=NETWORKS,
                    help="comma-separated cluster presets (default %(default)s; others: "
                         "the table goes to sim_paper..._net<speeds>.json / .md)")
    ap.add_argument("--activations", choices=("f32", "bf16"), default=ACTIVATIONS,
                    help="activations= of every plan (bf16: cached and written apart, "
                         "sim_paper..._bf16.json / .md)")
    ap.add_argument("--params", choices=("f32", "bf16"), default=PARAMS,
                    help="params= of every plan (bf16: the forward and backward read bf16 "
                         "copies of the f32 masters, ZeRO gathers move them; cached and "
                         "written apart, sim_paper..._pbf16.json / .md)")
    ap.add_argument("--grad-reduce", choices=("f32", "bf16"), default=GRAD_REDUCE,
                    help="grad-reduce= of every plan (bf16: dp gradient sums in bf16; cached "
                         "and written apart, sim_paper..._gbf16.json / .md)")
    ap.add_argument("--dp-collectives", choices=("flat", "hierarchical"), default=DP_COLLECTIVES,
                    help="dp-collectives= of every plan (hierarchical: within each node, then "
                         "between the nodes; cached and written apart, sim_paper..._hier.json / .md)")
    args = ap.parse_args()
    DP_COLLECTIVES = args.dp_collectives
    GLOBAL_BATCH = args.global_batch
    ACTIVATIONS = args.activations
    PARAMS = args.params
    GRAD_REDUCE = args.grad_reduce
    default_networks = NETWORKS
    NETWORKS = args.networks
    LADDER_RECOMPUTE = args.ladder_recompute
    ELASTIC_RECOMPUTE = args.elastic_max_recompute
    if args.vpps:
        VPPS = [int(v) for v in args.vpps.split(",")]
    opt, simbin = (os.path.join(args.build, "bin", t) for t in ("pipemesh-opt", "pipemesh-sim"))
    BIN_HASH = bin_hash(opt, simbin)
    os.makedirs(CACHE, exist_ok=True)
    grid = list(PRIORITY) + (EXTRA if args.extra else [])
    if args.only:
        grid = [(s.split("@")[0], int(s.split("@")[1])) for s in args.only.split(",")]
    for model, _ in grid:
        model_file(model)
    tasks = []
    for model, gpus in grid:
        for b in args.microbatch_sizes or [None]:
            pp, dp, batch, m = shape(gpus, b)
            for schedule in SCHEDULES:
                za = (args.zero_auto == "all" and schedule in ("interleaved", "bfs")) or \
                    (args.zero_auto is not None and schedule == "elastic")
                for vpp, extra, label in candidates(schedule, pp, m, model):
                    tasks.append((model, gpus, schedule, vpp, extra, label, za, b))
    recs = []
    if args.table:
        for f in sorted(os.listdir(CACHE)):
            rec = json.load(open(os.path.join(CACHE, f)))
            if rec.get("global_batch", 128) == GLOBAL_BATCH and \
                    rec.get("activations", "f32") == ACTIVATIONS and \
                    rec.get("params", "f32") == PARAMS and \
                    rec.get("grad_reduce", "f32") == GRAD_REDUCE and \
                    rec.get("dp_collectives", "flat") == DP_COLLECTIVES:
                recs.append(rec)
        if any(r.get("bin_hash") == BIN_HASH for r in recs):
            recs = [r for r in recs if r.get("bin_hash") == BIN_HASH]
        else:
            log(f"no cached run of binaries {BIN_HASH}: tabulating all {len(recs)} records")
        grid = sorted({(r["model"], r["gpus"]) for r in recs},
                      key=lambda mg: (list(MODELS).index(mg[0]), mg[1]))
    else:
        log(f"{len(tasks)} configuration chains on {args.jobs} workers, binaries {BIN_HASH}")
        with cf.ThreadPoolExecutor(args.jobs) as ex:
            for chain in ex.map(lambda t: run_chain(opt, simbin, *t), tasks):
                recs.extend(chain)
    tables = {}
    for strict in (False, True):
        tables["strict" if strict else "mem_limit"] = rows_for(recs, grid, strict)
    rows = tables["mem_limit"]
    suffix = ("" if GLOBAL_BATCH == 128 else f"_B{GLOBAL_BATCH}") + \
        ("" if ACTIVATIONS == "f32" else "_" + ACTIVATIONS) + \
        ("" if PARAMS == "f32" else "_p" + PARAMS) + \
        ("" if GRAD_REDUCE == "f32" else "_g" + GRAD_REDUCE) + \
        ("" if DP_COLLECTIVES == "flat" else "_hier") + \
        ("" if NETWORKS == default_networks else
         "_net" + "-".join(n.split("-")[-1].replace("gbps", "") for n in NETWORKS))
    with open(os.path.join(OUT, f"sim_paper{suffix}.json"), "w") as f:
        json.dump({"setting": {"seq": SEQ, "vocab": VOCAB, "global_batch": GLOBAL_BATCH,
                               "pp": PP, "mem_limit": MEM_LIMIT, "networks": NETWORKS,
                               "bin_hash": BIN_HASH},
                   "rows": rows, "rows_strict_device_fit": tables["strict"], "runs": recs},
                  f, indent=1)
    md = ("Best plan within the compiler's mem-limit=40GiB:\n\n" + table(rows) +
          "\n\nBest plan whose simulated peak fits the device (pipemesh-sim fits_memory):\n\n" +
          table(tables["strict"]))
    with open(os.path.join(OUT, f"sim_paper{suffix}.md"), "w") as f:
        f.write(md + "\n")
    print(md)


def rows_for(recs, grid, strict):
    rows = []
    for model, gpus in grid:
        for net in NETWORKS:
            group = [choose(recs, model, gpus, net, s, strict) for s in SCHEDULES]
            tput = {r["schedule"]: r.get("tokens_per_s") for r in group}
            e = tput.get("elastic")
            others = [v for s, v in tput.items() if s != "elastic" and v]
            for r in group:
                if r["schedule"] == "elastic" and e:
                    if tput.get("interleaved"):
                        r["elastic_over_interleaved"] = e / tput["interleaved"]
                    if others:
                        r["elastic_over_best_other"] = e / max(others)
            rows.extend(group)
    return rows

if __name__ == "__main__":
    sys.exit(main())
