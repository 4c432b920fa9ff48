#!/usr/bin/env python3
"""Writes hand-made PipeMesh plans (docs/plan-format.md) for runtime tests.

The plan container, the safetensors weights and a tiny builder for manifests
whose programs are written by hand (no compiler involved), plus the models the
runtime tests train:

  tiny-gpt   one transformer block (embedding + positions, layer norms, fused
             qkv, causal attention, GELU MLP, tied head, cross-entropy), forward
             and backward written out with the pmesh kernel and gradient ops;
  zoo        an embedding model whose loss path runs the remaining ops
             (softmax over a non-last axis, slice, log_softmax, a computed
             additive attention mask, where/less/not/equal/and/cast, i32 ids,
             the float elementwise ops) with their gradients;
  mlp        a residual-MLP language model with a tied embedding, written as
             the per-rank programs of a pp x dp plan (docs/parallel-plan.md):
             send/recv between stages (gpipe or 1f1b order), the tied-weight
             all-reduce, and data parallelism at every ZeRO level.

Library use (runtime/tests/pipemesh-run/*.py):
    from make_test_plan import build_tiny_gpt, build_mlp, write_plan, ...

Command line:
    make_test_plan.py tiny-gpt -o tiny.plan [--batch 2 --seq 16 --microbatches 2]
    make_test_plan.py zoo -o zoo.plan
    make_test_plan.py mlp -o pp2dp2.plan --pp 2 --dp 2 --zero 1 --microbatches 4
    make_test_plan.py tiny-gpt -o bad.plan --corrupt version|truncate|checksum|magic

Run with /usr/bin/python3 (Debian's numpy).
"""
import argparse
import copy
import json
import math
import struct
import sys

import numpy as np

MAGIC = b"PMPLAN\0\0"
VERSION = 3
ALIGN = 64

_DTYPES = {  # plan dtype -> (numpy dtype, safetensors dtype)
    "f32": (np.float32, "F32"),
    "f64": (np.float64, "F64"),
    "i64": (np.int64, "I64"),
    "i32": (np.int32, "I32"),
    "i1": (np.uint8, "BOOL"),
}


def checksum64(data: bytes) -> int:
    """XXH3-64 (seed 0) of `data`: the plan and checkpoint checksum. From the C library
    libxxhash (what pipemesh-run inlines), loaded with ctypes: no Python package needed,
    and bench/gpu_bundle.sh carries libxxhash.so.0 to machines that lack it."""
    view = np.frombuffer(data, np.uint8)  # bytes, bytearray or memoryview, not copied
    return _libxxhash().XXH3_64bits(view.ctypes.data, view.size)


_LIBXXHASH = []


def _libxxhash():
    if not _LIBXXHASH:
        import ctypes
        import ctypes.util
        names = ["libxxhash.so.0", ctypes.util.find_library("xxhash")]
        for name in filter(None, names):
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        else:
            sys.exit("make_test_plan.py: libxxhash.so.0 not found (the plan checksum is "
                     "XXH3-64; install libxxhash0, or add its folder to LD_LIBRARY_PATH)")
        lib.XXH3_64bits.restype = ctypes.c_uint64
        lib.XXH3_64bits.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBXXHASH.append(lib)
    return _LIBXXHASH[0]


def plan_dtype(a: np.ndarray) -> str:
    if a.dtype == np.float32:
        return "f32"
    if a.dtype == np.float64:
        return "f64"
    if a.dtype == np.int64:
        return "i64"
    if a.dtype == np.int32:
        return "i32"
    if a.dtype == np.bool_ or a.dtype == np.uint8:
        return "i1"
    raise ValueError(f"no plan dtype for {a.dtype}")


def safetensors_bytes(tensors: dict, metadata: dict = None) -> bytes:
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a).reshape(np.shape(a))  # ascontiguousarray makes 0-d 1-d
        st = _DTYPES[plan_dtype(a)][1]
        raw = a.astype(np.uint8).tobytes() if st == "BOOL" else a.tobytes()
        header[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_safetensors(data: bytes) -> dict:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    np_of = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32,
             "BOOL": np.uint8, "U8": np.uint8}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[base + b : base + end], dtype=np_of[e["dtype"]]).reshape(e["shape"])
    return out


def plan_bytes(manifest: dict, weights: dict, version: int = VERSION) -> bytes:
    m = json.dumps(manifest, separators=(",", ":")).encode()
    w = safetensors_bytes(weights)
    body = m + w
    head = MAGIC + struct.pack("<II", version, 0) + struct.pack("<QQQ", len(m), len(w), checksum64(body))
    return head + body


def write_plan(path: str, manifest: dict, weights: dict, version: int = VERSION, corrupt: str = None):
    data = bytearray(plan_bytes(manifest, weights, version))
    if corrupt == "version":
        data[8:12] = struct.pack("<I", VERSION + 1)
    elif corrupt == "truncate":
        data = data[: len(data) - 100]
    elif corrupt == "checksum":
        data[-5] ^= 0x40  # one flipped bit in the weights
    elif corrupt == "magic":
        data[0:8] = b"NOTAPLAN"
    elif corrupt:
        raise ValueError(f"unknown corruption {corrupt}")
    with open(path, "wb") as f:
        f.write(bytes(data))


