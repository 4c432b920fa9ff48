"""Checks a GPT-2 plan's model.flops_per_step against the closed form MFU counts
(PaLM, appendix B): per token, 6 FLOPs per weight of every GEMM (forward, and the
backward's input and weight gradients) plus 12 * layers * width * seq for attention's
score and value products (forward 2, backward 4 matmuls; the score matrix whole).

    model_flops.py PLAN LAYERS WIDTH VOCAB
"""
import json
import struct
import sys

plan, layers, width, vocab = sys.argv[1], *map(int, sys.argv[2:5])
with open(plan, "rb") as f:
    head = f.read(40)
    manifest = json.loads(f.read(struct.unpack("<Q", head[16:24])[0]))
model, par = manifest["model"], manifest["parallel"]
seq = model["seq"]
tokens = model["batch"] * seq * par["microbatches"] * par["dp"]
# Per layer: the q, k, v and output projections (4 d^2) and the MLP (8 d^2);
# then the tied LM head (V d). Embedding lookups are not GEMMs.
gemm_weights = layers * 12 * width * width + vocab * width
want = tokens * (6 * gemm_weights + 12 * layers * width * seq)
got = model["flops_per_step"]
print(f"flops_per_step {got:.6e}, closed form {want:.6e}, ratio {got / want:.9f}")
print("match" if abs(got - want) <= 1e-9 * want else "MISMATCH")
