#!/usr/bin/python3
"""Finite-difference gradient checks of --pmesh-autodiff (issue 3's acceptance), in double.

Two parts, both comparing the gradients @train_step accumulates (`pmesh.accumulate_grad`,
evaluated by pmesh-interp in double precision: --grads-dir writes them as float64) with
central differences of the loss (pmesh-interp --fd-probes reruns the loss with one parameter
element shifted, in the same process, and prints the loss with 17 digits):

  ops   one tiny @forward per differentiable op and variant (elementwise ops with numpy
        broadcasting, reductions, matmul with transposes / batch broadcasting / bias,
        layer_norm incl. broadcast scale/bias, both gelu forms, softmax, log_softmax,
        attention with causal + mask and Tq < Tk, embedding with repeated ids, cross_entropy
        in every reduction with ignore_index, reshape, transpose, broadcast, slice, split,
        concat, where, cast, max, a float64 loss, fan-out and a parameter read twice). Every
        operand that can carry a gradient is a `pmesh.param` with random float64 values (not
        float32-representable: the interpreter reads them with --params-dir), and the loss
        is a weighted sum of the op's results with random weights (fixed seed), so the
        incoming gradient is a random tensor, not ones.
  gpt   whole tiny GPTs imported from models/fixtures at batch 2, seq 8 (a static model at
        its own shape): the generated op17 model (tied head), the PyTorch export (whose
        initializers are deduplicated), a model with its own ONNX loss, the op17 model
        imported with --no-raise (the decomposed ops' rules in a real model) and the PyTorch
        export with an attention_mask and its own loss. Every parameter gets seeded noise
        (so LayerNorm scales and biases are not the fixtures' ones and zeros, and params
        sharing an initializer differ), targets include ignored entries, and every parameter
        is checked at 4 random entries with a nonzero gradient, its largest entry and one
        entry whose gradient is zero (where there is one).

Finite differences and tolerance. fd is the fourth-order central difference

    fd = (8 (L(p+h) - L(p-h)) - (L(p+2h) - L(p-2h))) / 12h,   h = 1e-3,

and an entry passes when

    |g - fd| <= 1e-6 * max(|g|, |fd|) + 1e-14 * max(1, |L|) / h.

Why not the two-point difference with h ~ 1e-6: its rounding error, about eps |L| / h, is
~1e-9 absolute for the GPT losses (|L| ~ 5.6), i.e. more than 1e-6 relative for every
gradient entry below ~1e-3 -- most GPT entries -- so a 1e-6 check would have to exempt them
(measured: two-point h = 1e-6 disagrees by up to 2.5e-5 relative on such entries, while the
gradients are right). The fourth-order stencil has truncation error h^4 L^(5) / 30 ~ 3e-14
L^(5) and rounding error ~1.5 eps |L| / h ~ 1e-12, so 1e-6 relative holds down to entries of
~1e-6; the second term (1e-14 |L| / h = 1e-11 |L|, ~100 eps of loss rounding) only admits
entries that are mathematically zero (e.g. the key bias, which softmax cancels) or tiny. A
wrong rule is off by a factor or a missing term, far beyond 1e-6. Each line prints the max
relative error over entries with |g| or |fd| > 1e-8, and the max absolute error. --stencil 2
--h 1e-6 runs the two-point variant.

Known imprecision: pmesh.erf's rule multiplies by 2/sqrt(pi) as a constant of the operand's
element type, so for f32 graphs it is float32-rounded (5e-8 relative): erf shows ~5e-8, and
GPTs imported with --no-raise (decomposed gelu) ~1e-8. Harmless for f32 training.

Ops whose derivative has kinks (max, where's selection, cast rounding) are checked away from
them: max's operands differ by more than 50 h, and pmesh-interp runs with
--exact-float-casts so a cast does not round (a float32 or float16 round trip would make the
loss a step function at the scale of h).

    check_gradients.py --opt build/bin/pipemesh-opt --interp build/bin/pmesh-interp \\
        --fixtures models/fixtures [--only SUBSTRING] [--part ops|gpt|all] [-v] [--keep DIR]
        [--gpt NAME[:FLAG],...] [--stencil 2|4] [--h H]

Run with /usr/bin/python3 (Debian's numpy and onnx). ~15-25 s on 2 cores.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

RTOL = 1e-6
NOISE = 1e-14   # relative rounding error of a loss evaluation, for the absolute floor
H = 1e-3
STENCIL = 4
ENTRIES_PER_PARAM = 4   # op cases: sampled entries per parameter
GPT_ENTRIES = 4         # GPT: sampled entries (nonzero gradient) per parameter
GPT_NOISE = 0.1         # std of the noise on every GPT parameter
GPT_SHAPE = (2, 8)      # batch, seq
# NAME[:pipemesh-opt flag]
GPT_CASES = ("gpt2_tiny_op17", "torch_gpt2_tiny_op14_dyn_nofold", "gpt2_tiny_op17_loss",
             "gpt2_tiny_op17:--no-raise", "torch_gpt2_tiny_op14_dyn_nofold_mask_loss")
MIN32 = float(np.finfo(np.float32).min)

MLIR_TYPES = {np.float32: "f32", np.float64: "f64", np.int64: "i64", np.int32: "i32",
              np.bool_: "i1"}


def ttype(shape, elt="f32"):
    return "tensor<" + "".join(f"{d}x" for d in shape) + elt + ">"


def t_of(a):
    return ttype(a.shape, MLIR_TYPES[np.dtype(a.dtype).type])


# --- op cases -----------------------------------------------------------------------------
# A case: parameters {name: float64 array} (read with pmesh.get_param as %name), other
# inputs {name: array} (function arguments %name: ids, targets, masks, conditions), a body
# defining the float32 results listed in `outputs` [(value, shape)], and a set of flags for
# pmesh-interp. The harness adds the loss sum_k sum(out_k * w_k) with random w_k.

CASES = []
RNG = np.random.default_rng(20240603)


def rnd(*shape, lo=None):
    """Random float64 values; with `lo`, magnitudes in [lo, lo + 1) with random signs."""
    a = RNG.standard_normal(shape)
    if lo is not None:
        a = np.sign(a + (a == 0)) * (lo + RNG.random(shape))
    return a


def pos(*shape):
    return 0.5 + RNG.random(shape) * 1.5


def case(name, params, outputs, body, inputs=None, flags=(), elt="f32"):
    """`elt`: the element type of the outputs and so of the loss."""
    CASES.append(dict(name=name, params=params, inputs=inputs or {}, outputs=outputs,
                      body=body, flags=list(flags), elt=elt))


def T(shape):
    return ttype(shape)


def elementwise_cases():
    # Broadcasting both ways: [2,1,3] (+) [4,1] -> [2,4,3], and a 0-d operand.
    for op in ("add", "sub", "mul", "div"):
        x, y = rnd(2, 1, 3), (pos(4, 1) if op == "div" else rnd(4, 1))
        s = rnd()
        case(f"{op}-broadcast", {"x": x, "y": y, "s": s}, [("r", (2, 4, 3)), ("q", (4, 1))], f"""
  %r = pmesh.{op} %x, %y : ({T(x.shape)}, {T(y.shape)}) -> {T((2, 4, 3))}
  %q = pmesh.{op} %s, %y : (tensor<f32>, {T(y.shape)}) -> {T((4, 1))}""")
    base, ex = pos(2, 1, 3), rnd(4, 1)
    case("pow-broadcast", {"base": base, "ex": ex}, [("r", (2, 4, 3))], f"""
  %r = pmesh.pow %base, %ex : ({T(base.shape)}, {T(ex.shape)}) -> {T((2, 4, 3))}""")
    # max: away from ties (|x - y| >= 0.1 >> h).
    x = rnd(2, 1, 3)
    y = np.empty((4, 3))
    for i in range(4):
        for j in range(3):
            v = RNG.standard_normal()
            while np.min(np.abs(x[:, 0, j] - v)) < 0.1:
                v = RNG.standard_normal()
            y[i, j] = v
    case("max-broadcast", {"x": x, "y": y}, [("r", (2, 4, 3))], f"""
  %r = pmesh.max %x, %y : ({T(x.shape)}, {T(y.shape)}) -> {T((2, 4, 3))}""")
    t = T((3, 4))
    for op in ("neg", "sqrt", "tanh", "erf", "exp", "log", "sigmoid"):
        x = pos(3, 4) if op in ("sqrt", "log") else rnd(3, 4)
        case(op, {"x": x}, [("r", (3, 4))], f"""
  %r = pmesh.{op} %x : {t}""")
    # where: a fixed condition, operands broadcasting to it and to each other, and a 0-d
    # constant on one side (no gradient).
    cond = RNG.random((2, 4, 3)) < 0.5
    a, b = rnd(2, 1, 3), rnd(4, 1)
    case("where-broadcast", {"a": a, "b": b}, [("r", (2, 4, 3)), ("z", (2, 4, 3))], f"""
  %r = pmesh.where %cond, %a, %b : ({t_of(cond)}, {T(a.shape)}, {T(b.shape)}) -> {T((2, 4, 3))}
  %zero = pmesh.constant dense<0.5> : tensor<f32>
  %z = pmesh.where %cond, %zero, %b : ({t_of(cond)}, tensor<f32>, {T(b.shape)}) -> {T((2, 4, 3))}""",
         inputs={"cond": cond})
    # cast: f32 -> f64 -> (f64 math) -> f32, and an integer -> float cast (no gradient).
    x = rnd(3, 4)
    n = RNG.integers(-3, 4, (3, 4)).astype(np.int64)
    case("cast", {"x": x}, [("r", (3, 4)), ("m", (3, 4))], f"""
  %d = pmesh.cast %x : {T((3, 4))} -> {ttype((3, 4), "f64")}
  %d2 = pmesh.mul %d, %d : ({ttype((3, 4), "f64")}, {ttype((3, 4), "f64")}) -> {ttype((3, 4), "f64")}
  %r = pmesh.cast %d2 : {ttype((3, 4), "f64")} -> {T((3, 4))}
  %nf = pmesh.cast %n : {t_of(n)} -> {T((3, 4))}
  %m = pmesh.mul %nf, %x : ({T((3, 4))}, {T((3, 4))}) -> {T((3, 4))}""",
         inputs={"n": n}, flags=["--exact-float-casts"])
    # A float64 loss: --pmesh-autodiff casts it to the f32 loss and differentiates the cast.
    x = rnd(3, 4)
    case("f64-loss", {"x": x}, [("r", (3, 4))], f"""
  %d = pmesh.cast %x : {T((3, 4))} -> {ttype((3, 4), "f64")}
  %r = pmesh.exp %d : {ttype((3, 4), "f64")}""", flags=["--exact-float-casts"], elt="f64")
    # Fan-out (one value used by three ops) and one parameter read twice.
    x = rnd(3, 4)
    t = T((3, 4))
    case("fanout-and-reread", {"x": x}, [("r", (3, 4))], f"""
  %e = pmesh.exp %x : {t}
  %m = pmesh.mul %e, %x : ({t}, {t}) -> {t}
  %x2 = pmesh.get_param @x : {t}
  %t2 = pmesh.tanh %x2 : {t}
  %a = pmesh.add %m, %t2 : ({t}, {t}) -> {t}
  %r = pmesh.sub %a, %e : ({t}, {t}) -> {t}""")


def reduction_cases():
    x = rnd(2, 3, 4)
    case("reduce_sum", {"x": x},
         [("s02", (3,)), ("slast", (2, 3)), ("s1k", (2, 1, 4)), ("s_none", (2, 3, 4))], f"""
  %s02 = pmesh.reduce_sum %x axes = [0, 2] {{keepdims = false}} : {T(x.shape)} -> {T((3,))}
  %slast = pmesh.reduce_sum %x axes = [-1] {{keepdims = false}} : {T(x.shape)} -> {T((2, 3))}
  %s1k = pmesh.reduce_sum %x axes = [1] : {T(x.shape)} -> {T((2, 1, 4))}
  %s_none = pmesh.reduce_sum %x axes = [] : {T(x.shape)} -> {T((2, 3, 4))}""")
    case("reduce_mean", {"x": x.copy()},
         [("mlast", (2, 3, 1)), ("m02", (3,)), ("mall", ())], f"""
  %mlast = pmesh.reduce_mean %x axes = [-1] : {T(x.shape)} -> {T((2, 3, 1))}
  %m02 = pmesh.reduce_mean %x axes = [0, -1] {{keepdims = false}} : {T(x.shape)} -> {T((3,))}
  %mall = pmesh.reduce_mean %x axes = [0, 1, 2] {{keepdims = false}} : {T(x.shape)} -> tensor<f32>""")


def matmul_cases():
    a, w, bias = rnd(2, 3, 4, 5), rnd(5, 6), rnd(6)
    case("matmul-weight-bias", {"a": a, "w": w, "bias": bias}, [("r", (2, 3, 4, 6))], f"""
  %r = pmesh.matmul %a, %w bias %bias : ({T(a.shape)}, {T(w.shape)}, {T(bias.shape)}) -> {T((2, 3, 4, 6))}""")
    a, w = rnd(2, 4, 5), rnd(6, 5)
    case("matmul-weight-transpose-b", {"a": a, "w": w}, [("r", (2, 4, 6))], f"""
  %r = pmesh.matmul %a, %w {{transpose_b = true}} : ({T(a.shape)}, {T(w.shape)}) -> {T((2, 4, 6))}""")
    a, w = rnd(2, 5, 4), rnd(5, 6)
    case("matmul-transpose-a-2d-weight", {"a": a, "w": w}, [("r", (2, 4, 6))], f"""
  %r = pmesh.matmul %a, %w {{transpose_a = true}} : ({T(a.shape)}, {T(w.shape)}) -> {T((2, 4, 6))}""")
    a, b = rnd(5, 3), rnd(2, 1, 5, 4)
    case("matmul-transpose-a-2d-lhs", {"a": a, "b": b}, [("r", (2, 1, 3, 4))], f"""
  %r = pmesh.matmul %a, %b {{transpose_a = true}} : ({T(a.shape)}, {T(b.shape)}) -> {T((2, 1, 3, 4))}""")
    a, b = rnd(1, 3, 4, 5), rnd(2, 1, 6, 5)
    case("matmul-transpose-b-batch-broadcast", {"a": a, "b": b}, [("r", (2, 3, 4, 6))], f"""
  %r = pmesh.matmul %a, %b {{transpose_b = true}} : ({T(a.shape)}, {T(b.shape)}) -> {T((2, 3, 4, 6))}""")
    a, b = rnd(2, 3, 5, 4), rnd(3, 6, 5)
    case("matmul-transpose-both-batch", {"a": a, "b": b}, [("r", (2, 3, 4, 6))], f"""
  %r = pmesh.matmul %a, %b {{transpose_a = true, transpose_b = true}} : ({T(a.shape)}, {T(b.shape)}) -> {T((2, 3, 4, 6))}""")
    a, b = rnd(4, 5), rnd(2, 5, 3)
    case("matmul-2d-lhs-batched-rhs", {"a": a, "b": b}, [("r", (2, 4, 3))], f"""
  %r = pmesh.matmul %a, %b : ({T(a.shape)}, {T(b.shape)}) -> {T((2, 4, 3))}""")
    a, b, bias = rnd(4, 5), rnd(5, 3), rnd(3)
    case("matmul-2d-bias", {"a": a, "b": b, "bias": bias}, [("r", (4, 3))], f"""
  %r = pmesh.matmul %a, %b bias %bias : ({T(a.shape)}, {T(b.shape)}, {T(bias.shape)}) -> {T((4, 3))}""")


def nn_cases():
    x, g, beta = rnd(2, 3, 8) * 2 + 0.5, rnd(8), rnd(8)
    case("layer_norm-last-axis", {"x": x, "g": g, "beta": beta}, [("r", x.shape)], f"""
  %r = pmesh.layer_norm %x, %g, %beta : ({T(x.shape)}, {T(g.shape)}, {T(beta.shape)}) -> {T(x.shape)}""")
    x, g2 = rnd(2, 3, 8) * 2, rnd(3, 8)
    case("layer_norm-two-dims-no-bias", {"x": x, "g2": g2}, [("r", x.shape)], f"""
  %r = pmesh.layer_norm %x, %g2 {{axis = 1 : i64, epsilon = 1.0e-03 : f32}} : ({T(x.shape)}, {T(g2.shape)}) -> {T(x.shape)}""")
    x, g, beta = rnd(2, 3, 8), rnd(8), rnd(3, 1)
    case("layer_norm-broadcast-scale-bias", {"x": x, "g": g, "beta": beta}, [("r", x.shape)], f"""
  %r = pmesh.layer_norm %x, %g, %beta {{axis = -2 : i64}} : ({T(x.shape)}, {T(g.shape)}, {T(beta.shape)}) -> {T(x.shape)}""")
    x, g, beta = rnd(2, 3, 8), rnd(8), rnd(3, 8)
    case("layer_norm-bias-wider-than-scale", {"x": x, "g": g, "beta": beta}, [("r", x.shape)],
         f"""
  %r = pmesh.layer_norm %x, %g, %beta {{axis = 1 : i64}} : ({T(x.shape)}, {T(g.shape)}, {T(beta.shape)}) -> {T(x.shape)}""")
    x = rnd(4, 5) * 2
    case("gelu-erf", {"x": x}, [("r", x.shape)], f"""
  %r = pmesh.gelu %x : {T(x.shape)}""")
    case("gelu-tanh", {"x": x.copy()}, [("r", x.shape)], f"""
  %r = pmesh.gelu %x {{approximate = "tanh"}} : {T(x.shape)}""")
    x = rnd(2, 3, 4) * 2
    case("softmax", {"x": x}, [("a1", x.shape), ("last", x.shape)], f"""
  %a1 = pmesh.softmax %x {{axis = 1 : i64}} : {T(x.shape)}
  %last = pmesh.softmax %x : {T(x.shape)}""")
    case("log_softmax", {"x": x.copy()}, [("a0", x.shape), ("last", x.shape)], f"""
  %a0 = pmesh.log_softmax %x {{axis = 0 : i64}} : {T(x.shape)}
  %last = pmesh.log_softmax %x : {T(x.shape)}""")
    # Attention: causal + [B,1,1,Tk] padding mask with Tq < Tk (end-aligned), non-causal
    # with a 2-D mask broadcast over batch and heads, plain causal Tq == Tk.
    q, k, v = rnd(2, 2, 3, 4), rnd(2, 2, 5, 4), rnd(2, 2, 5, 6)
    pad = np.zeros((2, 1, 1, 5), np.float32)
    pad[1, 0, 0, 3] = MIN32
    pad[0, 0, 0, 0] = -1.5
    case("attention-causal-mask-tq<tk", {"q": q, "k": k, "v": v}, [("r", (2, 2, 3, 6))], f"""
  %r = pmesh.attention %q, %k, %v mask %pad {{scale = 0.3 : f32}} : ({T(q.shape)}, {T(k.shape)}, {T(v.shape)}, {t_of(pad)}) -> {T((2, 2, 3, 6))}""",
         inputs={"pad": pad})
    m2 = RNG.standard_normal((3, 5)).astype(np.float32)
    case("attention-noncausal-2d-mask", {"q": q.copy(), "k": k.copy(), "v": v.copy()},
         [("r", (2, 2, 3, 6))], f"""
  %r = pmesh.attention %q, %k, %v mask %m2 {{scale = 0.5 : f32, causal = false}} : ({T(q.shape)}, {T(k.shape)}, {T(v.shape)}, {t_of(m2)}) -> {T((2, 2, 3, 6))}""",
         inputs={"m2": m2})
    qs, ks, vs = rnd(1, 2, 4, 3), rnd(1, 2, 4, 3), rnd(1, 2, 4, 3)
    case("attention-causal", {"qs": qs, "ks": ks, "vs": vs}, [("r", (1, 2, 4, 3))], f"""
  %r = pmesh.attention %qs, %ks, %vs {{scale = 0.25 : f32}} : ({T(qs.shape)}, {T(ks.shape)}, {T(vs.shape)}) -> {T((1, 2, 4, 3))}""")
    # A sliding window of 2 keys, Tq < Tk (key 0 is seen by no query: zero gradients).
    case("attention-sliding-window", {"q": q.copy(), "k": k.copy(), "v": v.copy()},
         [("r", (2, 2, 3, 6))], f"""
  %r = pmesh.attention %q, %k, %v {{scale = 0.5 : f32, window = 2}} : ({T(q.shape)}, {T(k.shape)}, {T(v.shape)}) -> {T((2, 2, 3, 6))}""")
    # Scores soft-capped at 0.3 (Gemma 2's cap(s) = C tanh(s / C)), causal, the padding mask.
    case("attention-softcap", {"q": q.copy(), "k": k.copy(), "v": v.copy()},
         [("r", (2, 2, 3, 6))], f"""
  %r = pmesh.attention %q, %k, %v mask %pad {{scale = 0.5 : f32, softcap = 0.3 : f32}} : ({T(q.shape)}, {T(k.shape)}, {T(v.shape)}, {t_of(pad)}) -> {T((2, 2, 3, 6))}""",
         inputs={"pad": pad})
    # One tensor as q, k and v (self-attention without projections): three summed grads.
    x = rnd(2, 4, 3)
    case("attention-shared-qkv", {"x": x}, [("r", (2, 4, 3))], f"""
  %r = pmesh.attention %x, %x, %x {{scale = 0.7 : f32}} : ({T(x.shape)}, {T(x.shape)}, {T(x.shape)}) -> {T((2, 4, 3))}""")
    # Embedding: repeated ids (scatter-add), a negative id, int32 ids.
    table = rnd(6, 3)
    ids = np.array([[0, 4, 2, 4], [1, 1, -1, 4]], np.int64)
    ids32 = np.array([[5, 5, 0]], np.int32)
    case("embedding", {"table": table}, [("e", (2, 4, 3)), ("e32", (1, 3, 3))], f"""
  %e = pmesh.embedding %table, %ids : ({T(table.shape)}, {t_of(ids)}) -> {T((2, 4, 3))}
  %e32 = pmesh.embedding %table, %ids32 : ({T(table.shape)}, {t_of(ids32)}) -> {T((1, 3, 3))}""",
         inputs={"ids": ids, "ids32": ids32})
    # cross_entropy: every reduction, the default ignore_index and a custom one.
    lg = rnd(2, 3, 5) * 2
    t = np.array([[1, -100, 4], [0, 2, -100]], np.int64)
    t2 = np.array([[1, 2, 4], [0, 2, 3]], np.int64)
    lt, tt = T(lg.shape), t_of(t)
    case("cross_entropy", {"logits": lg},
         [("m", ()), ("s", ()), ("n", (2, 3)), ("i2", ())], f"""
  %m = pmesh.cross_entropy %logits, %t : ({lt}, {tt}) -> tensor<f32>
  %s = pmesh.cross_entropy %logits, %t {{reduction = "sum"}} : ({lt}, {tt}) -> tensor<f32>
  %n = pmesh.cross_entropy %logits, %t {{reduction = "none"}} : ({lt}, {tt}) -> {T((2, 3))}
  %i2 = pmesh.cross_entropy %logits, %t2 {{ignore_index = 2 : i64}} : ({lt}, {tt}) -> tensor<f32>""",
         inputs={"t": t, "t2": t2})
    # A mean cross_entropy alone (the loss is exactly its result, weight aside).
    lg = rnd(4, 7)
    t = np.array([3, -100, 6, 0], np.int64)
    case("cross_entropy-mean-only", {"logits": lg}, [("m", ())], f"""
  %m = pmesh.cross_entropy %logits, %t : ({T(lg.shape)}, {t_of(t)}) -> tensor<f32>""",
         inputs={"t": t})


def shape_cases():
    x = rnd(2, 3, 4)
    case("reshape", {"x": x}, [("r", (4, 6))], f"""
  %r = pmesh.reshape %x : {T(x.shape)} -> {T((4, 6))}""")
    case("transpose", {"x": x.copy()}, [("r", (4, 2, 3))], f"""
  %r = pmesh.transpose %x perm = [2, 0, 1] : {T(x.shape)} -> {T((4, 2, 3))}""")
    col, s = rnd(3, 1), rnd()
    case("broadcast", {"col": col, "s": s}, [("r", (2, 3, 4)), ("rs", (2, 2))], f"""
  %r = pmesh.broadcast %col : {T(col.shape)} -> {T((2, 3, 4))}
  %rs = pmesh.broadcast %s : tensor<f32> -> {T((2, 2))}""")
    x = rnd(5, 6, 4)
    case("slice-strided", {"x": x}, [("r", (2, 3, 2)), ("f", (5, 6, 4))], f"""
  %r = pmesh.slice %x[[1, 0, 1] : [5, 6, 4] : [2, 2, 2]] : {T(x.shape)} -> {T((2, 3, 2))}
  %f = pmesh.slice %x[[0, 0, 0] : [5, 6, 4] : [1, 1, 1]] : {T(x.shape)} -> {T((5, 6, 4))}""")
    # split: one piece unused (its gradient is zeros), one used twice.
    x = rnd(2, 6, 3)
    p = [T((2, 1, 3)), T((2, 2, 3)), T((2, 3, 3))]
    case("split", {"x": x}, [("a", (2, 1, 3)), ("c", (2, 3, 3))], f"""
  %s:3 = pmesh.split %x axis = 1 sizes = [1, 2, 3] : {T(x.shape)} -> {p[0]}, {p[1]}, {p[2]}
  %a = pmesh.mul %s#0, %s#0 : ({p[0]}, {p[0]}) -> {p[0]}
  %c = pmesh.tanh %s#2 : {p[2]}""")
    a, b = rnd(2, 3), rnd(2, 1)
    case("concat", {"a": a, "b": b}, [("r", (2, 7))], f"""
  %r = pmesh.concat %a, %b, %a axis = -1 : ({T(a.shape)}, {T(b.shape)}, {T(a.shape)}) -> {T((2, 7))}""")


