//===- PlanReader.cpp - reads and validates a plan file -------------------===//
//
// Container first (magic, version, lengths, checksum: cheap checks in the
// order that gives the most useful message), then the manifest JSON, then the
// weights blob, then the cross-checks of the buffer tables. Of an elided
// plan's replicas (parallel.replicas_elided) only the reading process's own
// is derived and parsed: every process parses the listed programs, which
// is all that the cross-rank reasoning needs.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Plan.h"

#include "pipemesh/runtime/Checksum.h"
#include "pipemesh/runtime/Error.h"

#include <algorithm>
#include <cstring>

namespace pipemesh::rt {

const char *bufferKindName(BufferKind k) {
  switch (k) {
  case BufferKind::Input:
    return "input";
  case BufferKind::Activation:
    return "activation";
  case BufferKind::Param:
    return "param";
  case BufferKind::ParamCopy:
    return "param_copy";
  case BufferKind::Grad:
    return "grad";
  case BufferKind::AdamM:
    return "adam_m";
  case BufferKind::AdamV:
    return "adam_v";
  case BufferKind::Constant:
    return "constant";
  }
  return "?";
}

bool BufferInfo::persistent() const {
  return kind == BufferKind::Param || kind == BufferKind::ParamCopy || kind == BufferKind::Grad ||
         kind == BufferKind::AdamM ||
         kind == BufferKind::AdamV || kind == BufferKind::Constant;
}

bool readsItsOutputs(const Instruction &inst) {
  if (inst.op == "accumulate")
    return true;
  auto it = inst.json.find("accumulate");
  return it != inst.json.end() && it->is_boolean() && it->get<bool>();
}

const BufferInfo &RankPlan::buffer(int64_t id) const {
  auto it = byId.find(id);
  if (it == byId.end())
    fail("rank ", rank, " has no buffer ", id);
  return buffers[it->second];
}

void RankPlan::indexBuffers() {
  byId.clear();
  for (size_t i = 0; i < buffers.size(); ++i)
    if (!byId.emplace(buffers[i].id, i).second)
      fail("rank ", rank, ": buffer id ", buffers[i].id, " appears twice");
}

const RankPlan &Plan::rank(int64_t r) const {
  for (const std::vector<RankPlan> *v : {&listed, &derived})
    for (const RankPlan &rp : *v)
      if (rp.rank == r)
        return rp;
  if (replicasElided && r >= 0 && r < parallel.worldSize)
    fail("plan '", path, "': the program of rank ", r, " (dp replica ", r % parallel.dp,
         " of pipeline rank ", r / parallel.dp, ") was not derived: a process derives only its "
         "own replica of an elided plan (parallel.replicas_elided)");
  fail("plan '", path, "' has no program for rank ", r);
}

const RankPlan &Plan::listedOf(int64_t r) const {
  return rank(replicasElided ? r - r % parallel.dp : r);
}

const ParamInfo *Plan::findParam(const std::string &name) const {
  for (const ParamInfo &p : params)
    if (p.name == name)
      return &p;
  return nullptr;
}

void replica::derive(nlohmann::json &r, int64_t d) {
  // Plan.h states the rules; fields of the wrong type are left for the
  // parser to name.
  if (r.contains("rank") && r["rank"].is_number_integer())
    r["rank"] = rank(r["rank"].get<int64_t>(), d);
  r["dp_rank"] = d;
  if (r.contains("groups") && r["groups"].is_object() && r["groups"].contains("tied"))
    for (auto &member : r["groups"]["tied"])
      if (member.is_number_integer())
        member = rank(member.get<int64_t>(), d);
  if (d != 0 && r.contains("buffers") && r["buffers"].is_array())
    for (auto &b : r["buffers"])
      if (b.is_object() && b.contains("shard_numel") && b["shard_numel"].is_number_integer() &&
          (!b.contains("elem_offset") || b["elem_offset"].is_number_integer()))
        b["elem_offset"] = shardOffset(b.value("elem_offset", (int64_t)0),
                                       b["shard_numel"].get<int64_t>(), d);
  if (r.contains("program") && r["program"].is_array())
    for (auto &in : r["program"]) {
      if (!in.is_object())
        continue;
      if (d != 0 && in.contains("peer") && in["peer"].is_number_integer())
        in["peer"] = rank(in["peer"].get<int64_t>(), d);
      if (in.contains("params") && in["params"].is_array())
        for (auto &e : in["params"])
          if (e.is_object() && e.erase("norm_dp0_only") && d != 0)
            e["norm_weight"] = 0.0;
    }
}

/// Typed access to manifest fields; every error names the JSON path.
struct PlanParser {
  const std::string &file;

