//===- RaiseUtils.h - matchers shared by the raise patterns -----*- C++ -*-===//
//
// Small helpers the raise patterns have in common: reading scalar constants
// (exporters write them as rank-0 or one-element tensors, in either operand
// position of a commutative op), comparing exporter-rounded constants, and the
// per-file entry points that populateRaisePatterns collects.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_TRANSFORMS_RAISEUTILS_H
#define PIPEMESH_LIB_TRANSFORMS_RAISEUTILS_H

#include "pipemesh/Dialect/PMesh/PMesh.h"

#include "mlir/IR/PatternMatch.h"

#include <map>
#include <mutex>
#include <optional>
#include <tuple>

namespace pipemesh::raise {

/// Exporters round their constants (sqrt(2/pi) = 0.7978845608 may arrive as
/// 0.79788456 or as a float32 product); this is how close counts as equal.
constexpr double kConstantRelTol = 1e-4;

/// True when `actual` is within `relTol` of `expected`, relative to
/// `magnitude` (by default |expected|; pass a reference magnitude when the
/// expected value is 0).
bool isNear(double actual, double expected, double relTol = kConstantRelTol,
            std::optional<double> magnitude = std::nullopt);

/// The value of a floating-point constant whose elements are all equal (a
/// splat, which covers rank-0 and one-element tensors). Callers that must not
/// change shapes check the consuming op's result type themselves: a splat may
/// broadcast its user to a larger shape.
std::optional<double> getSplatFloat(mlir::Value v);

/// `op(x, c)` with a splat float constant `c`: returns x and c. For commutative
/// ops `op(c, x)` matches too.
struct ScalarOperand {
  mlir::Value other;
  double value;
};
std::optional<ScalarOperand> matchScalarOperand(mlir::Operation *op);

/// `x * c` or `x / c` (c a splat constant, result of x's own type, so the op
/// only rescales): returns x and the factor it is multiplied by.
std::optional<ScalarOperand> matchScaling(mlir::Operation *op);

/// result[i] = input[perm[i]] composed: transpose(transpose(x, inner), outer)
/// equals transpose(x, composePerms(inner, outer)).
llvm::SmallVector<int64_t> composePerms(llvm::ArrayRef<int64_t> inner,
                                        llvm::ArrayRef<int64_t> outer);
bool isIdentityPerm(llvm::ArrayRef<int64_t> perm);
/// `perm` followed by a swap of the last two dims.
llvm::SmallVector<int64_t> swapLastTwo(llvm::ArrayRef<int64_t> perm);

/// Builds transpose(v, perm), looking through transposes that produce `v` and
/// returning `v` itself for the identity.
mlir::Value buildTranspose(mlir::PatternRewriter &rewriter, mlir::Location loc, mlir::Value v,
                           llvm::ArrayRef<int64_t> perm);

// Pattern sets, one per file.
/// Whether reshapes and transposes, applied in order to a value of shape
/// `from`, leave every element where a plain reshape of it would: the chain
/// moves no element (transposes that only undo one another across reshapes,
/// as PyTorch 2 writes k^T over merged batch dims).
bool movesNoElement(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<mlir::Operation *> chain);

/// PyTorch's guard of scaled_dot_product_attention, where(isnan(p), 0, p)
/// (imported as where(not(p == p), 0, p)): the probabilities p when `v` is
/// that guard and nothing else reads p or the test.
std::optional<mlir::Value> matchNaNGuard(mlir::Value v);

/// The causal windows of computed attention masks, kept across matches: every
/// layer masks with the same condition (at 8192 tokens evaluating it takes a
/// second), so it is evaluated once per model, not once per layer. Keyed by
/// the op that computes the mask, which the greedy driver may erase and whose
/// address a new op may then take: the pass installs the memo as the driver's
/// listener, and an erased op's entries go with it. (Rewrites keep every
/// surviving value's meaning, so erasure is the only invalidation.)
class MaskWindowMemo : public mlir::RewriterBase::Listener {
public:
  /// (op, result number, tq, tk, true-means-visible)
  using Key = std::tuple<mlir::Operation *, unsigned, int64_t, int64_t, bool>;
  /// The recorded window (nullopt inside: not a causal band); nullopt when
  /// nothing is recorded.
  std::optional<std::optional<int64_t>> lookup(const Key &key);
  void record(const Key &key, std::optional<int64_t> window);
  void notifyOperationErased(mlir::Operation *op) override;

private:
  std::map<Key, std::optional<int64_t>> windows;
  std::mutex mutex;
};

void populateRaiseLayerNormPatterns(mlir::RewritePatternSet &patterns);
void populateRaiseGroupedAttentionPatterns(mlir::RewritePatternSet &patterns);
void populateRaiseGeluPatterns(mlir::RewritePatternSet &patterns);
/// `memo` (optional, owned by the caller) keeps computed masks' windows across
/// matches; without it they are evaluated for every layer.
void populateRaiseAttentionPatterns(mlir::RewritePatternSet &patterns,
                                    MaskWindowMemo *memo = nullptr);
void populateRaiseMatMulPatterns(mlir::RewritePatternSet &patterns);

} // namespace pipemesh::raise

#endif // PIPEMESH_LIB_TRANSFORMS_RAISEUTILS_H