def build_cases():
    elementwise_cases()
    reduction_cases()
    matmul_cases()
    nn_cases()
    shape_cases()


def case_module(c, weights):
    """@forward(inputs..., weights...) -> loss for case `c`."""
    params = c["params"]
    lines = ["module {"]
    for n, a in params.items():
        lines.append(f"  pmesh.param @{n} : {T(a.shape)}")
    args = [f'%{n}: {t_of(a)} {{pmesh.name = "{n}"}}' for n, a in c["inputs"].items()]
    elt = c["elt"]
    lt = ttype((), elt)
    args += [f'%w_{n}: {ttype(w.shape, elt)} {{pmesh.name = "w_{n}"}}'
             for n, w in weights.items()]
    lines.append(f"func.func @forward({', '.join(args)}) -> "
                 f'({lt} {{pmesh.name = "loss"}}) {{')
    for n, a in params.items():
        lines.append(f"  %{n} = pmesh.get_param @{n} : {T(a.shape)}")
    lines.append(c["body"].strip("\n"))
    terms = []
    for n, shape in c["outputs"]:
        t = ttype(shape, elt)
        lines.append(f"  %wp_{n} = pmesh.mul %{n}, %w_{n} : ({t}, {t}) -> {t}")
        if shape:
            axes = ", ".join(str(d) for d in range(len(shape)))
            lines.append(f"  %ws_{n} = pmesh.reduce_sum %wp_{n} axes = [{axes}] "
                         f"{{keepdims = false}} : {t} -> {lt}")
            terms.append(f"%ws_{n}")
        else:
            terms.append(f"%wp_{n}")
    total = terms[0]
    for k, term in enumerate(terms[1:]):
        lines.append(f"  %sum{k} = pmesh.add {total}, {term} : ({lt}, {lt}) -> {lt}")
        total = f"%sum{k}"
    lines.append(f"  return {total} : {lt}")
    lines.append("}\n}")
    return "\n".join(lines) + "\n"


