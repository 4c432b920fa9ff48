//===- RankEmitter.cpp - one pipeline rank's buffers and program ---------===//
//
// Lowers @train_step / @optimizer_step into one pipeline rank's instruction
// stream (docs/plan-format.md, docs/parallel-plan.md), following its
// pmesh.rank_program: each compute action becomes the chunk's ops of that
// phase on that micro-batch's buffers (recomputed forward ops first where
// the backward needs them), with the sends, async data-parallel reductions
// and parameter waits lowered inside it at the op that makes them possible,
// then the memory planner lays out the buffers.
//
//===----------------------------------------------------------------------===//
#include "PlanBuilder.h"
#include "RankPrograms.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Plan/MemoryPlanner.h"

#include "mlir/IR/Diagnostics.h"

#include <functional>

using namespace mlir;
namespace json = llvm::json;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan::detail {

std::string recomputeName(Recompute r, int64_t pp) {
  if (r.kind == Recompute::None)
    return "none";
  const std::string forW = r.againForW ? ", again for W" : "";
  if (r.kind == Recompute::Selective)
    return "selective" + forW;
  auto layers = [](int64_t n) { return std::to_string(n) + (n == 1 ? " layer" : " layers"); };
  std::string all = r.layers == Recompute::kAll ? "full" : layers(r.layers);
  if (r.positions == 0)
    return all + forW;
  return all + " on micro-batches m % " + std::to_string(pp) + " < " +
         std::to_string(r.positions) + ", " + layers(r.layers - 1) + " on the others" + forW;
}


int64_t RankEmitter::zeroOf(StringRef name) const {
  return sh.opts.dp > 1 ? sh.zeroLevels.lookup(name) : 0;
}

void RankEmitter::createParamBuffers() {
  for (const ParamInfo &pi : sh.params) {
    auto it = step.holders.find(pi.name);
    bool held = it != step.holders.end() ? it->second.count(p) > 0 : p == 0;
    if (!held)
      continue;
    heldParams.push_back(pi.name);
    ParamBufs pb;
    pb.st = paramStorage(zeroOf(pi.name), sh.opts.dp, pi.trained, sh.step.bf16Params);
    pb.layout = shardLayout(shapes::numElements(pi.shape), sh.opts.dp);
    auto make = [&](StringRef kind, std::string name, bool sharded) {
      Buffer b;
      b.name = std::move(name);
      b.dtype = kind == "param_copy" ? "bf16" : "f32";
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
    // With a shard as master, a bf16-computed whole is only a copy.
    if (pb.st.fullParam)
      pb.full = make(pb.st.bf16Compute && pb.st.paramShard ? "param_copy" : "param", pi.name,
                     false);
    if (pb.st.paramShard)
      pb.shard = make("param", pi.name + ".shard", true);
    if (pb.st.masterCopy)
      pb.copy = pb.st.paramShard ? make("param_copy", pi.name + ".shard.bf16", true)
                                 : make("param_copy", pi.name + ".bf16", false);
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
  b.dtype = buffers[root(of)].dtype; // a view stores what its root stores
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
  emit(Instr{{"op", "load_microbatch"},
             {"index", mb},
             {"what", what},
             {"out", std::move(outs)}});
  loaded[mb] = {tok, tgt};
}

int RankEmitter::addWholeTemporary(StringRef param, StringRef suffix, StringRef dtype) {
  const ParamInfo &pi = sh.params[sh.paramIndex.lookup(param)];
  Buffer b;
  b.name = pi.name + suffix.str();
  b.shape = pi.shape;
  b.dtype = dtype.str();
  b.kind = "activation";
  return add(std::move(b));
}

int RankEmitter::addGatherTarget(StringRef param) {
  return addWholeTemporary(param, ".full", pbufs[param].st.bf16Compute ? "bf16" : "f32");
}

int RankEmitter::paramBuffer(StringRef name, ActionCtx &ctx) {
  ParamBufs &pb = pbufs[name];
  if (!pb.st.gatherBeforeUse)
    return pb.readByCompute();
  if (auto it = gathered.find(name); it != gathered.end())
    return it->second;
  if (prefetched.count(name))
    return takePrefetched(name);
  int id = addGatherTarget(name);
  emit(Instr{{"op", "allgather"},
             {"group", "dp"},
             {"in", json::Array{pb.gatherSource()}},
             {"out", json::Array{id}}});
  gathered[name] = id;
  return id;
}

FailureOr<json::Array> RankEmitter::operands(Operation *op, ActionCtx &ctx) {
  json::Array ids;
  for (Value v : op->getOperands()) {
    auto id = operand(v, ctx);
    if (failed(id))
      return failure();
    ids.push_back(*id);
  }
  return ids;
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
    emit(Instr{{"op", "zero"}, {"out", json::Array{pb.transientGrad}}});
  }
  return pb.transientGrad;
}

Instr::Instr(std::initializer_list<json::Object::KV> init) {
  fields.reserve(init.size());
  // Moved out of the list, as json::Object's own constructor does.
  for (const json::Object::KV &kv : init)
    fields.push_back({kv.K, std::move(const_cast<json::Value &>(kv.V))});
}

json::Value &Instr::operator[](const json::ObjectKey &key) {
  for (json::Object::KV &kv : fields)
    if (StringRef(kv.K) == StringRef(key))
      return kv.V;
  fields.push_back({key, nullptr});
  return fields.back().V;
}

const json::Value *Instr::get(StringRef key) const {
  for (const json::Object::KV &kv : fields)
    if (StringRef(kv.K) == key)
      return &kv.V;
  return nullptr;
}

json::Object Instr::toJson() && {
  json::Object o;
  for (json::Object::KV &kv : fields)
    o.try_emplace(std::move(kv.K), std::move(kv.V));
  if (attrsFrom) {
    // Only the op's own (ODS) attributes: the runtime refuses attributes it
    // does not know, and discardable ones (pmesh.stage, or any a user's input
    // carried) say nothing about what the op computes.
    json::Object attrs;
    ArrayRef<StringAttr> inherent;
    if (auto info = attrsFrom->getName().getRegisteredInfo())
      inherent = info->getAttributeNames();
    for (NamedAttribute a : attrsFrom->getAttrs())
      if (llvm::is_contained(inherent, a.getName()))
        attrs[a.getName().getValue()] = detail::attrToJson(a.getValue());
    // Defaults are not stored on the op but the runtime needs them spelled out.
    if (auto mm = dyn_cast<pm::MatMulOp>(attrsFrom)) {
      attrs["transpose_a"] = mm.getTransposeA();
      attrs["transpose_b"] = mm.getTransposeB();
    }
    if (!attrs.empty())
      o["attrs"] = std::move(attrs);
  }
  return o;
}

int64_t RankEmitter::issueAsync(Instr collective, InFlight after) {
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
    int id = addGatherTarget(n);
    in.push_back(pbufs[n].gatherSource());
    out.push_back(id);
    issued.push_back({n, id});
  }
  if (issued.empty())
    return;
  int64_t seq = issueAsync(Instr{{"op", "allgather"},
                                 {"group", "dp"},
                                 {"in", std::move(in)},
                                 {"out", std::move(out)}},
                           {});
  for (auto &[n, id] : issued)
    prefetched[n] = {id, seq};
}

void RankEmitter::completePrefetchesThrough(int64_t seq) {
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
}

int RankEmitter::takePrefetched(StringRef name) {
  completePrefetchesThrough(prefetched.lookup(name).second);
  return gathered.lookup(name);
}

void RankEmitter::retirePrefetched() {
  int64_t last = -1;
  for (auto &kv : prefetched)
    last = std::max(last, kv.second.second);
  if (last >= 0)
    completePrefetchesThrough(last);
}

void RankEmitter::waitCollectives(bool always, int64_t keep) {
  if (!always && !asyncCollectives)
    return;
  if (keep > 0)
    emit(Instr{{"op", "wait_collectives"}, {"keep", keep}});
  else
    emit(Instr{{"op", "wait_collectives"}});
  if (keep == 0)
    asyncCollectives = false;
  json::Array freed;
  while ((int64_t)inFlight.size() > keep) {
    InFlight done = std::move(inFlight.front());
    inFlight.pop_front();
    for (Instr &i : done.then)
      emit(std::move(i));
    for (json::Value &b : done.freed)
      freed.push_back(std::move(b));
  }
  if (!freed.empty())
    emit(Instr{{"op", "free"}, {"bufs", std::move(freed)}});
}

LogicalResult RankEmitter::emitOp(Operation *op, ActionCtx &ctx) {
  int64_t mb = ctx.a.microbatch;
  if (auto r = dyn_cast<pm::ReshapeOp>(op)) {
    auto in = operand(r.getInput(), ctx);
    if (failed(in))
      return failure();
    inst[{r.getResult(), mb}] = view(r.getResult(), *in, "");
  } else if (cost::accumulatesDirectly(op)) {
    // Lowered with the accumulation it feeds (below).
  } else if (auto acc = dyn_cast<pm::AccumulateGradOp>(op)) {
    if (!pbufs.count(acc.getParam()) || pbufs[acc.getParam()].m < 0)
      return acc.emitOpError() << "accumulates the gradient of '" << acc.getParam()
                               << "', which @optimizer_step does not update";
    int dst = gradTarget(acc.getParam());
    if (Operation *producer = cost::directlyAccumulated(acc)) {
      // The weight gradient added into the parameter's (scaled): the
      // embedding's row by row, a GEMM with beta = 1. No temporary is
      // zeroed or written, then read back and added, per micro-batch.
      auto ins = operands(producer, ctx);
      if (failed(ins))
        return failure();
      Instr i{{"op", producer->getName().getStringRef().drop_front(6)},
              {"in", std::move(*ins)},
              {"out", json::Array{dst}},
              {"accumulate", true},
              {"scale", sh.invM}};
      i.setAttrsFrom(producer);
      setCost(i, producer);
      emit(std::move(i));
      return success();
    }
    auto src = operand(acc.getGrad(), ctx);
    if (failed(src))
      return failure();
    emit(Instr{{"op", "accumulate"},
               {"in", json::Array{*src}},
               {"out", json::Array{dst}},
               {"scale", sh.invM}});
  } else {
    if (op->getDialect()->getNamespace() != "pmesh")
      return op->emitOpError("cannot be emitted into a plan");
    auto ins = operands(op, ctx);
    if (failed(ins))
      return failure();
    json::Array outs;
    for (Value r : op->getResults()) {
      int id = add(valueBuffer(r, "activation", tmpName()));
      inst[{r, mb}] = id;
      outs.push_back(id);
    }
    Instr i{{"op", op->getName().getStringRef().drop_front(6)},
            {"in", std::move(*ins)},
            {"out", std::move(outs)}};
    i.setAttrsFrom(op);
    setCost(i, op);
    emit(std::move(i));
  }
  if (ctx.recompute)
    return success();
  if (op == step.lossOp)
    emit(Instr{{"op", "loss"},
               {"in", json::Array{inst.lookup({step.loss, mb})}},
               {"scale", sh.invM}});
  return success();
}

void RankEmitter::setCost(Instr &i, Operation *op) {
  auto [cached, added] = opCosts.try_emplace(op);
  if (added) // the same op is emitted once per micro-batch
    cached->second = cost::opCost(op);
  cost::OpCost c = cached->second;
  // The cost model counts the IR's f32 bytes; bf16 storage moves fewer.
  double irBytes = 0, storedBytes = 0;
  for (Value v : op->getOperands())
    irBytes += (double)cost::typeBytes(v.getType());
  for (Value v : op->getResults())
    irBytes += (double)cost::typeBytes(v.getType());
  for (const json::Array *ids : {i.getArray("in"), i.getArray("out")})
    for (const json::Value &id : *ids)
      storedBytes += (double)buffers[*id.getAsInteger()].bytes();
  if (cost::accumulatesDirectly(op)) { // the gradient is read as well as written
    irBytes += (double)cost::typeBytes(op->getResult(0).getType());
    storedBytes += (double)buffers[*(*i.getArray("out"))[0].getAsInteger()].bytes();
  }
  if (irBytes > 0 && storedBytes < irBytes)
    c.bytes *= storedBytes / irBytes;
  i["flops"] = c.flops;
  i["bytes"] = c.bytes;
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
  Instr w{{"op", "wait_sends"}};
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
  if (layoutUpTo > 0) {
    int64_t bound = liveBytesLowerBound(ranges);
    if (out.persistentBytes + bound > layoutUpTo) {
      out.activationPeak = bound;
      out.arenaBytes = out.persistentBytes + bound;
      out.overBound = true;
      return;
    }
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
  auto actionOps = [&](const Action &a) -> const std::vector<Operation *> & {
    return step.opsOf(a, split);
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
  // Per (chunk, micro-batch, W re-running on its own): what was re-run.
  std::map<std::tuple<int64_t, int64_t, bool>, llvm::DenseSet<Operation *>> recomputedDone;
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
    // A W re-runs only what its B did not (for the same micro-batch), or,
    // againForW, everything it needs.
    llvm::DenseSet<Operation *> &done =
        recomputedDone[{a.chunk, a.microbatch, recompute.againForW && a.weight}];
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
    emit(Instr{{"op", "send"},
               {"in", json::Array{it->second}},
               {"peer", (int64_t)sd.getPeer() * sh.opts.dp}, // dp rank 0's peer
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
    Instr o{{"op", "allreduce"}, {"group", ar.getGroup()}, {"bufs", std::move(bufs)}};
    if (ar.getGroup() == "dp" && sh.step.bf16GradReduce)
      o["dtype"] = "bf16"; // summed in bf16 (the tied sum of two copies stays f32)
    if (ar.getAsync())
      issueAsync(std::move(o), {});
    else
      emit(std::move(o));
  };
  // A reduce-scatter of gradients over dp: into the persistent shards, or
  // (`accumulate`: a ZeRO-2/3 run's whole gradients) into temporary shards
  // that are then added to them. Whole gradients and temporaries are freed
  // once it completes: right away, or (async) when a wait_collectives does.
  auto lowerReduceScatter = [&](pm::ReduceScatterGradsOp rs) {
    const bool accumulate = rs.getAccumulate();
    json::Array in, out, sums;
    InFlight after;
    for (const std::string &n : names(rs.getParams())) {
      scattered.insert(n);
      ParamBufs &pb = pbufs[n];
      int full = gradTarget(n);
      in.push_back(full);
      if (!accumulate) {
        out.push_back(pb.gradShard);
        if (pb.transientGrad >= 0)
          after.freed.push_back(full);
        continue;
      }
      Buffer b;
      b.name = n + ".grad.reduced";
      b.shape = {pb.layout.shardNumel};
      b.dtype = "f32";
      b.kind = "activation";
      int t = add(std::move(b));
      out.push_back(t);
      sums.push_back(pb.gradShard);
      after.freed.push_back(full);
      after.freed.push_back(t);
      pb.transientGrad = -1; // the next backward starts a new whole gradient
    }
    if (accumulate)
      after.then.push_back(
          Instr{{"op", "accumulate"}, {"in", json::Array(out)}, {"out", std::move(sums)}});
    Instr o{
        {"op", "reduce_scatter"}, {"group", "dp"}, {"in", std::move(in)}, {"out", std::move(out)}};
    if (sh.step.bf16GradReduce)
      o["dtype"] = "bf16";
    if (rs.getAsync()) {
      issueAsync(std::move(o), std::move(after));
      return;
    }
    emit(std::move(o));
    for (Instr &i : after.then)
      emit(std::move(i));
    if (!after.freed.empty())
      emit(Instr{{"op", "free"}, {"bufs", std::move(after.freed)}});
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
    computeActions.push_back(actionOf(c));
  // zero 3: the parameters an action's ops (and what it recomputes) read
  // whole, one list per layer (StagedStep::layerOf of the first reader), in
  // first-read order.
  const bool anyGatheredBeforeUse =
      llvm::any_of(pbufs, [](const auto &kv) { return kv.second.st.gatherBeforeUse; });
  auto gatheredLayers = [&](llvm::ArrayRef<Operation *> ops,
                            llvm::ArrayRef<Operation *> more = {}) {
    std::vector<std::vector<std::string>> layers;
    if (!anyGatheredBeforeUse)
      return layers;
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
  // zero 3: a run is consecutive actions of one chunk and phase; each
  // action's next run is the first later action of another chunk or phase.
  auto keyOf = [&](const Action &x) { return x.chunk * 3 + x.phase(); };
  const size_t numActions = computeActions.size();
  std::vector<size_t> nextRunOf(numActions, numActions);
  for (size_t k = numActions; k-- > 1;)
    nextRunOf[k - 1] = keyOf(computeActions[k]) != keyOf(computeActions[k - 1]) ? k : nextRunOf[k];
  // The first `prefetch=` layers an action gathers: what is fetched ahead
  // for it (by the run before it, or by the program's start).
  const size_t depth = (size_t)std::max<int64_t>(sh.prefetch, 1);
  std::map<size_t, std::vector<std::vector<std::string>>> prefetchWindows;
  auto prefetchWindow = [&](size_t k) -> const std::vector<std::vector<std::string>> & {
    auto [it, added] = prefetchWindows.try_emplace(k);
    if (added) {
      const Action &x = computeActions[k];
      it->second = gatheredLayers(actionOps(x), recomputedBefore(x));
      if (it->second.size() > depth)
        it->second.resize(depth);
    }
    return it->second;
  };
  // The first action's gathers start with the program, so that a rank that
  // waits for its first activations gathers meanwhile.
  if (numActions)
    for (const std::vector<std::string> &layer : prefetchWindow(0))
      prefetchGathers(layer);
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
        emit(Instr{{"op", "zero"}, {"out", std::move(zeroed)}});
    } else if (auto w = dyn_cast<pm::WaitSendsOp>(op)) {
      waitSends(w.getKeep());
    } else if (auto r = dyn_cast<pm::RecvOp>(op)) {
      Value v = step.channelValue[r.getChannel()];
      int64_t mb = r.getMicrobatch();
      int id = add(valueBuffer(v, "activation", tmpName()));
      emit(Instr{{"op", "recv"},
                 {"out", json::Array{id}},
                 {"peer", (int64_t)r.getPeer() * sh.opts.dp},
                 {"tag", (int64_t)r.getTag()}});
      inst[{v, mb}] = id;
      pendingRecvTokens.push_back(direction(v) + std::to_string(mb));
    } else if (auto c = dyn_cast<pm::ComputeOp>(op)) {
      Action a = actionOf(c);
      lastChunk = a.chunk;
      ActionCtx ctx;
      ctx.a = a;
      std::vector<bool> isRecompute;
      std::vector<Operation *> ops = sequence(a, isRecompute);
      // zero 3: whole parameters are gathered a layer at a time: when the
      // action reaches a layer, the gathers of the `prefetch=` layers after
      // it are issued (async; FSDP's prefetch, DeepSpeed's prefetch bucket),
      // running on into the next run's first layers. Consecutive actions of
      // one chunk and phase (a breadth-first run of micro-batches) keep what
      // they gathered, and the run's first action already starts the next
      // run's gathers, which the run's compute then hides; otherwise a
      // parameter is freed after its last read in the action, unless the
      // next run starts with it.
      const size_t nextRun = nextRunOf[computeIndex];
      const bool keepGathered = nextRun > computeIndex + 1; // the next action is of this run
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
          emit(Instr{{"op", "free"}, {"bufs", std::move(stale)}});
      }
      static const std::vector<std::vector<std::string>> none;
      const std::vector<std::vector<std::string>> &nextLayers =
          nextRun < numActions ? prefetchWindow(nextRun) : none;
      llvm::StringSet<> keptForNext;
      for (const std::vector<std::string> &names : nextLayers)
        for (const std::string &n : names)
          keptForNext.insert(n);
      // Layer `j` of this action followed by the next run's.
      auto prefetchLayer = [&](size_t j) {
        if (j < layers.size())
          prefetchGathers(layers[j]);
        else if (j - layers.size() < nextLayers.size())
          prefetchGathers(nextLayers[j - layers.size()]);
      };
      size_t layersReached = 0;
      // Before an op: the layers up to the one it reads are requested (one
      // not gathered ahead now and blocking; the others wait for their
      // gather at the first read) and the `prefetch=` layers
      // after each are gathered ahead, into the next run's.
      auto reachLayerOf = [&](Operation *o) {
        size_t upTo = layersReached;
        for (Value v : o->getOperands())
          if (auto it = layerOfName.find(step.paramRoot(v)); it != layerOfName.end())
            upTo = std::max(upTo, it->second + 1);
        for (; layersReached < upTo; ++layersReached) {
          for (const std::string &n : layers[layersReached])
            if (!gathered.count(n) && !prefetched.count(n))
              paramBuffer(n, ctx);
          for (size_t j = layersReached + 1; j <= layersReached + depth; ++j)
            prefetchLayer(j);
        }
      };
      // An action that gathers nothing (a chunk of a lower zero level) starts
      // the next run's gathers at once.
      if (layers.empty())
        for (size_t j = 0; j < depth; ++j)
          prefetchLayer(j);
      std::vector<std::vector<std::string>> freeList =
          keepGathered ? std::vector<std::vector<std::string>>(ops.size()) : freeAfter(ops);
      for (std::vector<std::string> &names : freeList)
        llvm::erase_if(names, [&](const std::string &n) { return keptForNext.contains(n); });
      size_t actionStart = program.size();
      std::vector<bool> recomputedInstr; // per instruction of this action
      inAction = true;
      // The sends that follow this action in the program, by value, and the
      // async reductions, each with the index of the op after which its
      // gradients are complete (in program order: the data-parallel stream
      // runs them in issue order).
      llvm::DenseMap<Value, llvm::SmallVector<pm::SendOp>> sendsOf;
      llvm::StringMap<size_t> lastAccumulate; // filled when a reduction follows
      auto noteAccumulations = [&] {
        for (auto [i, o] : llvm::enumerate(ops))
          if (auto acc = dyn_cast<pm::AccumulateGradOp>(o); acc && !isRecompute[i])
            lastAccumulate[acc.getParam()] = i;
      };
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
        if (lastAccumulate.empty())
          noteAccumulations();
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
          emit(Instr{{"op", "free"}, {"bufs", std::move(freed)}});
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
    } else if (auto rs = dyn_cast<pm::ReduceScatterGradsOp>(op)) {
      if (!loweredEarly.count(rs))
        lowerReduceScatter(rs);
    } else if (wc) {
      lowerWait(wc);
    } else if (isa<pm::OptimizerStepOp>(op)) {
      retirePrefetched();
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
        if (pb.copy >= 0)
          e["copy"] = pb.copy; // params=bf16: the updated master, rounded
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
      emit(Instr{{"op", "adamw"}, {"params", std::move(entries)}});
    } else if (auto ag = dyn_cast<pm::AllGatherParamsOp>(op)) {
      json::Array in, out;
      for (const std::string &n : names(ag.getParams())) {
        ParamBufs &pb = pbufs[n];
        if (pb.shard >= 0 && pb.full >= 0) {
          in.push_back(pb.gatherSource());
          out.push_back(pb.full);
        }
      }
      if (!in.empty()) {
        Instr o{
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
  retirePrefetched();
  freeGathered();
  waitCollectives();

  layout(out);
  out.buffers = std::move(buffers);
  out.program = std::move(program);
  out.row = std::move(row);
  out.constantsUsed = std::move(constantsUsed);
  return success();
}

} // namespace pipemesh::plan::detail
