//===- Gradients.cpp - reverse-mode gradient rules of pmesh ops ------------===//
//
// Each rule receives the gradients of the op's results (null when a result
// has none) and builds its operands' gradients. Broadcasting in the forward op
// is undone by summing (unbroadcast); composite ops (layer_norm, gelu,
// softmax, attention, embedding, cross_entropy) use one gradient op whose
// operands are exactly the activations the backward pass needs.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Dialect/PMesh/GradientUtils.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include <cmath>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;

namespace {
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }
ArrayRef<int64_t> shapeOf(Value v) { return typeOf(v).getShape(); }
Type eltOf(Value v) { return typeOf(v).getElementType(); }
bool isFloat(Value v) { return isa<FloatType>(eltOf(v)); }
RankedTensorType withShape(Value v, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, eltOf(v));
}

/// Elementwise binary op with the broadcast result type.
template <typename OpT> Value bin(OpBuilder &b, Location loc, Value x, Value y) {
  std::string why;
  auto shape = shapes::broadcast(shapeOf(x), shapeOf(y), why);
  return b.create<OpT>(loc, withShape(x, *shape), x, y);
}

/// Marks "no gradient" for every operand; rules fill in what they compute.
void noGrads(Operation *op, SmallVectorImpl<Value> &grads) {
  grads.assign(op->getNumOperands(), Value());
}
} // namespace

Value pmesh::scalarConstant(OpBuilder &b, Location loc, Type elt, double value) {
  auto type = RankedTensorType::get({}, elt);
  Attribute attr = isa<FloatType>(elt) ? (Attribute)b.getFloatAttr(elt, value)
                                       : (Attribute)b.getIntegerAttr(elt, (int64_t)value);
  return b.create<ConstantOp>(loc, cast<ElementsAttr>(DenseElementsAttr::get(type, attr)));
}

Value pmesh::reshapeIfNeeded(OpBuilder &b, Location loc, Value v, ArrayRef<int64_t> shape) {
  if (shapeOf(v) == shape)
    return v;
  return b.create<ReshapeOp>(loc, withShape(v, shape), v);
}

Value pmesh::unbroadcast(OpBuilder &b, Location loc, Value grad, ArrayRef<int64_t> shape) {
  ArrayRef<int64_t> gs = shapeOf(grad);
  if (gs == shape)
    return grad;
  size_t lead = gs.size() - shape.size();
  SmallVector<int64_t> axes;
  for (size_t d = 0; d < gs.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && gs[d] != 1))
      axes.push_back(d);
  Value sum = grad;
  if (!axes.empty()) {
    std::string why;
    auto reduced = shapes::reduce(gs, axes, /*keepdims=*/false, why);
    sum = b.create<ReduceSumOp>(loc, withShape(grad, *reduced), grad, axes, false);
  }
  return reshapeIfNeeded(b, loc, sum, shape);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  for (int k = 0; k < 2; ++k)
    if (need[k])
      grads[k] = unbroadcast(b, getLoc(), dys[0], shapeOf(getOperand(k)));
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  if (need[0])
    grads[0] = unbroadcast(b, getLoc(), dys[0], shapeOf(getLhs()));
  if (need[1])
    grads[1] = unbroadcast(b, getLoc(), b.create<NegOp>(getLoc(), dys[0].getType(), dys[0]),
                           shapeOf(getRhs()));
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  Location loc = getLoc();
  if (need[0])
    grads[0] = unbroadcast(b, loc, bin<MulOp>(b, loc, dys[0], getRhs()), shapeOf(getLhs()));
  if (need[1])
    grads[1] = unbroadcast(b, loc, bin<MulOp>(b, loc, dys[0], getLhs()), shapeOf(getRhs()));
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  Location loc = getLoc();
  if (need[0])
    grads[0] = unbroadcast(b, loc, bin<DivOp>(b, loc, dys[0], getRhs()), shapeOf(getLhs()));
  if (need[1]) {
    // d(a/b)/db = -(a/b)/b
    Value t = bin<DivOp>(b, loc, bin<MulOp>(b, loc, dys[0], getResult()), getRhs());
    grads[1] = unbroadcast(b, loc, b.create<NegOp>(loc, t.getType(), t), shapeOf(getRhs()));
  }
  return success();
}

