#!/usr/bin/python3
"""Checks pmesh-interp's op semantics against NumPy, independently of any fixture.

Every case is a small hand-written pmesh module, random inputs, and the expected results
written with NumPy straight from PMeshOps.td's descriptions (broadcasting, attention's
end-aligned causal mask and additive mask, cross_entropy's ignore_index and reductions,
layer_norm over trailing dims, matmul transposes and batch broadcasting, ...), and for the
gradient ops of PMeshTrainOps.td from their summaries (layer_norm_grad incl. a broadcast
scale, both gelu_grad forms, softmax/log_softmax_grad, attention_grad with causal + mask and
Tq < Tk, embedding_grad with repeated ids, cross_entropy_grad in every reduction,
slice_grad). A few cases check that bad inputs and unknown ops are errors (non-zero exit, a
message naming them), one reads parameters from a small ONNX file (inline, typed and
external data), and one checks the gradient-oracle flags (pmesh.accumulate_grad and
--grads-dir, --param-override, --params-dir, --perturb-param, --fd-probes, --results-f64,
--exact-float-casts) and their errors.

    check_interp_ops.py --interp build/bin/pmesh-interp [--only SUBSTRING] [-v]

Run with /usr/bin/python3 (Debian's numpy and onnx).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

RNG = np.random.default_rng(7)
MIN32 = float(np.finfo(np.float32).min)

MLIR_TYPES = {np.float32: "f32", np.int64: "i64", np.int32: "i32", np.bool_: "i1"}


def ttype(shape, dtype=np.float32):
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{MLIR_TYPES[np.dtype(dtype).type]}>"


def t_of(a):
    return ttype(a.shape, a.dtype)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def module(inputs, outputs, body, attrs=""):
    """A module with @forward(inputs) -> outputs; `body` uses %NAME for inputs."""
    args = ", ".join(f'%{n}: {t_of(a)} {{pmesh.name = "{n}"}}' for n, a in inputs.items())
    res = ", ".join(f'{t} {{pmesh.name = "{n}"}}' for n, t in outputs)
    head = f"module attributes {{{attrs}}} {{\n" if attrs else "module {\n"
    return head + f"func.func @forward({args}) -> ({res}) {{\n{body}\n}}\n}}\n"


def f64(a):
    return np.asarray(a, np.float64)


# --- NumPy references ---------------------------------------------------------------

def np_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def attention_hidden(tq, tk, causal, window=0):
    """[tq, tk] keys hidden from each query: query i sits at key position i + (tk - tq);
    causal hides later keys, a sliding window also those `window` or more before it."""
    j, p = np.arange(tk)[None, :], np.arange(tq)[:, None] + (tk - tq)
    hidden = (j > p) if causal else np.zeros((tq, tk), bool)
    if window > 0:
        hidden = hidden | (j <= p - window)
    return hidden


def np_attention(q, k, v, mask, scale, causal, window=0, softcap=0.0):
    s = scale * f64(q) @ np.swapaxes(f64(k), -1, -2)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        s = s + f64(mask)
    tq, tk = s.shape[-2:]
    if causal:
        s = np.where(attention_hidden(tq, tk, causal, window), -np.inf, s)
    return np_softmax(s, -1) @ f64(v)


def np_cross_entropy(logits, targets, ignore_index, reduction):
    x = f64(logits)
    lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    valid = targets != ignore_index
    safe = np.where(valid, targets, 0)
    picked = np.take_along_axis(x, safe[..., None], -1)[..., 0]
    loss = np.where(valid, lse - picked, 0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    with np.errstate(invalid="ignore"):
        return np.float64(loss.sum() / valid.sum())


def np_layer_norm(x, scale, bias, eps, axis):
    x = f64(x)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps) * f64(scale)
    return y + f64(bias) if bias is not None else y


erf = np.vectorize(math.erf, otypes=[np.float64])


# --- cases ----------------------------------------------------------------------------
# Each: (name, inputs, outputs [(name, type)], body, expected {name: array}) plus options.

CASES = []


def case(name, inputs, outputs, body, expected, **kw):
    CASES.append(dict(name=name, inputs=inputs, outputs=outputs, body=body,
                      expected=expected, **kw))


def elementwise_cases():
    x, y = rand(2, 1, 3), rand(4, 1)
    base = np.abs(x) + 0.5
    out = ttype((2, 4, 3))
    case("binary-broadcast", {"x": x, "y": y, "base": base},
         [("add", out), ("sub", out), ("mul", out), ("div", out), ("max", out), ("pow", out)],
         f"""
  %a = pmesh.add %x, %y : ({t_of(x)}, {t_of(y)}) -> {out}
  %s = pmesh.sub %x, %y : ({t_of(x)}, {t_of(y)}) -> {out}
  %m = pmesh.mul %x, %y : ({t_of(x)}, {t_of(y)}) -> {out}
  %d = pmesh.div %x, %y : ({t_of(x)}, {t_of(y)}) -> {out}
  %M = pmesh.max %x, %y : ({t_of(x)}, {t_of(y)}) -> {out}
  %p = pmesh.pow %base, %y : ({t_of(base)}, {t_of(y)}) -> {out}
  return %a, %s, %m, %d, %M, %p : {out}, {out}, {out}, {out}, {out}, {out}""",
         {"add": f64(x) + y, "sub": f64(x) - y, "mul": f64(x) * y, "div": f64(x) / y,
          "max": np.maximum(f64(x), y), "pow": f64(base) ** f64(y)})

    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    y = np.array([2, 5, 3], np.float32)
    b, f = ttype((2, 3), np.bool_), ttype((2, 3))
    case("compare-where-logic", {"x": x, "y": y}, [("eq", b), ("lt", b), ("sel", f)], f"""
  %eq = pmesh.equal %x, %y : ({t_of(x)}, {t_of(y)}) -> {b}
  %lt = pmesh.less %x, %y : ({t_of(x)}, {t_of(y)}) -> {b}
  %ne = pmesh.not %eq : {b}
  %both = pmesh.and %lt, %ne : ({b}, {b}) -> {b}
  %sel = pmesh.where %both, %x, %y : ({b}, {t_of(x)}, {t_of(y)}) -> {f}
  return %eq, %lt, %sel : {b}, {b}, {f}""",
         {"eq": x == y, "lt": x < y, "sel": np.where((x < y) & ~(x == y), x, y)})

    x = rand(3, 4) * 3
    x[0, 0], x[0, 1] = 0.0, -2.7
    pos = np.abs(x) + 0.1
    out = t_of(x)
    case("unary", {"x": x, "pos": pos},
         [(n, out) for n in ("neg", "sqrt", "tanh", "erf", "exp", "log", "sigmoid")], f"""
  %n = pmesh.neg %x : {out}
  %s = pmesh.sqrt %pos : {out}
  %t = pmesh.tanh %x : {out}
  %e = pmesh.erf %x : {out}
  %x2 = pmesh.exp %x : {out}
  %l = pmesh.log %pos : {out}
  %g = pmesh.sigmoid %x : {out}
  return %n, %s, %t, %e, %x2, %l, %g : {out}, {out}, {out}, {out}, {out}, {out}, {out}""",
         {"neg": -f64(x), "sqrt": np.sqrt(f64(pos)), "tanh": np.tanh(f64(x)), "erf": erf(x),
          "exp": np.exp(f64(x)), "log": np.log(f64(pos)), "sigmoid": 1 / (1 + np.exp(-f64(x)))})

    i = np.array([[-7, 7, 9], [100, -3, 0]], np.int64)
    j = np.array([2, -2, 4], np.int64)
    o = t_of(i)
    case("int-arith", {"i": i, "j": j}, [("add", o), ("div", o), ("neg", o), ("pow", o)], f"""
  %a = pmesh.add %i, %j : ({o}, {t_of(j)}) -> {o}
  %d = pmesh.div %i, %j : ({o}, {t_of(j)}) -> {o}
  %n = pmesh.neg %i : {o}
  %two = pmesh.constant dense<3> : tensor<i64>
  %p = pmesh.pow %i, %two : ({o}, tensor<i64>) -> {o}
  return %a, %d, %n, %p : {o}, {o}, {o}, {o}""",
         # integer division truncates toward zero
         {"add": i + j, "div": np.trunc(i / j).astype(np.int64), "neg": -i, "pow": i ** 3})

    x = np.array([[-2.7, -0.5, 0.0], [0.5, 2.7, 1e9]], np.float32)
    n = np.array([[0, 1, -1], [2**31 + 5, 7, -(2**31) - 1]], np.int64)
    case("cast", {"x": x, "n": n},
         [("f2i", ttype((2, 3), np.int64)), ("f2b", ttype((2, 3), np.bool_)),
          ("i2f", ttype((2, 3))), ("i2i32", ttype((2, 3), np.int32)),
          ("b2f", ttype((2, 3)))], f"""
  %fi = pmesh.cast %x : {t_of(x)} -> {ttype((2, 3), np.int64)}
  %fb = pmesh.cast %x : {t_of(x)} -> {ttype((2, 3), np.bool_)}
  %if = pmesh.cast %n : {t_of(n)} -> {ttype((2, 3))}
  %ii = pmesh.cast %n : {t_of(n)} -> {ttype((2, 3), np.int32)}
  %nb = pmesh.cast %n : {t_of(n)} -> {ttype((2, 3), np.bool_)}
  %bf = pmesh.cast %nb : {ttype((2, 3), np.bool_)} -> {ttype((2, 3))}
  return %fi, %fb, %if, %ii, %bf : {ttype((2, 3), np.int64)}, {ttype((2, 3), np.bool_)}, {ttype((2, 3))}, {ttype((2, 3), np.int32)}, {ttype((2, 3))}""",
         {"f2i": np.trunc(f64(x)).astype(np.int64), "f2b": x != 0,
          "i2f": n.astype(np.float32), "i2i32": n.astype(np.int32), "b2f": (n != 0) * 1.0})


def reduction_cases():
    x = rand(2, 3, 4)
    case("reduce", {"x": x},
         [("sum02", ttype((3,))), ("mean_last", ttype((2, 3, 1))), ("none", t_of(x))], f"""
  %s = pmesh.reduce_sum %x axes = [0, 2] {{keepdims = false}} : {t_of(x)} -> {ttype((3,))}
  %m = pmesh.reduce_mean %x axes = [-1] : {t_of(x)} -> {ttype((2, 3, 1))}
  %n = pmesh.reduce_sum %x axes = [] : {t_of(x)} -> {t_of(x)}
  return %s, %m, %n : {ttype((3,))}, {ttype((2, 3, 1))}, {t_of(x)}""",
         # an empty axes list reduces nothing (the verifier's shape rule)
         {"sum02": f64(x).sum((0, 2)), "mean_last": f64(x).mean(-1, keepdims=True),
          "none": x})


def nn_cases():
    a, b, bias = rand(2, 3, 4, 5), rand(5, 6), rand(6)
    a2, b2 = rand(5, 3), rand(2, 1, 5, 4)
    a3, b3 = rand(1, 3, 4, 5), rand(2, 1, 6, 5)
    o1, o2, o3 = ttype((2, 3, 4, 6)), ttype((2, 1, 3, 4)), ttype((2, 3, 4, 6))
    case("matmul", {"a": a, "b": b, "bias": bias, "a2": a2, "b2": b2, "a3": a3, "b3": b3},
         [("weight_bias", o1), ("trans_a_2d_lhs", o2), ("trans_b_batch_bcast", o3)], f"""
  %r1 = pmesh.matmul %a, %b bias %bias : ({t_of(a)}, {t_of(b)}, {t_of(bias)}) -> {o1}
  %r2 = pmesh.matmul %a2, %b2 {{transpose_a = true}} : ({t_of(a2)}, {t_of(b2)}) -> {o2}
  %r3 = pmesh.matmul %a3, %b3 {{transpose_b = true}} : ({t_of(a3)}, {t_of(b3)}) -> {o3}
  return %r1, %r2, %r3 : {o1}, {o2}, {o3}""",
         {"weight_bias": f64(a) @ b + bias, "trans_a_2d_lhs": f64(a2).T @ f64(b2),
          "trans_b_batch_bcast": f64(a3) @ np.swapaxes(f64(b3), -1, -2)})

    x, g, beta = rand(2, 3, 8) * 3 + 1, rand(8), rand(8)
    g2 = rand(3, 8)
    case("layer_norm", {"x": x, "g": g, "beta": beta, "g2": g2},
         [("last", t_of(x)), ("two_dims_no_bias", t_of(x))], f"""
  %l = pmesh.layer_norm %x, %g, %beta : ({t_of(x)}, {t_of(g)}, {t_of(beta)}) -> {t_of(x)}
  %t = pmesh.layer_norm %x, %g2 {{axis = 1 : i64, epsilon = 1.0e-03 : f32}} : ({t_of(x)}, {t_of(g2)}) -> {t_of(x)}
  return %l, %t : {t_of(x)}, {t_of(x)}""",
         {"last": np_layer_norm(x, g, beta, float(np.float32(1e-5)), -1),
          "two_dims_no_bias": np_layer_norm(x, g2, None, float(np.float32(1e-3)), 1)})

    x = rand(4, 5) * 3
    c = np.sqrt(2 / np.pi)
    case("gelu", {"x": x}, [("tanh", t_of(x)), ("erf", t_of(x))], f"""
  %t = pmesh.gelu %x {{approximate = "tanh"}} : {t_of(x)}
  %e = pmesh.gelu %x : {t_of(x)}
  return %t, %e : {t_of(x)}, {t_of(x)}""",
         {"tanh": 0.5 * f64(x) * (1 + np.tanh(c * (f64(x) + 0.044715 * f64(x) ** 3))),
          "erf": 0.5 * f64(x) * (1 + erf(f64(x) / np.sqrt(2)))})

    x = rand(2, 3, 4) * 4
    case("softmax", {"x": x}, [("axis1", t_of(x)), ("log_last", t_of(x))], f"""
  %s = pmesh.softmax %x {{axis = 1 : i64}} : {t_of(x)}
  %l = pmesh.log_softmax %x : {t_of(x)}
  return %s, %l : {t_of(x)}, {t_of(x)}""",
         {"axis1": np_softmax(f64(x), 1), "log_last": np.log(np_softmax(f64(x), -1))})

    # Attention: causal with Tq < Tk (end-aligned), a [B,1,1,Tk] padding mask; non-causal
    # with a 2-D [Tq,Tk] mask broadcast over batch and heads; plain causal; a sliding
    # window of 2 keys with Tq < Tk; scores soft-capped at 0.25 before the padding mask.
    q, k, v = rand(2, 2, 3, 4), rand(2, 2, 5, 4), rand(2, 2, 5, 6)
    pad = np.zeros((2, 1, 1, 5), np.float32)
    pad[1, 0, 0, 3] = MIN32
    m2 = rand(3, 5)
    qs, ks, vs = rand(1, 2, 4, 3), rand(1, 2, 4, 3), rand(1, 2, 4, 3)
    o, os_ = ttype((2, 2, 3, 6)), ttype((1, 2, 4, 3))
    case("attention", {"q": q, "k": k, "v": v, "pad": pad, "m2": m2,
                       "qs": qs, "ks": ks, "vs": vs},
         [("causal_padmask", o), ("noncausal_2d_mask", o), ("causal", os_), ("window", o),
          ("softcap", o)], f"""
  %a = pmesh.attention %q, %k, %v mask %pad {{scale = 0.3 : f32}} : ({t_of(q)}, {t_of(k)}, {t_of(v)}, {t_of(pad)}) -> {o}
  %b = pmesh.attention %q, %k, %v mask %m2 {{scale = 0.5 : f32, causal = false}} : ({t_of(q)}, {t_of(k)}, {t_of(v)}, {t_of(m2)}) -> {o}
  %c = pmesh.attention %qs, %ks, %vs {{scale = 0.25 : f32}} : ({t_of(qs)}, {t_of(ks)}, {t_of(vs)}) -> {os_}
  %d = pmesh.attention %q, %k, %v {{scale = 0.5 : f32, window = 2}} : ({t_of(q)}, {t_of(k)}, {t_of(v)}) -> {o}
  %e = pmesh.attention %q, %k, %v mask %pad {{scale = 0.5 : f32, softcap = 0.25 : f32}} : ({t_of(q)}, {t_of(k)}, {t_of(v)}, {t_of(pad)}) -> {o}
  return %a, %b, %c, %d, %e : {o}, {o}, {os_}, {o}, {o}""",
         {"causal_padmask": np_attention(q, k, v, pad, float(np.float32(0.3)), True),
          "noncausal_2d_mask": np_attention(q, k, v, m2, 0.5, False),
          "causal": np_attention(qs, ks, vs, None, 0.25, True),
          "window": np_attention(q, k, v, None, 0.5, True, window=2),
          "softcap": np_attention(q, k, v, pad, 0.5, True, softcap=0.25)})

    table = rand(5, 3)
    ids = np.array([[0, 4, 2], [1, 1, -1]], np.int64)
    ids32 = ids.astype(np.int32)
    o = ttype((2, 3, 3))
    case("embedding", {"table": table, "ids": ids, "ids32": ids32},
         [("e64", o), ("e32", o)], f"""
  %a = pmesh.embedding %table, %ids : ({t_of(table)}, {t_of(ids)}) -> {o}
  %b = pmesh.embedding %table, %ids32 : ({t_of(table)}, {t_of(ids32)}) -> {o}
  return %a, %b : {o}, {o}""",
         # table[ids] as in numpy: -1 is the last row
         {"e64": table[ids], "e32": table[ids]})

    # cross_entropy: the default ignore_index (-100) in every reduction, a custom one, and
    # a batch with every target ignored (mean over nothing: 0/0 = NaN, as in PyTorch).
    lg = rand(2, 3, 5) * 2
    t = np.array([[1, -100, 4], [0, 2, -100]], np.int64)
    t2 = np.array([[1, 2, 4], [0, 2, 3]], np.int64)
    ign = np.full((2, 3), -100, np.int64)
    lt, tt = t_of(lg), t_of(t)
    case("cross_entropy", {"logits": lg, "t": t, "t2": t2, "ign": ign},
         [("mean", "tensor<f32>"), ("sum", "tensor<f32>"), ("none", ttype((2, 3))),
          ("ignore2", "tensor<f32>"), ("all_ignored", "tensor<f32>")], f"""
  %m = pmesh.cross_entropy %logits, %t : ({lt}, {tt}) -> tensor<f32>
  %s = pmesh.cross_entropy %logits, %t {{reduction = "sum"}} : ({lt}, {tt}) -> tensor<f32>
  %n = pmesh.cross_entropy %logits, %t {{reduction = "none"}} : ({lt}, {tt}) -> {ttype((2, 3))}
  %i = pmesh.cross_entropy %logits, %t2 {{ignore_index = 2 : i64}} : ({lt}, {tt}) -> tensor<f32>
  %z = pmesh.cross_entropy %logits, %ign : ({lt}, {tt}) -> tensor<f32>
  return %m, %s, %n, %i, %z : tensor<f32>, tensor<f32>, {ttype((2, 3))}, tensor<f32>, tensor<f32>""",
         {"mean": np_cross_entropy(lg, t, -100, "mean"),
          "sum": np_cross_entropy(lg, t, -100, "sum"),
          "none": np_cross_entropy(lg, t, -100, "none"),
          "ignore2": np_cross_entropy(lg, t2, 2, "mean"),
          "all_ignored": np.float64("nan")})


def shape_cases():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    col = rand(3, 1)
    a, b, c = rand(2, 3), rand(2, 1), rand(2, 2)
    case("shape-ops", {"x": x, "col": col, "a": a, "b": b, "c": c},
         [("reshape", ttype((4, 6))), ("transpose", ttype((4, 2, 3))),
          ("broadcast", ttype((2, 3, 4))), ("split0", ttype((2, 1, 4))),
          ("split1", ttype((2, 2, 4))), ("concat", ttype((2, 6))),
          ("slice", ttype((2, 2, 2)))], f"""
  %r = pmesh.reshape %x : {t_of(x)} -> {ttype((4, 6))}
  %t = pmesh.transpose %x perm = [2, 0, 1] : {t_of(x)} -> {ttype((4, 2, 3))}
  %bc = pmesh.broadcast %col : {t_of(col)} -> {ttype((2, 3, 4))}
  %s:2 = pmesh.split %x axis = 1 sizes = [1, 2] : {t_of(x)} -> {ttype((2, 1, 4))}, {ttype((2, 2, 4))}
  %cc = pmesh.concat %a, %b, %c axis = -1 : ({t_of(a)}, {t_of(b)}, {t_of(c)}) -> {ttype((2, 6))}
  %l = pmesh.slice %x[[0, 1, 0] : [2, 3, 4] : [1, 1, 3]] : {t_of(x)} -> {ttype((2, 2, 2))}
  return %r, %t, %bc, %s#0, %s#1, %cc, %l : {ttype((4, 6))}, {ttype((4, 2, 3))}, {ttype((2, 3, 4))}, {ttype((2, 1, 4))}, {ttype((2, 2, 4))}, {ttype((2, 6))}, {ttype((2, 2, 2))}""",
         {"reshape": x.reshape(4, 6), "transpose": x.transpose(2, 0, 1),
          "broadcast": np.broadcast_to(col, (2, 3, 4)), "split0": x[:, :1], "split1": x[:, 1:],
          "concat": np.concatenate([a, b, c], -1), "slice": x[0:2, 1:3, 0:4:3]})

    x = rand(2, 3)
    o = t_of(x)
    case("constants", {"x": x}, [("y", o), ("mask", ttype((2, 3), np.bool_))], f"""
  %c = pmesh.constant dense<[[1.5, -2.0, 0.25], [3.0, 0.0, -1.0]]> : {o}
  %h = pmesh.constant dense<0.5> : tensor<f32>
  %a = pmesh.add %x, %c : ({o}, {o}) -> {o}
  %y = pmesh.mul %a, %h : ({o}, tensor<f32>) -> {o}
  %m = pmesh.constant dense<[[true, false, true], [false, false, true]]> : {ttype((2, 3), np.bool_)}
  return %y, %m : {o}, {ttype((2, 3), np.bool_)}""",
         {"y": (f64(x) + [[1.5, -2.0, 0.25], [3.0, 0.0, -1.0]]) * 0.5,
          "mask": np.array([[1, 0, 1], [0, 0, 1]], bool)})


