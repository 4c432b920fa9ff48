//===- PlanInternal.h - helpers shared by the plan writers ------*- C++ -*-===//
#ifndef PIPEMESH_LIB_PLAN_PLANINTERNAL_H
#define PIPEMESH_LIB_PLAN_PLANINTERNAL_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Types.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <string>
#include <vector>

namespace pipemesh::plan::detail {

/// One entry of a rank's buffer table (docs/plan-format.md).
struct Buffer {
  std::string name;
  llvm::SmallVector<int64_t> shape;
  std::string dtype; // f32, i64, i32, i1, f64, f16, bf16
  std::string kind;  // input, activation, param, param_copy, grad, adam_m, adam_v, constant
  std::string param; // for param/param_copy/grad/adam_*
  std::string data;  // constant: safetensors entry
  int aliasOf = -1;  // reshape results share their input's memory
  int64_t offset = 0;
  /// A 1-D shard of `param` (zero >= 1): elem_offset is dpRank * shardNumel.
  bool sharded = false;
  int64_t shardNumel = 0, paddedNumel = 0;

  int64_t bytes() const;
  bool persistent() const {
    return kind == "param" || kind == "param_copy" || kind == "grad" || kind == "adam_m" ||
           kind == "adam_v" || kind == "constant";
  }
};

std::string dtypeOf(mlir::Type t);
llvm::json::Value attrToJson(mlir::Attribute a);

/// The safetensors blob: every parameter's initial value (read from the
/// model's ONNX source unless shapes-only) and every constant.
struct WeightsSpec {
  std::vector<std::string> params; // in order
  llvm::StringMap<std::string> paramSource;
  llvm::StringMap<llvm::SmallVector<int64_t>> paramShape;
  std::map<std::string, mlir::DenseElementsAttr> constants;
};
mlir::LogicalResult writeWeights(mlir::ModuleOp module, const WeightsSpec &spec,
                                 bool shapesOnly, std::string &blob);

} // namespace pipemesh::plan::detail

#endif // PIPEMESH_LIB_PLAN_PLANINTERNAL_H