def read_plan(path: str):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == MAGIC
    L, W = struct.unpack("<QQ", data[16:32])
    manifest = json.loads(data[40 : 40 + L])
    weights = read_safetensors(data[40 + L : 40 + L + W])
    return manifest, weights


def replica_entry(entry: dict, d: int) -> dict:
    """Replica d of an elided plan's listed entry (dp rank 0's of a pipeline rank), by the
    rules of docs/parallel-plan.md: rank, peers and tied group shifted by d, ZeRO shards at
    elem_offset + d * shard_numel, norm_dp0_only resolved. The tests' statement of the
    rules, independent of the compiler's, the runtime's and the simulator's."""
    r = copy.deepcopy(entry)
    r["rank"] += d
    r["dp_rank"] = d
    r.get("groups", {})["tied"] = [q + d for q in r.get("groups", {}).get("tied", [])]
    for b in r["buffers"]:
        if "shard_numel" in b:
            b["elem_offset"] = b.get("elem_offset", 0) + d * b["shard_numel"]
    for ins in r["program"]:
        if "peer" in ins:
            ins["peer"] += d
        for e in ins.get("params", []):
            if e.pop("norm_dp0_only", False) and d:
                e["norm_weight"] = 0.0
    return r


class Builder:
    """Buffers, parameters and a hand-written program for one rank."""

    def __init__(self, *, batch, seq, vocab, microbatches=1, dp=1, pp=1, world_size=None,
                 source="model.onnx"):
        self.batch, self.seq, self.vocab = batch, seq, vocab
        self.microbatches, self.dp, self.pp = microbatches, dp, pp
        self.world_size = world_size or dp * pp
        self.source = source
        self.bufs, self.program, self.params, self.weights = [], [], [], {}
        self.shapes, self.dtypes = {}, {}
        self.param_bufs = {}

    # --- buffers ---------------------------------------------------------------
    def buf(self, name, shape, dtype="f32", kind="activation", **extra):
        i = len(self.bufs)
        self.bufs.append(dict(id=i, name=name, shape=list(shape), dtype=dtype, kind=kind, **extra))
        self.shapes[i], self.dtypes[i] = list(shape), dtype
        return i

    def input(self, name, shape, dtype="i64"):
        return self.buf(name, shape, dtype, "input")

    def param(self, name, value, source=None, decay=None):
        value = np.asarray(value, dtype=np.float32)
        shape = list(value.shape)
        entry = {"name": name, "shape": shape, "decay": len(shape) >= 2 if decay is None else decay}
        if source is not None:
            entry["source"] = source
        self.params.append(entry)
        self.weights[name] = value
        ids = {k: self.buf(f"{name}.{k}" if k != "param" else name, shape, "f32", k, param=name)
               for k in ("param", "grad", "adam_m", "adam_v")}
        self.param_bufs[name] = ids
        return ids["param"]

    def grad(self, name):
        return self.param_bufs[name]["grad"]

    def constant(self, name, value):
        value = np.asarray(value)
        key = f"const.{name}"
        self.weights[key] = value
        return self.buf(name, value.shape, plan_dtype(value), "constant", data=key)

    # --- instructions ------------------------------------------------------------
    def emit(self, op, ins, outs, **attrs):
        inst = {"op": op, "in": list(ins), "out": list(outs)}
        if attrs:
            inst["attrs"] = attrs
        self.program.append(inst)

    def op(self, op, ins, shape, dtype="f32", name=None, **attrs):
        """One-result kernel op; returns the new activation buffer."""
        out = self.buf(name or f"{op}.{len(self.program)}", shape, dtype)
        self.emit(op, ins, [out], **attrs)
        return out

    def ops(self, op, ins, shapes, dtype="f32", **attrs):
        outs = [self.buf(f"{op}.{len(self.program)}.{k}", s, dtype) for k, s in enumerate(shapes)]
        self.emit(op, ins, outs, **attrs)
        return outs

    def control(self, op, **fields):
        self.program.append({"op": op, **fields})

    def reshape(self, x, shape):
        return self.op("reshape", [x], shape)

    # --- manifest ----------------------------------------------------------------
    def manifest(self, rank=0, ranks=None, version=VERSION, arena_slack=0):
        off = 0
        bufs = []
        for b in self.bufs:
            nbytes = int(np.prod(b["shape"], dtype=np.int64)) * np.dtype(_DTYPES[b["dtype"]][0]).itemsize
            bufs.append(dict(b, offset=off, bytes=nbytes))
            off += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        rank_entry = {"rank": rank, "arena_bytes": off + arena_slack, "buffers": bufs,
                      "program": self.program}
        num_params = int(sum(np.prod(p["shape"]) for p in self.params))
        return {
            "format": "pipemesh-plan",
            "version": version,
            "model": {"source": self.source, "batch": self.batch, "seq": self.seq,
                      "vocab": self.vocab, "num_params": num_params, "flops_per_step": 0,
                      "loss": "appended"},
            "parallel": {"pp": self.pp, "dp": self.dp, "vpp": 1,
                         "microbatches": self.microbatches, "world_size": self.world_size},
            "inputs": {"tokens": "input_ids", "targets": "targets"},
            "params": self.params,
            "ranks": ranks if ranks is not None else [rank_entry],
        }