def sum_to(a, shape):
    """Sums `a` down to `shape` (the reverse of numpy broadcasting)."""
    a = np.asarray(a)
    lead = a.ndim - len(shape)
    a = a.sum(tuple(range(lead))) if lead else a
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and a.shape[d] != 1)
    return a.sum(axes, keepdims=True) if axes else a


def np_softmax_masked(s):
    """Softmax over the last axis where -inf entries get probability 0."""
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def grad_cases():
    """The gradient ops of PMeshTrainOps.td against NumPy written from their summaries."""
    dy, x, g = rand(2, 3, 8), rand(2, 3, 8) * 2 + 1, rand(8)
    g2 = rand(3, 1)
    def ln_grad(dy, x, scale, eps, axis):
        dy, x = f64(dy), f64(x)
        axes = tuple(range(axis % x.ndim, x.ndim))
        mean = x.mean(axes, keepdims=True)
        rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axes, keepdims=True) + eps)
        xhat = (x - mean) * rstd
        gg = dy * f64(scale)
        dx = rstd * (gg - gg.mean(axes, keepdims=True)
                     - xhat * (gg * xhat).mean(axes, keepdims=True))
        return dx, sum_to(dy * xhat, scale.shape), sum_to(dy, scale.shape)
    a = ln_grad(dy, x, g, float(np.float32(1e-5)), -1)
    b = ln_grad(dy, x, g2, float(np.float32(1e-3)), 1)
    tx = t_of(x)
    case("layer_norm_grad", {"dy": dy, "x": x, "g": g, "g2": g2},
         [("dx", tx), ("dg", t_of(g)), ("db", t_of(g)),
          ("dx2", tx), ("dg2", t_of(g2)), ("db2", t_of(g2))], f"""
  %dx, %dg, %db = pmesh.layer_norm_grad %dy, %x, %g : ({tx}, {tx}, {t_of(g)}) -> ({tx}, {t_of(g)}, {t_of(g)})
  %dx2, %dg2, %db2 = pmesh.layer_norm_grad %dy, %x, %g2 {{axis = 1 : i64, epsilon = 1.0e-03 : f32}} : ({tx}, {tx}, {t_of(g2)}) -> ({tx}, {t_of(g2)}, {t_of(g2)})
  return %dx, %dg, %db, %dx2, %dg2, %db2 : {tx}, {t_of(g)}, {t_of(g)}, {tx}, {t_of(g2)}, {t_of(g2)}""",
         {"dx": a[0], "dg": a[1], "db": a[2], "dx2": b[0], "dg2": b[1], "db2": b[2]})

    dy, x = rand(4, 5), rand(4, 5) * 3
    c = np.sqrt(2 / np.pi)
    u = c * (f64(x) + 0.044715 * f64(x) ** 3)
    tanh_d = 0.5 * (1 + np.tanh(u)) + 0.5 * f64(x) * (1 - np.tanh(u) ** 2) * c * (
        1 + 3 * 0.044715 * f64(x) ** 2)
    erf_d = 0.5 * (1 + erf(f64(x) / np.sqrt(2))) + f64(x) * np.exp(-f64(x) ** 2 / 2) / np.sqrt(
        2 * np.pi)
    case("gelu_grad", {"dy": dy, "x": x}, [("tanh", t_of(x)), ("erf", t_of(x))], f"""
  %t = pmesh.gelu_grad %dy, %x {{approximate = "tanh"}} : {t_of(x)}
  %e = pmesh.gelu_grad %dy, %x : {t_of(x)}
  return %t, %e : {t_of(x)}, {t_of(x)}""",
         {"tanh": f64(dy) * tanh_d, "erf": f64(dy) * erf_d})

    dy, y = rand(2, 3, 4), np_softmax(f64(rand(2, 3, 4)), 1).astype(np.float32)
    ly = np.log(np_softmax(f64(rand(2, 3, 4)), -1)).astype(np.float32)
    case("softmax_grad", {"dy": dy, "y": y, "ly": ly}, [("s", t_of(y)), ("l", t_of(y))], f"""
  %s = pmesh.softmax_grad %dy, %y {{axis = 1 : i64}} : {t_of(y)}
  %l = pmesh.log_softmax_grad %dy, %ly : {t_of(y)}
  return %s, %l : {t_of(y)}, {t_of(y)}""",
         {"s": f64(y) * (f64(dy) - (f64(dy) * y).sum(1, keepdims=True)),
          "l": f64(dy) - np.exp(f64(ly)) * f64(dy).sum(-1, keepdims=True)})

    q, k, v = rand(2, 2, 3, 4), rand(2, 2, 5, 4), rand(2, 2, 5, 6)
    do = rand(2, 2, 3, 6)
    pad = np.zeros((2, 1, 1, 5), np.float32)
    pad[1, 0, 0, 3] = MIN32
    def att_grad(do, q, k, v, mask, scale, causal, window=0, softcap=0.0):
        q, k, v, do = f64(q), f64(k), f64(v), f64(do)
        s = scale * q @ np.swapaxes(k, -1, -2)
        t = np.tanh(s / softcap) if softcap else None
        if softcap:
            s = softcap * t
        s = s + (0 if mask is None else f64(mask))
        tq, tk = s.shape[-2:]
        if causal:
            s = np.where(attention_hidden(tq, tk, causal, window), -np.inf, s)
        p = np_softmax_masked(s)
        dv = np.swapaxes(p, -1, -2) @ do
        dp = do @ np.swapaxes(v, -1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        if softcap:
            ds = ds * (1 - t * t)
        return scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q, dv
    a = att_grad(do, q, k, v, pad, float(np.float32(0.3)), True)
    b = att_grad(do, q, k, v, None, 0.5, False)
    c = att_grad(do, q, k, v, None, 0.5, True, window=2)
    d = att_grad(do, q, k, v, pad, 0.5, True, softcap=0.25)
    sig = f"({t_of(do)}, {t_of(q)}, {t_of(k)}, {t_of(v)}"
    res = f"({t_of(q)}, {t_of(k)}, {t_of(v)})"
    case("attention_grad", {"do": do, "q": q, "k": k, "v": v, "pad": pad},
         [("dq", t_of(q)), ("dk", t_of(k)), ("dv", t_of(v)),
          ("dq2", t_of(q)), ("dk2", t_of(k)), ("dv2", t_of(v)),
          ("dq3", t_of(q)), ("dk3", t_of(k)), ("dv3", t_of(v)),
          ("dq4", t_of(q)), ("dk4", t_of(k)), ("dv4", t_of(v))], f"""
  %dq, %dk, %dv = pmesh.attention_grad %do, %q, %k, %v mask %pad {{scale = 0.3 : f32}} : {sig}, {t_of(pad)}) -> {res}
  %dq2, %dk2, %dv2 = pmesh.attention_grad %do, %q, %k, %v {{scale = 0.5 : f32, causal = false}} : {sig}) -> {res}
  %dq3, %dk3, %dv3 = pmesh.attention_grad %do, %q, %k, %v {{scale = 0.5 : f32, window = 2}} : {sig}) -> {res}
  %dq4, %dk4, %dv4 = pmesh.attention_grad %do, %q, %k, %v mask %pad {{scale = 0.5 : f32, softcap = 0.25 : f32}} : {sig}, {t_of(pad)}) -> {res}
  return %dq, %dk, %dv, %dq2, %dk2, %dv2, %dq3, %dk3, %dv3, %dq4, %dk4, %dv4 : {t_of(q)}, {t_of(k)}, {t_of(v)}, {t_of(q)}, {t_of(k)}, {t_of(v)}, {t_of(q)}, {t_of(k)}, {t_of(v)}, {t_of(q)}, {t_of(k)}, {t_of(v)}""",
         {"dq": a[0], "dk": a[1], "dv": a[2], "dq2": b[0], "dk2": b[1], "dv2": b[2],
          "dq3": c[0], "dk3": c[1], "dv3": c[2], "dq4": d[0], "dk4": d[1], "dv4": d[2]})

    dy = rand(2, 3, 4)
    ids = np.array([[0, 4, 2], [4, 4, -1]], np.int64)
    want = np.zeros((5, 4))
    np.add.at(want, ids % 5, f64(dy))
    case("embedding_grad", {"dy": dy, "ids": ids}, [("dt", ttype((5, 4)))], f"""
  %dt = pmesh.embedding_grad %dy, %ids : ({t_of(dy)}, {t_of(ids)}) -> {ttype((5, 4))}
  return %dt : {ttype((5, 4))}""", {"dt": want})

    # cross_entropy_grad: every reduction (mean divides by the counted targets), the
    # default ignore_index and a custom one.
    lg = rand(2, 3, 5) * 2
    t = np.array([[1, -100, 4], [0, 2, -100]], np.int64)
    t4 = np.array([[1, 3, 4], [0, 2, 4]], np.int64)
    dn, dm = rand(2, 3), np.array(1.7, np.float32)

    def ce_grad(targets, ignore, per_row):
        valid = targets != ignore
        onehot = np.eye(5)[np.where(valid, targets, 0)]
        return (np_softmax(f64(lg), -1) - onehot) * valid[..., None] * per_row

    lt, tt = t_of(lg), t_of(t)
    case("cross_entropy_grad", {"lg": lg, "t": t, "t4": t4, "dn": dn, "dm": dm},
         [("mean", lt), ("sum", lt), ("none", lt), ("ign4", lt)], f"""
  %m = pmesh.cross_entropy_grad %dm, %lg, %t : (tensor<f32>, {lt}, {tt}) -> {lt}
  %s = pmesh.cross_entropy_grad %dm, %lg, %t {{reduction = "sum"}} : (tensor<f32>, {lt}, {tt}) -> {lt}
  %n = pmesh.cross_entropy_grad %dn, %lg, %t {{reduction = "none"}} : ({t_of(dn)}, {lt}, {tt}) -> {lt}
  %i = pmesh.cross_entropy_grad %dm, %lg, %t4 {{ignore_index = 4 : i64}} : (tensor<f32>, {lt}, {tt}) -> {lt}
  return %m, %s, %n, %i : {lt}, {lt}, {lt}, {lt}""",
         {"mean": ce_grad(t, -100, float(dm) / 4), "sum": ce_grad(t, -100, float(dm)),
          "none": ce_grad(t, -100, f64(dn)[..., None]), "ign4": ce_grad(t4, 4, float(dm) / 4)})

    dy = rand(2, 2, 2)
    want = np.zeros((2, 3, 4))
    want[0:2, 1:3, 0:4:3] = dy
    case("slice_grad", {"dy": dy}, [("dx", ttype((2, 3, 4)))], f"""
  %dx = pmesh.slice_grad %dy[[0, 1, 0] : [2, 3, 4] : [1, 1, 3]] : {t_of(dy)} -> {ttype((2, 3, 4))}
  return %dx : {ttype((2, 3, 4))}""", {"dx": want})


def build_cases():
    elementwise_cases()
    reduction_cases()
    nn_cases()
    shape_cases()
    grad_cases()


# --- running ----------------------------------------------------------------------------

def write_inputs(inputs, workdir):
    flags = []
    for name, a in inputs.items():
        path = os.path.join(workdir, name + ".bin")
        if a.dtype == np.bool_:
            a.astype(np.uint8).tofile(path)
        elif a.dtype.kind in "iu":
            a.astype("<i8").tofile(path)
        else:
            a.astype("<f4").tofile(path)
        flags += ["--input", f"{name}={path}"]
    return flags


def run_interp(interp, text, inputs, workdir, extra=(), cwd=None):
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "module.mlir")
    with open(path, "w") as f:
        f.write(text)
    cmd = [interp, path, "--output-dir", os.path.join(workdir, "out")]
    cmd += write_inputs(inputs, workdir) + list(extra)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)


