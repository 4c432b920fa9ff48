#!/usr/bin/env python3
"""Exports transformers' own GPT-2 and Llama with PyTorch 2's ONNX exporter (the fixtures
hf_*.onnx), and records what transformers computes for them as the reference.

Debian's python3-torch (1.13) predates `torch.onnx.export(dynamo=True)` and current
transformers, so this script runs in an environment of its own, e.g.

    python3 -m venv /tmp/hf-venv
    /tmp/hf-venv/bin/pip install torch transformers onnx onnxscript onnxruntime
    /tmp/hf-venv/bin/python models/export_hf.py --run build/bin/pipemesh-run
    /tmp/hf-venv/bin/python models/export_hf.py --run build/bin/pipemesh-run --sweep /tmp/sweep
    /usr/bin/python3 test/Numerics/check_import.py --opt build/bin/pipemesh-opt \
        --interp build/bin/pmesh-interp --fixtures /tmp/sweep --models models

and writes, per fixture NAME:
  NAME.onnx         the export (opset 20 unless the fixture names one; batch and seq dynamic)
  NAME.npz          input_ids [2, 16] and transformers' logits for them (check_import.py's
                    reference; onnxruntime must agree with them here; with attention_mask
                    padding inside the second row where the model takes one)
  NAME.train.json   transformers' losses of a short training run under pipemesh-run's
                    rules (check_training.py's train_torch: AdamW, clipping, schedule,
                    canonical sampling of the default corpus) and its trained parameter
                    count, for check_training.py's recorded cases; with the versions used.

The exports are what a user of current PyTorch gets: `dynamo=True` with its default
scaled-dot-product attention (exported with a NaN guard after the softmax) and
transformers' packed-sequence mask (CumSum, GatherND, LessOrEqual, And over positions).
`optimize=False` keeps every parameter its own initializer: the exporter's optimizer
merges initializers of equal values (a fresh model's LayerNorm scales, its zero biases)
and folds away zero biases, which ties or drops parameters of a model meant for training
(see docs/pipemesh-opt.md, "Exports by PyTorch 2").
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "test", "Integration"))
import check_training  # noqa: E402

VOCAB, CTX, EMBD, LAYERS, HEADS = 256, 64, 64, 2, 4
# name: (family, options); each exists to exercise one importer path (models/README.md).
FIXTURES = {
    "hf_gpt2_dynamo": ("gpt2", {"seed": 0, "train": True}),
    "hf_llama_dynamo": ("llama", {"seed": 1, "kv_heads": 2, "train": True}),
    # The exporter's default: its optimizer folds the weights' transposes into new
    # initializers (named val_N) and merges equal constants; trained weights keep apart.
    "hf_llama_dynamo_optimized": ("llama", {"seed": 2, "kv_heads": 2, "optimize": True,
                                            "train": True}),
    # The usual signature (input_ids, attention_mask): its reference pads the second row
    # (positions 4..6); a plan feeds the mask all ones.
    "hf_gpt2_dynamo_mask": ("gpt2", {"seed": 3, "attention_mask": True, "train": True}),
    # Other families' import paths (logits only, unless "train"): see build().
    "hf_qwen2_dynamo": ("qwen2", {"seed": 4}),
    "hf_mistral_dynamo": ("mistral", {"seed": 5}),
    "hf_gemma_dynamo": ("gemma", {"seed": 6}),
    "hf_phi3_dynamo": ("phi3", {"seed": 7}),
    "hf_neox_dynamo": ("neox", {"seed": 8, "train": True}),
    "hf_gptj_dynamo": ("gptj", {"seed": 9, "train": True}),
    "hf_opt_dynamo": ("opt", {"seed": 10, "train": True}),
    "hf_falcon_dynamo": ("falcon", {"seed": 11, "train": True}),
    "hf_bloom_dynamo": ("bloom", {"seed": 12, "train": True}),
    # Soft-capped attention scores (a cap of 1, with q and k weights scaled up 20x so that
    # the scores reach it) on local layers of 5 keys and global ones; soft-capped logits.
    "hf_gemma2_dynamo": ("gemma2", {"seed": 13, "train": True, "qk_gain": 20.0}),
    # Sliding-window attention (a band of 5 keys at 16 tokens) from transformers' mask;
    # GPT-Neo's local layers (window 8) write their own band too.
    "hf_mistral_sliding_dynamo": ("mistral", {"seed": 14, "sliding_window": 5, "train": True}),
    # Opset 23: the exporter writes scaled_dot_product_attention as ai.onnx Attention
    # (grouped-query heads: 2 key/value heads for 4).
    "hf_llama_op23_dynamo": ("llama", {"seed": 19, "kv_heads": 2, "opset": 23, "train": True}),
    # ... with the exporter's default optimizer, which at opset 23 also fuses the RMSNorms
    # into RMSNormalization and the rotary into RotaryEmbedding.
    "hf_llama_op23_dynamo_optimized": ("llama", {"seed": 20, "kv_heads": 2, "opset": 23,
                                                 "optimize": True, "train": True}),
    "hf_gptneo_dynamo": ("gptneo", {"seed": 15, "train": True}),
    # Scores computed as [B * H, T, T] (baddbmm from zeros), masked and normalized as
    # [B, H, T, T]: the attention is raised in the probabilities' layout.
    "hf_neox_japanese_dynamo": ("gpt_neox_japanese", {"seed": 16, "train": True}),
    # GPT-1: its causal table `attn.bias` is a buffer multiplied into the scores, which only
    # the exporter's declaration (BUFFER) tells from a weight; masked with -1e4, so its
    # attention stays decomposed.
    "hf_openai_gpt_dynamo": ("openai-gpt", {"seed": 17, "train": True}),
    # DeepSeek V3's multi-head latent attention: low-rank q and kv projections, q and k
    # assembled from a rotary and a plain part by slice assignment (ScatterND).
    "hf_deepseek_v3_dynamo": ("deepseek_v3", {"seed": 18, "train": True}),
}
# Families exported by --sweep (logits only, not committed): a compatibility check to run
# when transformers or PyTorch change. Every one imported within 6e-7 of transformers
# with torch 2.15 / transformers 5.24 (Mixtral's export fails in the exporter itself).
SWEEP = ["gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3", "phi",
         "phi3", "neox", "gptj", "opt", "falcon", "bloom", "mpt", "bigcode", "codegen",
         "stablelm", "olmo", "olmo2", "cohere", "granite", "llama3", "gptneo", "starcoder2",
         "xglm", "deepseek_v3"]
# Families whose configs take the common names (Llama-like ones, and older ones through
# their attribute maps): built by AutoConfig (their extra options below), swept too.
GENERIC = {"nemotron": {}, "cohere2": {"sliding_window": 5}, "biogpt": {}, "persimmon": {},
           "exaone4": {"sliding_window": 5}, "apertus": {}, "arcee": {}, "olmo3": {},
           "seed_oss": {}, "ernie4_5": {}, "glm": {}, "glm4": {}, "smollm3": {},
           "ministral": {}, "hunyuan_v1_dense": {}, "helium": {}, "openai-gpt": {}, "ctrl": {},
           "gpt_neox_japanese": {}, "diffllama": {}, "vaultgemma": {}, "bitnet": {}, "cwm": {}}
SWEEP += sorted(GENERIC)
# The recorded training run (check_training.py's recorded cases use the same).
TRAIN = dict(batch=2, seq=16, microbatches=2, steps=10)


def build(family, options, seed):
    import transformers as T
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, max_position_embeddings=CTX, hidden_size=EMBD,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS)
    if family == "gpt2":
        model = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=VOCAB, n_positions=CTX, n_embd=EMBD,
                                               n_layer=LAYERS, n_head=HEADS))
    elif family == "llama":
        model = T.LlamaForCausalLM(T.LlamaConfig(
            **common, intermediate_size=176, num_key_value_heads=options.get("kv_heads", HEADS)))
    elif family == "qwen2":  # Llama with q/k/v biases
        model = T.Qwen2ForCausalLM(T.Qwen2Config(**common, intermediate_size=128,
                                                 num_key_value_heads=2))
    elif family == "mistral":
        model = T.MistralForCausalLM(T.MistralConfig(**common, intermediate_size=128,
                                                     num_key_value_heads=2,
                                                     sliding_window=options.get("sliding_window")))
    elif family == "gemma":  # tanh GELU gate, scaled embedding, (1 + w) RMSNorm, MQA
        model = T.GemmaForCausalLM(T.GemmaConfig(**common, intermediate_size=128,
                                                 num_key_value_heads=1, head_dim=16))
    elif family == "phi3":  # fused qkv and gate/up projections
        model = T.Phi3ForCausalLM(T.Phi3Config(**common, intermediate_size=128,
                                               num_key_value_heads=HEADS, pad_token_id=0))
    elif family == "neox":  # parallel residual, rotary on a quarter of each head
        model = T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**common, intermediate_size=128,
                                                     rotary_pct=0.25))
    elif family == "gptj":  # a stored sin/cos table gathered by position, interleaved rotary
        model = T.GPTJForCausalLM(T.GPTJConfig(vocab_size=VOCAB, n_embd=EMBD, n_layer=LAYERS,
                                               n_head=HEADS, n_positions=CTX, rotary_dim=8))
    elif family == "opt":  # ReLU, learned positions offset by 2
        model = T.OPTForCausalLM(T.OPTConfig(**common, ffn_dim=128, word_embed_proj_dim=EMBD))
    elif family == "bloom":  # ALiBi slopes tiled per sequence (Tile), no positions
        model = T.BloomForCausalLM(T.BloomConfig(vocab_size=VOCAB, hidden_size=EMBD,
                                                 n_layer=LAYERS, n_head=HEADS))
    elif family == "gemma2":  # tanh soft-capped attention scores and logits
        model = T.Gemma2ForCausalLM(T.Gemma2Config(**common, intermediate_size=128,
                                                   num_key_value_heads=2, head_dim=16,
                                                   sliding_window=5, attn_logit_softcapping=1.0,
                                                   final_logit_softcapping=5.0))
    elif family == "qwen3":
        model = T.Qwen3ForCausalLM(T.Qwen3Config(**common, intermediate_size=128,
                                                 num_key_value_heads=2, head_dim=16))
    elif family == "gemma3":
        model = T.Gemma3ForCausalLM(T.Gemma3TextConfig(**common, intermediate_size=128,
                                                       num_key_value_heads=2, head_dim=16,
                                                       sliding_window=6))
    elif family == "phi":
        model = T.PhiForCausalLM(T.PhiConfig(**common, intermediate_size=128,
                                             partial_rotary_factor=0.5))
    elif family == "mpt":  # ALiBi
        model = T.MptForCausalLM(T.MptConfig(vocab_size=VOCAB, d_model=EMBD, n_layers=LAYERS,
                                             n_heads=HEADS, max_seq_len=CTX))
    elif family == "bigcode":
        model = T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(vocab_size=VOCAB, n_embd=EMBD,
                                                           n_layer=LAYERS, n_head=HEADS,
                                                           n_positions=CTX, multi_query=True))
    elif family == "codegen":
        model = T.CodeGenForCausalLM(T.CodeGenConfig(vocab_size=VOCAB, n_embd=EMBD,
                                                     n_layer=LAYERS, n_head=HEADS,
                                                     n_positions=CTX, n_ctx=CTX, rotary_dim=8))
    elif family == "stablelm":
        model = T.StableLmForCausalLM(T.StableLmConfig(**common, intermediate_size=128,
                                                       num_key_value_heads=HEADS))
    elif family == "olmo":
        model = T.OlmoForCausalLM(T.OlmoConfig(**common, intermediate_size=128))
    elif family == "olmo2":
        model = T.Olmo2ForCausalLM(T.Olmo2Config(**common, intermediate_size=128))
    elif family == "cohere":
        model = T.CohereForCausalLM(T.CohereConfig(**common, intermediate_size=128,
                                                   num_key_value_heads=HEADS))
    elif family == "granite":
        model = T.GraniteForCausalLM(T.GraniteConfig(**common, intermediate_size=128))
    elif family == "llama3":  # Llama 3's scaled rotary frequencies
        model = T.LlamaForCausalLM(T.LlamaConfig(
            **common, intermediate_size=128,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}))
    elif family == "gptneo":  # global and local attention layers
        model = T.GPTNeoForCausalLM(T.GPTNeoConfig(vocab_size=VOCAB, hidden_size=EMBD,
                                                   num_layers=LAYERS, num_heads=HEADS,
                                                   max_position_embeddings=CTX,
                                                   attention_types=[[["global", "local"], 1]],
                                                   window_size=8))
    elif family == "starcoder2":
        model = T.Starcoder2ForCausalLM(T.Starcoder2Config(**common, intermediate_size=128,
                                                           num_key_value_heads=2))
    elif family == "xglm":  # BART-style attention: [B * H, T, T] scores, masked in 4-D, clamped
        model = T.XGLMForCausalLM(T.XGLMConfig(vocab_size=VOCAB, max_position_embeddings=CTX,
                                               d_model=EMBD, num_layers=LAYERS,
                                               attention_heads=HEADS, ffn_dim=128))
    elif family == "deepseek_v3":  # multi-head latent attention (q and k assembled by
        # slice assignments: ScatterND), dense MLPs only (its MoE layers do not export:
        # transformers' grouped_mm has no ONNX translation)
        model = T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
            **common, num_key_value_heads=HEADS, intermediate_size=128,
            first_k_dense_replace=LAYERS, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=16, n_group=1, topk_group=1, pad_token_id=0))
    elif family in GENERIC:
        config = T.AutoConfig.for_model(family, **common, intermediate_size=128,
                                        num_key_value_heads=2, head_dim=16, pad_token_id=0,
                                        **GENERIC[family])
        model = T.AutoModelForCausalLM.from_config(config)
    elif family == "falcon":  # multi-query heads picked from a fused projection
        model = T.FalconForCausalLM(T.FalconConfig(vocab_size=VOCAB, hidden_size=EMBD,
                                                   num_hidden_layers=LAYERS,
                                                   num_attention_heads=HEADS,
                                                   new_decoder_architecture=False,
                                                   multi_query=True))
    else:
        raise ValueError(family)
    model.config.use_cache = False
    # A fresh model's biases are zero and its norm scales one: give them values, so a
    # bias or scale the importer mixed up would show in the logits.
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(options.get("qk_gain", 1.0))
    return model.eval()


class Logits(torch.nn.Module):
    """input_ids [, attention_mask] -> logits, the signature pipemesh imports; keeps
    transformers' parameter names (the submodules are registered under their own names)."""

    def __init__(self, model):
        super().__init__()
        self._modules.update(model._modules)  # share the submodules under their own names
        self.forward_impl = model.forward

    def forward(self, input_ids, attention_mask=None):
        return self.forward_impl(input_ids=input_ids, attention_mask=attention_mask,
                                 use_cache=False).logits


