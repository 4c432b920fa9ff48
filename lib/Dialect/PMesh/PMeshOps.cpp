//===- PMeshOps.cpp - pmesh op verifiers, folders and canonicalizers -------===//
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;

namespace {
ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }
Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

/// Compares a computed shape with the op's declared result type.
LogicalResult checkResultShape(Operation *op, const shapes::OptShape &expected,
                               const std::string &why, Value result) {
  if (!expected)
    return op->emitOpError() << why;
  if (ArrayRef<int64_t>(*expected) != shapeOf(result))
    return op->emitOpError() << "result shape " << shapes::str(shapeOf(result))
                             << " does not match the expected " << shapes::str(*expected);
  return success();
}

/// Requires every named value (null ones are skipped: absent optional operands)
/// to have the element type of the first.
LogicalResult checkSameElementType(Operation *op,
                                   ArrayRef<std::pair<StringRef, Value>> named) {
  auto [firstName, first] = named.front();
  for (auto [name, v] : named.drop_front()) {
    if (v && elementOf(v) != elementOf(first))
      return op->emitOpError() << name << " element type " << elementOf(v) << " differs from "
                               << firstName << " element type " << elementOf(first);
  }
  return success();
}

/// Shared by softmax and log_softmax. `axis` is an I64Attr, whose accessor
/// returns uint64_t: convert before printing so -1 does not read 2^64-1.
LogicalResult verifySoftmaxAxis(Operation *op, int64_t axis, Value input) {
  if (!shapes::normalizeAxis(axis, shapeOf(input).size()))
    return op->emitOpError() << "axis " << axis << " out of range for shape "
                             << shapes::str(shapeOf(input));
  return success();
}
} // namespace

//===----------------------------------------------------------------------===//
// Parameters and constants
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  // isa_and_nonnull: a top-level param (--no-implicit-module) has no parent.
  if (!isa_and_nonnull<ModuleOp>((*this)->getParentOp()))
    return emitOpError("must be declared at module level");
  return success();
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getNameAttr());
  if (!param)
    return emitOpError() << "'" << getName() << "' does not name a pmesh.param";
  if (param.getType() != getResult().getType())
    return emitOpError() << "type " << getResult().getType() << " differs from parameter @"
                         << getName() << " of type " << param.getType();
  return success();
}

LogicalResult ConstantOp::verify() {
  if (getValue().getType() != getResult().getType())
    return emitOpError() << "value type " << getValue().getType()
                         << " differs from result type " << getResult().getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

namespace {
bool isCompare(Operation *op) { return isa<EqualOp, LessOp>(op); }
bool isLogical(Operation *op) { return isa<AndOp>(op); }

LogicalResult verifyBinary(Operation *op) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1), res = op->getResult(0);
  if (elementOf(lhs) != elementOf(rhs))
    return op->emitOpError() << "operand element types differ: " << elementOf(lhs) << " vs "
                             << elementOf(rhs);
  Type expectedElt = isCompare(op) ? IntegerType::get(op->getContext(), 1) : elementOf(lhs);
  if (elementOf(res) != expectedElt)
    return op->emitOpError() << "result element type must be " << expectedElt << ", got "
                             << elementOf(res);
  if (isLogical(op) && !elementOf(lhs).isInteger(1))
    return op->emitOpError() << "operands must be i1, got " << elementOf(lhs);
  std::string why;
  return checkResultShape(op, shapes::broadcast(shapeOf(lhs), shapeOf(rhs), why), why, res);
}
} // namespace

#define PMESH_BINARY_VERIFIER(OP)                                                               \
  LogicalResult OP::verify() { return verifyBinary(getOperation()); }
PMESH_BINARY_VERIFIER(AddOp)
PMESH_BINARY_VERIFIER(SubOp)
PMESH_BINARY_VERIFIER(MulOp)
PMESH_BINARY_VERIFIER(DivOp)
PMESH_BINARY_VERIFIER(PowOp)
PMESH_BINARY_VERIFIER(MaxOp)
PMESH_BINARY_VERIFIER(EqualOp)
PMESH_BINARY_VERIFIER(LessOp)
PMESH_BINARY_VERIFIER(AndOp)
#undef PMESH_BINARY_VERIFIER

