//===- PlanEmitter.cpp - module -> per-rank programs -> plan artifact ------===//
//
// Lowers @train_step / @optimizer_step into one instruction stream per rank
// (docs/plan-format.md, docs/parallel-plan.md). For pipeline rank p the
// program is:
//
//   zero the persistent gradients
//   for each action of p's schedule (forward or backward of a chunk on a
//   micro-batch): the chunk's ops of that phase on that micro-batch's
//   buffers; `recv` before the first use of a value computed on another
//   rank, `send` right after computing a value another rank reads;
//   data-parallel reduction of the gradients whose last accumulation this
//   action was
//   tied-parameter all-reduce, then its data-parallel reduction
//   wait_sends, adamw, (zero 1/2) async all-gathers of the updated shards,
//   one per chunk, each completed by a wait_collectives "keep" before that
//   chunk's first forward in the next step
//
// Every (value, micro-batch) gets its own buffer; the memory planner over
// the whole unrolled program gives each its lifetime, so activations of
// micro-batches in flight never alias while those of finished ones share
// memory. Parameters, gradients, moments and constants persist. The dp
// replicas of a pipeline rank run the same program (their shards and peers
// differ). The plan passes the deadlock check before it is written.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/Plan.h"

#include "PlanInternal.h"
#include "RankPrograms.h"
#include "SkeletonJob.h"
#include "StagedStep.h"

#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Plan/DeadlockCheck.h"
#include "pipemesh/Plan/MemoryPlanner.h"
#include "pipemesh/Plan/Schedule.h"
#include "pipemesh/Plan/Sharding.h"
#include "pipemesh/Sim/PlanLoader.h"
#include "pipemesh/Sim/Simulator.h"
#include "llvm/ADT/StringSet.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/Format.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <chrono>
#include <deque>
#include <set>

using namespace mlir;
namespace json = llvm::json;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan {

namespace {

using detail::Buffer;
using detail::StagedStep;
using detail::ValueScope;

enum class InputRole { Tokens, Targets, Mask };

/// What a rank's backwards re-run: nothing; the attention cores
/// (selective); or, in every chunk, its first `layers` transformer layers
/// (the ops before the first layer count as one), all of them being full.
struct Recompute {
  enum Kind { None, Selective, Layers } kind = None;
  int64_t layers = 0;
  /// Layers only: when > 0, the `layers` apply to the micro-batches m with
  /// m % pp < positions (the same share of every window of pp consecutive
  /// micro-batches, so of those in flight at any peak), one layer fewer to
  /// the others.
  int64_t positions = 0;
  static constexpr int64_t kAll = INT64_MAX;
  static Recompute none() { return {}; }
  static Recompute selective() { return {Selective, 0}; }
  static Recompute full() { return {Layers, kAll}; }
  static Recompute firstLayers(int64_t n) { return {Layers, n}; }
  static Recompute firstLayersOn(int64_t n, int64_t positions) { return {Layers, n, positions}; }
  /// The layers recomputed for micro-batch `mb` of a plan with `pp` ranks.
  int64_t layersFor(int64_t mb, int64_t pp) const {
    return positions > 0 && mb % pp >= positions ? layers - 1 : layers;
  }
  bool operator==(const Recompute &o) const {
    return kind == o.kind && layers == o.layers && positions == o.positions;
  }
};
std::string recomputeName(Recompute r, int64_t pp) {
  if (r.kind == Recompute::None)
    return "none";
  if (r.kind == Recompute::Selective)
    return "selective";
  std::string all = r.layers == Recompute::kAll ? "full" : std::to_string(r.layers) + " layers";
  if (r.positions == 0)
    return all;
  return all + " on micro-batches m % " + std::to_string(pp) + " < " +
         std::to_string(r.positions) + ", " + std::to_string(r.layers - 1) + " on the others";
}

struct ParamInfo {
  std::string name;
  llvm::SmallVector<int64_t> shape;
  std::string source;
  bool trained = false;
  bool decay = false;
};

/// What every rank's emission shares.
struct Shared {
  Shared(ModuleOp module, const CompileOptions &opts) : module(module), opts(opts) {}

  ModuleOp module;
  const CompileOptions &opts;
  StagedStep step;
  ScheduleConfig sched;
  int64_t zero = 0; // effective: 0 when dp = 1
  /// Effective ZeRO level of every chunk (all 0 when dp = 1).
  std::vector<int64_t> zeroChunks;
  double invM = 1;
  std::vector<ParamInfo> params;
  llvm::StringMap<size_t> paramIndex;
  llvm::DenseMap<unsigned, InputRole> argRole;
  RankedTensorType tokensType, targetsType, maskType;
  std::string tokensName, targetsName;
  DenseElementsAttr maskValue;
  std::string lossMode = "appended";
  /// Pipeline ranks of the tied group (empty: no parameter has copies).
  std::vector<int64_t> tiedRanks;
  int64_t vocab = 0;
  double flopsPerMicrobatch = 0;
  /// Each action starts by completing the sends of the actions `waitLag`
  /// and more before it (0: only at the end of the step, the last resort
  /// when every lag fails the deadlock check).
  int64_t waitLag = 1;
  /// groups=auto: candidates simulated and the search's wall time (seconds).
  int64_t searchCandidates = 0;
  double searchSeconds = 0;
  /// What zero=auto's search looked at.
  int64_t zeroSearchCandidates = 0;
  double zeroSearchSeconds = 0;
};

/// One pipeline rank's program, the template of its dp replicas: `peer`
/// fields hold pipeline ranks, shards hold their size but not their offset.
struct RankPlan {
  int64_t pp = 0;
  std::vector<Buffer> buffers;
  std::vector<json::Object> program;
  std::vector<std::string> row;
  std::vector<int64_t> chunks;
  bool tied = false, firstStage = false, lastStage = false;
  int64_t arenaBytes = 0, persistentBytes = 0, activationPeak = 0;
  std::set<std::string> constantsUsed;
  Recompute recompute;
};

/// Builds one pipeline rank's buffers and program.
class RankEmitter {
public:
  RankEmitter(Shared &sh, int64_t p, Recompute recompute)
      : sh(sh), step(sh.step), p(p), recompute(recompute) {}
  LogicalResult run(RankPlan &out);

private:
  struct ParamBufs {
    ParamStorage st;
    ShardLayout layout;
    int full = -1, shard = -1, grad = -1, gradShard = -1, m = -1, v = -1;
    int transientGrad = -1;
  };
  struct ActionCtx {
    Action a;
    llvm::DenseMap<Value, int> views;
    /// Re-running forward ops before their backward: their results replace
    /// the forward's for this micro-batch, nothing is sent or counted again.
    bool recompute = false;
  };

  int add(Buffer b) {
    buffers.push_back(std::move(b));
    return buffers.size() - 1;
  }
  int root(int id) const {
    while (buffers[id].aliasOf >= 0)
      id = buffers[id].aliasOf;
    return id;
  }
  Buffer valueBuffer(Value v, StringRef kind, std::string name) {
    auto t = cast<RankedTensorType>(v.getType());
    Buffer b;
    b.name = std::move(name);
    b.shape.assign(t.getShape().begin(), t.getShape().end());
    b.dtype = detail::dtypeOf(t.getElementType());
    b.kind = kind.str();
    return b;
  }
  std::string tmpName() { return "v" + std::to_string(buffers.size()); }
  void emit(json::Object inst) { program.push_back(std::move(inst)); }

  void createParamBuffers();
  /// The ZeRO level of a parameter (`pmesh.zero`, set by --pmesh-shard).
  int64_t zeroOf(StringRef name) const;
  FailureOr<int> operand(Value v, ActionCtx &ctx);
  int view(Value v, int of, StringRef name);
  int paramBuffer(StringRef name, ActionCtx &ctx);
  void ensureLoaded(int64_t mb);
  LogicalResult emitOp(Operation *op, ActionCtx &ctx);
  int gradTarget(StringRef name);
  void layout(RankPlan &out);
  std::vector<Operation *> recomputedOps(int64_t chunk, int64_t layers) const;
  std::string direction(Value v) const {
    Operation *def = v.getDefiningOp();
    return def && step.forward.count(def) ? "F" : "B";
  }

