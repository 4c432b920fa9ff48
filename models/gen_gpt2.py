#!/usr/bin/python3
"""Writes GPT-2 family ONNX models with onnx.helper, deterministic from a seed.

These models are PipeMesh's own test inputs: unlike a torch export we control every op,
every opset difference and the weight layout, so the importer can be tested op by op and
huge models (1.5B) can be produced without PyTorch and without the RAM to hold them.

    gen_gpt2.py --preset tiny -o tiny.onnx
    gen_gpt2.py --preset 1.5B --external-data -o gpt2-xl.onnx      # weights in gpt2-xl.onnx.data
    gen_gpt2.py --preset 1.5B --shapes-only -o gpt2-xl-shapes.onnx  # ~1 MB, no weights at all
    gen_gpt2.py --preset tiny --with-loss --opset 13 -o tiny13_loss.onnx
    gen_gpt2.py --preset 124M --kv-heads 4 -o gqa.onnx  # grouped-query attention

Python users: `build_model(config, ...)` returns the ModelProto; `init_weights(config, seed)`
yields the exact parameter values the model holds; `numpy_forward(...)` is an independent
NumPy implementation of the same network (the oracle the fixtures are checked against).
"""
import argparse
import dataclasses
import io
import math
import os
import sys
import zipfile
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# ----------------------------------------------------------------------------------------
# Configuration

@dataclasses.dataclass(frozen=True)
class GPT2Config:
    n_layer: int
    n_embd: int
    n_head: int
    vocab_size: int = 50257
    n_ctx: int = 1024
    # Key/value heads (grouped-query attention, as Llama's num_key_value_heads: query
    # head h reads key/value head h // (n_head // n_kv_head)); 0 = n_head (GPT-2).
    n_kv_head: int = 0

    def validate(self):
        if self.n_embd % self.n_head:
            raise ValueError(f"embd {self.n_embd} is not divisible by heads {self.n_head}")
        for f in dataclasses.fields(self):
            if getattr(self, f.name) <= 0 and f.name != "n_kv_head":
                raise ValueError(f"{f.name} must be positive")
        if self.n_kv_head < 0 or self.n_head % self.kv_heads:
            raise ValueError(f"heads {self.n_head} are not a multiple of kv heads {self.n_kv_head}")

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    @property
    def kv_heads(self):
        return self.n_kv_head or self.n_head

    @property
    def qkv_width(self):
        """c_attn's output: q (n_embd), then k and v (kv_heads * head_dim each)."""
        return self.n_embd + 2 * self.kv_heads * self.head_dim


PRESETS = {
    "tiny": GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_ctx=64),
    "124M": GPT2Config(n_layer=12, n_embd=768, n_head=12),
    "350M": GPT2Config(n_layer=24, n_embd=1024, n_head=16),
    "774M": GPT2Config(n_layer=36, n_embd=1280, n_head=20),
    "1.5B": GPT2Config(n_layer=48, n_embd=1600, n_head=25),
}

LN_EPS = 1e-5
# torch.finfo(torch.float32).min: what HF GPT-2 writes into masked attention scores.
MASK_VALUE = -3.4028234663852886e38
MIN_OPSET, MAX_OPSET = 13, 21
# The IR version each opset shipped with (onnx release table), so a file never claims an
# IR version older than the opset it uses.
IR_VERSION_FOR_OPSET = {13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}
# The opsets the installed onnx package knows schemas for; the checker cannot judge newer.
CHECKER_MAX_OPSET = onnx.defs.onnx_opset_version()

# ----------------------------------------------------------------------------------------
# Parameters: names follow HF's GPT2LMHeadModel state_dict, so a checkpoint written by
# PipeMesh lines up with one from PyTorch, and export_torch_gpt2.py can load these values.

