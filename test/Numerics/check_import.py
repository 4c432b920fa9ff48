#!/usr/bin/python3
"""Numeric oracle for the importer and the raise patterns (DESIGN.md section 5, oracle 1).

For every fixture NAME.onnx with a reference NAME.npz (shapes-only fixtures have none), and
for each import variant -- `raised` (pipemesh-opt's default pipeline) and `no-raise` --
imports the model with pipemesh-opt, runs the module with pmesh-interp, and compares every
result the reference holds (logits, loss) within --tol absolute. Two kinds of check:

  reference   the fixture's own inputs and outputs from its .npz (PyTorch's or NumPy's).
  perturbed   the fixture's weights plus seeded noise (the fixtures' biases are all zero and
              their LayerNorm scales all one, which hides bias and scale mix-ups), new
              inputs at another batch/seq for dynamic models (batch 3, seq 11 by default),
              labels with ignore_index entries and an attention_mask with padding inside
              one row; the expected outputs come from models/onnx_eval.py run on the
              perturbed model. Left padding (--left-padding) is off by default, for a
              written reason: it gives queries whose every visible key is masked, for
              which HF's finfo.min arithmetic spreads attention over masked and future
              keys alike. pmesh.attention leaves such rows unspecified (see its
              description in PMeshOps.td): their output is meaningless in the source
              model too, and training windows have no padding.

Prints one line per fixture, check and variant; exits non-zero when any comparison fails.
--variants adds import variants (tie-on, tie-off: --tie-embeddings=on/off) to the default
raised and no-raise.

    check_import.py --opt build/bin/pipemesh-opt --interp build/bin/pmesh-interp \\
        --fixtures models/fixtures [--only SUBSTRING] [--no-perturbed] [--keep DIR]

Run with /usr/bin/python3 (Debian's numpy and onnx).
"""
import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib

import numpy as np

OUTPUT_KEYS = ("logits", "loss")  # what a reference .npz holds besides the inputs
VARIANTS = {  # pipemesh-opt flags of each import variant
    "raised": [],
    "no-raise": ["--no-raise"],
    "tie-on": ["--tie-embeddings=on"],
    "tie-off": ["--tie-embeddings=off"],
}
DEFAULT_VARIANTS = "raised,no-raise"
FUSED_OPS = ("attention", "layer_norm", "gelu", "softmax", "cross_entropy")
PERTURBED_SHAPE = (3, 11)  # batch, seq for models with symbolic dims
NOISE = 0.05  # std of the noise added to every parameter


def signature(mlir):
    """pmesh.name of @forward's arguments and results, in order."""
    m = re.search(r"func\.func @forward\((.*)\)\s*->\s*(.*?)\{\s*$", mlir, re.M)
    if not m:
        raise RuntimeError("no func.func @forward in the module")
    names = lambda text: re.findall(r'pmesh\.name = "([^"]+)"', text)
    return names(m.group(1)), names(m.group(2))


def param_sources(mlir):
    """The ONNX initializer names the module's parameters read."""
    return set(re.findall(r'pmesh\.param @\S+ : \S+ \{source = "([^"]+)"\}', mlir))


def op_histogram(mlir):
    """Counts of the fused ops in a module (a hint of what the raise did)."""
    counts = collections.Counter(re.findall(r"= pmesh\.(\w+)", mlir))
    return {op: counts[op] for op in FUSED_OPS if counts[op]}, counts.get("matmul", 0)


def import_model(args, onnx_path, batch, seq, flags):
    """pipemesh-opt's module text, or raises with its first error lines."""
    cmd = [args.opt, onnx_path, f"--batch={batch}", f"--seq={seq}"] + flags
    imp = subprocess.run(cmd, capture_output=True, text=True)
    if imp.returncode != 0:
        lines = imp.stderr.strip().splitlines()
        raise RuntimeError("pipemesh-opt failed: " + (" | ".join(lines[:3]) if lines
                                                      else f"exit status {imp.returncode}"))
    return imp.stdout


