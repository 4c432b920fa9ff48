#!/usr/bin/python3
"""Exports a Llama-style GPT (RMSNorm, rotary positions, SwiGLU, no biases, untied head)
through torch.onnx.export.

The other decoder family users bring: pre-norm blocks with RMSNorm (x / sqrt(mean(x^2) +
eps) * w, exported as Pow, ReduceMean, Add, Sqrt, Div, Mul), rotary position embeddings
applied to q and k (cos/sin tables computed in forward from positions, rotate_half as
Slice, Neg and Concat), optionally grouped-query attention (--kv-heads: k and v heads
shared by groups of query heads, repeated with expand + reshape as HF's repeat_kv), a SwiGLU MLP (silu(x W1) * (x W3) W2, silu as Sigmoid and Mul),
causal attention with a triu mask filled with -inf, and a separate LM head. Projections
are stored [in, out] and applied as x @ W, so every parameter keeps its name in the ONNX
file (test/Integration/check_training.py rebuilds this module from them), and the rotary
tables stay computations on constants, which the importer folds (they are not parameters).

    export_torch_llama.py --layers 2 --embd 32 --heads 4 --vocab 128 --ctx 16 -o llama.onnx
"""
import argparse
import math

import numpy as np
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Block(nn.Module):
    def __init__(self, embd, heads, hidden, theta, kv_heads=None):
        super().__init__()
        self.heads, self.theta, self.head_dim = heads, theta, embd // heads
        self.kv_heads = kv_heads or heads
        kv = self.kv_heads * self.head_dim
        self.attn_norm, self.mlp_norm = RMSNorm(embd), RMSNorm(embd)
        for name, shape in [("wq", (embd, embd)), ("wk", (embd, kv)), ("wv", (embd, kv)),
                            ("wo", (embd, embd)), ("w1", (embd, hidden)), ("w3", (embd, hidden)),
                            ("w2", (hidden, embd))]:
            setattr(self, name, nn.Parameter(torch.empty(*shape)))

    def set_rotary(self, mode, ctx):
        """How the export stores the rotary tables. "computed": from positions in
        forward, constants the importer folds. "inv-freq": inv_freq a buffer (an
        initializer) that forward multiplies by the positions. "hf": HF transformers'
        LlamaRotaryEmbedding (4.38 on): inv_freq, expanded over the batch, matmul the
        position_ids, per-batch tables unsqueezed over the heads. "cached": cos and sin
        tables buffers of `ctx` rows sliced to the sequence (older HF). "inv-freq",
        "hf" and "cached" make initializers that are not parameters."""
        self.rotary_mode = mode
        d = self.head_dim
        inv = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        if mode in ("inv-freq", "hf"):
            self.register_buffer("inv_freq", inv)
        elif mode == "cached":
            cos, sin = self.angles(ctx, inv)
            self.register_buffer("cos_cached", cos)
            self.register_buffer("sin_cached", sin)

    @staticmethod
    def angles(seq, inv):
        freqs = torch.arange(seq, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()

    def rotary(self, seq, d, position_ids):
        mode = getattr(self, "rotary_mode", "computed")
        if mode == "hf":
            inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)
        if mode == "cached":
            return self.cos_cached[:seq], self.sin_cached[:seq]
        if mode == "inv-freq":
            return self.angles(seq, self.inv_freq)
        return self.angles(seq, 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)))

    def forward(self, x, position_ids=None):
        B, T, C = x.shape
        d = self.head_dim
        h = self.attn_norm(x)
        q = (h @ self.wq).view(B, T, self.heads, d).transpose(1, 2)
        k, v = [(h @ w).view(B, T, self.kv_heads, d).transpose(1, 2) for w in (self.wk, self.wv)]
        cos, sin = self.rotary(T, d, position_ids)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.kv_heads != self.heads:
            # Grouped-query attention: each k/v head serves heads / kv_heads query heads
            # (HF's repeat_kv: expand, then merge the two head axes).
            rep = self.heads // self.kv_heads
            k, v = [t[:, :, None].expand(B, self.kv_heads, rep, T, d).reshape(B, self.heads, T, d)
                    for t in (k, v)]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ self.wo
        h = self.mlp_norm(x)
        gate = h @ self.w1
        return x + ((gate * torch.sigmoid(gate)) * (h @ self.w3)) @ self.w2


class Llama(nn.Module):
    def __init__(self, layers, embd, heads, vocab, hidden=None, theta=10000.0, kv_heads=None):
        super().__init__()
        hidden = hidden or 4 * embd
        self.vocab = vocab
        self.embed = nn.Parameter(torch.empty(vocab, embd))
        self.blocks = nn.ModuleList(Block(embd, heads, hidden, theta, kv_heads)
                                    for _ in range(layers))
        self.norm = RMSNorm(embd)
        self.head = nn.Parameter(torch.empty(embd, vocab))

    def forward(self, ids, position_ids=None):
        if position_ids is None:  # HF: cache_position.unsqueeze(0), from 0 without a cache
            position_ids = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.embed[ids]
        for b in self.blocks:
            x = b(x, position_ids)
        return self.norm(x) @ self.head


def init_weights(model, seed):
    """Normal(0, 0.02) matrices (the output projections scaled by 1/sqrt(2 layers), as
    GPT-2 does), RMSNorm weights 1; deterministic from the seed."""
    rng = np.random.default_rng(seed)
    layers = len(model.blocks)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                continue
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("wo", "w2")) else 0.02
            p.copy_(torch.from_numpy(rng.normal(0.0, std, tuple(p.shape)).astype(np.float32)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, help="grouped-query attention: k/v heads (default: --heads)")
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=16, help="sequence length of the export")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opset", type=int, default=17, help="14..17 (torch 1.13's range with Trilu)")
    ap.add_argument("--rotary", choices=["computed", "inv-freq", "hf", "cached"],
                    default="computed",
                    help="computed in forward (default), or from buffers stored as "
                         "initializers: inv_freq times positions, HF's inv_freq @ "
                         "position_ids, or cos/sin tables of --max-positions rows")
    ap.add_argument("--position-ids-input", action="store_true",
                    help="position_ids a graph input (as HF exports take it)")
    ap.add_argument("--max-positions", type=int,
                    help="rows of the --rotary cached tables (default: --ctx)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.kv_heads and args.heads % args.kv_heads:
        ap.error("--heads must be a multiple of --kv-heads")
    model = Llama(args.layers, args.embd, args.heads, args.vocab, kv_heads=args.kv_heads)
    init_weights(model, args.seed)
    for b in model.blocks:
        b.set_rotary(args.rotary, args.max_positions or args.ctx)
    ids = torch.zeros(1, args.ctx, dtype=torch.int64)
    inputs, names = (ids,), ["input_ids"]
    if args.position_ids_input:
        inputs, names = (ids, torch.arange(args.ctx).unsqueeze(0)), names + ["position_ids"]
    # Without constant folding: torch would fold the rotary tables into initializers,
    # indistinguishable from parameters in the file.
    torch.onnx.export(model.eval(), inputs, args.output, opset_version=args.opset,
                      input_names=names, output_names=["logits"],
                      dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names},
                                    "logits": {0: "batch", 1: "seq"}},
                      do_constant_folding=False)
    n = sum(p.numel() for p in model.parameters())
    print(f"{args.output}: Llama(layers={args.layers}, embd={args.embd}, heads={args.heads}, "
          f"kv_heads={args.kv_heads or args.heads}, vocab={args.vocab}) params={n:,} "
          f"opset={args.opset}")


if __name__ == "__main__":
    main()
