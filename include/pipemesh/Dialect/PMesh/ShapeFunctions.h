//===- ShapeFunctions.h - result shapes of pmesh ops ------------*- C++ -*-===//
//
// One definition of every op's shape rule, shared by the op verifiers, the ONNX
// importer (which must report a bad model as a diagnostic naming the node, so
// it checks before it builds) and the rewrite patterns. Each function returns
// the result shape, or std::nullopt with a human-readable reason in `why`.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_DIALECT_PMESH_SHAPEFUNCTIONS_H
#define PIPEMESH_DIALECT_PMESH_SHAPEFUNCTIONS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>
#include <optional>
#include <string>

namespace pipemesh::shapes {

using Shape = llvm::SmallVector<int64_t, 6>;
using OptShape = std::optional<Shape>;

/// Human-readable "2x3x4" (or "scalar").
std::string str(llvm::ArrayRef<int64_t> shape);
/// Human-readable "[1, 0, 2]" for a list of axes, sizes or a permutation.
std::string list(llvm::ArrayRef<int64_t> values);
int64_t numElements(llvm::ArrayRef<int64_t> shape);
/// The element count, or nullopt when it does not fit in int64_t.
std::optional<int64_t> checkedNumElements(llvm::ArrayRef<int64_t> shape);
/// Resolves a possibly negative axis against `rank`; nullopt when out of range.
std::optional<int64_t> normalizeAxis(int64_t axis, int64_t rank);

OptShape broadcast(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, std::string &why);
/// True when `from` can be numpy-broadcast to exactly `to`.
bool broadcastsTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);
OptShape matmul(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b, bool transA,
                bool transB, std::string &why);
OptShape reduce(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> axes, bool keepdims,
                std::string &why);
OptShape transpose(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> perm, std::string &why);
OptShape concat(llvm::ArrayRef<Shape> ins, int64_t axis, std::string &why);
std::optional<llvm::SmallVector<Shape>> split(llvm::ArrayRef<int64_t> in, int64_t axis,
                                              llvm::ArrayRef<int64_t> sizes, std::string &why);
OptShape slice(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> starts,
               llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides,
               std::string &why);
/// Query heads per head of an attention's k or v: 1 when its leading dims
/// are q's; g when they are q's with the last (the heads) divided by g
/// (grouped-query attention: query head h reads head h / g); 0 otherwise.
int64_t attentionHeadGroup(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> kv);
OptShape attention(llvm::ArrayRef<int64_t> q, llvm::ArrayRef<int64_t> k,
                   llvm::ArrayRef<int64_t> v, std::optional<llvm::ArrayRef<int64_t>> mask,
                   std::string &why);
OptShape embedding(llvm::ArrayRef<int64_t> table, llvm::ArrayRef<int64_t> ids, std::string &why);
OptShape crossEntropy(llvm::ArrayRef<int64_t> logits, llvm::ArrayRef<int64_t> targets,
                      llvm::StringRef reduction, std::string &why);
/// Checks scale/bias against the normalized trailing dims of `in`.
bool layerNorm(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> scale,
               std::optional<llvm::ArrayRef<int64_t>> bias, int64_t axis, std::string &why);

} // namespace pipemesh::shapes

#endif // PIPEMESH_DIALECT_PMESH_SHAPEFUNCTIONS_H