  Shared &sh;
  const StagedStep &step;
  int64_t p;
  Recompute recompute;
  std::vector<Buffer> buffers;
  std::vector<json::Object> program;
  std::vector<std::string> row;
  llvm::StringMap<ParamBufs> pbufs;
  std::vector<std::string> heldParams; // declaration order
  llvm::DenseMap<std::pair<Value, int64_t>, int> inst;
  llvm::DenseMap<Operation *, int> constBufs;
  llvm::DenseMap<Value, int> globalViews;
  int maskBuf = -1;
  std::map<int64_t, std::pair<int, int>> loaded; // micro-batch -> (tokens, targets)
  bool needTokens = false, needTargets = false;
  /// Every send instruction's buffer (root), in program order, and the
  /// program index of the wait_sends that completes it.
  std::vector<int> sentRoots;
  std::vector<int64_t> sendCompletedAt;
  size_t sendsCompleted = 0;
  void waitSends(size_t keep);
  /// zero 3: whole parameters gathered for the current run of actions of one
  /// chunk and phase (kept across consecutive actions of the same chunk and
  /// phase, so a breadth-first run of micro-batches gathers them once).
  llvm::StringMap<int> gathered;
  void freeGathered() {
    json::Array bufs;
    for (auto &kv : gathered)
      bufs.push_back(kv.second);
    gathered.clear();
    if (!bufs.empty())
      emit(json::Object{{"op", "free"}, {"bufs", std::move(bufs)}});
  }
  /// Async collectives issued and not yet waited for, in issue order (the
  /// previous step's parameter gathers first), each with the instructions
  /// its completion allows: a ZeRO-2/3 reduce-scatter's accumulation into
  /// the persistent shard, the frees of its transient gradients.
  struct InFlight {
    std::vector<json::Object> then;
    json::Array freed;
    int64_t seq = -1; // issue number (issueAsync's return)
  };
  std::deque<InFlight> inFlight;
  int64_t asyncIssued = 0;
  /// zero 3: whole parameters gathered ahead, a layer at a time (async,
  /// issued when the layer before it starts; FSDP's prefetch): each
  /// parameter's buffer and its gather's issue number. The first read waits.
  llvm::StringMap<std::pair<int, int64_t>> prefetched;
  void prefetchGathers(llvm::ArrayRef<std::string> names);
  /// A temporary (activation-kind) buffer of a parameter's whole shape.
  int addWholeTemporary(StringRef param, StringRef suffix);
  /// The whole buffer of a prefetched parameter, after waiting for its
  /// gather (and with it every earlier prefetch).
  int takePrefetched(StringRef name);
  bool asyncCollectives = false; // issued any this step since the last wait
  /// Gradients reduce-scattered so far this step (a later tied sum adds the
  /// shards).
  llvm::StringSet<> scattered;
  /// Emits an async collective and queues what its completion allows;
  /// returns its issue number.
  int64_t issueAsync(json::Object collective, InFlight after);
  /// A wait_collectives completing all but the `keep` most recent async
  /// collectives, then what their completion allows. `always`: even when
  /// this step issued nothing since the last one (the program's own waits,
  /// which may complete the previous step's parameter gathers); otherwise
  /// only if it did.
  void waitCollectives(bool always = false, int64_t keep = 0);
  std::set<std::string> constantsUsed;
};

int64_t RankEmitter::zeroOf(StringRef name) const {
  return sh.opts.dp > 1 ? detail::zeroLevelOf(sh.module, name) : 0;
}

void RankEmitter::createParamBuffers() {
  for (const ParamInfo &pi : sh.params) {
    auto it = step.holders.find(pi.name);
    bool held = it != step.holders.end() ? it->second.count(p) > 0 : p == 0;
    if (!held)
      continue;
    heldParams.push_back(pi.name);
    ParamBufs pb;
    pb.st = paramStorage(zeroOf(pi.name), sh.opts.dp, pi.trained);
    pb.layout = shardLayout(shapes::numElements(pi.shape), sh.opts.dp);
    auto make = [&](StringRef kind, std::string name, bool sharded) {
      Buffer b;
      b.name = std::move(name);
      b.dtype = "f32";
      b.kind = kind.str();
      b.param = pi.name;
      if (sharded) {
        b.shape = {pb.layout.shardNumel};
        b.sharded = true;
        b.shardNumel = pb.layout.shardNumel;
        b.paddedNumel = pb.layout.paddedNumel;
      } else {
        b.shape = pi.shape;
      }
      return add(std::move(b));
    };
    if (pb.st.fullParam)
      pb.full = make("param", pi.name, false);
    if (pb.st.paramShard)
      pb.shard = make("param", pi.name + ".shard", true);
    if (pi.trained) {
      if (pb.st.fullGrad)
        pb.grad = make("grad", pi.name + ".grad", false);
      if (pb.st.gradShard)
        pb.gradShard = make("grad", pi.name + ".grad.shard", true);
      pb.m = make("adam_m", pi.name + ".adam_m", pb.st.momentShards);
      pb.v = make("adam_v", pi.name + ".adam_v", pb.st.momentShards);
    }
    pbufs[pi.name] = pb;
  }
}

int RankEmitter::view(Value v, int of, StringRef name) {
  Buffer b = valueBuffer(v, "activation", name.empty() ? tmpName() : name.str());
  b.aliasOf = of;
  return add(std::move(b));
}

void RankEmitter::ensureLoaded(int64_t mb) {
  if (loaded.count(mb))
    return;
  json::Array outs;
  int tok = -1, tgt = -1;
  auto input = [&](RankedTensorType t, const std::string &name) {
    Buffer b;
    b.name = name;
    b.shape.assign(t.getShape().begin(), t.getShape().end());
    b.dtype = detail::dtypeOf(t.getElementType());
    b.kind = "input";
    return add(std::move(b));
  };
  if (needTokens)
    outs.push_back(tok = input(sh.tokensType, sh.tokensName));
  if (needTargets)
    outs.push_back(tgt = input(sh.targetsType, sh.targetsName));
  StringRef what = needTokens && needTargets ? "both" : needTokens ? "tokens" : "targets";
  emit(json::Object{{"op", "load_microbatch"},
                    {"index", mb},
                    {"what", what},
                    {"out", std::move(outs)}});
  loaded[mb] = {tok, tgt};
}

int RankEmitter::addWholeTemporary(StringRef param, StringRef suffix) {
  const ParamInfo &pi = sh.params[sh.paramIndex.lookup(param)];
  Buffer b;
  b.name = pi.name + suffix.str();
  b.shape = pi.shape;
  b.dtype = "f32";
  b.kind = "activation";
  return add(std::move(b));
}

int RankEmitter::paramBuffer(StringRef name, ActionCtx &ctx) {
  ParamBufs &pb = pbufs[name];
  if (!pb.st.gatherBeforeUse)
    return pb.full;
  if (auto it = gathered.find(name); it != gathered.end())
    return it->second;
  if (prefetched.count(name))
    return takePrefetched(name);
  int id = addWholeTemporary(name, ".full");
  emit(json::Object{{"op", "allgather"},
                    {"group", "dp"},
                    {"in", json::Array{pb.shard}},
                    {"out", json::Array{id}}});
  gathered[name] = id;
  return id;
}

FailureOr<int> RankEmitter::operand(Value v, ActionCtx &ctx) {
  int64_t mb = ctx.a.microbatch;
  Operation *def = v.getDefiningOp();
  switch (step.scope(v)) {
  case ValueScope::Input: {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      InputRole role = sh.argRole.lookup(arg.getArgNumber());
      if (role == InputRole::Mask) {
        if (maskBuf < 0) {
          Buffer b = valueBuffer(v, "constant", "attention_mask");
          b.data = "const.attention_mask";
          maskBuf = add(std::move(b));
          constantsUsed.insert("const.attention_mask");
        }
        return maskBuf;
      }
      ensureLoaded(mb);
      return role == InputRole::Targets ? loaded[mb].second : loaded[mb].first;
    }
    if (auto it = inst.find({v, mb}); it != inst.end())
      return it->second;
    auto in = operand(cast<pm::ReshapeOp>(def).getInput(), ctx);
    if (failed(in))
      return failure();
    // A view of a micro-batch input: per micro-batch, or global for the mask.
    int id = view(v, *in, "");
    inst[{v, mb}] = id;
    return id;
  }
  case ValueScope::Constant: {
    if (auto c = dyn_cast<pm::ConstantOp>(def)) {
      if (auto it = constBufs.find(def); it != constBufs.end())
        return it->second;
      std::string data = step.constantName.lookup(def);
      Buffer b = valueBuffer(v, "constant", "const" + data.substr(6));
      b.data = data;
      int id = add(std::move(b));
      constBufs[def] = id;
      constantsUsed.insert(data);
      return id;
    }
    if (auto it = globalViews.find(v); it != globalViews.end())
      return it->second;
    auto in = operand(cast<pm::ReshapeOp>(def).getInput(), ctx);
    if (failed(in))
      return failure();
    return globalViews[v] = view(v, *in, "");
  }
  case ValueScope::Param: {
    StringRef name = step.paramRoot(v);
    if (!pbufs.count(name))
      return def->emitOpError() << "reads parameter '" << name << "' on pipeline rank " << p
                                << ", which holds no copy of it (internal error)";
    if (auto g = dyn_cast<pm::GetParamOp>(def))
      return paramBuffer(g.getName(), ctx);
    bool local = pbufs[name].st.gatherBeforeUse;
    llvm::DenseMap<Value, int> &views = local ? ctx.views : globalViews;
    if (auto it = views.find(v); it != views.end())
      return it->second;
    auto in = operand(cast<pm::ReshapeOp>(def).getInput(), ctx);
    if (failed(in))
      return failure();
    int id = view(v, *in, "");
    views[v] = id;
    return id;
  }
  case ValueScope::Activation: {
    if (auto it = inst.find({v, mb}); it != inst.end())
      return it->second;
    int64_t src = step.producerRank(v);
    if (src == p)
      return def->emitOpError() << "result is read by chunk " << ctx.a.chunk << " on micro-batch "
                                << mb << " before pipeline rank " << p
                                << " computes it: the schedule runs a consumer before its "
                                   "producer (internal error)";
    return def->emitOpError() << "result is read on pipeline rank " << p << " (chunk "
                              << ctx.a.chunk << ", micro-batch " << mb
                              << ") before the rank program receives it (internal error)";
  }
  }
  return failure();
}

int RankEmitter::gradTarget(StringRef name) {
  ParamBufs &pb = pbufs[name];
  if (pb.grad >= 0)
    return pb.grad;
  if (pb.transientGrad < 0) {
    // zero 2/3: the whole gradient lives from here to its reduce-scatter.
    pb.transientGrad = addWholeTemporary(name, ".grad.full");
    emit(json::Object{{"op", "zero"}, {"out", json::Array{pb.transientGrad}}});
  }
  return pb.transientGrad;
}

int64_t RankEmitter::issueAsync(json::Object collective, InFlight after) {
  collective["async"] = true;
  emit(std::move(collective));
  after.seq = asyncIssued++;
  inFlight.push_back(std::move(after));
  asyncCollectives = true;
  return inFlight.back().seq;
}

void RankEmitter::prefetchGathers(llvm::ArrayRef<std::string> names) {
  json::Array in, out;
  std::vector<std::pair<std::string, int>> issued;
  for (const std::string &n : names) {
    if (gathered.count(n) || prefetched.count(n))
      continue;
    int id = addWholeTemporary(n, ".full");
    in.push_back(pbufs[n].shard);
    out.push_back(id);
    issued.push_back({n, id});
  }
  if (issued.empty())
    return;
  int64_t seq = issueAsync(json::Object{{"op", "allgather"},
                                        {"group", "dp"},
                                        {"in", std::move(in)},
                                        {"out", std::move(out)}},
                           {});
  for (auto &[n, id] : issued)
    prefetched[n] = {id, seq};
}

int RankEmitter::takePrefetched(StringRef name) {
  int64_t seq = prefetched.lookup(name).second;
  // Still in flight: complete it (and everything issued before it).
  if (!inFlight.empty() && inFlight.front().seq <= seq) {
    int64_t keep = 0;
    for (const InFlight &f : inFlight)
      keep += f.seq > seq;
    waitCollectives(/*always=*/true, keep);
  }
  for (auto it = prefetched.begin(); it != prefetched.end();)
    if (it->second.second <= seq) {
      gathered[it->getKey()] = it->second.first;
      prefetched.erase(it++);
    } else {
      ++it;
    }
  return gathered.lookup(name);
}

void RankEmitter::waitCollectives(bool always, int64_t keep) {
  if (!always && !asyncCollectives)
    return;
  if (keep > 0)
    emit(json::Object{{"op", "wait_collectives"}, {"keep", keep}});
  else
    emit(json::Object{{"op", "wait_collectives"}});
  if (keep == 0)
    asyncCollectives = false;
  json::Array freed;
  while ((int64_t)inFlight.size() > keep) {
    InFlight done = std::move(inFlight.front());
    inFlight.pop_front();
    for (json::Object &i : done.then)
      emit(std::move(i));
    for (json::Value &b : done.freed)
      freed.push_back(std::move(b));
  }
  if (!freed.empty())
    emit(json::Object{{"op", "free"}, {"bufs", std::move(freed)}});
}

LogicalResult RankEmitter::emitOp(Operation *op, ActionCtx &ctx) {
  int64_t mb = ctx.a.microbatch;
  if (auto r = dyn_cast<pm::ReshapeOp>(op)) {
    auto in = operand(r.getInput(), ctx);
    if (failed(in))
      return failure();
    inst[{r.getResult(), mb}] = view(r.getResult(), *in, "");
  } else if (auto acc = dyn_cast<pm::AccumulateGradOp>(op)) {
    auto src = operand(acc.getGrad(), ctx);
    if (failed(src))
      return failure();
    if (!pbufs.count(acc.getParam()) || pbufs[acc.getParam()].m < 0)
      return acc.emitOpError() << "accumulates the gradient of '" << acc.getParam()
                               << "', which @optimizer_step does not update";
    int dst = gradTarget(acc.getParam());
    emit(json::Object{{"op", "accumulate"},
                      {"in", json::Array{*src}},
                      {"out", json::Array{dst}},
                      {"scale", sh.invM}});
  } else {
    if (op->getDialect()->getNamespace() != "pmesh")
      return op->emitOpError("cannot be emitted into a plan");
    json::Array ins, outs;
    for (Value v : op->getOperands()) {
      auto id = operand(v, ctx);
      if (failed(id))
        return failure();
      ins.push_back(*id);
    }
    for (Value r : op->getResults()) {
      int id = add(valueBuffer(r, "activation", tmpName()));
      inst[{r, mb}] = id;
      outs.push_back(id);
    }
    json::Object attrs;
    for (NamedAttribute a : op->getAttrs())
      if (a.getName().getValue() != "pmesh.stage")
        attrs[a.getName().getValue()] = detail::attrToJson(a.getValue());
    // Defaults are not stored on the op but the runtime needs them spelled out.
    if (auto mm = dyn_cast<pm::MatMulOp>(op)) {
      attrs["transpose_a"] = mm.getTransposeA();
      attrs["transpose_b"] = mm.getTransposeB();
    }
    json::Object i{{"op", op->getName().getStringRef().drop_front(6)},
                   {"in", std::move(ins)},
                   {"out", std::move(outs)}};
    if (!attrs.empty())
      i["attrs"] = std::move(attrs);
    // The cost model's work estimate, which pipemesh-sim turns into time.
    cost::OpCost c = cost::opCost(op);
    i["flops"] = c.flops;
    i["bytes"] = c.bytes;
    emit(std::move(i));
  }
  if (ctx.recompute)
    return success();
  if (op == step.lossOp)
    emit(json::Object{{"op", "loss"},
                      {"in", json::Array{inst.lookup({step.loss, mb})}},
                      {"scale", sh.invM}});
  return success();
}

/// The forward ops of `chunk` that its backward re-runs: selective, the
/// attention cores whose results the backward reads (their inputs stay
/// stored); layers, everything the backward reads back to the chunk's inputs
/// within the chunk's first `layers` (all: only the chunk's inputs are kept).
std::vector<Operation *> RankEmitter::recomputedOps(int64_t chunk, int64_t layers) const {
  if (recompute.kind == Recompute::None || (recompute.kind == Recompute::Layers && layers <= 0))
    return {};
  const std::vector<Operation *> &fwd = step.fwdOps[chunk];
  llvm::DenseSet<Operation *> inForward(fwd.begin(), fwd.end()), chosen;
  // Layers: the chunk's first n (in forward order).
  std::set<int64_t> recomputedLayers;
  for (int64_t l : step.layersIn(chunk))
    if ((int64_t)recomputedLayers.size() < layers)
      recomputedLayers.insert(l);
  llvm::SmallVector<Operation *> work;
  auto reach = [&](Operation *user) {
    for (Value v : user->getOperands())
      if (Operation *def = v.getDefiningOp(); def && inForward.count(def))
        work.push_back(def);
  };
  for (Operation *op : step.bwdOps[chunk])
    reach(op);
  // Selective: the attention core and the layout ops between it and its
  // readers (the head merge the output projection reads).
  std::function<bool(Operation *)> fromAttention = [&](Operation *op) {
    if (isa<pm::AttentionOp>(op))
      return true;
    if (!isa<pm::TransposeOp, pm::ReshapeOp>(op))
      return false;
    Operation *def = op->getOperand(0).getDefiningOp();
    return def && inForward.count(def) && fromAttention(def);
  };
  const bool byLayer = recompute.kind == Recompute::Layers;
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    bool candidate =
        byLayer ? recomputedLayers.count(step.layerOf.lookup(op)) > 0 : fromAttention(op);
    if (!candidate || !chosen.insert(op).second)
      continue;
    if (byLayer || !isa<pm::AttentionOp>(op))
      reach(op);
  }
  std::vector<Operation *> out;
  for (Operation *op : fwd)
    if (chosen.count(op))
      out.push_back(op);
  return out;
}