def export(model, path, optimize, attention_mask, opset=None):
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=CTX)
    x = torch.randint(0, VOCAB, (2, 16))
    args, names, shapes = (x,), ["input_ids"], {"input_ids": {0: batch, 1: seq}}
    if attention_mask:
        args, names = (x, torch.ones_like(x)), names + ["attention_mask"]
        shapes["attention_mask"] = {0: batch, 1: seq}
    torch.onnx.export(Logits(model), args, path, dynamo=True, optimize=optimize,
                      external_data=False, input_names=names, output_names=["logits"],
                      dynamic_shapes=shapes, opset_version=opset)
    # Drop the per-node stack traces and FX names (two thirds of the file) and keep the
    # fixture byte-stable across runs.
    import onnx
    m = onnx.load(path)
    for node in m.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    del m.metadata_props[:]
    m.producer_version = ""
    onnx.save(m, path)


def run_onnx(path):
    """The export evaluated by onnxruntime, or, where onnxruntime rejects what the
    exporter wrote, by onnx's reference evaluator: onnxruntime 1.23's RotaryEmbedding
    wants cos and sin tables of the input's batch, the exporter's optimizer writes them
    [1, S, D / 2] (the spec's function broadcasts them)."""
    import onnx
    import onnxruntime
    from onnx.reference import ReferenceEvaluator
    model = onnx.load(path)
    if any(n.op_type == "RotaryEmbedding" for n in model.graph.node):
        ev = ReferenceEvaluator(model)
        return (lambda feeds: ev.run(["logits"], feeds)[0]), "onnx.reference"
    ort = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return (lambda feeds: ort.run(["logits"], feeds)[0]), "onnxruntime"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="pipemesh-run (writes the default corpus)")
    ap.add_argument("--out", default=os.path.join(HERE, "fixtures"))
    ap.add_argument("--only")
    ap.add_argument("--opset", type=int, help="with --sweep: export at this opset (23 and "
                    "later write scaled_dot_product_attention as ai.onnx Attention)")
    ap.add_argument("--optimize", action="store_true", help="with --sweep: with the exporter's "
                    "optimizer (its default; at opset 23 it fuses RMSNorm and rotary too)")
    ap.add_argument("--sweep", metavar="DIR", help="export every SWEEP family into DIR (NAME.onnx "
                    "and NAME.npz with transformers' logits), for test/Numerics/check_import.py "
                    "--fixtures DIR --models models")
    ap.add_argument("--ref-seq", type=int, default=0, metavar="N",
                    help="with --sweep: the reference batch is one sequence of N tokens "
                    "(default 2 x 16) and the models' context at least N; past 4096 tokens "
                    "the importer leaves the masks computed")
    args = ap.parse_args(argv)
    if args.ref_seq and not args.sweep:
        ap.error("--ref-seq goes with --sweep (the fixtures keep their 2 x 16 batch)")
    global CTX
    CTX = max(CTX, args.ref_seq)  # learned position tables long enough
    if args.sweep:
        os.makedirs(args.sweep, exist_ok=True)
        fixtures = {f"sweep_{f}": (f, {"seed": 100 + k, "opset": args.opset,
                                       "optimize": args.optimize})
                    for k, f in enumerate(SWEEP)}
        args.out = args.sweep
    else:
        fixtures = FIXTURES
    import transformers
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="export-hf-")
    corpus = os.path.join(work, "corpus.bin")
    subprocess.run([args.run, "--write-default-corpus", corpus], check=True)
    tokens = check_training.read_shard(corpus)
    for name, (family, options) in fixtures.items():
        if args.only and args.only not in name:
            continue
        seed = options["seed"]
        path = os.path.join(args.out, name + ".onnx")
        mask = options.get("attention_mask", False)
        try:
            export(build(family, options, seed), path, options.get("optimize", False), mask,
                   options.get("opset"))
        except Exception as e:  # noqa: BLE001 - a sweep reports the exporter's failures
            if not args.sweep:
                raise
            print(f"{name}: the exporter failed: {type(e).__name__}: "
                  f"{str(e).strip().splitlines()[0][:300]}", flush=True)
            continue
        model = build(family, options, seed)  # the same weights, untouched by the export
        shape = (1, args.ref_seq) if args.ref_seq else (2, 16)
        ids = np.random.default_rng([seed, 0xBA7C4]).integers(0, VOCAB, shape, dtype=np.int64)
        feeds = {"input_ids": ids}
        if mask:  # padding inside the second row, as gen_gpt2.reference_batch has it
            feeds["attention_mask"] = np.ones_like(ids)
            feeds["attention_mask"][1, 4:7] = 0
        with torch.no_grad():
            logits = model(**{k: torch.from_numpy(v) for k, v in feeds.items()},
                           use_cache=False).logits.numpy()
        evaluate, evaluator = run_onnx(path)
        err = float(np.abs(evaluate(feeds) - logits).max())
        if err > 1e-4:
            raise SystemExit(f"{name}: {evaluator} differs from transformers by {err:.2e}")
        np.savez(os.path.join(args.out, name + ".npz"), **feeds, logits=logits)
        if not options.get("train"):
            print(f"{name}: {evaluator} vs transformers {err:.1e}")
            continue
        losses, trained = check_training.train_torch(
            model, lambda x: model(input_ids=x, use_cache=False).logits, tokens, **TRAIN)
        with open(os.path.join(args.out, name + ".train.json"), "w") as f:
            json.dump({"losses": losses, "trained_parameters": trained, **TRAIN,
                       "heads": HEADS, "torch": torch.__version__,
                       "transformers": transformers.__version__,
                       f"{evaluator}_vs_transformers": err}, f, indent=1)
        print(f"{name}: {evaluator} vs transformers {err:.1e}; loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f}; {trained:,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
