//===- RankPrograms.cpp - sharding and per-rank programs in the IR ---------===//
#include "RankPrograms.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

#include <deque>
#include <map>
#include <set>

using namespace mlir;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan::detail {

Action actionOf(pm::ComputeOp compute) {
  Action a{(int64_t)compute.getChunk(), (int64_t)compute.getMicrobatch(),
           compute.getPhase() != "F", compute.getPhase() == "W"};
  if (auto part = compute.getPartAttr())
    a.part = part.getInt();
  return a;
}

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

llvm::StringMap<int64_t> zeroLevels(ModuleOp module) {
  llvm::StringMap<int64_t> levels;
  for (auto param : module.getOps<pm::ParamOp>()) {
    auto attr = param->getAttrOfType<IntegerAttr>("pmesh.zero");
    levels[param.getSymName()] = attr ? attr.getInt() : 0;
  }
  return levels;
}

namespace {

/// Builds one rank's program.
class ProgramBuilder {
public:
  ProgramBuilder(ModuleOp module, const StagedStep &step, const ScheduleConfig &sched, int64_t dp,
                 int64_t waitLag, const llvm::StringSet<> &trained,
                 const llvm::StringMap<int64_t> &levels, int64_t p,
                 const std::vector<Action> &actions)
      : module(module), step(step), sched(sched), dp(dp), waitLag(waitLag), trained(trained),
        levels(levels), p(p), actions(actions), b(module.getContext()) {}

  void build(OpBuilder &outer);

private:
  const std::vector<Operation *> &actionOps(const Action &a) const {
    return step.opsOf(a, splitsBackward(sched));
  }
  /// The parameters whose gradient an accumulating action adds to.
  const std::set<std::string> &accumulatedBy(const Action &a) const {
    return a.weight && a.part >= 0 ? step.accumulatedByPart[a.chunk][a.part]
                                   : step.accumulated[a.chunk];
  }
  /// `pmesh.zero` of a parameter (0 when absent).
  int64_t zeroOf(llvm::StringRef name) const { return levels.lookup(name); }
  ArrayAttr symbols(llvm::ArrayRef<std::string> names) {
    llvm::SmallVector<Attribute> refs;
    for (const std::string &n : names)
      refs.push_back(FlatSymbolRefAttr::get(b.getContext(), n));
    return b.getArrayAttr(refs);
  }
  void waitSends(int64_t keep);
  void dpReduce(llvm::ArrayRef<std::string> names);
  std::vector<std::vector<std::string>> layerBuckets(llvm::ArrayRef<std::string> names,
                                                     int64_t chunk,
                                                     llvm::ArrayRef<Operation *> ops,
                                                     bool byFirst) const;

  ModuleOp module;
  const StagedStep &step;
  const ScheduleConfig &sched;
  int64_t dp, waitLag;
  const llvm::StringSet<> &trained;
  const llvm::StringMap<int64_t> &levels; // zeroLevels
  int64_t p;
  const std::vector<Action> &actions; // this rank's schedule
  OpBuilder b;
  int64_t numSends = 0, sendsCompleted = 0;
  /// Async collectives this program issued so far (wait_collectives keeps
  /// count of them).
  int64_t numAsync = 0;
};

void ProgramBuilder::waitSends(int64_t keep) {
  if (numSends - keep <= sendsCompleted)
    return;
  b.create<pm::WaitSendsOp>(module.getLoc(), b.getI64IntegerAttr(keep));
  sendsCompleted = numSends - keep;
}

/// Splits `names` into their gradient buckets (StagedStep::gradientBuckets:
/// DDP-sized parts of a layer, the embedding and the head apart), in the
/// order the ops
/// of an action of `chunk` reach them: byFirst, the op that first reads a
/// parameter (a forward, for its gather); otherwise the op that last
/// accumulates its gradient (a backward, for its reduction). Names the ops
/// do not touch form a first bucket.
std::vector<std::vector<std::string>>
ProgramBuilder::layerBuckets(llvm::ArrayRef<std::string> names, int64_t chunk,
                             llvm::ArrayRef<Operation *> ops, bool byFirst) const {
  if (names.empty())
    return {};
  llvm::StringSet<> wanted;
  for (const std::string &n : names)
    wanted.insert(n);
  const llvm::StringMap<int64_t> &bucketOf = step.gradientBuckets(chunk);
  llvm::StringMap<size_t> position; // name -> index in ops
  for (auto [i, op] : llvm::enumerate(ops)) {
    auto note = [&](llvm::StringRef n) {
      if (!wanted.contains(n))
        return;
      auto [it, added] = position.try_emplace(n, i);
      if (!added && !byFirst)
        it->second = i;
    };
    if (byFirst) {
      for (Value v : op->getOperands())
        note(step.paramRoot(v));
    } else if (auto acc = dyn_cast<pm::AccumulateGradOp>(op)) {
      note(acc.getParam());
    }
  }
  std::vector<std::vector<std::string>> buckets;
  std::vector<size_t> reachedAt; // per bucket: its first (byFirst) or last op
  std::vector<std::string> untouched;
  std::map<int64_t, size_t> indexOfBucket;
  for (const std::string &n : names) {
    auto pos = position.find(n);
    auto l = bucketOf.find(n);
    if (pos == position.end() || l == bucketOf.end()) {
      untouched.push_back(n);
      continue;
    }
    auto [it, added] = indexOfBucket.try_emplace(l->second, buckets.size());
    if (added) {
      buckets.emplace_back();
      reachedAt.push_back(pos->second);
    }
    size_t b = it->second;
    buckets[b].push_back(n);
    reachedAt[b] = byFirst ? std::min(reachedAt[b], pos->second)
                           : std::max(reachedAt[b], pos->second);
  }
  std::vector<size_t> order(buckets.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  llvm::stable_sort(order, [&](size_t x, size_t y) { return reachedAt[x] < reachedAt[y]; });
  std::vector<std::vector<std::string>> sorted;
  if (!untouched.empty())
    sorted.push_back(std::move(untouched));
  for (size_t i : order)
    sorted.push_back(std::move(buckets[i]));
  return sorted;
}

/// Asynchronous: the reductions run on the data-parallel stream while the
/// backward goes on, completed by wait_collectives before the optimizer.
void ProgramBuilder::dpReduce(llvm::ArrayRef<std::string> names) {
  if (names.empty() || dp <= 1)
    return;
  std::vector<std::string> replicated, sharded;
  for (const std::string &n : names)
    (zeroOf(n) == 0 ? replicated : sharded).push_back(n);
  if (!replicated.empty()) {
    b.create<pm::AllReduceGradsOp>(module.getLoc(), symbols(replicated), b.getStringAttr("dp"),
                                   b.getBoolAttr(true));
    ++numAsync;
  }
  if (!sharded.empty()) {
    b.create<pm::ReduceScatterGradsOp>(module.getLoc(), symbols(sharded), b.getBoolAttr(true),
                                       b.getBoolAttr(false));
    ++numAsync;
  }
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
  // A sharded tied copy is reduce-scattered over dp like any gradient (the
  // last stage's copy early, behind its remaining backwards) and the tied
  // group then sums the shards: 1/dp of the bytes at the end of the step.
  // Replicated ones are summed over the tied group first, then over dp.
  auto tiedWhole = [&](llvm::StringRef n) { return isTied(n) && (dp <= 1 || zeroOf(n) == 0); };
  if (!held.empty())
    b.create<pm::ZeroGradsOp>(loc);

  const bool split = splitsBackward(sched);
  llvm::StringMap<size_t> lastAccumulation;
  for (auto [k, a] : llvm::enumerate(actions))
    if (a.backward && (!split || a.weight))
      for (const std::string &n : accumulatedBy(a))
        lastAccumulation[n] = k;

  // ZeRO-1/2: the updated shards are gathered at the end of the step, one
  // async all_gather_params per gradient bucket of each chunk in the order the next
  // step first reads them, and each chunk's first forward waits for each
  // layer right before reading it: the later layers' and chunks' gathers run
  // while the first ones compute (Megatron's overlapped parameter gather).
  // Parameters no chunk's forward reads on this rank go in a first group,
  // waited before the first action.
  auto gatheredAfterStep = [&](llvm::StringRef n) {
    int64_t z = zeroOf(n);
    return dp > 1 && (z == 1 || z == 2);
  };
  std::vector<std::vector<std::string>> gatherGroups;
  std::map<int64_t, std::vector<int64_t>> gatherGroupsOfChunk; // first forward only
  bool gathersUnread = false;
  {
    llvm::StringSet<> assigned;
    std::vector<std::pair<int64_t, std::vector<std::vector<std::string>>>> byChunk;
    for (const Action &a : actions) {
      if (a.backward || llvm::any_of(byChunk, [&](auto &g) { return g.first == a.chunk; }))
        continue;
      std::vector<std::string> names;
      for (const std::string &n : held)
        if (gatheredAfterStep(n) && step.accumulated[a.chunk].count(n) &&
            assigned.insert(n).second)
          names.push_back(n);
      byChunk.push_back(
          {a.chunk, layerBuckets(names, a.chunk, step.fwdOps[a.chunk], /*byFirst=*/true)});
    }
    std::vector<std::string> unread;
    for (const std::string &n : held)
      if (gatheredAfterStep(n) && !assigned.contains(n))
        unread.push_back(n);
    if (!unread.empty()) {
      gatherGroups.push_back(std::move(unread));
      gathersUnread = true;
    }
    for (auto &[chunk, buckets] : byChunk)
      for (std::vector<std::string> &names : buckets) {
        gatherGroupsOfChunk[chunk].push_back((int64_t)gatherGroups.size());
        gatherGroups.push_back(std::move(names));
      }
  }
  const int64_t numGathers = (int64_t)gatherGroups.size();
  // Completes the previous step's gather `g`: every async collective issued
  // after it (the later gathers, and this program's own so far) may go on.
  // Naming the parameters lets the wait move into the action, before the
  // first op that reads them.
  auto waitForGather = [&](int64_t g, bool named) {
    b.create<pm::WaitCollectivesOp>(loc, b.getI64IntegerAttr(numGathers - 1 - g + numAsync),
                                    named ? symbols(gatherGroups[g]) : ArrayAttr());
  };
  if (gathersUnread)
    waitForGather(0, /*named=*/false);

  std::set<std::pair<int64_t, int64_t>> received; // (channel, micro-batch)
  auto accumulates = [&](const Action &x) { return x.backward && (!split || x.weight); };
  // Per action, the chunk of the accumulating action before it
  // (-1: none, or another action between when forwards end runs): where runs
  // of one chunk's backwards start and end. A run spans the forwards between
  // its backwards (bfs's last chunk alternates F and B: one run, not M)
  // where that keeps fewer whole gradients than ZeRO-1 would: breadth-first
  // orders peak in activations before their first backward, and with
  // several chunks per rank at most two chunks' whole gradients are alive.
  // With one chunk (1F1B, ZB) it would keep the only chunk's for the whole
  // backward, ZeRO-1's memory: there any other action ends a run (DeepSpeed's
  // reduction per micro-batch, trading M reductions for the memory).
  const bool runsSpanForwards = sched.kind == ScheduleKind::BFS ||
                                sched.kind == ScheduleKind::Elastic || sched.vpp > 1;
  std::vector<int64_t> prevAccumulatingChunk(actions.size(), -1);
  auto chunkIfAccumulating = [&](size_t k, int64_t further) {
    return accumulates(actions[k]) ? actions[k].chunk : runsSpanForwards ? further : -1;
  };
  for (size_t k = 1; k < actions.size(); ++k)
    prevAccumulatingChunk[k] = chunkIfAccumulating(k - 1, prevAccumulatingChunk[k - 1]);
  // Runs of accumulating actions (an index per action, -1 for the others),
  // and in each the action that last accumulates each parameter.
  std::vector<int64_t> runOf(actions.size(), -1);
  std::vector<llvm::StringMap<size_t>> lastInRun;
  for (auto [k, a] : llvm::enumerate(actions)) {
    if (!accumulates(a))
      continue;
    if (prevAccumulatingChunk[k] != a.chunk || lastInRun.empty())
      lastInRun.emplace_back();
    runOf[k] = (int64_t)lastInRun.size() - 1;
    for (const std::string &n : accumulatedBy(a))
      lastInRun.back()[n] = k;
  }
  // The per-run reductions in flight, oldest first: of each run its last
  // reduction's index among numAsync, its chunk and the run.
  struct RunReduction {
    int64_t last, chunk, run;
  };
  std::deque<RunReduction> runReductions;
  // Completes the run reductions through `r` (they complete in order).
  auto completeRunReductions = [&](const RunReduction &r) {
    const int64_t last = r.last;
    b.create<pm::WaitCollectivesOp>(loc, b.getI64IntegerAttr(numAsync - 1 - last), ArrayAttr());
    while (!runReductions.empty() && runReductions.front().last <= last)
      runReductions.pop_front();
  };
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
    if (!a.backward)
      if (auto g = gatherGroupsOfChunk.find(a.chunk); g != gatherGroupsOfChunk.end()) {
        for (int64_t group : g->second)
          waitForGather(group, /*named=*/true);
        gatherGroupsOfChunk.erase(g);
      }
    // A new run of the chunk whose reduction is in flight starts a new
    // whole gradient: the old one is added to the shard and freed first.
    // With runs of one action (one chunk per rank, depth-first) the
    // steady state is the memory peak, so the reduction completes before
    // the next action of any kind: it overlaps only the sends and receives
    // between them, and no whole gradient outlives its action.
    const bool runStarts = accumulates(a) && prevAccumulatingChunk[k] != a.chunk;
    if (!runReductions.empty() && !runsSpanForwards)
      completeRunReductions(runReductions.back());
    if (runStarts)
      for (auto it = runReductions.rbegin(); it != runReductions.rend(); ++it)
        if (it->chunk == a.chunk) {
          completeRunReductions(*it);
          break;
        }
    b.create<pm::ComputeOp>(loc, b.getI64IntegerAttr(a.chunk), b.getI64IntegerAttr(mb),
                            b.getStringAttr(a.weight ? "W" : a.backward ? "B" : "F"),
                            a.part >= 0 ? b.getI64IntegerAttr(a.part) : IntegerAttr());
    // Values it computes for other ranks: sent right after.
    for (Operation *op : ops)
      for (Value v : op->getResults())
        for (auto [dst, ch] : step.remote.lookup(v)) {
          b.create<pm::SendOp>(loc, b.getI64IntegerAttr(ch), b.getI64IntegerAttr(mb),
                               b.getI64IntegerAttr(dst), b.getI64IntegerAttr(ch * m + mb));
          ++numSends;
        }
    // ZeRO-2/3: the gradients of a run of backwards of one chunk (a group
    // of micro-batches in breadth-first orders, one action in depth-first
    // ones; see runsSpanForwards) are reduce-scattered into the persistent
    // shard when the run is done with them, so a breadth-first group pays
    // one reduce-scatter instead of one per micro-batch: all at the run's
    // end, or, where the run's W's complete the gradient buckets one after
    // another (W parts), each bucket when its last part has run. The
    // reduction is async: it runs behind what follows and completes (adding
    // into the shard, freeing the whole gradient) before the run after next
    // issues its own or, see above, before the next run of its chunk or the
    // next action, so at most three chunks' whole gradients are alive at
    // once (DeepSpeed's overlap_comm, two reductions in flight: a run's
    // reduce-scatter over a slow network may take longer than the next
    // run's compute; waiting for it there stalled 13B bfs-order plans at
    // 25 Gb/s by 3 %).
    std::vector<std::string> perRun;
    if (dp > 1 && runOf[k] >= 0)
      for (const std::string &n : accumulatedBy(a))
        if (llvm::is_contained(held, n) && !tiedWhole(n) && zeroOf(n) >= 2 &&
            lastInRun[runOf[k]].lookup(n) == k)
          perRun.push_back(n);
    if (!perRun.empty()) {
      const bool newRun = runReductions.empty() || runReductions.back().run != runOf[k];
      if (newRun && runReductions.size() >= 2)
        completeRunReductions(runReductions.front());
      b.create<pm::ReduceScatterGradsOp>(loc, symbols(perRun), b.getBoolAttr(true),
                                         b.getBoolAttr(true));
      if (newRun)
        runReductions.push_back({numAsync, a.chunk, runOf[k]});
      else
        runReductions.back().last = numAsync;
      ++numAsync;
    }
    // Otherwise the data-parallel reduction runs once a gradient is
    // complete: a reduction per gradient bucket, in the order the action completes
    // them (the emitter issues each inside the action, behind the
    // backward of the layers still to come).
    std::vector<std::string> done;
    for (const std::string &n : held)
      if (!tiedWhole(n) && lastAccumulation.count(n) && lastAccumulation[n] == k &&
          !(dp > 1 && zeroOf(n) >= 2))
        done.push_back(n);
    for (const std::vector<std::string> &bucket :
         layerBuckets(done, a.chunk, ops, /*byFirst=*/false))
      dpReduce(bucket);
  }

  // Tied sums last, because a collective blocks until every member reaches
  // it.
  std::vector<std::string> wholeTied, shardTied;
  for (const std::string &n : held)
    if (isTied(n))
      (tiedWhole(n) ? wholeTied : shardTied).push_back(n);
  if (!wholeTied.empty()) {
    b.create<pm::AllReduceGradsOp>(loc, symbols(wholeTied), b.getStringAttr("tied"),
                                   b.getBoolAttr(false));
    dpReduce(wholeTied);
  }
  waitSends(0);
  if (numAsync > 0)
    b.create<pm::WaitCollectivesOp>(loc, b.getI64IntegerAttr(0), ArrayAttr());
  if (!shardTied.empty())
    b.create<pm::AllReduceGradsOp>(loc, symbols(shardTied), b.getStringAttr("tied"),
                                   b.getBoolAttr(false));
  b.create<pm::OptimizerStepOp>(loc);
  for (const std::vector<std::string> &names : gatherGroups)
    b.create<pm::AllGatherParamsOp>(loc, symbols(names), b.getBoolAttr(true));
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
  std::vector<std::vector<Action>> orders = rankSchedules(sched);
  std::vector<int64_t> partsOfChunk;
  for (const auto &parts : step.bwdWeightParts)
    partsOfChunk.push_back((int64_t)parts.size());
  // At most 2 pp split W's per run: every W after the last B of the
  // depth-first-sized runs (the 64-GPU plans of bench/sim_paper.py), the last
  // 2 pp of long breadth-first ones (a 1.3B bfs run of 128 micro-batches
  // split whole would keep 128 micro-batches' recomputed activations).
  for (std::vector<Action> &order : orders)
    order = orderWeightParts(order, partsOfChunk, sched.deferW, 2 * sched.pp);
  const llvm::StringMap<int64_t> levels = zeroLevels(module);
  for (int64_t p = 0; p < sched.pp; ++p) {
    ProgramBuilder builder(module, step, sched, dp, waitLag, trained, levels, p, orders[p]);
    builder.build(outer);
  }
  return success();
}

std::vector<RankProgram> communicationOfRankPrograms(ModuleOp module,
                                                     llvm::ArrayRef<int64_t> tiedRanks) {
  std::vector<RankProgram> out;
  for (auto rankProgram : module.getOps<pm::RankProgramOp>()) {
    RankProgram rp;
    rp.rank = rankProgram.getPpRank();
    rp.groups["dp"] = {rp.rank};
    if (llvm::is_contained(tiedRanks, rp.rank))
      rp.groups["tied"] = std::vector<int64_t>(tiedRanks.begin(), tiedRanks.end());
    for (Operation &op : rankProgram.getBody().front()) {
      if (auto sd = dyn_cast<pm::SendOp>(op))
        rp.ops.push_back(CommOp::send(sd.getPeer(), sd.getTag(), 0));
      else if (auto r = dyn_cast<pm::RecvOp>(op))
        rp.ops.push_back(CommOp::recv(r.getPeer(), r.getTag(), 0));
      else if (auto w = dyn_cast<pm::WaitSendsOp>(op))
        rp.ops.push_back(CommOp::waitSends(w.getKeep()));
      else if (auto ar = dyn_cast<pm::AllReduceGradsOp>(op))
        rp.ops.push_back(CommOp::collective(ar.getGroup().str(), "allreduce"));
      else if (isa<pm::ReduceScatterGradsOp>(op))
        rp.ops.push_back(CommOp::collective("dp", "reduce_scatter"));
      else if (isa<pm::AllGatherParamsOp>(op))
        rp.ops.push_back(CommOp::collective("dp", "allgather"));
      else
        rp.ops.push_back(CommOp::compute());
    }
    out.push_back(std::move(rp));
  }
  return out;
}

} // namespace pipemesh::plan::detail