  [[noreturn]] void bad(const std::string &where, const std::string &why) const {
    fail("plan '", file, "': manifest field '", where, "' ", why);
  }
  const nlohmann::json &field(const nlohmann::json &obj, const std::string &where,
                              const char *key) const {
    if (!obj.is_object())
      bad(where, "is not an object");
    auto it = obj.find(key);
    if (it == obj.end())
      bad(where.empty() ? key : where + "." + key, "is missing");
    return *it;
  }
  static std::string join(const std::string &where, const char *key) {
    return where.empty() ? key : where + "." + key;
  }
  int64_t integer(const nlohmann::json &obj, const std::string &where, const char *key) const {
    const auto &v = field(obj, where, key);
    if (!v.is_number_integer())
      bad(join(where, key), "must be an integer, got " + v.dump());
    return v.get<int64_t>();
  }
  int64_t integerOr(const nlohmann::json &obj, const std::string &where, const char *key,
                    int64_t dflt) const {
    return obj.contains(key) ? integer(obj, where, key) : dflt;
  }
  double number(const nlohmann::json &obj, const std::string &where, const char *key) const {
    const auto &v = field(obj, where, key);
    if (!v.is_number())
      bad(join(where, key), "must be a number, got " + v.dump());
    return v.get<double>();
  }
  std::string string(const nlohmann::json &obj, const std::string &where, const char *key) const {
    const auto &v = field(obj, where, key);
    if (!v.is_string())
      bad(join(where, key), "must be a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::string stringOr(const nlohmann::json &obj, const std::string &where, const char *key,
                       const std::string &dflt) const {
    return obj.contains(key) ? string(obj, where, key) : dflt;
  }
  bool boolean(const nlohmann::json &obj, const std::string &where, const char *key) const {
    const auto &v = field(obj, where, key);
    if (!v.is_boolean())
      bad(join(where, key), "must be true or false, got " + v.dump());
    return v.get<bool>();
  }
  const nlohmann::json &array(const nlohmann::json &obj, const std::string &where,
                              const char *key) const {
    const auto &v = field(obj, where, key);
    if (!v.is_array())
      bad(join(where, key), "must be an array");
    return v;
  }
  std::vector<int64_t> ints(const nlohmann::json &obj, const std::string &where, const char *key,
                            bool optional = false) const {
    std::vector<int64_t> out;
    if (optional && !obj.contains(key))
      return out;
    for (const auto &d : array(obj, where, key)) {
      if (!d.is_number_integer())
        bad(join(where, key), "must hold integers, got " + d.dump());
      out.push_back(d.get<int64_t>());
    }
    return out;
  }

  void parseModel(const nlohmann::json &m, Plan &p) const {
    const auto &model = field(m, "", "model");
    if (model.contains("shapes_only") && boolean(model, "model", "shapes_only"))
      fail("plan '", file, "' was compiled with shapes-only=true: it holds no weights, so it can "
           "be simulated (pipemesh-sim) and explained but not run (compile the model with its "
           "weights; bench/fill_plan_weights.py draws a gen_gpt2.py model's)");
    p.model.source = stringOr(model, "model", "source", "");
    p.model.batch = integer(model, "model", "batch");
    p.model.seq = integer(model, "model", "seq");
    p.model.vocab = integer(model, "model", "vocab");
    p.model.numParams = integerOr(model, "model", "num_params", 0);
    p.model.flopsPerStep =
        model.contains("flops_per_step") ? number(model, "model", "flops_per_step") : 0;
    p.model.loss = stringOr(model, "model", "loss", "");
    // The mixed-precision options (storage or sum types): f32 unless given.
    auto storageType = [&](const char *key) {
      std::string t = stringOr(m, "", key, "f32");
      if (t != "f32" && t != "bf16")
        bad(key, "must be f32 or bf16, got '" + t + "'");
      return t;
    };
    p.model.activations = storageType("activations");
    p.model.paramDtype = storageType("param_dtype");
    p.model.gradReduce = storageType("grad_reduce");
    if (p.model.batch <= 0 || p.model.seq <= 0 || p.model.vocab <= 0)
      bad("model", "needs positive batch, seq and vocab");
    const auto &par = field(m, "", "parallel");
    p.parallel.pp = integer(par, "parallel", "pp");
    p.parallel.dp = integer(par, "parallel", "dp");
    p.parallel.vpp = integerOr(par, "parallel", "vpp", 1);
    p.parallel.microbatches = integer(par, "parallel", "microbatches");
    p.parallel.worldSize = integer(par, "parallel", "world_size");
    p.parallel.zero = integerOr(par, "parallel", "zero", 0);
    p.parallel.schedule = stringOr(par, "parallel", "schedule", "");
    const std::string dpCollectives = stringOr(par, "parallel", "dp_collectives", "flat");
    if (dpCollectives != "flat" && dpCollectives != "hierarchical")
      bad("parallel.dp_collectives", "must be flat or hierarchical, got '" + dpCollectives + "'");
    p.parallel.hierarchicalDp = dpCollectives == "hierarchical";
    if (p.parallel.zero < 0 || p.parallel.zero > 3)
      bad("parallel.zero", "must be 0, 1, 2 or 3, got " + std::to_string(p.parallel.zero));
    if (p.parallel.pp <= 0 || p.parallel.dp <= 0 || p.parallel.vpp <= 0 ||
        p.parallel.microbatches <= 0 || p.parallel.worldSize <= 0)
      bad("parallel", "needs positive pp, dp, vpp, microbatches and world_size");
    if (m.contains("inputs")) {
      const auto &in = m["inputs"];
      p.tokensInput = stringOr(in, "inputs", "tokens", "");
      p.targetsInput = stringOr(in, "inputs", "targets", "");
    }
  }

  void parseParams(const nlohmann::json &m, Plan &p) const {
    const auto &params = array(m, "", "params");
    for (size_t i = 0; i < params.size(); ++i) {
      std::string where = "params[" + std::to_string(i) + "]";
      ParamInfo pi;
      pi.name = string(params[i], where, "name");
      pi.source = stringOr(params[i], where, "source", pi.name);
      pi.shape = ints(params[i], where, "shape");
      pi.decay =
          params[i].contains("decay") ? boolean(params[i], where, "decay") : pi.shape.size() >= 2;
      if (params[i].contains("transposed_copies"))
        for (const auto &c : array(params[i], where, "transposed_copies"))
          pi.transposedCopies.push_back(c.get<std::string>());
      if (p.findParam(pi.name))
        bad(where + ".name", "repeats parameter '" + pi.name + "'");
      p.params.push_back(std::move(pi));
    }
  }

  /// The `ranks` index of each pipeline rank's entry in an elided plan
  /// (dp rank 0's, rank q * dp), checked to be there once each.
  std::vector<size_t> listedEntries(const nlohmann::json &m, const Plan &p) const {
    const int64_t pp = p.parallel.pp, dp = p.parallel.dp;
    if (p.parallel.worldSize != pp * dp)
      bad("parallel.world_size", "is " + std::to_string(p.parallel.worldSize) +
                                     ", not pp x dp = " + std::to_string(pp * dp));
    const auto &listed = array(m, "", "ranks");
    constexpr size_t none = SIZE_MAX;
    std::vector<size_t> byPipelineRank(pp, none);
    for (size_t i = 0; i < listed.size(); ++i) {
      std::string where = "ranks[" + std::to_string(i) + "]";
      int64_t r = integer(listed[i], where, "rank");
      if (r < 0 || r % dp != 0 || r / dp >= pp || byPipelineRank[r / dp] != none)
        bad(where + ".rank", "is " + std::to_string(r) +
                                 ": a plan with replicas_elided lists dp rank 0 of each of the " +
                                 std::to_string(pp) + " pipeline ranks once (ranks 0, " +
                                 std::to_string(dp) + ", ...)");
      byPipelineRank[r / dp] = i;
    }
    for (int64_t q = 0; q < pp; ++q)
      if (byPipelineRank[q] == none)
        bad("ranks", "has no program for pipeline rank " + std::to_string(q) + " (rank " +
                         std::to_string(q * dp) + "), and replicas_elided derives the others from it");
    return byPipelineRank;
  }

  static std::optional<BufferKind> parseKind(const std::string &s) {
    for (BufferKind k :
         {BufferKind::Input, BufferKind::Activation, BufferKind::Param, BufferKind::ParamCopy,
          BufferKind::Grad, BufferKind::AdamM, BufferKind::AdamV, BufferKind::Constant})
      if (s == bufferKindName(k))
        return k;
    return std::nullopt;
  }

  /// `replicas`: the ranks the entry stands for (dp for a listed entry of an
  /// elided plan, else 1); what differs between them (shard offsets) is
  /// checked for each, so that every process finds what is wrong with any.
  void parseRank(const nlohmann::json &r, const std::string &where, Plan &p, RankPlan &rp,
                 int64_t replicas = 1) const {
    rp.rank = integer(r, where, "rank");
    rp.arenaBytes = (uint64_t)integer(r, where, "arena_bytes");
    const int64_t dp = p.parallel.dp;
    rp.dpRank = integerOr(r, where, "dp_rank", rp.rank % dp);
    rp.ppRank = integerOr(r, where, "pp_rank", rp.rank / dp);
    if (rp.dpRank < 0 || rp.dpRank >= dp || rp.ppRank < 0 || rp.ppRank >= p.parallel.pp)
      bad(where, "has pp_rank " + std::to_string(rp.ppRank) + " and dp_rank " +
                     std::to_string(rp.dpRank) + " outside pp=" + std::to_string(p.parallel.pp) +
                     " x dp=" + std::to_string(dp));
    if (r.contains("groups")) {
      const auto &g = field(r, where, "groups");
      std::string gw = where + ".groups";
      rp.dpGroup = ints(g, gw, "dp", /*optional=*/true);
      rp.tiedGroup = ints(g, gw, "tied", /*optional=*/true);
    }
    if (rp.dpGroup.empty())
      for (int64_t d = 0; d < dp; ++d)
        rp.dpGroup.push_back(rp.ppRank * dp + d);
    rp.chunks = ints(r, where, "chunks", /*optional=*/true);
    rp.firstStage = r.contains("first_stage") ? boolean(r, where, "first_stage") : rp.ppRank == 0;
    rp.lastStage =
        r.contains("last_stage") ? boolean(r, where, "last_stage") : rp.ppRank == p.parallel.pp - 1;
    const auto &bufs = array(r, where, "buffers");
    for (size_t i = 0; i < bufs.size(); ++i) {
      std::string bw = where + ".buffers[" + std::to_string(i) + "]";
      const auto &b = bufs[i];
      BufferInfo bi;
      bi.id = integer(b, bw, "id");
      bi.name = stringOr(b, bw, "name", "");
      bi.shape = ints(b, bw, "shape");
      std::string dt = string(b, bw, "dtype");
      auto t = parseDType(dt);
      if (!t)
        bad(bw + ".dtype", "'" + dt + "' is not one of f32, f64, i64, i32, i1, bf16");
      bi.dtype = *t;
      int64_t off = integer(b, bw, "offset"), bytes = integer(b, bw, "bytes");
      if (off < 0 || bytes < 0)
        bad(bw, "has a negative offset or size");
      bi.offset = (uint64_t)off;
      bi.bytes = (uint64_t)bytes;
      std::string kind = string(b, bw, "kind");
      auto k = parseKind(kind);
      if (!k)
        bad(bw + ".kind", "'" + kind +
                              "' is not one of input, activation, param, param_copy, grad, "
                              "adam_m, adam_v, constant");
      bi.kind = *k;
      bi.param = stringOr(b, bw, "param", "");
      bi.data = stringOr(b, bw, "data", "");
      bi.elemOffset = integerOr(b, bw, "elem_offset", 0);
      bi.shardNumel = integerOr(b, bw, "shard_numel", -1);
      bi.aliasOf = integerOr(b, bw, "alias_of", -1);
      for (int64_t d : bi.shape)
        if (d < 0)
          bad(bw + ".shape", "has a negative dimension");
      bi.numel = numElements(bi.shape);
      std::string label = "buffer " + std::to_string(bi.id) +
                          (bi.name.empty() ? "" : " '" + bi.name + "'") + " of rank " +
                          std::to_string(rp.rank);
      if (bi.bytes != (uint64_t)bi.numel * dtypeSize(bi.dtype))
        fail("plan '", file, "': ", label, " has ", bi.bytes, " bytes but shape ",
             shapeStr(bi.shape), " of ", dtypeName(bi.dtype), " needs ",
             (uint64_t)bi.numel * dtypeSize(bi.dtype));
      if (bi.offset % kArenaAlignment)
        fail("plan '", file, "': ", label, " is at offset ", bi.offset, ", not a multiple of ",
             kArenaAlignment);
      if (bi.offset > rp.arenaBytes || bi.bytes > rp.arenaBytes - bi.offset)
        fail("plan '", file, "': ", label, " [", bi.offset, ", ", bi.offset + bi.bytes,
             ") lies outside the ", rp.arenaBytes, "-byte arena");
      bool needsParam = bi.kind == BufferKind::Param || bi.kind == BufferKind::ParamCopy ||
                        bi.kind == BufferKind::Grad || bi.kind == BufferKind::AdamM ||
                        bi.kind == BufferKind::AdamV;
      if (needsParam) {
        if (bi.param.empty())
          bad(bw + ".param", "is missing (a " + kind + " buffer names its parameter)");
        const ParamInfo *pi = p.findParam(bi.param);
        if (!pi)
          bad(bw + ".param", "names '" + bi.param + "', which is not in the params table");
        DType want = bi.kind == BufferKind::ParamCopy ? DType::BF16 : DType::F32;
        if (bi.dtype != want)
          fail("plan '", file, "': ", label, " (", kind, ") must be ", dtypeName(want));
        int64_t pn = numElements(pi->shape);
        if (bi.isShard()) {
          // A ZeRO shard: elements [elem_offset, elem_offset + shard_numel)
          // of the parameter zero-padded to a multiple of the shard size.
          if (bi.numel != bi.shardNumel)
            fail("plan '", file, "': ", label, " has ", bi.numel, " elements but shard_numel ",
                 bi.shardNumel);
          // A shard may hold padding only (a scalar on dp=2, 5 elements on dp=4):
          // with padded_numel it is bounded below; without, by the parameter.
          // Offsets grow with the replica: dp rank 0's and the last one's bound the rest.
          int64_t bound = b.contains("padded_numel")
                              ? INT64_MAX
                              : std::max<int64_t>(pn, 1) + bi.shardNumel - 1;
          int64_t padded = b.contains("padded_numel") ? integer(b, bw, "padded_numel") : -1;
          std::vector<int64_t> extremes{0};
          if (replicas > 1)
            extremes.push_back(replicas - 1);
          for (int64_t d : extremes) {
            int64_t off = replica::shardOffset(bi.elemOffset, bi.shardNumel, d);
            std::string as = d ? " (as rank " + std::to_string(replica::rank(rp.rank, d)) +
                                     ", its dp replica " + std::to_string(d) + ")"
                               : "";
            if (bi.shardNumel == 0 || off < 0 || off % bi.shardNumel != 0 || off >= bound)
              fail("plan '", file, "': ", label, as, " is a shard [", off, ", ",
                   off + bi.shardNumel, ") that does not tile parameter '", bi.param,
                   "' of shape ", shapeStr(pi->shape), " (", pn, " elements)");
            if (d == 0 && padded >= 0 && (padded < pn || padded % bi.shardNumel != 0))
              fail("plan '", file, "': ", label, " has padded_numel ", padded,
                   ", which is not a multiple of its shard_numel ", bi.shardNumel,
                   " covering the ", pn, " elements of parameter '", bi.param, "'");
            if (padded >= 0 && off >= padded)
              fail("plan '", file, "': ", label, as, " is a shard [", off, ", ",
                   off + bi.shardNumel, ") past the padded_numel ", padded, " of parameter '",
                   bi.param, "' (", pn, " elements)");
          }
        } else {
          if (bi.elemOffset < 0 || (bi.elemOffset == 0 && bi.numel != pn && bi.numel > pn) ||
              (bi.elemOffset > 0 && bi.elemOffset >= pn))
            fail("plan '", file, "': ", label, " holds elements [", bi.elemOffset, ", ",
                 bi.elemOffset + bi.numel, ") of parameter '", bi.param, "' of shape ",
                 shapeStr(pi->shape), " (", pn, " elements)");
          if (bi.elemOffset == 0 && bi.numel == pn && bi.shape != pi->shape)
            fail("plan '", file, "': ", label, " has shape ", shapeStr(bi.shape),
                 " but parameter '", bi.param, "' has shape ", shapeStr(pi->shape));
        }
      }
      if (bi.kind == BufferKind::Constant && bi.data.empty())
        bad(bw + ".data", "is missing (a constant names its safetensors entry)");
      if (rp.byId.count(bi.id))
        bad(bw + ".id", "repeats buffer id " + std::to_string(bi.id));
      rp.byId[bi.id] = rp.buffers.size();
      rp.buffers.push_back(std::move(bi));
    }
    checkAliases(rp);
    checkOverlaps(rp);
    const auto &prog = array(r, where, "program");
    for (size_t i = 0; i < prog.size(); ++i) {
      std::string iw = where + ".program[" + std::to_string(i) + "]";
      Instruction ins;
      ins.index = i;
      ins.op = string(prog[i], iw, "op");
      ins.in = ints(prog[i], iw, "in", /*optional=*/true);
      ins.out = ints(prog[i], iw, "out", /*optional=*/true);
      ins.attrs = prog[i].contains("attrs") ? prog[i]["attrs"] : nlohmann::json::object();
      if (!ins.attrs.is_object())
        bad(iw + ".attrs", "must be an object");
      for (int64_t id : ins.in)
        if (!rp.byId.count(id))
          bad(iw + ".in", "names buffer " + std::to_string(id) + ", which rank " +
                              std::to_string(rp.rank) + " does not have");
      for (int64_t id : ins.out)
        if (!rp.byId.count(id))
          bad(iw + ".out", "names buffer " + std::to_string(id) + ", which rank " +
                               std::to_string(rp.rank) + " does not have");
      ins.json = prog[i];
      rp.program.push_back(std::move(ins));
    }
  }

  /// An alias (reshape view) lies within the memory of the buffer it views.
  void checkAliases(const RankPlan &rp) const {
    for (const BufferInfo &b : rp.buffers) {
      if (b.aliasOf < 0)
        continue;
      auto it = rp.byId.find(b.aliasOf);
      if (it == rp.byId.end())
        fail("plan '", file, "': rank ", rp.rank, ": buffer ", b.id, " is an alias of buffer ",
             b.aliasOf, ", which does not exist");
      const BufferInfo &r = rp.buffers[it->second];
      if (b.offset < r.offset || b.offset + b.bytes > r.offset + r.bytes)
        fail("plan '", file, "': rank ", rp.rank, ": buffer ", b.id, " [", b.offset, ", ",
             b.offset + b.bytes, ") is an alias of buffer ", r.id, " but lies outside its [",
             r.offset, ", ", r.offset + r.bytes, ")");
    }
  }

  /// Persistent buffers must not share bytes with any other buffer (aliases,
  /// which are views, aside).
  void checkOverlaps(const RankPlan &rp) const {
    std::vector<const BufferInfo *> byOffset;
    for (const BufferInfo &b : rp.buffers)
      if (b.bytes && b.aliasOf < 0)
        byOffset.push_back(&b);
    std::sort(byOffset.begin(), byOffset.end(),
              [](const BufferInfo *a, const BufferInfo *b) { return a->offset < b->offset; });
    for (size_t i = 0; i < byOffset.size(); ++i) {
      const BufferInfo *a = byOffset[i];
      for (size_t j = i + 1; j < byOffset.size() && byOffset[j]->offset < a->offset + a->bytes;
           ++j) {
        const BufferInfo *b = byOffset[j];
        if (a->persistent() || b->persistent())
          fail("plan '", file, "': rank ", rp.rank, ": ", bufferKindName(a->kind), " buffer ",
               a->id, " '", a->name, "' [", a->offset, ", ", a->offset + a->bytes, ") and ",
               bufferKindName(b->kind), " buffer ", b->id, " '", b->name, "' [", b->offset, ", ",
               b->offset + b->bytes, ") overlap, but a ",
               bufferKindName(a->persistent() ? a->kind : b->kind), " buffer must keep its memory");
      }
    }
  }
};

static uint32_t readU32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t readU64(const uint8_t *p) {
  return (uint64_t)readU32(p) | (uint64_t)readU32(p + 4) << 32;
}

Plan readPlan(const std::string &path, int64_t ownRank) {
  Plan p;
  p.path = path;
  p.file = MappedFile::open(path, "plan");
  const uint8_t *d = p.file->data();
  uint64_t size = p.file->size();
  if (size < 8)
    fail("'", path, "' is not a PipeMesh plan (", size, " bytes, shorter than the header)");
  if (std::memcmp(d, kPlanMagic, 8) != 0)
    fail("'", path, "' is not a PipeMesh plan (bad magic; expected \"PMPLAN\\0\\0\")");
  if (size < kPlanHeaderBytes)
    fail("plan '", path, "' is truncated: ", size, " bytes, the header alone is ",
         kPlanHeaderBytes);
  p.version = readU32(d + 8);
  if (p.version != kPlanVersion)
    fail("plan '", path, "' has plan format version ", p.version, ", this runtime reads ",
         kPlanVersion, " (recompile it with a matching pipemesh-opt)");
  uint64_t L = readU64(d + 16), W = readU64(d + 24), sum = readU64(d + 32);
  uint64_t body = size - kPlanHeaderBytes;
  if (L > body || W > body - L)
    fail("plan '", path, "' is truncated: the header announces ", L, " manifest + ", W,
         " weight bytes but only ", body, " follow");
  if (L + W != body)
    fail("plan '", path, "' is damaged: ", body - L - W, " unexpected bytes after the weights");
  uint64_t actual = checksum64(d + kPlanHeaderBytes, L + W);
  if (actual != sum)
    fail("plan '", path, "' is damaged: checksum ", hex64(actual), " does not match the ",
         hex64(sum), " in its header");
  p.checksum = sum;

  try {
    p.manifest = nlohmann::json::parse(d + kPlanHeaderBytes, d + kPlanHeaderBytes + L);
  } catch (const nlohmann::json::exception &e) {
    fail("plan '", path, "': manifest is not valid JSON: ", e.what());
  }
  PlanParser P{path};
  const auto &m = p.manifest;
  if (!m.is_object())
    fail("plan '", path, "': manifest is not a JSON object");
  std::string format = P.string(m, "", "format");
  if (format != "pipemesh-plan")
    P.bad("format", "is '" + format + "', expected 'pipemesh-plan'");
  int64_t mv = P.integer(m, "", "version");
  if (mv != kPlanVersion)
    fail("plan '", path, "' has plan format version ", mv, " in its manifest, this runtime reads ",
         kPlanVersion);
  P.parseModel(m, p);
  P.parseParams(m, p);
  p.weights = Safetensors::parse(d + kPlanHeaderBytes + L, W, "plan '" + path + "' weights");
  const auto &ranks = P.array(m, "", "ranks");
  const auto &par = P.field(m, "", "parallel");
  p.replicasElided =
      par.contains("replicas_elided") && P.boolean(par, "parallel", "replicas_elided");
  if (!p.replicasElided) {
    for (size_t i = 0; i < ranks.size(); ++i) {
      RankPlan rp;
      P.parseRank(ranks[i], "ranks[" + std::to_string(i) + "]", p, rp);
      for (const RankPlan &o : p.listed)
        if (o.rank == rp.rank)
          P.bad("ranks[" + std::to_string(i) + "].rank", "repeats rank " + std::to_string(rp.rank));
      p.listed.push_back(std::move(rp));
    }
    return p;
  }

  // An elided plan: the listed programs, and the replicas wanted (this
  // process's own, unless it is dp rank 0), each from a copy of its listed
  // entry taken before the entries become dp rank 0's programs.
  const int64_t dp = p.parallel.dp;
  std::vector<size_t> entry = P.listedEntries(m, p);
  struct Replica {
    int64_t q, d;
    nlohmann::json entry;
  };
  std::vector<Replica> replicas;
  for (int64_t r = 0; r < p.parallel.worldSize; ++r)
    if (r % dp != 0 && (ownRank == kEveryRank || ownRank == r))
      replicas.push_back({r / dp, r % dp, ranks[entry[r / dp]]});
  for (Replica &rep : replicas)
    replica::derive(rep.entry, rep.d);
  for (size_t q = 0; q < entry.size(); ++q) {
    std::string where = "ranks[" + std::to_string(entry[q]) + "]";
    replica::derive(p.manifest["ranks"][entry[q]], 0);
    RankPlan rp;
    P.parseRank(ranks[entry[q]], where, p, rp, /*replicas=*/dp);
    p.listed.push_back(std::move(rp));
  }
  for (Replica &rep : replicas) {
    RankPlan rp;
    P.parseRank(rep.entry,
                "ranks[" + std::to_string(entry[rep.q]) + "] (dp replica " +
                    std::to_string(rep.d) + ")",
                p, rp);
    p.derived.push_back(std::move(rp));
  }
  return p;
}

} // namespace pipemesh::rt
