//===- Kernels.h - reference semantics of the pmesh ops ---------*- C++ -*-===//
//
// The numeric oracle's definition of every pmesh op, written as plain loops
// over host tensors. Floating values are held and computed in double (only a
// `cast` rounds to its target type); integers in int64, wrapped to their
// width. Nothing here is shared with the importer's folding or the raise
// patterns, so a bug there cannot hide behind the same bug here.
//
// Each kernel computes its own result shape from its operands; the driver
// compares it with the type the IR declares.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_TOOLS_PMESH_INTERP_KERNELS_H
#define PIPEMESH_TOOLS_PMESH_INTERP_KERNELS_H

#include "mlir/IR/Types.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipemesh::interp {

using Shape = llvm::SmallVector<int64_t, 6>;

/// A host tensor. Exactly one of `f` (float element types) and `i` (integer
/// and i1 element types) holds the numel() values, row-major.
struct Tensor {
  mlir::Type elementType;
  Shape shape;
  std::vector<double> f;
  std::vector<int64_t> i;

  bool isFloat() const;
  int64_t numel() const;
  /// Value k as a double, whatever the element type.
  double at(int64_t k) const { return isFloat() ? f[k] : (double)i[k]; }

  /// A zero-filled tensor of the given type and shape.
  static Tensor zeros(mlir::Type elementType, llvm::ArrayRef<int64_t> shape);
};

/// Rounds `v` to the float type `t` (f16, bf16, f32, f64): what storing it
/// in a tensor of that type would keep.
double roundToFloat(mlir::Type t, double v);
/// Wraps `v` to the integer type `t` (i1 is 0/1, as a boolean).
int64_t wrapToInt(mlir::Type t, int64_t v);

/// Numpy broadcast of two shapes; nullopt when they do not broadcast.
std::optional<Shape> broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

// Elementwise. Operands broadcast as in numpy. `resultType` is the result's
// element type (i1 for comparisons, the operands' otherwise).
enum class BinaryKind { Add, Sub, Mul, Div, Pow, Max, Equal, Less, And };
std::optional<Tensor> binary(BinaryKind kind, const Tensor &a, const Tensor &b,
                             mlir::Type resultType, std::string &why);
enum class UnaryKind { Neg, Sqrt, Tanh, Erf, Exp, Log, Sigmoid, Not };
Tensor unary(UnaryKind kind, const Tensor &x);
/// Element type conversion: float->int truncates toward zero, anything->i1
/// is "nonzero", int->int wraps.
std::optional<Tensor> cast(const Tensor &x, mlir::Type to, std::string &why);
std::optional<Tensor> where(const Tensor &cond, const Tensor &onTrue, const Tensor &onFalse,
                            std::string &why);

// Reductions over `axes` (may be negative; an empty list reduces nothing).
std::optional<Tensor> reduce(const Tensor &x, llvm::ArrayRef<int64_t> axes, bool keepdims,
                             bool mean, std::string &why);

// Fused NN ops, with the semantics documented in PMeshOps.td.
std::optional<Tensor> matmul(const Tensor &a, const Tensor &b, const Tensor *bias,
                             bool transposeA, bool transposeB, std::string &why);
std::optional<Tensor> layerNorm(const Tensor &x, const Tensor &scale, const Tensor *bias,
                                double epsilon, int64_t axis, std::string &why);
enum class GeluKind { Erf, Tanh };
Tensor gelu(const Tensor &x, GeluKind kind);
std::optional<Tensor> softmax(const Tensor &x, int64_t axis, bool log, std::string &why);
std::optional<Tensor> attention(const Tensor &q, const Tensor &k, const Tensor &v,
                                const Tensor *mask, double scale, bool causal,
                                int64_t window, double softcap, std::string &why);
std::optional<Tensor> embedding(const Tensor &table, const Tensor &ids, std::string &why);
std::optional<Tensor> crossEntropy(const Tensor &logits, const Tensor &targets,
                                   int64_t ignoreIndex, llvm::StringRef reduction,
                                   std::string &why);

// Shape ops.
std::optional<Tensor> reshape(const Tensor &x, llvm::ArrayRef<int64_t> shape, std::string &why);
std::optional<Tensor> transpose(const Tensor &x, llvm::ArrayRef<int64_t> perm, std::string &why);
std::optional<Tensor> broadcastTo(const Tensor &x, llvm::ArrayRef<int64_t> shape,
                                  std::string &why);
std::optional<std::vector<Tensor>> split(const Tensor &x, int64_t axis,
                                         llvm::ArrayRef<int64_t> sizes, std::string &why);
std::optional<Tensor> concat(llvm::ArrayRef<const Tensor *> xs, int64_t axis, std::string &why);
std::optional<Tensor> slice(const Tensor &x, llvm::ArrayRef<int64_t> starts,
                            llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides,
                            std::string &why);

// Gradient ops (PMeshTrainOps.td), the exact derivatives of the kernels above.

/// Gradients of layerNorm(x, scale, bias) given dy: dx (x's shape), dscale and
/// dbias (both scale's shape: summed over rows and over the dims scale
/// broadcasts along).
std::optional<std::vector<Tensor>> layerNormGrad(const Tensor &dy, const Tensor &x,
                                                 const Tensor &scale, double epsilon,
                                                 int64_t axis, std::string &why);
std::optional<Tensor> geluGrad(const Tensor &dy, const Tensor &x, GeluKind kind,
                               std::string &why);
/// From the saved output y: softmax y * (dy - sum(dy * y)); log_softmax
/// dy - exp(y) * sum(dy); sums along `axis`.
std::optional<Tensor> softmaxGrad(const Tensor &dy, const Tensor &y, int64_t axis, bool log,
                                  std::string &why);
/// dq, dk, dv of attention(q, k, v, mask) given dout; the probabilities are
/// recomputed as the forward kernel computes them.
std::optional<std::vector<Tensor>> attentionGrad(const Tensor &dout, const Tensor &q,
                                                 const Tensor &k, const Tensor &v,
                                                 const Tensor *mask, double scale, bool causal,
                                                 int64_t window, double softcap, std::string &why);
/// Scatter-add of the rows of dy into a zero table of `rows` rows.
std::optional<Tensor> embeddingGrad(const Tensor &dy, const Tensor &ids, int64_t rows,
                                    std::string &why);
/// dloss * d(cross_entropy)/dlogits: (softmax(row) - onehot(target)) per
/// counted row, times dloss (sum), dloss / counted (mean) or dloss[n] (none);
/// ignored rows get 0.
std::optional<Tensor> crossEntropyGrad(const Tensor &dloss, const Tensor &logits,
                                       const Tensor &targets, int64_t ignoreIndex,
                                       llvm::StringRef reduction, std::string &why);
/// Scatters dy into zeros of `shape` at the slice's positions.
std::optional<Tensor> sliceGrad(const Tensor &dy, llvm::ArrayRef<int64_t> shape,
                                llvm::ArrayRef<int64_t> starts, llvm::ArrayRef<int64_t> limits,
                                llvm::ArrayRef<int64_t> strides, std::string &why);

/// "2x3x4" (or "scalar").
std::string shapeStr(llvm::ArrayRef<int64_t> shape);

} // namespace pipemesh::interp

#endif // PIPEMESH_TOOLS_PMESH_INTERP_KERNELS_H
