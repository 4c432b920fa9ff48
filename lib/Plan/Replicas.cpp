//===- Replicas.cpp - the dp replicas of an elided plan -------------------===//
//
// See include/pipemesh/Plan/Replicas.h for the rules.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/Replicas.h"

#include <map>

using namespace llvm;

namespace pipemesh::plan {

json::Object replicaOf(const json::Object &entry, int64_t d) {
  json::Object r = entry;
  int64_t base = entry.getInteger("rank").value_or(0);
  r["rank"] = base + d;
  r["dp_rank"] = d;
  if (json::Object *groups = r.getObject("groups"))
    if (json::Array *tied = groups->getArray("tied"))
      for (json::Value &m : *tied)
        m = m.getAsInteger().value_or(0) + d;
  if (json::Array *bufs = r.getArray("buffers"))
    for (json::Value &bv : *bufs)
      if (json::Object *b = bv.getAsObject())
        if (auto n = b->getInteger("shard_numel"))
          (*b)["elem_offset"] = b->getInteger("elem_offset").value_or(0) + d * *n;
  if (json::Array *program = r.getArray("program"))
    for (json::Value &iv : *program) {
      json::Object *in = iv.getAsObject();
      if (!in)
        continue;
      if (auto peer = in->getInteger("peer"))
        (*in)["peer"] = *peer + d;
      if (json::Array *entries = in->getArray("params"))
        for (json::Value &ev : *entries)
          if (json::Object *e = ev.getAsObject(); e && e->erase("norm_dp0_only") && d != 0)
            (*e)["norm_weight"] = 0.0;
    }
  return r;
}

bool isElided(const json::Object &manifest) {
  const json::Object *par = manifest.getObject("parallel");
  return par && par->getBoolean("replicas_elided").value_or(false);
}

/// The entries of an elided manifest by pipeline rank; nullopt with `why`
/// when one is missing, repeated or not dp rank 0.
static std::optional<std::map<int64_t, const json::Object *>>
entriesByPipelineRank(const json::Object &manifest, std::string &why) {
  const json::Object *par = manifest.getObject("parallel");
  const int64_t pp = par->getInteger("pp").value_or(1), dp = par->getInteger("dp").value_or(1);
  const json::Array *ranks = manifest.getArray("ranks");
  if (!ranks || pp < 1 || dp < 1) {
    why = "an elided manifest needs ranks and positive parallel.pp and dp";
    return std::nullopt;
  }
  std::map<int64_t, const json::Object *> byPipelineRank;
  for (const json::Value &rv : *ranks) {
    const json::Object *r = rv.getAsObject();
    std::optional<int64_t> g = r ? r->getInteger("rank") : std::nullopt;
    if (!g || *g < 0 || *g % dp != 0 || *g / dp >= pp || !byPipelineRank.emplace(*g / dp, r).second) {
      why = "an elided manifest lists rank " + (g ? std::to_string(*g) : std::string("?")) +
            ": expected dp rank 0 of each of the " + std::to_string(pp) +
            " pipeline ranks once (ranks 0, " + std::to_string(dp) + ", ...)";
      return std::nullopt;
    }
  }
  if ((int64_t)byPipelineRank.size() != pp) {
    why = "an elided manifest lists " + std::to_string(byPipelineRank.size()) + " of the " +
          std::to_string(pp) + " pipeline ranks";
    return std::nullopt;
  }
  return byPipelineRank;
}

bool checkElided(const json::Object &manifest, std::string &why) {
  return !isElided(manifest) || entriesByPipelineRank(manifest, why).has_value();
}

bool expandReplicas(json::Object &manifest, std::string &why) {
  if (!isElided(manifest))
    return true;
  auto byPipelineRank = entriesByPipelineRank(manifest, why);
  if (!byPipelineRank)
    return false;
  const int64_t dp = manifest.getObject("parallel")->getInteger("dp").value_or(1);
  json::Array all;
  for (auto &[p, entry] : *byPipelineRank)
    for (int64_t d = 0; d < dp; ++d)
      all.push_back(replicaOf(*entry, d));
  manifest["ranks"] = std::move(all);
  manifest.getObject("parallel")->erase("replicas_elided");
  return true;
}

} // namespace pipemesh::plan