LogicalResult PowOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  Location loc = getLoc();
  Type elt = eltOf(getLhs());
  if (need[0]) {
    // b * a^(b-1)
    Value bm1 = bin<SubOp>(b, loc, getRhs(), scalarConstant(b, loc, elt, 1.0));
    Value d = bin<MulOp>(b, loc, getRhs(), bin<PowOp>(b, loc, getLhs(), bm1));
    grads[0] = unbroadcast(b, loc, bin<MulOp>(b, loc, dys[0], d), shapeOf(getLhs()));
  }
  if (need[1]) {
    // a^b * log(a)
    Value lg = b.create<LogOp>(loc, getLhs().getType(), getLhs());
    Value d = bin<MulOp>(b, loc, getResult(), lg);
    grads[1] = unbroadcast(b, loc, bin<MulOp>(b, loc, dys[0], d), shapeOf(getRhs()));
  }
  return success();
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  Location loc = getLoc();
  // Where both are equal the gradient goes to lhs (any subgradient is valid).
  Value lhsB = getLhs();
  if (lhsB.getType() != getResult().getType())
    lhsB = b.create<BroadcastOp>(loc, getResult().getType(), lhsB);
  Value eq = b.create<EqualOp>(loc, RankedTensorType::get(shapeOf(getResult()), b.getI1Type()),
                               getResult(), lhsB);
  Value zero = scalarConstant(b, loc, eltOf(getLhs()), 0.0);
  if (need[0])
    grads[0] = unbroadcast(b, loc, b.create<WhereOp>(loc, dys[0].getType(), eq, dys[0], zero),
                           shapeOf(getLhs()));
  if (need[1])
    grads[1] = unbroadcast(b, loc, b.create<WhereOp>(loc, dys[0].getType(), eq, zero, dys[0]),
                           shapeOf(getRhs()));
  return success();
}

#define PMESH_NO_GRADIENT(OP)                                                                   \
  LogicalResult OP::buildGradients(OpBuilder &, ArrayRef<Value>, ArrayRef<bool>,               \
                                   SmallVectorImpl<Value> &grads) {                            \
    noGrads(*this, grads);                                                                      \
    return success();                                                                           \
  }
PMESH_NO_GRADIENT(EqualOp)
PMESH_NO_GRADIENT(LessOp)
PMESH_NO_GRADIENT(AndOp)
PMESH_NO_GRADIENT(NotOp)
#undef PMESH_NO_GRADIENT

LogicalResult NegOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<NegOp>(getLoc(), dys[0].getType(), dys[0]);
  return success();
}

LogicalResult SqrtOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                     SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0]) {
    Location loc = getLoc();
    Value twoY = bin<MulOp>(b, loc, getResult(), scalarConstant(b, loc, eltOf(getInput()), 2.0));
    grads[0] = bin<DivOp>(b, loc, dys[0], twoY);
  }
  return success();
}

LogicalResult TanhOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                     SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0]) {
    Location loc = getLoc();
    Value y2 = bin<MulOp>(b, loc, getResult(), getResult());
    Value d = bin<SubOp>(b, loc, scalarConstant(b, loc, eltOf(getInput()), 1.0), y2);
    grads[0] = bin<MulOp>(b, loc, dys[0], d);
  }
  return success();
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                        SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0]) {
    // y (1 - y), from the saved result: finite for every x (1 / (1 + exp(-x))
    // differentiated as written overflows to inf / inf below x = -88).
    Location loc = getLoc();
    Value y = getResult();
    Value d = bin<MulOp>(b, loc, y, bin<SubOp>(b, loc, scalarConstant(b, loc, eltOf(getInput()), 1.0), y));
    grads[0] = bin<MulOp>(b, loc, dys[0], d);
  }
  return success();
}

LogicalResult ErfOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0]) {
    // 2/sqrt(pi) * exp(-x^2)
    Location loc = getLoc();
    Value x = getInput();
    Value nx2 = b.create<NegOp>(loc, x.getType(), bin<MulOp>(b, loc, x, x));
    Value e = b.create<ExpOp>(loc, x.getType(), nx2);
    Value d = bin<MulOp>(b, loc, e, scalarConstant(b, loc, eltOf(x), 2.0 / std::sqrt(M_PI)));
    grads[0] = bin<MulOp>(b, loc, dys[0], d);
  }
  return success();
}

LogicalResult ExpOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = bin<MulOp>(b, getLoc(), dys[0], getResult());
  return success();
}

