//===- PMeshDialect.td - the pmesh dialect -----------------------*- tablegen -*-===//
//
// The graph-level dialect of PipeMesh: the ops a GPT-family model needs, with
// static shapes. Parameters are module-level symbols whose data stays outside
// the IR (in the source ONNX file) until the plan is emitted.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEMESH_DIALECT_PMESH_DIALECT_TD
#define PIPEMESH_DIALECT_PMESH_DIALECT_TD

include "mlir/IR/OpBase.td"

def PMesh_Dialect : Dialect {
  let name = "pmesh";
  let summary = "PipeMesh graph dialect for GPT training";
  let description = [{
    Graph-level operations for GPT language models: matmul, elementwise
    arithmetic with numpy broadcasting, layer_norm, gelu, softmax, causal
    attention, embedding, shape ops and cross-entropy. Every tensor has a static
    shape; parameters are symbols (`pmesh.param`) referenced by
    `pmesh.get_param`.
  }];
  let cppNamespace = "::pipemesh::pmesh";
  let hasConstantMaterializer = 1;
}

class PMesh_Op<string mnemonic, list<Trait> traits = []> :
    Op<PMesh_Dialect, mnemonic, traits>;

#endif // PIPEMESH_DIALECT_PMESH_DIALECT_TD