/// Completes every outstanding send but the `keep` most recent: their
/// buffers may be reused after this point.
void RankEmitter::waitSends(size_t keep) {
  size_t upto = sentRoots.size() > keep ? sentRoots.size() - keep : 0;
  if (upto <= sendsCompleted)
    return;
  json::Object w{{"op", "wait_sends"}};
  if (keep)
    w["keep"] = (int64_t)keep;
  for (size_t i = sendsCompleted; i < upto; ++i)
    sendCompletedAt[i] = program.size();
  sendsCompleted = upto;
  emit(std::move(w));
}

void RankEmitter::layout(RankPlan &out) {
  size_t n = buffers.size();
  std::vector<int64_t> first(n, INT64_MAX), last(n, -1);
  auto use = [&](const json::Value &idv, int64_t at) {
    auto id = idv.getAsInteger();
    if (!id)
      return;
    int r = root(*id);
    first[r] = std::min(first[r], at);
    last[r] = std::max(last[r], at);
  };
  for (auto [k, instr] : llvm::enumerate(program))
    for (StringRef field : {"in", "out", "bufs"})
      if (const json::Array *a = instr.getArray(field))
        for (const json::Value &idv : *a)
          use(idv, k);
  // A sent buffer stays untouched until a wait_sends completes the send.
  for (auto [r, at] : llvm::zip(sentRoots, sendCompletedAt))
    last[r] = std::max(last[r], at);
  auto align = [](int64_t v) { return (v + 63) / 64 * 64; };
  int64_t offset = 0;
  std::vector<int> transient;
  for (size_t i = 0; i < n; ++i) {
    Buffer &b = buffers[i];
    if (b.aliasOf >= 0)
      continue;
    if (!b.persistent()) {
      transient.push_back(i);
      continue;
    }
    b.offset = offset;
    offset += align(b.bytes());
  }
  out.persistentBytes = offset;
  llvm::SmallVector<LiveRange> ranges;
  for (int i : transient) {
    int64_t f = first[i] == INT64_MAX ? 0 : first[i];
    ranges.push_back({buffers[i].bytes(), f, std::max(last[i], f)});
  }
  llvm::SmallVector<int64_t> offsets;
  out.activationPeak = assignOffsets(ranges, offsets);
  for (auto [i, off] : llvm::zip(transient, offsets))
    buffers[i].offset = out.persistentBytes + off;
  for (Buffer &b : buffers)
    if (b.aliasOf >= 0)
      b.offset = buffers[root(b.aliasOf)].offset;
  out.arenaBytes = out.persistentBytes + out.activationPeak;
}

