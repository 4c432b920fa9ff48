//===- PlanLoader.cpp - a plan file's programs as a simulator Job ---------===//
#include "pipemesh/Sim/PlanLoader.h"
#include "pipemesh/Plan/PlanFormat.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <climits>
#include <memory>

using namespace pipemesh;
using namespace pipemesh::sim;
namespace json = llvm::json;

namespace {

int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }


struct BufferInfo {
  int64_t bytes = 0;
  int64_t numel = 0;
  int64_t lastDim = 1;
  int32_t aliasOf = -1;
  bool persistent = false;
};

/// Reads one rank's buffers and program.
class RankReader {
public:
  RankReader(const RankSource &src, Job &job, std::string &why)
      : src(src), program(*src.program), job(job), why(why) {}
  bool read(Program &out, std::vector<std::string> &opNames);

private:
  const RankSource &src;
  const ProgramView &program;
  Job &job;
  std::string &why;
  std::vector<BufferInfo> bufs; // by position in src.buffers
  std::vector<int32_t> index;   // id -> bufs position (ids may be sparse)

  bool fail(const std::string &where, const std::string &msg) {
    why = src.path + where + ": " + msg;
    return false;
  }
  const BufferInfo *buffer(const json::Value &v) const {
    std::optional<int64_t> id = v.getAsInteger();
    if (!id || *id < 0 || *id >= (int64_t)index.size() || index[*id] < 0)
      return nullptr;
    return &bufs[index[*id]];
  }
  int32_t root(int32_t pos) const {
    for (int guard = 0; bufs[pos].aliasOf >= 0 && guard < 64; ++guard)
      pos = bufs[pos].aliasOf;
    return pos;
  }
  bool sumBytes(size_t k, llvm::StringRef field, double &bytes, double &numel,
                const std::string &where);
};

bool RankReader::sumBytes(size_t k, llvm::StringRef field, double &bytes, double &numel,
                          const std::string &where) {
  const json::Array *a = program.getArray(k, field);
  if (!a)
    return true;
  for (const json::Value &v : *a) {
    const BufferInfo *b = buffer(v);
    if (!b)
      return fail(where + "." + field.str(), "unknown buffer id");
    bytes += (double)b->bytes;
    numel += (double)b->numel;
  }
  return true;
}

