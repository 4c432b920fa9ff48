"""Random mask expressions for the raise's mask evaluator, checked against numpy.

    random_masks.py --seed S --count N --tokens T > masks.mlir
    pipemesh-opt masks.mlir --split-input-file --pmesh-raise | random_masks.py --check ...

Each function is long_masks.py's softmax(where(mask, q @ k^T, -big)) @ v with
a mask built at random from positions (affine rows and columns, offset),
constants (scalars, splats, rows of arbitrary values), the ops an exporter
computes masks with (less, equal, not, and, where, add, sub, casts) and
reshapes, slices and transposes: perturbed causal masks and bands, most
of them one element away from being one. The same expression is evaluated
with numpy; --check reads the raised IR and fails unless every function whose
mask is a causal band (the window causalWindow defines) became attention with
that window and every other one kept its softmax.
"""
import argparse
import os
import random
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from long_masks import Func, dense_i64  # noqa: E402
from long_masks import ty as shaped_ty  # noqa: E402


def ty(shape, elt):
    return shaped_ty(shape, elt) if len(shape) else f"tensor<{elt}>"


class Gen:
    """Builds MLIR ops in `f` and their numpy values side by side."""

    def __init__(self, f, rng):
        self.f, self.rng = f, rng

    def const(self, values, shape, elt):
        """A constant of `shape` (one value broadcast, or `values` reshaped), written as a
        splat when every element is the same."""
        values = np.asarray(values)
        values = np.full(shape, values.reshape(-1)[0]) if values.size == 1 else values.reshape(shape)
        if elt == "i1":
            flat = values.reshape(-1)
            if flat.size and (flat == flat[0]).all():
                text = f"pmesh.constant dense<{'true' if flat[0] else 'false'}>"
            else:
                text = "pmesh.constant dense<[" + ", ".join("true" if v else "false" for v in flat) + "]>"
                if len(shape) != 1:
                    # MLIR wants nested brackets; a flat list reshaped keeps it simple.
                    name = self.f.op(text, ty([flat.size], "i1"))
                    return self.f.op(f"pmesh.reshape {name}", f"{ty([flat.size], 'i1')} -> {ty(shape, 'i1')}"), values.astype(bool)
            return self.f.op(text, ty(shape, "i1")), values.astype(bool)
        flat = values.reshape(-1).astype(np.int64)
        if flat.size and (flat == flat[0]).all():
            return self.f.op(f"pmesh.constant dense<{int(flat[0])}>", ty(shape, "i64")), values.astype(np.int64)
        return self.f.op(f"pmesh.constant {dense_i64(int(v) for v in flat)}", ty(shape, "i64")), values.astype(np.int64)

    def binary(self, op, a, b, elt, fn):
        (na, va), (nb, vb) = a, b
        out = fn(va, vb)
        return self.f.op(f"pmesh.{op} {na}, {nb}",
                         f"({ty(va.shape, dtype(va))}, {ty(vb.shape, dtype(vb))}) -> {ty(out.shape, elt)}"), out

    def less(self, a, b):
        return self.binary("less", a, b, "i1", lambda x, y: x < y)

    def equal(self, a, b):
        return self.binary("equal", a, b, "i1", lambda x, y: x == y)

    def add(self, a, b):
        return self.binary("add", a, b, "i64", lambda x, y: x + y)

    def sub(self, a, b):
        return self.binary("sub", a, b, "i64", lambda x, y: x - y)

    def and_(self, a, b):
        return self.binary("and", a, b, "i1", lambda x, y: x & y)

    def not_(self, a):
        n, v = a
        return self.f.op(f"pmesh.not {n}", ty(v.shape, "i1")), ~v

    def where(self, c, a, b):
        (nc, vc), (na, va), (nb, vb) = c, a, b
        out = np.where(vc, va, vb)
        elt = dtype(out)
        return self.f.op(f"pmesh.where {nc}, {na}, {nb}",
                         f"({ty(vc.shape, 'i1')}, {ty(va.shape, dtype(va))}, {ty(vb.shape, dtype(vb))}) -> {ty(out.shape, elt)}"), out

    def cast(self, a, elt):
        n, v = a
        out = (v != 0) if elt == "i1" else v.astype(np.int64)
        return self.f.op(f"pmesh.cast {n}", f"{ty(v.shape, dtype(v))} -> {ty(out.shape, elt)}"), out

    def reshape(self, a, shape):
        n, v = a
        out = v.reshape(shape)
        return self.f.op(f"pmesh.reshape {n}", f"{ty(v.shape, dtype(v))} -> {ty(shape, dtype(v))}"), out

    def broadcast(self, a, shape):
        n, v = a
        out = np.broadcast_to(v, shape).copy()
        return self.f.op(f"pmesh.broadcast {n}", f"{ty(v.shape, dtype(v))} -> {ty(shape, dtype(v))}"), out

    def slice(self, a, starts, ends, strides):
        n, v = a
        out = v[tuple(slice(s, e, st) for s, e, st in zip(starts, ends, strides))]
        return self.f.op(f"pmesh.slice {n}[{list(starts)} : {list(ends)} : {list(strides)}]",
                         f"{ty(v.shape, dtype(v))} -> {ty(out.shape, dtype(v))}"), out

    def transpose(self, a, perm):
        n, v = a
        out = v.transpose(perm)
        return self.f.op(f"pmesh.transpose {n} perm = {list(perm)}",
                         f"{ty(v.shape, dtype(v))} -> {ty(out.shape, dtype(v))}"), out


