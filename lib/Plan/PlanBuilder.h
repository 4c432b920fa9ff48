//===- PlanBuilder.h - the plan emitter's classes ----------------*- C++ -*-===//
//
// Internal to lib/Plan. PlanBuilder (PlanEmitter.cpp) turns a module into
// the plan artifact: it checks the options, emits every pipeline rank's
// program with a RankEmitter (RankEmitter.cpp), plans memory, writes the
// manifest and weights, and runs the searches (groups=auto, zero=auto) and
// --explain (PlanSearch.cpp), which emit and simulate candidates.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_PLAN_PLANBUILDER_H
#define PIPEMESH_LIB_PLAN_PLANBUILDER_H

#include "pipemesh/Plan/Plan.h"

#include "PlanInternal.h"
#include "StagedStep.h"

#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/Plan/Schedule.h"
#include "pipemesh/Plan/Sharding.h"
#include "pipemesh/Sim/PlanLoader.h"
#include "pipemesh/Sim/ProgramView.h"
#include "pipemesh/Sim/Simulator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"

#include <deque>
#include <map>
#include <set>

namespace pipemesh::plan::detail {

namespace json = llvm::json;
using mlir::DenseElementsAttr;
using mlir::FailureOr;
using mlir::LogicalResult;
using mlir::ModuleOp;
using mlir::Operation;
using mlir::RankedTensorType;
using mlir::Value;
using llvm::StringRef;
namespace func = mlir::func;

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
  /// A split backward's W (zb-h1/h2) re-runs the forward ops it needs
  /// instead of reading the ones its B re-ran, so B's recomputed activations
  /// die with B rather than waiting for the deferred W: more recompute, less
  /// memory (recompute=auto's last resort on such schedules).
  bool againForW = false;
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
    return kind == o.kind && layers == o.layers && positions == o.positions &&
           againForW == o.againForW;
  }
};
std::string recomputeName(Recompute r, int64_t pp);

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
  /// Every parameter's level under zeroChunks (`pmesh.zero`, zeroLevels),
  /// set with the rank programs.
  llvm::StringMap<int64_t> zeroLevels;
  /// ZeRO-3 gathers run this many layers ahead (CompileOptions::prefetch, or
  /// prefetch=auto's choice).
  int64_t prefetch = 1;
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
  /// groups=auto: candidates simulated and the search's wall time (seconds).
  int64_t searchCandidates = 0;
  double searchSeconds = 0;
  /// What zero=auto's search looked at.
  int64_t zeroSearchCandidates = 0;
  double zeroSearchSeconds = 0;
  /// zero=auto: the fastest uniform level of at most 2 that it simulated
  /// exactly and that fits, when its choice is another (empty otherwise).
  std::vector<int64_t> zeroUniformAlternative;
  /// What prefetch=auto simulated: (depth, step seconds; INFINITY: over mem-limit).
  std::vector<std::pair<int64_t, double>> prefetchSearch;
};

/// One instruction while a rank's program is emitted: its fields in order.
/// As a json::Object, every instruction allocated a hash table of at least
/// 64 entries (about 3.5 KB): building and freeing them was most of an
/// emission's time, and a plan held in memory took 30 times its text. The
/// object is built once, for the manifest (toJson), and a compute
/// instruction's `attrs` are read from its op only then.
class Instr {
public:
  Instr(std::initializer_list<json::Object::KV> fields);
  /// The field `key`, added (null) if absent.
  json::Value &operator[](const json::ObjectKey &key);
  const json::Value *get(llvm::StringRef key) const;
  const json::Array *getArray(llvm::StringRef key) const {
    const json::Value *v = get(key);
    return v ? v->getAsArray() : nullptr;
  }
  /// A compute op's attributes become the instruction's `attrs` (toJson).
  void setAttrsFrom(Operation *op) { attrsFrom = op; }
  json::Object toJson() &&;

private:
  llvm::SmallVector<json::Object::KV, 6> fields; // a compute op's: op in out flops bytes action
  Operation *attrsFrom = nullptr;
};

