"""Writes attention functions whose masks are computed from positions at T
tokens (default 8192: [T, T] masks of 2^26 elements, past what the raise holds
whole, so it evaluates them a row at a time), for raise-long-context.test.

Each function is q, k, v -> softmax(where(mask, q @ k^T, -big)) @ v with one
mask expression; the FileCheck lines in the test say which become causal
attention and which stay decomposed.
"""
import argparse
import struct


def dense_i64(values):
    """int64 elements in MLIR's hex form (compact at 8192)."""
    data = b"".join(struct.pack("<q", v) for v in values)
    return f'dense<"0x{data.hex().upper()}">'


def ty(shape, elt):
    return "tensor<" + "x".join(str(d) for d in shape) + f"x{elt}>"


class Func:
    def __init__(self, name, t):
        self.name, self.t, self.lines, self.count = name, t, [], 0

    def op(self, text, result_type):
        self.count += 1
        name = f"%m{self.count}"
        self.lines.append(f"  {name} = {text} : {result_type}")
        return name

    def positions(self, shape, n=None):
        """0, 1, ..., n - 1 laid out in `shape` (one dim of n; n = T by default)."""
        n = n or self.t
        return self.op(f"pmesh.constant {dense_i64(range(n))}", ty(shape, "i64"))

    def emit(self, mask, mask_shape, guard=False, additive=False):
        t = self.t
        s4 = [1, 1, t, t]
        qkv = ty([1, 1, t, 8], "f32")
        out = [f"func.func @{self.name}(%q: {qkv}, %k: {qkv}, %v: {qkv}) -> {qkv} {{"]
        out += self.lines
        out.append(f"  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>")
        out.append(f"  %mask = pmesh.reshape {mask} : {ty(mask_shape, 'i1')} -> {ty(s4, 'i1')}")
        out.append(f"  %s = pmesh.matmul %q, %k {{transpose_b = true}} : ({qkv}, {qkv}) -> {ty(s4, 'f32')}")
        if additive:
            out.append(f"  %zero = pmesh.constant dense<0.0> : tensor<f32>")
            out.append(f"  %bias = pmesh.where %mask, %zero, %neg : ({ty(s4, 'i1')}, tensor<f32>, tensor<f32>) -> {ty(s4, 'f32')}")
            out.append(f"  %w = pmesh.add %s, %bias : ({ty(s4, 'f32')}, {ty(s4, 'f32')}) -> {ty(s4, 'f32')}")
        else:
            out.append(f"  %w = pmesh.where %mask, %s, %neg : ({ty(s4, 'i1')}, {ty(s4, 'f32')}, tensor<f32>) -> {ty(s4, 'f32')}")
        out.append(f"  %p = pmesh.softmax %w {{axis = -1 : i64}} : {ty(s4, 'f32')}")
        probs = "%p"
        if guard:  # PyTorch's where(isnan(p), 0, p)
            out.append(f"  %same = pmesh.equal %p, %p : ({ty(s4, 'f32')}, {ty(s4, 'f32')}) -> {ty(s4, 'i1')}")
            out.append(f"  %nan = pmesh.not %same : {ty(s4, 'i1')}")
            out.append(f"  %z = pmesh.constant dense<0.0> : tensor<f32>")
            out.append(f"  %g = pmesh.where %nan, %z, %p : ({ty(s4, 'i1')}, tensor<f32>, {ty(s4, 'f32')}) -> {ty(s4, 'f32')}")
            probs = "%g"
        out.append(f"  %o = pmesh.matmul {probs}, %v : ({ty(s4, 'f32')}, {qkv}) -> {qkv}")
        out.append(f"  return %o : {qkv}")
        out.append("}")
        return "\n".join(out)


