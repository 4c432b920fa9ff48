#!/usr/bin/python3
"""PyTorch reference for single-process training (DESIGN.md section 5, oracle 2).

For each case: compile an ONNX fixture into a plan with pipemesh-opt, train it for N steps
with `mpirun -np 1 pipemesh-run`, and train the same model in PyTorch from the same initial
weights (read from the ONNX file itself), on the same data (canonical sampling of
DESIGN.md section 2 over the same token shard) with torch.optim.AdamW and the same
clipping and learning-rate schedule. Every step's loss must agree within --rtol (1e-4
relative). Cases cover several micro-batches, a model with its own loss, a torch.onnx
export (tied head restored from a transposed copy, Identity-deduplicated initializers),
a Llama-style export (RMSNorm, rotary positions, SwiGLU, and with grouped-query
attention: models/export_torch_llama.py), exports that store buffers as initializers
(rotary tables, a float causal mask: the importer must not train them, and every case
checks that the plan trains as many parameters as PyTorch does), one whose blocks are
model-local ONNX functions, PyTorch 2 (dynamo) exports of transformers' own GPT-2 and
Llama (their reference recorded with transformers by models/export_hf.py, which Debian's
PyTorch cannot run), and a checkpoint/resume split of the run.

    check_training.py --opt build/bin/pipemesh-opt --run build/bin/pipemesh-run \\
        --fixtures models/fixtures [--only NAME] [--keep DIR]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
import export_torch_gpt2  # noqa: E402
import export_torch_llama  # noqa: E402
import gen_gpt2  # noqa: E402

HYPER = dict(lr=3e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0,
             warmup=2, min_lr=3e-4, schedule="cosine")

# name, fixture, heads, batch, seq, microbatches, steps, resume_at
# (a fixture "@NAME" is exported into the work folder as EXPORTS says)
CASES = [
    ("generated", "gpt2_tiny_op17.onnx", 4, 2, 16, 1, 10, None),
    ("generated-m4", "gpt2_tiny_op17.onnx", 4, 2, 16, 4, 10, None),
    ("generated-own-loss", "gpt2_tiny_op17_loss.onnx", 4, 2, 16, 2, 10, None),
    ("torch-export-tied", "torch_gpt2_tiny_op17_dyn_fold.onnx", 4, 2, 16, 2, 10, None),
    ("torch-export-op14", "torch_gpt2_tiny_op14_dyn_nofold.onnx", 4, 3, 12, 1, 10, None),
    ("torch-export-float-mask", "@gpt2-float-mask", 4, 2, 16, 2, 10, None),
    ("torch-export-additive-mask", "@gpt2-additive-mask", 4, 2, 16, 1, 10, None),
    ("torch-export-functions", "@gpt2-functions", 4, 2, 16, 2, 10, None),
    ("torch-export-bf16", "@gpt2-bf16", 4, 2, 16, 2, 10, None),
    ("resume", "gpt2_tiny_op17.onnx", 4, 2, 16, 2, 10, 4),
    ("llama", "@llama", 4, 2, 16, 2, 10, None),
    ("llama-resume", "@llama", 4, 3, 16, 1, 10, 5),
    ("llama-gqa", "@llama-gqa", 4, 2, 16, 2, 10, None),
    ("llama-rotary-cached", "@llama-cached", 4, 2, 16, 2, 10, None),
    ("llama-rotary-inv-freq", "@llama-inv-freq", 4, 2, 16, 1, 10, None),
    ("llama-rotary-hf", "@llama-hf", 4, 2, 16, 2, 10, None),
    ("llama-position-ids-input", "@llama-hf-position-ids", 4, 3, 16, 1, 10, None),
    # PyTorch 2 exports of transformers' own models; their reference is recorded beside
    # them (NAME.train.json, written by models/export_hf.py with transformers' model).
    ("hf-gpt2-dynamo", "hf_gpt2_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-llama-dynamo", "hf_llama_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-llama-dynamo-resume", "hf_llama_dynamo.onnx", 4, 2, 16, 2, 10, 6),
    ("hf-llama-dynamo-optimized", "hf_llama_dynamo_optimized.onnx", 4, 2, 16, 2, 10, None),
    ("hf-gpt2-dynamo-attention-mask", "hf_gpt2_dynamo_mask.onnx", 4, 2, 16, 2, 10, None),
    ("hf-neox-dynamo", "hf_neox_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-gptj-dynamo", "hf_gptj_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-opt-dynamo", "hf_opt_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-falcon-dynamo", "hf_falcon_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-bloom-dynamo", "hf_bloom_dynamo.onnx", 4, 2, 16, 2, 10, None),
    # Sliding-window attention (raised with `window`): Mistral's band of 5 keys from
    # transformers' mask, GPT-Neo's local layers (8 keys) after a global one.
    ("hf-mistral-sliding-dynamo", "hf_mistral_sliding_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-gptneo-dynamo", "hf_gptneo_dynamo.onnx", 4, 2, 16, 2, 10, None),
    # Scores reshaped between their matmul and the softmax (raised in the probabilities'
    # layout, q and k reshaped to it).
    ("hf-neox-japanese-dynamo", "hf_neox_japanese_dynamo.onnx", 4, 2, 16, 2, 10, None),
    # A buffer multiplied into the scores (GPT-1's causal table): a constant, as the
    # exporter declares it, not a trained parameter.
    ("hf-openai-gpt-dynamo", "hf_openai_gpt_dynamo.onnx", 4, 2, 16, 2, 10, None),
    # Multi-head latent attention (DeepSeek V3), q and k assembled by ScatterND.
    ("hf-deepseek-v3-dynamo", "hf_deepseek_v3_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-llama-op23-dynamo", "hf_llama_op23_dynamo.onnx", 4, 2, 16, 2, 10, None),
    ("hf-llama-op23-dynamo-optimized", "hf_llama_op23_dynamo_optimized.onnx", 4, 2, 16, 2, 10,
     None),
    # Soft-capped scores (raised with `softcap`, a cap the scores reach) on sliding-window
    # and global layers, soft-capped logits.
    ("hf-gemma2-dynamo", "hf_gemma2_dynamo.onnx", 4, 2, 16, 2, 10, None),
]
# Exported models: the exporter and its flags (the Llama ones also get --heads and --ctx).
# The masks, the cached tables and inv_freq are buffers stored as initializers: the
# importer must take them for constants on its own (the references compute them). The
# bfloat16 export trains in float32 from its rounded weights, as the reference does.
EXPORTS = {
    "@gpt2-float-mask": (export_torch_gpt2, ["--preset", "tiny", "--dynamic", "--no-fold",
                                             "--float-causal-mask"]),
    "@gpt2-additive-mask": (export_torch_gpt2, ["--preset", "tiny", "--dynamic", "--no-fold",
                                                "--additive-causal-mask"]),
    "@gpt2-bf16": (export_torch_gpt2, ["--preset", "tiny", "--dynamic", "--dtype", "bfloat16"]),
    "@gpt2-functions": (export_torch_gpt2, ["--preset", "tiny", "--dynamic",
                                            "--modules-as-functions"]),
    "@llama": (export_torch_llama, []),
    "@llama-gqa": (export_torch_llama, ["--kv-heads", "2"]),
    "@llama-cached": (export_torch_llama, ["--rotary", "cached", "--max-positions", "32"]),
    "@llama-inv-freq": (export_torch_llama, ["--rotary", "inv-freq"]),
    "@llama-hf": (export_torch_llama, ["--rotary", "hf"]),
    "@llama-hf-position-ids": (export_torch_llama, ["--rotary", "hf", "--position-ids-input"]),
}


def lr_at(s, steps):
    """The runtime's schedule (docs/pipemesh-run.md): linear warmup, then cosine."""
    h = HYPER
    if s < h["warmup"]:
        return h["lr"] * (s + 1) / h["warmup"]
    p = min(1.0, (s - h["warmup"]) / max(1, steps - h["warmup"]))
    return h["min_lr"] + 0.5 * (h["lr"] - h["min_lr"]) * (1 + math.cos(math.pi * p))


