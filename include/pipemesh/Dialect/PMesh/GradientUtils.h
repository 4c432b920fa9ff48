//===- GradientUtils.h - helpers shared by gradient rules -------*- C++ -*-===//
#ifndef PIPEMESH_DIALECT_PMESH_GRADIENTUTILS_H
#define PIPEMESH_DIALECT_PMESH_GRADIENTUTILS_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"

namespace pipemesh::pmesh {

/// A 0-d constant of `value` with element type `elt`.
mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc, mlir::Type elt, double value);
/// Sums a broadcast gradient back to `shape` (undoing numpy broadcasting).
mlir::Value unbroadcast(mlir::OpBuilder &b, mlir::Location loc, mlir::Value grad,
                        llvm::ArrayRef<int64_t> shape);
/// reshape when the shape differs (no op otherwise).
mlir::Value reshapeIfNeeded(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                            llvm::ArrayRef<int64_t> shape);

} // namespace pipemesh::pmesh

#endif // PIPEMESH_DIALECT_PMESH_GRADIENTUTILS_H
