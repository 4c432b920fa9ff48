//===- PlanEmitter.cpp - module -> plan artifact ---------------------------===//
//
// PlanBuilder: checks the options, analyzes @train_step into chunks and
// phases (StagedStep), builds the pmesh.rank_program of every pipeline rank
// (RankPrograms), emits each rank's buffers and instruction stream
// (RankEmitter.cpp) with the least recomputation that fits mem-limit, runs
// the deadlock check, and writes the manifest and weights
// (docs/plan-format.md). For pipeline rank p the program is:
//
//   zero the persistent gradients
//   for each action of p's schedule (forward or backward of a chunk on a
//   micro-batch): the chunk's ops of that phase on that micro-batch's
//   buffers; `recv` before the first use of a value computed on another
//   rank, `send` right after computing a value another rank reads; the
//   data-parallel reduction of a layer's gradients right after their last
//   accumulation of the step
//   the tied-parameter all-reduce, wait_sends, adamw, (zero 1/2) async
//   all-gathers of the updated shards, one per layer, each completed by a
//   wait_collectives "keep" before its first read in the next step
//
// Every (value, micro-batch) gets its own buffer; the memory planner over
// the whole unrolled program gives each its lifetime, so activations of
// micro-batches in flight never alias while those of finished ones share
// memory. Parameters, gradients, moments and constants persist. The dp
// replicas of a pipeline rank run the same program (their shards and peers
// differ). The searches (groups=auto, zero=auto) and --explain are in
// PlanSearch.cpp.
//
//===----------------------------------------------------------------------===//
#include "PerItemDiagnostics.h"
#include "PlanBuilder.h"
#include "RankPrograms.h"
#include "SkeletonJob.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Plan/DeadlockCheck.h"
#include "pipemesh/Plan/MemoryPlanner.h"
#include "pipemesh/Sim/PlanLoader.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Threading.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"

#include <chrono>

