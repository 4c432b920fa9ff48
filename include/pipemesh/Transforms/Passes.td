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

#endif // PIPEMESH_TRANSFORMS_PASSES_TD