LogicalResult RankEmitter::run(RankPlan &out) {
  out.pp = p;
  for (int64_t c = p; c < step.numChunks; c += step.pp)
    out.chunks.push_back(c);
  out.firstStage = p == step.rankOf(0);
  out.lastStage = p == step.rankOf(step.numChunks - 1);
  out.tied = llvm::is_contained(sh.tiedRanks, p);

  // Which data inputs this rank reads.
  for (auto &[op, chunk] : step.chunkOf) {
    if (step.rankOf(chunk) != p)
      continue;
    for (Value v : op->getOperands()) {
      if (step.scope(v) != ValueScope::Input)
        continue;
      while (auto r = v.getDefiningOp<pm::ReshapeOp>())
        v = r.getInput();
      InputRole role = sh.argRole.lookup(cast<BlockArgument>(v).getArgNumber());
      needTokens |= role == InputRole::Tokens;
      needTargets |= role == InputRole::Targets;
    }
  }

  createParamBuffers();

  // The rank's program (--pmesh-schedule), lowered op by op.
  pm::RankProgramOp rankProgram;
  for (auto rp : sh.module.getOps<pm::RankProgramOp>())
    if ((int64_t)rp.getPpRank() == p)
      rankProgram = rp;
  if (!rankProgram)
    return sh.module.emitError() << "no pmesh.rank_program for pipeline rank " << p
                                 << " (internal error)";
  const bool split = splitsBackward(sh.sched);
  auto phaseKey = [](const Action &a) { return a.weight ? 2 : a.backward ? 1 : 0; };
  auto actionOps = [&](const Action &a) -> const std::vector<Operation *> & {
    return step.phaseOps(a.chunk, phaseKey(a), split);
  };
  // (zero 3) After which op of a phase a gathered parameter is no longer read.
  auto freeAfter = [&](llvm::ArrayRef<Operation *> ops) {
    llvm::StringMap<size_t> lastUse;
    for (auto [k, op] : llvm::enumerate(ops))
      for (Value v : op->getOperands())
        if (StringRef n = step.paramRoot(v); !n.empty())
          lastUse[n] = k;
    std::vector<std::vector<std::string>> after(ops.size());
    for (auto &kv : lastUse)
      after[kv.second].push_back(kv.getKey().str());
    for (auto &names : after)
      llvm::sort(names);
    return after;
  };
  // What a backward action recomputes (B, or W for what its B did not need).
  std::map<std::pair<int64_t, int64_t>, std::vector<Operation *>> recomputed; // (chunk, layers)
  auto recomputedBefore = [&](const Action &a) -> const std::vector<Operation *> & {
    static const std::vector<Operation *> none;
    if (!a.backward)
      return none;
    std::pair<int64_t, int64_t> key{a.chunk, recompute.layersFor(a.microbatch, step.pp)};
    auto it = recomputed.find(key);
    if (it == recomputed.end())
      it = recomputed.emplace(key, recomputedOps(key.first, key.second)).first;
    return it->second;
  };
  std::map<std::pair<int64_t, int64_t>, llvm::DenseSet<Operation *>> recomputedDone;
  // The ops of an action in emission order, and which are re-runs: each
  // recomputed op right before the first op of the action that needs it (its
  // own recomputed inputs first), so a recomputed activation lives from just
  // before its first backward use (a layer at a time, not a chunk).
  auto sequence = [&](const Action &a, std::vector<bool> &isRecompute) {
    const std::vector<Operation *> &redo = recomputedBefore(a);
    std::vector<Operation *> seq;
    isRecompute.clear();
    if (redo.empty()) {
      seq = actionOps(a);
      isRecompute.assign(seq.size(), false);
      return seq;
    }
    // A W re-runs only what its B did not (for the same micro-batch).
    llvm::DenseSet<Operation *> &done = recomputedDone[{a.chunk, a.microbatch}];
    llvm::DenseSet<Operation *> pending;
    for (Operation *op : redo)
      if (!done.count(op))
        pending.insert(op);
    std::function<void(Operation *)> ensure = [&](Operation *op) {
      if (!op || !pending.erase(op))
        return;
      done.insert(op);
      for (Value v : op->getOperands())
        ensure(v.getDefiningOp());
      seq.push_back(op);
      isRecompute.push_back(true);
    };
    for (Operation *op : actionOps(a)) {
      for (Value v : op->getOperands())
        ensure(v.getDefiningOp());
      seq.push_back(op);
      isRecompute.push_back(false);
    }
    return seq;
  };
  auto names = [](ArrayAttr syms) {
    std::vector<std::string> out;
    for (Attribute a : syms)
      out.push_back(cast<FlatSymbolRefAttr>(a).getValue().str());
    return out;
  };
  auto tokenOf = [&](int64_t chunk, StringRef what, Value v, int64_t mb) {
    return std::to_string(chunk) + what.str() + direction(v) + std::to_string(mb);
  };
  std::vector<std::string> pendingRecvTokens;

  std::string lastActionName;
  // A send lowers right after the op that computes its value, inside the
  // action that precedes it in the program (the earliest its data allows:
  // the previous stage waits for the input gradient, not for this stage's
  // weight gradients), or where it stands.
  llvm::DenseSet<Operation *> loweredEarly; // sends and reductions
  int64_t lastChunk = 0;
  bool inAction = false;                    // lowering a compute action
  std::vector<std::string> earlySendTokens; // its sends, for the row after it
  auto lowerSend = [&](pm::SendOp sd) -> LogicalResult {
    Value v = step.channelValue[sd.getChannel()];
    int64_t mb = sd.getMicrobatch();
    auto it = inst.find({v, mb});
    if (it == inst.end())
      return sh.module.emitError() << "pipeline rank " << p << " sends channel "
                                   << sd.getChannel() << " of micro-batch " << mb
                                   << " before computing it (internal error)";
    emit(json::Object{{"op", "send"},
                      {"in", json::Array{it->second}},
                      {"peer", (int64_t)sd.getPeer()},
                      {"tag", (int64_t)sd.getTag()}});
    sentRoots.push_back(root(it->second));
    sendCompletedAt.push_back(-1);
    std::string token = tokenOf(lastChunk, "SEND_", v, mb);
    if (!llvm::is_contained(row, token) && !llvm::is_contained(earlySendTokens, token))
      (inAction ? earlySendTokens : row).push_back(token);
    return success();
  };
  auto lowerAllReduce = [&](pm::AllReduceGradsOp ar) {
    json::Array bufs;
    // A tied sum after the dp reduce-scatter adds the shards.
    for (const std::string &n : names(ar.getParams()))
      bufs.push_back(ar.getGroup() != "tied" ? pbufs[n].grad
                     : scattered.contains(n) ? pbufs[n].gradShard
                                             : gradTarget(n));
    json::Object o{{"op", "allreduce"}, {"group", ar.getGroup()}, {"bufs", std::move(bufs)}};
    if (ar.getAsync())
      issueAsync(std::move(o), {});
    else
      emit(std::move(o));
  };
  auto lowerReduceScatter = [&](pm::ReduceScatterGradsOp rs) {
    json::Array in, out;
    InFlight after;
    for (const std::string &n : names(rs.getParams())) {
      scattered.insert(n);
      ParamBufs &pb = pbufs[n];
      int full = gradTarget(n);
      in.push_back(full);
      out.push_back(pb.gradShard);
      if (pb.transientGrad >= 0)
        after.freed.push_back(full);
    }
    json::Object o{
        {"op", "reduce_scatter"}, {"group", "dp"}, {"in", std::move(in)}, {"out", std::move(out)}};
    if (rs.getAsync()) {
      issueAsync(std::move(o), std::move(after));
    } else {
      emit(std::move(o));
      if (!after.freed.empty())
        emit(json::Object{{"op", "free"}, {"bufs", std::move(after.freed)}});
    }
  };
  // An async data-parallel reduction of gradients (not a tied sum, not a
  // ZeRO-2/3 accumulating one): what may be issued inside the action before it.
  auto earlyReduction = [](Operation *op) -> ArrayAttr {
    if (auto ar = dyn_cast<pm::AllReduceGradsOp>(op); ar && ar.getAsync() && ar.getGroup() == "dp")
      return ar.getParams();
    if (auto rs = dyn_cast<pm::ReduceScatterGradsOp>(op);
        rs && rs.getAsync() && !rs.getAccumulate())
      return rs.getParams();
    return {};
  };
  auto lowerReduction = [&](Operation *op) {
    if (auto ar = dyn_cast<pm::AllReduceGradsOp>(op))
      lowerAllReduce(ar);
    else
      lowerReduceScatter(cast<pm::ReduceScatterGradsOp>(op));
  };
  auto lowerWait = [&](pm::WaitCollectivesOp wc) {
    waitCollectives(/*always=*/true, (int64_t)wc.getKeep());
  };
  // Waits that name the parameters they make readable, held for the next
  // action and lowered right before its first op that reads one of them
  // (with every wait before it: they complete in order).
  std::vector<std::pair<pm::WaitCollectivesOp, llvm::StringSet<>>> pendingWaits;
  auto flushWaits = [&](size_t count) {
    for (size_t i = 0; i < count; ++i)
      lowerWait(pendingWaits[i].first);
    pendingWaits.erase(pendingWaits.begin(), pendingWaits.begin() + count);
  };
  auto flushWaitsReadBy = [&](Operation *o) {
    size_t upTo = 0;
    for (Value v : o->getOperands())
      if (StringRef n = step.paramRoot(v); !n.empty())
        for (size_t j = upTo; j < pendingWaits.size(); ++j)
          if (pendingWaits[j].second.contains(n))
            upTo = j + 1;
    flushWaits(upTo);
  };
  std::vector<Action> computeActions; // every compute action, in order
  for (auto c : rankProgram.getBody().front().getOps<pm::ComputeOp>())
    computeActions.push_back(Action{(int64_t)c.getChunk(), (int64_t)c.getMicrobatch(),
                                    c.getPhase() != "F", c.getPhase() == "W"});
  // zero 3: the parameters an action's ops (and what it recomputes) read
  // whole, one list per layer (StagedStep::layerOf of the first reader), in
  // first-read order.
  auto gatheredLayers = [&](llvm::ArrayRef<Operation *> ops,
                            llvm::ArrayRef<Operation *> more = {}) {
    std::vector<std::vector<std::string>> layers;
    std::map<int64_t, size_t> indexOfLayer;
    llvm::StringSet<> seen;
    for (llvm::ArrayRef<Operation *> list : {more, ops})
      for (Operation *o : list)
        for (Value v : o->getOperands())
          if (StringRef n = step.paramRoot(v); !n.empty() && pbufs.count(n) &&
                                                pbufs[n].st.gatherBeforeUse &&
                                                seen.insert(n).second) {
            auto [it, added] = indexOfLayer.try_emplace(step.layerOf.lookup(o), layers.size());
            if (added)
              layers.emplace_back();
            layers[it->second].push_back(n.str());
          }
    return layers;
  };
  size_t computeIndex = 0;
  for (Operation &op : rankProgram.getBody().front()) {
    auto wc = dyn_cast<pm::WaitCollectivesOp>(op);
    if (wc && wc.getParams()) {
      llvm::StringSet<> readable;
      for (const std::string &n : names(*wc.getParams()))
        readable.insert(n);
      pendingWaits.push_back({wc, std::move(readable)});
      continue;
    }
    if (!isa<pm::ComputeOp>(op))
      flushWaits(pendingWaits.size());
    if (isa<pm::ZeroGradsOp>(op)) {
      // Persistent gradients, and the shards that ZeRO-2/3 accumulate into.
      json::Array zeroed;
      for (const std::string &n : heldParams)
        if (pbufs[n].grad >= 0)
          zeroed.push_back(pbufs[n].grad);
        else if (pbufs[n].gradShard >= 0)
          zeroed.push_back(pbufs[n].gradShard);
      if (!zeroed.empty())
        emit(json::Object{{"op", "zero"}, {"out", std::move(zeroed)}});
    } else if (auto w = dyn_cast<pm::WaitSendsOp>(op)) {
      waitSends(w.getKeep());
    } else if (auto r = dyn_cast<pm::RecvOp>(op)) {
      Value v = step.channelValue[r.getChannel()];
      int64_t mb = r.getMicrobatch();
      int id = add(valueBuffer(v, "activation", tmpName()));
      emit(json::Object{{"op", "recv"},
                        {"out", json::Array{id}},
                        {"peer", (int64_t)r.getPeer()},
                        {"tag", (int64_t)r.getTag()}});
      inst[{v, mb}] = id;
      pendingRecvTokens.push_back(direction(v) + std::to_string(mb));
    } else if (auto c = dyn_cast<pm::ComputeOp>(op)) {
      Action a{(int64_t)c.getChunk(), (int64_t)c.getMicrobatch(), c.getPhase() != "F",
               c.getPhase() == "W"};
      lastChunk = a.chunk;
      ActionCtx ctx;
      ctx.a = a;
      std::vector<bool> isRecompute;
      std::vector<Operation *> ops = sequence(a, isRecompute);
      // zero 3: whole parameters are gathered a layer at a time: when the
      // action reaches a layer, the next layer's gather is issued (async;
      // FSDP's prefetch) and, at the action's last layer, the next action's
      // first. Consecutive actions of one chunk and phase (a breadth-first
      // run of micro-batches) keep what they gathered; otherwise a parameter
      // is freed after its last read in the action, unless the next action
      // starts with it.
      const int64_t key = a.chunk * 3 + phaseKey(a);
      const Action *next = computeIndex + 1 < computeActions.size()
                               ? &computeActions[computeIndex + 1]
                               : nullptr;
      const bool keepGathered = next && next->chunk * 3 + phaseKey(*next) == key;
      ++computeIndex;
      std::vector<std::vector<std::string>> layers = gatheredLayers(ops);
      llvm::StringMap<size_t> layerOfName;
      for (auto [g, names] : llvm::enumerate(layers))
        for (const std::string &n : names)
          layerOfName[n] = g;
      {
        json::Array stale;
        for (auto it = gathered.begin(); it != gathered.end();)
          if (!layerOfName.count(it->getKey())) {
            stale.push_back(it->second);
            gathered.erase(it++);
          } else {
            ++it;
          }
        if (!stale.empty())
          emit(json::Object{{"op", "free"}, {"bufs", std::move(stale)}});
      }
      std::vector<std::string> nextFirst;
      if (next && !keepGathered) {
        std::vector<std::vector<std::string>> nl =
            gatheredLayers(actionOps(*next), recomputedBefore(*next));
        if (!nl.empty())
          nextFirst = nl.front();
      }
      size_t layersReached = 0;
      // Before an op: the layers up to the one it reads are requested (the
      // step's first layer, not gathered ahead, now and blocking; the others
      // wait for their gather at the first read) and the one after each is
      // gathered ahead.
      auto reachLayerOf = [&](Operation *o) {
        size_t upTo = layersReached;
        for (Value v : o->getOperands())
          if (auto it = layerOfName.find(step.paramRoot(v)); it != layerOfName.end())
            upTo = std::max(upTo, it->second + 1);
        for (; layersReached < upTo; ++layersReached) {
          for (const std::string &n : layers[layersReached])
            if (!gathered.count(n) && !prefetched.count(n))
              paramBuffer(n, ctx);
          if (layersReached + 1 < layers.size())
            prefetchGathers(layers[layersReached + 1]);
          else
            prefetchGathers(nextFirst);
        }
      };
      std::vector<std::vector<std::string>> freeList =
          keepGathered ? std::vector<std::vector<std::string>>(ops.size()) : freeAfter(ops);
      for (std::vector<std::string> &names : freeList)
        llvm::erase_if(names, [&](const std::string &n) {
          return llvm::is_contained(nextFirst, n);
        });
      size_t actionStart = program.size();
      std::vector<bool> recomputedInstr; // per instruction of this action
      inAction = true;
      // The sends that follow this action in the program, by value, and the
      // async reductions, each with the index of the op after which its
      // gradients are complete (in program order: the data-parallel stream
      // runs them in issue order).
      llvm::DenseMap<Value, llvm::SmallVector<pm::SendOp>> sendsOf;
      llvm::StringMap<size_t> lastAccumulate;
      for (auto [i, o] : llvm::enumerate(ops))
        if (auto acc = dyn_cast<pm::AccumulateGradOp>(o); acc && !isRecompute[i])
          lastAccumulate[acc.getParam()] = i;
      std::vector<std::pair<size_t, Operation *>> reductions;
      for (Operation *next = op.getNextNode(); next; next = next->getNextNode()) {
        if (auto sd = dyn_cast<pm::SendOp>(next)) {
          if ((int64_t)sd.getMicrobatch() == a.microbatch)
            sendsOf[step.channelValue[sd.getChannel()]].push_back(sd);
          continue;
        }
        ArrayAttr grads = earlyReduction(next);
        if (!grads)
          break;
        size_t at = reductions.empty() ? 0 : reductions.back().first;
        bool complete = true;
        for (const std::string &n : names(grads)) {
          auto it = lastAccumulate.find(n);
          complete = complete && it != lastAccumulate.end();
          if (complete)
            at = std::max(at, it->second);
        }
        if (!complete)
          break;
        reductions.push_back({at, next});
      }
      size_t nextReduction = 0;
      for (auto [i, o] : llvm::enumerate(ops)) {
        ctx.recompute = isRecompute[i];
        if (!pendingWaits.empty())
          flushWaitsReadBy(o);
        if (!layers.empty())
          reachLayerOf(o);
        size_t before = program.size();
        if (failed(emitOp(o, ctx)))
          return failure();
        if (!ctx.recompute)
          for (Value r : o->getResults())
            for (pm::SendOp sd : sendsOf.lookup(r)) {
              if (failed(lowerSend(sd)))
                return failure();
              loweredEarly.insert(sd);
            }
        for (; nextReduction < reductions.size() && reductions[nextReduction].first == i;
             ++nextReduction) {
          lowerReduction(reductions[nextReduction].second);
          loweredEarly.insert(reductions[nextReduction].second);
        }
        recomputedInstr.resize(program.size() - actionStart, false);
        for (size_t k2 = before; k2 < program.size(); ++k2)
          recomputedInstr[k2 - actionStart] = ctx.recompute;
        json::Array freed;
        for (const std::string &n : freeList[i])
          if (auto it = gathered.find(n); it != gathered.end()) {
            freed.push_back(it->second);
            gathered.erase(it);
          }
        if (!freed.empty())
          emit(json::Object{{"op", "free"}, {"bufs", std::move(freed)}});
      }
      flushWaits(pendingWaits.size());
      // Which action each instruction belongs to, for pipemesh-sim's and
      // the profiler's attribution of time.
      std::string actionName = formatAction(a);
      std::string recomputeName = std::to_string(a.chunk) + "R" + std::to_string(a.microbatch);
      for (size_t k2 = actionStart; k2 < program.size(); ++k2)
        program[k2]["action"] = k2 - actionStart < recomputedInstr.size() &&
                                        recomputedInstr[k2 - actionStart]
                                    ? recomputeName
                                    : actionName;
      // The schedule row: `<chunk>RECV_<dir><mb>` for what it received, once.
      std::vector<std::string> recvTokens;
      for (const std::string &t : pendingRecvTokens)
        if (std::string token = std::to_string(a.chunk) + "RECV_" + t;
            !llvm::is_contained(recvTokens, token))
          recvTokens.push_back(token);
      pendingRecvTokens.clear();
      row.insert(row.end(), recvTokens.begin(), recvTokens.end());
      row.push_back(actionName);
      row.insert(row.end(), earlySendTokens.begin(), earlySendTokens.end());
      earlySendTokens.clear();
      inAction = false;
      lastActionName = actionName;
    } else if (auto sd = dyn_cast<pm::SendOp>(op)) {
      if (!loweredEarly.count(sd) && failed(lowerSend(sd)))
        return failure();
    } else if (auto ar = dyn_cast<pm::AllReduceGradsOp>(op)) {
      if (!loweredEarly.count(ar))
        lowerAllReduce(ar);
    } else if (auto rs = dyn_cast<pm::ReduceScatterGradsOp>(op); rs && rs.getAccumulate()) {
      // Reduce a run's whole gradients into temporary shards, add those to
      // the persistent shards, free both: right away, or (async) once a
      // wait_collectives completes the reduction.
      json::Array in, tmp, acc, freed;
      for (const std::string &n : names(rs.getParams())) {
        scattered.insert(n);
        ParamBufs &pb = pbufs[n];
        int full = gradTarget(n);
        Buffer b;
        b.name = n + ".grad.reduced";
        b.shape = {pb.layout.shardNumel};
        b.dtype = "f32";
        b.kind = "activation";
        int t = add(std::move(b));
        in.push_back(full);
        tmp.push_back(t);
        acc.push_back(pb.gradShard);
        freed.push_back(full);
        freed.push_back(t);
        pb.transientGrad = -1; // the next backward starts a new whole gradient
      }
      json::Array tmpCopy = tmp;
      json::Object reduce{
          {"op", "reduce_scatter"}, {"group", "dp"}, {"in", std::move(in)}, {"out", std::move(tmp)}};
      json::Object accumulate{{"op", "accumulate"}, {"in", std::move(tmpCopy)}, {"out", std::move(acc)}};
      if (rs.getAsync()) {
        InFlight after;
        after.then.push_back(std::move(accumulate));
        after.freed = std::move(freed);
        issueAsync(std::move(reduce), std::move(after));
      } else {
        emit(std::move(reduce));
        emit(std::move(accumulate));
        emit(json::Object{{"op", "free"}, {"bufs", std::move(freed)}});
      }
    } else if (auto rs = dyn_cast<pm::ReduceScatterGradsOp>(op)) {
      if (!loweredEarly.count(rs))
        lowerReduceScatter(rs);
    } else if (wc) {
      lowerWait(wc);
    } else if (isa<pm::OptimizerStepOp>(op)) {
      freeGathered();
      json::Array entries;
      for (const std::string &n : heldParams) {
        ParamBufs &pb = pbufs[n];
        if (pb.m < 0)
          continue;
        const ParamInfo &pi = sh.params[sh.paramIndex.lookup(n)];
        json::Object e{{"param", pb.shard >= 0 ? pb.shard : pb.full},
                       {"grad", pb.gradShard >= 0 ? pb.gradShard : pb.grad},
                       {"m", pb.m},
                       {"v", pb.v},
                       {"decay", pi.decay}};
        // Every gradient element counts once in the global norm: the tied
        // copy on the lowest pipeline rank, and replicated (zero 0) gradients
        // on dp rank 0 only.
        auto holders = step.holders.find(n);
        int64_t lowest = holders == step.holders.end() ? 0 : *holders->second.begin();
        if (lowest != p)
          e["norm_weight"] = 0.0;
        else if (!pb.st.gradShard && sh.opts.dp > 1)
          e["norm_dp0_only"] = true; // resolved per dp rank
        entries.push_back(std::move(e));
      }
      emit(json::Object{{"op", "adamw"}, {"params", std::move(entries)}});
    } else if (auto ag = dyn_cast<pm::AllGatherParamsOp>(op)) {
      json::Array in, out;
      for (const std::string &n : names(ag.getParams())) {
        ParamBufs &pb = pbufs[n];
        if (pb.shard >= 0 && pb.full >= 0) {
          in.push_back(pb.shard);
          out.push_back(pb.full);
        }
      }
      if (!in.empty()) {
        json::Object o{
            {"op", "allgather"}, {"group", "dp"}, {"in", std::move(in)}, {"out", std::move(out)}};
        // Completed by the next step's wait_collectives (keep), not this
        // one's: the next program starts with it in flight.
        if (ag.getAsync())
          o["async"] = true;
        emit(std::move(o));
      }
    } else {
      return op.emitOpError("cannot be lowered into a plan");
    }
  }
  waitSends(0);
  waitCollectives();

  layout(out);
  out.buffers = std::move(buffers);
  out.program = std::move(program);
  out.row = std::move(row);
  out.constantsUsed = std::move(constantsUsed);
  return success();
}