# --- running the tools -----------------------------------------------------------------------

class ToolError(Exception):
    pass


def run(cmd, cwd=None):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if p.returncode != 0:
        err = p.stderr.strip()
        raise ToolError(f"{os.path.basename(cmd[0])} failed (exit {p.returncode}): "
                        + (err if len(err) < 3000 else err[:3000] + "..."))
    return p.stdout


def write_input(path, a):
    if a.dtype == np.bool_:
        a.astype(np.uint8).tofile(path)
    elif a.dtype.kind in "iu":
        a.astype("<i8").tofile(path)
    else:
        a.astype("<f4").tofile(path)


def params_in(mlir):
    """[(name, shape, source)] of the module's pmesh.param declarations."""
    out = []
    for m in re.finditer(r'pmesh\.param @(\S+) : tensor<([^>]*)>(?: \{source = "([^"]+)"\})?',
                         mlir):
        dims = m.group(2).split("x")[:-1]
        out.append((m.group(1), tuple(int(d) for d in dims), m.group(3) or m.group(1)))
    return out


def train_step_grads(args, mlir_path, workdir, inputs, params, flags, probes):
    """Runs @train_step once (gradients) and the probes; returns (loss, grads, probe losses)."""
    pdir, gdir = os.path.join(workdir, "params"), os.path.join(workdir, "grads")
    os.makedirs(pdir, exist_ok=True)
    shutil.rmtree(gdir, ignore_errors=True)
    for n, a in params.items():
        np.ascontiguousarray(a, "<f8").tofile(os.path.join(pdir, n + ".bin"))
    cmd = [args.interp, mlir_path, "--func", "train_step", "--params-dir", pdir,
           "--grads-dir", gdir, "--output-dir", os.path.join(workdir, "out"), "--results-f64",
           "--fd-probes", os.path.join(workdir, "probes.txt"),
           "--fd-out", os.path.join(workdir, "probe_losses.txt")] + flags
    for n, a in inputs.items():
        path = os.path.join(workdir, n + ".bin")
        write_input(path, a)
        cmd += ["--input", f"{n}={path}"]
    with open(os.path.join(workdir, "probes.txt"), "w") as f:
        for name, index, delta in probes:
            f.write(f"{name} {index} {delta!r}\n")
    run(cmd)
    loss = float(np.fromfile(os.path.join(workdir, "out", "loss.bin"), "<f8")[0])
    grads = {}
    for n, a in params.items():
        path = os.path.join(gdir, n + ".bin")
        grads[n] = np.fromfile(path, "<f8").reshape(a.shape) if os.path.exists(path) else None
    with open(os.path.join(workdir, "probe_losses.txt")) as f:
        losses = [float(line) for line in f]
    return loss, grads, losses