bool RankReader::read(Program &out, std::vector<std::string> &opNames) {
  // Buffers.
  for (auto [k, b] : llvm::enumerate(src.buffers)) {
    std::string where = ".buffers[" + std::to_string(k) + "]";
    if (b.id < 0 || b.id > (int64_t)1 << 30)
      return fail(where + ".id", "expected a non-negative integer");
    if (b.bytes < 0)
      return fail(where + ".bytes", "expected a non-negative integer");
    if (b.id >= (int64_t)index.size())
      index.resize(b.id + 1, -1);
    if (index[b.id] >= 0)
      return fail(where + ".id", "duplicate buffer id " + std::to_string(b.id));
    index[b.id] = bufs.size();
    bufs.push_back({b.bytes, b.numel, std::max<int64_t>(1, b.lastDim), -1, b.persistent});
  }
  for (auto [k, b] : llvm::enumerate(src.buffers))
    if (b.aliasOf >= 0) {
      if (b.aliasOf >= (int64_t)index.size() || index[b.aliasOf] < 0)
        return fail(".buffers[" + std::to_string(k) + "].alias_of", "unknown buffer id");
      bufs[k].aliasOf = index[b.aliasOf];
    }
  for (const BufferInfo &b : bufs)
    if (b.aliasOf < 0 && b.persistent)
      out.persistentBytes += align64(b.bytes);
  out.arenaBytes = src.arenaBytes;

  // Groups: name -> members.
  std::map<std::string, int32_t> groups;
  for (auto &[name, members] : src.groups)
    if (!members.empty())
      groups[name] = job.group(name, members);

  // Liveness, as the planner computes it.
  size_t n = program.size();
  std::vector<int64_t> first(bufs.size(), INT64_MAX), last(bufs.size(), -1);
  // Sent buffers in send order, and the wait_sends that completes each.
  std::vector<int32_t> sent;
  std::vector<int64_t> completedAt;
  size_t completed = 0;
  for (size_t k = 0; k < n; ++k) {
    if (!program.isObject(k))
      return fail(".program[" + std::to_string(k) + "]", "expected an object");
    std::optional<llvm::StringRef> op = program.getString(k, "op");
    for (llvm::StringRef field : {"in", "out", "bufs"})
      if (const json::Array *a = program.getArray(k, field))
        for (const json::Value &v : *a) {
          std::optional<int64_t> id = v.getAsInteger();
          if (!id || *id < 0 || *id >= (int64_t)index.size() || index[*id] < 0)
            return fail(".program[" + std::to_string(k) + "]." + field.str(),
                        "unknown buffer id");
          int32_t r = root(index[*id]);
          first[r] = std::min<int64_t>(first[r], k);
          last[r] = std::max<int64_t>(last[r], k);
          if (field == "in" && op == "send") {
            sent.push_back(r);
            completedAt.push_back(-1);
          }
        }
    if (op == "wait_sends") {
      // Completes every earlier send but the `keep` most recent.
      int64_t keep = std::max<int64_t>(0, program.getInteger(k, "keep").value_or(0));
      size_t upto = sent.size() > (size_t)keep ? sent.size() - keep : 0;
      for (; completed < upto; ++completed)
        completedAt[completed] = k;
    }
  }
  for (size_t i = 0; i < sent.size(); ++i)
    last[sent[i]] = std::max(last[sent[i]], completedAt[i]);
  std::vector<int64_t> alloc(n, 0), freed(n, 0);
  for (size_t b = 0; b < bufs.size(); ++b) {
    if (bufs[b].aliasOf >= 0 || bufs[b].persistent)
      continue;
    int64_t f = first[b] == INT64_MAX ? 0 : first[b];
    int64_t l = std::max(last[b], f);
    if (n == 0)
      continue;
    alloc[std::min<int64_t>(f, n - 1)] += align64(bufs[b].bytes);
    freed[std::min<int64_t>(l, n - 1)] += align64(bufs[b].bytes);
  }

  // Instructions.
  out.instrs.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    std::string where = ".program[" + std::to_string(k) + "]";
    llvm::StringRef op = program.getString(k, "op").value_or("");
    if (op.empty())
      return fail(where + ".op", "missing");
    opNames.push_back(op.str());
    llvm::StringRef action = program.getString(k, "action").value_or("");
    int32_t label = action.empty() ? -1 : out.label(action);
    Work work = workOfAction(action);
    Instr in;
    double inBytes = 0, inNumel = 0, outBytes = 0, outNumel = 0, bufBytes = 0, bufNumel = 0;
    if (!sumBytes(k, "in", inBytes, inNumel, where) ||
        !sumBytes(k, "out", outBytes, outNumel, where) ||
        !sumBytes(k, "bufs", bufBytes, bufNumel, where))
      return false;
    auto peerTag = [&](int32_t &peer, int64_t &tag) {
      std::optional<int64_t> p = program.getInteger(k, "peer"), t = program.getInteger(k, "tag");
      if (!p || !t)
        return fail(where, op.str() + " needs integer \"peer\" and \"tag\"");
      peer = (int32_t)*p;
      tag = *t;
      return true;
    };
    auto group = [&](int32_t &g) {
      llvm::StringRef name = program.getString(k, "group").value_or("dp");
      auto it = groups.find(name.str());
      if (it == groups.end())
        return fail(where + ".group", "rank has no group '" + name.str() + "'");
      g = it->second;
      return true;
    };
    if (op == "send" || op == "recv") {
      int32_t peer = -1;
      int64_t tag = 0;
      if (!peerTag(peer, tag))
        return false;
      in = op == "send" ? Instr::send(peer, tag, inBytes) : Instr::recv(peer, tag, outBytes);
    } else if (op == "wait_sends") {
      in = Instr::waitSends((int32_t)program.getInteger(k, "keep").value_or(0));
    } else if (op == "allreduce" || op == "reduce_scatter" || op == "allgather") {
      int32_t g = -1;
      if (!group(g))
        return false;
      cost::Collective c = op == "allreduce"        ? cost::Collective::AllReduce
                           : op == "reduce_scatter" ? cost::Collective::ReduceScatter
                                                    : cost::Collective::AllGather;
      // The whole buffers: the reduce-scatter's input, the all-gather's output.
      double bytes = op == "allreduce" ? bufBytes : op == "reduce_scatter" ? inBytes : outBytes;
      // An f32 reduction carried out in bf16 (grad-reduce=bf16) moves half.
      if (program.getString(k, "dtype") == "bf16" && op != "allgather")
        bytes /= 2;
      in = Instr::collective(c, g, bytes, program.getBoolean(k, "async").value_or(false));
    } else if (op == "wait") {
      in = Instr::wait((int32_t)program.getInteger(k, "handle").value_or(-1));
    } else if (op == "wait_collectives") {
      in = Instr::wait(-1,
                       (int32_t)std::max<int64_t>(0, program.getInteger(k, "keep").value_or(0)));
    } else if (op == "adamw") {
      // Reads p, g, m, v and writes p, m, v (the norm pass reads g again).
      double bytes = 0, numel = 0;
      if (const json::Array *entries = program.getArray(k, "params"))
        for (const json::Value &ev : *entries) {
          const json::Object *e = ev.getAsObject();
          if (!e)
            return fail(where + ".params", "expected objects");
          if (const json::Value *g = e->get("grad"))
            if (const BufferInfo *b = buffer(*g)) {
              bytes += 8.0 * (double)b->bytes;
              numel += (double)b->numel;
            }
        }
      in = Instr::kernel(16.0 * numel, bytes, cost::kernelClassOfName("adamw"), Work::Optimizer,
                         label);
    } else if (op == "free") {
      in = Instr::compute(0.0, work, label);
    } else {
      std::optional<double> flops = program.getNumber(k, "flops"),
                            bytes = program.getNumber(k, "bytes");
      double f = flops.value_or(0.0), b = bytes.value_or(inBytes + outBytes);
      if (op == "accumulate") {
        f = outNumel;
        b = inBytes + 2.0 * outBytes;
      } else if (op == "zero" || op == "load_microbatch" || op == "loss") {
        b = outBytes + inBytes;
      }
      in = Instr::kernel(f, b, cost::kernelClassOfName(op), work, label);
      // Attention's query rows (CostModel.cpp's attentionCost): its first
      // result (o, or dq for the gradient) is [..., query, head size].
      if (op == "attention" || op == "attention_grad")
        if (const json::Array *outs = program.getArray(k, "out"); outs && !outs->empty())
          if (const BufferInfo *o = buffer((*outs)[0]))
            in.rows = (double)std::max<int64_t>(0, o->numel / o->lastDim);
    }
    in.label = label;
    if (in.kind == OpKind::Compute && work != Work::Other)
      in.work = work;
    in.source = (int32_t)k;
    in.mem(alloc[k], freed[k]);
    out.instrs.push_back(in);
  }
  return true;
}

