#!/usr/bin/python3
"""A small NumPy interpreter for the ONNX ops GPT-2 exports use.

Debian's onnx 1.12 has no onnx.reference and onnxruntime is not a dependency, yet the
fixtures must be checked end to end: this evaluator runs a model on given inputs so
make_fixtures.py can compare it with PyTorch's (or gen_gpt2.numpy_forward's) own outputs.
It is a test oracle, written for clarity over speed, and it follows the ONNX spec per
opset for the ops whose signatures changed (ReduceMean/ReduceSum, Split, Unsqueeze/Squeeze,
Softmax).

    onnx_eval.py model.onnx reference.npz    # runs the model on the npz's inputs, compares
"""
import math
import sys

import numpy as np
import onnx
from onnx import mapping, numpy_helper


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _coerce_2d_softmax(x, axis, fn):
    # Opsets < 13 flatten to [prod(dims[:axis]), prod(dims[axis:])] before normalizing.
    axis = axis % x.ndim
    shp = x.shape
    y = fn(x.reshape(int(np.prod(shp[:axis], dtype=np.int64)), -1), -1)
    return y.reshape(shp)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _log_softmax(x, axis):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def _nll(logp, target, weight, reduction, ignore_index):
    # logp [N, C, d1...], target [N, d1...]
    c_axis_last = np.moveaxis(logp, 1, -1)
    tgt = target.copy()
    valid = np.ones(tgt.shape, bool) if ignore_index is None else tgt != ignore_index
    tgt[~valid] = 0
    picked = np.take_along_axis(c_axis_last, tgt[..., None], -1)[..., 0]
    w = (weight[tgt] if weight is not None else np.ones(tgt.shape, logp.dtype)) * valid
    loss = -picked * w
    if reduction == "none":
        return loss.astype(logp.dtype)
    if reduction == "sum":
        return np.asarray(loss.sum(), logp.dtype)
    return np.asarray(loss.sum() / w.sum(), logp.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attention(ins, a):
    """ONNX Attention (opset 23-25) from its spec, no past key/value: softmax(cap(scale q k^T)
    + bias) v, the bias -inf where is_causal (key j after query i, top-left aligned) or the
    window sizes hide a key, plus the mask (bool: 0 / -inf); key/value heads repeated for
    the query heads they serve (head h reads h // (Hq / Hkv)); a row with no visible key
    gives 0. Returns Y and the present key and value (K and V)."""
    q, k, v = (t.astype(np.float64) for t in ins[:3])
    mask = ins[3] if len(ins) > 3 else None
    packed = q.ndim == 3
    if packed:  # [B, T, heads * D] -> [B, heads, T, D]
        def heads(t, h):
            return t.reshape(t.shape[0], t.shape[1], h, -1).transpose(0, 2, 1, 3)
        q, k, v = heads(q, a["q_num_heads"]), heads(k, a["kv_num_heads"]), heads(v, a["kv_num_heads"])
    present = (k.astype(ins[0].dtype), v.astype(ins[0].dtype))
    hq, hk, tq, tk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    if hq != hk:
        k, v = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
    s = q @ k.swapaxes(-1, -2) * a.get("scale", 1 / math.sqrt(q.shape[-1]))
    cap = a.get("softcap", 0.0)
    if cap > 0:
        s = cap * np.tanh(s / cap)
    i, j = np.arange(tq)[:, None], np.arange(tk)[None, :]
    hidden = np.zeros((tq, tk), bool)
    if a.get("is_causal", 0):
        hidden |= j > i
    if a.get("left_window_size", -1) >= 0:
        hidden |= i - j > a["left_window_size"]
    if a.get("right_window_size", -1) >= 0:
        hidden |= j - i > a["right_window_size"]
    bias = np.where(hidden, -np.inf, 0.0)
    if mask is not None:
        bias = bias + (np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask)
    s = s + bias
    peak = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(peak), peak, 0))
    p = e / np.maximum(e.sum(-1, keepdims=True), 1e-300)
    y = p @ v
    if packed:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], tq, -1)
    return [y.astype(ins[0].dtype), *present]


