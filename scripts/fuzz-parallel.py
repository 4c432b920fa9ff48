#!/usr/bin/env python3
"""Random parallel configurations, compiled and trained: parallel equivalence beyond the grids.

    /usr/bin/python3 scripts/fuzz-parallel.py [--build build] [--seed 1] [--count 50]
        [--minutes M] [--steps 3] [--keep]

Each sample draws a small GPT (generated: 2 to 12 layers, width 32 or 64, a quarter of them
Llama-style; or one of the committed exports of models/fixtures, with their losses and masks) and a configuration
from everything `--pipemesh-compile` takes: pp, dp, vpp, micro-batches and their size,
schedule (gpipe, 1f1b, interleaved, bfs, zb-h1, zb-h2, elastic with drawn groups or
groups=auto), defer-w, zero (a level, a level per chunk, or auto), prefetch, recompute
(with a mem-limit for auto), layers-per-stage, sometimes hierarchical dp collectives
(with nodes of a drawn divisor of dp ranks, pipemesh-run's --ranks-per-node; then also dp
groups of 6 or 8 at pp=1), and sometimes
bf16 activations, parameters or gradient sums. It compiles the plan, trains it `--steps` steps under `mpirun` (one
process per rank, oversubscribed), and compares the losses and gradient norms with the
same model at pp=1 dp=1 on the same global batch (canonical sampling: the same data),
and so the validation losses (--val-data) that every run evaluates after steps 2, 4, ...
and the last. A share of them (--resume-share) is also stopped after a drawn step with checkpoints and
resumed: the step log must then equal the uninterrupted run's exactly; and the same
checkpoint resumed by the reference plan (resharded into its layout) must continue it
within the tolerance.

A finding is:
  - a compile that crashes or reports an internal error (a refusal with a message is
    not: the draw was impossible, and the refusals are counted by their first words);
  - a compiled plan that does not train (a non-zero exit, or a hang past --timeout);
  - losses, gradient norms or validation losses off the reference by more than 1e-5 relative (f32; the
    oracle of docs/parallel-plan.md), or by more than 2e-2 with a bf16 option (bf16
    rounds differently when the sums are ordered differently: that bound catches a
    wrong gradient or lost data, not rounding). With dp > 1 and f32 sums, the gradient
    norms from the third step on are compared with pp=1 at the sample's dp instead
    (trained once more): the replicas' partial sums are added in another order than one
    rank's running sum, and Adam's first steps amplify that;
  - a checkpoint or resume that fails, or a resumed log that differs.
Each finding's plan and command are kept in the work directory, which is removed when
nothing was found (and --keep is not given).
"""
import argparse
import collections
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
CRASH_WORDS = ("Assertion", "terminate called", "UNREACHABLE", "Stack dump", "Segmentation",
               "internal error", "AddressSanitizer", "runtime error:")
MAX_WORLD = 8
# Share of the dp > 1 samples drawn with dp-collectives=hierarchical (--hierarchical-share).
HIERARCHICAL_SHARE = 0.2
# Committed exports with dynamic batch and sequence (2 layers each; models/fixtures).
FIXTURES = ["gpt2_tiny_op13.onnx", "gpt2_tiny_op13_loss.onnx", "gpt2_tiny_op17_loss.onnx",
            "gpt2_tiny_op17_lossonly_shift.onnx", "gpt2_tiny_op18.onnx",
            "gpt2_tiny_op18_decomposed_loss.onnx", "gpt2_tiny_op21_computed_mask.onnx",
            "torch_gpt2_tiny_op14_dyn_nofold.onnx",
            "torch_gpt2_tiny_op14_dyn_nofold_mask_loss.onnx",
            "torch_gpt2_tiny_op17_dyn_fold_loss.onnx", "torch_gpt2_tiny_op17_dyn_fold_mask.onnx"]