/// A manifest rank's buffers, groups and program as a RankSource.
bool rankFromJson(const json::Object &rank, std::string path, RankSource &out,
                  std::unique_ptr<JsonProgramView> &view, std::string &why) {
  auto fail = [&](const std::string &where, const std::string &msg) {
    why = path + where + ": " + msg;
    return false;
  };
  const json::Array *buffers = rank.getArray("buffers");
  if (!buffers)
    return fail(".buffers", "missing");
  for (auto [k, bv] : llvm::enumerate(*buffers)) {
    std::string where = ".buffers[" + std::to_string(k) + "]";
    const json::Object *b = bv.getAsObject();
    std::optional<int64_t> id = b ? b->getInteger("id") : std::nullopt;
    std::optional<int64_t> bytes = b ? b->getInteger("bytes") : std::nullopt;
    if (!id || *id < 0 || *id > (int64_t)1 << 30)
      return fail(where + ".id", "expected a non-negative integer");
    if (!bytes || *bytes < 0)
      return fail(where + ".bytes", "expected a non-negative integer");
    BufferDesc d;
    d.id = *id;
    d.bytes = *bytes;
    if (const json::Array *shape = b->getArray("shape"))
      for (const json::Value &dim : *shape)
        d.numel *= (d.lastDim = dim.getAsInteger().value_or(1));
    d.persistent = isPersistentKind(b->getString("kind").value_or(""));
    d.aliasOf = b->getInteger("alias_of").value_or(-1);
    out.buffers.push_back(d);
  }
  if (const json::Object *g = rank.getObject("groups"))
    for (auto &kv : *g) {
      const json::Array *members = kv.second.getAsArray();
      if (!members)
        return fail(".groups." + kv.first.str(), "expected an array of ranks");
      std::vector<int64_t> ms;
      for (const json::Value &m : *members) {
        std::optional<int64_t> r = m.getAsInteger();
        if (!r)
          return fail(".groups." + kv.first.str(), "expected an array of ranks");
        ms.push_back(*r);
      }
      out.groups[kv.first.str()] = std::move(ms);
    }
  out.arenaBytes = rank.getInteger("arena_bytes").value_or(0);
  const json::Array *program = rank.getArray("program");
  if (!program)
    return fail(".program", "missing");
  view = std::make_unique<JsonProgramView>(*program);
  out.program = view.get();
  out.path = std::move(path);
  return true;
}

} // namespace