LogicalResult CastOp::verify() {
  if (shapeOf(getInput()) != shapeOf(getResult()))
    return emitOpError() << "cast must not change the shape: " << shapes::str(shapeOf(getInput()))
                         << " vs " << shapes::str(shapeOf(getResult()));
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult WhereOp::verify() {
  if (elementOf(getOnTrue()) != elementOf(getOnFalse()) ||
      elementOf(getOnTrue()) != elementOf(getResult()))
    return emitOpError() << "on_true, on_false and result must share an element type, got "
                         << elementOf(getOnTrue()) << ", " << elementOf(getOnFalse()) << " and "
                         << elementOf(getResult());
  std::string why;
  auto vals = shapes::broadcast(shapeOf(getOnTrue()), shapeOf(getOnFalse()), why);
  if (vals)
    vals = shapes::broadcast(shapeOf(getCond()), *vals, why);
  return checkResultShape(*this, vals, why, getResult());
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

namespace {
template <typename ReduceOpT> LogicalResult verifyReduce(ReduceOpT op) {
  if (elementOf(op.getInput()) != elementOf(op.getResult()))
    return op.emitOpError("result element type must equal the input's");
  std::string why;
  return checkResultShape(op, shapes::reduce(shapeOf(op.getInput()), op.getAxes(),
                                             op.getKeepdims(), why),
                          why, op.getResult());
}
} // namespace

LogicalResult ReduceMeanOp::verify() { return verifyReduce(*this); }
LogicalResult ReduceSumOp::verify() { return verifyReduce(*this); }

//===----------------------------------------------------------------------===//
// Fused NN ops
//===----------------------------------------------------------------------===//

LogicalResult MatMulOp::verify() {
  if (failed(checkSameElementType(
          *this, {{"a", getA()}, {"b", getB()}, {"bias", getBias()}, {"result", getResult()}})))
    return failure();
  std::string why;
  auto shape =
      shapes::matmul(shapeOf(getA()), shapeOf(getB()), getTransposeA(), getTransposeB(), why);
  if (failed(checkResultShape(*this, shape, why, getResult())))
    return failure();
  if (Value bias = getBias()) {
    if (shapeOf(bias).size() != 1 || shapeOf(bias)[0] != shape->back())
      return emitOpError() << "bias must be 1-D of size " << shape->back() << ", got "
                           << shapes::str(shapeOf(bias));
  }
  return success();
}

LogicalResult LayerNormOp::verify() {
  if (failed(checkSameElementType(
          *this, {{"input", getInput()}, {"scale", getScale()}, {"bias", getBias()}})))
    return failure();
  std::string why;
  std::optional<ArrayRef<int64_t>> bias;
  if (getBias())
    bias = shapeOf(getBias());
  if (!shapes::layerNorm(shapeOf(getInput()), shapeOf(getScale()), bias, getAxis(), why))
    return emitOpError() << why;
  if (getResult().getType() != getInput().getType())
    return emitOpError("result type must equal the input type");
  // Written so that NaN is rejected too.
  if (!(getEpsilon().convertToFloat() > 0.0f))
    return emitOpError() << "epsilon must be positive, got " << getEpsilon().convertToFloat();
  return success();
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError() << "approximate must be \"none\" or \"tanh\", got \"" << getApproximate()
                         << "\"";
  return success();
}

LogicalResult SoftmaxOp::verify() { return verifySoftmaxAxis(*this, getAxis(), getInput()); }

LogicalResult LogSoftmaxOp::verify() {
  return verifySoftmaxAxis(*this, getAxis(), getInput());
}

LogicalResult pipemesh::pmesh::verifyAttentionOptions(Operation *op, int64_t window, bool causal,
                                                      float softcap) {
  if (!(softcap >= 0.0f) || !std::isfinite(softcap))
    return op->emitOpError() << "softcap must be finite and >= 0 (0: none), got " << softcap;
  if (window < 0)
    return op->emitOpError() << "window must be >= 0 (0: no limit), got " << window;
  if (window > 0 && !causal)
    return op->emitOpError() << "a sliding window (window = " << window
                             << ") needs causal attention";
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(checkSameElementType(*this, {{"q", getQ()},
                                          {"k", getK()},
                                          {"v", getV()},
                                          {"mask", getMask()},
                                          {"result", getResult()}})))
    return failure();
  if (failed(verifyAttentionOptions(*this, getWindow(), getCausal(),
                                    getSoftcap().convertToFloat())))
    return failure();
  std::string why;
  std::optional<ArrayRef<int64_t>> mask;
  if (getMask())
    mask = shapeOf(getMask());
  return checkResultShape(
      *this, shapes::attention(shapeOf(getQ()), shapeOf(getK()), shapeOf(getV()), mask, why), why,
      getResult());
}

LogicalResult EmbeddingOp::verify() {
  if (failed(checkSameElementType(*this, {{"table", getTable()}, {"result", getResult()}})))
    return failure();
  std::string why;
  return checkResultShape(*this, shapes::embedding(shapeOf(getTable()), shapeOf(getIds()), why),
                          why, getResult());
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(checkSameElementType(*this, {{"logits", getLogits()}, {"result", getResult()}})))
    return failure();
  std::string why;
  return checkResultShape(
      *this, shapes::crossEntropy(shapeOf(getLogits()), shapeOf(getTargets()), getReduction(), why),
      why, getResult());
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError("reshape must not change the element type");
  // Checked counts: a huge shape could otherwise wrap around to a match.
  auto inCount = shapes::checkedNumElements(shapeOf(getInput()));
  auto outCount = shapes::checkedNumElements(shapeOf(getResult()));
  if (!inCount || !outCount)
    return emitOpError() << "element count of "
                         << shapes::str(shapeOf(inCount ? getResult() : getInput()))
                         << " overflows int64";
  if (*inCount != *outCount)
    return emitOpError() << "cannot reshape " << shapes::str(shapeOf(getInput())) << " ("
                         << *inCount << " elements) to " << shapes::str(shapeOf(getResult()))
                         << " (" << *outCount << " elements)";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(cast<ShapedType>(getResult().getType()));
  return {};
}