/// The wait_sends lags tried, in order, until a plan does not deadlock: a
/// send completes `lag` actions later; 0 only at the end of the step.
constexpr int64_t kWaitLags[] = {1, 2, 4, 0};

/// The whole plan.
class PlanBuilder {
public:
  PlanBuilder(ModuleOp module, const CompileOptions &opts) : sh(module, opts) {}
  LogicalResult run(llvm::raw_ostream &os);

private:
  LogicalResult checkOptions();
  LogicalResult collectParams();
  LogicalResult classifyInputs(func::FuncOp train);
  void countFlops(func::FuncOp train);
  LogicalResult emitRanks(func::FuncOp train, std::vector<RankPlan> &ranks);
  FailureOr<json::Object> buildManifest(func::FuncOp train, bool replicasElided = false);
  /// The simulated step of the plan the current options make (errors, e.g.
  /// over mem-limit, in `why` instead of diagnostics).
  struct Prediction {
    bool ok = false;
    std::string why;
    sim::SimResult result;
  };
  Prediction predict(func::FuncOp train, const cost::Cluster &cluster);
  /// The skeleton simulation (SkeletonJob.h: no recompute, costs per
  /// action) of the current options' rank programs, with the first
  /// wait-lag that does not deadlock; !ok when none.
  sim::SimResult skeletonStep(const cost::Cluster &cluster);
  /// The searches' exact check: emits and simulates candidates in order
  /// (`apply(i)` sets the options of the i-th) until two fit, and returns
  /// the faster of those, or -1 with the last failure in `why`.
  int64_t fasterOfFirstTwoFitting(func::FuncOp train, const cost::Cluster &cluster,
                                  size_t candidates, llvm::function_ref<void(size_t)> apply,
                                  std::string &why);
  LogicalResult chooseGroups(func::FuncOp train, const cost::Cluster &cluster);
  void chooseZero(func::FuncOp train, const cost::Cluster &cluster);
  void explain(func::FuncOp train, const cost::Cluster &cluster);
  json::Object rankJson(const RankPlan &rp, int64_t d);
  /// `replicasElided`: only dp rank 0's program of each pipeline rank (the
  /// simulator builds the other replicas; what the schedule search uses).
  json::Object manifest(std::vector<RankPlan> &ranks, bool replicasElided = false);

  Shared sh;
  detail::WeightsSpec weights;
};

