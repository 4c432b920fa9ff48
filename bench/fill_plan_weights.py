#!/usr/bin/python3
"""Gives a shapes-only plan of a gen_gpt2.py model its initial weights.

A GPT-2 124M plan holds 0.5 GB of weights (350M: 1.4 GB), too much to ship to
a lent GPU machine that has no compiler (bench/gpu_bundle.sh). Its shapes-only
plan is 0.3 MB: this script, run there, draws every parameter exactly as
`models/gen_gpt2.py --seed S` draws it (gen_gpt2.init_param: one generator per
tensor keyed by (seed, crc32(name))) and writes the runnable plan, whose
weights equal those of the plan compiled from the model's full ONNX file.

    fill_plan_weights.py gpt2-124M.shapes.plan -o gpt2-124M.plan [--seed 0]

The model configuration is read off the plan's parameters (wte, wpe, the
number of blocks); a parameter gen_gpt2.py does not make, or of another
shape, is an error. Constants already in the plan are kept. Needs numpy and
libxxhash.so.0 (the plan checksum; the bundle carries it).
"""
import argparse
import os
import re
import struct
import sys
import json

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "models"))
sys.path.insert(0, os.path.join(REPO, "runtime", "tools"))

import gen_gpt2  # noqa: E402
import make_test_plan as mtp  # noqa: E402


def fail(msg):
    print(f"fill_plan_weights.py: {msg}", file=sys.stderr)
    sys.exit(1)


def config_from_params(params):
    """The GPT2Config whose gen_gpt2.param_specs names these parameters' sources."""
    shapes = {p["source"]: tuple(p["shape"]) for p in params}
    for name in ("transformer.wte.weight", "transformer.wpe.weight"):
        if name not in shapes:
            fail(f"the plan has no parameter '{name}': not a gen_gpt2.py model")
    (V, C), (T, _) = shapes["transformer.wte.weight"], shapes["transformer.wpe.weight"]
    layers = {int(m.group(1)) for s in shapes for m in [re.match(r"transformer\.h\.(\d+)\.", s)] if m}
    # n_head does not change any parameter's name or shape.
    return gen_gpt2.GPT2Config(n_layer=len(layers), n_embd=C, n_head=1, vocab_size=V, n_ctx=T)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", help="a plan compiled with shapes-only=true from a gen_gpt2.py model")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seed", type=int, default=0, help="gen_gpt2.py's --seed (default 0)")
    a = ap.parse_args(argv)
    if not os.path.exists(a.plan):
        fail(f"no such plan: {a.plan}")
    manifest, constants = mtp.read_plan(a.plan)
    if not manifest.get("model", {}).get("shapes_only"):
        fail(f"'{a.plan}' is not a shapes-only plan: its weights are already there")
    cfg = config_from_params(manifest["params"])
    specs = {name: (tuple(shape), init) for name, shape, init in gen_gpt2.param_specs(cfg)}
    weights = dict(constants)
    for p in manifest["params"]:
        src, shape = p["source"], tuple(p["shape"])
        if src not in specs:
            fail(f"parameter '{p['name']}' comes from '{src}', which gen_gpt2.py does not make")
        if specs[src][0] != shape:
            fail(f"parameter '{p['name']}' has shape {list(shape)}; gen_gpt2.py makes "
                 f"'{src}' with {list(specs[src][0])}")
        weights[p["name"]] = gen_gpt2.init_param(src, shape, specs[src][1], a.seed)
    manifest["model"]["shapes_only"] = False
    mtp.write_plan(a.output, manifest, weights)
    n = sum(int(w.size) for k, w in weights.items() if k not in constants)
    print(f"{a.output}: {len(manifest['params'])} parameters ({n:,} values, seed {a.seed}) "
          f"for {cfg.n_layer} blocks, width {cfg.n_embd}, vocabulary {cfg.vocab_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
