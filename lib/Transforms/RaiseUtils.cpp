//===- RaiseUtils.cpp - matchers shared by the raise patterns --------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;

namespace pipemesh::raise {

bool isNear(double actual, double expected, double relTol, std::optional<double> magnitude) {
  double scale = magnitude ? *magnitude : std::fabs(expected);
  return std::fabs(actual - expected) <= relTol * scale;
}

std::optional<double> getSplatFloat(Value v) {
  DenseFPElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

std::optional<ScalarOperand> matchScalarOperand(Operation *op) {
  if (!op || op->getNumOperands() != 2)
    return std::nullopt;
  if (auto c = getSplatFloat(op->getOperand(1)))
    return ScalarOperand{op->getOperand(0), *c};
  if (op->hasTrait<OpTrait::IsCommutative>())
    if (auto c = getSplatFloat(op->getOperand(0)))
      return ScalarOperand{op->getOperand(1), *c};
  return std::nullopt;
}

std::optional<ScalarOperand> matchScaling(Operation *op) {
  if (!isa_and_nonnull<MulOp, DivOp>(op))
    return std::nullopt;
  auto s = matchScalarOperand(op);
  // A splat of a larger shape would broadcast x: then the op is no pure rescale.
  if (!s || s->other.getType() != op->getResult(0).getType())
    return std::nullopt;
  if (isa<DivOp>(op)) {
    if (s->value == 0.0)
      return std::nullopt;
    s->value = 1.0 / s->value;
  }
  if (!std::isfinite(s->value))
    return std::nullopt;
  return s;
}

SmallVector<int64_t> composePerms(ArrayRef<int64_t> inner, ArrayRef<int64_t> outer) {
  SmallVector<int64_t> perm;
  for (int64_t p : outer)
    perm.push_back(inner[p]);
  return perm;
}

bool isIdentityPerm(ArrayRef<int64_t> perm) {
  for (auto [i, p] : llvm::enumerate(perm))
    if (p != (int64_t)i)
      return false;
  return true;
}

SmallVector<int64_t> swapLastTwo(ArrayRef<int64_t> perm) {
  SmallVector<int64_t> out(perm);
  if (out.size() >= 2)
    std::swap(out[out.size() - 1], out[out.size() - 2]);
  return out;
}

Value buildTranspose(PatternRewriter &rewriter, Location loc, Value v, ArrayRef<int64_t> perm) {
  if (isIdentityPerm(perm))
    return v;
  SmallVector<int64_t> composed(perm);
  while (auto inner = v.getDefiningOp<TransposeOp>()) {
    composed = composePerms(inner.getPerm(), composed);
    v = inner.getInput();
  }
  if (isIdentityPerm(composed))
    return v;
  auto type = cast<RankedTensorType>(v.getType());
  std::string why;
  shapes::OptShape shape = shapes::transpose(type.getShape(), composed, why);
  assert(shape && "callers pass a permutation of v's rank");
  return rewriter.create<TransposeOp>(loc, type.clone(*shape), v, composed);
}

} // namespace pipemesh::raise