LogicalResult PlanBuilder::checkOptions() {
  const CompileOptions &o = sh.opts;
  auto kind = parseScheduleKind(o.schedule);
  if (!kind)
    return sh.module.emitError() << "unknown schedule '" << o.schedule
                                 << "' (gpipe, 1f1b, interleaved, elastic, bfs, zb-h1 or zb-h2)";
  sh.sched.kind = *kind;
  sh.sched.pp = o.pp;
  sh.sched.vpp = o.vpp;
  sh.sched.microbatches = o.microbatches;
  sh.sched.group = o.group;
  sh.sched.fwdGroups = o.fwdGroups;
  sh.sched.bwdGroups = o.bwdGroups;
  std::string why;
  if (!validateSchedule(sh.sched, why))
    return sh.module.emitError() << why;
  if (o.zero < 0 || o.zero > 3)
    return sh.module.emitError() << "zero must be 0, 1, 2 or 3";
  sh.zero = o.dp > 1 ? o.zero : 0;
  sh.zeroChunks.assign(o.pp * o.vpp, sh.zero);
  if (o.dp > 1 && !o.zeroChunks.empty())
    sh.zeroChunks = o.zeroChunks;
  sh.invM = 1.0 / (double)(o.microbatches * o.dp);
  return success();
}

LogicalResult PlanBuilder::collectParams() {
  auto adamw = [&]() -> pm::AdamWOp {
    auto opt = sh.module.lookupSymbol<func::FuncOp>("optimizer_step");
    if (!opt)
      return nullptr;
    pm::AdamWOp found;
    opt.walk([&](pm::AdamWOp op) { found = op; });
    return found;
  }();
  if (!adamw)
    return sh.module.emitError("no @optimizer_step with pmesh.adamw: run --pmesh-autodiff first");
  llvm::StringMap<bool> decay;
  for (auto [sym, d] : llvm::zip(adamw.getParams(), adamw.getDecay()))
    decay[cast<FlatSymbolRefAttr>(sym).getValue()] = d;
  for (auto param : sh.module.getOps<pm::ParamOp>()) {
    auto t = cast<RankedTensorType>(param.getType());
    if (!t.getElementType().isF32())
      return param.emitOpError("only float32 parameters are supported");
    ParamInfo pi;
    pi.name = param.getSymName().str();
    pi.shape.assign(t.getShape().begin(), t.getShape().end());
    pi.source = param.getSource() ? param.getSource()->str() : pi.name;
    pi.trained = decay.count(pi.name);
    pi.decay = decay.lookup(pi.name);
    sh.paramIndex[pi.name] = sh.params.size();
    weights.params.push_back(pi.name);
    weights.paramSource[pi.name] = pi.source;
    weights.paramShape[pi.name] = pi.shape;
    sh.params.push_back(std::move(pi));
  }
  // Parameters held by several pipeline ranks form the tied group; the
  // plan has one tied group per rank, so they must share their ranks.
  std::string first;
  for (const ParamInfo &pi : sh.params) {
    auto it = sh.step.holders.find(pi.name);
    if (it == sh.step.holders.end() || it->second.size() < 2)
      continue;
    std::vector<int64_t> ranks(it->second.begin(), it->second.end());
    if (first.empty()) {
      first = pi.name;
      sh.tiedRanks = ranks;
    } else if (ranks != sh.tiedRanks) {
      return sh.module.emitError()
             << "parameters '" << first << "' and '" << pi.name
             << "' are read on different sets of pipeline ranks; a plan has one tied-weight "
                "group per rank";
    }
  }
  return success();
}

LogicalResult PlanBuilder::classifyInputs(func::FuncOp train) {
  const CompileOptions &opts = sh.opts;
  Block &entry = train.getBody().front();
  bool haveTokens = false;
  for (BlockArgument arg : entry.getArguments()) {
    auto nameAttr = train.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "pmesh.name");
    StringRef name = nameAttr ? nameAttr.getValue() : "";
    auto t = cast<RankedTensorType>(arg.getType());
    if (t.getShape() != llvm::ArrayRef<int64_t>({opts.batch, opts.seq}))
      return train.emitError() << "input '" << name << "' has shape "
                               << shapes::str(t.getShape()) << ", expected [batch, seq] = ["
                               << opts.batch << ", " << opts.seq << "]";
    unsigned k = arg.getArgNumber();
    if (name == "input_ids" || (!haveTokens && name != "targets" && name != "labels" &&
                                name != "attention_mask" && t.getElementType().isInteger(64))) {
      sh.argRole[k] = InputRole::Tokens;
      sh.tokensType = t;
      sh.tokensName = name.str();
      haveTokens = true;
    } else if (name == "targets" || name == "labels") {
      bool same = opts.labels == "same";
      if (name == "labels" && opts.labels == "auto")
        same = llvm::any_of(arg.getUsers(), [](Operation *u) { return isa<pm::SliceOp>(u); });
      if (name == "labels")
        sh.lossMode = "model";
      if (same) {
        sh.lossMode = "model-shifted";
        sh.argRole[k] = InputRole::Tokens; // labels == input ids, shifted inside the model
        continue;
      }
      sh.argRole[k] = InputRole::Targets;
      sh.targetsType = t;
      sh.targetsName = name.str();
    } else if (name == "attention_mask") {
      // Every token of a training window is real: the mask is all ones.
      sh.argRole[k] = InputRole::Mask;
      sh.maskType = t;
      Type e = t.getElementType();
      Attribute one = e.isInteger(1)      ? (Attribute)BoolAttr::get(t.getContext(), true)
                      : isa<FloatType>(e) ? (Attribute)FloatAttr::get(e, 1.0)
                                          : (Attribute)IntegerAttr::get(e, 1);
      sh.maskValue = DenseElementsAttr::get(t, one);
    } else {
      return train.emitError() << "cannot feed input '" << name
                               << "': the data loader provides input_ids, targets/labels and "
                                  "attention_mask";
    }
  }
  if (!haveTokens)
    return train.emitError("no token input (input_ids)");
  return success();
}

void PlanBuilder::countFlops(func::FuncOp train) {
  train.walk([&](Operation *op) {
    if (auto mm = dyn_cast<pm::MatMulOp>(op)) {
      auto shape = cast<RankedTensorType>(mm.getType()).getShape();
      auto a = cast<RankedTensorType>(mm.getA().getType()).getShape();
      int64_t k = mm.getTransposeA() ? a[a.size() - 2] : a.back();
      sh.flopsPerMicrobatch += 2.0 * shapes::numElements(shape) * k;
    }
    auto attentionFlops = [&](Value q, Value k, double matmuls) {
      auto qs = cast<RankedTensorType>(q.getType()).getShape();
      auto ks = cast<RankedTensorType>(k.getType()).getShape();
      sh.flopsPerMicrobatch += matmuls * 2.0 * shapes::numElements(qs) * ks[ks.size() - 2];
    };
    if (auto a = dyn_cast<pm::AttentionOp>(op))
      attentionFlops(a.getQ(), a.getK(), 2);
    if (auto a = dyn_cast<pm::AttentionGradOp>(op))
      attentionFlops(a.getQ(), a.getK(), 5);
    if (auto e = dyn_cast<pm::EmbeddingOp>(op)) {
      Value ids = e.getIds();
      while (auto r = ids.getDefiningOp<pm::ReshapeOp>())
        ids = r.getInput();
      if (auto arg = dyn_cast<BlockArgument>(ids);
          arg && sh.argRole.lookup(arg.getArgNumber()) == InputRole::Tokens)
        sh.vocab = cast<RankedTensorType>(e.getTable().getType()).getDimSize(0);
    }
  });
}

json::Object PlanBuilder::rankJson(const RankPlan &rp, int64_t d) {
  const int64_t dp = sh.opts.dp;
  json::Array bufs;
  for (auto [i, b] : llvm::enumerate(rp.buffers)) {
    json::Object o{{"id", (int64_t)i},          {"name", b.name},
                   {"shape", json::Array(b.shape)}, {"dtype", b.dtype},
                   {"offset", b.offset},        {"bytes", b.bytes()},
                   {"kind", b.kind}};
    if (!b.param.empty())
      o["param"] = b.param;
    if (!b.data.empty())
      o["data"] = b.data;
    if (b.aliasOf >= 0)
      o["alias_of"] = b.aliasOf;
    if (b.sharded) {
      o["elem_offset"] = d * b.shardNumel;
      o["shard_numel"] = b.shardNumel;
      o["padded_numel"] = b.paddedNumel;
    }
    bufs.push_back(std::move(o));
  }
  json::Array program;
  for (const json::Object &instr : rp.program) {
    json::Object c = instr;
    if (auto peer = c.getInteger("peer"))
      c["peer"] = *peer * dp + d;
    if (json::Array *entries = c.getArray("params"))
      for (json::Value &ev : *entries) {
        json::Object *e = ev.getAsObject();
        if (e && e->erase("norm_dp0_only") && d != 0)
          (*e)["norm_weight"] = 0.0;
      }
    program.push_back(std::move(c));
  }
  json::Array dpGroup, tiedGroup;
  for (int64_t e = 0; e < dp; ++e)
    dpGroup.push_back(rp.pp * dp + e);
  if (rp.tied)
    for (int64_t q : sh.tiedRanks)
      tiedGroup.push_back(q * dp + d);
  std::string schedule;
  for (const std::string &t : rp.row)
    schedule += (schedule.empty() ? "" : " ") + t;
  return json::Object{{"rank", rp.pp * dp + d},
                      {"pp_rank", rp.pp},
                      {"dp_rank", d},
                      {"chunks", json::Array(rp.chunks)},
                      {"groups",
                       json::Object{{"dp", std::move(dpGroup)}, {"tied", std::move(tiedGroup)}}},
                      {"first_stage", rp.firstStage},
                      {"last_stage", rp.lastStage},
                      {"schedule", schedule},
                      {"arena_bytes", rp.arenaBytes},
                      {"persistent_bytes", rp.persistentBytes},
                      {"activation_peak_bytes", rp.activationPeak},
                      {"recompute", recomputeName(rp.recompute, sh.step.pp)},
                      {"buffers", std::move(bufs)},
                      {"program", std::move(program)}};
}

