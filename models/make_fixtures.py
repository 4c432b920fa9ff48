#!/usr/bin/python3
"""Regenerates the committed test models in models/fixtures/ and checks every one.

    /usr/bin/python3 models/make_fixtures.py [--only SUBSTRING]

Each fixture NAME.onnx comes with NAME.npz holding the fixed reference batch
(gen_gpt2.reference_batch: input_ids [2,16], attention_mask/labels where the model takes
them) and the expected outputs (logits, loss) computed by PyTorch for torch_* fixtures and
by gen_gpt2.numpy_forward for gpt2_* fixtures. The importer tests compare against these.

Checks run here: onnx.checker (where onnx 1.12 knows the opset), the model evaluated by
onnx_eval.py on the reference inputs against the saved outputs, and the torch references
against numpy_forward (same seed = same weights in both families). Outputs are
byte-deterministic, so an unchanged generator leaves `git status` clean.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_torch_gpt2  # noqa: E402
import gen_gpt2  # noqa: E402
import onnx_eval  # noqa: E402
import print_histogram  # noqa: E402

FIXTURES_DIR = os.path.join(HERE, "fixtures")
TOL = 1e-4  # DESIGN.md oracle 1

# (name, tool, flags). Each entry exists to exercise one importer path; see README.md.
FIXTURES = [
    # -- our generator: clean graphs, one opset difference at a time -------------------
    ("gpt2_tiny_op17", "gen", ["--opset", "17"]),
    ("gpt2_tiny_op17_loss", "gen", ["--opset", "17", "--with-loss"]),
    ("gpt2_tiny_op17_lossonly_shift", "gen", ["--opset", "17", "--with-loss", "--loss-only",
                                              "--shift-labels"]),
    ("gpt2_tiny_op13", "gen", ["--opset", "13"]),
    ("gpt2_tiny_op13_loss", "gen", ["--opset", "13", "--with-loss"]),
    ("gpt2_tiny_op18", "gen", ["--opset", "18"]),
    ("gpt2_tiny_op18_decomposed_loss", "gen", ["--opset", "18", "--decompose-layernorm",
                                               "--with-loss"]),
    ("gpt2_tiny_op21_computed_mask", "gen", ["--opset", "21", "--causal-mask", "computed"]),
    ("gpt2_tiny_op17_sliding_window", "gen", ["--opset", "17", "--causal-mask", "computed",
                                              "--sliding-window", "5"]),
    ("gpt2_tiny_op17_gqa_loss", "gen", ["--opset", "17", "--kv-heads", "2", "--with-loss"]),
    ("gpt2_tiny_op17_external", "gen", ["--opset", "17", "--external-data"]),
    # Real-size graphs without weights, for compile/partition/simulate tests.
    ("gpt2_124M_shapes_only", "gen", ["--preset", "124M", "--shapes-only", "--causal-mask", "computed"]),
    ("gpt2_1.5B_shapes_only_loss", "gen", ["--preset", "1.5B", "--shapes-only", "--with-loss",
                                           "--causal-mask", "computed"]),
    # -- torch.onnx.export of HF-style GPT-2 (torch 1.13) -------------------------------
    ("torch_gpt2_tiny_op17_dyn_fold", "torch", ["--opset", "17", "--dynamic"]),
    ("torch_gpt2_tiny_op17_dyn_nofold", "torch", ["--opset", "17", "--dynamic", "--no-fold"]),
    ("torch_gpt2_tiny_op14_dyn_fold", "torch", ["--opset", "14", "--dynamic"]),
    ("torch_gpt2_tiny_op14_dyn_nofold", "torch", ["--opset", "14", "--dynamic", "--no-fold"]),
    ("torch_gpt2_tiny_op17_static_fold", "torch", ["--opset", "17"]),
    ("torch_gpt2_tiny_op17_dyn_fold_mask", "torch", ["--opset", "17", "--dynamic", "--attention-mask"]),
    ("torch_gpt2_tiny_op17_dyn_fold_loss", "torch", ["--opset", "17", "--dynamic", "--labels"]),
    ("torch_gpt2_tiny_op14_dyn_nofold_mask_loss", "torch", ["--opset", "14", "--dynamic", "--no-fold",
                                                            "--attention-mask", "--labels"]),
]


def _numpy_crosscheck(ref, cfg, seed, shift_labels):
    """Max |numpy_forward - saved reference| over logits and loss."""
    w = dict(gen_gpt2.init_weights(cfg, seed))
    logits, loss = gen_gpt2.numpy_forward(
        cfg, w, ref["input_ids"], labels=ref["labels"] if "labels" in ref else None,
        attention_mask=ref["attention_mask"] if "attention_mask" in ref else None,
        shift_labels=shift_labels)
    err = float(np.abs(logits - ref["logits"]).max()) if "logits" in ref else 0.0
    if "loss" in ref:
        err = max(err, float(abs(loss - ref["loss"])))
    return err


def make(name, tool, flags):
    out = os.path.join(FIXTURES_DIR, name + ".onnx")
    ref = os.path.join(FIXTURES_DIR, name + ".npz")
    shapes_only = "--shapes-only" in flags
    argv = flags + ["-o", out] + ([] if shapes_only else ["--save-reference", ref])
    (gen_gpt2.main if tool == "gen" else export_torch_gpt2.main)(argv)

    notes = [gen_gpt2.check(out)]
    ok = True
    if not shapes_only:
        errs = onnx_eval.compare(out, ref)
        worst = max(errs.values())
        ok &= worst < TOL
        notes.append("eval " + " ".join(f"{k}={v:.1e}" for k, v in errs.items()))
        if tool == "torch":
            # Same seed, same weights: PyTorch and the NumPy oracle must agree too.
            cfg = gen_gpt2.PRESETS["tiny"]
            x = _numpy_crosscheck(np.load(ref), cfg, 0, shift_labels=True)
            ok &= x < TOL
            notes.append(f"torch-vs-numpy={x:.1e}")
    size = sum(os.path.getsize(p) for p in (out, ref, out + ".data") if os.path.exists(p))
    hist = print_histogram.describe(out, out=open(os.devnull, "w"))
    print(f"{'ok  ' if ok else 'FAIL'} {name:44s} {size / 1024:7.0f} KiB {sum(hist.values()):5d} nodes  "
          + "; ".join(notes), flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="regenerate only fixtures whose name contains this")
    args = ap.parse_args()
    os.makedirs(FIXTURES_DIR, exist_ok=True)
    chosen = [f for f in FIXTURES if not args.only or args.only in f[0]]
    if not args.only:
        # Drop fixtures that are no longer in the list (renamed or removed); hf_* ones are
        # export_hf.py's (it needs a newer PyTorch than Debian's).
        keep = {n + ext for n, _, _ in FIXTURES for ext in (".onnx", ".npz", ".onnx.data")}
        for f in os.listdir(FIXTURES_DIR):
            if f not in keep and not f.startswith("hf_") and f.endswith((".onnx", ".npz", ".data")):
                os.remove(os.path.join(FIXTURES_DIR, f))
    failed = [n for n, tool, flags in chosen if not make(n, tool, flags)]
    print(f"{len(chosen) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