def _rotary(ins, a):
    """ONNX RotaryEmbedding (opset 23) from its spec: in each head's first r dims (all by
    default), the pairs (x1, x2) (the two halves, or even and odd dims when interleaved)
    become (cos x1 - sin x2, sin x1 + cos x2), with cos and sin [B, S, r / 2] or picked
    from [positions, r / 2] caches by position_ids."""
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    shape = x.shape
    if x.ndim == 3:  # [B, S, heads * D] -> [B, S, heads, D]
        x = x.reshape(shape[0], shape[1], a["num_heads"], -1)
    else:  # [B, heads, S, D] -> [B, S, heads, D]
        x = x.transpose(0, 2, 1, 3)
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    r = a.get("rotary_embedding_dim", 0) or x.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    if a.get("interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :r // 2], rot[..., r // 2:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if a.get("interleaved", 0):
        rot = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rot, rest], axis=-1)
    y = y.reshape(shape) if len(shape) == 3 else y.transpose(0, 2, 1, 3)
    return y.astype(ins[0].dtype)


class Evaluator:
    def __init__(self, model):
        if isinstance(model, str):
            model = onnx.load(model)  # pulls external data in, too
        self.model = model
        self.opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        self.inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def run(self, feeds, outputs=None):
        env = dict(self.inits)
        env.update(feeds)
        env[""] = None  # omitted optional inputs
        for node in self.model.graph.node:
            ins = [env[i] for i in node.input]
            try:
                # finfo.min + finfo.min overflows to -inf in masked scores, as in PyTorch.
                with np.errstate(over="ignore"):
                    outs = self._op(node, ins)
            except Exception as e:
                raise RuntimeError(f"{node.op_type} node {node.name!r}: {e}") from e
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, val in zip(node.output, outs):
                if name:
                    env[name] = val
        names = outputs or [o.name for o in self.model.graph.output]
        return {n: env[n] for n in names}

    def _axes(self, a, ins, idx):
        """Axes come from attribute `axes` in older opsets and from input idx in newer ones."""
        if len(ins) > idx and ins[idx] is not None:
            return [int(v) for v in np.atleast_1d(ins[idx])]
        return a.get("axes")

    def _op(self, node, ins):  # noqa: C901 - one flat dispatch reads best here
        t, a = node.op_type, _attrs(node)
        x = ins[0] if ins else None
        if t == "Constant":
            if "value" in a:
                return numpy_helper.to_array(a["value"])
            for k, dt in (("value_float", np.float32), ("value_floats", np.float32),
                          ("value_int", np.int64), ("value_ints", np.int64)):
                if k in a:
                    return np.asarray(a[k], dt)
            raise NotImplementedError(f"Constant with {list(a)}")
        if t == "Identity":
            return x
        if t == "Cast":
            return x.astype(mapping.TENSOR_TYPE_TO_NP_TYPE[a["to"]])
        if t == "CastLike":
            return x.astype(ins[1].dtype)
        if t == "Shape":
            s = np.asarray(x.shape, np.int64)
            return s[a.get("start", 0):a.get("end", None)]
        if t == "Gather":
            return np.take(x, ins[1], axis=a.get("axis", 0))
        if t == "Unsqueeze":
            y = x
            axes = sorted(ax % (x.ndim + len(self._axes(a, ins, 1))) for ax in self._axes(a, ins, 1))
            for ax in axes:
                y = np.expand_dims(y, ax)
            return y
        if t == "Squeeze":
            axes = self._axes(a, ins, 1)
            return np.squeeze(x, axis=tuple(axes) if axes is not None else None)
        if t == "Concat":
            return np.concatenate(ins, axis=a["axis"])
        if t == "Reshape":
            shape = [int(v) for v in ins[1]]
            if not a.get("allowzero", 0):
                shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
            return x.reshape(shape)
        if t == "Slice":
            starts, ends = ins[1], ins[2]
            axes = ins[3] if len(ins) > 3 and ins[3] is not None else range(len(starts))
            steps = ins[4] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
            sl = [slice(None)] * x.ndim
            for s, e, ax, st in zip(starts, ends, axes, steps):
                # Python slicing clamps exactly like the spec (INT64_MAX / INT64_MIN included).
                sl[int(ax)] = slice(int(s), int(e), int(st))
            return x[tuple(sl)]
        if t == "Range":
            return np.arange(ins[0], ins[1], ins[2]).astype(ins[0].dtype)
        if t == "ConstantOfShape":
            v = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
            return np.full([int(d) for d in x], v.reshape(-1)[0], v.dtype)
        if t == "Expand":
            return x * np.ones([int(d) for d in ins[1]], x.dtype)
        if t == "Tile":
            return np.tile(x, [int(r) for r in ins[1]])
        if t == "Trilu":
            k = int(ins[1]) if len(ins) > 1 and ins[1] is not None else 0
            return np.triu(x, k) if a.get("upper", 1) else np.tril(x, k)
        binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": None,
                  "Pow": None, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
                  "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
                  "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}
        if t in ("Max", "Min"):  # variadic
            fn = np.maximum if t == "Max" else np.minimum
            r = ins[0]
            for y in ins[1:]:
                r = fn(r, y)
            return r
        if t in binary:
            y = ins[1]
            if t == "Div":
                return (x // y) if np.issubdtype(x.dtype, np.integer) else (x / y).astype(x.dtype)
            if t == "Pow":
                return np.power(x, y).astype(x.dtype)
            r = binary[t](x, y)
            return r if r.dtype == bool else r.astype(np.result_type(x, y))
        unary = {"Not": np.logical_not, "Sqrt": np.sqrt, "Tanh": np.tanh, "Neg": np.negative,
                 "Exp": np.exp, "Log": np.log, "Abs": np.abs, "Reciprocal": np.reciprocal,
                 "Sigmoid": lambda v: 1 / (1 + np.exp(-v)), "Relu": lambda v: np.maximum(v, 0),
                 "Cos": np.cos, "Sin": np.sin,
                 "Softplus": lambda v: np.logaddexp(0, v)}
        if t in unary:
            return unary[t](x).astype(x.dtype)
        if t == "IsNaN":
            return np.isnan(x)
        if t == "CumSum":
            axis = int(ins[1])
            y = np.flip(x, axis) if a.get("reverse", 0) else x
            s = np.cumsum(y, axis=axis, dtype=x.dtype)
            if a.get("exclusive", 0):
                s = s - y
            return np.flip(s, axis) if a.get("reverse", 0) else s
        if t == "GatherND":
            b, idx = a.get("batch_dims", 0), ins[1]
            k = idx.shape[-1]
            lead = int(np.prod(x.shape[:b], dtype=np.int64))
            xs = x.reshape((lead,) + x.shape[b:])
            ids = idx.reshape((lead, -1, k))
            out = np.stack([np.stack([xs[i][tuple(t)] for t in ids[i]]) for i in range(lead)])
            return out.reshape(idx.shape[:-1] + x.shape[b + k:])
        if t == "ScatterND":
            if a.get("reduction", b"none") not in (b"none", "none"):
                raise NotImplementedError("ScatterND with a reduction")
            idx, upd = np.asarray(ins[1]), ins[2]
            out = np.array(x, copy=True)
            for t_, u in zip(idx.reshape(-1, idx.shape[-1]),
                             upd.reshape((-1,) + upd.shape[idx.ndim - 1:])):
                out[tuple(t_)] = u
            return out
        if t == "SplitToSequence":
            axis = a.get("axis", 0)
            if len(ins) < 2 or ins[1] is None:
                parts = np.split(x, x.shape[axis], axis=axis)
                return [[np.squeeze(p, axis) for p in parts] if not a.get("keepdims", 1)
                        else parts]
            split = np.asarray(ins[1])
            sizes = ([int(split)] * -(-x.shape[axis] // int(split)) if split.ndim == 0
                     else [int(v) for v in split])
            return [np.split(x, np.cumsum(sizes)[:-1], axis=axis)]
        if t == "SequenceAt":
            return x[int(ins[1])]
        if t == "Erf":
            return _erf(x).astype(x.dtype)
        if t == "Gelu":  # opset 20
            if a.get("approximate", b"none") in (b"tanh", "tanh"):
                y = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
            else:
                y = 0.5 * x * (1 + _erf(x / np.sqrt(2)))
            return y.astype(x.dtype)
        if t == "Where":
            return np.where(x, ins[1], ins[2])
        if t in ("ReduceMean", "ReduceSum", "ReduceMax"):
            # axes: attribute before opset 18 (13 for ReduceSum), input from then on
            axes = self._axes(a, ins, 1)
            if axes is None and a.get("noop_with_empty_axes", 0):
                return x
            fn = {"ReduceMean": np.mean, "ReduceSum": np.sum, "ReduceMax": np.max}[t]
            return fn(x, axis=tuple(axes) if axes else None,
                      keepdims=bool(a.get("keepdims", 1))).astype(x.dtype)
        if t == "LayerNormalization":
            axis = a.get("axis", -1) % x.ndim
            red = tuple(range(axis, x.ndim))
            mu = x.mean(red, keepdims=True)
            var = ((x - mu) ** 2).mean(red, keepdims=True)
            y = (x - mu) / np.sqrt(var + np.float32(a.get("epsilon", 1e-5))) * ins[1]
            if len(ins) > 2 and ins[2] is not None:
                y = y + ins[2]
            return y.astype(x.dtype)
        if t == "MatMul":
            return np.matmul(x, ins[1])
        if t == "Gemm":
            A = x.T if a.get("transA", 0) else x
            B = ins[1].T if a.get("transB", 0) else ins[1]
            y = np.float32(a.get("alpha", 1.0)) * (A @ B)
            if len(ins) > 2 and ins[2] is not None:
                y = y + np.float32(a.get("beta", 1.0)) * ins[2]
            return y.astype(x.dtype)
        if t == "Split":
            axis = a.get("axis", 0)
            sizes = ins[1] if len(ins) > 1 and ins[1] is not None else a.get("split")
            if sizes is None:
                n = a.get("num_outputs", len(node.output))
                chunk = -(-x.shape[axis] // n)  # opset 18: last chunk may be smaller
                sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(n)]
            return np.split(x, np.cumsum([int(s) for s in sizes])[:-1], axis=axis)
        if t == "Transpose":
            return np.transpose(x, a.get("perm"))
        if t in ("Softmax", "LogSoftmax"):
            fn = _softmax if t == "Softmax" else _log_softmax
            axis = a.get("axis", -1 if self.opset >= 13 else 1)
            if self.opset < 13:
                return _coerce_2d_softmax(x, axis, fn).astype(x.dtype)
            return fn(x, axis).astype(x.dtype)
        if t == "Dropout":
            return [x, np.ones(x.shape, bool)]  # inference: identity
        if t == "SoftmaxCrossEntropyLoss":
            logp = _log_softmax(x.astype(np.float64), 1)
            w = ins[2] if len(ins) > 2 else None
            loss = _nll(logp, ins[1], w, a.get("reduction", "mean"), a.get("ignore_index"))
            return [loss.astype(x.dtype), logp.astype(x.dtype)]
        if t == "NegativeLogLikelihoodLoss":
            w = ins[2] if len(ins) > 2 else None
            return _nll(x, ins[1], w, a.get("reduction", "mean"), a.get("ignore_index"))
        if t == "RMSNormalization":  # opset 23
            axis = a.get("axis", -1) % x.ndim
            ms = np.mean(x.astype(np.float64) ** 2, axis=tuple(range(axis, x.ndim)), keepdims=True)
            return (x / np.sqrt(ms + a.get("epsilon", 1e-5)) * ins[1]).astype(x.dtype)
        if t == "RotaryEmbedding":  # opset 23
            return _rotary(ins, a)
        if t == "Attention":  # opset 23, without a key/value cache
            return _attention(ins, a)
        raise NotImplementedError(f"op {t} (opset {self.opset}) not in onnx_eval")


def compare(model_path, ref_path, atol=1e-4):
    """Runs the model on the reference inputs; returns {output: max abs error}."""
    ref = np.load(ref_path)
    ev = Evaluator(model_path)
    feeds = {i.name: ref[i.name] for i in ev.model.graph.input if i.name not in ev.inits}
    got = ev.run(feeds)
    errs = {}
    for name, val in got.items():
        if name in ref:
            errs[name] = float(np.max(np.abs(val.astype(np.float64) - ref[name])))
    return errs


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    errs = compare(sys.argv[1], sys.argv[2])
    for k, v in errs.items():
        print(f"{k}: max abs err {v:.3g}")
    sys.exit(0 if errs and max(errs.values()) < 1e-4 else 1)