def fd_probes(entries, h):
    """The shifts of each (param, flat index) that STENCIL needs."""
    out = []
    for name, idx in entries:
        out += [(name, idx, m * h) for m in STENCIL_SHIFTS[STENCIL]]
    return out


STENCIL_SHIFTS = {2: (1, -1), 4: (1, -1, 2, -2)}


def central_difference(l, h):
    if STENCIL == 2:
        return (l[0] - l[1]) / (2 * h)
    return (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * h)


def compare(entries, grads, losses, loss, h):
    """Per entry (param, index, g, fd, ok); the rounding floor scales with |loss| / h."""
    atol = NOISE * max(1.0, abs(loss)) / h
    rows = []
    n = len(STENCIL_SHIFTS[STENCIL])
    for k, (name, idx) in enumerate(entries):
        fd = central_difference(losses[n * k:n * k + n], h)
        g = 0.0 if grads[name] is None else float(grads[name].reshape(-1)[idx])
        ok = abs(g - fd) <= RTOL * max(abs(g), abs(fd)) + atol and np.isfinite(g)
        rows.append((name, idx, g, fd, ok))
    return rows, atol


REL_FLOOR = 1e-8  # entries below this (mathematically zero ones) report no relative error


def summarize(rows, atol):
    """(max relative error over entries with |g| or |fd| above REL_FLOOR, max absolute)."""
    rel = [abs(g - fd) / max(abs(g), abs(fd)) for _, _, g, fd, _ in rows
           if max(abs(g), abs(fd)) > REL_FLOOR]
    ab = [abs(g - fd) for _, _, g, fd, _ in rows]
    return (max(rel) if rel else 0.0), (max(ab) if ab else 0.0)


