//===- Report.cpp - what pipemesh-sim prints and writes -------------------===//
#include "pipemesh/Sim/Report.h"

#include "llvm/Support/Format.h"

#include <cstdio>

using namespace pipemesh;
using namespace pipemesh::sim;
namespace json = llvm::json;

/// Model FLOPs (no recomputation) per rank and second; 0 when the plan
/// counts none.
static double modelFlopsPerRank(const Job &job, const SimResult &res) {
  return res.stepTimeS > 0 && !res.ranks.empty()
             ? job.flopsPerStep / res.stepTimeS / (double)res.ranks.size()
             : 0;
}

json::Value pipemesh::sim::summaryJson(const Job &job, const cost::Cluster &cluster,
                                       const SimResult &res) {
  json::Array peaks, ranks;
  bool fits = true;
  for (const RankStats &r : res.ranks) {
    peaks.push_back(r.peakMemBytes);
    if (cluster.device.memCapacity > 0 && (double)r.peakMemBytes > cluster.device.memCapacity)
      fits = false;
    json::Object work;
    for (int w = 0; w < 6; ++w)
      work[workName((Work)w)] = r.workS[w];
    ranks.push_back(json::Object{{"rank", r.rank},
                                 {"compute_s", r.computeS},
                                 {"recompute_s", r.recomputeS},
                                 {"bubble_s", r.bubbleS},
                                 {"exposed_comm_s", r.exposedCommS},
                                 {"end_s", r.endS},
                                 {"peak_mem_bytes", r.peakMemBytes},
                                 {"arena_bytes", r.arenaBytes},
                                 {"persistent_bytes", job.ranks[r.rank].persistentBytes},
                                 {"p2p_bytes", r.p2pBytes},
                                 {"collective_bytes", r.collectiveBytes},
                                 {"collective_busy_s", r.collectiveBusyS},
                                 {"work_s", std::move(work)}});
  }
  const double modelFlops = modelFlopsPerRank(job, res), peak = cluster.device.peakFlops();
  return json::Object{{"plan", job.name},
                      {"description", job.description},
                      {"cluster", cluster.name},
                      {"world_size", (int64_t)job.ranks.size()},
                      {"step_time_s", res.stepTimeS},
                      {"tokens_per_step", job.tokensPerStep},
                      {"tokens_per_s", res.tokensPerS},
                      {"model_tflops_per_rank", modelFlops / 1e12},
                      {"mfu", peak > 0 ? modelFlops / peak : 0.0},
                      {"compute_frac", res.computeFrac},
                      {"bubble_frac", res.bubbleFrac},
                      {"exposed_comm_frac", res.exposedCommFrac},
                      {"all_device_idle_frac", res.allDeviceIdleFrac},
                      {"all_device_idle_s", res.allDeviceIdleS},
                      {"recompute_frac", res.recomputeFrac},
                      {"floor_s", res.floorS},
                      {"collective_floor_s", res.collectiveFloorS},
                      {"compute_max_s", res.computeMaxS},
                      {"peak_mem_bytes", std::move(peaks)},
                      {"max_peak_mem_bytes", res.maxPeakMemBytes},
                      {"mem_capacity_bytes", cluster.device.memCapacity},
                      {"fits_memory", fits},
                      {"ranks", std::move(ranks)}};
}

static std::string human(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

static std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s * 1e3);
  return buf;
}

void pipemesh::sim::printSummary(llvm::raw_ostream &os, const Job &job,
                                 const cost::Cluster &cluster, const SimResult &res) {
  os << "pipemesh-sim: " << (job.name.empty() ? "job" : job.name);
  if (!job.description.empty())
    os << " (" << job.description << ")";
  os << "\n  cluster " << cluster.name << ": " << cluster.device.name << " ("
     << llvm::format("%.1f", cluster.device.peakFlops() / 1e12) << " TFLOP/s "
     << cost::precisionName(cluster.device.precision) << ", "
     << llvm::format("%.0f", cluster.device.memBandwidth / 1e9) << " GB/s, "
     << human(cluster.device.memCapacity) << ")";
  if (cluster.gpusPerNode > 0)
    os << ", " << cluster.gpusPerNode << " per node";
  os << "; " << cluster.intraNode.name << " "
     << llvm::format("%.1f", cluster.intraNode.bandwidth / 1e9) << " GB/s within, "
     << cluster.interNode.name << " " << llvm::format("%.2f", cluster.interNode.bandwidth / 1e9)
     << " GB/s between nodes\n";
  if (job.hierarchicalDp) {
    // Which dp groups the cluster's nodes split (the others run flat).
    int64_t groups = 0, split = 0;
    cost::Cluster::Spread shape;
    for (const Group &g : job.groups)
      if (g.name == "dp") {
        ++groups;
        cost::Cluster::Spread s = cluster.spreadOf(g.members);
        if (s.splits())
          ++split, shape = std::move(s);
      }
    if (split == 0)
      os << "  dp collectives flat: every dp group is within one node or has one rank per node\n";
    else
      os << "  dp collectives hierarchical on "
         << (split == groups ? std::string("every dp group")
                             : std::to_string(split) + " of " + std::to_string(groups) +
                                   " dp groups (the others flat)")
         << ": " << shape.nodes << " nodes x " << shape.perNode << "\n";
  }
  os << "  step " << ms(res.stepTimeS) << " ms, " << llvm::format("%.0f", res.tokensPerS)
     << " tokens/s; bubble " << llvm::format("%.1f", 100 * res.bubbleFrac)
     << "%, exposed comm " << llvm::format("%.1f", 100 * res.exposedCommFrac)
     << "%, all-device idle " << llvm::format("%.1f", 100 * res.allDeviceIdleFrac)
     << "%, recompute " << llvm::format("%.1f", 100 * res.recomputeFrac) << "%";
  if (modelFlopsPerRank(job, res) > 0 && cluster.device.peakFlops() > 0)
    os << "; MFU "
       << llvm::format("%.1f", 100 * modelFlopsPerRank(job, res) / cluster.device.peakFlops())
       << "%";
  os << "\n";
  char head[160];
  std::snprintf(head, sizeof head, "  %5s %11s %11s %11s %11s %11s %12s %12s\n", "rank",
                "compute ms", "recomp ms", "bubble ms", "exposed ms", "end ms", "peak mem",
                "arena");
  os << head;
  for (const RankStats &r : res.ranks)
    os << llvm::format("  %5lld %11s %11s %11s %11s %11s %12s %12s\n", (long long)r.rank,
                       ms(r.computeS).c_str(), ms(r.recomputeS).c_str(), ms(r.bubbleS).c_str(),
                       ms(r.exposedCommS).c_str(), ms(r.endS).c_str(),
                       human((double)r.peakMemBytes).c_str(),
                       r.arenaBytes ? human((double)r.arenaBytes).c_str() : "-");
  if (cluster.device.memCapacity > 0 && (double)res.maxPeakMemBytes > cluster.device.memCapacity)
    os << "  warning: peak memory " << human((double)res.maxPeakMemBytes) << " exceeds the "
       << cluster.device.name << "'s " << human(cluster.device.memCapacity) << "\n";
}
