//===- PlanSearch.cpp - groups=auto, zero=auto and --explain --------------===//
//
// The searches emit candidate plans and simulate them: first the skeleton
// (SkeletonJob.h: costs per action, from the rank programs alone) ranks many
// candidates in milliseconds, then the best are emitted and simulated
// exactly until two fit mem-limit, and the faster is kept. --explain prints
// the chosen plan against the best of every other schedule.
//
//===----------------------------------------------------------------------===//
#include "PlanBuilder.h"
#include "RankPrograms.h"
#include "SkeletonJob.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Sim/PlanLoader.h"

#include "llvm/Support/Format.h"

#include <chrono>

using namespace mlir;
namespace json = llvm::json;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan::detail {

PlanBuilder::Prediction PlanBuilder::predictCurrent(func::FuncOp train,
                                                    const cost::Cluster &cluster) {
  if (!searchedIsCurrent())
    return predict(train, cluster);
  Prediction p; // a search simulated its choice already
  p.ok = true;
  p.result = searched->result;
  return p;
}

PlanBuilder::Prediction PlanBuilder::predict(func::FuncOp train, const cost::Cluster &cluster,
                                             bool keepRanks) {
  Prediction out;
  std::string why;
  std::vector<RankPlan> ranks;
  bool emitted;
  {
    // A candidate that does not fit is an answer of the search, not an error.
    ScopedDiagnosticHandler quiet(sh.module.getContext(), [&](Diagnostic &d) {
      if (why.empty())
        why = d.str();
      return success();
    });
    emitted = succeeded(buildRanks(train, ranks, /*searching=*/true));
  }
  if (!emitted) {
    out.why = why.empty() ? "cannot be emitted" : why;
    return out;
  }
  sim::LoadedPlan lp;
  if (!jobOfRanks(ranks, lp, out.why))
    return out;
  out.result = sim::simulate(lp.job, cluster);
  out.ok = out.result.ok;
  if (!out.ok)
    out.why = out.result.error;
  else if (keepRanks && why.empty())
    out.ranks = std::move(ranks);
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
  // With defer-w not given, each backward split (DeferW) is a candidate too
  // (bucket only where a chunk's W has several gradient buckets: otherwise
  // it is chunk's order).
  std::vector<DeferW> splits{DeferW::None, DeferW::Chunk, DeferW::All};
  if (llvm::any_of(sh.step.bwdWeightParts, [](const auto &parts) { return parts.size() > 1; }))
    splits.push_back(DeferW::Bucket);
  if (sh.opts.deferW)
    splits = {*sh.opts.deferW};
  using Key = std::tuple<int64_t, int64_t, DeferW>; // (f, b, split)
  std::map<Key, double> skeleton;                   // -> step time
  auto set = [&](const Key &k) {
    sh.sched.fwdGroups = uniform(std::get<0>(k));
    sh.sched.bwdGroups = uniform(std::get<1>(k));
    sh.sched.deferW = std::get<2>(k);
  };
  auto rough = [&](const Key &k) -> double {
    if (auto it = skeleton.find(k); it != skeleton.end())
      return it->second;
    double t = INFINITY;
    set(k);
    std::string why;
    if (validateSchedule(sh.sched, why))
      if (sim::SimResult r = skeletonStep(cluster); r.ok)
        t = r.stepTimeS;
    return skeleton[k] = t;
  };
  std::optional<Key> best;
  auto consider = [&](const Key &k) {
    double t = rough(k);
    if (t < INFINITY && (!best || t < skeleton[*best]))
      best = k;
  };
  for (DeferW d : splits)
    for (int64_t g : sizes)
      consider({g, g, d});
  if (best) {
    auto [f0, b0, d0] = *best;
    for (int64_t b : sizes)
      consider({f0, b, d0});
    int64_t b1 = std::get<1>(*best);
    for (int64_t f : sizes)
      consider({f, b1, d0});
  }
  // Exact checks, best skeletons first, until two candidates fit. Without
  // a memory limit (and so without recompute=auto) nothing the skeleton
  // leaves out decides between them: its best stands.
  std::vector<std::pair<double, Key>> ranked;
  for (auto &[k, t] : skeleton)
    if (t < INFINITY)
      ranked.push_back({t, k});
  llvm::sort(ranked, [](const auto &a, const auto &b) {
    return a.first < b.first ||
           (a.first == b.first && (int)std::get<2>(a.second) < (int)std::get<2>(b.second));
  });
  if (!sh.opts.memLimit && !ranked.empty()) {
    set(ranked.front().second);
    return finish(skeleton.size());
  }
  std::string lastWhy = "no valid order";
  auto apply = [&](size_t i) { set(ranked[i].second); };
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
  sim::SimResult r;
  for (int64_t lag : kWaitLags) {
    if (failed(buildRankPrograms(lag)))
      break;
    sim::Job job =
        detail::skeletonJob(sh.module, sh.step, sh.sched, sh.opts.dp, cluster.device, tokens);
    job.hierarchicalDp = sh.opts.dpCollectives == "hierarchical";
    r = sim::simulate(job, cluster);
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
  searched.reset();
  for (size_t i = 0; i < candidates && fitting < 2; ++i) {
    apply(i);
    Prediction p = predict(train, cluster, /*keepRanks=*/true);
    if (!p.ok) {
      why = p.why;
      continue;
    }
    ++fitting;
    if (p.result.stepTimeS < bestExact) {
      bestExact = p.result.stepTimeS;
      chosen = (int64_t)i;
      searched.reset();
      if (p.ranks)
        searched = Searched{currentChoice(), std::move(*p.ranks), p.result};
    }
  }
  return chosen;
}

/// zero=auto (mixed sharding, as AMSP argues): per chunk, whether its
/// parameters, gradients and optimizer state are sharded over dp (ZeRO level
/// 0..3). Coordinate descent over the chunks, from the best uniform level,
/// on the skeleton simulation
/// (milliseconds a candidate): a candidate whose skeleton peak fits
/// mem-limit beats one that does not, then the faster wins (by more than
/// 0.1%: otherwise the less sharded stays). The skeleton leaves out
/// recomputation, so the candidates it saw are then emitted and simulated
/// exactly, best first, until two fit (with recompute=auto, memory saved by
/// sharding turns into less recomputation there), and the fastest of those,
/// the (at most three, with recompute=auto) fastest skeletons over the limit,
/// which may fit by recomputing, and the uniform levels is kept.
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
  // The uniform levels (level z at index z); the descent starts from the
  // best of them.
  std::vector<std::pair<Rough, std::vector<int64_t>>> uniform;
  for (int64_t z = 0; z <= 3; ++z)
    uniform.push_back({rough(std::vector<int64_t>(chunks, z)), std::vector<int64_t>(chunks, z)});
  std::vector<int64_t> best = uniform[0].second;
  Rough cur = uniform[0].first;
  for (auto &[r, z] : llvm::drop_begin(uniform))
    if (better(r, cur)) {
      best = z;
      cur = r;
    }
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
  // Exact checks, each candidate emitted and simulated once.
  std::map<std::vector<int64_t>, double> exact; // step time; INFINITY: does not fit
  // prefetch=auto: each ZeRO-3 candidate at its best depth (and what it tried).
  std::map<std::vector<int64_t>, std::pair<int64_t, std::vector<std::pair<int64_t, double>>>>
      depths;
  searched.reset();
  double fastestKept = INFINITY; // the step of the plan in `searched`
  auto check = [&](const std::vector<int64_t> &z) {
    auto [it, added] = exact.try_emplace(z, INFINITY);
    if (added) {
      sh.zeroChunks = z;
      if (sh.opts.prefetchAuto && llvm::is_contained(z, 3)) {
        auto &[depth, tried] = depths[z];
        std::tie(depth, it->second) = fastestPrefetch(train, cluster, &tried);
      } else if (Prediction p = predict(train, cluster, /*keepRanks=*/true); p.ok) {
        it->second = p.result.stepTimeS;
        if (p.ranks && it->second < fastestKept) {
          fastestKept = it->second;
          searched = Searched{currentChoice(), std::move(*p.ranks), p.result};
        }
      }
    }
    return it->second < INFINITY;
  };
  // The skeleton's best, until two fit.
  for (size_t i = 0, fitting = 0; i < ranked.size() && fitting < 2; ++i)
    fitting += check(ranked[i].second);
  // With recompute=auto a candidate whose skeleton is over the limit may
  // still fit by recomputing, and recomputing can cost less than the
  // communication that more sharding adds (a 13B model at dp=16: ZeRO-2
  // with 9% recompute beats ZeRO-3 with 5% by a quarter): the few skeletons
  // faster than the best fitting one.
  if (sh.opts.recompute == "auto" && sh.opts.memLimit && !ranked.empty()) {
    const double bestFittingSkeleton =
        ranked.front().first.fits ? ranked.front().first.t : INFINITY;
    std::vector<std::pair<double, std::vector<int64_t>>> overLimit;
    for (auto &[r, z] : ranked)
      if (!r.fits && r.t < bestFittingSkeleton)
        overLimit.push_back({r.t, z});
    llvm::sort(overLimit);
    constexpr size_t kOverLimitTries = 3;
    for (size_t i = 0; i < overLimit.size() && i < kOverLimitTries; ++i)
      check(overLimit[i].second);
  }
  // And the uniform levels (the two best by the skeleton; with
  // recompute=auto all four, since the skeleton, which leaves recomputation
  // out, can rank a level that then recomputes above one that does not: 7B
  // interleaved at dp=8 ran 5% slower with the mix it preferred than at
  // ZeRO-3 everywhere): a mix is kept only where it beats them exactly.
  llvm::erase_if(uniform, [](const auto &u) { return u.first.t == INFINITY; });
  std::stable_sort(uniform.begin(), uniform.end(),
                   [&](const auto &a, const auto &b) { return better(a.first, b.first); });
  const size_t uniformTries = sh.opts.recompute == "auto" ? uniform.size() : 2;
  for (size_t i = 0; i < uniform.size() && i < uniformTries; ++i)
    check(uniform[i].second);
  // The fastest that fits; when nothing does, shard everything and let the
  // emission say by how much the plan is over the limit.
  std::vector<int64_t> choice(chunks, 3);
  double fastest = INFINITY;
  for (auto &[z, t] : exact)
    if (t < fastest)
      fastest = t, choice = z;
  if (auto d = depths.find(choice); d != depths.end()) // choosePrefetch need not redo it
    std::tie(sh.prefetch, sh.prefetchSearch) = d->second;
  // The fastest uniform level without ZeRO-3 (no prefetch depth to choose)
  // that fits, for groups=auto to try as well.
  sh.zeroUniformAlternative.clear();
  double uniformT = INFINITY;
  for (auto &[z, t] : exact)
    if (t < uniformT && llvm::all_equal(z) && !z.empty() && z.front() <= 2 && z != choice)
      uniformT = t, sh.zeroUniformAlternative = z;
  sh.zeroChunks = std::move(choice);
  sh.zeroSearchCandidates = (int64_t)seen.size();
  sh.zeroSearchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

/// prefetch=auto: ZeRO-3 gathers run 1 to 4 layers ahead; depths are emitted
/// and simulated in turn until one does not fit mem-limit (a deeper one only
/// holds more) or is not 0.1% faster than the one before (the step falls
/// with depth until the gathers are hidden, then stays). Breadth-first ZeRO-3
/// plans want 2 or 3 (1.3B bfs vpp=3 at dp=16: 3.25 s at 1, 1.37 s at 3),
/// depth-first ones often 1. Leaves sh.prefetch at the chosen depth.
std::pair<int64_t, double>
PlanBuilder::fastestPrefetch(func::FuncOp train, const cost::Cluster &cluster,
                             std::vector<std::pair<int64_t, double>> *tried) {
  int64_t best = 1;
  double fastest = INFINITY;
  for (int64_t depth = 1; depth <= 4; ++depth) {
    sh.prefetch = depth;
    Prediction p = predict(train, cluster);
    const double t = p.ok ? p.result.stepTimeS : INFINITY;
    if (tried)
      tried->push_back({depth, t});
    if (!(t < fastest * 0.999))
      break;
    best = depth;
    fastest = t;
  }
  sh.prefetch = best;
  return {best, fastest};
}

void PlanBuilder::choosePrefetch(func::FuncOp train, const cost::Cluster &cluster) {
  if (sh.opts.dp > 1 && llvm::is_contained(sh.zeroChunks, 3) && sh.prefetchSearch.empty())
    fastestPrefetch(train, cluster, &sh.prefetchSearch);
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
     << " activations=" << sh.opts.activations << " params=" << sh.opts.params
     << " grad-reduce=" << sh.opts.gradReduce
     << (sh.opts.dpCollectives == "flat" ? "" : " dp-collectives=" + sh.opts.dpCollectives)
     << " on cluster " << cluster.name
     << " (simulated step, * = chosen)\n";
  auto nameOf = [&](const ScheduleConfig &c) {
    std::string name = scheduleKindName(c.kind).str();
    if (c.kind == ScheduleKind::Elastic)
      name += " " + groupsText(c.fwdGroups) + "/" + groupsText(c.bwdGroups);
    if (c.deferW != DeferW::None)
      name += " defer-w=" + deferWName(c.deferW).str();
    return name;
  };
  std::string chosenName = nameOf(chosen);
  Prediction mine = predictCurrent(train, cluster);
  row(chosenName, mine, true);
  if (mine.ok) {
    const sim::SimResult &r = mine.result;
    os << llvm::format("  %-28s%9.4f s (busiest collective stream %.4f s, busiest compute %.4f "
                       "s, recompute included)\n",
                       (const char *)"floor of the chosen plan", r.floorS, r.collectiveFloorS,
                       r.computeMaxS);
  }
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                         ScheduleKind::BFS, ScheduleKind::ZBH1, ScheduleKind::ZBH2,
                         ScheduleKind::Elastic}) {
    if (k == chosen.kind)
      continue;
    ScheduleConfig c = chosen;
    c.kind = k;
    c.fwdGroups.clear();
    c.bwdGroups.clear();
    c.deferW = DeferW::None; // the other schedules as they are (elastic: searched)
    std::string why;
    if ((k == ScheduleKind::Interleaved && c.vpp == 1) || !validateSchedule(c, why))
      continue;
    sh.sched = c;
    if (k == ScheduleKind::Elastic) {
      // No group sizes that fit is this row's answer, not the compile's error.
      Prediction none;
      ScopedDiagnosticHandler quiet(sh.module.getContext(), [&](Diagnostic &d) {
        if (none.why.empty())
          none.why = d.str();
        return success();
      });
      if (failed(chooseGroups(train, cluster))) {
        row("elastic groups=auto", none, false);
        continue;
      }
    }
    row(nameOf(sh.sched), predict(train, cluster), false);
  }
  sh.sched = chosen;
}

} // namespace pipemesh::plan::detail