def adamw_instruction(b: Builder):
    return {"op": "adamw", "params": [
        {"param": ids["param"], "grad": ids["grad"], "m": ids["adam_m"], "v": ids["adam_v"],
         "decay": next(p["decay"] for p in b.params if p["name"] == name)}
        for name, ids in b.param_bufs.items()]}


# --- tiny GPT ---------------------------------------------------------------------

def tiny_gpt_weights(V, C, T, seed=0):
    rng = np.random.default_rng(seed)
    n = lambda *s: (rng.standard_normal(s) * 0.02).astype(np.float32)
    z = lambda *s: np.zeros(s, np.float32)
    o = lambda *s: np.ones(s, np.float32)
    return {
        "wte": n(V, C), "wpe": n(T, C) * 0.5,
        "ln1.weight": o(C), "ln1.bias": z(C),
        "attn.qkv.weight": n(C, 3 * C), "attn.qkv.bias": z(3 * C),
        "attn.proj.weight": n(C, C), "attn.proj.bias": z(C),
        "ln2.weight": o(C), "ln2.bias": z(C),
        "mlp.fc.weight": n(C, 4 * C), "mlp.fc.bias": z(4 * C),
        "mlp.proj.weight": n(4 * C, C), "mlp.proj.bias": z(C),
        "lnf.weight": o(C), "lnf.bias": z(C),
    }


# Parameters that an exporter would deduplicate behind Identity (same initial
# values as their source): name -> source initializer.
TINY_GPT_SOURCES = {"ln2.bias": "ln1.bias", "lnf.bias": "ln1.bias", "attn.proj.bias": "ln1.bias"}