LogicalResult LogOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                    SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = bin<DivOp>(b, getLoc(), dys[0], getInput());
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                     SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0] && isFloat(getInput()))
    grads[0] = b.create<CastOp>(getLoc(), getInput().getType(), dys[0]);
  return success();
}

LogicalResult WhereOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                      SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  Location loc = getLoc();
  Value zero = scalarConstant(b, loc, eltOf(getOnTrue()), 0.0);
  if (need[1])
    grads[1] = unbroadcast(b, loc, b.create<WhereOp>(loc, dys[0].getType(), getCond(), dys[0], zero),
                           shapeOf(getOnTrue()));
  if (need[2])
    grads[2] = unbroadcast(b, loc, b.create<WhereOp>(loc, dys[0].getType(), getCond(), zero, dys[0]),
                           shapeOf(getOnFalse()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
/// Spreads a reduction's gradient back over the reduced axes.
Value expandReduced(OpBuilder &b, Location loc, Value dy, Value input, ArrayRef<int64_t> axes) {
  std::string why;
  auto kept = shapes::reduce(shapeOf(input), axes, /*keepdims=*/true, why);
  Value r = reshapeIfNeeded(b, loc, dy, *kept);
  if (shapeOf(r) == shapeOf(input))
    return r;
  return b.create<BroadcastOp>(loc, withShape(dy, shapeOf(input)), r);
}
} // namespace

LogicalResult ReduceSumOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                          SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = expandReduced(b, getLoc(), dys[0], getInput(), getAxes());
  return success();
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                           ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0]) {
    Location loc = getLoc();
    int64_t count = shapes::numElements(shapeOf(getInput())) /
                    std::max<int64_t>(1, shapes::numElements(shapeOf(getResult())));
    Value scaled =
        bin<DivOp>(b, loc, dys[0], scalarConstant(b, loc, eltOf(getInput()), (double)count));
    grads[0] = expandReduced(b, loc, scaled, getInput(), getAxes());
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Fused NN ops
//===----------------------------------------------------------------------===//

namespace {
/// op(x) @ op(y) with the result type computed by the shared shape rule.
Value mm(OpBuilder &b, Location loc, Value x, Value y, bool tx, bool ty) {
  std::string why;
  auto shape = shapes::matmul(shapeOf(x), shapeOf(y), tx, ty, why);
  return b.create<MatMulOp>(loc, withShape(x, *shape), x, y, Value(), tx, ty);
}

/// Collapses all but the last two dims... of a [..., R, C] tensor into rows:
/// [prod(...)*R, C].
Value collapseRows(OpBuilder &b, Location loc, Value v) {
  ArrayRef<int64_t> s = shapeOf(v);
  int64_t rows = shapes::numElements(s.drop_back());
  return reshapeIfNeeded(b, loc, v, {rows, s.back()});
}
} // namespace

LogicalResult MatMulOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                       SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  Value g = dys[0];
  if (!g)
    return success();
  Location loc = getLoc();
  Value a = getA(), w = getB();
  bool ta = getTransposeA(), tb = getTransposeB();
  if (need[0]) {
    // dA = g @ B^T; da = ta ? dA^T = B @ g^T : dA.
    Value da = ta ? mm(b, loc, w, g, tb, true) : mm(b, loc, g, w, false, !tb);
    grads[0] = unbroadcast(b, loc, da, shapeOf(a));
  }
  if (need[1]) {
    // dB = A^T @ g; db = tb ? dB^T = g^T @ A : dB. When b is a 2-D weight
    // shared by every batch, fold the batch into the contraction instead of
    // materializing one product per batch and summing.
    Value db;
    if (shapeOf(w).size() == 2 && shapeOf(a).size() > 2 && !ta) {
      Value a2 = collapseRows(b, loc, a), g2 = collapseRows(b, loc, g);
      db = tb ? mm(b, loc, g2, a2, true, false) : mm(b, loc, a2, g2, true, false);
    } else {
      db = tb ? mm(b, loc, g, a, true, ta) : mm(b, loc, a, g, !ta, false);
    }
    grads[1] = unbroadcast(b, loc, db, shapeOf(w));
  }
  if (getBias() && need[2])
    grads[2] = unbroadcast(b, loc, g, shapeOf(getBias()));
  return success();
}

