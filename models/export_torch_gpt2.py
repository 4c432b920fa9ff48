#!/usr/bin/python3
"""Exports a GPT-2 written the way HuggingFace writes it through torch.onnx.export.

PipeMesh's users bring real exports, not our generator's clean graphs, so the importer must
digest what torch.onnx produces for HF's GPT2LMHeadModel: Conv1D projections as addmm,
NewGELU written out, the registered boolean causal `bias` buffer sliced and applied with
torch.where(…, finfo.min), the fused c_attn split, view+permute heads, the tied lm_head,
optional HF attention_mask arithmetic and the shifted CrossEntropyLoss. This module
reproduces that code (transformers 4.3x, GPT2 eager attention) without needing the
transformers package, with weights from gen_gpt2.init_weights (same seed -> same values).

    export_torch_gpt2.py --opset 17 --dynamic -o gpt2.onnx --save-reference gpt2.npz
    export_torch_gpt2.py --no-fold --attention-mask --labels -o gpt2_loss.onnx
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_gpt2  # noqa: E402  (shared config, weights and reference batch)


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer with the weight stored [in, out], applied with addmm."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    additive_mask = False
    def __init__(self, cfg):
        super().__init__()
        T = cfg.n_ctx
        # HF registers this non-persistent buffer; the export turns it into an initializer
        # (or folds the slice of it into a constant).
        self.register_buffer("bias", torch.tril(torch.ones((T, T), dtype=torch.bool)).view(1, 1, T, T),
                             persistent=False)
        self.embed_dim, self.num_heads = cfg.n_embd, cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.split_size = cfg.n_embd
        self.c_attn = Conv1D(3 * cfg.n_embd, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, cfg.n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        if causal_mask.dtype == torch.bool:
            attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        elif self.additive_mask:  # --additive-causal-mask: 0 where attended, -inf elsewhere
            attn_weights = attn_weights + causal_mask
        else:  # minGPT's float 0/1 mask (--float-causal-mask)
            attn_weights = attn_weights.masked_fill(causal_mask == 0, mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        return tensor.view(new_shape).permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states, attention_mask=None):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        return self.resid_dropout(self.c_proj(attn_output))


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(4 * cfg.n_embd, cfg.n_embd)
        self.c_proj = Conv1D(cfg.n_embd, 4 * cfg.n_embd)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=gen_gpt2.LN_EPS)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=gen_gpt2.LN_EPS)
        self.mlp = GPT2MLP(cfg)

    def forward(self, hidden_states, attention_mask=None):
        residual = hidden_states
        hidden_states = self.attn(self.ln_1(hidden_states), attention_mask)
        hidden_states = hidden_states + residual
        residual = hidden_states
        return residual + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.n_embd)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=gen_gpt2.LN_EPS)

    def forward(self, input_ids, attention_mask=None):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long, device=input_ids.device)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
        if attention_mask is not None:
            # HF's 4-D additive mask: 0 where attended, finfo.min where padded.
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=self.wte.weight.dtype)
            attention_mask = (1.0 - attention_mask) * torch.finfo(self.wte.weight.dtype).min
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states.view(input_shape + (hidden_states.size(-1),))


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.transformer = GPT2Model(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as HF's tie_weights() does

    def forward(self, input_ids, attention_mask=None, labels=None):
        lm_logits = self.lm_head(self.transformer(input_ids, attention_mask))
        if labels is None:
            return lm_logits
        # HF's causal-LM loss: position t predicts labels[t + 1].
        shift_logits = lm_logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = nn.CrossEntropyLoss()(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return loss, lm_logits


def build_torch_model(cfg, seed):
    """GPT2LMHeadModel in eval mode holding gen_gpt2's weights for `seed`."""
    model = GPT2LMHeadModel(cfg)
    state = {name: torch.from_numpy(arr) for name, arr in gen_gpt2.init_weights(cfg, seed)}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    # Only the non-persistent causal buffers may be absent from the state dict.
    assert not unexpected and all(k.endswith("attn.bias") for k in missing), (missing, unexpected)
    return model.eval()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gen_gpt2.add_config_args(ap)
    ap.add_argument("--opset", type=int, default=17, help="13..17 (torch 1.13's range)")
    ap.add_argument("--dynamic", action="store_true",
                    help='dynamic_axes: dims 0/1 of inputs and logits named "batch"/"seq"')
    ap.add_argument("--no-fold", action="store_true", help="do_constant_folding=False")
    ap.add_argument("--attention-mask", action="store_true", help="add HF attention_mask input")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="export the model in this precision (model.to(dtype): bfloat16 "
                         "initializers and compute; torch 1.13 cannot trace float16 on CPU)")
    ap.add_argument("--modules-as-functions", action="store_true",
                    help="export_modules_as_functions: each GPT2Block and GPT2MLP a "
                         "model-local ONNX function (IR 8), called once per layer "
                         "(torch 1.13 fails beyond two layers: an internal assert in its "
                         "function extraction)")
    ap.add_argument("--additive-causal-mask", action="store_true",
                    help="the causal `bias` buffer a persistent float tensor of 0 and -inf "
                         "added to the scores (a float initializer that is not a "
                         "parameter, with --no-fold)")
    ap.add_argument("--float-causal-mask", action="store_true",
                    help="the causal `bias` buffer a float 0/1 tensor applied as "
                         "masked_fill(bias == 0, min), as minGPT writes it (a float "
                         "initializer that is not a parameter, with --no-fold)")
    ap.add_argument("--labels", action="store_true",
                    help="add labels input and `loss` output (shifted causal-LM cross-entropy)")
    ap.add_argument("--save-reference", metavar="NPZ",
                    help="save PyTorch's logits (and loss) on the fixed reference batch")
    args = ap.parse_args(argv)
    if not 13 <= args.opset <= 17:
        ap.error("--opset must be in 13..17 (the range torch 1.13 exports)")
    cfg = gen_gpt2.config_from_args(args)
    if cfg.kv_heads != cfg.n_head:
        ap.error("--kv-heads: transformers' GPT-2 has one key/value head per query head")
    try:
        cfg.validate()
    except ValueError as e:
        ap.error(str(e))

    torch.manual_seed(args.seed)
    model = build_torch_model(cfg, args.seed)
    if args.dtype != "float32":
        model = model.to(getattr(torch, args.dtype))
    if args.float_causal_mask:
        for block in model.transformer.h:  # persistent, as minGPT registers it
            block.attn.register_buffer("bias", block.attn.bias.float(), persistent=True)
    if args.additive_causal_mask:
        for block in model.transformer.h:
            keep = block.attn.bias
            block.attn.register_buffer("bias", torch.zeros(keep.shape).masked_fill(
                ~keep, float("-inf")), persistent=True)
            block.attn.additive_mask = True
    batch = gen_gpt2.reference_batch(cfg, args.seed)
    names = ["input_ids"] + (["attention_mask"] if args.attention_mask else []) \
        + (["labels"] if args.labels else [])
    example = tuple(torch.from_numpy(batch[n]) for n in names)
    output_names = (["loss"] if args.labels else []) + ["logits"]
    dynamic_axes = None
    if args.dynamic:
        dynamic_axes = {n: {0: "batch", 1: "seq"} for n in names + ["logits"]}

    # Optional inputs go as keyword arguments (a trailing dict), so the model is exported
    # itself, without a wrapper module whose name would prefix every parameter.
    kwargs = dict(zip(names[1:], example[1:]))
    with torch.no_grad():
        torch.onnx.export(model, (example[0], kwargs), args.output, opset_version=args.opset,
                          input_names=names, output_names=output_names,
                          dynamic_axes=dynamic_axes, do_constant_folding=not args.no_fold,
                          export_modules_as_functions=({GPT2Block, GPT2MLP}
                                                       if args.modules_as_functions else False))
        outs = model(example[0], **kwargs)
    print(f"{args.output}: {cfg} opset={args.opset} dynamic={args.dynamic} "
          f"fold={not args.no_fold} inputs={names}", file=sys.stderr)

    if args.save_reference:
        loss, logits = outs if args.labels else (None, outs)
        ref = {n: batch[n] for n in names}
        ref["logits"] = logits.numpy()
        if loss is not None:
            ref["loss"] = loss.numpy()
        gen_gpt2.save_npz(args.save_reference, ref)


if __name__ == "__main__":
    main()