# PyTorch 2 exports of transformers' models (models/export_hf.py), put in the place of a
# drawn fixture by --hf-share with a generator of their own, so that seeds without it
# draw what they drew.
HF_FIXTURES = ["hf_gpt2_dynamo.onnx", "hf_gpt2_dynamo_mask.onnx", "hf_llama_dynamo.onnx",
               "hf_llama_dynamo_optimized.onnx", "hf_qwen2_dynamo.onnx",
               "hf_mistral_dynamo.onnx", "hf_gemma_dynamo.onnx", "hf_gemma2_dynamo.onnx",
               "hf_phi3_dynamo.onnx", "hf_neox_dynamo.onnx", "hf_gptj_dynamo.onnx",
               "hf_opt_dynamo.onnx", "hf_falcon_dynamo.onnx", "hf_bloom_dynamo.onnx",
               "hf_mistral_sliding_dynamo.onnx", "hf_gptneo_dynamo.onnx",
               "hf_neox_japanese_dynamo.onnx", "hf_openai_gpt_dynamo.onnx",
               "hf_deepseek_v3_dynamo.onnx", "hf_llama_op23_dynamo.onnx",
               "hf_llama_op23_dynamo_optimized.onnx"]


def composition(rng, total, parts):
    """`parts` positive integers summing to `total` (None when total < parts)."""
    if total < parts:
        return None
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def draw(rng):
    """One configuration: the model (a fixture's name, or (layers, width) of a generated
    GPT), the options, and the bf16 options among them."""
    pp = rng.choice([1, 2, 2, 3, 4])
    dp = rng.choice([1, 1, 2, 2, 3, 4])
    while pp * dp > MAX_WORLD:
        dp -= 1
    schedule = rng.choice(["gpipe", "1f1b", "interleaved", "bfs", "zb-h1", "zb-h2",
                           "elastic", "elastic"])
    vpp = 1 if schedule in ("gpipe", "1f1b", "zb-h1", "zb-h2") else rng.choice([1, 2, 2, 3])
    if rng.random() < 0.25:
        # A committed export (2 layers): other exporters' graphs, losses and masks.
        model = rng.choice(FIXTURES)
        layers = 2
        if pp * vpp > 2 and rng.random() < 0.85:
            pp, vpp = rng.choice([(1, 1), (1, 2), (2, 1)])
            dp = rng.choice([1, 2, 3, 4])
    else:
        # Mostly a layer or more per chunk; sometimes too few (a refusal to check).
        layers = rng.choice([2, 3, 4, 6, 8])
        if layers < pp * vpp and rng.random() < 0.85:
            layers = max(pp * vpp, rng.choice([4, 6, 8]))
        # Widths whose pipeline messages fall on both sides of Open MPI's 4 KB eager
        # limit (above it, a message is read from the sender's buffer once matched).
        # A quarter of them Llama-style (RMSNorm, rotary, SwiGLU, untied head).
        model = (layers, rng.choice([32, 64])) + (("llama",) if rng.random() < 0.25 else ())
    m = rng.choice([1, 2, 3, 4, 4, 6, 8])
    o = {"batch": rng.choice([1, 2]), "seq": rng.choice([8, 16]), "pp": pp, "dp": dp,
         "vpp": vpp, "microbatches": m, "schedule": schedule}
    if schedule == "elastic":
        if rng.random() < 0.3:
            o["groups"] = "auto"
            o["cluster"] = rng.choice(["a100-40g-25gbps", "a100-40g-100gbps"])
        else:
            o["fwd-groups"] = ",".join(map(str, composition(rng, m, rng.randint(1, m))))
            o["bwd-groups"] = ",".join(map(str, composition(rng, m, rng.randint(1, m))))
        if rng.random() < 0.5:
            o["defer-w"] = rng.choice(["none", "chunk", "all", "bucket"])
    if dp > 1:
        z = rng.random()
        if z < 0.6:
            o["zero"] = str(rng.choice([0, 1, 2, 3]))
        elif z < 0.8:
            o["zero"] = ",".join(str(rng.choice([0, 1, 2, 3])) for _ in range(pp * vpp))
        else:
            o["zero"] = "auto"
            o["cluster"] = o.get("cluster", "a100-40g-25gbps")
        if "3" in o["zero"] and rng.random() < 0.5:
            o["prefetch"] = rng.choice(["1", "2", "auto"])
        if rng.random() < HIERARCHICAL_SHARE:
            # Within nodes, then between them: nodes of a divisor of dp consecutive ranks
            # (dp itself: one node per group, which runs flat). Not an option of the plan:
            # pipemesh-run's --ranks-per-node, kept under a key options_text leaves out.
            o["dp-collectives"] = "hierarchical"
            # Groups of 6 and 8 (one pipeline rank) give more nodes and more ranks per node
            # than dp=4 on nodes of 2: 3 x 2, 2 x 3, 4 x 2, 2 x 4.
            if pp == 1 and rng.random() < 0.4:
                dp = o["dp"] = rng.choice([6, 8])
            # Mostly nodes that split a group into nodes of several ranks.
            divisors = [d for d in range(1, dp + 1) if dp % d == 0]
            proper = [d for d in divisors if 1 < d < dp]
            o["_ranks-per-node"] = rng.choice(proper if proper and rng.random() < 0.8
                                              else divisors)
    r = rng.random()
    if r < 0.25:
        o["recompute"] = rng.choice(["selective", "full"])
    elif r < 0.4:
        o["recompute"] = "auto"
        o["mem-limit"] = f"{rng.choice([600, 1000, 1500, 2000, 3000, 5000])}KB"
    if rng.random() < 0.2:
        parts = composition(rng, layers, pp * vpp)
        if parts:
            o["layers-per-stage"] = ",".join(map(str, parts))
    bf16 = []
    if rng.random() < 0.2:
        for key in ("activations", "params", "grad-reduce"):
            if rng.random() < 0.5:
                o[key] = "bf16"
                bf16.append(key)
    return model, o, bf16