def read_output(workdir, name, shape, mlir_type):
    path = os.path.join(workdir, "out", name + ".bin")
    if mlir_type.endswith("f32>"):
        return np.fromfile(path, "<f4").reshape(shape)
    return np.fromfile(path, "<i8").reshape(shape)


def check_case(args, c, root):
    workdir = os.path.join(root, c["name"])
    text = module(c["inputs"], c["outputs"], c["body"])
    run = run_interp(args.interp, text, c["inputs"], workdir)
    if run.returncode != 0:
        return [f"pmesh-interp failed: {run.stderr.strip()}"]
    problems = []
    for name, mlir_type in c["outputs"]:
        want = np.asarray(c["expected"][name])
        got = read_output(workdir, name, want.shape, mlir_type)
        if want.dtype.kind in "biu":
            ok = np.array_equal(got, want.astype(np.int64))
            err = "exact" if ok else "differs"
        else:
            ok = np.allclose(got, want, rtol=1e-6, atol=1e-7, equal_nan=True)
            diff = np.abs(got.astype(np.float64) - want)
            err = f"{np.nanmax(diff) if np.isfinite(diff).any() else 0.0:.1e}"
        if args.verbose or not ok:
            print(f"    {name}: {err}" + ("" if ok else f"\n      got  {got.ravel()[:8]}"
                                          f"\n      want {want.ravel()[:8]}"))
        if not ok:
            problems.append(name)
    return problems