def print_failures(rows, verbose):
    for name, idx, g, fd, ok in rows:
        if verbose or not ok:
            print(f"      {'ok ' if ok else 'BAD'} {name}[{idx}]: autodiff {g:+.12e}  "
                  f"finite-diff {fd:+.12e}")


def check_op_case(args, c, root):
    workdir = os.path.join(root, "ops", c["name"])
    os.makedirs(workdir, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(c["name"].encode()))
    weights = {n: rng.standard_normal(shape).astype(np.float32) for n, shape in c["outputs"]}
    text = case_module(c, weights)
    src, ad = os.path.join(workdir, "forward.mlir"), os.path.join(workdir, "train.mlir")
    with open(src, "w") as f:
        f.write(text)
    run([args.opt, src, "--pmesh-autodiff", "-o", ad])
    inputs = dict(c["inputs"])
    inputs.update({f"w_{n}": w for n, w in weights.items()})
    entries = []
    for n, a in c["params"].items():
        k = min(ENTRIES_PER_PARAM, a.size)
        for idx in sorted(rng.choice(a.size, k, replace=False)):
            entries.append((n, int(idx)))
    loss, grads, losses = train_step_grads(args, ad, workdir, inputs, c["params"], c["flags"],
                                           fd_probes(entries, H))
    missing = [n for n, g in grads.items() if g is None]
    rows, atol = compare(entries, grads, losses, loss, H)
    return rows, atol, missing


