//===- CostModel.cpp - FLOPs, bytes and time of pmesh ops ------------------===//
#include "pipemesh/CostModel/CostModel.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::cost;
namespace pm = pipemesh::pmesh;

// The shape-level formulas (attentionFlops, crossEntropyCost, ...) are in
// ShapeCost.cpp, MLIR-free, so that pipemesh-sim --calibrate counts as this does.

//===----------------------------------------------------------------------===//
// Per-op costs
//===----------------------------------------------------------------------===//

int64_t cost::typeBytes(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape())
    return 0;
  unsigned bits = t.getElementType().getIntOrFloatBitWidth();
  return t.getNumElements() * (int64_t)std::max(1u, (bits + 7) / 8);
}

namespace {
double numel(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? (double)t.getNumElements() : 0.0;
}
double bytesOf(Value v) { return (double)typeBytes(v.getType()); }
double operandBytes(Operation *op) {
  double b = 0;
  for (Value v : op->getOperands())
    b += bytesOf(v);
  return b;
}
double resultBytes(Operation *op) {
  double b = 0;
  for (Value v : op->getResults())
    b += bytesOf(v);
  return b;
}
/// Every operand read and every result written once.
double moved(Operation *op) { return operandBytes(op) + resultBytes(op); }
ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }

/// Elementwise-style op: `perElement` flops per result element.
OpCost elementwise(Operation *op, double perElement) {
  double n = 0;
  for (Value r : op->getResults())
    n += numel(r);
  return {perElement * n, moved(op)};
}

OpCost attentionCost(Value q, Value k, Value v, bool causal, int64_t window, bool grad,
                     Operation *op) {
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(k), vs = shapeOf(v);
  int64_t tq = qs[qs.size() - 2], d = qs.back(), tk = ks[ks.size() - 2], dv = vs.back();
  int64_t bh = 1;
  for (size_t i = 0; i + 2 < qs.size(); ++i)
    bh *= qs[i];
  double flops = grad ? attentionGradFlops(bh, tq, tk, d, dv, causal, window)
                      : attentionFlops(bh, tq, tk, d, dv, causal, window);
  return {flops, moved(op), (double)(bh * tq)};
}

/// cross_entropy (or its gradient) over `logits` [rows..., vocab].
OpCost logitsLoss(Value logits, bool grad) {
  auto t = cast<RankedTensorType>(logits.getType());
  int64_t vocab = t.getRank() ? t.getShape().back() : 1;
  int64_t elt = (t.getElementType().getIntOrFloatBitWidth() + 7) / 8;
  return crossEntropyCost(t.getNumElements() / std::max<int64_t>(1, vocab), vocab, elt, grad);
}

OpCost adamwCost(pm::AdamWOp op) {
  OpCost c;
  for (Attribute a : op.getParams()) {
    auto ref = cast<FlatSymbolRefAttr>(a);
    auto param = SymbolTable::lookupNearestSymbolFrom<pm::ParamOp>(op, ref.getAttr());
    if (!param)
      continue;
    double n = (double)cast<RankedTensorType>(param.getType()).getNumElements();
    double eb = (double)typeBytes(param.getType()) / std::max(1.0, n);
    // Norm pass reads g; the update reads p, g, m, v and writes p, m, v.
    c.flops += 16.0 * n;
    c.bytes += 8.0 * n * eb;
  }
  return c;
}
} // namespace

Operation *cost::directlyAccumulated(Operation *accumulateGrad) {
  auto acc = dyn_cast<pm::AccumulateGradOp>(accumulateGrad);
  if (!acc)
    return nullptr;
  Operation *producer = acc.getGrad().getDefiningOp();
  return producer && accumulatesDirectly(producer) ? producer : nullptr;
}

bool cost::accumulatesDirectly(Operation *weightGrad) {
  if (!weightGrad->hasOneUse() || !isa<pm::AccumulateGradOp>(*weightGrad->user_begin()))
    return false;
  if (isa<pm::EmbeddingGradOp>(weightGrad))
    return true;
  // A GEMM can add into an f32 gradient of its own result's shape; with a
  // bias the epilogue would add the bias into the gradient too.
  auto mm = dyn_cast<pm::MatMulOp>(weightGrad);
  auto result = mm ? dyn_cast<RankedTensorType>(mm.getResult().getType()) : RankedTensorType();
  return mm && !mm.getBias() && result && result.getElementType().isF32();
}

