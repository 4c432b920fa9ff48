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


def epoch_shuffle_seed(seed, epoch):
    """The seed of epoch e's permutation: SEED for the first, then splitmix64's output
    from state SEED + e."""
    return seed if epoch == 0 else SplitMix64(seed + epoch).next()


class Sampler:
    """Sequence k of step s reads window ((s*G + k) mod W), through epoch e's
    permutation with --shuffle, e = (s*G + k) // W. `tokens`: one shard's, or a list of
    shards' (each shard's windows, shard after shard)."""

    def __init__(self, tokens, seq, batch, dp, microbatches, shuffle=None):
        shards = tokens if isinstance(tokens, list) else [tokens]
        self.shards = [np.asarray(t, np.int64) for t in shards]
        self.T, self.B, self.dp, self.M = seq, batch, dp, microbatches
        self.G = dp * microbatches * batch
        # (shard, first token) of every window
        self.starts = [(i, w * seq) for i, t in enumerate(self.shards)
                       for w in range(max(0, (len(t) - 1) // seq))]
        self.W = len(self.starts)
        self.shuffle = shuffle
        self.perms = {}

    def perm(self, epoch):
        if epoch not in self.perms:
            self.perms[epoch] = shuffle_permutation(self.W, epoch_shuffle_seed(self.shuffle, epoch))
        return self.perms[epoch]

    def window(self, s, k):
        epoch, w = divmod(s * self.G + k, self.W)
        return self.perm(epoch)[w] if self.shuffle is not None else w

    def microbatch(self, s, j, d):
        x = np.zeros((self.B, self.T), np.int64)
        y = np.zeros((self.B, self.T), np.int64)
        for b in range(self.B):
            k = (j * self.dp + d) * self.B + b
            shard, start = self.starts[self.window(s, k)]
            x[b] = self.shards[shard][start : start + self.T]
            y[b] = self.shards[shard][start + 1 : start + self.T + 1]
        return x, y


def learning_rate(s, lr, steps, warmup=0, schedule="constant", min_lr=0.0, decay_steps=0):
    if s < warmup:
        return lr * (s + 1) / warmup
    if schedule == "constant":
        return lr
    if schedule == "wsd":
        if s < steps - decay_steps:
            return lr
        return lr - (lr - min_lr) * min(1.0, (s - (steps - decay_steps)) / decay_steps)
    p = min(1.0, (s - warmup) / max(1, steps - warmup))
    if schedule == "linear":
        return lr - (lr - min_lr) * p
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


# --- bf16 storage (compile options activations=bf16 and params=bf16) -------------------

class RoundBf16(torch.autograd.Function):
    """A stored bf16 activation: rounds the value going forward and its gradient going
    back."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g.to(torch.bfloat16).to(g.dtype)


class Bf16Copy(torch.autograd.Function):
    """The bf16 compute copy of an f32 master weight: the forward reads the rounded
    value, the gradient reaches the master as it is (f32)."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def gpt2_loss(p, ids, tgt, heads, bf16_activations=False, bf16_params=False):
    """models/gen_gpt2.py's model (GPT-2: pre-LN, tanh GELU, tied head) with the
    storage rules of lib/Plan/StagedStep.cpp and lib/Plan/Sharding.h.
    bf16_activations: every op reads and writes rounded values (its inputs rounded
    too: each gradient contribution is rounded before autograd sums them, as the plan
    stores each); parameters are read as they are, so their gradients stay f32.
    bf16_params: every op reads the bf16 copy of each (trained) parameter."""
    R = RoundBf16.apply if bf16_activations else (lambda x: x)
    if bf16_params:
        p = {k: Bf16Copy.apply(v) for k, v in p.items()}

    def op(fn, *xs):
        return R(fn(*[R(x) for x in xs]))

    Bn, Tn = ids.shape
    V, C = p["transformer.wte.weight"].shape
    D = C // heads
    # At seq = ctx the position table is added whole (no slice op, nothing rounded).
    assert Tn == p["transformer.wpe.weight"].shape[0]
    h = op(lambda e: e + p["transformer.wpe.weight"], op(lambda: p["transformer.wte.weight"][ids]))
    L = sum(1 for k in p if k.endswith(".ln_1.weight"))
    for i in range(L):
        w = lambda n: p[f"transformer.h.{i}.{n}"]
        ln1 = op(lambda x: F.layer_norm(x, (C,), w("ln_1.weight"), w("ln_1.bias"), 1e-5), h)
        qkv = op(lambda x: x @ w("attn.c_attn.weight") + w("attn.c_attn.bias"), ln1)
        q, k, v = (t.reshape(Bn, Tn, heads, D).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = op(lambda a, b, c: causal_attention(a, b, c, D), q, k, v)
        att = att.transpose(1, 2).reshape(Bn, Tn, C)
        proj = op(lambda x: x @ w("attn.c_proj.weight") + w("attn.c_proj.bias"), att)
        h = op(torch.add, h, proj)
        ln2 = op(lambda x: F.layer_norm(x, (C,), w("ln_2.weight"), w("ln_2.bias"), 1e-5), h)
        fc = op(lambda x: x @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"), ln2)
        g = op(lambda x: F.gelu(x, approximate="tanh"), fc)
        mlp = op(lambda x: x @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias"), g)
        h = op(torch.add, h, mlp)
    lnf = op(lambda x: F.layer_norm(x, (C,), p["transformer.ln_f.weight"],
                                    p["transformer.ln_f.bias"], 1e-5), h)
    logits = op(lambda x: x @ p["transformer.wte.weight"].t(), lnf)
    return F.cross_entropy(R(logits).reshape(-1, V), tgt.reshape(-1)), None


MODELS = {"tiny-gpt": tiny_gpt_loss, "zoo": zoo_loss}
for _a in (False, True):
    for _p in (False, True):
        MODELS["gpt2" + ("-bf16act" if _a else "") + ("-bf16params" if _p else "")] = (
            lambda p, x, y, h, a=_a, b=_p: gpt2_loss(p, x, y, h, a, b))


def train(model, weights, sampler, steps, heads, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
          weight_decay=0.01, grad_clip=0.0, warmup=0, schedule="constant", min_lr=0.0,
          dtype=torch.float32, grad_reduce="f32", decay_steps=0, node_size=0):
    """Returns per-step dicts (loss, lr, grad_norm) and the final parameters.
    dtype=torch.float64: the same computation with f64 arithmetic (bf16 rounding
    points stay where they are), to tell a difference in evaluation order from one
    in what is computed. With sampler.dp > 1 each replica's gradient is computed
    apart and then summed over replicas; grad_reduce="bf16" sums them as the runtime's
    bf16 reductions do: each replica's gradient rounded to bf16, every addition rounded
    (replica order; the same as any order for two replicas). node_size > 0: as
    dp-collectives=hierarchical sums them, each run of node_size consecutive replicas
    (a node) first, then the nodes' sums in node order."""
    torch.set_num_threads(1)
    params = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in weights.items()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps)
    fn = MODELS[model]
    n = sampler.M * sampler.dp
    bf16 = lambda t: t.to(torch.bfloat16).to(t.dtype)
    log = []
    for s in range(steps):
        lr_s = learning_rate(s, lr, steps, warmup, schedule, min_lr, decay_steps)
        for g in opt.param_groups:
            g["lr"] = lr_s
        total = 0.0
        replicas = []
        for d in range(sampler.dp):
            opt.zero_grad(set_to_none=False)
            for j in range(sampler.M):
                x, y = sampler.microbatch(s, j, d)
                loss, extra = fn(params, torch.from_numpy(x), torch.from_numpy(y), heads)
                (loss / n).backward()
                total += loss.item() / n
                if extra is not None:
                    total += extra.item() / n
            replicas.append({k: v.grad.clone() for k, v in params.items()})
        for k, v in params.items():
            parts = [r[k] for r in replicas]
            if grad_reduce == "bf16" and len(parts) > 1:
                def bf16_sum(xs, rounded=False):
                    acc = xs[0] if rounded else bf16(xs[0])
                    for g in xs[1:]:
                        acc = bf16(acc + (g if rounded else bf16(g)))
                    return acc
                if node_size > 0:
                    nodes = [bf16_sum(parts[i:i + node_size])
                             for i in range(0, len(parts), node_size)]
                    acc = bf16_sum(nodes, rounded=True)
                else:
                    acc = bf16_sum(parts)
            else:
                acc = parts[0]
                for g in parts[1:]:
                    acc = acc + g
            v.grad.copy_(acc)
        norm = torch.nn.utils.clip_grad_norm_(list(params.values()),
                                              grad_clip if grad_clip > 0 else float("inf"))
        opt.step()
        log.append({"loss": total, "lr": lr_s, "grad_norm": float(norm)})
    return log, {k: v.detach().numpy().copy() for k, v in params.items()}
