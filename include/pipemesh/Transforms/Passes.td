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
  }];
  let dependentDialects = ["pipemesh::pmesh::PMeshDialect", "mlir::func::FuncDialect"];
}

#endif // PIPEMESH_TRANSFORMS_PASSES_TD
