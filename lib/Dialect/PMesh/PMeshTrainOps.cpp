//===- PMeshTrainOps.cpp - verifiers of gradient and optimizer ops ---------===//
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;

namespace {
ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }
} // namespace

LogicalResult LayerNormGradOp::verify() {
  std::string why;
  if (!shapes::layerNorm(shapeOf(getX()), shapeOf(getScale()), std::nullopt, getAxis(), why))
    return emitOpError() << why;
  if (getDy().getType() != getX().getType() || getDx().getType() != getX().getType())
    return emitOpError("dy, x and dx must have one type");
  if (getDscale().getType() != getScale().getType())
    return emitOpError("dscale must have the type of scale");
  if (shapeOf(getDbias()) != shapeOf(getScale()))
    return emitOpError("dbias must have the shape of scale");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttentionOptions(*this, getWindow(), getCausal(),
                                    getSoftcap().convertToFloat())))
    return failure();
  std::string why;
  std::optional<ArrayRef<int64_t>> mask;
  if (getMask())
    mask = shapeOf(getMask());
  auto out = shapes::attention(shapeOf(getQ()), shapeOf(getK()), shapeOf(getV()), mask, why);
  if (!out)
    return emitOpError() << why;
  if (ArrayRef<int64_t>(*out) != shapeOf(getDout()))
    return emitOpError() << "dout shape " << shapes::str(shapeOf(getDout()))
                         << " differs from the attention output " << shapes::str(*out);
  if (getDq().getType() != getQ().getType() || getDk().getType() != getK().getType() ||
      getDv().getType() != getV().getType())
    return emitOpError("dq, dk, dv must have the types of q, k, v");
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  std::string why;
  auto out = shapes::embedding(shapeOf(getDtable()), shapeOf(getIds()), why);
  if (!out)
    return emitOpError() << why;
  if (ArrayRef<int64_t>(*out) != shapeOf(getDy()))
    return emitOpError() << "dy shape " << shapes::str(shapeOf(getDy()))
                         << " differs from the lookup's " << shapes::str(*out);
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  std::string why;
  auto out = shapes::crossEntropy(shapeOf(getLogits()), shapeOf(getTargets()), getReduction(), why);
  if (!out)
    return emitOpError() << why;
  if (ArrayRef<int64_t>(*out) != shapeOf(getDloss()))
    return emitOpError() << "dloss shape " << shapes::str(shapeOf(getDloss()))
                         << " differs from the loss " << shapes::str(*out);
  if (getDlogits().getType() != getLogits().getType())
    return emitOpError("dlogits must have the type of logits");
  return success();
}

LogicalResult SliceGradOp::verify() {
  std::string why;
  auto sliced = shapes::slice(shapeOf(getDx()), getStarts(), getLimits(), getStrides(), why);
  if (!sliced)
    return emitOpError() << why;
  if (ArrayRef<int64_t>(*sliced) != shapeOf(getDy()))
    return emitOpError() << "dy shape " << shapes::str(shapeOf(getDy()))
                         << " is not the slice's shape " << shapes::str(*sliced);
  return success();
}

LogicalResult AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError() << "'" << getParam() << "' does not name a pmesh.param";
  if (param.getType() != getGrad().getType())
    return emitOpError() << "gradient type " << getGrad().getType() << " differs from parameter @"
                         << getParam() << " of type " << param.getType();
  return success();
}

LogicalResult AdamWOp::verify() {
  if (getParams().size() != getDecay().size())
    return emitOpError() << getParams().size() << " parameters but " << getDecay().size()
                         << " decay flags";
  return success();
}

//===----------------------------------------------------------------------===//
// Per-rank program ops
//===----------------------------------------------------------------------===//

LogicalResult pipemesh::pmesh::ComputeOp::verify() {
  if (getPhase() != "F" && getPhase() != "B" && getPhase() != "W")
    return emitOpError() << "phase must be \"F\", \"B\" or \"W\", got \"" << getPhase() << "\"";
  if (getChunkAttr().getInt() < 0 || getMicrobatchAttr().getInt() < 0)
    return emitOpError("chunk and microbatch must be non-negative");
  if (getPartAttr() && (getPhase() != "W" || getPartAttr().getInt() < 0))
    return emitOpError("part must be non-negative and only on a \"W\"");
  return success();
}
