//===- Autodiff.cpp - build the training step by reverse-mode AD -----------===//
#include "pipemesh/Dialect/PMesh/GradientUtils.h"
#include "pipemesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

#include <map>

namespace pipemesh {
#define GEN_PASS_DEF_PMESHAUTODIFF
#include "pipemesh/Transforms/Passes.h.inc"
} // namespace pipemesh

using namespace mlir;
using namespace pipemesh;
namespace pm = pipemesh::pmesh;

namespace {
constexpr StringLiteral kStage = "pmesh.stage";

std::optional<int64_t> stageOf(Operation *op) {
  if (auto a = op ? op->getAttrOfType<IntegerAttr>(kStage) : IntegerAttr())
    return a.getInt();
  return std::nullopt;
}

/// After --pmesh-partition: stamps `pmesh.stage` on every op the builder
/// creates while `stage` is set (ops that already have one keep it).
struct StageStamper : OpBuilder::Listener {
  std::optional<int64_t> stage;
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    if (stage && !op->hasAttr(kStage))
      op->setAttr(kStage, IntegerAttr::get(IntegerType::get(op->getContext(), 64), *stage));
  }
};

/// Sets the stamper's stage for a scope.
struct StageScope {
  StageStamper &s;
  std::optional<int64_t> saved;
  StageScope(StageStamper &s, std::optional<int64_t> stage) : s(s), saved(s.stage) {
    s.stage = stage;
  }
  ~StageScope() { s.stage = saved; }
};

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// Picks the loss among @forward's results, or the logits to append one to.
struct LossChoice {
  std::optional<unsigned> lossIndex;   // a 0-d float result
  std::optional<unsigned> logitsIndex; // else: rank-3 float logits
};

FailureOr<LossChoice> chooseLoss(func::FuncOp fwd) {
  LossChoice c;
  SmallVector<unsigned> scalars, logits;
  for (auto [k, t] : llvm::enumerate(fwd.getResultTypes())) {
    auto rt = dyn_cast<RankedTensorType>(t);
    if (!rt || !isa<FloatType>(rt.getElementType()))
      continue;
    if (rt.getRank() == 0)
      scalars.push_back(k);
    else if (rt.getRank() == 3)
      logits.push_back(k);
  }
  auto named = [&](ArrayRef<unsigned> ks, StringRef name) -> std::optional<unsigned> {
    for (unsigned k : ks)
      if (auto n = fwd.getResultAttrOfType<StringAttr>(k, "pmesh.name"); n && n.getValue() == name)
        return k;
    return ks.size() == 1 ? std::optional<unsigned>(ks[0]) : std::nullopt;
  };
  if (!scalars.empty()) {
    c.lossIndex = named(scalars, "loss");
    if (!c.lossIndex)
      return fwd.emitError("several 0-d results and none named 'loss': cannot tell the loss");
    return c;
  }
  c.logitsIndex = named(logits, "logits");
  if (!c.logitsIndex)
    return fwd.emitError("@forward returns neither a 0-d loss nor [batch, seq, vocab] logits");
  return c;
}

