//===- PMesh.h - the pmesh dialect and its ops ------------------*- C++ -*-===//
#ifndef PIPEMESH_DIALECT_PMESH_PMESH_H
#define PIPEMESH_DIALECT_PMESH_PMESH_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "pipemesh/Dialect/PMesh/PMeshOpsDialect.h.inc"
#include "pipemesh/Dialect/PMesh/PMeshInterfaces.h.inc"

#define GET_OP_CLASSES
#include "pipemesh/Dialect/PMesh/PMeshOps.h.inc"

namespace pipemesh::pmesh {
/// attention and attention_grad: `window` is >= 0, and > 0 only with causal
/// (a band below the diagonal); `softcap` is finite and >= 0.
mlir::LogicalResult verifyAttentionOptions(mlir::Operation *op, int64_t window, bool causal,
                                           float softcap);
} // namespace pipemesh::pmesh

#endif // PIPEMESH_DIALECT_PMESH_PMESH_H