/// A rank's program as the plan's readers see it (sim::ProgramView: the
/// simulator's loader, the deadlock check), before it becomes JSON.
class InstrProgramView : public sim::ProgramView {
public:
  explicit InstrProgramView(const std::deque<Instr> &program) : program(program) {}
  size_t size() const override { return program.size(); }
  const json::Value *field(size_t k, llvm::StringRef key) const override {
    return program[k].get(key);
  }

private:
  const std::deque<Instr> &program;
};

/// A rank's instructions. A deque, not a vector: json::Value's move is not
/// noexcept, so a growing vector would deep-copy every instruction on each
/// reallocation.
using Program = std::deque<Instr>;

/// One pipeline rank's program, the template of its dp replicas (its dp
/// rank 0): shards hold their size but not their offset.
struct RankPlan {
  int64_t pp = 0;
  std::vector<Buffer> buffers;
  Program program;
  std::vector<std::string> row;
  std::vector<int64_t> chunks;
  bool tied = false, firstStage = false, lastStage = false;
  int64_t arenaBytes = 0, persistentBytes = 0, activationPeak = 0;
  /// The buffers were not laid out: activationPeak (and so arenaBytes) is
  /// the live-bytes lower bound, already over the emitter's `layoutUpTo`.
  bool overBound = false;
  std::set<std::string> constantsUsed;
  Recompute recompute;
};

/// Builds one pipeline rank's buffers and program.
class RankEmitter {
public:
  /// layoutUpTo for a plan that is never laid out (only its program is
  /// read): every plan's arena exceeds one byte.
  static constexpr int64_t kNoLayout = 1;
  /// layoutUpTo > 0: a plan whose arena cannot fit that many bytes (the
  /// persistent bytes plus the most bytes alive at one instruction exceed
  /// it) is not laid out (RankPlan::overBound): the recompute search only
  /// needs to know that it does not fit, and laying out is half the cost.
  RankEmitter(Shared &sh, int64_t p, Recompute recompute, int64_t layoutUpTo = 0)
      : sh(sh), step(sh.step), p(p), recompute(recompute), layoutUpTo(layoutUpTo) {}
  LogicalResult run(RankPlan &out);

private:
  struct ParamBufs {
    ParamStorage st;
    ShardLayout layout;
    int full = -1, shard = -1, grad = -1, gradShard = -1, m = -1, v = -1;
    int transientGrad = -1;
    /// params=bf16: the bf16 copy of the master (`full` at zero 0, `shard`
    /// above) that AdamW writes and zero 1-3 gather from.
    int copy = -1;
    /// What F and B read when the whole is persistent: the copy at zero 0
    /// with bf16 compute, else the whole.
    int readByCompute() const { return copy >= 0 && shard < 0 ? copy : full; }
    /// What a ZeRO gather sends: the shard's bf16 copy, or the shard.
    int gatherSource() const { return copy >= 0 && shard >= 0 ? copy : shard; }
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
    auto t = llvm::cast<RankedTensorType>(v.getType());
    Buffer b;
    b.name = std::move(name);
    b.shape.assign(t.getShape().begin(), t.getShape().end());
    b.dtype = kind == "activation" && step.storesBf16(v)
                  ? "bf16"
                  : detail::dtypeOf(t.getElementType());
    b.kind = kind.str();
    return b;
  }
  std::string tmpName() { return "v" + std::to_string(buffers.size()); }
  void emit(Instr inst) { program.push_back(std::move(inst)); }