def error_cases(args, root):
    """Bad inputs and unsupported ops: non-zero exit and a message naming the problem."""
    x = rand(2, 3)
    ok_body = f"  %y = pmesh.neg %x : {t_of(x)}\n  return %y : {t_of(x)}"
    simple = module({"x": x}, [("y", t_of(x))], ok_body)
    table, bad_ids = rand(4, 2), np.array([[0, 4]], np.int64)
    logits, bad_t = rand(2, 3), np.array([0, 3], np.int64)
    call = (f"module {{\n func.func private @h(%a: {t_of(x)}) -> {t_of(x)} {{\n"
            f"  return %a : {t_of(x)}\n }}\n"
            f" func.func @forward(%x: {t_of(x)} {{pmesh.name = \"x\"}}) -> {t_of(x)} {{\n"
            f"  %y = func.call @h(%x) : ({t_of(x)}) -> {t_of(x)}\n  return %y : {t_of(x)}\n }}\n}}\n")
    params = ('module attributes {pmesh.source = "no-such-file.onnx"} {\n'
              '  pmesh.param @w : tensor<2x3xf32> {source = "w"}\n'
              f'  func.func @forward(%x: {t_of(x)} {{pmesh.name = "x"}}) -> {t_of(x)} {{\n'
              f'    %w = pmesh.get_param @w : {t_of(x)}\n'
              f'    %y = pmesh.add %x, %w : ({t_of(x)}, {t_of(x)}) -> {t_of(x)}\n'
              f'    return %y : {t_of(x)}\n  }}\n}}\n')
    cases = [
        ("unsupported-op", call, {"x": x}, [], "'func.call' op is not supported by pmesh-interp"),
        ("missing-input", simple, {}, [], "no --input for argument 'x'"),
        ("unknown-input", simple, {"x": x, "z": x}, [], "--input 'z' names no argument"),
        ("input-size", simple, {"x": rand(3, 3)}, [], "needs 24 bytes"),
        ("embedding-range", module(
            {"table": table, "ids": bad_ids}, [("e", ttype((1, 2, 2)))],
            f"  %e = pmesh.embedding %table, %ids : ({t_of(table)}, {t_of(bad_ids)}) -> "
            f"{ttype((1, 2, 2))}\n  return %e : {ttype((1, 2, 2))}"),
         {"table": table, "ids": bad_ids}, [], "id 4 at position 0x1 is out of range"),
        ("cross-entropy-range", module(
            {"logits": logits, "t": bad_t}, [("l", "tensor<f32>")],
            f"  %l = pmesh.cross_entropy %logits, %t : ({t_of(logits)}, {t_of(bad_t)}) -> "
            f"tensor<f32>\n  return %l : tensor<f32>"),
         {"logits": logits, "t": bad_t}, [], "target 3 at position 1 is out of range"),
        ("missing-weights", params, {"x": x}, ["--weights-dir", root],
         "cannot find the parameters' ONNX file"),
    ]
    failures = 0
    for name, text, inputs, extra, message in cases:
        if args.only not in name:
            continue
        run = run_interp(args.interp, text, inputs, os.path.join(root, name), extra)
        ok = run.returncode != 0 and message in run.stderr
        failures += not ok
        print(f"error:{name:28s} {'PASS' if ok else 'FAIL'}"
              + ("" if ok else f"  (exit {run.returncode}, stderr: {run.stderr.strip()!r})"))
    return failures