def param_specs(cfg):
    """[(name, shape, init)] in graph order; init is 'normal' | 'zeros' | 'ones'."""
    C, V, T, QKV = cfg.n_embd, cfg.vocab_size, cfg.n_ctx, cfg.qkv_width
    specs = [("transformer.wte.weight", (V, C), "normal"),
             ("transformer.wpe.weight", (T, C), "normal")]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        specs += [
            (p + "ln_1.weight", (C,), "ones"), (p + "ln_1.bias", (C,), "zeros"),
            (p + "attn.c_attn.weight", (C, QKV), "normal"), (p + "attn.c_attn.bias", (QKV,), "zeros"),
            (p + "attn.c_proj.weight", (C, C), "normal"), (p + "attn.c_proj.bias", (C,), "zeros"),
            (p + "ln_2.weight", (C,), "ones"), (p + "ln_2.bias", (C,), "zeros"),
            (p + "mlp.c_fc.weight", (C, 4 * C), "normal"), (p + "mlp.c_fc.bias", (4 * C,), "zeros"),
            (p + "mlp.c_proj.weight", (4 * C, C), "normal"), (p + "mlp.c_proj.bias", (C,), "zeros"),
        ]
    specs += [("transformer.ln_f.weight", (C,), "ones"), ("transformer.ln_f.bias", (C,), "zeros")]
    return specs


def num_params(cfg):
    return sum(int(np.prod(s)) for _, s, _ in param_specs(cfg))


def init_param(name, shape, init, seed):
    """One parameter's initial value, float32.

    Each tensor gets its own generator keyed by (seed, crc32(name)), so a value does not
    depend on which other tensors were drawn before it: a reference script can rebuild any
    single weight of a 1.5B model without generating the rest.
    """
    if init == "zeros":
        return np.zeros(shape, np.float32)
    if init == "ones":
        return np.ones(shape, np.float32)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    # float32 draws directly: a float64 intermediate would double peak memory for wte.
    a = rng.standard_normal(shape, dtype=np.float32)
    a *= np.float32(0.02)
    return a


def init_weights(cfg, seed):
    """Yields (name, float32 array) for every parameter, one at a time."""
    for name, shape, init in param_specs(cfg):
        yield name, init_param(name, shape, init, seed)


def reference_batch(cfg, seed, batch=2, seq=16):
    """The fixed inputs reference outputs are computed on (shared with export_torch_gpt2).

    The attention mask zeroes positions 4..6 of the second sequence: every query row keeps
    key 0 visible, so no softmax row is fully masked (a fully masked row's result depends
    on how an implementation combines finfo.min values, which is not worth comparing).
    """
    seq = min(seq, cfg.n_ctx)
    rng = np.random.default_rng([seed, 0xBA7C4])
    ids = rng.integers(0, cfg.vocab_size, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    if batch > 1 and seq > 7:
        mask[1, 4:7] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.copy()}