  void createParamBuffers();
  /// The ZeRO level of a parameter (`pmesh.zero`, set by --pmesh-shard).
  int64_t zeroOf(StringRef name) const;
  FailureOr<int> operand(Value v, ActionCtx &ctx);
  /// operand() of each of `op`'s operands, in order.
  FailureOr<json::Array> operands(Operation *op, ActionCtx &ctx);
  int view(Value v, int of, StringRef name);
  int paramBuffer(StringRef name, ActionCtx &ctx);
  void ensureLoaded(int64_t mb);
  LogicalResult emitOp(Operation *op, ActionCtx &ctx);
  /// The cost model's work estimate of `op` as `i`'s "flops" and "bytes"
  /// (what pipemesh-sim turns into time), for the buffers `i` reads and
  /// writes.
  void setCost(Instr &i, Operation *op);
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
  int64_t layoutUpTo;
  std::vector<Buffer> buffers;
  Program program;
  std::vector<std::string> row;
  llvm::StringMap<ParamBufs> pbufs;
  std::vector<std::string> heldParams; // declaration order
  llvm::DenseMap<std::pair<Value, int64_t>, int> inst;
  llvm::DenseMap<Operation *, int> constBufs;
  llvm::DenseMap<Operation *, cost::OpCost> opCosts;
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
      emit(Instr{{"op", "free"}, {"bufs", std::move(bufs)}});
  }
  /// Async collectives issued and not yet waited for, in issue order (the
  /// previous step's parameter gathers first), each with the instructions
  /// its completion allows: a ZeRO-2/3 reduce-scatter's accumulation into
  /// the persistent shard, the frees of its transient gradients.
  struct InFlight {
    std::vector<Instr> then;
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
  int addWholeTemporary(StringRef param, StringRef suffix, StringRef dtype = "f32");
  /// A zero-3 whole parameter gathered for use, at its compute type.
  int addGatherTarget(StringRef param);
  /// The whole buffer of a prefetched parameter, after waiting for its
  /// gather (and with it every earlier prefetch).
  int takePrefetched(StringRef name);
  /// Waits (if still needed) for every async collective up to issue number
  /// `seq` and moves the parameters prefetched by them to `gathered`.
  void completePrefetchesThrough(int64_t seq);
  /// Completes the gathers of prefetched parameters that nothing took (a
  /// W that re-runs less than its B did) and moves them to `gathered`: a
  /// buffer's lifetime ends at its last use, and an async gather still
  /// writing into a buffer that the arena gave to another would corrupt it.
  void retirePrefetched();
  bool asyncCollectives = false; // issued any this step since the last wait
  /// Gradients reduce-scattered so far this step (a later tied sum adds the
  /// shards).
  llvm::StringSet<> scattered;
  /// Emits an async collective and queues what its completion allows;
  /// returns its issue number.
  int64_t issueAsync(Instr collective, InFlight after);
  /// A wait_collectives completing all but the `keep` most recent async
  /// collectives, then what their completion allows. `always`: even when
  /// this step issued nothing since the last one (the program's own waits,
  /// which may complete the previous step's parameter gathers); otherwise
  /// only if it did.
  void waitCollectives(bool always = false, int64_t keep = 0);
  std::set<std::string> constantsUsed;
};


