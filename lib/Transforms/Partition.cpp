//===- Partition.cpp - cut @forward into pipeline stage chunks --------------===//
//
// 1. Classify. A parameter belongs to a transformer layer by name
//    (Partition.h); layers are numbered by the first read of one of their
//    parameters. Ops fall in three kinds:
//    - replicable: parameter reads, constants and pure ops computed from
//      those alone (weight preprocessing). They are cloned into every stage
//      that reads them, so no weight ever crosses stages and each stage's
//      copy of a tied parameter gets its own gradient;
//    - activation ops with a position: the latest layer they depend on
//      (through data), "pre" when they depend on parameters of no layer only
//      (embeddings), "post" when they are at the last layer and read a
//      non-layer parameter (final norm, tied head), or depend on a post op;
//    - parameter-free activation ops (masks from inputs, shifted labels):
//      the smallest stage among their users, 0 without users.
// 2. Cost. Each position's ops are costed on the device (forward + backward
//    ~ 3x forward; the loss --pmesh-autodiff appends to logits is counted in
//    "post" with its gradient); memory is activation bytes plus parameter,
//    gradient and Adam state (4x the parameter bytes).
// 3. Cut (balance or the explicit layout) and stamp `pmesh.stage`.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/Transforms/Partition.h"
#include "pipemesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>

namespace pipemesh {
#define GEN_PASS_DEF_PMESHPARTITION
#include "pipemesh/Transforms/Passes.h.inc"
} // namespace pipemesh

using namespace mlir;
using namespace pipemesh;
namespace pm = pipemesh::pmesh;
namespace pt = pipemesh::partition;