json::Object PlanBuilder::manifest(std::vector<RankPlan> &ranks, bool replicasElided) {
  const CompileOptions &o = sh.opts;
  json::Array params;
  int64_t numParams = 0;
  for (const ParamInfo &pi : sh.params) {
    numParams += shapes::numElements(pi.shape);
    params.push_back(json::Object{{"name", pi.name},
                                  {"shape", json::Array(pi.shape)},
                                  {"source", pi.source},
                                  {"decay", pi.decay},
                                  {"trained", pi.trained}});
  }
  std::string source;
  if (auto s = sh.module->getAttrOfType<StringAttr>("pmesh.source")) {
    llvm::SmallString<256> abs(s.getValue());
    llvm::sys::fs::make_absolute(abs);
    source = std::string(abs);
  }
  json::Object inputs{{"tokens", sh.tokensName}};
  if (sh.targetsType)
    inputs["targets"] = sh.targetsName;
  json::Array rankArray;
  for (const RankPlan &rp : ranks)
    for (int64_t d = 0; d < (replicasElided ? 1 : o.dp); ++d)
      rankArray.push_back(rankJson(rp, d));
  json::Object parallel{{"pp", o.pp},
                        {"dp", o.dp},
                        {"vpp", o.vpp},
                        {"microbatches", o.microbatches},
                        {"schedule", o.schedule},
                        {"zero", *llvm::max_element(sh.zeroChunks)},
                        {"world_size", o.pp * o.dp}};
  if (replicasElided)
    parallel["replicas_elided"] = true;
  if (effectiveKind(sh.sched) == ScheduleKind::Interleaved)
    parallel["group"] = effectiveGroup(sh.sched);
  if (llvm::any_of(sh.zeroChunks, [&](int64_t z) { return z != sh.zeroChunks[0]; })) {
    json::Array zc;
    for (int64_t z : sh.zeroChunks)
      zc.push_back(z);
    parallel["zero_chunks"] = std::move(zc);
  }
  if (sh.opts.zeroAuto && sh.zeroSearchCandidates > 0)
    parallel["zero_search"] = json::Object{{"candidates", sh.zeroSearchCandidates},
                                           {"seconds", sh.zeroSearchSeconds},
                                           {"cluster", sh.opts.cluster}};
  if (sh.sched.kind == ScheduleKind::Elastic) {
    auto list = [](llvm::ArrayRef<int64_t> g, int64_t m) {
      json::Array a;
      for (int64_t x : g)
        a.push_back(x);
      if (g.empty())
        a.push_back(m);
      return a;
    };
    parallel["fwd_groups"] = list(sh.sched.fwdGroups, o.microbatches);
    parallel["bwd_groups"] = list(sh.sched.bwdGroups, o.microbatches);
    if (sh.opts.autoGroups)
      parallel["groups_search"] = json::Object{{"candidates", sh.searchCandidates},
                                               {"seconds", sh.searchSeconds},
                                               {"cluster", sh.opts.cluster}};
  }
  if (effectiveKind(sh.sched) != sh.sched.kind)
    parallel["schedule_run"] = scheduleKindName(effectiveKind(sh.sched));
  return json::Object{
      {"format", "pipemesh-plan"},
      {"version", (int64_t)kPlanFormatVersion},
      {"model",
       json::Object{{"source", source},
                    {"batch", o.batch},
                    {"seq", o.seq},
                    {"vocab", sh.vocab},
                    {"num_params", numParams},
                    {"flops_per_step", sh.flopsPerMicrobatch * o.microbatches * o.dp},
                    {"loss", sh.lossMode},
                    {"shapes_only", o.shapesOnly}}},
      {"parallel", std::move(parallel)},
      {"inputs", std::move(inputs)},
      {"params", std::move(params)},
      {"ranks", std::move(rankArray)}};
}

/// Every pipeline rank's program, with the recomputation each needs.
LogicalResult PlanBuilder::emitRanks(func::FuncOp train, std::vector<RankPlan> &ranks) {
  // --pmesh-shard and --pmesh-schedule, then their lowering.
  detail::annotateSharding(sh.module, sh.step, sh.zeroChunks, sh.opts.dp);
  if (failed(detail::buildRankPrograms(sh.module, sh.step, sh.sched, sh.opts.dp, sh.waitLag)))
    return failure();
  ranks.assign(sh.opts.pp, RankPlan());
  const int64_t limit = sh.opts.memLimit;
  for (int64_t p = 0; p < sh.opts.pp; ++p) {
    // recompute=auto: per rank, the least recomputation that fits the limit
    // (the late stages, with few micro-batches in flight, need none).
    auto emitWith = [&](Recompute r) {
      ranks[p] = RankPlan();
      RankEmitter re(sh, p, r);
      if (failed(re.run(ranks[p])))
        return false;
      ranks[p].recompute = r;
      return true;
    };
    auto fits = [&] { return !limit || ranks[p].arenaBytes <= limit; };
    if (sh.opts.recompute != "auto") {
      Recompute r = sh.opts.recompute == "full"        ? Recompute::full()
                    : sh.opts.recompute == "selective" ? Recompute::selective()
                                                       : Recompute::none();
      if (!emitWith(r))
        return failure();
    } else if (!emitWith(Recompute::none()) ||
               (!fits() && !emitWith(Recompute::selective()))) {
      return failure();
    } else if (!fits()) {
      // The fewest recomputed layers per chunk that fit (memory falls as
      // layers are added): a binary search over 1 .. the rank's most layers
      // in a chunk.
      int64_t most = 1;
      for (int64_t c = p; c < sh.step.numChunks; c += sh.step.pp)
        most = std::max<int64_t>(most, sh.step.layersIn(c).size());
      int64_t lo = 1, hi = most;
      while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (!emitWith(Recompute::firstLayers(mid)))
          return failure();
        if (fits())
          hi = mid;
        else
          lo = mid + 1;
      }
      // Then the fewest micro-batch positions (of every pp consecutive
      // micro-batches) that need that many layers, the others one fewer:
      // recomputation in steps of 1/pp of a layer per micro-batch.
      int64_t lowPos = 1, highPos = sh.step.pp;
      while (lowPos < highPos) {
        int64_t mid = (lowPos + highPos) / 2;
        if (!emitWith(Recompute::firstLayersOn(lo, mid)))
          return failure();
        if (fits())
          highPos = mid;
        else
          lowPos = mid + 1;
      }
      Recompute chosen = lowPos < sh.step.pp ? Recompute::firstLayersOn(lo, lowPos)
                         : lo == most       ? Recompute::full()
                                            : Recompute::firstLayers(lo);
      if (!emitWith(chosen))
        return failure();
    }
    if (limit && ranks[p].arenaBytes > limit)
      return sh.module.emitError()
             << "pipeline rank " << p << " needs " << ranks[p].arenaBytes
             << " bytes (persistent " << ranks[p].persistentBytes << ", activations "
             << ranks[p].activationPeak << ") with recompute="
             << recomputeName(ranks[p].recompute, sh.step.pp) << ", over mem-limit=" << limit
             << " bytes: use more pipeline stages"
             << (llvm::all_of(sh.zeroChunks, [](int64_t z) { return z == 3; }) ? ""
                                                                                : ", zero=2 or 3")
             << ", or fewer micro-batches in flight"
             << (sh.opts.recompute == "auto" ? "" : ", or recompute=auto");
    for (const std::string &c : ranks[p].constantsUsed)
      weights.constants[c] = {};
  }
  // The weights blob holds every constant some rank reads.
  for (Operation &op : train.getBody().front())
    if (auto c = dyn_cast<pm::ConstantOp>(op)) {
      std::string name = sh.step.constantName.lookup(&op);
      if (!weights.constants.count(name))
        continue;
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense)
        return c.emitOpError("only dense constants can be emitted");
      weights.constants[name] = dense;
    }
  if (weights.constants.count("const.attention_mask"))
    weights.constants["const.attention_mask"] = sh.maskValue;

  return success();
}

/// Emits every rank and the manifest; the first wait lag whose plan passes
/// the deadlock check wins.
FailureOr<json::Object> PlanBuilder::buildManifest(func::FuncOp train, bool replicasElided) {
  std::vector<RankPlan> ranks;
  for (int64_t lag : kWaitLags) {
    sh.waitLag = lag;
    if (failed(emitRanks(train, ranks)))
      return failure();
    json::Object m = manifest(ranks, replicasElided);
    std::string why;
    if (!replicasElided) {
      why = checkPlanDeadlock(m);
    } else {
      // dp replicas run the same program against their own peers, and every
      // member of a dp group reaches its collectives in the same order: one
      // replica deadlocks exactly when all do, so check replica 0 alone.
      std::vector<RankProgram> programs;
      if (!programsFromManifest(m, programs, why))
        return sh.module.emitError() << why;
      for (RankProgram &rp : programs)
        rp.groups["dp"] = {rp.rank};
      why = findDeadlock(programs);
    }
    if (why.empty())
      return m;
    if (lag == 0)
      return sh.module.emitError() << "the plan fails the deadlock check: " << why;
  }
  return failure();
}

PlanBuilder::Prediction PlanBuilder::predict(func::FuncOp train, const cost::Cluster &cluster) {
  Prediction out;
  std::string why;
  FailureOr<json::Object> m = failure();
  {
    // A candidate that does not fit is an answer of the search, not an error.
    ScopedDiagnosticHandler quiet(sh.module.getContext(), [&](Diagnostic &d) {
      if (why.empty())
        why = d.str();
      return success();
    });
    m = buildManifest(train, /*replicasElided=*/true);
  }
  if (failed(m)) {
    out.why = why.empty() ? "cannot be emitted" : why;
    return out;
  }
  sim::LoadedPlan lp;
  if (!sim::jobFromManifest(*m, lp, out.why))
    return out;
  out.result = sim::simulate(lp.job, cluster);
  out.ok = out.result.ok;
  if (!out.ok)
    out.why = out.result.error;
  return out;
}

/// groups=auto: forward and backward group sizes from pp (depth-first) to
/// all micro-batches (breadth-first), doubling. Equal sizes both ways first,
/// then the backward size and the forward size each varied around the best
/// (coordinate descent: 3 |sizes| candidates rather than |sizes|^2), ranked
/// by the skeleton simulation (SkeletonJob.h, milliseconds each); the best
/// few are then emitted and simulated exactly, and the fastest of those that
/// fits mem-limit wins.
LogicalResult PlanBuilder::chooseGroups(func::FuncOp train, const cost::Cluster &cluster) {
  auto started = std::chrono::steady_clock::now();
  auto finish = [&](int64_t candidates) {
    sh.searchCandidates = candidates;
    sh.searchSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return success();
  };
  const int64_t m = sh.opts.microbatches, pp = sh.opts.pp;
  std::vector<int64_t> sizes;
  for (int64_t g = std::min(pp, m); g < m; g *= 2)
    sizes.push_back(g);
  sizes.push_back(m);
  auto uniform = [&](int64_t g) {
    std::vector<int64_t> v;
    for (int64_t lo = 0; lo < m; lo += g)
      v.push_back(std::min(g, m - lo));
    return v;
  };
  std::map<std::pair<int64_t, int64_t>, double> skeleton; // (f, b) -> step time
  auto rough = [&](int64_t f, int64_t b) -> double {
    if (auto it = skeleton.find({f, b}); it != skeleton.end())
      return it->second;
    double t = INFINITY;
    sh.sched.fwdGroups = uniform(f);
    sh.sched.bwdGroups = uniform(b);
    std::string why;
    if (validateSchedule(sh.sched, why))
      if (sim::SimResult r = skeletonStep(cluster); r.ok)
        t = r.stepTimeS;
    return skeleton[{f, b}] = t;
  };
  std::pair<int64_t, int64_t> best{-1, -1};
  auto consider = [&](int64_t f, int64_t b) {
    double t = rough(f, b);
    if (t < INFINITY && (best.first < 0 || t < skeleton[best]))
      best = {f, b};
  };
  for (int64_t g : sizes)
    consider(g, g);
  if (best.first >= 0) {
    int64_t f0 = best.first;
    for (int64_t b : sizes)
      consider(f0, b);
    int64_t b0 = best.second;
    for (int64_t f : sizes)
      consider(f, b0);
  }
  // Exact checks, best skeletons first, until two candidates fit. Without
  // a memory limit (and so without recompute=auto) nothing the skeleton
  // leaves out decides between them: its best stands.
  std::vector<std::pair<double, std::pair<int64_t, int64_t>>> ranked;
  for (auto &[fb, t] : skeleton)
    if (t < INFINITY)
      ranked.push_back({t, fb});
  llvm::sort(ranked);
  if (!sh.opts.memLimit && !ranked.empty()) {
    sh.sched.fwdGroups = uniform(ranked.front().second.first);
    sh.sched.bwdGroups = uniform(ranked.front().second.second);
    return finish(skeleton.size());
  }
  std::string lastWhy = "no valid order";
  auto apply = [&](size_t i) {
    sh.sched.fwdGroups = uniform(ranked[i].second.first);
    sh.sched.bwdGroups = uniform(ranked[i].second.second);
  };
  int64_t chosen = fasterOfFirstTwoFitting(train, cluster, ranked.size(), apply, lastWhy);
  if (chosen < 0)
    return sh.module.emitError() << "groups=auto: no forward/backward group sizes give a plan ("
                                 << lastWhy << ")";
  apply(chosen);
  return finish(skeleton.size());
}