LogicalResult LayerNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                          SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  Location loc = getLoc();
  // The grad op recomputes mean and rstd from the saved input.
  auto op = b.create<LayerNormGradOp>(loc, getInput().getType(), getScale().getType(),
                                      getScale().getType(), dys[0], getInput(), getScale(),
                                      getEpsilonAttr(), getAxisAttr());
  if (need[0])
    grads[0] = op.getDx();
  if (need[1])
    grads[1] = unbroadcast(b, loc, op.getDscale(), shapeOf(getScale()));
  if (getBias() && need[2]) {
    // dbias has the scale's shape; a bias of another (broadcast) shape sums dy
    // itself.
    grads[2] = getBias().getType() == getScale().getType()
                   ? op.getDbias()
                   : unbroadcast(b, loc, dys[0], shapeOf(getBias()));
  }
  return success();
}

LogicalResult GeluOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                     SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<GeluGradOp>(getLoc(), getInput().getType(), dys[0], getInput(),
                                    getApproximateAttr());
  return success();
}

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                        SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<SoftmaxGradOp>(getLoc(), getInput().getType(), dys[0], getResult(),
                                       getAxisAttr());
  return success();
}

LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                           SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<LogSoftmaxGradOp>(getLoc(), getInput().getType(), dys[0], getResult(),
                                          getAxisAttr());
  return success();
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                          SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  if (getMask() && need[3])
    return emitOpError("gradient with respect to the attention mask is not supported");
  auto op = b.create<AttentionGradOp>(getLoc(), getQ().getType(), getK().getType(),
                                      getV().getType(), dys[0], getQ(), getK(), getV(), getMask(),
                                      getScaleAttr(), getCausalAttr(), getWindowAttr(),
                                      getSoftcapAttr());
  if (need[0])
    grads[0] = op.getDq();
  if (need[1])
    grads[1] = op.getDk();
  if (need[2])
    grads[2] = op.getDv();
  return success();
}

LogicalResult EmbeddingOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                          SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<EmbeddingGradOp>(getLoc(), getTable().getType(), dys[0], getIds());
  return success();
}

LogicalResult CrossEntropyOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys,
                                             ArrayRef<bool> need, SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<CrossEntropyGradOp>(getLoc(), getLogits().getType(), dys[0], getLogits(),
                                            getTargets(), getIgnoreIndexAttr(),
                                            getReductionAttr());
  return success();
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                        SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<ReshapeOp>(getLoc(), getInput().getType(), dys[0]);
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                          SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0]) {
    SmallVector<int64_t> inverse(getPerm().size());
    for (auto [i, p] : llvm::enumerate(getPerm()))
      inverse[p] = i;
    grads[0] = b.create<TransposeOp>(getLoc(), getInput().getType(), dys[0], inverse);
  }
  return success();
}

LogicalResult BroadcastOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                          SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = unbroadcast(b, getLoc(), dys[0], shapeOf(getInput()));
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                      SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (dys[0] && need[0])
    grads[0] = b.create<SliceGradOp>(getLoc(), getInput().getType(), dys[0], getStarts(),
                                     getLimits(), getStrides());
  return success();
}

LogicalResult SplitOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                      SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!need[0] || llvm::all_of(dys, [](Value v) { return !v; }))
    return success();
  SmallVector<Value> pieces;
  for (auto [dy, res] : llvm::zip(dys, getResults()))
    pieces.push_back(dy ? dy : scalarConstant(b, getLoc(), eltOf(res), 0.0));
  for (auto [k, piece] : llvm::enumerate(pieces))
    if (piece.getType() != getResult(k).getType())
      pieces[k] = b.create<BroadcastOp>(getLoc(), getResult(k).getType(), piece);
  grads[0] = b.create<ConcatOp>(getLoc(), getInput().getType(), pieces, getAxisAttr());
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> need,
                                       SmallVectorImpl<Value> &grads) {
  noGrads(*this, grads);
  if (!dys[0])
    return success();
  int64_t axis = *shapes::normalizeAxis(getAxis(), shapeOf(getResult()).size());
  int64_t offset = 0;
  for (auto [k, in] : llvm::enumerate(getInputs())) {
    int64_t size = shapeOf(in)[axis];
    if (need[k]) {
      SmallVector<int64_t> starts(shapeOf(in).size(), 0), strides(shapeOf(in).size(), 1);
      SmallVector<int64_t> limits(shapeOf(getResult()).begin(), shapeOf(getResult()).end());
      starts[axis] = offset;
      limits[axis] = offset + size;
      grads[k] = b.create<SliceOp>(getLoc(), in.getType(), dys[0], starts, limits, strides);
    }
    offset += size;
  }
  return success();
}