using namespace mlir;
namespace json = llvm::json;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan {
namespace detail {

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
  sh.sched.deferW = o.deferW.value_or(DeferW::None);
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
  sh.prefetch = o.prefetch;
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

/// The model FLOPs of one micro-batch's forward and backward, as MFU counts
/// them (PaLM, appendix B): every GEMM once, attention's score matrix whole
/// (a causal mask does not halve it; a sliding window's band is window keys
/// wide), nothing that recomputation adds.
void PlanBuilder::countFlops(func::FuncOp train) {
  train.walk([&](Operation *op) {
    if (auto mm = dyn_cast<pm::MatMulOp>(op)) {
      auto shape = cast<RankedTensorType>(mm.getType()).getShape();
      auto a = cast<RankedTensorType>(mm.getA().getType()).getShape();
      int64_t k = mm.getTransposeA() ? a[a.size() - 2] : a.back();
      sh.flopsPerMicrobatch += 2.0 * shapes::numElements(shape) * k;
    }
    auto attentionFlops = [&](Value q, Value k, int64_t window, double matmuls) {
      auto qs = cast<RankedTensorType>(q.getType()).getShape();
      auto ks = cast<RankedTensorType>(k.getType()).getShape();
      int64_t keys = ks[ks.size() - 2];
      if (window > 0)
        keys = std::min(keys, window);
      sh.flopsPerMicrobatch += matmuls * 2.0 * shapes::numElements(qs) * keys;
    };
    if (auto a = dyn_cast<pm::AttentionOp>(op))
      attentionFlops(a.getQ(), a.getK(), a.getWindow(), 2);
    // Four: dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q. The kernel's
    // fifth, the probabilities recomputed from Q K^T, is hardware work.
    if (auto a = dyn_cast<pm::AttentionGradOp>(op))
      attentionFlops(a.getQ(), a.getK(), a.getWindow(), 4);
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

/// `o`'s members and the members `extra` writes (`extraKeys`), in key order:
/// what `os << json::Value(o with them)` writes, without building them.
static void writeObject(json::OStream &j, const json::Object &o,
                        llvm::ArrayRef<llvm::StringRef> extraKeys,
                        llvm::function_ref<void(llvm::StringRef)> extra) {
  std::vector<std::pair<llvm::StringRef, const json::Value *>> members;
  for (const auto &kv : o)
    members.push_back({kv.first, &kv.second});
  for (llvm::StringRef k : extraKeys)
    members.push_back({k, nullptr});
  llvm::sort(members, [](const auto &a, const auto &b) { return a.first < b.first; });
  j.object([&] {
    for (auto &[key, value] : members) {
      j.attributeBegin(key);
      if (value)
        j.value(*value);
      else
        extra(key);
      j.attributeEnd();
    }
  });
}

static json::Object bufferJson(const Buffer &b, int64_t id) {
  json::Object o{{"id", id},          {"name", b.name},
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
    o["elem_offset"] = 0;
    o["shard_numel"] = b.shardNumel;
    o["padded_numel"] = b.paddedNumel;
  }
  return o;
}

json::Object PlanBuilder::rankJson(const RankPlan &rp) {
  // dp rank 0's program of pipeline rank rp.pp; the other replicas derive
  // from it (expandReplicas: peers, tied group and shard offsets shifted by
  // the dp rank, norm_dp0_only resolved).
  json::Object groups;
  for (auto &[name, members] : rankGroups(rp))
    groups[name] = json::Array(members);
  std::string schedule;
  for (const std::string &t : rp.row)
    schedule += (schedule.empty() ? "" : " ") + t;
  return json::Object{{"rank", rp.pp * sh.opts.dp},
                      {"pp_rank", rp.pp},
                      {"dp_rank", 0},
                      {"chunks", json::Array(rp.chunks)},
                      {"groups", std::move(groups)},
                      {"first_stage", rp.firstStage},
                      {"last_stage", rp.lastStage},
                      {"schedule", schedule},
                      {"arena_bytes", rp.arenaBytes},
                      {"persistent_bytes", rp.persistentBytes},
                      {"activation_peak_bytes", rp.activationPeak},
                      {"recompute", recomputeName(rp.recompute, sh.step.pp)}};
}

json::Object PlanBuilder::manifestWithoutRanks() {
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
      {"activations", o.activations},
      {"param_dtype", o.params},
      {"grad_reduce", o.gradReduce},
      {"parallel", parallelJson()},
      {"inputs", std::move(inputs)},
      {"params", std::move(params)}};
}

std::string PlanBuilder::manifestText(std::vector<RankPlan> &ranks) {
  std::string text;
  llvm::raw_string_ostream os(text);
  json::OStream j(os);
  writeObject(j, manifestWithoutRanks(), {"ranks"}, [&](llvm::StringRef) {
    j.array([&] {
      for (RankPlan &rp : ranks)
        writeObject(j, rankJson(rp), {"buffers", "program"}, [&](llvm::StringRef key) {
          j.array([&] {
            if (key == "buffers") {
              for (auto [i, b] : llvm::enumerate(rp.buffers))
                j.value(bufferJson(b, (int64_t)i));
              return;
            }
            for (; !rp.program.empty(); rp.program.pop_front()) // each freed once written
              j.value(std::move(rp.program.front()).toJson());
          });
        });
    });
  });
  return text;
}

json::Object PlanBuilder::parallelJson() {
  const CompileOptions &o = sh.opts;
  json::Object parallel{{"pp", o.pp},
                        {"dp", o.dp},
                        {"vpp", o.vpp},
                        {"microbatches", o.microbatches},
                        {"schedule", o.schedule},
                        {"zero", *llvm::max_element(sh.zeroChunks)},
                        {"world_size", o.pp * o.dp}};
  if (o.dp > 1)
    parallel["replicas_elided"] = true; // one program per pipeline rank
  if (o.dpCollectives != "flat")
    parallel["dp_collectives"] = o.dpCollectives;
  if (effectiveKind(sh.sched) == ScheduleKind::Interleaved)
    parallel["group"] = effectiveGroup(sh.sched);
  if (llvm::any_of(sh.zeroChunks, [&](int64_t z) { return z != sh.zeroChunks[0]; })) {
    json::Array zc;
    for (int64_t z : sh.zeroChunks)
      zc.push_back(z);
    parallel["zero_chunks"] = std::move(zc);
  }
  if (o.dp > 1 && llvm::is_contained(sh.zeroChunks, 3))
    parallel["prefetch"] = sh.prefetch; // layers gathered ahead
  if (!sh.prefetchSearch.empty()) {
    json::Array tried;
    for (auto [depth, t] : sh.prefetchSearch)
      tried.push_back(json::Object{{"prefetch", depth},
                                   {"step_s", t < INFINITY ? json::Value(t) : json::Value(nullptr)}});
    parallel["prefetch_search"] = json::Object{{"cluster", sh.opts.cluster},
                                               {"tried", std::move(tried)}};
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
  if (sh.sched.deferW != DeferW::None)
    parallel["defer_w"] = deferWName(sh.sched.deferW);
  if (effectiveKind(sh.sched) != sh.sched.kind)
    parallel["schedule_run"] = scheduleKindName(effectiveKind(sh.sched));
  return parallel;
}

/// Pipeline rank p's program, with the least recomputation that fits: on
/// failure an over-limit message in `overLimit` (emitted by the caller, so
/// that ranks emitted in parallel report as a loop over them would), or
/// diagnostics of their own.
LogicalResult PlanBuilder::emitRank(int64_t p, RankPlan &out, std::string &overLimit) {
  const int64_t limit = sh.opts.memLimit;
  // recompute=auto: the least recomputation that fits the limit (the late
  // stages, with few micro-batches in flight, need none). The smallest
  // plan tried: more recomputation does not always mean less memory (a
  // zero-bubble W keeps the recomputed activations its B made), so when
  // nothing fits the error names the smallest.
  //
  // A trial whose live bytes alone are over the limit is not laid out
  // (RankPlan::overBound): the same answers, the planner's time saved; its
  // bound stands in for its size in `smallest`.
  Recompute smallest;
  int64_t smallestBytes = -1;
  auto emitWith = [&](Recompute r, bool layOut = false) {
    out = RankPlan();
    RankEmitter re(sh, p, r, layOut ? 0 : limit);
    if (failed(re.run(out)))
      return false;
    out.recompute = r;
    if (smallestBytes < 0 || out.arenaBytes < smallestBytes) {
      smallest = r;
      smallestBytes = out.arenaBytes;
    }
    return true;
  };
  auto fits = [&] { return !limit || out.arenaBytes <= limit; };
  // recompute=auto's search; forW: with a split backward's W re-running
  // what it needs (none is then the same plan, so it starts at selective).
  auto search = [&](bool forW) -> LogicalResult {
    auto with = [&](Recompute r) {
      r.againForW = forW;
      return r;
    };
    if (!forW && !emitWith(Recompute::none()))
      return failure();
    if (!forW && fits())
      return success();
    if (!emitWith(with(Recompute::selective())))
      return failure();
    if (fits())
      return success();
    // The fewest recomputed layers per chunk that fit (memory falls as
    // layers are added): a binary search over 1 .. the rank's most layers
    // in a chunk.
    int64_t most = 1;
    for (int64_t c = p; c < sh.step.numChunks; c += sh.step.pp)
      most = std::max<int64_t>(most, sh.step.layersIn(c).size());
    int64_t lo = 1, hi = most;
    while (lo < hi) {
      int64_t mid = (lo + hi) / 2;
      if (!emitWith(with(Recompute::firstLayers(mid))))
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
      if (!emitWith(with(Recompute::firstLayersOn(lo, mid))))
        return failure();
      if (fits())
        highPos = mid;
      else
        lowPos = mid + 1;
    }
    Recompute chosen = with(lowPos < sh.step.pp ? Recompute::firstLayersOn(lo, lowPos)
                            : lo == most       ? Recompute::full()
                                               : Recompute::firstLayers(lo));
    // The search's last plan is often the chosen one: no need to emit it again.
    return success(out.recompute == chosen || emitWith(chosen));
  };
  if (sh.opts.recompute != "auto") {
    Recompute r = sh.opts.recompute == "full"        ? Recompute::full()
                  : sh.opts.recompute == "selective" ? Recompute::selective()
                                                     : Recompute::none();
    if (!emitWith(r))
      return failure();
  } else if (failed(search(false))) {
    return failure();
  }
  // A zero-bubble W keeps what its B re-ran until the deferred W: on a
  // stage whose F and B run back to back (the last), recomputing then only
  // adds memory. Where nothing fit, W re-runs what it needs too.
  if (sh.opts.recompute == "auto" && !fits() && splitsBackward(sh.sched) && failed(search(true)))
    return failure();
  // Nothing fit: the error names the smallest plan tried, laid out.
  if (limit && out.arenaBytes > limit &&
      (out.overBound || (sh.opts.recompute == "auto" && smallestBytes < out.arenaBytes)) &&
      !emitWith(sh.opts.recompute == "auto" ? smallest : out.recompute, /*layOut=*/true))
    return failure();
  if (limit && out.arenaBytes > limit) {
    llvm::raw_string_ostream os(overLimit);
    os << "pipeline rank " << p << " needs " << out.arenaBytes << " bytes (persistent "
       << out.persistentBytes << ", activations " << out.activationPeak
       << ") with recompute=" << recomputeName(out.recompute, sh.step.pp)
       << ", over mem-limit=" << limit << " bytes: use more pipeline stages"
       << (llvm::all_of(sh.zeroChunks, [](int64_t z) { return z == 3; }) ? "" : ", zero=2 or 3")
       << ", or fewer micro-batches in flight"
       << (sh.opts.recompute == "auto" ? "" : ", or recompute=auto");
    return failure();
  }
  return success();
}

/// The rank programs that RankEmitter lowers.
LogicalResult PlanBuilder::buildRankPrograms(int64_t waitLag) {
  detail::annotateSharding(sh.module, sh.step, sh.zeroChunks, sh.opts.dp);
  sh.zeroLevels = detail::zeroLevels(sh.module);
  return detail::buildRankPrograms(sh.module, sh.step, sh.sched, sh.opts.dp, waitLag);
}

/// Every pipeline rank's program (lowered from the rank programs in the
/// IR), with the recomputation each needs. The ranks are independent (each
/// reads the module and the rank programs, nothing writes them): they are
/// emitted in parallel on the context's threads, and what a failing rank
/// reports is what a loop over the ranks that stopped at the first failure
/// would have.
LogicalResult PlanBuilder::emitRanks(func::FuncOp train, std::vector<RankPlan> &ranks) {
  const size_t pp = sh.opts.pp;
  ranks.assign(pp, RankPlan());
  std::vector<std::string> overLimit(pp);
  std::vector<char> ok(pp, 0);
  {
    PerItemDiagnostics diags(sh.module.getContext(), pp);
    (void)failableParallelForEachN(sh.module.getContext(), 0, pp, [&](size_t p) {
      diags.beginItem(p);
      ok[p] = succeeded(emitRank(p, ranks[p], overLimit[p]));
      diags.endItem();
      // A failure stops the ranks not started yet: they come after it.
      return success(ok[p]);
    });
    // Each rank's diagnostics in rank order, up to the first that failed.
    for (size_t p = 0; p < pp; ++p) {
      diags.report(p);
      if (!ok[p]) {
        if (!overLimit[p].empty())
          return sh.module.emitError() << overLimit[p];
        return failure();
      }
    }
  }
  for (const RankPlan &rp : ranks)
    for (const std::string &c : rp.constantsUsed)
      weights.constants[c] = {};
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

std::map<std::string, std::vector<int64_t>> PlanBuilder::rankGroups(const RankPlan &rp) const {
  const int64_t dp = sh.opts.dp;
  std::map<std::string, std::vector<int64_t>> groups{{"dp", {}}, {"tied", {}}};
  for (int64_t e = 0; e < dp; ++e)
    groups["dp"].push_back(rp.pp * dp + e);
  if (rp.tied)
    for (int64_t q : sh.tiedRanks)
      groups["tied"].push_back(q * dp);
  return groups;
}

std::string PlanBuilder::ranksDeadlock(const std::vector<RankPlan> &ranks) {
  std::vector<RankProgram> programs;
  for (const RankPlan &rp : ranks) {
    RankProgram prog;
    prog.rank = rp.pp * sh.opts.dp;
    prog.groups = rankGroups(rp);
    // dp replicas run the same program against their own peers and reach
    // their collectives in the same order: replica 0 stands for all, as in
    // checkPlanDeadlock of an elided manifest.
    prog.groups["dp"] = {prog.rank};
    std::map<int64_t, int64_t> bytes;
    for (auto [i, b] : llvm::enumerate(rp.buffers))
      bytes[(int64_t)i] = b.bytes();
    std::string why;
    if (!readCommunication(InstrProgramView(rp.program), bytes, prog, why))
      return why;
    programs.push_back(std::move(prog));
  }
  return findDeadlock(programs);
}

bool PlanBuilder::jobOfRanks(const std::vector<RankPlan> &ranks, sim::LoadedPlan &out,
                             std::string &why) {
  const CompileOptions &o = sh.opts;
  sim::PlanInfo info;
  info.batch = o.batch;
  info.seq = o.seq;
  info.pp = o.pp;
  info.dp = o.dp;
  info.vpp = o.vpp;
  info.microbatches = o.microbatches;
  info.worldSize = o.pp * o.dp;
  info.zero = *llvm::max_element(sh.zeroChunks);
  info.schedule = o.schedule;
  info.shapesOnly = o.shapesOnly;
  info.hierarchicalDp = o.dpCollectives == "hierarchical";
  info.flopsPerStep = sh.flopsPerMicrobatch * o.microbatches * o.dp;
  std::vector<InstrProgramView> views;
  views.reserve(ranks.size()); // sources point into it
  std::vector<sim::RankSource> sources(ranks.size());
  for (auto [k, rp] : llvm::enumerate(ranks)) {
    sim::RankSource &src = sources[k];
    src.rank = rp.pp * o.dp;
    src.path = "pipeline rank " + std::to_string(rp.pp);
    for (auto [i, b] : llvm::enumerate(rp.buffers)) {
      sim::BufferDesc d;
      d.id = (int64_t)i;
      d.bytes = b.bytes();
      for (int64_t dim : b.shape)
        d.numel *= (d.lastDim = dim);
      d.aliasOf = b.aliasOf;
      d.persistent = sim::isPersistentKind(b.kind);
      src.buffers.push_back(d);
    }
    src.groups = rankGroups(rp);
    src.arenaBytes = rp.arenaBytes;
    views.emplace_back(rp.program);
    src.program = &views.back();
  }
  return sim::jobFromRanks(info, /*replicasElided=*/o.dp > 1, sources, out, why);
}

/// Emits every rank; the first wait lag whose plan passes the deadlock
/// check wins.
LogicalResult PlanBuilder::buildRanks(func::FuncOp train, std::vector<RankPlan> &ranks,
                                      bool searching) {
  for (int64_t lag : kWaitLags) {
    if (failed(buildRankPrograms(lag)))
      return failure();
    // A search's hopeless candidate, at the shortest lag (a longer one only
    // keeps sent buffers longer).
    if (searching && lag == kWaitLags[0])
      if (std::string why = overEvenWithFullRecompute(); !why.empty())
        return sh.module.emitError() << why;
    // A lag whose rank programs deadlock is passed over before anything is
    // emitted at it (the emitted plan, whatever it recomputes, deadlocks
    // exactly when its rank programs do: communicationOfRankPrograms); at
    // lag 0, the last resort, the emitted plan's check names the
    // instructions that block.
    if (lag != 0 && !findDeadlock(communicationOfRankPrograms(sh.module, sh.tiedRanks)).empty())
      continue;
    if (failed(emitRanks(train, ranks)))
      return failure();
    std::string why = ranksDeadlock(ranks);
    if (why.empty())
      return success();
    if (lag == 0)
      return sh.module.emitError() << "the plan fails the deadlock check: " << why;
  }
  return failure();
}

/// A search's candidate that no recomputation fits is out before every
/// rank's recompute search (a dozen emissions each) finds that: each rank is
/// emitted with full recomputation (and, on a split backward, with W
/// re-running what it needs too), not laid out, and one whose live bytes
/// alone exceed mem-limit both ways rules the candidate out. Like the
/// recompute search, this takes more recomputation to need no more memory.
std::string PlanBuilder::overEvenWithFullRecompute() {
  const int64_t limit = sh.opts.memLimit;
  if (sh.opts.recompute != "auto" || !limit)
    return "";
  // Quiet: an emission that fails here fails the same way in emitRank.
  ScopedDiagnosticHandler quiet(sh.module.getContext(), [](Diagnostic &) { return success(); });
  const size_t pp = sh.opts.pp;
  std::vector<int64_t> least(pp, -1); // -1: may fit
  (void)failableParallelForEachN(sh.module.getContext(), 0, pp, [&](size_t p) {
    int64_t bytes = -1;
    for (bool forW : {false, true}) {
      if (forW && !splitsBackward(sh.sched))
        break;
      Recompute r = Recompute::full();
      r.againForW = forW;
      RankPlan rp;
      if (failed(RankEmitter(sh, p, r, limit).run(rp)) || !rp.overBound)
        return success();
      bytes = bytes < 0 ? rp.arenaBytes : std::min(bytes, rp.arenaBytes);
    }
    least[p] = bytes;
    return failure(); // the ranks after it need not be looked at
  });
  for (size_t p = 0; p < pp; ++p)
    if (least[p] > 0)
      return "pipeline rank " + std::to_string(p) + " needs at least " +
             std::to_string(least[p]) +
             " bytes with full recomputation (persistent plus the most bytes alive at once), "
             "over mem-limit=" + std::to_string(limit) + " bytes";
  return "";
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
  sh.step.bf16Activations = sh.opts.activations == "bf16";
  sh.step.bf16Params = sh.opts.params == "bf16";
  sh.step.bf16GradReduce = sh.opts.gradReduce == "bf16";
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
  if (sh.opts.autoGroups || sh.opts.explain || sh.opts.zeroAuto || sh.opts.prefetchAuto) {
    std::string why;
    if (!cost::Cluster::load(sh.opts.cluster, cluster, why))
      return sh.module.emitError() << "cluster=" << sh.opts.cluster << ": " << why;
    // The runtime refuses an uneven layout; the search would simulate none.
    if (sh.opts.dpCollectives == "hierarchical")
      for (int64_t p = 0; p < sh.opts.pp; ++p) {
        std::vector<int64_t> members;
        for (int64_t d = 0; d < sh.opts.dp; ++d)
          members.push_back(p * sh.opts.dp + d);
        std::string uneven =
            cluster.hierarchicalSpreadError(members, cluster.spreadOf(members));
        if (!uneven.empty())
          return sh.module.emitError() << uneven;
      }
  }
  // zero=auto first (with the schedule's default groups), then the groups
  // for the chosen sharding.
  if (sh.opts.zeroAuto && sh.opts.dp > 1)
    chooseZero(train, cluster);
  if (sh.opts.autoGroups) {
    if (failed(chooseGroups(train, cluster)))
      return failure();
    sh.prefetchSearch.clear(); // zero=auto's depth was for the default groups
    // zero=auto chose its sharding for the default groups and backward: a
    // uniform level it found nearly as good may suit the groups and W
    // placement chosen for another better (13B at dp=16, 100 Gb/s: zero=auto's
    // ZeRO-0/2 mix with defer-w=bucket 2.01 s, ZeRO-2 with defer-w=all 1.94
    // s). The groups for that level are searched too; the faster pair stays.
    if (sh.opts.zeroAuto && !sh.zeroUniformAlternative.empty() && !sh.opts.prefetchAuto) {
      auto stepOfChoice = [&]() -> double {
        Prediction p = predictCurrent(train, cluster);
        return p.ok ? p.result.stepTimeS : INFINITY;
      };
      PlanChoice first = currentChoice();
      const double firstStep = stepOfChoice();
      std::optional<Searched> firstSearched = std::move(searched);
      sh.zeroChunks = sh.zeroUniformAlternative;
      double secondStep = INFINITY;
      {
        // A level whose groups do not fit is no alternative, not an error.
        ScopedDiagnosticHandler quiet(sh.module.getContext(),
                                      [](Diagnostic &) { return success(); });
        if (succeeded(chooseGroups(train, cluster)))
          secondStep = stepOfChoice();
      }
      if (firstStep <= secondStep) {
        std::tie(sh.sched, sh.zeroChunks, sh.prefetch) =
            std::tie(first.sched, first.zeroChunks, first.prefetch);
        searched = std::move(firstSearched);
      }
    }
  }
  if (sh.opts.prefetchAuto)
    choosePrefetch(train, cluster);
  if (sh.opts.explain)
    explain(train, cluster);
  std::vector<RankPlan> ranks;
  if (searchedIsCurrent())
    ranks = std::move(searched->ranks);
  else if (failed(buildRanks(train, ranks)))
    return failure();
  searched.reset();
  std::string manifest = manifestText(ranks);

  std::string blob;
  if (failed(detail::writeWeights(sh.module, weights, sh.opts.shapesOnly, blob)))
    return failure();
  uint64_t hash = planChecksum(manifest, blob);
  uint32_t version = kPlanFormatVersion, reserved = 0;
  uint64_t lm = manifest.size(), lw = blob.size();
  os.write(kPlanMagic, 8);
  os.write(reinterpret_cast<const char *>(&version), 4);
  os.write(reinterpret_cast<const char *>(&reserved), 4);
  os.write(reinterpret_cast<const char *>(&lm), 8);
  os.write(reinterpret_cast<const char *>(&lw), 8);
  os.write(reinterpret_cast<const char *>(&hash), 8);
  os << manifest << blob;
  return success();
}

} // namespace detail

LogicalResult emitPlan(ModuleOp module, const CompileOptions &opts, llvm::raw_ostream &os) {
  detail::PlanBuilder builder(module, opts);
  return builder.run(os);
}

} // namespace pipemesh::plan