def run_variant(args, onnx_path, feeds, expected, flags, workdir):
    """Imports, interprets and compares one variant; returns (ok, message)."""
    batch, seq = feeds["input_ids"].shape
    mlir = import_model(args, onnx_path, batch, seq, flags)
    mlir_path = os.path.join(workdir, "module.mlir")
    with open(mlir_path, "w") as f:
        f.write(mlir)
    arg_names, result_names = signature(mlir)

    interp = [args.interp, mlir_path, "--weights-dir", os.path.dirname(onnx_path),
              "--output-dir", os.path.join(workdir, "out")]
    for name in arg_names:
        if name not in feeds:
            return False, f"no input data for argument '{name}'"
        path = os.path.join(workdir, name + ".bin")
        data = feeds[name]
        (data.astype("<f4") if data.dtype.kind == "f" else data.astype("<i8")).tofile(path)
        interp += ["--input", f"{name}={path}"]
    run = subprocess.run(interp, capture_output=True, text=True)
    if run.returncode != 0:
        err = run.stderr.strip()
        return False, "pmesh-interp failed: " + (err if len(err) < 2000 else err[:2000] + "...")

    parts, ok, compared = [], True, 0
    for name in result_names:
        if name not in OUTPUT_KEYS or name not in expected:
            continue
        want = np.asarray(expected[name])
        got = np.fromfile(os.path.join(workdir, "out", name + ".bin"), dtype="<f4")
        if got.size != want.size:
            parts.append(f"{name} has {got.size} values, expected {want.size}")
            ok = False
            continue
        got, want = got.reshape(want.shape).astype(np.float64), want.astype(np.float64)
        # NaN only where the expected value is NaN too (a mean loss over no target).
        both_nan = np.isnan(got) & np.isnan(want)
        diff = np.where(both_nan, 0.0, np.abs(got - want))
        err = float(np.max(diff)) if diff.size else 0.0
        if not np.isfinite(err) or err > args.tol:
            ok = False
            if diff.ndim >= 2 and np.isfinite(err):  # where: [batch, position] of the worst
                worst = np.unravel_index(np.argmax(diff), diff.shape)[:2]
                parts.append(f"{name} {err:.2e} (worst at {list(map(int, worst))})")
                compared += 1
                continue
        parts.append(f"{name} {err:.2e}" + (" (NaN as expected)" if both_nan.any() else ""))
        compared += 1
    if compared == 0:
        return False, f"no result of {result_names} has an expected value"
    fused, matmuls = op_histogram(mlir)
    ops = ", ".join(f"{k} x{v}" for k, v in fused.items())
    return ok, "  ".join(parts) + f"   [{ops}{', ' if ops else ''}matmul x{matmuls}]"