def save_npz(path, arrays):
    """np.savez, but byte-identical across runs (fixed zip timestamps), so regenerating the
    committed fixtures does not show up as a diff when nothing changed."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name in sorted(arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asanyarray(arrays[name]), allow_pickle=False)
            z.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())

# ----------------------------------------------------------------------------------------
# Independent NumPy forward pass (the oracle; written from the math, not from the graph)

def _layer_norm(x, g, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + np.float32(LN_EPS)) * g + b


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.float32(math.sqrt(2.0 / math.pi)) * (x + 0.044715 * x ** 3)))


def numpy_forward(cfg, weights, input_ids, labels=None, attention_mask=None, shift_labels=False,
                  sliding_window=0):
    """Returns (logits [B,T,V] float32, loss or None).

    shift_labels=True is HF's convention (labels are the inputs, position t predicts t+1,
    the last position has no target); False means labels are already the next tokens.
    sliding_window > 0: each position attends to itself and the sliding_window - 1 before.
    """
    w = weights
    B, T = input_ids.shape
    C, H, D, KV = cfg.n_embd, cfg.n_head, cfg.head_dim, cfg.kv_heads
    x = w["transformer.wte.weight"][input_ids] + w["transformer.wpe.weight"][:T]
    causal = np.tril(np.ones((T, T), bool))
    if sliding_window:
        causal &= np.triu(np.ones((T, T), bool), -(sliding_window - 1))
    add_mask = None
    if attention_mask is not None:
        add_mask = ((1.0 - attention_mask.astype(np.float32)) * np.float32(MASK_VALUE))[:, None, None, :]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        h = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
        q, k, v = np.split(qkv, [C, C + KV * D], axis=-1)
        q = q.reshape(B, T, H, D).transpose(0, 2, 1, 3)
        # Each key/value head serves H // KV consecutive query heads.
        k, v = (np.repeat(t.reshape(B, T, KV, D).transpose(0, 2, 1, 3), H // KV, axis=1)
                for t in (k, v))
        s = (q @ k.transpose(0, 1, 3, 2)) / np.float32(math.sqrt(D))
        s = np.where(causal, s, np.float32(MASK_VALUE))
        if add_mask is not None:
            with np.errstate(over="ignore"):  # finfo.min + finfo.min = -inf, as in PyTorch
                s = s + add_mask
        s = s - s.max(-1, keepdims=True)
        pr = np.exp(s)
        pr /= pr.sum(-1, keepdims=True)
        a = (pr @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        h = _gelu_tanh(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    logits = (x @ w["transformer.wte.weight"].T).astype(np.float32)
    loss = None
    if labels is not None:
        lg, lb = (logits[:, :-1], labels[:, 1:]) if shift_labels else (logits, labels)
        lg = lg.reshape(-1, lg.shape[-1]).astype(np.float64)
        lb = lb.reshape(-1)
        keep = lb != -100  # CrossEntropyLoss's default ignore_index
        m = lg.max(-1, keepdims=True)
        logp = lg - m - np.log(np.exp(lg - m).sum(-1, keepdims=True))
        loss = np.float32(-logp[keep, lb[keep]].mean())
    return logits, loss

# ----------------------------------------------------------------------------------------
# Graph construction

class _Graph:
    """Collects nodes and initializers; hands out unique names."""

    def __init__(self, opset):
        self.opset = opset
        self.nodes, self.inits = [], []
        self._n = 0

    def name(self, hint):
        self._n += 1
        return f"{hint}_{self._n}"

    def op(self, op_type, inputs, n_out=1, name=None, output=None, **attrs):
        """Appends a node; returns its output name(s). `output` names a graph output."""
        name = name or self.name(op_type)
        outs = [f"{name}_out{i}" if n_out > 1 else f"{name}_out" for i in range(n_out)]
        if output:
            outs = [output]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    def const(self, value, dtype, hint="const"):
        """A small constant as a Constant node (not an initializer: it is no parameter)."""
        arr = np.asarray(value, dtype=dtype)
        name = self.name(hint)
        t = numpy_helper.from_array(arr, name + "_value")
        self.nodes.append(helper.make_node("Constant", [], [name], name=name, value=t))
        return name

    def i64(self, value, hint="const_i64"):
        return self.const(value, np.int64, hint)

    def f32(self, value, hint="const_f32"):
        return self.const(value, np.float32, hint)

    # Ops whose signature changed across the supported opsets ----------------------------
    def reduce_mean_last(self, x):
        if self.opset >= 18:  # axes became an input in opset 18
            return self.op("ReduceMean", [x, self.i64([-1], "axes")], keepdims=1)
        return self.op("ReduceMean", [x], axes=[-1], keepdims=1)

    def split3(self, x, size, axis, sizes=None):
        """Three equal parts of `size`, or the three `sizes`."""
        if sizes:
            return self.op("Split", [x, self.i64(list(sizes), "split_sizes")], n_out=3, axis=axis)
        if self.opset >= 18:  # opset 18 adds num_outputs (equal parts)
            return self.op("Split", [x], n_out=3, axis=axis, num_outputs=3)
        # opsets 13..17: sizes are an (optional) input
        return self.op("Split", [x, self.i64([size] * 3, "split_sizes")], n_out=3, axis=axis)

    def unsqueeze(self, x, axes):
        return self.op("Unsqueeze", [x, self.i64(axes, "axes")])  # axes are an input from 13


def _layer_norm_node(g, x, gamma, beta, decompose):
    if g.opset >= 17 and not decompose:
        return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=LN_EPS)
    # Below opset 17 there is no LayerNormalization: this is the chain torch.onnx emits.
    mean = g.reduce_mean_last(x)
    d = g.op("Sub", [x, mean])
    var = g.reduce_mean_last(g.op("Pow", [d, g.f32(2.0, "two")]))
    std = g.op("Sqrt", [g.op("Add", [var, g.f32(LN_EPS, "eps")])])
    return g.op("Add", [g.op("Mul", [g.op("Div", [d, std]), gamma]), beta])


def _gelu_tanh_nodes(g, x):
    # Written out because ONNX has no tanh-GELU before opset 20 (and none in onnx 1.12);
    # the importer is expected to recognise this pattern.
    cube = g.op("Pow", [x, g.f32(3.0, "three")])
    inner = g.op("Add", [x, g.op("Mul", [cube, g.f32(0.044715, "gelu_c")])])
    t = g.op("Tanh", [g.op("Mul", [inner, g.f32(math.sqrt(2.0 / math.pi), "sqrt_2_over_pi")])])
    return g.op("Mul", [g.op("Mul", [x, g.f32(0.5, "half")]), g.op("Add", [t, g.f32(1.0, "one")])])


def _make_graph_body(g, cfg, with_loss, keep_logits, decompose_ln, causal_mask, shift_labels,
                     sliding_window=0):
    C, H, D = cfg.n_embd, cfg.n_head, cfg.head_dim

    # The sequence length is read off the input at run time (Shape -> Gather), so position
    # ids and the mask slice only become static once the importer binds --seq.
    ids_shape = g.op("Shape", ["input_ids"], name="input_ids_shape")
    seq = g.op("Gather", [ids_shape, g.i64(1, "seq_axis")], axis=0, name="seq_len")  # scalar
    pos = g.op("Range", [g.i64(0, "zero"), seq, g.i64(1, "one_i64")], name="position_ids")
    tok_emb = g.op("Gather", ["transformer.wte.weight", "input_ids"], axis=0, name="wte_gather")
    pos_emb = g.op("Gather", ["transformer.wpe.weight", pos], axis=0, name="wpe_gather")
    x = g.op("Add", [tok_emb, pos_emb], name="embed_add")

    # Causal mask [1,1,seq,seq] (bool), shared by all layers.
    seq_1d = g.unsqueeze(seq, [0])
    if causal_mask == "constant":
        # Like HF's registered `bias` buffer: a [1,1,ctx,ctx] tril, sliced to the length.
        tril = np.tril(np.ones((cfg.n_ctx, cfg.n_ctx), bool))[None, None]
        if sliding_window:  # Mistral-style band: the last sliding_window keys
            tril &= np.triu(np.ones((cfg.n_ctx, cfg.n_ctx), bool), -(sliding_window - 1))
        g.inits.append(numpy_helper.from_array(tril, "causal_mask"))
        ends = g.op("Concat", [seq_1d, seq_1d], axis=0)
        mask = g.op("Slice", ["causal_mask", g.i64([0, 0], "starts"), ends, g.i64([2, 3], "axes")],
                    name="causal_mask_slice")
    else:
        # Computed from positions (no ctx x ctx constant: keeps shapes-only files tiny):
        # allowed(i, j) = not (i < j).
        rows = g.unsqueeze(pos, [1])
        cols = g.unsqueeze(pos, [0])
        allowed = g.op("Not", [g.op("Less", [rows, cols])])
        if sliding_window:  # and i - j < sliding_window
            near = g.op("Less", [g.op("Sub", [rows, cols]),
                                 g.i64(sliding_window, "sliding_window")])
            allowed = g.op("And", [allowed, near])
        mask = g.unsqueeze(allowed, [0, 1])

    scale = g.f32(1.0 / math.sqrt(D), "attn_scale")
    mask_value = g.f32(MASK_VALUE, "mask_value")
    # [B,T,C] -> [B,T,H,D] target shape for head splitting, built from the runtime shape of the
    # activations: exercises the importer's Shape/Slice/Concat folding.
    heads_tail = g.i64([H, D], "heads_shape")
    merge_shape = g.i64([0, 0, C], "merge_shape")  # 0 = copy that input dim (Reshape semantics)
    KV = cfg.kv_heads
    if KV != H:
        # Grouped-query attention: k and v of KV heads, each repeated for H // KV query
        # heads as Llama's repeat_kv does it (unsqueeze, expand, merge).
        kv_tail = g.i64([KV, D], "kv_heads_shape")
        expand_shape = g.i64([1, 1, H // KV, 1, 1], "repeat_kv_expand")
        repeat_shape = g.i64([0, H, -1, D], "repeat_kv_merge")

    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        h = _layer_norm_node(g, x, p + "ln_1.weight", p + "ln_1.bias", decompose_ln)
        qkv = g.op("Add", [g.op("MatMul", [h, p + "attn.c_attn.weight"]), p + "attn.c_attn.bias"])
        q, k, v = g.split3(qkv, C, axis=2, sizes=None if KV == H else (C, KV * D, KV * D))
        bt = g.op("Slice", [g.op("Shape", [q]), g.i64([0], "starts"), g.i64([2], "ends")])
        split_shape = g.op("Concat", [bt, heads_tail], axis=0)
        q = g.op("Transpose", [g.op("Reshape", [q, split_shape])], perm=[0, 2, 1, 3])   # [B,H,T,D]
        if KV == H:
            kt = g.op("Transpose", [g.op("Reshape", [k, split_shape])], perm=[0, 2, 3, 1])  # [B,H,D,T]
            v = g.op("Transpose", [g.op("Reshape", [v, split_shape])], perm=[0, 2, 1, 3])   # [B,H,T,D]
        else:
            kv_shape = g.op("Concat", [bt, kv_tail], axis=0)
            k, v = (g.op("Transpose", [g.op("Reshape", [t, kv_shape])], perm=[0, 2, 1, 3])
                    for t in (k, v))  # [B,KV,T,D]
            k, v = (g.op("Reshape", [g.op("Expand", [g.unsqueeze(t, [2]), expand_shape]),
                                     repeat_shape]) for t in (k, v))  # [B,H,T,D]
            kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])  # [B,H,D,T]
        s = g.op("Mul", [g.op("MatMul", [q, kt]), scale])
        s = g.op("Where", [mask, s, mask_value])
        pr = g.op("Softmax", [s], axis=-1)
        a = g.op("Transpose", [g.op("MatMul", [pr, v])], perm=[0, 2, 1, 3])
        a = g.op("Reshape", [a, merge_shape])
        a = g.op("Add", [g.op("MatMul", [a, p + "attn.c_proj.weight"]), p + "attn.c_proj.bias"])
        x = g.op("Add", [x, a], name=f"h{i}_attn_residual")
        h = _layer_norm_node(g, x, p + "ln_2.weight", p + "ln_2.bias", decompose_ln)
        h = g.op("Add", [g.op("MatMul", [h, p + "mlp.c_fc.weight"]), p + "mlp.c_fc.bias"])
        h = _gelu_tanh_nodes(g, h)
        h = g.op("Add", [g.op("MatMul", [h, p + "mlp.c_proj.weight"]), p + "mlp.c_proj.bias"])
        x = g.op("Add", [x, h], name=f"h{i}_mlp_residual")

    x = _layer_norm_node(g, x, "transformer.ln_f.weight", "transformer.ln_f.bias", decompose_ln)
    # Tied head: wte itself is transposed in the graph (no second copy), so the importer
    # sees one parameter used by the embedding Gather and by this MatMul.
    wte_t = g.op("Transpose", ["transformer.wte.weight"], perm=[1, 0], name="wte_transpose")
    logits = g.op("MatMul", [x, wte_t], name="lm_head", output="logits")

    outputs = []
    if with_loss:
        lg, lb = logits, "labels"
        if shift_labels:
            lg = g.op("Slice", [lg, g.i64([0], "starts"), g.i64([-1], "ends"), g.i64([1], "axes")])
            lb = g.op("Slice", [lb, g.i64([1], "starts"), g.i64([np.iinfo(np.int64).max], "ends"),
                                g.i64([1], "axes")])
        lg = g.op("Reshape", [lg, g.i64([-1, cfg.vocab_size], "flat_logits_shape")])
        lb = g.op("Reshape", [lb, g.i64([-1], "flat_labels_shape")])
        g.op("SoftmaxCrossEntropyLoss", [lg, lb], name="loss_xent", output="loss", reduction="mean")
        outputs.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    if keep_logits:
        outputs.append(helper.make_tensor_value_info(
            "logits", TensorProto.FLOAT, ["batch", "seq", cfg.vocab_size]))
    return outputs


def _external_tensor(name, shape, location, offset, length):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


_ALIGN = 64  # external tensors start on 64-byte boundaries so a loader can mmap them as float*


def build_model(cfg, seed=0, opset=17, with_loss=False, keep_logits=True, weights="inline",
                external_path=None, decompose_layernorm=False, causal_mask="constant",
                shift_labels=False, sliding_window=0):
    """Builds the GPT-2 ModelProto.

    weights: 'inline'      - raw data inside the proto (< 2 GB only);
             'external'    - written now, one tensor at a time, to `external_path`
                             (the proto refers to it by basename: save the .onnx beside it);
             'shapes-only' - declared external at `external_path`, which is never written.
    with_loss adds input `labels` [batch, seq] and output `loss` (mean cross-entropy);
    shift_labels=False means labels[b, t] is the target of position t (the llm.c / PipeMesh
    data convention: targets are the inputs shifted by one already); True is HF's
    convention (labels = input_ids, shifted inside the graph).
    sliding_window > 0 limits each position's attention to itself and the
    sliding_window - 1 positions before it (Mistral's local attention).
    """
    cfg.validate()
    if sliding_window < 0:
        raise ValueError(f"sliding_window must be >= 0, got {sliding_window}")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset {opset} not supported (use {MIN_OPSET}..{MAX_OPSET})")
    if not (with_loss or keep_logits):
        raise ValueError("the model needs at least one output")
    if weights not in ("inline", "external", "shapes-only"):
        raise ValueError(f"unknown weights mode {weights!r}")
    if weights != "inline" and not external_path:
        raise ValueError("external/shapes-only weights need external_path")
    if causal_mask not in ("constant", "computed"):
        raise ValueError(f"unknown causal_mask {causal_mask!r}")

    g = _Graph(opset)
    outputs = _make_graph_body(g, cfg, with_loss, keep_logits, decompose_layernorm,
                               causal_mask, shift_labels, sliding_window)

    specs = param_specs(cfg)
    if weights == "inline":
        total = 4 * sum(int(np.prod(s)) for _, s, _ in specs)
        if total > 1_900_000_000:
            raise ValueError(f"{total / 2**30:.1f} GiB of weights do not fit in a protobuf "
                             "(2 GB limit): use --external-data or --shapes-only")
        params = [numpy_helper.from_array(init_param(n, s, k, seed), n) for n, s, k in specs]
    else:
        location = os.path.basename(external_path)
        params, offset = [], 0
        f = open(external_path, "wb") if weights == "external" else None
        try:
            for n, s, k in specs:
                offset = (offset + _ALIGN - 1) // _ALIGN * _ALIGN
                length = 4 * int(np.prod(s))
                if f is not None:
                    f.seek(offset)  # the gap reads back as zeros
                    arr = init_param(n, s, k, seed)
                    f.write(arr.astype("<f4", copy=False).tobytes())
                    del arr  # at most one tensor in memory at a time
                params.append(_external_tensor(n, s, location, offset, length))
                offset += length
        finally:
            if f is not None:
                f.close()
    g.inits = params + g.inits

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    if with_loss:
        inputs.append(helper.make_tensor_value_info("labels", TensorProto.INT64, ["batch", "seq"]))
    graph = helper.make_graph(g.nodes, "gpt2", inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, producer_name="pipemesh-gen_gpt2",
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION_FOR_OPSET[opset]
    meta = {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_head": cfg.n_head,
            "n_kv_head": cfg.n_kv_head or None,
            "vocab_size": cfg.vocab_size, "n_ctx": cfg.n_ctx, "seed": seed,
            "shift_labels": int(shift_labels) if with_loss else None,
            "shapes_only": int(weights == "shapes-only")}
    helper.set_model_props(model, {f"pipemesh.{k}": str(v) for k, v in meta.items() if v is not None})
    return model


def external_weights_as_inputs(model):
    """A copy whose external initializers are typed graph inputs instead.

    onnx.checker insists that external data files exist, so a shapes-only model is checked
    in this form: same graph, same types and shapes, no data to look for.
    """
    shadow = onnx.ModelProto()
    shadow.CopyFrom(model)
    ext = [t for t in shadow.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    shadow.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in ext)
    keep = [t for t in shadow.graph.initializer if t.data_location != TensorProto.EXTERNAL]
    del shadow.graph.initializer[:]
    shadow.graph.initializer.extend(keep)
    return shadow


def check(path):
    """onnx.checker on a saved model; returns a one-line note (why it was skipped, if so)."""
    model = onnx.load(path, load_external_data=False)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset > CHECKER_MAX_OPSET or model.ir_version > onnx.IR_VERSION:
        return f"checker skipped: onnx {onnx.__version__} knows opsets <= {CHECKER_MAX_OPSET}"
    props = {p.key: p.value for p in model.metadata_props}
    if props.get("pipemesh.shapes_only") == "1":
        onnx.checker.check_model(external_weights_as_inputs(model))
        return "checker ok (weights as inputs: data file intentionally absent)"
    onnx.checker.check_model(path)  # also verifies external data files are there
    return "checker ok"


# ----------------------------------------------------------------------------------------

def config_from_args(args):
    cfg = PRESETS[args.preset]
    over = {"n_layer": args.layers, "n_embd": args.embd, "n_head": args.heads,
            "n_kv_head": getattr(args, "kv_heads", None),
            "vocab_size": args.vocab, "n_ctx": args.ctx}
    return dataclasses.replace(cfg, **{k: v for k, v in over.items() if v is not None})


def add_config_args(ap):
    """Config flags shared with export_torch_gpt2.py."""
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--embd", type=int, help="override the embedding width")
    ap.add_argument("--heads", type=int, help="override the head count")
    ap.add_argument("--kv-heads", type=int,
                    help="key/value heads (grouped-query attention; default: --heads)")
    ap.add_argument("--vocab", type=int, help="override the vocabulary size")
    ap.add_argument("--ctx", type=int, help="override the context length (wpe rows)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_args(ap)
    ap.add_argument("--opset", type=int, default=17, help=f"{MIN_OPSET}..{MAX_OPSET}")
    w = ap.add_mutually_exclusive_group()
    w.add_argument("--external-data", action="store_true",
                   help="weights in OUTPUT.data beside the model (required above 2 GB)")
    w.add_argument("--shapes-only", action="store_true",
                   help="declare weights external in a file that is never written (tiny model "
                        "file for compiling/simulating; cannot be run)")
    ap.add_argument("--with-loss", action="store_true",
                    help="add input `labels` and output `loss` (mean causal-LM cross-entropy)")
    ap.add_argument("--loss-only", action="store_true", help="with --with-loss: drop the logits output")
    ap.add_argument("--shift-labels", action="store_true",
                    help="HF convention: labels = input_ids, shifted in the graph (default: "
                         "labels are already the next tokens, as PipeMesh's data loader gives them)")
    ap.add_argument("--decompose-layernorm", action="store_true",
                    help="write the ReduceMean/Sub/Pow/... chain even where LayerNormalization exists")
    ap.add_argument("--causal-mask", choices=["constant", "computed"], default="constant",
                    help="constant: sliced [1,1,ctx,ctx] tril initializer (HF style); "
                         "computed: from Range/Less/Not (no ctx^2 bytes in the file)")
    ap.add_argument("--sliding-window", type=int, default=0, metavar="W",
                    help="each position attends to itself and the W - 1 before it (0: all "
                         "before it)")
    ap.add_argument("--save-reference", metavar="NPZ",
                    help="also save NumPy reference logits (and loss) on the fixed reference batch")
    args = ap.parse_args(argv)
    if args.loss_only and not args.with_loss:
        ap.error("--loss-only needs --with-loss")
    cfg = config_from_args(args)
    try:
        cfg.validate()
    except ValueError as e:
        ap.error(str(e))

    weights = "external" if args.external_data else "shapes-only" if args.shapes_only else "inline"
    external_path = None
    if weights == "external":
        external_path = args.output + ".data"
    elif weights == "shapes-only":
        # A distinct name, so it can never be mistaken for (or shadow) a real data file.
        external_path = args.output + ".shapes-only.data"
    try:
        model = build_model(cfg, seed=args.seed, opset=args.opset, with_loss=args.with_loss,
                            keep_logits=not args.loss_only, weights=weights,
                            external_path=external_path,
                            decompose_layernorm=args.decompose_layernorm,
                            causal_mask=args.causal_mask, shift_labels=args.shift_labels,
                            sliding_window=args.sliding_window)
    except ValueError as e:
        ap.error(str(e))
    onnx.save(model, args.output)
    print(f"{args.output}: {cfg} params={num_params(cfg):,} opset={args.opset} "
          f"nodes={len(model.graph.node)} weights={weights}", file=sys.stderr)

    if args.save_reference:
        if weights == "shapes-only":
            ap.error("--save-reference needs real weights")
        wts = dict(init_weights(cfg, args.seed))
        batch = reference_batch(cfg, args.seed)
        logits, loss = numpy_forward(cfg, wts, batch["input_ids"],
                                     labels=batch["labels"] if args.with_loss else None,
                                     shift_labels=args.shift_labels,
                                     sliding_window=args.sliding_window)
        ref = {"input_ids": batch["input_ids"], "logits": logits}
        if args.with_loss:
            ref["labels"], ref["loss"] = batch["labels"], np.asarray(loss, np.float32)
        save_npz(args.save_reference, ref)


if __name__ == "__main__":
    main()
