//===- RaiseLayerNorm.cpp - raise decomposed layer normalization -----------===//
//
// Before opset 17 ONNX has no LayerNormalization, so torch.onnx (and our own
// generator at those opsets) writes it out:
//
//   m = reduce_mean(x, last axes); d = x - m
//   v = reduce_mean(d ^ 2, same axes); n = d / sqrt(v + eps)
//   y = n * gamma + beta
//
// The raise happens in three small steps that compose under the greedy
// driver, in the style of MLIR's fold-into-producer canonicalizations:
//   1. the normalization n becomes layer_norm(x, ones) (RaiseLayerNorm);
//   2. `* gamma` folds into a layer_norm whose scale is all ones;
//   3. `+ beta` folds into a layer_norm without bias.
// So the affine-free form, the gamma-only form and the full form all raise,
// and each step checks only what it changes.
//
//===----------------------------------------------------------------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include <cmath>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;
using namespace pipemesh::raise;

namespace {

/// The first axis of a keepdims mean over the trailing axes [first, rank), or
/// nullopt for any other reduction (layer_norm normalizes trailing dims only).
std::optional<int64_t> trailingMeanAxis(ReduceMeanOp mean) {
  if (!mean.getKeepdims())
    return std::nullopt;
  int64_t rank = cast<RankedTensorType>(mean.getInput().getType()).getRank();
  SmallVector<bool> reduced(rank, false);
  for (int64_t axis : mean.getAxes()) {
    auto ax = shapes::normalizeAxis(axis, rank);
    if (!ax || reduced[*ax])
      return std::nullopt;
    reduced[*ax] = true;
  }
  int64_t first = rank - (int64_t)mean.getAxes().size();
  if (mean.getAxes().empty() || first < 0)
    return std::nullopt;
  for (int64_t i = first; i < rank; ++i)
    if (!reduced[i])
      return std::nullopt;
  return first;
}

/// True when `v` is `d * d` or `d ^ 2` computed only for the variance.
bool isSquareOf(Value v, Value d) {
  Operation *op = v.getDefiningOp();
  if (!op || !op->hasOneUse())
    return false;
  if (auto mul = dyn_cast<MulOp>(op))
    return mul.getLhs() == d && mul.getRhs() == d;
  if (auto pow = dyn_cast<PowOp>(op)) {
    auto exponent = getSplatFloat(pow.getRhs());
    return pow.getLhs() == d && exponent && *exponent == 2.0 &&
           pow.getType() == d.getType();
  }
  return false;
}

/// `sqrt(y)` or `y ^ 0.5`: returns y.
Value matchSqrt(Value v) {
  Operation *op = v.getDefiningOp();
  if (auto sqrt = dyn_cast_or_null<SqrtOp>(op))
    return sqrt.getInput();
  if (auto pow = dyn_cast_or_null<PowOp>(op)) {
    auto exponent = getSplatFloat(pow.getRhs());
    if (exponent && *exponent == 0.5 && pow.getType() == pow.getLhs().getType())
      return pow.getLhs();
  }
  return {};
}

/// (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) -> layer_norm(x, ones).
///
/// Rooted at the division, the last op of the normalization. Every
/// intermediate must feed only the next step (d feeds exactly the square and
/// the division), otherwise the decomposed values stay alive and raising would
/// compute the statistics twice. The all-ones scale is what layer_norm means
/// without affine parameters; a following `* gamma` replaces it.
struct RaiseLayerNorm : OpRewritePattern<DivOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(DivOp div, PatternRewriter &rewriter) const override {
    Value d = div.getLhs();
    auto sub = d.getDefiningOp<SubOp>();
    if (!sub)
      return rewriter.notifyMatchFailure(div, "numerator is not x - mean");
    Value x = sub.getLhs();
    auto xType = cast<RankedTensorType>(x.getType());
    if (!isa<FloatType>(xType.getElementType()) || sub.getType() != xType ||
        div.getType() != xType)
      return rewriter.notifyMatchFailure(div, "not an elementwise float normalization of x");

    auto mean = sub.getRhs().getDefiningOp<ReduceMeanOp>();
    if (!mean || mean.getInput() != x || !mean->hasOneUse())
      return rewriter.notifyMatchFailure(div, "x - mean(x) not found");
    std::optional<int64_t> axis = trailingMeanAxis(mean);
    if (!axis)
      return rewriter.notifyMatchFailure(div, "mean is not over the trailing axes");