def causal(f):
    """not(rows < cols): [T, T], visible where the key is not after the query."""
    t = f.t
    rows, cols = f.positions([t, 1]), f.positions([1, t])
    less = f.op(f"pmesh.less {rows}, {cols}", f"({ty([t, 1], 'i64')}, {ty([1, t], 'i64')}) -> {ty([t, t], 'i1')}")
    return f.op(f"pmesh.not {less}", ty([t, t], "i1")), rows, cols


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    t = ap.parse_args().tokens
    tt, b = [t, t], ty([t, t], "i1")
    funcs = []

    f = Func("causal", t)
    mask, _, _ = causal(f)
    funcs.append(f.emit(mask, tt))

    # The diagonal hidden too: no query may see nothing.
    f = Func("strictly_causal", t)
    rows, cols = f.positions([t, 1]), f.positions([1, t])
    mask = f.op(f"pmesh.less {cols}, {rows}", f"({ty([1, t], 'i64')}, {ty([t, 1], 'i64')}) -> {b}")
    funcs.append(f.emit(mask, tt))

    # Causal but for one key of one query (row t - 2, key 5): every row is checked.
    f = Func("one_key_hidden", t)
    vis, rows, cols = causal(f)
    row = f.op(f"pmesh.constant dense<{t - 2}>", "tensor<i64>")
    key = f.op("pmesh.constant dense<5>", "tensor<i64>")
    at_row = f.op(f"pmesh.equal {rows}, {row}", f"({ty([t, 1], 'i64')}, tensor<i64>) -> {ty([t, 1], 'i1')}")
    at_key = f.op(f"pmesh.equal {cols}, {key}", f"({ty([1, t], 'i64')}, tensor<i64>) -> {ty([1, t], 'i1')}")
    hole = f.op(f"pmesh.and {at_row}, {at_key}", f"({ty([t, 1], 'i1')}, {ty([1, t], 'i1')}) -> {b}")
    keep = f.op(f"pmesh.not {hole}", b)
    mask = f.op(f"pmesh.and {vis}, {keep}", f"({b}, {b}) -> {b}")
    funcs.append(f.emit(mask, tt))

    # A band of 700 keys: rows - cols < 700, the and written as the importer
    # writes And on activations, where(a, b, false).
    f = Func("band", t)
    vis, rows, cols = causal(f)
    dist = f.op(f"pmesh.sub {rows}, {cols}", f"({ty([t, 1], 'i64')}, {ty([1, t], 'i64')}) -> {ty(tt, 'i64')}")
    width = f.op("pmesh.constant dense<700>", "tensor<i64>")
    near = f.op(f"pmesh.less {dist}, {width}", f"({ty(tt, 'i64')}, tensor<i64>) -> {b}")
    false = f.op("pmesh.constant dense<false>", "tensor<i1>")
    mask = f.op(f"pmesh.where {vis}, {near}, {false}", f"({b}, {b}, tensor<i1>) -> {b}")
    funcs.append(f.emit(mask, tt))

    # Through reshapes that change the row length ([T, T] -> [T / 2, 2T] ->
    # [T, T]), a cast to i64 and back by comparison.
    f = Func("reshaped_and_cast", t)
    vis, _, _ = causal(f)
    wide = f.op(f"pmesh.reshape {vis}", f"{b} -> {ty([t // 2, 2 * t], 'i1')}")
    back = f.op(f"pmesh.reshape {wide}", f"{ty([t // 2, 2 * t], 'i1')} -> {b}")
    ints = f.op(f"pmesh.cast {back}", f"{b} -> {ty(tt, 'i64')}")
    one = f.op("pmesh.constant dense<1>", "tensor<i64>")
    mask = f.op(f"pmesh.equal {ints}, {one}", f"({ty(tt, 'i64')}, tensor<i64>) -> {b}")
    funcs.append(f.emit(mask, tt))

    # A float mask turned back into booleans, as MPT's exports write it:
    # cast(where(visible, 1.0, 0.0)) to i1.
    f = Func("bool_of_float_mask", t)
    vis, _, _ = causal(f)
    one = f.op("pmesh.constant dense<1.0>", "tensor<f32>")
    zero = f.op("pmesh.constant dense<0.0>", "tensor<f32>")
    floats = f.op(f"pmesh.where {vis}, {one}, {zero}", f"({b}, tensor<f32>, tensor<f32>) -> {ty(tt, 'f32')}")
    mask = f.op(f"pmesh.cast {floats}", f"{ty(tt, 'f32')} -> {b}")
    funcs.append(f.emit(mask, tt))

    # And with a splat constant of the mask's size (transformers' exports
    # start from one): all true changes nothing, all false hides every key.
    for name, value in (("and_splat_true", "true"), ("and_splat_false", "false")):
        f = Func(name, t)
        vis, _, _ = causal(f)
        splat = f.op(f"pmesh.constant dense<{value}>", b)
        mask = f.op(f"pmesh.and {vis}, {splat}", f"({b}, {b}) -> {b}")
        funcs.append(f.emit(mask, tt))

    # The last T of T + 16 positions on both sides: still causal. Shifted on
    # the queries only: each query sees 16 keys ahead.
    for name, row_start in (("sliced", 16), ("sliced_rows_only", 0)):
        f = Func(name, t)
        n = t + 16
        rows, cols = f.positions([n, 1], n), f.positions([1, n], n)
        less = f.op(f"pmesh.less {rows}, {cols}", f"({ty([n, 1], 'i64')}, {ty([1, n], 'i64')}) -> {ty([n, n], 'i1')}")
        vis = f.op(f"pmesh.not {less}", ty([n, n], "i1"))
        mask = f.op(f"pmesh.slice {vis}[[16, {row_start}] : [{n}, {row_start + t}] : [1, 1]]",
                    f"{ty([n, n], 'i1')} -> {b}")
        funcs.append(f.emit(mask, tt))

    # Leading dims permuted: [T, 1, T] -> [1, T, T].
    f = Func("permuted_leading_dims", t)
    rows, cols = f.positions([t, 1, 1]), f.positions([1, 1, t])
    less = f.op(f"pmesh.less {rows}, {cols}", f"({ty([t, 1, 1], 'i64')}, {ty([1, 1, t], 'i64')}) -> {ty([t, 1, t], 'i1')}")
    vis = f.op(f"pmesh.not {less}", ty([t, 1, t], "i1"))
    mask = f.op(f"pmesh.transpose {vis} perm = [1, 0, 2]", f"{ty([t, 1, t], 'i1')} -> {ty([1, t, t], 'i1')}")
    funcs.append(f.emit(mask, [1, t, t]))

    # The upper triangle transposed is causal, but a row of the transpose is a
    # column of its operand: not evaluated by rows, left decomposed.
    f = Func("transposed_last_dim", t)
    rows, cols = f.positions([t, 1]), f.positions([1, t])
    less = f.op(f"pmesh.less {cols}, {rows}", f"({ty([1, t], 'i64')}, {ty([t, 1], 'i64')}) -> {b}")
    upper = f.op(f"pmesh.not {less}", b)
    mask = f.op(f"pmesh.transpose {upper} perm = [1, 0]", f"{b} -> {b}")
    funcs.append(f.emit(mask, tt))

    # Positions offset by 2^63 - 2 on both sides overflow int64 (ONNX wraps
    # them, and the order breaks): the evaluator refuses values past int64, so
    # the attention stays decomposed rather than read as causal.
    f = Func("overflowing_positions", t)
    rows, cols = f.positions([t, 1]), f.positions([1, t])
    big = f.op(f"pmesh.constant dense<{2**63 - 2}>", "tensor<i64>")
    rows = f.op(f"pmesh.add {rows}, {big}", f"({ty([t, 1], 'i64')}, tensor<i64>) -> {ty([t, 1], 'i64')}")
    cols = f.op(f"pmesh.add {cols}, {big}", f"({ty([1, t], 'i64')}, tensor<i64>) -> {ty([1, t], 'i64')}")
    less = f.op(f"pmesh.less {rows}, {cols}", f"({ty([t, 1], 'i64')}, {ty([1, t], 'i64')}) -> {b}")
    mask = f.op(f"pmesh.not {less}", b)
    funcs.append(f.emit(mask, tt))

    # transformers' export: an additive where(mask, 0, finfo.min) and PyTorch's
    # NaN guard on the probabilities, dropped with the causal mask.
    f = Func("additive_with_nan_guard", t)
    mask, _, _ = causal(f)
    funcs.append(f.emit(mask, tt, guard=True, additive=True))

    # The guard stays (and the attention decomposed) when a row may be all
    # hidden: the strictly causal mask hides all of row 0.
    f = Func("nan_guard_needed", t)
    rows, cols = f.positions([t, 1]), f.positions([1, t])
    mask = f.op(f"pmesh.less {cols}, {rows}", f"({ty([1, t], 'i64')}, {ty([t, 1], 'i64')}) -> {b}")
    funcs.append(f.emit(mask, tt, guard=True, additive=True))

    print("\n\n// -----\n\n".join(funcs))


if __name__ == "__main__":
    main()