bool pipemesh::sim::isPersistentKind(llvm::StringRef kind) {
  return kind == "param" || kind == "param_copy" || kind == "grad" || kind == "adam_m" ||
         kind == "adam_v" || kind == "constant";
}

bool pipemesh::sim::jobFromRanks(const PlanInfo &info, bool replicasElided,
                                 llvm::ArrayRef<RankSource> ranks, LoadedPlan &out,
                                 std::string &why) {
  out.info = info;
  out.job.hierarchicalDp = info.hierarchicalDp;
  const size_t numRanks = replicasElided ? (size_t)info.worldSize : ranks.size();
  Job &job = out.job;
  job.ranks.assign(numRanks, Program());
  out.opNames.assign(numRanks, {});
  std::vector<bool> seen(numRanks, false);
  for (const RankSource &src : ranks) {
    int64_t g = src.rank;
    if (g < 0 || g >= (int64_t)numRanks || seen[g] || (replicasElided && g % info.dp != 0)) {
      why = src.path + ".rank: " + std::to_string(g) + " is out of range or repeated";
      return false;
    }
    seen[g] = true;
    Program &p = job.ranks[g];
    p.rank = (int32_t)g;
    RankReader reader(src, job, why);
    if (!reader.read(p, out.opNames[g]))
      return false;
    carryAsyncTailIntoStep(p);
  }
  if (replicasElided) {
    // Replica d of pipeline rank p is global rank p * dp + d: its peers and
    // its groups other than dp (the tied group) are replica 0's shifted by d.
    for (int64_t base = 0; base < (int64_t)numRanks; base += info.dp) {
      if (!seen[base]) {
        why = "manifest: replicas_elided but pipeline rank " + std::to_string(base / info.dp) +
              " is missing";
        return false;
      }
      for (int64_t d = 1; d < info.dp; ++d)
        out.opNames[base + d] = out.opNames[base];
    }
    buildReplicas(job, info.dp);
  }
  job.tokensPerStep = (double)info.batch * info.seq * info.microbatches * info.dp;
  job.flopsPerStep = info.flopsPerStep;
  job.description = "pp=" + std::to_string(info.pp) + " dp=" + std::to_string(info.dp) +
                    " vpp=" + std::to_string(info.vpp) +
                    " microbatches=" + std::to_string(info.microbatches) +
                    " schedule=" + info.schedule + " zero=" + std::to_string(info.zero) +
                    (info.hierarchicalDp ? " dp-collectives=hierarchical" : "");
  return true;
}