def read_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype=np.int32)
        assert header[0] == 20240520 and header[1] == 1, "not an llm.c shard"
        return np.frombuffer(f.read(), dtype=np.uint16)[: header[2]].astype(np.int64)


def batch_for(tokens, step, micro, batch, seq, microbatches, dp=1, rank=0):
    """Canonical sampling: inputs and next-token targets of micro-batch `micro`."""
    windows = (len(tokens) - 1) // seq
    G = dp * microbatches * batch
    xs, ys = [], []
    for i in range(batch):
        k = (micro * dp + rank) * batch + i
        start = ((step * G + k) % windows) * seq
        xs.append(tokens[start:start + seq])
        ys.append(tokens[start + 1:start + seq + 1])
    return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))


def torch_model(onnx_path, heads):
    """GPT2LMHeadModel holding the ONNX file's initial weights."""
    model = onnx.load(onnx_path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:  # exporters deduplicate equal values behind Identity
        if node.op_type == "Identity" and node.input[0] in inits:
            inits.setdefault(node.output[0], inits[node.input[0]])
    wte, wpe = inits["transformer.wte.weight"], inits["transformer.wpe.weight"]
    layers = len({k.split(".")[2] for k in inits if k.startswith("transformer.h.")})
    cfg = gen_gpt2.GPT2Config(n_layer=layers, n_embd=wte.shape[1], n_head=heads,
                              vocab_size=wte.shape[0], n_ctx=wpe.shape[0])
    net = export_torch_gpt2.GPT2LMHeadModel(cfg)
    state = {}
    for name in net.state_dict():
        if name.endswith("attn.bias") or name == "lm_head.weight":
            continue
        state[name] = torch.from_numpy(np.array(inits[name], dtype=np.float32))
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    # eval(): the module has dropout; PipeMesh trains without it.
    return net.eval(), cfg


def onnx_initializers(onnx_path):
    model = onnx.load(onnx_path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:  # exporters deduplicate equal values behind Identity
        if node.op_type == "Identity" and node.input[0] in inits:
            inits.setdefault(node.output[0], inits[node.input[0]])
    return inits


def torch_llama_model(onnx_path, heads):
    """export_torch_llama.Llama holding the ONNX file's initial weights (every parameter
    keeps its name there)."""
    inits = onnx_initializers(onnx_path)
    layers = len({k.split(".")[1] for k in inits if k.startswith("blocks.")})
    vocab, embd = inits["embed"].shape
    kv_heads = inits["blocks.0.wk"].shape[1] // (embd // heads)
    net = export_torch_llama.Llama(layers, embd, heads, vocab, hidden=inits["blocks.0.w1"].shape[1],
                                   kv_heads=kv_heads)
    state = {name: torch.from_numpy(np.array(inits[name], dtype=np.float32))
             for name in net.state_dict()}
    net.load_state_dict(state, strict=True)
    return net.eval(), None


def torch_losses(onnx_path, heads, tokens, batch, seq, microbatches, steps):
    torch.manual_seed(0)
    llama = "llama" in os.path.basename(onnx_path)
    net, cfg = (torch_llama_model if llama else torch_model)(onnx_path, heads)
    return train_torch(net, lambda x: net(x), tokens, batch, seq, microbatches, steps)


def train_torch(net, logits_of, tokens, batch, seq, microbatches, steps):
    """Trains `net` (logits_of(input_ids) -> logits) as pipemesh-run does: AdamW with decay
    on the matrices only, global-norm clipping, the learning-rate schedule, canonical
    sampling. Returns every step's loss and the number of trained elements. Also used by
    models/export_hf.py to record the losses of transformers' own models."""
    params = list(dict.fromkeys(p for p in net.parameters() if p.requires_grad))  # tied: once
    trained = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    h = HYPER
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
    losses = []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for j in range(microbatches):
            x, y = batch_for(tokens, s, j, batch, seq, microbatches)
            logits = logits_of(x)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            (loss / microbatches).backward()
            total += loss.item() / microbatches
        torch.nn.utils.clip_grad_norm_(params, h["grad_clip"])
        for g in opt.param_groups:
            g["lr"] = lr_at(s, steps)
        opt.step()
        losses.append(total)
    return losses, trained


def recorded_losses(path, batch, seq, microbatches, steps):
    """The losses and trained parameter count models/export_hf.py recorded for a fixture
    (transformers' model trained by train_torch under newer PyTorch), for the same run."""
    with open(path) as f:
        rec = json.load(f)
    run = dict(batch=batch, seq=seq, microbatches=microbatches, steps=steps)
    if any(rec[k] != v for k, v in run.items()):
        raise RuntimeError(f"{path} records {[rec[k] for k in run]}, the case runs {run}")
    return rec["losses"], rec["trained_parameters"]


def plan_params(args, plan):
    """The number of trained parameter elements the plan's manifest reports."""
    text = run([args.opt, "--print-plan", plan]).stdout
    for field in text.split("\n")[1].split():
        if field.startswith("params="):
            return int(field[len("params="):])
    raise RuntimeError(f"no params= in the manifest of {plan}")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def pipemesh_losses(args, work, name, fixture, batch, seq, microbatches, steps, resume_at,
                    shard):
    plan = os.path.join(work, name + ".plan")
    run([args.opt, fixture, f"--pipemesh-compile=batch={batch} seq={seq} "
         f"microbatches={microbatches}", "-o", plan])
    h = HYPER
    common = [args.run, plan, "--data", shard, "--lr", str(h["lr"]), "--beta1", str(h["beta1"]),
              "--beta2", str(h["beta2"]), "--eps", str(h["eps"]),
              "--weight-decay", str(h["weight_decay"]), "--grad-clip", str(h["grad_clip"]),
              "--warmup-steps", str(h["warmup"]), "--lr-schedule", h["schedule"],
              "--min-lr", str(h["min_lr"]), "--steps", str(steps)]
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1"]
    log = os.path.join(work, name + ".jsonl")
    if resume_at is None:
        run(mpirun + common + ["--log-json", log])
        rows = [json.loads(l) for l in open(log)]
    else:
        ckpt = os.path.join(work, name + ".ckpt")
        first, second = log + ".1", log + ".2"
        run(mpirun + common + ["--log-json", first, "--checkpoint-dir", ckpt,
                               "--checkpoint-every", str(resume_at),
                               "--stop-at-step", str(resume_at)])
        run(mpirun + common + ["--log-json", second, "--checkpoint-dir", ckpt, "--resume"])
        rows = [json.loads(l) for l in open(first)] + [json.loads(l) for l in open(second)]
    rows.sort(key=lambda r: r["step"])
    assert [r["step"] for r in rows] == list(range(steps)), [r["step"] for r in rows]
    return [r["loss"] for r in rows], plan_params(args, plan)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--opt", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--only")
    ap.add_argument("--keep")
    ap.add_argument("--rtol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = args.keep or tempfile.mkdtemp(prefix="pipemesh-train-")
    os.makedirs(work, exist_ok=True)
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    shard = os.path.join(work, "corpus.bin")
    run([args.run, "--write-default-corpus", shard])
    tokens = read_shard(shard)
    failures = 0
    for name, fixture, heads, batch, seq, micro, steps, resume_at in CASES:
        if args.only and args.only not in name:
            continue
        path = os.path.join(args.fixtures, fixture)
        if fixture.startswith("@"):
            path = os.path.join(work, fixture[1:] + ".onnx")
            if not os.path.exists(path):
                exporter, flags = EXPORTS[fixture]
                if exporter is export_torch_llama:
                    flags = ["--heads", str(heads), "--ctx", str(seq)] + flags
                exporter.main(flags + ["-o", path])
        ours, our_params = pipemesh_losses(args, work, name, path, batch, seq, micro, steps,
                                           resume_at, shard)
        recorded = path[:-len(".onnx")] + ".train.json"
        if os.path.exists(recorded):
            ref, ref_params = recorded_losses(recorded, batch, seq, micro, steps)
        else:
            ref, ref_params = torch_losses(path, heads, tokens, batch, seq, micro, steps)
        rel = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
        # The same parameters trained: a buffer trained by mistake (a rotary table) barely
        # moves ten steps' losses of a tiny model whose attention is still near uniform.
        ok = rel <= args.rtol and ours[-1] < ours[0] and our_params == ref_params
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name:30s} steps={steps} M={micro} "
              f"max rel err {rel:.2e}  loss {ours[0]:.5f} -> {ours[-1]:.5f} "
              f"(torch {ref[0]:.5f} -> {ref[-1]:.5f}); trained parameters {our_params:,}"
              + ("" if our_params == ref_params else f" (torch {ref_params:,})"))
        if not ok:
            for s, (a, b) in enumerate(zip(ours, ref)):
                print(f"     step {s}: pipemesh {a:.7f} torch {b:.7f}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{sum(1 for c in CASES if not args.only or args.only in c[0]) - failures} passed, "
          f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
