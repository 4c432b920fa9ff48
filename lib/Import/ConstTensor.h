//===- ConstTensor.h - host tensors for import-time folding -----*- C++ -*-===//
//
// Once batch and seq are bound, an exported GPT's shape plumbing (Shape,
// Gather, Concat, Range, ...) computes on constants only. The importer
// evaluates it with these small host tensors instead of emitting it, so the IR
// never sees it. Floating values are held as double but rounded to their ONNX
// type after every operation, so results match what ONNX would compute.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_IMPORT_CONSTTENSOR_H
#define PIPEMESH_LIB_IMPORT_CONSTTENSOR_H

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipemesh::onnximport {

/// Element types, numbered as ONNX's TensorProto::DataType.
enum class DType : int32_t {
  Undefined = 0,
  F32 = 1,
  U8 = 2,
  I8 = 3,
  U16 = 4,
  I16 = 5,
  I32 = 6,
  I64 = 7,
  Str = 8,
  Bool = 9,
  F16 = 10,
  F64 = 11,
  U32 = 12,
  U64 = 13,
  BF16 = 16,
};

bool isFloatType(DType t);
bool isSupportedType(DType t);
const char *dtypeName(DType t);

/// double -> int64 truncating toward zero, saturating out-of-range values and
/// mapping NaN to 0 (a plain cast would be undefined behaviour).
int64_t saturateToInt64(double v);

struct ConstTensor {
  DType dtype = DType::F32;
  shapes::Shape shape;
  std::vector<double> f;  // floating types
  std::vector<int64_t> i; // integer and bool types

  bool isFloat() const { return isFloatType(dtype); }
  int64_t numel() const { return shapes::numElements(shape); }
  double asDouble(int64_t k) const { return isFloat() ? f[k] : (double)i[k]; }
  int64_t asInt(int64_t k) const { return isFloat() ? saturateToInt64(f[k]) : i[k]; }
  /// All values as int64 (shape operands: axes, starts, dims).
  std::vector<int64_t> ints() const;

  static ConstTensor zeros(DType dtype, llvm::ArrayRef<int64_t> shape);
  static ConstTensor scalarInt(int64_t v, DType dtype = DType::I64);
  static ConstTensor vectorInt(llvm::ArrayRef<int64_t> v);
  /// Stores `v` at flat index k, rounded / wrapped to the tensor's type.
  void set(int64_t k, double v);
  void setInt(int64_t k, int64_t v);
};

/// Row-major strides of `shape`.
shapes::Shape stridesOf(llvm::ArrayRef<int64_t> shape);

// Folding kernels. Each returns nullopt with a reason in `why` on bad input.
using BinaryFn = llvm::function_ref<double(double, double)>;
using BinaryIntFn = llvm::function_ref<int64_t(int64_t, int64_t)>;
std::optional<ConstTensor> foldBinary(const ConstTensor &a, const ConstTensor &b, DType outType,
                                      BinaryFn ffn, BinaryIntFn ifn, std::string &why);
ConstTensor foldUnary(const ConstTensor &a, llvm::function_ref<double(double)> fn);
ConstTensor foldCast(const ConstTensor &a, DType to);
std::optional<ConstTensor> foldWhere(const ConstTensor &c, const ConstTensor &a,
                                     const ConstTensor &b, std::string &why);
std::optional<ConstTensor> foldGather(const ConstTensor &data, const ConstTensor &indices,
                                      int64_t axis, std::string &why);
std::optional<ConstTensor> foldConcat(llvm::ArrayRef<const ConstTensor *> ins, int64_t axis,
                                      std::string &why);
ConstTensor foldReshape(const ConstTensor &a, llvm::ArrayRef<int64_t> shape);
ConstTensor foldTranspose(const ConstTensor &a, llvm::ArrayRef<int64_t> perm);
ConstTensor foldSlice(const ConstTensor &a, llvm::ArrayRef<int64_t> starts,
                      llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides);
ConstTensor foldBroadcast(const ConstTensor &a, llvm::ArrayRef<int64_t> shape);
/// ONNX MatMul (numpy's: vectors promoted, batch dims broadcast) of two float
/// tensors, accumulated in double and rounded to `a`'s type. Nullopt when its
/// result elements times the contracted length exceed `maxWork` (`why` empty)
/// or the operands do not multiply (`why` says so).
std::optional<ConstTensor> foldMatMul(const ConstTensor &a, const ConstTensor &b,
                                      int64_t maxWork, std::string &why);
ConstTensor foldReduce(const ConstTensor &a, llvm::ArrayRef<int64_t> axes, bool keepdims,
                       bool mean);
/// `a` with every dim along which its values do not change cut to size 1: the
/// smallest tensor that broadcasts back to it (a mask identical for every
/// sequence of the batch keeps one).
ConstTensor compressUniformDims(const ConstTensor &a);
/// Whether compressUniformDims would shrink `a` (a [T, T] mask: no).
bool hasUniformDim(const ConstTensor &a);
/// ONNX CumSum along `axis` (negative counts from the end), optionally
/// exclusive (each sum leaves its own element out) and/or reversed.
std::optional<ConstTensor> foldCumSum(const ConstTensor &a, int64_t axis, bool exclusive,
                                      bool reverse, std::string &why);
/// ONNX GatherND: the last dimension of `indices` holds coordinates into the
/// leading dimensions of `data` after its first `batchDims` (shared with
/// `indices`); each picks the slice of the remaining dimensions.
std::optional<ConstTensor> foldGatherND(const ConstTensor &data, const ConstTensor &indices,
                                        int64_t batchDims, int64_t maxElements,
                                        std::string &why);

} // namespace pipemesh::onnximport

#endif // PIPEMESH_LIB_IMPORT_CONSTTENSOR_H
