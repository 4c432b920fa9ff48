//===- Passes.td - PipeMesh passes --------------------------------*- tablegen -*-===//
#ifndef PIPEMESH_TRANSFORMS_PASSES_TD
#define PIPEMESH_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PMeshRaise : Pass<"pmesh-raise", "mlir::ModuleOp"> {
  let summary = "Raise decomposed exporter patterns to fused pmesh ops";
  let description = [{
    Recognises the decomposed forms ONNX exporters emit and replaces them with
    the fused op: layer_norm (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add),
    gelu (tanh and erf formulas), causal attention (MatMul, scale,
    Where(tril, min), optional additive mask, Softmax, MatMul) and matmul + bias.
    Runs to a fixpoint together with the pmesh canonicalizations, then removes
    dead ops.
  }];
  let dependentDialects = ["pipemesh::pmesh::PMeshDialect"];
}

def PMeshSummary : Pass<"pmesh-summary", "mlir::ModuleOp"> {
  let summary = "Print a human summary of a pmesh module";
  let description = [{
    Prints, to stdout, the model's inputs and outputs, its parameters (count,
    elements, fp32 bytes, which share initial values) and the op histogram of
    the forward function. The module is left unchanged.
  }];
}

def PMeshPartition : Pass<"pmesh-partition", "mlir::ModuleOp"> {
  let summary = "Cut @forward into pipeline stage chunks at transformer layer boundaries";
  let description = [{
    Runs on `func.func @forward` before `--pmesh-autodiff`. Transformer layers
    are found from parameter names (`*.h.<i>.*`, `*.layers.<i>.*`,
    `*.blocks.<i>.*`, `*.layer.<i>.*`, ordered by first use); every op belongs
    to the latest layer it depends on, ops before the first layer
    (embeddings) are "pre" and ops after the last layer that read non-layer
    parameters (final norm, head, loss) and their dependents are "post". Each
    layer is costed with the cost model (forward + backward ~ 3x the forward
    time on `device`; activation bytes plus 16 bytes of parameter state per
    fp32 element for memory), and the layers are cut into `stages` contiguous
    chunks minimising the largest chunk time (then the largest chunk memory;
    remaining ties give later chunks more layers), where chunk 0 also carries
    "pre" and the last chunk "post". With `ranks` pipeline ranks holding the
    chunks round-robin (interleaved stages: chunk c on rank c % ranks) and
    equal layers, those ties go instead to the least largest rank time, rank
    parameter bytes, sum of the rounds' largest chunks, then the lightest
    last rounds (the first chunk may keep only "pre", the last only "post").
    `layers-per-stage` gives the layout
    instead (one entry per stage summing to the layer count; only the first
    and last stage may have 0 layers).

    Every op of @forward (but the return) gets `pmesh.stage = c : i64`.
    Parameter reads, constants and ops computed from them alone are cloned
    per reading stage (a tied embedding gets a `pmesh.get_param` on chunk 0
    and on the last chunk); ops that depend on no parameter take the smallest
    stage of their users. The module gets `pmesh.num_stages` and
    `pmesh.layers_per_stage`.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", "1", "number of stage chunks (pp * vpp)">,
    Option<"ranks", "ranks", "int64_t", "1",
           "pipeline ranks (pp): chunk c runs on rank c % ranks">,
    ListOption<"layersPerStage", "layers-per-stage", "int64_t",
               "explicit layout: transformer layers per stage, one entry per stage">,
    Option<"device", "device", "std::string", "\"cpu\"",
           "cost-model device preset: cpu, a100 or h100">,
    Option<"cluster", "cluster", "std::string", "\"\"",
           "a pipemesh-sim cluster preset or cluster JSON file: its device costs the "
           "layers (instead of device=)">,
    Option<"print", "print", "bool", "false",
           "print the layers, their costs and the chosen layout to stdout">,
  ];
  let dependentDialects = ["pipemesh::pmesh::PMeshDialect"];
}

def PMeshAutodiff : Pass<"pmesh-autodiff", "mlir::ModuleOp"> {
  let summary = "Build the training step: forward, loss, backward, AdamW";
  let description = [{
    From `func.func @forward`, builds `@train_step` (one micro-batch: the
    forward pass, the loss, and reverse-mode gradients accumulated into every
    parameter with `pmesh.accumulate_grad`; returns the loss) and
    `@optimizer_step` (`pmesh.adamw` over every parameter that has a
    gradient; weight decay on parameters of rank >= 2). If @forward returns
    logits [B, T, V] and no 0-d loss, the causal-LM cross-entropy (mean over
    tokens) against a new `targets` argument [B, T] is appended; a 0-d result
    (named "loss" when several) is used as the loss otherwise. Gradients of
    values used several times are summed, broadcasting is undone by
    reductions, and a parameter read in several places (tied) gets one summed
    gradient.

    After `--pmesh-partition` (ops carry `pmesh.stage`), every op built while
    differentiating a forward op gets that op's stage, the appended loss and
    its seed go on the stage of the logits (or loss) producer, the sum of a
    fanned-out value's gradients goes on the stage of the value's producer,
    and there is one `pmesh.accumulate_grad` per (parameter, stage) reading
    it: gradients of a tied parameter are not summed across stages (the plan
    sums them with an all-reduce over the tied group).
  }];
  let dependentDialects = ["pipemesh::pmesh::PMeshDialect", "mlir::func::FuncDialect"];
}

#endif // PIPEMESH_TRANSFORMS_PASSES_TD
