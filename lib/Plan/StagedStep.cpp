//===- StagedStep.cpp - @train_step split into chunks and phases -----------===//
#include "StagedStep.h"

#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Transforms/Partition.h"

#include <map>

using namespace mlir;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan::detail {

ValueScope StagedStep::scope(Value v) const {
  while (true) {
    if (isa<BlockArgument>(v))
      return ValueScope::Input;
    Operation *def = v.getDefiningOp();
    if (isa<pm::ConstantOp>(def))
      return ValueScope::Constant;
    if (isa<pm::GetParamOp>(def))
      return ValueScope::Param;
    if (auto r = dyn_cast<pm::ReshapeOp>(def)) {
      v = r.getInput();
      continue;
    }
    return ValueScope::Activation;
  }
}

llvm::StringRef StagedStep::paramRoot(Value v) const {
  while (Operation *def = v.getDefiningOp()) {
    if (auto g = dyn_cast<pm::GetParamOp>(def))
      return g.getName();
    auto r = dyn_cast<pm::ReshapeOp>(def);
    if (!r)
      break;
    v = r.getInput();
  }
  return "";
}

Value StagedStep::viewRoot(Value v) {
  while (auto r = dyn_cast_or_null<pm::ReshapeOp>(v.getDefiningOp()))
    v = r.getInput();
  return v;
}

bool StagedStep::storesBf16(Value v) const {
  if (!bf16Activations)
    return false;
  auto t = cast<RankedTensorType>(v.getType());
  if (!t.getElementType().isF32() || t.getRank() == 0 || scope(v) != ValueScope::Activation)
    return false;
  Value root = viewRoot(v);
  return fromParams.count(root) && !gradientParts.count(root);
}

int64_t StagedStep::storedBytes(Value v) const {
  int64_t bytes = cost::typeBytes(v.getType());
  return storesBf16(v) ? bytes / 2 : bytes;
}

/// gradientParts: from every accumulate_grad operand back through the ops
/// that only combine, scale or rearrange gradient pieces (elementwise ops
/// whose result has a parameter's shape read operands no larger). A GEMM, a
/// reduction, an embedding's or a norm's gradient reads activations: the
/// walk stops there.
static llvm::DenseSet<Value> findGradientParts(func::FuncOp train) {
  llvm::DenseSet<Value> parts;
  llvm::SmallVector<Value> work;
  train.walk([&](pm::AccumulateGradOp acc) { work.push_back(acc.getGrad()); });
  while (!work.empty()) {
    Value root = StagedStep::viewRoot(work.pop_back_val());
    if (!parts.insert(root).second)
      continue;
    Operation *def = root.getDefiningOp();
    if (def && isa<pm::AddOp, pm::SubOp, pm::MulOp, pm::DivOp, pm::NegOp, pm::CastOp,
                   pm::SliceGradOp, pm::SliceOp, pm::TransposeOp, pm::ConcatOp, pm::SplitOp,
                   pm::BroadcastOp>(def))
      for (Value operand : def->getOperands())
        work.push_back(operand);
  }
  return parts;
}

int64_t StagedStep::producerRank(Value v) const {
  return rankOf(chunkOf.lookup(v.getDefiningOp()));
}

std::set<int64_t> StagedStep::layersIn(int64_t chunk) const {
  std::set<int64_t> layers;
  for (Operation *op : fwdOps[chunk])
    layers.insert(layerOf.lookup(op));
  return layers;
}

/// Bucket keys per layer (StagedStep::gradientBuckets): layer * kSubs + sub,
/// subs 0..kSubs - 2 for the layer's parameters, kSubs - 1 for those of no
/// layer read there.
constexpr int64_t kSubs = 64;

/// StagedStep::gradientBuckets of chunk `chunk`.
static llvm::StringMap<int64_t> findGradientBuckets(const StagedStep &s, int64_t chunk) {
  // A layer's parameters in the order the forward first reads them, each
  // bucket closed once it holds kBucketParams elements (PyTorch DDP's default
  // bucket, 25 MiB of f32 gradient); a last piece under a quarter of that
  // joins the bucket before it.
  constexpr int64_t kBucketParams = 25 * 1024 * 1024 / 4;
  llvm::StringMap<int64_t> bucket;
  std::map<int64_t, std::vector<std::pair<std::string, int64_t>>> layerParams; // in order
  for (Operation *op : s.fwdOps[chunk])
    for (Value v : op->getOperands()) {
      llvm::StringRef n = s.paramRoot(v);
      if (n.empty() || bucket.count(n))
        continue;
      int64_t layer = s.layerOf.lookup(op);
      if (!partition::layerOfParam(n)) {
        bucket[n] = layer * kSubs + kSubs - 1;
        continue;
      }
      bucket[n] = layer * kSubs;
      Value root = v;
      while (auto r = root.getDefiningOp<pm::ReshapeOp>())
        root = r.getInput();
      int64_t numel = 1;
      if (auto t = dyn_cast<RankedTensorType>(root.getType()))
        numel = t.getNumElements();
      layerParams[layer].push_back({n.str(), numel});
    }
  for (auto &[layer, params] : layerParams) {
    std::vector<int64_t> sub(params.size());
    int64_t open = 0, held = 0; // the bucket being filled, and its elements
    for (size_t i = 0; i < params.size(); ++i) {
      sub[i] = open;
      held += params[i].second;
      if (held >= kBucketParams && open < kSubs - 2) {
        ++open;
        held = 0;
      }
    }
    if (open > 0 && held < kBucketParams / 4) // the small rest joins the bucket before
      for (size_t i = 0; i < params.size(); ++i)
        sub[i] = std::min(sub[i], open - 1);
    for (size_t i = 0; i < params.size(); ++i)
      bucket[params[i].first] = layer * kSubs + sub[i];
  }
  return bucket;
}

/// Splits chunk `c`'s W ops into per-bucket parts (bwdWeightParts).
static void splitWeightParts(StagedStep &s, int64_t c) {
  const std::vector<Operation *> &ops = s.bwdWeightOps[c];
  const llvm::StringMap<int64_t> &bucket = s.gradientBuckets(c);
  auto keyOf = [&](pm::AccumulateGradOp acc) {
    auto it = bucket.find(acc.getParam());
    return it != bucket.end() ? it->second : kSubs * s.layerOf.lookup(acc);
  };
  // Parts in the order the W completes their buckets (last accumulation).
  std::map<int64_t, size_t> lastAt;
  for (auto [i, op] : llvm::enumerate(ops))
    if (auto acc = dyn_cast<pm::AccumulateGradOp>(op))
      lastAt[keyOf(acc)] = i;
  std::vector<std::pair<size_t, int64_t>> byEnd;
  for (auto [key, at] : lastAt)
    byEnd.push_back({at, key});
  llvm::sort(byEnd);
  std::map<int64_t, int64_t> partOfKey;
  for (auto [k, e] : llvm::enumerate(byEnd))
    partOfKey[e.second] = (int64_t)k;
  const int64_t numParts = std::max<int64_t>(1, (int64_t)byEnd.size());
  s.accumulatedByPart[c].assign(numParts, {});
  // An op belongs to the first part among its users' (later ops only).
  llvm::DenseMap<Operation *, int64_t> part;
  for (Operation *op : llvm::reverse(ops)) {
    int64_t p = numParts;
    if (auto acc = dyn_cast<pm::AccumulateGradOp>(op)) {
      p = partOfKey[keyOf(acc)];
      s.accumulatedByPart[c][p].insert(acc.getParam().str());
    } else {
      for (Value v : op->getResults())
        for (Operation *user : v.getUsers())
          if (auto it = part.find(user); it != part.end())
            p = std::min(p, it->second);
    }
    part[op] = p == numParts ? 0 : p; // needed by no part: with the first
  }
  s.bwdWeightParts[c].assign(numParts, {});
  for (Operation *op : ops)
    s.bwdWeightParts[c][part[op]].push_back(op);
}

FailureOr<StagedStep> analyzeTrainStep(func::FuncOp train, int64_t pp, int64_t numChunks) {
  StagedStep s;
  s.train = train;
  s.pp = pp;
  s.numChunks = numChunks;
  Block &entry = train.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  if (ret.getNumOperands() < 1)
    return train.emitError("@train_step returns no loss");
  s.loss = ret.getOperand(0);
  s.lossOp = s.loss.getDefiningOp();
  if (!s.lossOp || s.scope(s.loss) != ValueScope::Activation)
    return train.emitError("the loss of @train_step is not computed from the model");

  // The ops that need a chunk: everything but inputs, constants, parameters
  // and views of those.
  auto isFree = [&](Operation *op) {
    if (isa<pm::ConstantOp, pm::GetParamOp, func::ReturnOp>(op))
      return true;
    if (auto r = dyn_cast<pm::ReshapeOp>(op))
      return s.scope(r.getResult()) != ValueScope::Activation;
    return false;
  };
  llvm::SmallVector<Operation *> ops;
  for (Operation &op : entry)
    if (!isFree(&op))
      ops.push_back(&op);

  // Chunks: the `pmesh.stage` attribute; ops without one (made by a cleanup
  // after partitioning) go where their first user runs, else where their
  // operands were computed.
  bool anyStage = false;
  for (Operation *op : ops) {
    if (numChunks == 1) {
      s.chunkOf[op] = 0;
      continue;
    }
    auto attr = op->getAttrOfType<IntegerAttr>("pmesh.stage");
    if (!attr)
      continue;
    anyStage = true;
    int64_t c = attr.getInt();
    if (c < 0 || c >= numChunks)
      return op->emitOpError() << "has pmesh.stage = " << c << " but the plan has pp * vpp = "
                               << numChunks << " chunks";
    s.chunkOf[op] = c;
  }
  if (numChunks > 1) {
    if (!anyStage)
      return train.emitError() << "pp * vpp = " << numChunks
                               << " chunks but @train_step has no pmesh.stage attributes: run "
                                  "--pmesh-partition before --pmesh-autodiff";
    for (Operation *op : llvm::reverse(ops)) {
      if (s.chunkOf.count(op))
        continue;
      int64_t best = -1;
      for (Operation *user : op->getUsers())
        if (auto it = s.chunkOf.find(user); it != s.chunkOf.end())
          best = best < 0 ? it->second : std::min(best, it->second);
      if (best >= 0)
        s.chunkOf[op] = best;
    }
    for (Operation *op : ops) {
      if (s.chunkOf.count(op))
        continue;
      int64_t best = 0;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (auto it = s.chunkOf.find(def); it != s.chunkOf.end())
            best = std::max(best, it->second);
      s.chunkOf[op] = best;
    }
  }

  // The forward phase: what the loss depends on.
  llvm::SmallVector<Operation *> work{s.lossOp};
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!s.forward.insert(op).second)
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp())
        work.push_back(def);
  }
  s.fwdOps.assign(numChunks, {});
  s.bwdOps.assign(numChunks, {});
  s.accumulated.assign(numChunks, {});
  for (Operation *op : ops) {
    int64_t c = s.chunkOf[op];
    (s.forward.count(op) ? s.fwdOps : s.bwdOps)[c].push_back(op);
    if (auto acc = dyn_cast<pm::AccumulateGradOp>(op)) {
      s.accumulated[c].insert(acc.getParam().str());
      s.holders[acc.getParam()].insert(s.rankOf(c));
      s.chunksOf[acc.getParam()].insert(c);
    }
  }

  // Autodiff accumulates every gradient at the end of @train_step; in a
  // backward phase each accumulation moves up to right after the op that
  // computes its gradient, so the gradient's temporary dies there and the
  // layer's data-parallel reduction can start while the earlier layers'
  // backward still runs.
  for (std::vector<Operation *> &phase : s.bwdOps) {
    llvm::DenseSet<Operation *> inPhase(phase.begin(), phase.end());
    llvm::DenseMap<Operation *, llvm::SmallVector<Operation *, 2>> after;
    for (Operation *op : phase)
      if (auto acc = dyn_cast<pm::AccumulateGradOp>(op))
        if (Operation *def = acc.getGrad().getDefiningOp(); def && inPhase.count(def))
          after[def].push_back(op);
    std::vector<Operation *> ordered;
    ordered.reserve(phase.size());
    for (Operation *op : phase) {
      auto acc = dyn_cast<pm::AccumulateGradOp>(op);
      if (acc && acc.getGrad().getDefiningOp() && inPhase.count(acc.getGrad().getDefiningOp()))
        continue; // placed after its gradient's producer
      ordered.push_back(op);
      if (auto it = after.find(op); it != after.end())
        ordered.insert(ordered.end(), it->second.begin(), it->second.end());
    }
    phase = std::move(ordered);
  }

  // Parameter copies: every rank that reads a parameter holds one.
  for (Operation *op : ops)
    for (Value v : op->getOperands())
      if (llvm::StringRef p = s.paramRoot(v); !p.empty()) {
        s.holders[p].insert(s.rankOf(s.chunkOf[op]));
        s.chunksOf[p].insert(s.chunkOf[op]);
      }

  // Channels: an activation read on another pipeline rank is sent there
  // once per micro-batch, right after it is computed.
  for (Operation *op : ops)
    for (Value v : op->getResults()) {
      std::set<int64_t> dst;
      int64_t src = s.rankOf(s.chunkOf[op]);
      for (Operation *user : v.getUsers())
        if (auto it = s.chunkOf.find(user); it != s.chunkOf.end())
          if (s.rankOf(it->second) != src)
            dst.insert(s.rankOf(it->second));
      for (int64_t d : dst) {
        s.remote[v].push_back({d, s.numChannels++});
        s.channelValue.push_back(v);
      }
    }

  // Layers: a parameter's name says its layer; other ops take the highest
  // layer among their operands' producers (the residual stream carries it).
  for (Operation *op : ops) {
    int64_t layer = -1;
    for (Value v : op->getOperands())
      if (llvm::StringRef p = s.paramRoot(v); !p.empty())
        if (auto ln = partition::layerOfParam(p))
          layer = std::max(layer, ln->index);
    if (auto acc = dyn_cast<pm::AccumulateGradOp>(op))
      if (auto ln = partition::layerOfParam(acc.getParam()))
        layer = std::max(layer, ln->index);
    if (layer < 0)
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp())
          if (auto it = s.layerOf.find(def); it != s.layerOf.end())
            layer = std::max(layer, it->second);
    s.layerOf[op] = layer;
  }

  // The input-gradient part of each backward: the ops the values it sends
  // to other ranks depend on, within the chunk's backward.
  s.bwdInputOps.assign(numChunks, {});
  s.bwdWeightOps.assign(numChunks, {});
  for (int64_t c = 0; c < numChunks; ++c) {
    llvm::DenseSet<Operation *> inChunk(s.bwdOps[c].begin(), s.bwdOps[c].end());
    llvm::DenseSet<Operation *> needed;
    llvm::SmallVector<Operation *> work;
    for (Operation *op : s.bwdOps[c])
      for (Value v : op->getResults())
        if (s.remote.count(v))
          work.push_back(op);
    while (!work.empty()) {
      Operation *op = work.pop_back_val();
      if (!needed.insert(op).second)
        continue;
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && inChunk.count(def))
          work.push_back(def);
    }
    for (Operation *op : s.bwdOps[c])
      (needed.count(op) ? s.bwdInputOps : s.bwdWeightOps)[c].push_back(op);
  }
  s.bwdWeightParts.assign(numChunks, {});
  s.accumulatedByPart.assign(numChunks, {});
  for (int64_t c = 0; c < numChunks; ++c) {
    s.bucketOf.push_back(findGradientBuckets(s, c));
    splitWeightParts(s, c);
  }

  int64_t k = 0;
  for (Operation &op : entry)
    if (isa<pm::ConstantOp>(op))
      s.constantName[&op] = "const." + std::to_string(k++);
  s.gradientParts = findGradientParts(train);
  for (Operation &op : entry)
    if (isa<pm::GetParamOp>(op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return s.fromParams.count(v) > 0;
        }))
      s.fromParams.insert(op.result_begin(), op.result_end());
  return s;
}

} // namespace pipemesh::plan::detail