# --- whole GPT ---------------------------------------------------------------------------------

def gpt_case(args, name, root, import_flags=()):
    import onnx
    from onnx import numpy_helper

    fixture = os.path.join(args.fixtures, name + ".onnx")
    workdir = os.path.join(root, "gpt", name + "".join(import_flags))
    os.makedirs(workdir, exist_ok=True)
    batch, seq = GPT_SHAPE
    src, ad = os.path.join(workdir, "forward.mlir"), os.path.join(workdir, "train.mlir")
    mlir = run([args.opt, fixture, f"--batch={batch}", f"--seq={seq}"] + list(import_flags))
    with open(src, "w") as f:
        f.write(mlir)
    run([args.opt, src, "--pmesh-autodiff", "-o", ad])
    with open(ad) as f:
        train = f.read()

    # Parameter values: the fixture's initial values plus seeded noise, independently per
    # parameter (the PyTorch export shares one initializer among equal-valued parameters).
    model = onnx.load(fixture)
    inits = {t.name: t for t in model.graph.initializer}
    params = {}
    for pname, shape, source in params_in(mlir):
        base = numpy_helper.to_array(inits[source]).astype(np.float64).reshape(shape)
        noise = np.random.default_rng(zlib.crc32(pname.encode())).standard_normal(shape)
        params[pname] = base + GPT_NOISE * noise

    # Inputs: the train step's arguments by pmesh.name (a static model fixes its shape).
    m = re.search(r"func\.func @train_step\((.*?)\)\s*->", train)
    args_text = re.findall(r'tensor<([0-9x]+)x\w+> \{pmesh\.name = "([^"]+)"\}', m.group(1))
    arg_names = [n for _, n in args_text]
    batch, seq = (int(d) for d in dict((n, s) for s, n in args_text)["input_ids"].split("x"))
    vocab = params_in(mlir)[0][1][0]  # the token embedding is the first parameter
    rng = np.random.default_rng(4321)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    labels = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    # Two ignored targets: -100 for the loss --pmesh-autodiff appends to logits, the
    # model's own ignore_index when its loss has one (an ONNX loss without one ignores none).
    ignore = -100 if "targets" in arg_names else None
    for node in model.graph.node:
        for a in node.attribute:
            if node.op_type == "SoftmaxCrossEntropyLoss" and a.name == "ignore_index":
                ignore = a.i
    if ignore is not None:
        labels.reshape(-1)[[3, seq + 5]] = ignore
    inputs = {}
    for n in arg_names:
        if n == "input_ids":
            inputs[n] = ids
        elif n in ("targets", "labels"):
            inputs[n] = labels
        elif n == "attention_mask":
            mask = np.ones((batch, seq), np.int64)
            mask[1, 2:4] = 0
            inputs[n] = mask
        else:
            raise ToolError(f"no data for the train step's argument '{n}'")

    # One run for the gradients, to pick entries: GPT_ENTRIES with a nonzero gradient per
    # parameter (an unused embedding row would compare 0 with 0) plus one zero entry where
    # the gradient has zeros (its finite difference must be 0 too).
    loss, grads, _ = train_step_grads(args, ad, workdir, inputs, params, [], [])
    entries, missing = [], []
    for pname, g in grads.items():
        if g is None:
            missing.append(pname)
            continue
        prng = np.random.default_rng(zlib.crc32(("entries" + pname).encode()))
        flat = g.reshape(-1)
        nonzero, zero = np.flatnonzero(flat), np.flatnonzero(flat == 0)
        pick = list(prng.choice(nonzero, min(GPT_ENTRIES, nonzero.size), replace=False))
        # the entry with the largest gradient too: the best-conditioned check of the scale
        pick.append(int(np.argmax(np.abs(flat))))
        if zero.size:
            pick.append(int(prng.choice(zero)))
        for idx in sorted(set(int(i) for i in pick)):
            entries.append((pname, idx))
    loss, grads, losses = train_step_grads(args, ad, workdir, inputs, params, [],
                                           fd_probes(entries, H))
    rows, atol = compare(entries, grads, losses, loss, H)
    return rows, atol, missing, loss, len(params)