def options_text(o):
    return " ".join(f"{k}={v}" for k, v in o.items() if not k.startswith("_"))


def run_flags(o):
    """pipemesh-run's flags that belong to the sample (not to the compile)."""
    return ["--ranks-per-node", str(o["_ranks-per-node"])] if "_ranks-per-node" in o else []


GPT_EXPORTS = {
    "generated": ("gen_gpt2.py", []),
    "torch": ("export_torch_gpt2.py", ["--dynamic"]),
    "torch float mask": ("export_torch_gpt2.py", ["--dynamic", "--no-fold", "--float-causal-mask"]),
    "torch additive mask": ("export_torch_gpt2.py", ["--dynamic", "--no-fold",
                                                     "--additive-causal-mask"]),
    "torch local functions": ("export_torch_gpt2.py", ["--dynamic", "--modules-as-functions"]),
    "torch bfloat16": ("export_torch_gpt2.py", ["--dynamic", "--dtype", "bfloat16"]),
}


def gpt_export(shape):
    """How a drawn GPT-2 shape is written."""
    layers, embd = shape[:2]
    form = list(GPT_EXPORTS)[(layers + embd // 32) % len(GPT_EXPORTS)]
    # torch 1.13's function extraction fails beyond two layers (an internal assert).
    return "torch" if form == "torch local functions" and layers != 2 else form


def llama_rotary(shape):
    """How a drawn Llama shape's export stores its rotary tables."""
    layers, embd = shape[:2]
    return ["computed", "cached", "inv-freq", "hf"][(layers + embd // 32) % 4]


def main():
    global HIERARCHICAL_SHARE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=50, help="samples (unless --minutes ends first)")
    ap.add_argument("--minutes", type=float, help="stop drawing after this long")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300, help="seconds a training run may take")
    ap.add_argument("--resume-share", type=float, default=0.25,
                    help="share of the trained samples also stopped after a drawn step and "
                    "resumed from its checkpoint (the log must be the same, bit for bit)")
    ap.add_argument("--hierarchical-share", type=float, default=HIERARCHICAL_SHARE,
                    help="share of the dp > 1 samples with dp-collectives=hierarchical "
                         "(default %(default)s)")
    ap.add_argument("--hf-share", type=float, default=0.0,
                    help="share of the drawn fixtures replaced by a PyTorch 2 export of a "
                    "transformers model (HF_FIXTURES)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    HIERARCHICAL_SHARE = args.hierarchical_share
    opt = os.environ.get("PIPEMESH_OPT", os.path.join(args.build, "bin", "pipemesh-opt"))
    run = os.environ.get("PIPEMESH_RUN", os.path.join(args.build, "bin", "pipemesh-run"))
    rng = random.Random(args.seed)
    hf_rng = random.Random(args.seed * 7919 + 1)
    work = tempfile.mkdtemp(prefix="pipemesh-fuzz-parallel-")
    corpus = os.path.join(work, "corpus.bin")
    subprocess.run([run, "--write-default-corpus", corpus], check=True, capture_output=True)
    # Validation tokens (below every fixture's vocabulary, as the corpus's are): every
    # run evaluates after steps 2, 4, ... and the last, which the reference must match.
    val = os.path.join(work, "val.bin")
    with open(val, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, 1500, *[0] * 253))
        f.write(struct.pack("<1500H", *[random.Random(args.seed).randrange(120) for _ in range(1500)]))
    models, refs = {}, {}
    refused = collections.Counter()
    findings, trained = [], 0
    t_end = time.monotonic() + 60 * args.minutes if args.minutes else None

    def model(shape):
        if isinstance(shape, str):
            return os.path.join(REPO, "models", "fixtures", shape)
        if shape not in models:
            layers, embd = shape[:2]
            llama = len(shape) > 2
            path = os.path.join(work, f"{'llama' if llama else 'gpt'}{layers}x{embd}.onnx")
            # Exports in the forms the importer must handle, picked by shape (so that seeds
            # keep drawing what they drew): Llama's rotary tables stored every way, GPT-2
            # from our generator or torch.onnx with buffers stored as initializers,
            # blocks as local functions, or in bfloat16.
            script, form = (("export_torch_llama.py", ["--rotary", llama_rotary(shape)])
                            if llama else GPT_EXPORTS[gpt_export(shape)])
            subprocess.run(["/usr/bin/python3", os.path.join(REPO, "models", script),
                            "--layers", str(layers), "--embd", str(embd), "--heads", "2",
                            "--vocab", "256", "--ctx", "16", "--seed", str(layers), "-o", path]
                           + form, check=True, capture_output=True)
            models[shape] = path
        return models[shape]

    def compile_plan(name, shape, o):
        plan = os.path.join(work, name + ".plan")
        cmd = [opt, model(shape), f"--pipemesh-compile={options_text(o)}", "-o", plan]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        return plan, cmd, r

    def train(name, plan, world, *more):
        log = os.path.join(work, name + ".jsonl")
        cmd = ["mpirun", "--oversubscribe", "-np", str(world), run, plan, "--data", corpus,
               "--steps", str(args.steps), "--lr", "3e-3", "--grad-clip", "1.0",
               "--log-json", log, "--comm-timeout", "60", "--val-data", val,
               "--eval-interval", "2", "--eval-iters", "2", *more]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return None, cmd, "hang: no exit after %d s" % args.timeout
        if r.returncode:
            return None, cmd, f"exit {r.returncode}: {(r.stdout + r.stderr).strip()[-600:]}"
        with open(log) as f:
            return [json.loads(line) for line in f], cmd, None

    def steps(log):
        return [e for e in log if "loss" in e]

    def evals(log):
        return [e for e in log if "val_loss" in e]

    def reference(shape, ref_o):
        """A pp=1 plan's log (trained once per model and options): (log, compile
        command, run command, error)."""
        key = (shape, options_text(ref_o), tuple(run_flags(ref_o)))
        if key not in refs:
            n = len(refs)
            rplan, rccmd, rr = compile_plan(f"ref{n}", shape, ref_o)
            if rr.returncode:
                refs[key] = (None, rccmd, None, f"does not compile: {rr.stderr[-800:]}")
            else:
                got, rcmd, err = train(f"ref{n}", rplan, ref_o["dp"], *run_flags(ref_o))
                refs[key] = (got, rccmd, rcmd, err)
        return refs[key]

    def finding(i, what, cmds):
        findings.append(i)
        with open(os.path.join(work, f"finding-{i}.txt"), "w") as f:
            f.write(what + "\n\n" + "\n".join(" ".join(f"'{c}'" if " " in c else c for c in cmd)
                                              for cmd in cmds if cmd) + "\n")
        print(f"FINDING sample {i}: {what}", flush=True)

    for i in range(args.count):
        if t_end and time.monotonic() > t_end:
            break
        shape, o, bf16 = draw(rng)
        if isinstance(shape, str) and args.hf_share and hf_rng.random() < args.hf_share:
            shape = hf_rng.choice(HF_FIXTURES)
        name = shape if isinstance(shape, str) else "layers=%d embd=%d" % shape[:2] + (
            f" llama (rotary {llama_rotary(shape)})" if len(shape) > 2
            else f" ({gpt_export(shape)})")
        label = f"{i}: {name} {options_text(o)} {' '.join(run_flags(o))}".rstrip()
        plan, ccmd, r = compile_plan(f"s{i}", shape, o)
        text = r.stdout + r.stderr
        if r.returncode < 0 or r.returncode > 2 or any(w in text for w in CRASH_WORDS):
            finding(i, f"compile crashed (exit {r.returncode}): {label}\n{text[-1500:]}", [ccmd])
            continue
        if r.returncode:
            first = next((l for l in text.splitlines() if "error" in l), text.strip()[:80])
            refused[" ".join(first.split("error:")[-1].split()[:6])] += 1
            print(f"refused {label}: {first.strip()[:160]}", flush=True)
            continue
        # The reference: one rank, the same global batch in as many micro-batches, and the
        # same storage types (with grad-reduce=bf16, dp replicas sum in bf16: the same dp).
        ref_o = {k: o[k] for k in ("batch", "seq", "activations", "params") if k in o}
        ref_dp = o["dp"] if "grad-reduce" in o else 1
        ref_o.update(microbatches=o["microbatches"] * o["dp"] // ref_dp, dp=ref_dp)
        if ref_dp > 1:
            ref_o["grad-reduce"] = "bf16"
        want, rccmd, rcmd, err = reference(shape, ref_o)
        if want is None:
            finding(i, f"reference does not train: {options_text(ref_o)}: {err}", [rccmd, rcmd])
            continue
        # With f32 sums and dp > 1 the replicas' gradients are added as dp partial sums,
        # the one-rank reference's as one running sum: step 1's gradient norm agrees to
        # 1e-7, but Adam's first steps at this learning rate amplify the difference in
        # the gradient norms from the third step on (seed 157: 2.3e-5 in f32, 12 % with bf16
        # activations; pp=1 dp=2 alone gives the same numbers). So those gradient norms
        # are compared with pp=1 at the sample's dp (its dp collectives and zero level
        # where that is one level), which adds in the same order; every loss and the
        # first two gradient norms still with the one-rank reference.
        same = None
        if o["dp"] > ref_dp:
            same_o = dict(ref_o, dp=o["dp"], microbatches=o["microbatches"])
            if o.get("zero", "0").isdigit():
                same_o["zero"] = o["zero"]
            for k in ("dp-collectives", "_ranks-per-node"):
                if k in o:
                    same_o[k] = o[k]
            same, sccmd, scmd, err = reference(shape, same_o)
            if same is None:
                finding(i, f"reference does not train: {options_text(same_o)}: {err}",
                        [sccmd, scmd])
                continue
        got, tcmd, err = train(f"s{i}", plan, o["pp"] * o["dp"], *run_flags(o))
        if got is None:
            finding(i, f"does not train: {label}\n{err}", [ccmd, tcmd])
            continue
        trained += 1
        tol = 2e-2 if bf16 else 1e-5
        rel = lambda a, b: abs(a - b) / abs(b)
        worst = max(max(rel(g["loss"], w["loss"]),
                        rel(g["grad_norm"], w["grad_norm"]) if same is None or g["step"] < 2
                        else 0.0)
                    for g, w in zip(steps(got), steps(want)))
        worst = max([worst] + [rel(g["val_loss"], w["val_loss"])
                               for g, w in zip(evals(got), evals(want))])
        shape_of = lambda log: [(e["step"], "val_loss" in e) for e in log]
        cmds = [ccmd, tcmd, rccmd, rcmd]
        if same is not None and shape_of(got) == shape_of(want):
            # The later gradient norms against pp=1 at the same dp.
            norms = max([0.0] + [rel(g["grad_norm"], w["grad_norm"])
                                 for g, w in zip(steps(got), steps(same)) if g["step"] >= 2])
            if norms > worst:
                worst, want, cmds = norms, same, [ccmd, tcmd, sccmd, scmd]
        if shape_of(got) != shape_of(want) or not worst <= tol:
            finding(i, f"differs from pp=1 by {worst:.2e} (tolerance {tol:g}): {label}\n"
                    f"got  {[g.get('loss', g.get('val_loss')) for g in got]}\n"
                    f"want {[w.get('loss', w.get('val_loss')) for w in want]}",
                    cmds)
            continue
        resumed = ""
        if args.steps > 1 and rng.random() < args.resume_share:
            # Interrupted after a drawn step and resumed: the same log, bit for bit.
            ckpt, stop = os.path.join(work, f"s{i}-ckpt"), rng.randint(1, args.steps - 1)
            world = o["pp"] * o["dp"]
            first, c1, err = train(f"s{i}-r", plan, world, "--checkpoint-dir", ckpt,
                                   "--checkpoint-every", "1", "--stop-at-step", str(stop),
                                   *run_flags(o))
            if first is not None:
                shutil.copytree(ckpt, ckpt + "-other")
            again, c2, err2 = train(f"s{i}-r", plan, world, "--checkpoint-dir", ckpt, "--resume",
                                    *run_flags(o))
            if first is None or again is None:
                finding(i, f"checkpoint or resume failed: {label}\n{err or err2}", [ccmd, c1, c2])
                continue
            numbers = lambda log: [(e["step"], e.get("loss"), e.get("grad_norm"), e.get("lr"),
                                    e.get("val_loss")) for e in log]
            if numbers(again) != numbers(got):
                finding(i, f"resumed at step {stop}, the log differs: {label}\n"
                        f"got  {numbers(again)}\nwant {numbers(got)}", [ccmd, c1, c2])
                continue
            # The same checkpoint resumed in the reference's layout (resharded): the rest of
            # the sample's log within the tolerance.
            other, c3, err3 = train(f"s{i}-o", rccmd[-1], ref_dp, "--checkpoint-dir",
                                    ckpt + "-other", "--resume")
            if other is None:
                finding(i, f"resume in the reference's layout failed: {label}\n{err3}", [ccmd, c1, c3])
                continue
            rest = [e for e in got if e["step"] >= stop]
            value = lambda e: e.get("loss", e.get("val_loss"))
            off = max([abs(value(a) - value(b)) / abs(value(b)) for a, b in zip(other, rest)] + [0.0])
            if shape_of(other) != shape_of(rest) or not off <= tol:
                finding(i, f"resumed at step {stop} in the reference's layout, off by {off:.2e}: "
                        f"{label}\ngot  {[value(e) for e in other]}\nwant {[value(e) for e in rest]}",
                        [ccmd, c1, rccmd, c3])
                continue
            resumed = f", resumed at step {stop}: identical, resharded to pp=1: {off:.1e}"
            shutil.rmtree(ckpt)
            shutil.rmtree(ckpt + "-other")
        print(f"ok {label} (max rel {worst:.1e}{resumed})", flush=True)
        os.remove(plan)

    total = trained + sum(refused.values()) + len(findings)
    print(f"\n{total} samples: {trained} trained and matched, {sum(refused.values())} refused "
          f"at compile time, {len(findings)} finding(s)")
    for reason, n in refused.most_common(12):
        print(f"  refused {n:3d}x: {reason}")
    if findings:
        print(f"findings kept in {work}")
        return 1
    if args.keep:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