/// The wait_sends lags tried, in order, until a plan does not deadlock: a
/// send completes `lag` actions later; 0 only at the end of the step.
inline constexpr int64_t kWaitLags[] = {1, 2, 4, 0};

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
  /// Lowers the rank programs in the IR (buildRankPrograms).
  LogicalResult emitRanks(func::FuncOp train, std::vector<RankPlan> &ranks);
  LogicalResult emitRank(int64_t p, RankPlan &out, std::string &overLimit);
  /// Why no recomputation fits the plan of the rank programs in the IR in
  /// mem-limit (empty: it may).
  std::string overEvenWithFullRecompute();
  /// --pmesh-shard and --pmesh-schedule at the current options: each action
  /// starts by completing the sends of the actions `waitLag` and more before
  /// it (0: only at the end of the step, the last resort when every lag
  /// fails the deadlock check).
  LogicalResult buildRankPrograms(int64_t waitLag);
  /// Every rank's program at the first wait lag that does not deadlock
  /// (checked on the rank programs in the IR, then on the emitted ranks).
  /// `searching`: predict() emits a search's candidate, and a candidate that
  /// no recomputation can fit is rejected before the recompute searches.
  LogicalResult buildRanks(func::FuncOp train, std::vector<RankPlan> &ranks,
                           bool searching = false);
  /// The deadlock check (DeadlockCheck.h) of the emitted ranks, read as
  /// they are (no manifest built); empty when they run to completion.
  std::string ranksDeadlock(const std::vector<RankPlan> &ranks);
  /// The emitted ranks as the simulator's job, read as they are (the
  /// simulator's loader through InstrProgramView, no manifest built).
  bool jobOfRanks(const std::vector<RankPlan> &ranks, sim::LoadedPlan &out, std::string &why);
  /// A rank's groups (dp; tied on ranks holding tied copies), global ranks.
  std::map<std::string, std::vector<int64_t>> rankGroups(const RankPlan &rp) const;
  /// The simulated step of the plan the current options make (errors, e.g.
  /// over mem-limit, in `why` instead of diagnostics).
  struct Prediction {
    bool ok = false;
    std::string why;
    sim::SimResult result;
    /// With `keepRanks`: the ranks simulated, when their emission reported
    /// nothing (what it would report is then not lost by reusing them).
    std::optional<std::vector<RankPlan>> ranks;
  };
  Prediction predict(func::FuncOp train, const cost::Cluster &cluster, bool keepRanks = false);
  /// What the searches set and the emission depends on besides the options.
  struct PlanChoice {
    ScheduleConfig sched;
    std::vector<int64_t> zeroChunks;
    int64_t prefetch = 1;
    bool operator==(const PlanChoice &o) const {
      return sched == o.sched && zeroChunks == o.zeroChunks && prefetch == o.prefetch;
    }
  };
  PlanChoice currentChoice() const { return {sh.sched, sh.zeroChunks, sh.prefetch}; }
  /// A search's chosen plan, emitted and simulated while searching: the
  /// compile writes these ranks, and --explain reports their simulation,
  /// instead of doing either again, if nothing was changed since.
  struct Searched {
    PlanChoice choice;
    std::vector<RankPlan> ranks;
    sim::SimResult result; // the search's simulation of them
  };
  std::optional<Searched> searched;
  /// Whether `searched` holds the current options' choice.
  bool searchedIsCurrent() const { return searched && searched->choice == currentChoice(); }
  /// The current options' simulation: the search's when it kept them, else
  /// predict()'s.
  Prediction predictCurrent(func::FuncOp train, const cost::Cluster &cluster);
  /// The skeleton simulation (SkeletonJob.h: no recompute, costs per
  /// action) of the current options' rank programs, with the first
  /// wait-lag that does not deadlock; !ok when none.
  sim::SimResult skeletonStep(const cost::Cluster &cluster);
  /// The searches' exact check: emits and simulates candidates in order
  /// (`apply(i)` sets the options of the i-th) until two fit, and returns
  /// the faster of those, or -1 with the last failure in `why`.
  /// The faster's ranks are kept in `searched` (set by apply of the
  /// returned index).
  int64_t fasterOfFirstTwoFitting(func::FuncOp train, const cost::Cluster &cluster,
                                  size_t candidates, llvm::function_ref<void(size_t)> apply,
                                  std::string &why);
  LogicalResult chooseGroups(func::FuncOp train, const cost::Cluster &cluster);
  void chooseZero(func::FuncOp train, const cost::Cluster &cluster);
  void choosePrefetch(func::FuncOp train, const cost::Cluster &cluster);
  /// (depth, simulated step; INFINITY when depth 1 does not fit), each
  /// depth tried appended to `tried`.
  std::pair<int64_t, double> fastestPrefetch(func::FuncOp train, const cost::Cluster &cluster,
                                             std::vector<std::pair<int64_t, double>> *tried);
  void explain(func::FuncOp train, const cost::Cluster &cluster);
  /// A rank's entry in the manifest but for its "buffers" and "program".
  json::Object rankJson(const RankPlan &rp);
  /// The manifest but for its "ranks".
  json::Object manifestWithoutRanks();
  /// The manifest's text (docs/plan-format.md), each rank's buffers and
  /// program written as they are read, the programs moved out of `ranks`:
  /// a large plan's JSON objects are never all built at once. With dp > 1
  /// the manifest holds dp rank 0's program of each pipeline rank
  /// (`parallel.replicas_elided`); its readers derive the other replicas
  /// (expandReplicas, pipemesh-run's plan reader, the simulator's loader).
  std::string manifestText(std::vector<RankPlan> &ranks);
  /// The manifest's `parallel` object (the searches' results included).
  json::Object parallelJson();

  Shared sh;
  detail::WeightsSpec weights;
};

} // namespace pipemesh::plan::detail

#endif // PIPEMESH_LIB_PLAN_PLANBUILDER_H