def main():
    global H, STENCIL
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opt", required=True, help="pipemesh-opt binary")
    parser.add_argument("--interp", required=True, help="pmesh-interp binary")
    parser.add_argument("--fixtures", required=True, help="models/fixtures")
    parser.add_argument("--part", choices=("ops", "gpt", "all"), default="all")
    parser.add_argument("--only", default="", help="run cases whose name contains this")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every entry")
    parser.add_argument("--keep", help="keep modules, parameters and gradients here")
    parser.add_argument("--gpt", default=",".join(GPT_CASES),
                        help="comma-separated NAME[:FLAG] (a pipemesh-opt import flag, e.g. "
                             "--no-raise) for the whole-GPT part")
    parser.add_argument("--h", type=float, default=H, help="finite-difference step")
    parser.add_argument("--stencil", type=int, choices=(2, 4), default=STENCIL,
                        help="2: (L(+h) - L(-h)) / 2h; 4: the fourth-order central difference")
    args = parser.parse_args()
    H, STENCIL = args.h, args.stencil
    args.opt, args.interp = os.path.abspath(args.opt), os.path.abspath(args.interp)
    args.fixtures = os.path.abspath(args.fixtures)
    root = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="pmesh-grad-")
    start = time.time()
    failures = checked = 0
    worst_rel = worst_abs = 0.0

    if args.part in ("ops", "all"):
        build_cases()
        for c in CASES:
            if args.only not in c["name"]:
                continue
            checked += 1
            try:
                rows, atol, missing = check_op_case(args, c, root)
            except ToolError as e:
                failures += 1
                print(f"op  {c['name']:36s} FAIL  {e}", flush=True)
                continue
            rel, ab = summarize(rows, atol)
            ok = all(r[-1] for r in rows) and not missing
            failures += not ok
            worst_rel, worst_abs = max(worst_rel, rel), max(worst_abs, ab)
            print(f"op  {c['name']:36s} {'PASS' if ok else 'FAIL'}  {len(rows):3d} entries  "
                  f"max rel {rel:.1e}  max abs {ab:.1e}"
                  + (f"  no gradient for {missing}" if missing else ""), flush=True)
            print_failures(rows, args.verbose)

    if args.part in ("gpt", "all"):
        for spec in args.gpt.split(","):
            name, _, flag = spec.partition(":")
            if args.only not in spec:
                continue
            checked += 1
            try:
                rows, atol, missing, loss, nparams = gpt_case(args, name, root,
                                                              [flag] if flag else [])
            except ToolError as e:
                failures += 1
                print(f"gpt {spec:36s} FAIL  {e}", flush=True)
                continue
            rel, ab = summarize(rows, atol)
            ok = all(r[-1] for r in rows) and not missing
            failures += not ok
            worst_rel, worst_abs = max(worst_rel, rel), max(worst_abs, ab)
            nchecked = len({r[0] for r in rows})
            print(f"gpt {spec:36s} {'PASS' if ok else 'FAIL'}  {len(rows):3d} entries of "
                  f"{nchecked}/{nparams} params  loss {loss:.6f}  max rel {rel:.1e}  "
                  f"max abs {ab:.1e}" + (f"  no gradient for {missing}" if missing else ""),
                  flush=True)
            print_failures(rows, args.verbose)

    print(f"{checked - failures}/{checked} passed (|g - fd| <= {RTOL:g} * max(|g|, |fd|) + "
          f"{NOISE:g} * max(1, |loss|) / h, h = {H:g}, {STENCIL}-point central difference); "
          f"worst relative error {worst_rel:.1e}, "
          f"worst absolute {worst_abs:.1e}; {time.time() - start:.1f} s"
          + (f"; files in {root}" if args.keep or failures else ""))
    if not args.keep and not failures:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
