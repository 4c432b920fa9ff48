"""Python references for pipemesh-run: canonical sampling (DESIGN.md section 2),
the --shuffle permutation, the learning-rate schedule, and PyTorch
implementations of the hand-made test models trained with torch.optim.AdamW.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def shuffle_permutation(n, seed):
    perm = list(range(n))
    rng = SplitMix64(seed)
    for i in range(n - 1, 0, -1):
        j = rng.next() % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Sampler:
    """Sequence k of step s reads window ((s*G + k) mod W) (or perm[...])."""

    def __init__(self, tokens, seq, batch, dp, microbatches, shuffle=None):
        self.tokens = np.asarray(tokens, np.int64)
        self.T, self.B, self.dp, self.M = seq, batch, dp, microbatches
        self.G = dp * microbatches * batch
        self.W = (len(self.tokens) - 1) // seq
        self.perm = shuffle_permutation(self.W, shuffle) if shuffle is not None else None

    def window(self, s, k):
        w = (s * self.G + k) % self.W
        return self.perm[w] if self.perm is not None else w

    def microbatch(self, s, j, d):
        x = np.zeros((self.B, self.T), np.int64)
        y = np.zeros((self.B, self.T), np.int64)
        for b in range(self.B):
            k = (j * self.dp + d) * self.B + b
            start = self.window(s, k) * self.T
            x[b] = self.tokens[start : start + self.T]
            y[b] = self.tokens[start + 1 : start + self.T + 1]
        return x, y


def learning_rate(s, lr, steps, warmup=0, schedule="constant", min_lr=0.0):
    if s < warmup:
        return lr * (s + 1) / warmup
    if schedule == "constant":
        return lr
    p = min(1.0, (s - warmup) / max(1, steps - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


# --- models (mirror runtime/tools/make_test_plan.py) ----------------------------------

def causal_attention(q, k, v, d):
    """softmax(q k^T / sqrt(d), causal) v over the last two dims."""
    t = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1) @ v


def tiny_gpt_loss(p, ids, tgt, heads):
    B, T = ids.shape
    V, C = p["wte"].shape
    H, D = heads, C // heads
    ln = lambda x, n: F.layer_norm(x, (C,), p[n + ".weight"], p[n + ".bias"], 1e-5)
    h = p["wte"][ids] + p["wpe"]
    qkv = ln(h, "ln1") @ p["attn.qkv.weight"] + p["attn.qkv.bias"]
    q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=2))
    att = causal_attention(q, k, v, D).transpose(1, 2).reshape(B, T, C)
    h2 = h + att @ p["attn.proj.weight"] + p["attn.proj.bias"]
    fc = ln(h2, "ln2") @ p["mlp.fc.weight"] + p["mlp.fc.bias"]
    h3 = h2 + F.gelu(fc, approximate="tanh") @ p["mlp.proj.weight"] + p["mlp.proj.bias"]
    logits = ln(h3, "lnf") @ p["wte"].t()
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1)), None


def zoo_loss(p, ids, tgt, heads, aux_scale=0.01):
    B, T = ids.shape
    V, C = p["emb"].shape
    Ch = C // 2
    H, D = heads, Ch // heads
    i = torch.arange(T)
    mask = torch.where(i[None, :] <= i[:, None], torch.tensor(0.0), torch.tensor(-1e9))
    e = p["emb"][ids]
    s = torch.softmax(e, dim=1)
    sh = s[:, :, ::2]
    q = (sh * p["scale"]).reshape(B, T, H, D).transpose(1, 2)
    att = torch.softmax(0.7 * (q @ q.transpose(-2, -1)) + mask, -1) @ q
    ar = att.transpose(1, 2).reshape(B, T, Ch)
    lp = torch.log_softmax(ar @ p["head"], -1)
    loss = F.cross_entropy(lp.reshape(-1, V), tgt.reshape(-1), reduction="none").mean()
    with torch.no_grad():
        f = (e * 0.5) ** 2
        f = f + torch.exp(-f)
        f = torch.sqrt(f)
        f = torch.log(f + f)
        f = torch.tanh(f - 0.5)
        f = torch.erf(f / 2)
        f = torch.maximum(f, torch.zeros(1))
        f = F.gelu(f)
        g = f.mean(-1, keepdim=True).expand(B, T, C) * ids.float()[..., None]
        aux = g.mean()
    return loss, aux_scale * aux


MODELS = {"tiny-gpt": tiny_gpt_loss, "zoo": zoo_loss}


def train(model, weights, sampler, steps, heads, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
          weight_decay=0.01, grad_clip=0.0, warmup=0, schedule="constant", min_lr=0.0):
    """Returns per-step dicts (loss, lr, grad_norm) and the final parameters."""
    torch.set_num_threads(1)
    params = {k: torch.tensor(v, dtype=torch.float32, requires_grad=True) for k, v in weights.items()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps)
    fn = MODELS[model]
    log = []
    for s in range(steps):
        lr_s = learning_rate(s, lr, steps, warmup, schedule, min_lr)
        for g in opt.param_groups:
            g["lr"] = lr_s
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for j in range(sampler.M):
            x, y = sampler.microbatch(s, j, 0)
            loss, extra = fn(params, torch.from_numpy(x), torch.from_numpy(y), heads)
            (loss / sampler.M).backward()
            total += loss.item() / sampler.M
            if extra is not None:
                total += extra.item() / sampler.M
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()),
                                              grad_clip if grad_clip > 0 else float("inf"))
        opt.step()
        log.append({"loss": total, "lr": lr_s, "grad_norm": float(norm)})
    return log, {k: v.detach().numpy().copy() for k, v in params.items()}
