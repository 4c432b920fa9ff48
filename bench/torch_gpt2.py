#!/usr/bin/env python3
"""The PyTorch baseline of bench/gpu.sh: GPT-2 training steps on one GPU, timed.

The same network as models/gen_gpt2.py (pre-LN blocks, tanh GELU, tied head, learned
positions), written the way a PyTorch user would: bf16 autocast, fused
scaled_dot_product_attention (flash on Hopper), fused AdamW, fp32 master weights. One
step = forward, cross-entropy, backward, optimizer step, with global batch B x T as one
micro-batch (PipeMesh's plan: batch=16 seq=1024 microbatches=1).

    torch_gpt2.py --preset 124M [--batch 16 --seq 1024 --steps 8 --compile] [--json OUT]

Prints the median step time and tokens/s over the steps after the warm-up ones.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import gen_gpt2  # noqa: E402  (presets only)


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg.n_embd
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, C), nn.Embedding(cfg.n_ctx, C)
        self.h = nn.ModuleList(Block(C, cfg.n_head) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(gen_gpt2.PRESETS), default="124M")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=8, help="timed steps (after 2 warm-up steps)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpt2.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = gen_gpt2.PRESETS[a.preset]
    dev = torch.device("cuda")
    model = GPT(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    step_fn = torch.compile(model) if a.compile else model
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq + 1), device=dev, generator=g)
    idx, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
    times, losses = [], []
    for s in range(2 + a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        losses.append(loss.item())
        if s >= 2:
            times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    n = sum(p.numel() for p in model.parameters())
    res = {"framework": f"torch {torch.__version__}" + (" compile" if a.compile else " eager"),
           "model": a.preset, "params": n, "batch": a.batch, "seq": a.seq, "median_step_ms": ms,
           "tokens_per_s": a.batch * a.seq / (ms / 1000), "losses": losses,
           "max_memory_mib": torch.cuda.max_memory_allocated() / 2**20}
    print(f"torch GPT-2 {a.preset} ({res['framework']}): {ms:.1f} ms/step, "
          f"{res['tokens_per_s']:.0f} tok/s, peak {res['max_memory_mib']:.0f} MiB, "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    return 0 if all(math.isfinite(l) for l in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