def dtype(v):
    return "i1" if v.dtype == bool else "i64"


def small(rng, t):
    return rng.choice([0, 0, 0, 1, -1, 2, -2, t // 2, t, t + 1])


def positions(g, n, shape, offset):
    """offset, offset + 1, ... laid out along the one dim of n in `shape`: a
    computed arange (affine rows), or now and then a stored one (held)."""
    values = np.arange(n, dtype=np.int64) + offset
    if g.rng.random() < 0.3:
        return g.const(values, shape, "i64")
    base = g.const(np.arange(n, dtype=np.int64), shape, "i64")
    if offset == 0:
        return base
    return g.add(base, g.const([offset], [], "i64"))


def causal_template(g, n, exact):
    """A [n, n] visibility that is causal when `exact`, else perturbed."""
    rng = g.rng
    ro, co = (0, 0) if exact or rng.random() < 0.5 else (small(rng, n), small(rng, n))
    rows, cols = positions(g, n, [n, 1], ro), positions(g, n, [1, n], co)
    form = rng.randrange(7)
    if form >= 5:  # slope 2: rows + rows against every other of 2n positions (a strided slice)
        rows2 = g.add(rows, rows)
        start = 0 if exact else rng.choice([0, 1])
        wide = g.const(np.arange(2 * n + 1, dtype=np.int64), [1, 2 * n + 1], "i64")
        cols2 = g.slice(wide, [0, start], [1, start + 2 * n - 1], [1, 2])
        if co:
            cols2 = g.add(cols2, g.const([co], [], "i64"))
        if form == 5:  # not(2 rows < 2 cols)
            return g.not_(g.less(rows2, cols2))
        # 2 cols < 2 rows + k: causal for k = 1, 2, not for 3 (a crossing between integers)
        k = rng.choice([1, 2]) if exact else rng.choice([1, 2, 3])
        return g.less(cols2, g.add(rows2, g.const([k], [], "i64")))
    if form == 0:  # not(rows < cols)
        return g.not_(g.less(rows, cols))
    if form == 1:  # cols < rows + 1
        return g.less(cols, g.add(rows, g.const([1 if exact else rng.choice([0, 1, 2])], [], "i64")))
    if form == 2:  # rows - cols >= 0 as not(rows - cols < 0), through a cast to i1 and back
        d = g.sub(rows, cols)
        lt = g.less(d, g.const([0 if exact else rng.choice([0, 1, -1])], [], "i64"))
        return g.cast(g.cast(g.not_(lt), "i64"), "i1")
    if form == 3:  # equal(cast(causal), 1)
        vis = g.not_(g.less(rows, cols))
        return g.equal(g.cast(vis, "i64"), g.const([1 if exact else rng.choice([0, 1])], [], "i64"))
    # where(rows < cols, false, true)
    lt = g.less(rows, cols)
    return g.where(lt, g.const([False], [], "i1"), g.const([True], [], "i1"))


def band(g, n, vis):
    """vis and (rows - cols < width), written with where or and."""
    rng = g.rng
    rows, cols = positions(g, n, [n, 1], 0), positions(g, n, [1, n], 0)
    width = rng.choice([1, 2, 3, n // 2, n - 1, n, n + 3])
    near = g.less(g.sub(rows, cols), g.const([width], [], "i64"))
    if rng.random() < 0.5:
        return g.where(vis, near, g.const([False], [], "i1"))
    return g.and_(vis, near)


def mask_expression(g, t):
    """A [t, t] boolean, built around a (perturbed) causal mask."""
    rng = g.rng
    exact = rng.random() < 0.6
    extra = rng.choice([0, 0, 3])  # built larger and sliced back
    n = t + extra
    vis = causal_template(g, n, exact)
    if rng.random() < 0.35:
        vis = band(g, n, vis)
    if rng.random() < 0.3:  # hide (or keep) one element
        r0, c0 = rng.randrange(n), rng.randrange(n)
        rows, cols = positions(g, n, [n, 1], 0), positions(g, n, [1, n], 0)
        hole = g.and_(g.equal(rows, g.const([r0], [], "i64")), g.equal(cols, g.const([c0], [], "i64")))
        vis = g.and_(vis, g.not_(hole))
    if rng.random() < 0.3:  # the same with 2 j for j < m, 2 j + odd after (runs cut by a strided slice)
        r0, c0, m = rng.randrange(n), rng.randrange(n), rng.randrange(1, n)
        rows = positions(g, n, [n, 1], 0)
        wide = np.arange(2 * n, dtype=np.int64)
        wide[2 * m:] += rng.choice([1, 3])
        cols2 = g.slice(g.const(wide, [1, 2 * n], "i64"), [0, 0], [1, 2 * n], [1, 2])
        hole = g.and_(g.equal(rows, g.const([r0], [], "i64")), g.equal(cols2, g.const([2 * c0], [], "i64")))
        vis = g.and_(vis, g.not_(hole))
    if rng.random() < 0.2:  # and with a stored row (arbitrary values: many runs)
        row = np.ones(n, dtype=bool)
        if rng.random() < 0.5:
            row[rng.randrange(n)] = False
        vis = g.and_(vis, g.const(row, [1, n], "i1"))
    if rng.random() < 0.15:  # and with a splat of the whole shape
        vis = g.and_(vis, g.const([rng.random() < 0.85], [n, n], "i1"))
    if extra:
        shift = rng.choice([extra, extra, 0, 1])
        vis = g.slice(vis, [shift, extra], [shift + t, extra + t], [1, 1])
    shape_form = rng.randrange(6)
    if shape_form == 1 and t % 2 == 0:  # rows of another length and back
        vis = g.reshape(g.reshape(vis, [t // 2, 2 * t]), [t, t])
    elif shape_form == 2:  # one flat row and back
        vis = g.reshape(g.reshape(vis, [t * t]), [t, t])
    elif shape_form == 3:  # transposed twice (held whole)
        vis = g.transpose(g.transpose(vis, [1, 0]), [1, 0])
    elif shape_form == 4:  # leading dims permuted
        vis = g.transpose(g.reshape(vis, [t, 1, t]), [1, 0, 2])
        vis = g.reshape(vis, [t, t])
    elif shape_form == 5:  # a strided slice of a mask twice as wide
        wide = g.broadcast(g.reshape(vis, [t, t, 1]), [t, t, 2])
        vis = g.slice(g.reshape(wide, [t, 2 * t]), [0, 0], [t, 2 * t], [1, 2])
    return vis


def expected_window(mask):
    """causalWindow's answer for a [t, t] visibility: the window (0: plain causal)
    or None."""
    t = mask.shape[0]
    last = int(mask[t - 1].sum())
    if last == 0:
        return None
    window = 0 if last == t else last
    j = np.arange(t)
    for i in range(t):
        first = 0 if window == 0 else i - window + 1
        if not np.array_equal(mask[i], (j >= first) & (j <= i)):
            return None
    return window


def generate(seed, count, t):
    rng = random.Random(seed)
    funcs, expect = [], {}
    for k in range(count):
        f = Func(f"m{k}", t)
        g = Gen(f, rng)
        name, value = mask_expression(g, t)
        funcs.append(f.emit(name, [t, t]))
        expect[f"m{k}"] = expected_window(value)
    return funcs, expect


def check(ir, expect):
    """Compares the raised functions with the numpy windows; returns the failures."""
    got = {}
    for chunk in re.split(r"^// -----$", ir, flags=re.M):
        m = re.search(r"func\.func @(\w+)\(", chunk)
        if not m:
            continue
        a = re.search(r"pmesh\.attention [^\n]*?\{([^}]*)\}", chunk)
        if a and "pmesh.softmax" not in chunk:
            w = re.search(r"window = (\d+)", a.group(1))
            got[m.group(1)] = int(w.group(1)) if w else 0
        else:
            got[m.group(1)] = None
    bad = []
    for name, want in expect.items():
        if name not in got:
            bad.append(f"{name}: missing from the output")
        elif got[name] != want:
            bad.append(f"{name}: raised as {got[name]}, numpy says {want}")
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--check", action="store_true", help="read the raised IR on stdin and compare")
    args = ap.parse_args()
    funcs, expect = generate(args.seed, args.count, args.tokens)
    if not args.check:
        print("\n\n// -----\n\n".join(funcs))
        return
    bad = check(sys.stdin.read(), expect)
    causal = sum(w is not None for w in expect.values())
    print(f"{len(expect)} masks, {causal} causal bands, {len(bad)} mismatches")
    for line in bad[:20]:
        print(line)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