bool pipemesh::sim::jobFromManifest(const json::Object &m, LoadedPlan &out, std::string &why) {
  PlanInfo info;
  const json::Object *model = m.getObject("model");
  const json::Object *par = m.getObject("parallel");
  if (!model || !par) {
    why = std::string("manifest: missing \"") + (model ? "parallel" : "model") + "\"";
    return false;
  }
  info.batch = model->getInteger("batch").value_or(0);
  info.seq = model->getInteger("seq").value_or(0);
  info.source = model->getString("source").value_or("").str();
  info.shapesOnly = model->getBoolean("shapes_only").value_or(false);
  info.flopsPerStep = model->getNumber("flops_per_step").value_or(0);
  info.pp = par->getInteger("pp").value_or(1);
  info.dp = par->getInteger("dp").value_or(1);
  info.vpp = par->getInteger("vpp").value_or(1);
  info.zero = par->getInteger("zero").value_or(0);
  info.microbatches = par->getInteger("microbatches").value_or(1);
  info.worldSize = par->getInteger("world_size").value_or(info.pp * info.dp);
  info.schedule = par->getString("schedule").value_or("").str();
  if (std::optional<llvm::StringRef> run = par->getString("schedule_run"))
    info.schedule += " (runs " + run->str() + ")";
  if (std::optional<llvm::StringRef> deferW = par->getString("defer_w"))
    info.schedule += " defer-w=" + deferW->str();
  // Its value was checked with the manifest (plan::checkPlanManifest).
  info.hierarchicalDp = par->getString("dp_collectives") == "hierarchical";

  const json::Array *ranks = m.getArray("ranks");
  if (!ranks) {
    why = "manifest: missing \"ranks\"";
    return false;
  }
  // A search's manifest may list only dp rank 0 of each pipeline rank
  // (`parallel.replicas_elided`); the other replicas run the same program
  // against their own peers and are built by jobFromRanks.
  const bool elided = par->getBoolean("replicas_elided").value_or(false);
  std::vector<RankSource> sources(ranks->size());
  std::vector<std::unique_ptr<JsonProgramView>> views(ranks->size());
  for (auto [k, rv] : llvm::enumerate(*ranks)) {
    std::string path = "ranks[" + std::to_string(k) + "]";
    const json::Object *r = rv.getAsObject();
    if (!r) {
      why = path + ": expected an object";
      return false;
    }
    sources[k].rank = r->getInteger("rank").value_or((int64_t)k);
    if (!rankFromJson(*r, path, sources[k], views[k], why))
      return false;
  }
  return jobFromRanks(info, elided, sources, out, why);
}

bool pipemesh::sim::loadPlanFile(llvm::StringRef path, LoadedPlan &out, std::string &why) {
  // A plan with weights is simulated after as long as reading it takes: the
  // checksum covers them.
  plan::PlanContainer container;
  if (!plan::readPlanContainer(path, "pipemesh-sim", container, why))
    return false;
  llvm::StringRef manifestText = container.manifest;
  llvm::Expected<json::Value> v = json::parse(manifestText);
  if (!v) {
    why = "plan '" + path.str() + "': invalid manifest JSON: " + toString(v.takeError());
    return false;
  }
  const json::Object *m = v->getAsObject();
  if (!m) {
    why = "plan '" + path.str() + "': the manifest is not a pipemesh-plan";
    return false;
  }
  if (!plan::checkPlanManifest(*m, path, "pipemesh-sim", why))
    return false;
  if (!jobFromManifest(*m, out, why)) {
    why = "plan '" + path.str() + "': " + why;
    return false;
  }
  out.job.name = path.str();
  return true;
}