def build_tiny_gpt(batch=2, seq=16, vocab=256, embd=32, heads=4, microbatches=1, seed=0,
                   source="tiny_gpt.onnx"):
    B, T, V, C, H, M = batch, seq, vocab, embd, heads, microbatches
    D = C // H
    N = B * T
    b = Builder(batch=B, seq=T, vocab=V, microbatches=M, source=source)
    w = tiny_gpt_weights(V, C, T, seed)
    P = {k: b.param(k, v, source=TINY_GPT_SOURCES.get(k)) for k, v in w.items()}
    ids = b.input("input_ids", [B, T])
    tgt = b.input("targets", [B, T])
    one = b.constant("dloss", np.array(1.0, np.float32))
    b.control("zero", out=[b.grad(k) for k in P])
    for j in range(M):
        b.control("load_microbatch", index=j, out=[ids, tgt])
        # forward
        x0 = b.op("embedding", [P["wte"], ids], [B, T, C])
        h = b.op("add", [x0, P["wpe"]], [B, T, C])
        ln1 = b.op("layer_norm", [h, P["ln1.weight"], P["ln1.bias"]], [B, T, C], epsilon=1e-5, axis=-1)
        qkv = b.op("matmul", [ln1, P["attn.qkv.weight"], P["attn.qkv.bias"]], [B, T, 3 * C])
        q, k, v = b.ops("split", [qkv], [[B, T, C]] * 3, axis=2, sizes=[C, C, C])
        heads_ = [b.op("transpose", [b.reshape(t, [B, T, H, D])], [B, H, T, D], perm=[0, 2, 1, 3])
                  for t in (q, k, v)]
        att = b.op("attention", heads_, [B, H, T, D], scale=1.0 / math.sqrt(D), causal=True)
        ar = b.reshape(b.op("transpose", [att], [B, T, H, D], perm=[0, 2, 1, 3]), [B, T, C])
        proj = b.op("matmul", [ar, P["attn.proj.weight"], P["attn.proj.bias"]], [B, T, C])
        h2 = b.op("add", [h, proj], [B, T, C])
        ln2 = b.op("layer_norm", [h2, P["ln2.weight"], P["ln2.bias"]], [B, T, C])
        fc = b.op("matmul", [ln2, P["mlp.fc.weight"], P["mlp.fc.bias"]], [B, T, 4 * C])
        ge = b.op("gelu", [fc], [B, T, 4 * C], approximate="tanh")
        fc2 = b.op("matmul", [ge, P["mlp.proj.weight"], P["mlp.proj.bias"]], [B, T, C])
        h3 = b.op("add", [h2, fc2], [B, T, C])
        lnf = b.op("layer_norm", [h3, P["lnf.weight"], P["lnf.bias"]], [B, T, C])
        logits = b.op("matmul", [lnf, P["wte"]], [B, T, V], transpose_b=True)
        loss = b.op("cross_entropy", [logits, tgt], [], ignore_index=-100, reduction="mean")
        b.control("loss", **{"in": [loss]}, scale=1.0 / M)
        # backward
        grads = {}
        dlogits = b.op("cross_entropy_grad", [one, logits, tgt], [B, T, V], reduction="mean")
        dlnf = b.op("matmul", [dlogits, P["wte"]], [B, T, C])
        grads["wte.head"] = b.op("matmul", [b.reshape(dlogits, [N, V]), b.reshape(lnf, [N, C])],
                                 [V, C], transpose_a=True)
        dh3, grads["lnf.weight"], grads["lnf.bias"] = b.ops(
            "layer_norm_grad", [dlnf, h3, P["lnf.weight"]], [[B, T, C], [C], [C]], epsilon=1e-5, axis=-1)
        grads["mlp.proj.weight"] = b.op("matmul", [b.reshape(ge, [N, 4 * C]), b.reshape(dh3, [N, C])],
                                        [4 * C, C], transpose_a=True)
        grads["mlp.proj.bias"] = b.op("reduce_sum", [dh3], [C], axes=[0, 1], keepdims=False)
        dge = b.op("matmul", [dh3, P["mlp.proj.weight"]], [B, T, 4 * C], transpose_b=True)
        dfc = b.op("gelu_grad", [dge, fc], [B, T, 4 * C], approximate="tanh")
        grads["mlp.fc.weight"] = b.op("matmul", [b.reshape(ln2, [N, C]), b.reshape(dfc, [N, 4 * C])],
                                      [C, 4 * C], transpose_a=True)
        grads["mlp.fc.bias"] = b.op("reduce_sum", [dfc], [1, 1, 4 * C], axes=[0, 1], keepdims=True)
        dln2 = b.op("matmul", [dfc, P["mlp.fc.weight"]], [B, T, C], transpose_b=True)
        dh2a, grads["ln2.weight"], grads["ln2.bias"] = b.ops(
            "layer_norm_grad", [dln2, h2, P["ln2.weight"]], [[B, T, C], [C], [C]])
        dh2 = b.op("add", [dh3, dh2a], [B, T, C])
        grads["attn.proj.weight"] = b.op("matmul", [b.reshape(ar, [N, C]), b.reshape(dh2, [N, C])],
                                         [C, C], transpose_a=True)
        grads["attn.proj.bias"] = b.op("reduce_sum", [dh2], [C], axes=[1, 0], keepdims=False)
        dar = b.op("matmul", [dh2, P["attn.proj.weight"]], [B, T, C], transpose_b=True)
        datt = b.op("transpose", [b.reshape(dar, [B, T, H, D])], [B, H, T, D], perm=[0, 2, 1, 3])
        dq, dk, dv = b.ops("attention_grad", [datt] + heads_, [[B, H, T, D]] * 3,
                           scale=1.0 / math.sqrt(D), causal=True)
        back = [b.reshape(b.op("transpose", [t], [B, T, H, D], perm=[0, 2, 1, 3]), [B, T, C])
                for t in (dq, dk, dv)]
        dqkv = b.op("concat", back, [B, T, 3 * C], axis=-1)
        grads["attn.qkv.weight"] = b.op("matmul", [b.reshape(ln1, [N, C]), b.reshape(dqkv, [N, 3 * C])],
                                        [C, 3 * C], transpose_a=True)
        grads["attn.qkv.bias"] = b.op("reduce_sum", [dqkv], [3 * C], axes=[0, 1], keepdims=False)
        dln1 = b.op("matmul", [dqkv, P["attn.qkv.weight"]], [B, T, C], transpose_b=True)
        dha, grads["ln1.weight"], grads["ln1.bias"] = b.ops(
            "layer_norm_grad", [dln1, h, P["ln1.weight"]], [[B, T, C], [C], [C]])
        dh = b.op("add", [dh2, dha], [B, T, C])
        grads["wpe"] = b.op("reduce_sum", [dh], [T, C], axes=[0], keepdims=False)
        grads["wte.emb"] = b.op("embedding_grad", [dh, ids], [V, C])
        for name, g in grads.items():
            b.control("accumulate", **{"in": [g], "out": [b.grad(name.split(".head")[0].split(".emb")[0])]},
                      scale=1.0 / M)
    b.program.append(adamw_instruction(b))
    return b, w


# --- op zoo -------------------------------------------------------------------------