def perturbed_case(args, fixture, ref, workdir):
    """Writes the perturbed model; returns (its path, inputs, expected outputs)."""
    import onnx
    from onnx import numpy_helper
    sys.path.insert(0, args.models)
    import onnx_eval

    # The parameters are what the importer declares (a --no-raise import of the original).
    batch, seq = ref["input_ids"].shape
    sources = param_sources(import_model(args, fixture, batch, seq, ["--no-raise"]))
    model = onnx.load(fixture)  # pulls external data in
    inits = {t.name: t for t in model.graph.initializer}
    old = {n: numpy_helper.to_array(inits[n]) for n in sources}
    new = {}
    for n, a in old.items():
        rng = np.random.default_rng(zlib.crc32(n.encode()))
        new[n] = (a + NOISE * rng.standard_normal(a.shape)).astype(a.dtype)
    # A copy (or transposed copy, like torch's folded lm_head) of a parameter that the
    # importer ties back to it must stay a copy, or the tie would (rightly) be lost.
    for t in model.graph.initializer:
        if t.name in new or t.data_type != onnx.TensorProto.FLOAT or len(t.dims) != 2:
            continue
        a = numpy_helper.to_array(t)
        for n, p in old.items():
            if p.shape == a.shape[::-1] and np.array_equal(p.T, a):
                new[t.name] = np.ascontiguousarray(new[n].T)
            elif p.shape == a.shape and np.array_equal(p, a):
                new[t.name] = new[n]
    for n, a in new.items():
        inits[n].CopyFrom(numpy_helper.from_array(a, n))
    path = os.path.join(workdir, os.path.basename(fixture))
    onnx.save(model, path)

    # Inputs: another batch/seq where the model allows it.
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    b, s = (batch, seq) if all(dims) else args.perturbed_shape
    vocab = ref["logits"].shape[-1]
    rng = np.random.default_rng(1234)
    graph_inputs = {i.name for i in model.graph.input} - set(inits)
    feeds = {"input_ids": rng.integers(0, vocab, (b, s)).astype(np.int64)}
    if "labels" in graph_inputs:
        labels = rng.integers(0, vocab, (b, s)).astype(np.int64)
        for node in model.graph.node:
            for a in node.attribute:
                if node.op_type == "SoftmaxCrossEntropyLoss" and a.name == "ignore_index":
                    flat = labels.reshape(-1)  # a few ignored targets, wherever they fit
                    flat[[2 % flat.size, (s + 5) % flat.size, flat.size - 1]] = a.i
        feeds["labels"] = labels
    if "attention_mask" in graph_inputs:
        mask = np.ones((b, s), np.int64)
        mask[1 % b, s // 4 + 1:s // 4 + 3] = 0  # padding inside a row (as in the fixtures)
        if args.left_padding:
            mask[-1, :min(2, s - 1)] = 0  # left padding: queries that see only masked keys
        feeds["attention_mask"] = mask
    missing = graph_inputs - set(feeds)
    if missing:
        raise RuntimeError(f"no data for graph inputs {sorted(missing)}")
    with np.errstate(invalid="ignore"):  # a mean loss over no target is NaN
        expected = onnx_eval.Evaluator(model).run(feeds)
    return path, feeds, expected


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opt", required=True, help="pipemesh-opt binary")
    parser.add_argument("--interp", required=True, help="pmesh-interp binary")
    parser.add_argument("--fixtures", required=True, help="directory of NAME.onnx + NAME.npz")
    parser.add_argument("--models", help="directory of onnx_eval.py (default: fixtures/..)")
    parser.add_argument("--tol", type=float, default=1e-4, help="max absolute error")
    parser.add_argument("--only", default="", help="run fixtures whose name contains this")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS,
                        help=f"comma-separated import variants of {sorted(VARIANTS)}")
    parser.add_argument("--no-perturbed", action="store_true", help="reference checks only")
    parser.add_argument("--left-padding", action="store_true",
                        help="perturbed attention_mask with left padding (see the docstring)")
    parser.add_argument("--perturbed-shape", default="%d,%d" % PERTURBED_SHAPE,
                        help="BATCH,SEQ of the perturbed check for models with symbolic dims")
    parser.add_argument("--keep", help="keep the modules and outputs under this directory")
    args = parser.parse_args()
    args.variants = args.variants.split(",")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(VARIANTS)}")
    args.perturbed_shape = tuple(int(v) for v in args.perturbed_shape.split(","))
    args.models = args.models or os.path.dirname(os.path.abspath(args.fixtures))

    fixtures = sorted(glob.glob(os.path.join(args.fixtures, "*.onnx")))
    if not fixtures:
        print(f"no fixtures in {args.fixtures}")
        return 1
    failures = checked = 0
    root = args.keep or tempfile.mkdtemp(prefix="pmesh-numerics-")
    checks = ("reference",) if args.no_perturbed else ("reference", "perturbed")
    for fixture in fixtures:
        fixture = os.path.abspath(fixture)
        name = os.path.basename(fixture)[:-len(".onnx")]
        if args.only not in name:
            continue
        npz = fixture[:-len(".onnx")] + ".npz"
        if not os.path.exists(npz):
            print(f"{name:42s} skip (no reference: shapes only)")
            continue
        ref = dict(np.load(npz))
        for check in checks:
            cases = []
            try:
                if check == "reference":
                    cases = [(fixture, ref, ref)]
                else:
                    workdir = os.path.join(root, name, check)
                    os.makedirs(workdir, exist_ok=True)
                    cases = [perturbed_case(args, fixture, ref, workdir)]
            except Exception as e:
                checked += 1
                failures += 1
                print(f"{name:42s} {check:9s} FAIL  {type(e).__name__}: {e}", flush=True)
                continue
            for onnx_path, feeds, expected in cases:
                for variant in args.variants:
                    flags = VARIANTS[variant]
                    workdir = os.path.join(root, name, check, variant)
                    os.makedirs(workdir, exist_ok=True)
                    try:
                        ok, message = run_variant(args, onnx_path, feeds, expected, flags,
                                                  workdir)
                    except Exception as e:  # a broken module is a failure, not a crash
                        ok, message = False, f"{type(e).__name__}: {e}"
                    checked += 1
                    failures += not ok
                    shape = "x".join(map(str, feeds["input_ids"].shape))
                    print(f"{name:42s} {check:9s} {shape:5s} {variant:8s} "
                          f"{'PASS' if ok else 'FAIL'}  {message}", flush=True)
    print(f"{checked - failures}/{checked} passed (tolerance {args.tol:g} absolute)"
          + (f"; modules and outputs in {root}" if args.keep or failures else ""))
    if not args.keep and not failures:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