OpCost cost::opCost(Operation *op) {
  return llvm::TypeSwitch<Operation *, OpCost>(op)
      .Case<pm::GetParamOp, pm::ConstantOp, pm::ParamOp>([](auto) { return OpCost{}; })
      .Case<pm::AddOp, pm::SubOp, pm::MulOp, pm::DivOp, pm::MaxOp, pm::EqualOp, pm::LessOp,
            pm::AndOp, pm::NegOp, pm::NotOp, pm::WhereOp>(
          [](Operation *o) { return elementwise(o, 1.0); })
      .Case<pm::PowOp, pm::SqrtOp, pm::TanhOp, pm::ErfOp, pm::ExpOp, pm::LogOp, pm::SigmoidOp>(
          [](Operation *o) { return elementwise(o, 8.0); })
      .Case<pm::CastOp, pm::ReshapeOp, pm::TransposeOp, pm::BroadcastOp, pm::SplitOp,
            pm::ConcatOp, pm::SliceOp, pm::SliceGradOp>(
          [](Operation *o) { return OpCost{0.0, moved(o)}; })
      .Case<pm::ReduceSumOp, pm::ReduceMeanOp>(
          [](Operation *o) { return OpCost{numel(o->getOperand(0)), moved(o)}; })
      .Case([](pm::MatMulOp mm) {
        ArrayRef<int64_t> as = shapeOf(mm.getA()), rs = shapeOf(mm.getResult());
        int64_t k = as.size() == 1 ? as[0] : (mm.getTransposeA() ? as[as.size() - 2] : as.back());
        // The result is [batch..., M, N] (or lower rank for vector operands):
        // 2 * K flops per result element.
        int64_t n = rs.empty() ? 1 : rs.back();
        double rows = numel(mm.getResult()) / std::max<int64_t>(1, n);
        // Added into an accumulated gradient, the GEMM reads C too.
        double bytes = moved(mm) + (accumulatesDirectly(mm) ? bytesOf(mm.getResult()) : 0.0);
        return OpCost{matmulFlops(1, (int64_t)rows, n, k, (bool)mm.getBias()), bytes};
      })
      .Case([](pm::LayerNormOp o) { return elementwise(o, 8.0); })
      .Case([](pm::LayerNormGradOp o) { return OpCost{12.0 * numel(o.getX()), moved(o)}; })
      .Case([](pm::GeluOp o) { return elementwise(o, 15.0); })
      .Case([](pm::GeluGradOp o) { return elementwise(o, 20.0); })
      .Case<pm::SoftmaxOp, pm::LogSoftmaxOp>([](Operation *o) { return elementwise(o, 5.0); })
      .Case<pm::SoftmaxGradOp, pm::LogSoftmaxGradOp>(
          [](Operation *o) { return elementwise(o, 4.0); })
      .Case([](pm::AttentionOp o) {
        return attentionCost(o.getQ(), o.getK(), o.getV(), o.getCausal(), o.getWindow(), false,
                             o);
      })
      .Case([](pm::AttentionGradOp o) {
        return attentionCost(o.getQ(), o.getK(), o.getV(), o.getCausal(), o.getWindow(), true,
                             o);
      })
      .Case([](pm::EmbeddingOp o) {
        // Gathers one table row per id: reads the ids and the rows, writes them.
        return OpCost{0.0, bytesOf(o.getIds()) + 2.0 * bytesOf(o.getResult())};
      })
      .Case([](pm::EmbeddingGradOp o) {
        // Zero-fills the table, then adds every dy row into its table row;
        // into an accumulated gradient, only the rows (read and written).
        double dy = bytesOf(o.getDy());
        if (accumulatesDirectly(o))
          return OpCost{2.0 * numel(o.getDy()), 3.0 * dy + bytesOf(o.getIds())};
        return OpCost{numel(o.getDy()), bytesOf(o.getDtable()) + 3.0 * dy + bytesOf(o.getIds())};
      })
      .Case([](pm::CrossEntropyOp o) { return logitsLoss(o.getLogits(), false); })
      .Case([](pm::CrossEntropyGradOp o) { return logitsLoss(o.getLogits(), true); })
      .Case([](pm::AccumulateGradOp o) {
        if (directlyAccumulated(o))
          return OpCost{}; // counted on the embedding_grad or matmul
        return OpCost{numel(o.getGrad()), 3.0 * bytesOf(o.getGrad())};
      })
      .Case([](pm::AdamWOp o) { return adamwCost(o); })
      .Default([](Operation *o) { return OpCost{0.0, moved(o)}; });
}

KernelClass cost::kernelClass(Operation *op) {
  StringRef name = op->getName().getStringRef();
  return kernelClassOfName(name.starts_with("pmesh.") ? name.drop_front(6) : name);
}

double cost::opTime(Operation *op, const Device &device) {
  return device.time(opCost(op), kernelClass(op));
}