namespace {
constexpr StringLiteral kStage = "pmesh.stage";

// Positions: kNone (no parameter), kPre, 0..L-1 (layers), L (post).
constexpr int64_t kNone = -2, kPre = -1;

/// What is known about a value of @forward.
struct ValueInfo {
  bool replicable = false; // a parameter, a constant, or computed from those alone
  int64_t position = kNone;
  bool readsNonLayerParam = false; // replicable values: derived from a non-layer parameter
};

std::optional<int64_t> stageOf(Operation *op) {
  if (auto a = op->getAttrOfType<IntegerAttr>(kStage))
    return a.getInt();
  return std::nullopt;
}

std::string human(double bytes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (bytes >= 1024.0 * 1024 * 1024)
    os << llvm::format("%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (bytes >= 1024.0 * 1024)
    os << llvm::format("%.2f MiB", bytes / (1024.0 * 1024));
  else if (bytes >= 1024.0)
    os << llvm::format("%.1f KiB", bytes / 1024.0);
  else
    os << llvm::format("%.0f B", bytes);
  return s;
}
std::string ms(double seconds) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (seconds >= 1.0)
    os << llvm::format("%.3f s", seconds);
  else if (seconds >= 1e-3)
    os << llvm::format("%.3f ms", seconds * 1e3);
  else
    os << llvm::format("%.3f us", seconds * 1e6);
  return s;
}

std::string joinCounts(ArrayRef<int64_t> counts) {
  std::string s;
  for (auto [k, n] : llvm::enumerate(counts))
    s += (k ? "," : "") + std::to_string(n);
  return s;
}

struct PMeshPartitionPass : pipemesh::impl::PMeshPartitionBase<PMeshPartitionPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    auto fwd = module.lookupSymbol<func::FuncOp>("forward");
    if (!fwd)
      return module.emitError("no func.func @forward to partition");
    if (module.lookupSymbol("train_step"))
      return module.emitError(
          "the module already has a @train_step: run --pmesh-partition before --pmesh-autodiff");
    if (module->hasAttr("pmesh.num_stages"))
      return module.emitError("the module is already partitioned (it has pmesh.num_stages)");
    if (!llvm::hasSingleElement(fwd.getBody()))
      return fwd.emitError("@forward must have a single block to be partitioned");
    const int64_t S = stages;
    if (S < 1)
      return module.emitError() << "pmesh-partition: stages must be at least 1, got " << S;
    const int64_t R = ranks;
    if (R < 1 || S % R != 0)
      return module.emitError() << "pmesh-partition: ranks=" << R
                                << " must be at least 1 and divide stages=" << S;
    // The device of the cluster the plan is for, when named (a preset or a
    // cluster file, whose device may be calibrated), else the device preset.
    std::optional<cost::Device> dev;
    if (!cluster.empty()) {
      cost::Cluster c;
      std::string why;
      if (!cost::Cluster::load(cluster, c, why))
        return module.emitError() << "pmesh-partition: cluster=" << cluster << ": " << why;
      dev = c.device;
    } else {
      dev = cost::Device::byName(device);
    }
    if (!dev)
      return module.emitError() << "pmesh-partition: unknown device '" << device
                                << "' (known: " << llvm::join(cost::Device::presetNames(), ", ")
                                << ")";
    Block &body = fwd.getBody().front();
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);

    // Layers, by the first read of one of their parameters.
    llvm::StringMap<int64_t> layerOfKey;
    SmallVector<std::string> layerKeys;
    for (Operation *op : ops)
      if (auto get = dyn_cast<pm::GetParamOp>(op))
        if (auto ln = pt::layerOfParam(get.getName()))
          if (layerOfKey.try_emplace(ln->key, (int64_t)layerKeys.size()).second)
            layerKeys.push_back(ln->key);
    const int64_t L = layerKeys.size();
    const int64_t kPost = L;

    // 1. Positions.
    DenseMap<Value, ValueInfo> info;
    DenseMap<Operation *, int64_t> position; // activation ops
    DenseSet<Operation *> replicableOps;
    for (Operation *op : ops) {
      ValueInfo vi;
      if (auto get = dyn_cast<pm::GetParamOp>(op)) {
        vi.replicable = true;
        replicableOps.insert(op);
        if (auto ln = pt::layerOfParam(get.getName())) {
          vi.position = layerOfKey.lookup(ln->key);
        } else {
          vi.position = kPre;
          vi.readsNonLayerParam = true;
        }
      } else {
        bool allReplicable = isPure(op) && op->getNumRegions() == 0;
        bool readsNonLayer = false;
        int64_t pos = kNone;
        for (Value v : op->getOperands()) {
          ValueInfo in = info.lookup(v); // block arguments: not replicable, kNone
          allReplicable &= in.replicable;
          readsNonLayer |= in.readsNonLayerParam;
          pos = std::max(pos, in.position);
        }
        vi.position = pos;
        if (allReplicable) {
          vi.replicable = true;
          replicableOps.insert(op);
          vi.readsNonLayerParam = readsNonLayer;
        } else {
          // The final norm / head: at the last layer and reading a parameter
          // of no layer.
          if (L > 0 && readsNonLayer && pos == L - 1)
            vi.position = kPost;
          position[op] = vi.position;
        }
      }
      for (Value r : op->getResults())
        info[r] = vi;
    }

    // 2. Costs of each position: index 0 = pre, 1..L = layers, L+1 = post.
    auto slot = [&](int64_t pos) { return pos == kPre ? 0 : pos + 1; };
    std::vector<double> time(L + 2, 0.0), act(L + 2, 0.0);
    std::vector<llvm::SetVector<StringRef>> paramsRead(L + 2);
    for (Operation *op : ops) {
      auto it = position.find(op);
      if (it == position.end() || it->second == kNone)
        continue;
      size_t k = slot(it->second);
      time[k] += 3.0 * cost::opTime(op, *dev);
      if (!isa<pm::ReshapeOp>(op)) // reshapes may alias their input
        for (Value r : op->getResults())
          if (isa<FloatType>(getElementTypeOrSelf(r.getType())))
            act[k] += cost::typeBytes(r.getType());
      // Parameters this op reads, directly or through weight preprocessing.
      SmallVector<Value> work(op->getOperands());
      DenseSet<Value> seen;
      while (!work.empty()) {
        Value v = work.pop_back_val();
        if (!seen.insert(v).second || !info.lookup(v).replicable)
          continue;
        Operation *def = v.getDefiningOp();
        if (auto get = dyn_cast<pm::GetParamOp>(def))
          paramsRead[k].insert(get.getName());
        else
          work.append(def->operand_begin(), def->operand_end());
      }
    }
    std::vector<double> paramBytes(L + 2, 0.0), mem(L + 2, 0.0);
    for (int64_t k = 0; k < L + 2; ++k) {
      for (StringRef name : paramsRead[k])
        if (auto param = module.lookupSymbol<pm::ParamOp>(name))
          paramBytes[k] += cost::typeBytes(param.getType());
      mem[k] = act[k] + 4.0 * paramBytes[k];
    }
    double lossTime = appendedLossTime(fwd, *dev);
    time[L + 1] += lossTime;
    // The balance needs finite costs; a device whose overheads are so large
    // that they add up past the largest double (a cluster file's unit
    // mistake) is said as such, not as a layout that cannot be found.
    for (double t : time)
      if (!std::isfinite(t))
        return module.emitError()
               << "pmesh-partition: device '" << dev->name
               << "' costs a layer at an infinite time: its kernel overhead or another "
                  "figure of the cluster file is out of range";

    pt::Problem problem;
    problem.numChunks = S;
    problem.preTime = time[0];
    problem.preMemory = mem[0];
    problem.postTime = time[L + 1];
    problem.postMemory = mem[L + 1];
    problem.layerTime.assign(time.begin() + 1, time.begin() + 1 + L);
    problem.layerMemory.assign(mem.begin() + 1, mem.begin() + 1 + L);
    problem.preParams = paramBytes[0];
    problem.postParams = paramBytes[L + 1];
    problem.layerParams.assign(paramBytes.begin() + 1, paramBytes.begin() + 1 + L);
    problem.numRanks = R;

    // 3. The layout.
    std::string why;
    std::optional<pt::Layout> layout;
    SmallVector<int64_t> explicitCounts(layersPerStage.begin(), layersPerStage.end());
    if (!explicitCounts.empty()) {
      layout = pt::explicitLayout(problem, explicitCounts, why);
    } else if (L == 0 && S > 1) {
      why = "found no transformer layers (parameters named *.h.<i>.*, *.layers.<i>.*, "
            "*.blocks.<i>.* or *.layer.<i>.*), so there is nothing to cut into stages=" +
            std::to_string(S);
    } else {
      layout = pt::balance(problem, why);
    }
    if (!layout)
      return module.emitError() << "pmesh-partition: " << why;

    std::vector<int64_t> chunkOfLayer;
    for (auto [c, n] : llvm::enumerate(layout->layersPerChunk))
      chunkOfLayer.insert(chunkOfLayer.end(), n, (int64_t)c);
    auto stageOfPosition = [&](int64_t pos) -> int64_t {
      if (pos == kPre)
        return 0;
      if (pos == kPost)
        return S - 1;
      return chunkOfLayer[pos];
    };

    OpBuilder b(module.getContext());
    auto stamp = [&](Operation *op, int64_t stage) {
      op->setAttr(kStage, b.getI64IntegerAttr(stage));
    };
    for (Operation *op : ops)
      if (auto it = position.find(op); it != position.end() && it->second != kNone)
        stamp(op, stageOfPosition(it->second));

    // Backwards, so that every user has its stage: parameter-free ops go to
    // their earliest user's stage, replicable ops are cloned per stage.
    for (Operation *op : llvm::reverse(ops)) {
      if (stageOf(op))
        continue;
      // The uses of each user stage, in program order; returns are unstaged.
      std::map<int64_t, SmallVector<OpOperand *>> uses;
      for (Value r : op->getResults())
        for (OpOperand &use : r.getUses())
          if (auto s = stageOf(use.getOwner()))
            uses[*s].push_back(&use);
      if (uses.empty()) {
        stamp(op, 0);
        continue;
      }
      if (!replicableOps.count(op)) {
        stamp(op, uses.begin()->first);
        continue;
      }
      // The original serves the stage of its first user; the other stages
      // get a clone just before their first user.
      auto firstUser = [](ArrayRef<OpOperand *> us) {
        Operation *first = us.front()->getOwner();
        for (OpOperand *u : us)
          if (u->getOwner()->isBeforeInBlock(first))
            first = u->getOwner();
        return first;
      };
      int64_t home = -1;
      Operation *earliest = nullptr;
      for (auto &[s, us] : uses) {
        Operation *f = firstUser(us);
        if (!earliest || f->isBeforeInBlock(earliest)) {
          earliest = f;
          home = s;
        }
      }
      stamp(op, home);
      for (auto &[s, us] : uses) {
        if (s == home)
          continue;
        b.setInsertionPoint(firstUser(us));
        Operation *clone = b.clone(*op);
        stamp(clone, s);
        replicableOps.insert(clone);
        for (OpOperand *u : us)
          u->set(clone->getResult(cast<OpResult>(u->get()).getResultNumber()));
      }
    }

    // Every stage must compute something.
    std::vector<int64_t> work(S, 0);
    for (Operation &op : body.without_terminator())
      if (!replicableOps.count(&op))
        ++work[*stageOf(&op)];
    for (int64_t c = 0; c < S; ++c)
      if (work[c] == 0)
        return module.emitError() << "pmesh-partition: stage " << c
                                  << " would hold no computation (layers per stage: "
                                  << joinCounts(layout->layersPerChunk) << ")";

    module->setAttr("pmesh.num_stages", b.getI64IntegerAttr(S));
    module->setAttr("pmesh.layers_per_stage", b.getDenseI64ArrayAttr(layout->layersPerChunk));

    if (print)
      report(llvm::outs(), *dev, layerKeys, problem, *layout, paramBytes, act, lossTime,
             !explicitCounts.empty());
    return success();
  }

  /// Time of the cross-entropy (and its gradient) that --pmesh-autodiff
  /// appends when @forward returns logits and no 0-d loss.
  static double appendedLossTime(func::FuncOp fwd, const cost::Device &dev) {
    RankedTensorType logits;
    for (Type t : fwd.getResultTypes()) {
      auto rt = dyn_cast<RankedTensorType>(t);
      if (!rt || !isa<FloatType>(rt.getElementType()))
        continue;
      if (rt.getRank() == 0)
        return 0.0; // the model computes its own loss
      if (rt.getRank() == 3 && !logits)
        logits = rt;
    }
    if (!logits || !logits.hasStaticShape())
      return 0.0;
    int64_t vocab = logits.getShape().back();
    int64_t rows = logits.getNumElements() / std::max<int64_t>(1, vocab);
    int64_t elt = (logits.getElementTypeBitWidth() + 7) / 8;
    return dev.time(cost::crossEntropyCost(rows, vocab, elt, false)) +
           dev.time(cost::crossEntropyCost(rows, vocab, elt, true));
  }

  void report(llvm::raw_ostream &os, const cost::Device &dev, ArrayRef<std::string> layerKeys,
              const pt::Problem &p, const pt::Layout &layout, ArrayRef<double> paramBytes,
              ArrayRef<double> act, double lossTime, bool isExplicit) {
    const int64_t L = layerKeys.size();
    os << "pmesh-partition: " << L << " layer" << (L == 1 ? "" : "s") << " on "
       << p.numChunks << " stage" << (p.numChunks == 1 ? "" : "s") << " ("
       << (isExplicit ? "explicit layers-per-stage" : "balanced") << "; device " << dev.name
       << ": " << llvm::format("%.0f", dev.peakFlops() / 1e9) << " GFLOP/s, "
       << llvm::format("%.0f", dev.memBandwidth / 1e9) << " GB/s, efficiency "
       << llvm::format("%.2f", dev.gemmEfficiency) << ")\n";
    os << "  costs are forward + backward (3x forward); memory = activations + 4x parameters\n";
    auto line = [&](const std::string &what, double t, size_t k) {
      os << "  " << what << ": time " << ms(t) << ", activations " << human(act[k])
         << ", parameters " << human(paramBytes[k]) << "\n";
    };
    line("pre (embeddings)", p.preTime, 0);
    for (int64_t i = 0; i < L; ++i)
      line("layer " + std::to_string(i) + " " + layerKeys[i], p.layerTime[i], i + 1);
    line(lossTime > 0 ? "post (head, appended loss)" : "post (head, loss)", p.postTime, L + 1);
    int64_t first = 0;
    double total = p.preTime + p.postTime;
    for (double t : p.layerTime)
      total += t;
    for (int64_t c = 0; c < p.numChunks; ++c) {
      int64_t n = layout.layersPerChunk[c];
      os << "  stage " << c << ": ";
      if (n == 0)
        os << "no layers";
      else if (n == 1)
        os << "layer " << first;
      else
        os << "layers " << first << "-" << first + n - 1;
      os << " (" << n << ")";
      if (c == 0)
        os << " + pre";
      if (c == p.numChunks - 1)
        os << " + post";
      os << ": time " << ms(layout.chunkTime[c]) << ", memory " << human(layout.chunkMemory[c])
         << "\n";
      first += n;
    }
    os << "  max stage time " << ms(layout.maxTime) << " (ideal " << ms(total / p.numChunks)
       << "), max stage memory " << human(layout.maxMemory) << "\n";
    if (p.numRanks > 1) {
      pt::InterleavedCriteria ranks = pt::interleavedCriteria(p, layout.layersPerChunk);
      for (int64_t r = 0; r < p.numRanks; ++r) {
        os << "  rank " << r << " (stages";
        for (int64_t c = r; c < p.numChunks; c += p.numRanks)
          os << (c == r ? " " : ", ") << c;
        os << "): time " << ms(ranks.rankTime[r]) << ", parameters "
           << human(ranks.rankParams[r]) << "\n";
      }
    }
    // When the head and the loss alone outweigh a balanced stage, a last
    // stage without layers may be better; balanced layouts never pick it.
    if (!isExplicit && p.numChunks > 1 && L >= p.numChunks - 1) {
      pt::Problem rest = p;
      rest.numChunks = p.numChunks - 1;
      rest.postTime = rest.postMemory = 0;
      std::string why;
      if (auto l = pt::balance(rest, why)) {
        double t = std::max(l->maxTime, p.postTime);
        if (t < 0.95 * layout.maxTime) {
          os << "  hint: layers-per-stage=" << joinCounts(l->layersPerChunk)
             << ",0 (the head and the loss alone on the last stage) gives max stage time "
             << ms(t) << "\n";
        }
      }
    }
  }
};
} // namespace