def params_case(args, root):
    """Parameters from an ONNX file: inline raw data, typed float_data, external data,
    two parameters sharing one source, and a parameter without `source` (its symbol
    name is the initializer's). The module names the file relative to a directory the
    interpreter does not run in, so --weights-dir must resolve it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    if args.only not in "params":
        return 0
    workdir = os.path.join(root, "params")
    wdir = os.path.join(workdir, "weights")
    os.makedirs(wdir, exist_ok=True)
    w, b, e = rand(4, 6), rand(6), rand(4, 6)
    inits = [numpy_helper.from_array(w, "w.raw"),
             helper.make_tensor("b.typed", TensorProto.FLOAT, [6], b.tolist()),
             numpy_helper.from_array(e, "e")]
    graph = helper.make_graph([], "params", [], [helper.make_tensor_value_info(
        "b.typed", TensorProto.FLOAT, [6])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, os.path.join(wdir, "params.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="params.onnx.data", size_threshold=100)
    stored = onnx.load(os.path.join(wdir, "params.onnx"), load_external_data=False)
    external = [t.name for t in stored.graph.initializer
                if t.data_location == TensorProto.EXTERNAL]
    x = rand(4, 6)
    t = t_of(x)
    text = (f'module attributes {{pmesh.source = "some/build/dir/params.onnx"}} {{\n'
            f'  pmesh.param @w : {t} {{source = "w.raw"}}\n'
            f'  pmesh.param @w2 : {t} {{source = "w.raw"}}\n'
            f'  pmesh.param @b : tensor<6xf32> {{source = "b.typed"}}\n'
            f'  pmesh.param @e : {t}\n'
            f'  func.func @forward(%x: {t} {{pmesh.name = "x"}}) -> ({t} {{pmesh.name = "y"}}) {{\n'
            f'    %w = pmesh.get_param @w : {t}\n'
            f'    %w2 = pmesh.get_param @w2 : {t}\n'
            f'    %b = pmesh.get_param @b : tensor<6xf32>\n'
            f'    %e = pmesh.get_param @e : {t}\n'
            f'    %a = pmesh.mul %x, %w : ({t}, {t}) -> {t}\n'
            f'    %a2 = pmesh.add %a, %w2 : ({t}, {t}) -> {t}\n'
            f'    %a3 = pmesh.sub %a2, %e : ({t}, {t}) -> {t}\n'
            f'    %y = pmesh.add %a3, %b : ({t}, tensor<6xf32>) -> {t}\n'
            f'    return %y : {t}\n  }}\n}}\n')
    run = run_interp(args.interp, text, {"x": x}, workdir, ["--weights-dir", wdir], cwd=root)
    ok = run.returncode == 0
    if ok:
        got = read_output(workdir, "y", (4, 6), "f32>")
        want = f64(x) * w + w - e + b
        ok = np.allclose(got, want, rtol=1e-6, atol=1e-7)
    ok = ok and sorted(external) == ["e", "w.raw"]  # the file really mixes both kinds
    print(f"{'params':34s} {'PASS' if ok else 'FAIL'}" + (
        "" if ok else f"  (external: {external}; stderr: {run.stderr.strip()!r})"))
    return 0 if ok else 1


def train_flags_case(args, root):
    """The gradient-oracle flags: pmesh.accumulate_grad summed per parameter and written
    as float64 by --grads-dir; parameters from float64 files (--param-override,
    --params-dir); --perturb-param; --fd-probes / --fd-out; --results-f64;
    --exact-float-casts; and their errors."""
    if args.only not in "train-flags":
        return 0
    workdir = os.path.join(root, "train-flags")
    os.makedirs(workdir, exist_ok=True)
    x = rand(2, 3)
    w = RNG.standard_normal((2, 3))  # float64 values no float32 holds
    b = RNG.standard_normal(3)
    t, tb = t_of(x), "tensor<3xf32>"
    text = f"""module {{
  pmesh.param @w : {t}
  pmesh.param @b : {tb}
  pmesh.param @unused : {tb}
  func.func @train_step(%x: {t} {{pmesh.name = "x"}}) -> (tensor<f32> {{pmesh.name = "loss"}}) {{
    %w = pmesh.get_param @w : {t}
    %b = pmesh.get_param @b : {tb}
    %m = pmesh.mul %x, %w : ({t}, {t}) -> {t}
    %a = pmesh.add %m, %b : ({t}, {tb}) -> {t}
    %s = pmesh.reduce_sum %a axes = [0, 1] {{keepdims = false}} : {t} -> tensor<f32>
    pmesh.accumulate_grad @w, %x : {t}
    pmesh.accumulate_grad @w, %x : {t}
    %g = pmesh.constant dense<2.0> : {tb}
    pmesh.accumulate_grad @b, %g : {tb}
    return %s : tensor<f32>
  }}
  func.func @roundtrip() -> ({t} {{pmesh.name = "y"}}) {{
    %w = pmesh.get_param @w : {t}
    %h = pmesh.cast %w : {t} -> {ttype((2, 3)).replace("f32", "f16")}
    %y = pmesh.cast %h : {ttype((2, 3)).replace("f32", "f16")} -> {t}
    return %y : {t}
  }}
}}
"""
    pdir = os.path.join(workdir, "params")
    os.makedirs(pdir, exist_ok=True)
    w_file = os.path.join(workdir, "w64.bin")
    w.astype("<f8").tofile(w_file)
    b.astype("<f8").tofile(os.path.join(pdir, "b.bin"))
    gdir, out = os.path.join(workdir, "grads"), os.path.join(workdir, "out")
    probes, fd_out = os.path.join(workdir, "probes.txt"), os.path.join(workdir, "fd.txt")
    with open(probes, "w") as f:
        f.write("# param index delta\nw 4 0.25\n\nb 1 -0.5\n")
    base = ["--func", "train_step", "--params-dir", pdir, "--param-override", f"w={w_file}"]
    loss = float((f64(x) * w + b).sum())
    problems = []

    def loss_of(run_dir):
        return float(np.fromfile(os.path.join(run_dir, "loss.bin"), "<f8")[0])

    r = run_interp(args.interp, text, {"x": x}, workdir,
                   base + ["--grads-dir", gdir, "--results-f64", "--fd-probes", probes,
                           "--fd-out", fd_out])
    if r.returncode != 0:
        problems.append(f"train run failed: {r.stderr.strip()}")
    else:
        if not np.isclose(loss_of(out), loss, rtol=1e-15, atol=1e-14):
            problems.append(f"loss {loss_of(out)!r}, want {loss!r}")
        gw = np.fromfile(os.path.join(gdir, "w.bin"), "<f8")
        gb = np.fromfile(os.path.join(gdir, "b.bin"), "<f8")
        if not (np.array_equal(gw, 2 * f64(x).ravel()) and np.array_equal(gb, [2.0] * 3)):
            problems.append(f"gradients {gw}, {gb}: want 2x and 2")
        if os.path.exists(os.path.join(gdir, "unused.bin")):
            problems.append("a gradient file for a parameter without gradient")
        with open(fd_out) as f:
            got = [float(v) for v in f]
        want = [loss + 0.25 * float(x.ravel()[4]), loss - 0.5 * 2]
        if len(got) != 2 or not np.allclose(got, want, rtol=1e-14, atol=1e-13):
            problems.append(f"fd-probes {got}, want {want}")
    r = run_interp(args.interp, text, {"x": x}, workdir,
                   base + ["--results-f64", "--perturb-param", "w", "--index", "4",
                           "--delta", "0.25"])
    if r.returncode != 0 or not np.isclose(loss_of(out), loss + 0.25 * float(x.ravel()[4]),
                                           rtol=1e-14):
        problems.append(f"--perturb-param: {r.stderr.strip() or loss_of(out)}")
    for flags, want in ((["--exact-float-casts"], f64(w)),
                        ([], w.astype(np.float16).astype(np.float64))):
        r = run_interp(args.interp, text, {}, workdir,
                       ["--func", "roundtrip", "--param-override", f"w={w_file}",
                        "--results-f64"] + flags)
        got = np.fromfile(os.path.join(out, "y.bin"), "<f8").reshape(2, 3) if not r.returncode \
            else None
        if got is None or not np.array_equal(got, want):
            problems.append(f"roundtrip {flags}: {r.stderr.strip() or got}")
    short = os.path.join(workdir, "short.bin")
    np.zeros(5).tofile(short)
    bad_probe = os.path.join(workdir, "bad_probe.txt")
    with open(bad_probe, "w") as f:
        f.write("w 6 1e-3\n")
    for flags, message in (
            (["--param-override", "nope=" + w_file], "'nope' names no pmesh.param"),
            (["--param-override", "w=" + short], "has 40 bytes; 'tensor<2x3xf32>' needs 48"),
            (["--fd-probes", bad_probe, "--fd-out", fd_out], "cannot perturb element 6 of @w"),
            (["--fd-probes", probes], "--fd-probes needs --fd-out")):
        r = run_interp(args.interp, text, {"x": x}, workdir, base + flags)
        if r.returncode == 0 or message not in r.stderr:
            problems.append(f"{flags}: expected an error with {message!r}, got exit "
                            f"{r.returncode}: {r.stderr.strip()!r}")
    for p in problems:
        print(f"    {p}")
    print(f"{'train-flags':34s} {'PASS' if not problems else 'FAIL'}")
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interp", required=True, help="pmesh-interp binary")
    parser.add_argument("--only", default="", help="run cases whose name contains this")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every result")
    args = parser.parse_args()
    args.interp = os.path.abspath(args.interp)
    build_cases()
    root = tempfile.mkdtemp(prefix="pmesh-interp-ops-")
    failures = 0
    for c in CASES:
        if args.only not in c["name"]:
            continue
        problems = check_case(args, c, root)
        failures += bool(problems)
        print(f"{c['name']:34s} {'PASS' if not problems else 'FAIL ' + ', '.join(problems)}",
              flush=True)
    failures += error_cases(args, root)
    failures += params_case(args, root)
    failures += train_flags_case(args, root)
    print("all passed" if not failures else f"{failures} failed; files in {root}")
    if not failures:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