struct PMeshAutodiffPass : pipemesh::impl::PMeshAutodiffBase<PMeshAutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fwd = module.lookupSymbol<func::FuncOp>("forward");
    if (!fwd) {
      module.emitError("no func.func @forward to differentiate");
      return signalPassFailure();
    }
    if (module.lookupSymbol("train_step") || module.lookupSymbol("optimizer_step")) {
      module.emitError("module already has a @train_step or @optimizer_step");
      return signalPassFailure();
    }
    auto choice = chooseLoss(fwd);
    if (failed(choice))
      return signalPassFailure();
    // Partitioned: every op of @forward has a stage, or none has.
    Operation *staged = nullptr, *unstaged = nullptr;
    for (Operation &op : fwd.getBody().front().without_terminator())
      (op.hasAttr(kStage) ? staged : unstaged) = &op;
    if (staged && unstaged) {
      unstaged->emitOpError("has no pmesh.stage while other ops of @forward have one");
      return signalPassFailure();
    }
    this->staged = staged != nullptr;
    if (failed(buildTrainStep(module, fwd, *choice)))
      return signalPassFailure();
  }

  bool staged = false;

  LogicalResult buildTrainStep(ModuleOp module, func::FuncOp fwd, const LossChoice &choice) {
    OpBuilder b(module.getContext());
    StageStamper stamper;
    Location loc = fwd.getLoc();
    Type f32 = b.getF32Type();
    auto lossType = RankedTensorType::get({}, f32);

    SmallVector<Type> argTypes(fwd.getArgumentTypes());
    RankedTensorType targetsType;
    if (choice.logitsIndex) {
      auto logits = cast<RankedTensorType>(fwd.getResultTypes()[*choice.logitsIndex]);
      targetsType = RankedTensorType::get(logits.getShape().drop_back(), b.getI64Type());
      argTypes.push_back(targetsType);
    }
    b.setInsertionPointAfter(fwd);
    auto step = b.create<func::FuncOp>(loc, "train_step", b.getFunctionType(argTypes, {lossType}));
    Block *body = step.addEntryBlock();
    for (unsigned k = 0; k < fwd.getNumArguments(); ++k)
      if (auto name = fwd.getArgAttr(k, "pmesh.name"))
        step.setArgAttr(k, "pmesh.name", name);
    if (targetsType)
      step.setArgAttr(argTypes.size() - 1, "pmesh.name", b.getStringAttr("targets"));
    step.setResultAttr(0, "pmesh.name", b.getStringAttr("loss"));
    if (staged)
      b.setListener(&stamper);

    // Forward: a copy of @forward's body.
    IRMapping map;
    for (auto [from, to] : llvm::zip(fwd.getArguments(), body->getArguments()))
      map.map(from, to);
    b.setInsertionPointToEnd(body);
    SmallVector<Operation *> forwardOps;
    func::ReturnOp fwdReturn;
    for (Operation &op : fwd.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        fwdReturn = ret;
        continue;
      }
      forwardOps.push_back(b.clone(op, map));
    }
    Value loss;
    // The loss, its seed and a cast go on the stage of the value they start from.
    std::optional<int64_t> lossStage;
    if (choice.logitsIndex) {
      Value logits = map.lookup(fwdReturn.getOperand(*choice.logitsIndex));
      lossStage = stageOf(logits.getDefiningOp());
      StageScope scope(stamper, lossStage);
      auto ce = b.create<pm::CrossEntropyOp>(loc, lossType, logits, body->getArguments().back(),
                                             b.getI64IntegerAttr(-100), b.getStringAttr("mean"));
      forwardOps.push_back(ce);
      loss = ce;
    } else {
      loss = map.lookup(fwdReturn.getOperand(*choice.lossIndex));
      lossStage = stageOf(loss.getDefiningOp());
      StageScope scope(stamper, lossStage);
      if (loss.getType() != lossType) {
        // Part of the forward program, so the backward differentiates it too.
        auto cast = b.create<pm::CastOp>(loc, lossType, loss);
        forwardOps.push_back(cast);
        loss = cast;
      }
    }

    // Which values depend on a parameter (and so need gradients).
    DenseSet<Value> requiresGrad;
    for (Operation *op : forwardOps) {
      bool any = isa<pm::GetParamOp>(op) ||
                 llvm::any_of(op->getOperands(), [&](Value v) { return requiresGrad.count(v); });
      if (any)
        for (Value r : op->getResults())
          if (isFloatTensor(r))
            requiresGrad.insert(r);
    }
    if (!requiresGrad.count(loss))
      return fwd.emitError("the loss does not depend on any parameter");

    // Backward, in reverse program order; fan-out gradients are summed.
    DenseMap<Value, Value> grads;
    {
      StageScope scope(stamper, lossStage);
      grads[loss] = pm::scalarConstant(b, loc, f32, 1.0);
    }
    auto accumulate = [&](Value v, Value g) {
      Value &slot = grads[v];
      if (!slot) {
        slot = g;
        return;
      }
      // Fan-out: contributions from one stage are summed there (one transfer
      // per stage boundary, not one per use); from different stages they
      // meet on the stage of the value's producer. The order of the sums is
      // the unpartitioned one, so gradients are bitwise the same.
      std::optional<int64_t> here = stageOf(slot.getDefiningOp());
      if (here != stageOf(g.getDefiningOp()))
        here = stageOf(v.getDefiningOp());
      StageScope scope(stamper, here);
      slot = b.create<pm::AddOp>(g.getLoc(), g.getType(), slot, g).getResult();
    };
    // Per (parameter, stage): a tied parameter read on several stages gets a
    // gradient on each (-1 when not partitioned).
    llvm::MapVector<std::pair<StringRef, int64_t>, Value> paramGrads;
    for (Operation *op : llvm::reverse(forwardOps)) {
      StageScope scope(stamper, stageOf(op));
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        Value g = grads.lookup(r);
        resultGrads.push_back(g);
        any |= (bool)g;
      }
      if (!any)
        continue;
      if (auto get = dyn_cast<pm::GetParamOp>(op)) {
        Value &slot = paramGrads[{get.getName(), stageOf(get).value_or(-1)}];
        Value g = resultGrads[0];
        slot = slot ? b.create<pm::AddOp>(get.getLoc(), g.getType(), slot, g).getResult() : g;
        continue;
      }
      auto diff = dyn_cast<pm::DifferentiableOpInterface>(op);
      if (!diff)
        return op->emitOpError("has no gradient rule");
      SmallVector<bool> needs;
      for (Value v : op->getOperands())
        needs.push_back(requiresGrad.count(v));
      SmallVector<Value> operandGrads;
      if (failed(diff.buildGradients(b, resultGrads, needs, operandGrads)))
        return failure();
      for (auto [v, g] : llvm::zip(op->getOperands(), operandGrads)) {
        if (!g)
          continue;
        if (g.getType() != v.getType())
          return op->emitOpError() << "gradient rule produced " << g.getType() << " for operand "
                                   << v.getType();
        accumulate(v, g);
      }
    }

    // One summed gradient per parameter (per reading stage when partitioned),
    // in declaration order.
    std::map<StringRef, SmallVector<std::pair<int64_t, Value>>> gradsOfParam;
    for (auto &[key, g] : paramGrads)
      gradsOfParam[key.first].push_back({key.second, g});
    SmallVector<Attribute> optimized;
    SmallVector<bool> decay;
    for (auto param : module.getOps<pm::ParamOp>()) {
      auto it = gradsOfParam.find(param.getSymName());
      if (it == gradsOfParam.end())
        continue; // unused: like PyTorch, AdamW skips parameters without a gradient
      llvm::sort(it->second, [](auto &x, auto &y) { return x.first < y.first; });
      for (auto [stage, g] : it->second) {
        StageScope scope(stamper, staged ? std::optional<int64_t>(stage) : std::nullopt);
        b.create<pm::AccumulateGradOp>(param.getLoc(), param.getSymName(), g);
      }
      optimized.push_back(FlatSymbolRefAttr::get(param.getSymNameAttr()));
      decay.push_back(cast<RankedTensorType>(param.getType()).getRank() >= 2);
    }
    b.create<func::ReturnOp>(loc, loss);
    b.setListener(nullptr);

    b.setInsertionPointAfter(step);
    auto opt = b.create<func::FuncOp>(loc, "optimizer_step", b.getFunctionType({}, {}));
    b.setInsertionPointToEnd(opt.addEntryBlock());
    b.create<pm::AdamWOp>(loc, b.getArrayAttr(optimized), b.getDenseBoolArrayAttr(decay));
    b.create<func::ReturnOp>(loc);
    return success();
  }
};
} // namespace
