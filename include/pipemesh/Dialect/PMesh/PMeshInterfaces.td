//===- PMeshInterfaces.td - pmesh op interfaces ------------------*- tablegen -*-===//
#ifndef PIPEMESH_DIALECT_PMESH_INTERFACES_TD
#define PIPEMESH_DIALECT_PMESH_INTERFACES_TD

include "mlir/IR/OpBase.td"

def PMesh_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::pipemesh::pmesh";
  let description = [{
    Reverse-mode gradient rule of an op. Given the gradients of its results
    (null where a result has none), builds the ops computing the gradients of
    its operands, and returns them (null for operands that need none:
    `needsGrad[i]` is false, or the operand is not differentiable).
  }];
  let methods = [
    InterfaceMethod<"Builds the operand gradients.",
      "::mlir::LogicalResult", "buildGradients",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$needsGrad,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

#endif // PIPEMESH_DIALECT_PMESH_INTERFACES_TD