    // Denominator: sqrt(var + eps), each step used once.
    Value denom = div.getRhs();
    if (!denom.hasOneUse())
      return rewriter.notifyMatchFailure(div, "denominator has other uses");
    Value varPlusEps = matchSqrt(denom);
    if (!varPlusEps || !varPlusEps.hasOneUse())
      return rewriter.notifyMatchFailure(div, "denominator is not sqrt(var + eps)");
    auto epsAdd = varPlusEps.getDefiningOp<AddOp>();
    std::optional<ScalarOperand> eps = epsAdd ? matchScalarOperand(epsAdd) : std::nullopt;
    if (!eps || !(eps->value > 0.0) || !std::isfinite(eps->value) ||
        eps->other.getType() != epsAdd.getType())
      return rewriter.notifyMatchFailure(div, "no positive scalar epsilon");
    auto var = eps->other.getDefiningOp<ReduceMeanOp>();
    if (!var || !var->hasOneUse() || var.getType() != mean.getType() ||
        trailingMeanAxis(var) != axis)
      return rewriter.notifyMatchFailure(div, "variance is not a mean over the same axes");
    Value square = var.getInput();
    if (!isSquareOf(square, d))
      return rewriter.notifyMatchFailure(div, "variance is not mean((x - mean)^2)");
    for (Operation *user : d.getUsers())
      if (user != div && user != square.getDefiningOp())
        return rewriter.notifyMatchFailure(div, "x - mean(x) has other uses");

    auto scaleType = RankedTensorType::get(xType.getShape().drop_front(*axis),
                                           xType.getElementType());
    Value ones = rewriter.create<ConstantOp>(
        div.getLoc(), DenseElementsAttr::get(scaleType, rewriter.getFloatAttr(
                                                            xType.getElementType(), 1.0)));
    int64_t negAxis = *axis - xType.getRank();
    rewriter.replaceOpWithNewOp<LayerNormOp>(
        div, xType, x, ones, /*bias=*/Value(),
        rewriter.getF32FloatAttr(static_cast<float>(eps->value)),
        rewriter.getI64IntegerAttr(negAxis));
    return success();
  }
};

/// The dims layer_norm normalizes over; scale and bias folded in from
/// elementwise ops must have exactly this shape (a broadcasting or scalar
/// operand is not a per-feature affine parameter).
ArrayRef<int64_t> normalizedShape(LayerNormOp ln) {
  auto type = cast<RankedTensorType>(ln.getInput().getType());
  auto axis = shapes::normalizeAxis(static_cast<int64_t>(ln.getAxis()), type.getRank());
  return type.getShape().drop_front(axis.value_or(0));
}

/// An operand of `op` (binary, commutative) that is a single-use layer_norm
/// satisfying `pred`, and the other operand when it has the normalized shape
/// and `op` does not broadcast.
std::optional<std::pair<LayerNormOp, Value>>
matchLayerNormOperand(Operation *op, llvm::function_ref<bool(LayerNormOp)> pred) {
  for (unsigned i : {0u, 1u}) {
    auto ln = op->getOperand(i).getDefiningOp<LayerNormOp>();
    Value other = op->getOperand(1 - i);
    if (!ln || !ln->hasOneUse() || !pred(ln) || op->getResult(0).getType() != ln.getType())
      continue;
    auto otherType = cast<RankedTensorType>(other.getType());
    if (otherType.getShape() != normalizedShape(ln) ||
        otherType.getElementType() != ln.getType().getElementType())
      continue;
    return std::pair(ln, other);
  }
  return std::nullopt;
}

/// layer_norm(x, ones) * gamma -> layer_norm(x, gamma).
struct FoldScaleIntoLayerNorm : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &rewriter) const override {
    // With a bias, (n + b) * g would also scale b: only the bias-free form folds.
    auto match = matchLayerNormOperand(mul, [](LayerNormOp ln) {
      auto scale = getSplatFloat(ln.getScale());
      return !ln.getBias() && scale && *scale == 1.0;
    });
    if (!match)
      return rewriter.notifyMatchFailure(mul, "not layer_norm(x, ones) * gamma");
    auto [ln, gamma] = *match;
    rewriter.replaceOpWithNewOp<LayerNormOp>(mul, ln.getType(), ln.getInput(), gamma, Value(),
                                             ln.getEpsilonAttr(), ln.getAxisAttr());
    rewriter.eraseOp(ln);
    return success();
  }
};

/// layer_norm(x, gamma) + beta -> layer_norm(x, gamma, beta).
struct FoldBiasIntoLayerNorm : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    auto match = matchLayerNormOperand(add, [](LayerNormOp ln) { return !ln.getBias(); });
    if (!match)
      return rewriter.notifyMatchFailure(add, "not bias-free layer_norm + beta");
    auto [ln, beta] = *match;
    rewriter.replaceOpWithNewOp<LayerNormOp>(add, ln.getType(), ln.getInput(), ln.getScale(),
                                             beta, ln.getEpsilonAttr(), ln.getAxisAttr());
    rewriter.eraseOp(ln);
    return success();
  }
};

} // namespace

void pipemesh::raise::populateRaiseLayerNormPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseLayerNorm, FoldScaleIntoLayerNorm, FoldBiasIntoLayerNorm>(
      patterns.getContext());
}