def build_zoo(batch=2, seq=8, vocab=64, embd=16, heads=2, microbatches=1, seed=1, aux_scale=0.01):
    """Loss = CE(log_softmax(attn(...))) + aux_scale * aux, aux gradient-free."""
    B, T, V, C, H, M = batch, seq, vocab, embd, heads, microbatches
    D = C // H
    Ch = C // 2
    N = B * T
    rng = np.random.default_rng(seed)
    w = {"emb": (rng.standard_normal((V, C)) * 0.5).astype(np.float32),
         "head": (rng.standard_normal((Ch, V)) * 0.2).astype(np.float32),
         "scale": np.linspace(0.5, 1.5, Ch).astype(np.float32)}
    b = Builder(batch=B, seq=T, vocab=V, microbatches=M, source="zoo.onnx")
    P = {k: b.param(k, v) for k, v in w.items()}
    ids = b.input("input_ids", [B, T])
    tgt = b.input("targets", [B, T])
    one = b.constant("dloss", np.array(1.0, np.float32))
    pos = b.constant("pos", np.arange(T, dtype=np.int64))
    zeros = b.constant("zeros", np.zeros((1,), np.float32))
    neginf = b.constant("neginf", np.array([-1e9], np.float32))
    half = b.constant("half", np.array(0.5, np.float32))
    two = b.constant("two", np.array(2.0, np.float32))
    b.control("zero", out=[b.grad(k) for k in P])
    for j in range(M):
        b.control("load_microbatch", index=j, out=[ids, tgt])
        # additive causal mask from integer ops: mask[i, j] = 0 if j <= i else -1e9
        rowp = b.op("reshape", [pos], [T, 1], dtype="i64")
        colp = b.op("reshape", [pos], [1, T], dtype="i64")
        future = b.op("less", [rowp, colp], [T, T], dtype="i1")          # i < j
        allowed = b.op("not", [future], [T, T], dtype="i1")
        same = b.op("equal", [rowp, rowp], [T, 1], dtype="i1")           # all true
        allowed2 = b.op("and", [allowed, same], [T, T], dtype="i1")
        mask = b.op("where", [allowed2, zeros, neginf], [T, T])
        ids32 = b.op("cast", [ids], [B, T], dtype="i32")
        e = b.op("embedding", [P["emb"], ids32], [B, T, C])
        s = b.op("softmax", [e], [B, T, C], axis=1)                      # over the sequence axis
        sh = b.op("slice", [s], [B, T, Ch], starts=[0, 0, 0], limits=[B, T, C], strides=[1, 1, 2])
        sc = b.op("mul", [sh, P["scale"]], [B, T, Ch])
        qh = b.op("transpose", [b.reshape(sc, [B, T, H, Ch // H])], [B, H, T, Ch // H], perm=[0, 2, 1, 3])
        att = b.op("attention", [qh, qh, qh, mask], [B, H, T, Ch // H], scale=0.7, causal=False)
        ar = b.reshape(b.op("transpose", [att], [B, T, H, Ch // H], perm=[0, 2, 1, 3]), [B, T, Ch])
        logits = b.op("matmul", [ar, P["head"]], [B, T, V])
        lp = b.op("log_softmax", [logits], [B, T, V], axis=-1)
        losses = b.op("cross_entropy", [lp, tgt], [B, T], reduction="none")
        loss = b.op("reduce_mean", [losses], [], axes=[0, 1], keepdims=False)
        b.control("loss", **{"in": [loss]}, scale=1.0 / M)
        # aux (no gradient): mean of a chain of elementwise ops of e
        f = b.op("mul", [e, half], [B, T, C])
        f = b.op("pow", [f, two], [B, T, C])
        f = b.op("add", [f, b.op("exp", [b.op("neg", [f], [B, T, C])], [B, T, C])], [B, T, C])
        f = b.op("sqrt", [f], [B, T, C])
        f = b.op("log", [b.op("add", [f, f], [B, T, C])], [B, T, C])
        f = b.op("tanh", [b.op("sub", [f, half], [B, T, C])], [B, T, C])
        f = b.op("erf", [b.op("div", [f, two], [B, T, C])], [B, T, C])
        f = b.op("max", [f, zeros], [B, T, C])
        f = b.op("gelu", [f], [B, T, C], approximate="none")
        fb = b.op("broadcast", [b.op("reduce_mean", [f], [B, T, 1], axes=[-1])], [B, T, C])
        idsf = b.op("cast", [ids], [B, T], dtype="f32")
        g = b.op("mul", [fb, b.reshape(idsf, [B, T, 1])], [B, T, C])
        aux = b.op("reduce_mean", [g], [], axes=[0, 1, 2], keepdims=False)
        b.control("loss", **{"in": [aux]}, scale=aux_scale / M)
        # backward of the main loss
        dl = b.op("broadcast", [b.op("div", [one, b.constant(f"n{j}", np.array(float(N), np.float32))], [])], [B, T])
        dlp = b.op("cross_entropy_grad", [dl, lp, tgt], [B, T, V], reduction="none")
        dlogits = b.op("log_softmax_grad", [dlp, lp], [B, T, V], axis=-1)
        g_head = b.op("matmul", [ar, dlogits], [B, Ch, V], transpose_a=True)   # batched
        g_head = b.op("reduce_sum", [g_head], [Ch, V], axes=[0], keepdims=False)
        dar = b.op("matmul", [dlogits, P["head"]], [B, T, Ch], transpose_b=True)
        datt = b.op("transpose", [b.reshape(dar, [B, T, H, Ch // H])], [B, H, T, Ch // H], perm=[0, 2, 1, 3])
        dq, dk, dv = b.ops("attention_grad", [datt, qh, qh, qh, mask], [[B, H, T, Ch // H]] * 3,
                           scale=0.7, causal=False)
        dqh = b.op("add", [b.op("add", [dq, dk], [B, H, T, Ch // H]), dv], [B, H, T, Ch // H])
        dsc = b.reshape(b.op("transpose", [dqh], [B, T, H, Ch // H], perm=[0, 2, 1, 3]), [B, T, Ch])
        g_scale = b.op("reduce_sum", [b.op("mul", [dsc, sh], [B, T, Ch])], [Ch], axes=[0, 1], keepdims=False)
        dsh = b.op("mul", [dsc, P["scale"]], [B, T, Ch])
        ds = b.op("slice_grad", [dsh], [B, T, C], starts=[0, 0, 0], limits=[B, T, C], strides=[1, 1, 2])
        de = b.op("softmax_grad", [ds, s], [B, T, C], axis=1)
        g_emb = b.op("embedding_grad", [de, ids32], [V, C])
        for name, gb in (("head", g_head), ("scale", g_scale), ("emb", g_emb)):
            b.control("accumulate", **{"in": [gb], "out": [b.grad(name)]}, scale=1.0 / M)
    b.program.append(adamw_instruction(b))
    return b, w


# --- multi-rank plans: a residual-MLP language model, pipeline x data parallel ------

def mlp_weights(V, C, H, layers, seed=0):
    rng = np.random.default_rng(seed)
    n = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)
    w = {"wte": n(V, C)}
    for i in range(layers):
        w[f"blk{i}.fc1.weight"] = n(C, H)
        w[f"blk{i}.fc1.bias"] = n(H) * 0.1
        w[f"blk{i}.fc2.weight"] = n(H, C)
        w[f"blk{i}.fc2.bias"] = n(C) * 0.1
    w["ln.weight"] = np.ones(C, np.float32) + n(C)
    w["ln.bias"] = n(C)
    return w


def stage_layers(layers, pp):
    """Blocks per pipeline stage: as even as possible, the extra ones first."""
    base, extra = divmod(layers, pp)
    out, at = [], 0
    for p in range(pp):
        k = base + (1 if p < extra else 0)
        out.append(list(range(at, at + k)))
        at += k
    return out


def pipeline_order(schedule, pp, p, M):
    """The (F|B, micro-batch) actions of stage p: gpipe, or 1f1b (warm-up
    pp - p - 1 forwards, then one forward one backward, then the rest)."""
    if schedule == "gpipe" or pp == 1:
        return [("F", j) for j in range(M)] + [("B", j) for j in range(M)]
    if schedule != "1f1b":
        raise ValueError(f"schedule {schedule}: this builder writes gpipe and 1f1b")
    w = min(pp - p - 1, M)
    order = [("F", j) for j in range(w)]
    for i in range(M - w):
        order += [("F", w + i), ("B", i)]
    order += [("B", j) for j in range(M - w, M)]
    return order


def build_mlp(batch=2, seq=8, vocab=128, embd=13, hidden=21, layers=None, pp=1, dp=1, zero=0,
              microbatches=2, schedule="1f1b", seed=0):
    """A language model of residual GELU-MLP blocks with a tied embedding / head
    (embedding -> blocks -> layer norm -> logits = x @ wte^T -> cross-entropy),
    written as the programs of pp * dp ranks the way docs/parallel-plan.md
    describes them: rank = p * dp + d; blocks split over the stages; stage 0
    holds the embedding, the last stage the head (the tied `wte` lives on both,
    its gradients summed over the `tied` group before the data-parallel
    reduction); activations go forward with send/recv (tag 2j), their gradients
    back (tag 2j+1); data parallelism per `zero`:
      0  full gradients, all-reduce over dp (scale 1/dp), AdamW on full tensors;
      1  full gradients reduce-scattered into shards, AdamW on shards (param,
         grad, m, v), all-gather of the parameter shards into the full ones
         (one collective per parameter: padded ones and unpadded ones);
      2  each micro-batch's gradients reduce-scattered at once (one packed
         collective) and accumulated into gradient shards; AdamW on shards, one
         packed all-gather;
      3  as 2, and the full parameters are activations all-gathered from the
         shards before each forward and backward (and `free`d after).
    Sizes are odd on purpose (13, 21, 273 elements) so that shards are padded.
    pp = dp = 1 with microbatches = M * dp is the single-rank equivalent.
    Returns (manifest, weights)."""
    B, T, V, C, H, M = batch, seq, vocab, embd, hidden, microbatches
    N = B * T
    layers = layers or max(2, pp)
    if zero and dp == 1:
        raise ValueError("zero > 0 needs dp > 1")
    w = mlp_weights(V, C, H, layers, seed)
    params = [{"name": k, "shape": list(v.shape), "decay": v.ndim >= 2} for k, v in w.items()]
    per_stage = stage_layers(layers, pp)
    world = pp * dp
    ranks, consts = [], {}
    for p in range(pp):
        first, last = p == 0, p == pp - 1
        mine = (["wte"] if first or last else []) + \
            [f"blk{i}.{k}" for i in per_stage[p] for k in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")] + \
            (["ln.weight", "ln.bias"] if last else [])
        for d in range(dp):
            r = p * dp + d
            b = Builder(batch=B, seq=T, vocab=V, microbatches=M, dp=dp, pp=pp)
            tied_copy = pp > 1 and last and "wte" in mine  # the head's copy: counted on stage 0
            P = {}
            for name in mine:
                shape = list(w[name].shape)
                numel = int(np.prod(shape))
                S = -(-numel // dp)
                e = {}
                if zero < 3:
                    e["full"] = b.buf(name, shape, kind="param", param=name)
                else:
                    e["full"] = b.buf(name + ".full", shape)
                if zero <= 1:
                    e["grad"] = b.buf(name + ".grad", shape, kind="grad", param=name)
                if zero == 0:
                    e["m"] = b.buf(name + ".adam_m", shape, kind="adam_m", param=name)
                    e["v"] = b.buf(name + ".adam_v", shape, kind="adam_v", param=name)
                else:
                    sh = dict(param=name, elem_offset=d * S, shard_numel=S, padded_numel=S * dp)
                    e["pshard"] = b.buf(name + ".shard", [S], kind="param", **sh)
                    e["gshard"] = b.buf(name + ".grad.shard", [S], kind="grad", **sh)
                    e["m"] = b.buf(name + ".adam_m", [S], kind="adam_m", **sh)
                    e["v"] = b.buf(name + ".adam_v", [S], kind="adam_v", **sh)
                P[name] = e
            full = lambda name: P[name]["full"]
            one = b.constant("dloss", np.array(1.0, np.float32)) if last else None
            prev_rank, next_rank = (p - 1) * dp + d, (p + 1) * dp + d
            scale_acc = 1.0 / M if zero == 0 else 1.0 / (M * dp)

            def gather_params():
                if zero == 3:
                    b.program.append({"op": "allgather", "group": "dp",
                                      "in": [P[n]["pshard"] for n in mine],
                                      "out": [P[n]["full"] for n in mine]})

            def free_params():
                if zero == 3:
                    b.program.append({"op": "free", "bufs": [P[n]["full"] for n in mine]})

            b.control("zero", out=[P[n]["grad"] if zero <= 1 else P[n]["gshard"] for n in mine])
            saved = {}
            for kind, j in pipeline_order(schedule, pp, p, M):
                if kind == "F":
                    gather_params()
                    st = saved[j] = {}
                    if first:
                        st["ids"] = b.input(f"input_ids.{j}", [B, T])
                    if last:
                        st["tgt"] = b.input(f"targets.{j}", [B, T])
                    if first and last:
                        b.control("load_microbatch", index=j, out=[st["ids"], st["tgt"]])
                    elif first:
                        b.control("load_microbatch", index=j, what="tokens", out=[st["ids"]])
                    elif last:
                        b.control("load_microbatch", index=j, what="targets", out=[st["tgt"]])
                    if first:
                        x = b.op("embedding", [full("wte"), st["ids"]], [B, T, C])
                    else:
                        x = b.buf(f"x.recv.{j}", [B, T, C])
                        b.control("recv", out=[x], peer=prev_rank, tag=2 * j)
                    st["blocks"] = []
                    for i in per_stage[p]:
                        a = b.op("matmul", [x, full(f"blk{i}.fc1.weight"), full(f"blk{i}.fc1.bias")], [B, T, H])
                        g = b.op("gelu", [a], [B, T, H], approximate="tanh")
                        h = b.op("matmul", [g, full(f"blk{i}.fc2.weight"), full(f"blk{i}.fc2.bias")], [B, T, C])
                        st["blocks"].append((i, x, a, g))
                        x = b.op("add", [x, h], [B, T, C])
                    if last:
                        st["x"] = x
                        st["l"] = b.op("layer_norm", [x, full("ln.weight"), full("ln.bias")], [B, T, C])
                        st["logits"] = b.op("matmul", [st["l"], full("wte")], [B, T, V], transpose_b=True)
                        loss = b.op("cross_entropy", [st["logits"], st["tgt"]], [], reduction="mean")
                        b.control("loss", **{"in": [loss]}, scale=1.0 / (M * dp))
                    else:
                        b.control("send", **{"in": [x]}, peer=next_rank, tag=2 * j)
                    free_params()
                else:
                    gather_params()
                    st = saved[j]
                    grads = []  # (param, micro-batch gradient)
                    if last:
                        dlogits = b.op("cross_entropy_grad", [one, st["logits"], st["tgt"]], [B, T, V],
                                       reduction="mean")
                        dl = b.op("matmul", [dlogits, full("wte")], [B, T, C])
                        grads.append(("wte", b.op("matmul", [b.reshape(dlogits, [N, V]), b.reshape(st["l"], [N, C])],
                                                  [V, C], transpose_a=True)))
                        dx, glw, glb = b.ops("layer_norm_grad", [dl, st["x"], full("ln.weight")],
                                             [[B, T, C], [C], [C]])
                        grads += [("ln.weight", glw), ("ln.bias", glb)]
                    else:
                        dx = b.buf(f"dx.recv.{j}", [B, T, C])
                        b.control("recv", out=[dx], peer=next_rank, tag=2 * j + 1)
                    for i, xin, a, g in reversed(st["blocks"]):
                        grads.append((f"blk{i}.fc2.weight", b.op(
                            "matmul", [b.reshape(g, [N, H]), b.reshape(dx, [N, C])], [H, C], transpose_a=True)))
                        grads.append((f"blk{i}.fc2.bias", b.op("reduce_sum", [dx], [C], axes=[0, 1], keepdims=False)))
                        dg = b.op("matmul", [dx, full(f"blk{i}.fc2.weight")], [B, T, H], transpose_b=True)
                        da = b.op("gelu_grad", [dg, a], [B, T, H], approximate="tanh")
                        grads.append((f"blk{i}.fc1.weight", b.op(
                            "matmul", [b.reshape(xin, [N, C]), b.reshape(da, [N, H])], [C, H], transpose_a=True)))
                        grads.append((f"blk{i}.fc1.bias", b.op("reduce_sum", [da], [H], axes=[0, 1], keepdims=False)))
                        dxin = b.op("matmul", [da, full(f"blk{i}.fc1.weight")], [B, T, C], transpose_b=True)
                        dx = b.op("add", [dx, dxin], [B, T, C])
                    if first:
                        grads.append(("wte", b.op("embedding_grad", [dx, st["ids"]], [V, C])))
                    else:
                        b.control("send", **{"in": [dx]}, peer=prev_rank, tag=2 * j + 1)
                    free_params()
                    if zero <= 1:
                        b.control("accumulate", **{"in": [g for _, g in grads],
                                                   "out": [P[n]["grad"] for n, _ in grads]}, scale=scale_acc)
                    else:
                        tmp = [b.buf(f"{n}.rs.{j}.{k}", b.shapes[P[n]["gshard"]])
                               for k, (n, _) in enumerate(grads)]
                        b.program.append({"op": "reduce_scatter", "group": "dp",
                                          "in": [g for _, g in grads], "out": tmp})
                        b.control("accumulate", **{"in": tmp, "out": [P[n]["gshard"] for n, _ in grads]},
                                  scale=scale_acc)
            b.control("wait_sends")
            gkey = "grad" if zero <= 1 else "gshard"
            if pp > 1 and (first or last):
                b.program.append({"op": "allreduce", "group": "tied", "bufs": [P["wte"][gkey]]})
            if dp > 1 and zero == 0:
                b.program.append({"op": "allreduce", "group": "dp", "bufs": [P[n]["grad"] for n in mine],
                                  "scale": 1.0 / dp})
            if zero == 1:  # one collective per parameter (2 and 3 pack them)
                for n in mine:
                    b.program.append({"op": "reduce_scatter", "group": "dp", "in": [P[n]["grad"]],
                                      "out": [P[n]["gshard"]]})
            entries = []
            for n in mine:
                weight = 0.0 if (n == "wte" and tied_copy) else 1.0
                if zero == 0:
                    entries.append({"param": P[n]["full"], "grad": P[n]["grad"], "m": P[n]["m"],
                                    "v": P[n]["v"], "decay": len(w[n].shape) >= 2,
                                    "norm_weight": weight if d == 0 else 0.0})
                else:  # decay from the params table (the shard is 1-D)
                    entries.append({"param": P[n]["pshard"], "grad": P[n]["gshard"], "m": P[n]["m"],
                                    "v": P[n]["v"], "norm_weight": weight})
            b.program.append({"op": "adamw", "params": entries})
            if zero == 1:
                for n in mine:
                    b.program.append({"op": "allgather", "group": "dp", "in": [P[n]["pshard"]],
                                      "out": [P[n]["full"]]})
            if zero == 2:
                b.program.append({"op": "allgather", "group": "dp", "in": [P[n]["pshard"] for n in mine],
                                  "out": [P[n]["full"] for n in mine]})
            entry = b.manifest(rank=r)["ranks"][0]
            entry.update({
                "pp_rank": p, "dp_rank": d, "chunks": [p], "first_stage": first, "last_stage": last,
                "groups": {"dp": [p * dp + e for e in range(dp)],
                           "tied": [d, (pp - 1) * dp + d] if pp > 1 and (first or last) else []}})
            ranks.append(entry)
            consts.update(b.weights)  # the constants (dloss)
    manifest = {
        "format": "pipemesh-plan", "version": VERSION,
        "model": {"source": "mlp.onnx", "batch": B, "seq": T, "vocab": V,
                  "num_params": int(sum(v.size for v in w.values())), "flops_per_step": 0,
                  "loss": "appended"},
        "parallel": {"pp": pp, "dp": dp, "vpp": 1, "microbatches": M, "world_size": world,
                     "schedule": schedule, "zero": zero},
        "inputs": {"tokens": "input_ids", "targets": "targets"},
        "params": params,
        "ranks": ranks,
    }
    return manifest, dict(w, **consts)


MODELS = {"tiny-gpt": build_tiny_gpt, "zoo": build_zoo}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(MODELS) + ["mlp"])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--microbatches", type=int)
    ap.add_argument("--pp", type=int, default=1, help="mlp: pipeline stages")
    ap.add_argument("--dp", type=int, default=1, help="mlp: data-parallel replicas")
    ap.add_argument("--zero", type=int, default=0, help="mlp: ZeRO level 0..3")
    ap.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"], help="mlp")
    ap.add_argument("--layers", type=int, help="mlp: number of blocks (default max(2, pp))")
    ap.add_argument("--corrupt", choices=["version", "truncate", "checksum", "magic"])
    args = ap.parse_args()
    kw = {k: getattr(args, k) for k in ("batch", "seq", "vocab", "microbatches") if getattr(args, k)}
    if args.model == "mlp":
        manifest, weights = build_mlp(pp=args.pp, dp=args.dp, zero=args.zero, schedule=args.schedule,
                                      layers=args.layers, **kw)
        write_plan(args.output, manifest, weights, corrupt=args.corrupt)
        print(f"wrote {args.output}: {len(manifest['ranks'])} ranks, "
              f"{sum(len(r['program']) for r in manifest['ranks'])} instructions")
        return 0
    b, _ = MODELS[args.model](**kw)
    write_plan(args.output, b.manifest(), b.weights, corrupt=args.corrupt)
    print(f"wrote {args.output}: {len(b.program)} instructions, {len(b.bufs)} buffers")


if __name__ == "__main__":
    sys.exit(main())
