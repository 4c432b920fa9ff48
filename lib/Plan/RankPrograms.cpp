//===- RankPrograms.cpp - sharding and per-rank programs in the IR ---------===//
#include "RankPrograms.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <set>

using namespace mlir;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan::detail {

void annotateSharding(ModuleOp module, const StagedStep &step, llvm::ArrayRef<int64_t> zeroChunks,
                      int64_t dp) {
  Builder b(module.getContext());
  module->setAttr("pmesh.dp", b.getI64IntegerAttr(dp));
  for (auto param : module.getOps<pm::ParamOp>()) {
    int64_t level = 0;
    auto it = step.chunksOf.find(param.getSymName());
    if (dp > 1 && it != step.chunksOf.end() && !it->second.empty())
      level = zeroChunks[*it->second.begin()];
    param->setAttr("pmesh.zero", b.getI64IntegerAttr(level));
  }
}

int64_t zeroLevelOf(ModuleOp module, llvm::StringRef name) {
  auto param = module.lookupSymbol<pm::ParamOp>(name);
  if (!param)
    return 0;
  auto attr = param->getAttrOfType<IntegerAttr>("pmesh.zero");
  return attr ? attr.getInt() : 0;
}

namespace {

/// Builds one rank's program.
class ProgramBuilder {
public:
  ProgramBuilder(ModuleOp module, const StagedStep &step, const ScheduleConfig &sched, int64_t dp,
                 int64_t waitLag, const llvm::StringSet<> &trained, int64_t p)
      : module(module), step(step), sched(sched), dp(dp), waitLag(waitLag), trained(trained),
        p(p), b(module.getContext()) {}

  void build(OpBuilder &outer);

private:
  const std::vector<Operation *> &actionOps(const Action &a) const {
    return step.phaseOps(a.chunk, a.weight ? 2 : a.backward ? 1 : 0, splitsBackward(sched));
  }
  /// `pmesh.zero` of a parameter, read once per program (a symbol lookup
  /// scans the module).
  int64_t zeroOf(llvm::StringRef name) {
    auto [it, added] = levels.try_emplace(name, 0);
    if (added)
      it->second = zeroLevelOf(module, name);
    return it->second;
  }
  ArrayAttr symbols(llvm::ArrayRef<std::string> names) {
    llvm::SmallVector<Attribute> refs;
    for (const std::string &n : names)
      refs.push_back(FlatSymbolRefAttr::get(b.getContext(), n));
    return b.getArrayAttr(refs);
  }
  void waitSends(int64_t keep);
  void dpReduce(llvm::ArrayRef<std::string> names);

  ModuleOp module;
  const StagedStep &step;
  const ScheduleConfig &sched;
  int64_t dp, waitLag;
  const llvm::StringSet<> &trained;
  int64_t p;
  OpBuilder b;
  llvm::StringMap<int64_t> levels;
  int64_t numSends = 0, sendsCompleted = 0;
  bool asyncIssued = false;
};

void ProgramBuilder::waitSends(int64_t keep) {
  if (numSends - keep <= sendsCompleted)
    return;
  b.create<pm::WaitSendsOp>(module.getLoc(), b.getI64IntegerAttr(keep));
  sendsCompleted = numSends - keep;
}

/// Asynchronous: the reductions run on the data-parallel stream while the
/// backward goes on, completed by wait_collectives before the optimizer.
void ProgramBuilder::dpReduce(llvm::ArrayRef<std::string> names) {
  if (names.empty() || dp <= 1)
    return;
  std::vector<std::string> replicated, sharded;
  for (const std::string &n : names)
    (zeroOf(n) == 0 ? replicated : sharded).push_back(n);
  if (!replicated.empty())
    b.create<pm::AllReduceGradsOp>(module.getLoc(), symbols(replicated), b.getStringAttr("dp"),
                                   b.getBoolAttr(true));
  if (!sharded.empty())
    b.create<pm::ReduceScatterGradsOp>(module.getLoc(), symbols(sharded), b.getBoolAttr(true),
                                       b.getBoolAttr(false));
  asyncIssued = true;
}

void ProgramBuilder::build(OpBuilder &outer) {
  Location loc = module.getLoc();
  auto program = outer.create<pm::RankProgramOp>(loc, b.getI64IntegerAttr(p),
                                                 b.getStringAttr(scheduleKindName(sched.kind)),
                                                 b.getI64IntegerAttr(waitLag));
  Block *body = new Block();
  program.getBody().push_back(body);
  b.setInsertionPointToStart(body);

  // The parameters this rank holds whose gradient it computes.
  std::vector<std::string> held;
  for (auto param : module.getOps<pm::ParamOp>()) {
    auto it = step.holders.find(param.getSymName());
    if (it != step.holders.end() && it->second.count(p) && trained.contains(param.getSymName()))
      held.push_back(param.getSymName().str());
  }
  auto isTied = [&](llvm::StringRef n) { return step.holders.lookup(n).size() > 1; };
  if (!held.empty())
    b.create<pm::ZeroGradsOp>(loc);

  std::vector<Action> actions = rankSchedule(sched, p);
  const bool split = splitsBackward(sched);
  llvm::StringMap<size_t> lastAccumulation;
  for (auto [k, a] : llvm::enumerate(actions))
    if (a.backward && (!split || a.weight))
      for (const std::string &n : step.accumulated[a.chunk])
        lastAccumulation[n] = k;

  std::set<std::pair<int64_t, int64_t>> received; // (channel, micro-batch)
  std::vector<int64_t> sendsBeforeAction;
  const int64_t m = sched.microbatches;
  for (auto [k, a] : llvm::enumerate(actions)) {
    // Sends posted `waitLag` or more actions ago are complete here; their
    // buffers can then be reused.
    sendsBeforeAction.push_back(numSends);
    if (waitLag > 0 && (int64_t)k >= waitLag)
      waitSends(numSends - sendsBeforeAction[k - waitLag]);

    const int64_t mb = a.microbatch;
    const std::vector<Operation *> &ops = actionOps(a);
    // Remote values this action reads: received before it runs.
    for (Operation *op : ops)
      for (Value v : op->getOperands()) {
        if (step.scope(v) != ValueScope::Activation || step.producerRank(v) == p)
          continue;
        for (auto [dst, ch] : step.remote.lookup(v))
          if (dst == p && received.insert({ch, mb}).second)
            b.create<pm::RecvOp>(loc, b.getI64IntegerAttr(ch), b.getI64IntegerAttr(mb),
                                 b.getI64IntegerAttr(step.producerRank(v)),
                                 b.getI64IntegerAttr(ch * m + mb));
      }
    b.create<pm::ComputeOp>(loc, b.getI64IntegerAttr(a.chunk), b.getI64IntegerAttr(mb),
                            b.getStringAttr(a.weight ? "W" : a.backward ? "B" : "F"));
    // Values it computes for other ranks: sent right after.
    for (Operation *op : ops)
      for (Value v : op->getResults())
        for (auto [dst, ch] : step.remote.lookup(v)) {
          b.create<pm::SendOp>(loc, b.getI64IntegerAttr(ch), b.getI64IntegerAttr(mb),
                               b.getI64IntegerAttr(dst), b.getI64IntegerAttr(ch * m + mb));
          ++numSends;
        }
    // ZeRO-2/3: each backward's gradients are reduce-scattered into the
    // persistent shard right away, so no whole gradient outlives its action
    // (tied copies wait for the tied sum at the end).
    std::vector<std::string> perAction;
    if (dp > 1 && a.backward && (!split || a.weight))
      for (const std::string &n : step.accumulated[a.chunk])
        if (llvm::is_contained(held, n) && !isTied(n) && zeroOf(n) >= 2)
          perAction.push_back(n);
    if (!perAction.empty())
      b.create<pm::ReduceScatterGradsOp>(loc, symbols(perAction), b.getBoolAttr(false),
                                         b.getBoolAttr(true));
    // Otherwise the data-parallel reduction runs once a gradient is complete.
    std::vector<std::string> done;
    for (const std::string &n : held)
      if (!isTied(n) && lastAccumulation.count(n) && lastAccumulation[n] == k &&
          !(dp > 1 && zeroOf(n) >= 2))
        done.push_back(n);
    dpReduce(done);
  }

  // Tied copies: summed over the tied group, then over dp. Last, because a
  // collective blocks until every member reaches it.
  std::vector<std::string> tied;
  for (const std::string &n : held)
    if (isTied(n))
      tied.push_back(n);
  if (!tied.empty()) {
    b.create<pm::AllReduceGradsOp>(loc, symbols(tied), b.getStringAttr("tied"),
                                   b.getBoolAttr(false));
    dpReduce(tied);
  }
  waitSends(0);
  if (asyncIssued)
    b.create<pm::WaitCollectivesOp>(loc);
  b.create<pm::OptimizerStepOp>(loc);
  std::vector<std::string> gathered;
  for (const std::string &n : held) {
    int64_t z = zeroOf(n);
    if (dp > 1 && (z == 1 || z == 2))
      gathered.push_back(n);
  }
  if (!gathered.empty())
    b.create<pm::AllGatherParamsOp>(loc, symbols(gathered));
}

} // namespace

LogicalResult buildRankPrograms(ModuleOp module, const StagedStep &step,
                                const ScheduleConfig &sched, int64_t dp, int64_t waitLag) {
  for (auto old : llvm::make_early_inc_range(module.getOps<pm::RankProgramOp>()))
    old.erase();
  llvm::StringSet<> trained;
  if (auto opt = module.lookupSymbol<func::FuncOp>("optimizer_step"))
    opt.walk([&](pm::AdamWOp adamw) {
      for (Attribute sym : adamw.getParams())
        trained.insert(cast<FlatSymbolRefAttr>(sym).getValue());
    });
  OpBuilder outer(module.getContext());
  outer.setInsertionPointToEnd(module.getBody());
  for (int64_t p = 0; p < sched.pp; ++p) {
    ProgramBuilder builder(module, step, sched, dp, waitLag, trained, p);
    builder.build(outer);
  }
  return success();
}

} // namespace pipemesh::plan::detail