namespace {
/// reshape(reshape(x)) -> reshape(x)
struct FoldReshapeChain : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<ReshapeOp>();
    if (!inner)
      return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(), inner.getInput());
    return success();
  }
};

/// transpose(transpose(x, p1), p2) -> transpose(x, p1[p2])
struct FoldTransposeChain : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op, PatternRewriter &rewriter) const override {
    auto inner = op.getInput().getDefiningOp<TransposeOp>();
    if (!inner)
      return failure();
    SmallVector<int64_t> perm;
    for (int64_t p : op.getPerm())
      perm.push_back(inner.getPerm()[p]);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, op.getType(), inner.getInput(), perm);
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<FoldReshapeChain>(context);
}

LogicalResult TransposeOp::verify() {
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError("transpose must not change the element type");
  std::string why;
  return checkResultShape(*this, shapes::transpose(shapeOf(getInput()), getPerm(), why), why,
                          getResult());
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  for (auto [i, p] : llvm::enumerate(getPerm()))
    if ((int64_t)i != p)
      return {};
  return getInput();
}

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<FoldTransposeChain>(context);
}

LogicalResult BroadcastOp::verify() {
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError("broadcast must not change the element type");
  if (!shapes::broadcastsTo(shapeOf(getInput()), shapeOf(getResult())))
    return emitOpError() << "cannot broadcast " << shapes::str(shapeOf(getInput())) << " to "
                         << shapes::str(shapeOf(getResult()));
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  if (auto dense = dyn_cast_or_null<DenseElementsAttr>(adaptor.getInput()))
    if (dense.isSplat())
      return DenseElementsAttr::get(cast<ShapedType>(getResult().getType()),
                                    dense.getSplatValue<Attribute>());
  return {};
}

LogicalResult SplitOp::verify() {
  std::string why;
  auto pieces = shapes::split(shapeOf(getInput()), getAxis(), getSizes(), why);
  if (!pieces)
    return emitOpError() << why;
  if (pieces->size() != getNumResults())
    return emitOpError() << getSizes().size() << " sizes but " << getNumResults() << " results";
  for (auto [piece, res] : llvm::zip(*pieces, getResults())) {
    if (ArrayRef<int64_t>(piece) != shapeOf(res) || elementOf(res) != elementOf(getInput()))
      return emitOpError() << "result of type " << res.getType() << " does not match piece "
                           << shapes::str(piece);
  }
  return success();
}

LogicalResult ConcatOp::verify() {
  SmallVector<shapes::Shape> ins;
  for (Value v : getInputs()) {
    if (elementOf(v) != elementOf(getResult()))
      return emitOpError("inputs and result must share an element type");
    ins.push_back(shapes::Shape(shapeOf(v)));
  }
  std::string why;
  return checkResultShape(*this, shapes::concat(ins, getAxis(), why), why, getResult());
}

LogicalResult SliceOp::verify() {
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError("slice must not change the element type");
  std::string why;
  return checkResultShape(
      *this,
      shapes::slice(shapeOf(getInput()), getStarts(), getLimits(), getStrides(), why), why,
      getResult());
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

#define GET_OP_CLASSES
#include "pipemesh/Dialect/PMesh/PMeshOps.cpp.inc"
