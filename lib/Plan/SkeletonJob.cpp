//===- SkeletonJob.cpp - a simulator job straight from rank programs -------===//
#include "SkeletonJob.h"

#include "RankPrograms.h"

#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Plan/Sharding.h"

#include "llvm/ADT/DenseSet.h"

#include <map>

using namespace mlir;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan::detail {

namespace {

/// Time and memory of one phase of one chunk, per micro-batch.
struct PhaseCost {
  double seconds = 0;
  int64_t keeps = 0; // bytes a forward leaves for its backward
  std::vector<std::string> gathered; // zero 3 parameters it reads
};

} // namespace

sim::Job skeletonJob(ModuleOp module, const StagedStep &step, const ScheduleConfig &sched,
                     int64_t dp, const cost::Device &device, double tokensPerStep) {
  const bool split = splitsBackward(sched);
  // Per (chunk, phase 0 F / 1 B / 2 W): time, saved bytes, zero-3 params.
  std::map<std::pair<int64_t, int>, PhaseCost> phases;
  // Per (chunk, W part): time (a W of one gradient bucket, orderWeightParts).
  std::map<std::pair<int64_t, int64_t>, double> partSeconds;
  // Every parameter's bytes and ZeRO level, looked up once.
  llvm::StringMap<int64_t> bytesOf, levelOf = zeroLevels(module);
  for (auto param : module.getOps<pm::ParamOp>())
    bytesOf[param.getSymName()] = cost::typeBytes(param.getType());
  auto paramBytes = [&](llvm::StringRef name) { return bytesOf.lookup(name); };
  auto shardBytes = [&](int64_t bytes) { return shardLayout(bytes / 4, dp).shardNumel * 4; };
  // What a ZeRO gather moves: the parameters' compute copies (bf16 with
  // params=bf16).
  auto gatheredBytes = [&](int64_t bytes) { return step.bf16Params ? bytes / 2 : bytes; };
  // What a data-parallel gradient reduction moves (bf16 with grad-reduce=bf16).
  auto reducedBytes = [&](int64_t bytes) { return step.bf16GradReduce ? bytes / 2 : bytes; };
  auto listBytes = [&](ArrayAttr params) {
    int64_t b = 0;
    for (Attribute a : params)
      b += paramBytes(cast<FlatSymbolRefAttr>(a).getValue());
    return b;
  };
  for (int64_t c = 0; c < step.numChunks; ++c) {
    llvm::DenseSet<Operation *> fwd(step.fwdOps[c].begin(), step.fwdOps[c].end());
    for (int ph = 0; ph < 3; ++ph) {
      PhaseCost pc;
      std::set<std::string> zero3;
      for (Operation *op : step.phaseOps(c, ph, split)) {
        pc.seconds += cost::opTime(op, device);
        for (Value v : op->getOperands())
          if (llvm::StringRef n = step.paramRoot(v);
              !n.empty() && dp > 1 && levelOf.lookup(n) == 3)
            zero3.insert(n.str());
      }
      pc.gathered.assign(zero3.begin(), zero3.end());
      phases[{c, ph}] = std::move(pc);
    }
    for (auto [k, ops] : llvm::enumerate(step.bwdWeightParts[c]))
      for (Operation *op : ops)
        partSeconds[{c, (int64_t)k}] += cost::opTime(op, device);
    // What the backward reads of the forward: kept from F to B.
    llvm::DenseSet<Value> kept;
    for (Operation *op : step.bwdOps[c])
      for (Value v : op->getOperands())
        if (Operation *def = v.getDefiningOp(); def && fwd.count(def))
          kept.insert(v);
    int64_t bytes = 0;
    for (Value v : kept)
      bytes += step.storedBytes(v);
    phases[{c, 0}].keeps = bytes;
  }

  const int64_t pp = sched.pp;
  sim::Job job;
  job.tokensPerStep = tokensPerStep;
  job.ranks.resize(pp * dp);
  std::vector<int64_t> tied;
  for (auto &kv : step.holders)
    if (kv.second.size() > 1)
      tied.assign(kv.second.begin(), kv.second.end());
  // Replica 0 of each pipeline rank; buildReplicas derives the others.
  for (auto rp : module.getOps<pm::RankProgramOp>()) {
    const int64_t p = rp.getPpRank();
    sim::Program &prog = job.ranks[p * dp];
    prog.rank = (int32_t)(p * dp);
    std::vector<int64_t> dpMembers, tiedMembers;
    for (int64_t e = 0; e < dp; ++e)
      dpMembers.push_back(p * dp + e);
    for (int64_t q : tied)
      tiedMembers.push_back(q * dp);
    int32_t dpGroup = job.group("dp", dpMembers);
    // Persistent: every parameter the rank holds, its gradient and moments
    // as the ZeRO level stores them.
    for (auto param : module.getOps<pm::ParamOp>()) {
      auto h = step.holders.find(param.getSymName());
      if (h == step.holders.end() || !h->second.count(p))
        continue;
      int64_t numel = cost::typeBytes(param.getType()) / 4;
      ParamStorage st =
          paramStorage(levelOf.lookup(param.getSymName()), dp, true, step.bf16Params);
      prog.persistentBytes += st.persistentBytes(numel, shardLayout(numel, dp).shardNumel);
    }
    int64_t heldKey = -1;
    auto gatherBytes = [&](const std::vector<std::string> &names) {
      int64_t b = 0;
      for (const std::string &n : names)
        b += paramBytes(n);
      return gatheredBytes(b);
    };
    // ZeRO-3 gathers: the first action's before it, blocking; each next
    // action's (of another chunk or phase) issued async as the action
    // before it starts and waited for as it starts (the emitter prefetches
    // a layer ahead; a whole action ahead is the skeleton's estimate).
    std::vector<std::pair<int64_t, int>> computeKeys; // (chunk, phase)
    for (auto c : rp.getBody().front().getOps<pm::ComputeOp>()) {
      const Action a = actionOf(c);
      computeKeys.push_back({a.chunk, a.phase()});
    }
    size_t computeIndex = 0;
    int64_t asyncIssued = 0, prefetch = -1; // prefetch: its async issue number
    auto collective = [&](cost::Collective kind, int32_t group, double bytes, bool async) {
      prog.instrs.push_back(sim::Instr::collective(kind, group, bytes, async));
      if (async)
        ++asyncIssued;
    };
    for (Operation &op : rp.getBody().front()) {
      if (auto c = dyn_cast<pm::ComputeOp>(op)) {
        const Action a = actionOf(c);
        const int ph = a.phase();
        const PhaseCost &pc = phases[{a.chunk, ph}];
        int64_t key = a.chunk * 3 + ph;
        if (key != heldKey && !pc.gathered.empty()) {
          if (prefetch >= 0)
            prog.instrs.push_back(sim::Instr::wait(-1, (int32_t)(asyncIssued - 1 - prefetch)));
          else
            collective(cost::Collective::AllGather, dpGroup, (double)gatherBytes(pc.gathered),
                       false);
        }
        prefetch = -1;
        if (++computeIndex < computeKeys.size()) {
          auto [nc, nph] = computeKeys[computeIndex];
          const PhaseCost &npc = phases[{nc, nph}];
          if (nc * 3 + nph != key && !npc.gathered.empty()) {
            prefetch = asyncIssued;
            collective(cost::Collective::AllGather, dpGroup, (double)gatherBytes(npc.gathered),
                       true);
          }
        }
        heldKey = key;
        const std::string label = formatAction(a);
        sim::Work w = ph == 0 ? sim::Work::Forward
                      : ph == 1 ? sim::Work::Backward
                                : sim::Work::WeightGrad;
        // A W part frees the forward's share for W with the chunk's last part.
        const int64_t lastPart = (int64_t)step.bwdWeightParts[a.chunk].size() - 1;
        sim::Instr in = sim::Instr::compute(
            a.part >= 0 ? partSeconds[{a.chunk, a.part}] : pc.seconds, w, prog.label(label));
        int64_t keeps = phases[{a.chunk, 0}].keeps;
        if (ph == 0)
          in.mem(keeps, 0);
        else if (ph == 1)
          in.mem(0, split ? keeps / 2 : keeps);
        else if (a.part < 0 || a.part == lastPart)
          in.mem(0, keeps - keeps / 2);
        prog.instrs.push_back(in);
      } else if (auto s = dyn_cast<pm::SendOp>(op)) {
        Value v = step.channelValue[s.getChannel()];
        prog.instrs.push_back(sim::Instr::send((int32_t)(s.getPeer() * dp), s.getTag(),
                                               (double)step.storedBytes(v)));
      } else if (auto r = dyn_cast<pm::RecvOp>(op)) {
        Value v = step.channelValue[r.getChannel()];
        prog.instrs.push_back(sim::Instr::recv((int32_t)(r.getPeer() * dp), r.getTag(),
                                               (double)step.storedBytes(v)));
      } else if (auto w = dyn_cast<pm::WaitSendsOp>(op)) {
        prog.instrs.push_back(sim::Instr::waitSends((int32_t)w.getKeep()));
      } else if (auto ar = dyn_cast<pm::AllReduceGradsOp>(op)) {
        int64_t bytes = 0;
        // A tied sum after the dp reduce-scatter (sharded levels) adds shards.
        for (Attribute a : ar.getParams()) {
          llvm::StringRef n = cast<FlatSymbolRefAttr>(a).getValue();
          bool shards = ar.getGroup() == "tied" && dp > 1 && levelOf.lookup(n) >= 1;
          bytes += shards ? shardBytes(paramBytes(n)) : paramBytes(n);
        }
        bool tiedSum = ar.getGroup() == "tied";
        int32_t g = tiedSum ? job.group("tied", tiedMembers) : dpGroup;
        collective(cost::Collective::AllReduce, g, (double)(tiedSum ? bytes : reducedBytes(bytes)),
                   ar.getAsync());
      } else if (auto rs = dyn_cast<pm::ReduceScatterGradsOp>(op)) {
        collective(cost::Collective::ReduceScatter, dpGroup,
                   (double)reducedBytes(listBytes(rs.getParams())), rs.getAsync());
      } else if (auto wc = dyn_cast<pm::WaitCollectivesOp>(op)) {
        prog.instrs.push_back(sim::Instr::wait(-1, (int32_t)wc.getKeep()));
      } else if (isa<pm::OptimizerStepOp>(op)) {
        // AdamW streams parameters, gradients and both moments.
        prog.instrs.push_back(sim::Instr::kernel(0, 4.0 * (double)prog.persistentBytes / 3,
                                                 cost::KernelClass::Memory,
                                                 sim::Work::Optimizer));
      } else if (auto ag = dyn_cast<pm::AllGatherParamsOp>(op)) {
        collective(cost::Collective::AllGather, dpGroup,
                   (double)gatheredBytes(listBytes(ag.getParams())), ag.getAsync());
      }
    }
    sim::carryAsyncTailIntoStep(prog);
  }
  sim::buildReplicas(job, dp);
  return job;
}

} // namespace pipemesh::plan::detail
