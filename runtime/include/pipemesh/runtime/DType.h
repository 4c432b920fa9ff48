//===- DType.h - element types of plan buffers ------------------*- C++ -*-===//
#ifndef PIPEMESH_RUNTIME_DTYPE_H
#define PIPEMESH_RUNTIME_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipemesh::rt {

using Dims = std::vector<int64_t>;

/// Element types a plan buffer can hold. i1 is stored as one byte (0 or 1).
/// bf16 is a storage type (activations=bf16): kernels compute in f32 and
/// round where they store (pipemesh/runtime/Bf16.h).
enum class DType { F32, F64, I64, I32, I1, BF16 };

size_t dtypeSize(DType t);
/// The plan's spelling: "f32", "f64", "i64", "i32", "i1", "bf16".
const char *dtypeName(DType t);
std::optional<DType> parseDType(const std::string &name);

/// Number of elements of a shape (1 for a scalar).
int64_t numElements(const Dims &shape);
/// "4x64xf32"-style rendering for messages ("scalar" for rank 0 shapes).
std::string shapeStr(const Dims &shape);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_DTYPE_H