sim::SimResult PlanBuilder::skeletonStep(const cost::Cluster &cluster) {
  const double tokens =
      (double)sh.opts.batch * sh.opts.seq * sh.opts.microbatches * sh.opts.dp;
  detail::annotateSharding(sh.module, sh.step, sh.zeroChunks, sh.opts.dp);
  sim::SimResult r;
  for (int64_t lag : kWaitLags) {
    if (failed(detail::buildRankPrograms(sh.module, sh.step, sh.sched, sh.opts.dp, lag)))
      break;
    r = sim::simulate(
        detail::skeletonJob(sh.module, sh.step, sh.sched, sh.opts.dp, cluster.device, tokens),
        cluster);
    if (r.ok)
      break;
  }
  return r;
}

int64_t PlanBuilder::fasterOfFirstTwoFitting(func::FuncOp train, const cost::Cluster &cluster,
                                             size_t candidates,
                                             llvm::function_ref<void(size_t)> apply,
                                             std::string &why) {
  double bestExact = INFINITY;
  int64_t chosen = -1;
  int fitting = 0;
  for (size_t i = 0; i < candidates && fitting < 2; ++i) {
    apply(i);
    Prediction p = predict(train, cluster);
    if (!p.ok) {
      why = p.why;
      continue;
    }
    ++fitting;
    if (p.result.stepTimeS < bestExact) {
      bestExact = p.result.stepTimeS;
      chosen = (int64_t)i;
    }
  }
  return chosen;
}

/// zero=auto (mixed sharding, as AMSP argues): per chunk, whether its
/// parameters, gradients and optimizer state are sharded over dp (ZeRO level
/// 0..3). Coordinate descent over the chunks on the skeleton simulation
/// (milliseconds a candidate): a candidate whose skeleton peak fits
/// mem-limit beats one that does not, then the faster wins (by more than
/// 0.1%: otherwise the less sharded stays). The skeleton leaves out
/// recomputation, so the candidates it saw are then emitted and simulated
/// exactly, best first, until two fit (with recompute=auto, memory saved by
/// sharding turns into less recomputation there), and the faster is kept.
void PlanBuilder::chooseZero(func::FuncOp train, const cost::Cluster &cluster) {
  auto started = std::chrono::steady_clock::now();
  const size_t chunks = sh.zeroChunks.size();
  struct Rough {
    bool fits = false;
    double t = INFINITY;
  };
  std::map<std::vector<int64_t>, Rough> seen;
  auto rough = [&](const std::vector<int64_t> &z) {
    if (auto it = seen.find(z); it != seen.end())
      return it->second;
    sh.zeroChunks = z;
    Rough r;
    if (sim::SimResult sr = skeletonStep(cluster); sr.ok) {
      r.t = sr.stepTimeS;
      r.fits = !sh.opts.memLimit || sr.maxPeakMemBytes <= (double)sh.opts.memLimit;
    }
    return seen[z] = r;
  };
  auto better = [](const Rough &a, const Rough &b) {
    if (a.fits != b.fits)
      return a.fits;
    return a.t < b.t * 0.999;
  };
  std::vector<int64_t> best(chunks, 0);
  Rough cur = rough(best);
  for (int sweep = 0; sweep < 2; ++sweep) {
    bool changed = false;
    for (size_t c = 0; c < chunks; ++c)
      for (int64_t z = 0; z <= 3; ++z) {
        if (z == best[c])
          continue;
        std::vector<int64_t> cand = best;
        cand[c] = z;
        if (Rough r = rough(cand); better(r, cur)) {
          best = std::move(cand);
          cur = r;
          changed = true;
        }
      }
    if (!changed)
      break;
  }
  std::vector<std::pair<Rough, std::vector<int64_t>>> ranked;
  for (auto &[z, r] : seen)
    if (r.t < INFINITY)
      ranked.push_back({r, z});
  std::stable_sort(ranked.begin(), ranked.end(),
                   [&](const auto &a, const auto &b) { return better(a.first, b.first); });
  std::string why;
  int64_t chosen = fasterOfFirstTwoFitting(
      train, cluster, ranked.size(), [&](size_t i) { sh.zeroChunks = ranked[i].second; }, why);
  // Nothing fits: shard everything, and let the emission say by how much
  // the plan is over the limit.
  sh.zeroChunks = chosen >= 0 ? ranked[chosen].second : std::vector<int64_t>(chunks, 3);
  sh.zeroSearchCandidates = (int64_t)seen.size();
  sh.zeroSearchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

/// --explain: the chosen plan against the best plan of each other schedule
/// (same parallel sizes, zero, recompute and mem-limit), as predicted by the
/// simulator on the cluster.
void PlanBuilder::explain(func::FuncOp train, const cost::Cluster &cluster) {
  llvm::raw_ostream &os = llvm::errs();
  ScheduleConfig chosen = sh.sched;
  auto groupsText = [](llvm::ArrayRef<int64_t> g) {
    std::string s;
    for (int64_t x : g)
      s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  };
  auto row = [&](llvm::StringRef name, const Prediction &p, bool mark) {
    os << (mark ? "* " : "  ") << llvm::format("%-28s", name.str().c_str());
    if (!p.ok) {
      os << "does not fit or run: " << p.why << "\n";
      return;
    }
    const sim::SimResult &r = p.result;
    os << llvm::format("%9.4f s %12.0f tok/s  bubble %5.1f%%  exposed comm %5.1f%%  "
                       "all-idle %5.1f%%  recompute %4.1f%%  peak %8.3f GiB\n",
                       r.stepTimeS, r.tokensPerS, 100 * r.bubbleFrac, 100 * r.exposedCommFrac,
                       100 * r.allDeviceIdleFrac, 100 * r.recomputeFrac,
                       r.maxPeakMemBytes / 1073741824.0);
  };
  os << "pipemesh-opt --explain: pp=" << sh.opts.pp << " dp=" << sh.opts.dp
     << " vpp=" << sh.opts.vpp << " microbatches=" << sh.opts.microbatches
     << " zero=" << groupsText(sh.zeroChunks) << " recompute=" << sh.opts.recompute
     << (sh.opts.memLimit ? " mem-limit=" + std::to_string(sh.opts.memLimit) : std::string())
     << " on cluster " << cluster.name << " (simulated step, * = chosen)\n";
  std::string chosenName = scheduleKindName(chosen.kind).str();
  if (chosen.kind == ScheduleKind::Elastic)
    chosenName += " " + groupsText(chosen.fwdGroups) + "/" + groupsText(chosen.bwdGroups);
  row(chosenName, predict(train, cluster), true);
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                         ScheduleKind::BFS, ScheduleKind::ZBH1, ScheduleKind::ZBH2,
                         ScheduleKind::Elastic}) {
    if (k == chosen.kind)
      continue;
    ScheduleConfig c = chosen;
    c.kind = k;
    c.fwdGroups.clear();
    c.bwdGroups.clear();
    std::string why;
    if ((k == ScheduleKind::Interleaved && c.vpp == 1) || !validateSchedule(c, why))
      continue;
    sh.sched = c;
    std::string name = scheduleKindName(k).str();
    if (k == ScheduleKind::Elastic) {
      if (failed(chooseGroups(train, cluster)))
        continue;
      name += " " + groupsText(sh.sched.fwdGroups) + "/" + groupsText(sh.sched.bwdGroups);
    }
    row(name, predict(train, cluster), false);
  }
  sh.sched = chosen;
}

LogicalResult PlanBuilder::run(llvm::raw_ostream &os) {
  if (failed(checkOptions()))
    return failure();
  auto train = sh.module.lookupSymbol<func::FuncOp>("train_step");
  if (!train)
    return sh.module.emitError("no @train_step: run --pmesh-autodiff first");
  auto step = detail::analyzeTrainStep(train, sh.opts.pp, sh.opts.pp * sh.opts.vpp);
  if (failed(step))
    return failure();
  sh.step = std::move(*step);
  if (failed(classifyInputs(train)) || failed(collectParams()))
    return failure();
  countFlops(train);
  int64_t maxTag = sh.step.numChannels * sh.opts.microbatches - 1;
  if (maxTag > kMaxMessageTag)
    return sh.module.emitError()
           << "the plan needs message tags up to " << maxTag << " (" << sh.step.numChannels
           << " values cross pipeline ranks, x " << sh.opts.microbatches
           << " micro-batches), more than the " << kMaxMessageTag
           << " MPI guarantees: use fewer micro-batches or pipeline stages";

  cost::Cluster cluster;
  if (sh.opts.autoGroups || sh.opts.explain || sh.opts.zeroAuto) {
    std::string why;
    if (!cost::Cluster::load(sh.opts.cluster, cluster, why))
      return sh.module.emitError() << "cluster=" << sh.opts.cluster << ": " << why;
  }
  // zero=auto first (with the schedule's default groups), then the groups
  // for the chosen sharding.
  if (sh.opts.zeroAuto && sh.opts.dp > 1)
    chooseZero(train, cluster);
  if (sh.opts.autoGroups && failed(chooseGroups(train, cluster)))
    return failure();
  if (sh.opts.explain)
    explain(train, cluster);
  auto built = buildManifest(train);
  if (failed(built))
    return failure();
  json::Object m = std::move(*built);

  std::string blob;
  if (failed(detail::writeWeights(sh.module, weights, sh.opts.shapesOnly, blob)))
    return failure();
  std::string manifestText;
  llvm::raw_string_ostream ms(manifestText);
  ms << json::Value(std::move(m));
  uint64_t hash = fnv1a64(blob, fnv1a64(manifestText));
  uint32_t version = kPlanFormatVersion, reserved = 0;
  uint64_t lm = manifestText.size(), lw = blob.size();
  os.write(kPlanMagic, 8);
  os.write(reinterpret_cast<const char *>(&version), 4);
  os.write(reinterpret_cast<const char *>(&reserved), 4);
  os.write(reinterpret_cast<const char *>(&lm), 8);
  os.write(reinterpret_cast<const char *>(&lw), 8);
  os.write(reinterpret_cast<const char *>(&hash), 8);
  os << manifestText << blob;
  return success();
}

} // namespace

LogicalResult emitPlan(ModuleOp module, const CompileOptions &opts, llvm::raw_ostream &os) {
  PlanBuilder builder(module, opts);
  return builder.run(os);
}

} // namespace pipemesh::plan
