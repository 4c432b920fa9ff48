//===- Schedule.cpp - per-rank pipeline action order -----------------------===//
//
// GPipe, 1F1B and interleaved 1F1B as Megatron-LM runs them
// (megatron/core/pipeline_parallel/schedules.py): the same warm-up counts,
// the same steady-state order (one forward, then one backward) and, for the
// virtual pipeline, the same micro-batch/chunk table. The elastic schedule
// generalizes that table to separate forward and backward group vectors; the
// Zero Bubble schedules come from a greedy list scheduling with unit costs
// (what the Zero Bubble paper's hand-made H1/H2 orders amount to).
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/Schedule.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <map>
#include <utility>

namespace pipemesh::plan {

std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name) {
  if (name == "gpipe")
    return ScheduleKind::GPipe;
  if (name == "1f1b")
    return ScheduleKind::OneFOneB;
  if (name == "interleaved")
    return ScheduleKind::Interleaved;
  if (name == "elastic")
    return ScheduleKind::Elastic;
  if (name == "bfs")
    return ScheduleKind::BFS;
  if (name == "zb-h1")
    return ScheduleKind::ZBH1;
  if (name == "zb-h2")
    return ScheduleKind::ZBH2;
  return std::nullopt;
}

llvm::StringRef scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved:
    return "interleaved";
  case ScheduleKind::Elastic:
    return "elastic";
  case ScheduleKind::BFS:
    return "bfs";
  case ScheduleKind::ZBH1:
    return "zb-h1";
  case ScheduleKind::ZBH2:
    return "zb-h2";
  }
  return "?";
}

std::optional<DeferW> parseDeferW(llvm::StringRef name) {
  if (name == "none")
    return DeferW::None;
  if (name == "chunk")
    return DeferW::Chunk;
  if (name == "all")
    return DeferW::All;
  if (name == "bucket")
    return DeferW::Bucket;
  return std::nullopt;
}

llvm::StringRef deferWName(DeferW d) {
  switch (d) {
  case DeferW::None:
    return "none";
  case DeferW::Chunk:
    return "chunk";
  case DeferW::All:
    return "all";
  case DeferW::Bucket:
    return "bucket";
  }
  return "?";
}

ScheduleKind effectiveKind(const ScheduleConfig &cfg) {
  switch (cfg.kind) {
  case ScheduleKind::OneFOneB:
  case ScheduleKind::Interleaved:
    return cfg.vpp > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
  default:
    return cfg.kind;
  }
}

static bool isZeroBubble(ScheduleKind kind) {
  return kind == ScheduleKind::ZBH1 || kind == ScheduleKind::ZBH2;
}

bool splitsBackward(const ScheduleConfig &cfg) {
  return isZeroBubble(cfg.kind) || cfg.deferW != DeferW::None;
}

int64_t effectiveGroup(const ScheduleConfig &cfg) { return cfg.group > 0 ? cfg.group : cfg.pp; }

bool validateSchedule(const ScheduleConfig &cfg, std::string &why) {
  if (cfg.pp < 1 || cfg.vpp < 1 || cfg.microbatches < 1) {
    why = "pp, vpp and microbatches must be positive";
    return false;
  }
  if (cfg.group < 0) {
    why = "group must be positive";
    return false;
  }
  if (cfg.deferW != DeferW::None && cfg.kind != ScheduleKind::Elastic &&
      cfg.kind != ScheduleKind::BFS) {
    why = "defer-w is an option of schedule=elastic and schedule=bfs (zb-h1 and zb-h2 always "
          "split the backward), got schedule=" +
          scheduleKindName(cfg.kind).str();
    return false;
  }
  if (isZeroBubble(cfg.kind) && cfg.vpp != 1) {
    why = "the " + scheduleKindName(cfg.kind).str() +
          " schedule runs one chunk per pipeline rank (vpp=1), got vpp=" + std::to_string(cfg.vpp);
    return false;
  }
  for (auto [name, groups] : {std::pair{"fwd-groups", &cfg.fwdGroups},
                              std::pair{"bwd-groups", &cfg.bwdGroups}}) {
    if (groups->empty())
      continue;
    if (cfg.kind != ScheduleKind::Elastic) {
      why = std::string(name) + " is an option of schedule=elastic";
      return false;
    }
    int64_t sum = 0;
    for (int64_t g : *groups) {
      if (g <= 0) {
        why = std::string(name) + " must list positive group sizes";
        return false;
      }
      sum += g;
    }
    if (sum != cfg.microbatches) {
      why = std::string(name) + " sums to " + std::to_string(sum) + " but microbatches=" +
            std::to_string(cfg.microbatches);
      return false;
    }
  }
  // Megatron's interleaved order deadlocks for some sizes (a micro-batch
  // group smaller than pp, a last group of fewer than pp micro-batches): a
  // forward waits for a backward that waits for that forward. Refuse those.
  if (std::string dead = findDeadlock(chainPrograms(cfg)); !dead.empty()) {
    why = "the " + scheduleKindName(effectiveKind(cfg)).str() + " schedule with pp=" +
          std::to_string(cfg.pp) + " vpp=" + std::to_string(cfg.vpp) +
          " microbatches=" + std::to_string(cfg.microbatches) +
          " group=" + std::to_string(effectiveGroup(cfg)) +
          " deadlocks (a forward waits for a backward that waits for it); Megatron's "
          "interleaved schedule needs group >= pp and microbatches % group either 0 or >= pp";
    return false;
  }
  return true;
}

namespace {
/// (micro-batch, local chunk) in the order a group vector sends micro-batches
/// through the local chunks: a whole group through chunk 0, then through
/// chunk 1, ..., then the next group.
std::vector<std::pair<int64_t, int64_t>> groupTable(llvm::ArrayRef<int64_t> groups,
                                                    int64_t vpp) {
  std::vector<std::pair<int64_t, int64_t>> table;
  int64_t lo = 0;
  for (int64_t g : groups) {
    for (int64_t v = 0; v < vpp; ++v)
      for (int64_t j = lo; j < lo + g; ++j)
        table.push_back({j, v});
    lo += g;
  }
  return table;
}

std::vector<int64_t> groupsOrAll(llvm::ArrayRef<int64_t> groups, int64_t m) {
  if (groups.empty())
    return {m};
  return std::vector<int64_t>(groups.begin(), groups.end());
}

/// Elastic: forward table, backward table (local chunk counted from the
/// last) and the largest lead of a forward over its backward.
struct ElasticTables {
  std::vector<std::pair<int64_t, int64_t>> fwd, bwd;
  int64_t lead = 0;
};
ElasticTables elasticTables(const ScheduleConfig &cfg) {
  int64_t m = cfg.microbatches, vpp = cfg.vpp;
  ElasticTables t;
  if (cfg.kind == ScheduleKind::BFS) {
    t.fwd = groupTable({m}, vpp);
    t.bwd = t.fwd;
  } else {
    t.fwd = groupTable(groupsOrAll(cfg.fwdGroups, m), vpp);
    t.bwd = groupTable(groupsOrAll(cfg.bwdGroups, m), vpp);
  }
  std::map<std::pair<int64_t, int64_t>, int64_t> fpos;
  for (auto [k, e] : llvm::enumerate(t.fwd))
    fpos[e] = k;
  for (auto [k, e] : llvm::enumerate(t.bwd)) {
    // The k-th backward is micro-batch e.first through local chunk
    // vpp - 1 - e.second; its forward must come among the forwards run
    // before it.
    int64_t f = fpos[{e.first, vpp - 1 - e.second}];
    t.lead = std::max(t.lead, f - (int64_t)k);
  }
  return t;
}

/// The Zero Bubble orders (vpp = 1): a list scheduling of every rank with
/// unit-time F, B and W. At each free moment a rank runs, in this priority,
/// a B whose input gradient has arrived, an F whose activation has arrived
/// while fewer than `cap` micro-batches are in flight (forwarded and not yet
/// through W: the W still reads the forward's activations), and otherwise a
/// deferred W; the W's left at the end run last.
std::vector<std::vector<Action>> zeroBubbleOrders(const ScheduleConfig &cfg) {
  const int64_t pp = cfg.pp, m = cfg.microbatches;
  constexpr int64_t kUnknown = INT64_MAX;
  std::vector<std::vector<int64_t>> fDone(pp, std::vector<int64_t>(m, kUnknown));
  std::vector<std::vector<int64_t>> bDone = fDone;
  std::vector<int64_t> nextF(pp, 0), nextB(pp, 0), time(pp, 0);
  std::vector<std::vector<int64_t>> pendingW(pp);
  std::vector<std::vector<Action>> out(pp);
  // In flight on every rank: at most 1F1B's largest (pp, on its first
  // rank) for H1, 2 pp - 1 for H2. Letting the later ranks hold as many as
  // the first lets them defer W's behind the B's upstream waits for; with
  // unit costs H1 then ends 2 units after the chain's bound 3m + pp - 1
  // (1F1B: 3m + 3 (pp - 1)) and H2 reaches the bound.
  auto cap = [&](int64_t) { return cfg.kind == ScheduleKind::ZBH2 ? 2 * pp - 1 : pp; };
  auto finished = [&](int64_t r) { return nextF[r] == m && nextB[r] == m; };
  while (true) {
    // The unfinished rank that is earliest in time moves next: anything a
    // later rank will still run ends after this moment.
    int64_t r = -1;
    for (int64_t q = 0; q < pp; ++q)
      if (!finished(q) && (r < 0 || time[q] < time[r]))
        r = q;
    if (r < 0)
      break;
    int64_t t = time[r];
    int64_t j = nextB[r];
    bool bReady = j < nextF[r] && (r == pp - 1 || bDone[r + 1][j] <= t);
    int64_t f = nextF[r];
    // A micro-batch holds its activations until its W has run.
    int64_t inFlight = f - (nextB[r] - (int64_t)pendingW[r].size());
    bool fReady = f < m && inFlight < cap(r) && (r == 0 || fDone[r - 1][f] <= t);
    if (bReady) {
      out[r].push_back({r, j, true, false});
      bDone[r][j] = t + 1;
      pendingW[r].push_back(j);
      ++nextB[r];
    } else if (fReady) {
      out[r].push_back({r, f, false, false});
      fDone[r][f] = t + 1;
      ++nextF[r];
    } else if (!pendingW[r].empty()) {
      out[r].push_back({r, pendingW[r].front(), true, true});
      pendingW[r].erase(pendingW[r].begin());
    } else {
      time[r] = t + 1; // idle: wait for a neighbour
      continue;
    }
    time[r] = t + 1;
  }
  for (int64_t r = 0; r < pp; ++r)
    for (int64_t j : pendingW[r])
      out[r].push_back({r, j, true, true});
  return out;
}

/// Warm-up forwards, then one forward and one backward at a time, then the
/// remaining backwards: the steady state shared by 1F1B, interleaved and
/// elastic.
template <typename Fwd, typename Bwd>
std::vector<Action> oneForwardOneBackward(int64_t total, int64_t warm, Fwd fwd, Bwd bwd) {
  std::vector<Action> out;
  for (int64_t k = 0; k < warm; ++k)
    out.push_back(fwd(k));
  for (int64_t k = 0; k < total - warm; ++k) {
    out.push_back(fwd(warm + k));
    out.push_back(bwd(k));
  }
  for (int64_t k = std::max<int64_t>(total - warm, 0); k < total; ++k)
    out.push_back(bwd(k));
  return out;
}
/// Megatron's get_schedule_table: (micro-batch, local chunk) of the k-th
/// forward. Micro-batches go through chunk 0 in groups of `group`, then the
/// same group through chunk 1, ...; the last group takes the remainder.
std::vector<std::pair<int64_t, int64_t>> scheduleTable(int64_t m, int64_t vpp, int64_t group) {
  std::vector<std::pair<int64_t, int64_t>> table;
  for (int64_t lo = 0; lo < m; lo += group) {
    int64_t hi = lo + group >= m ? m : lo + group;
    for (int64_t v = 0; v < vpp; ++v)
      for (int64_t j = lo; j < hi; ++j)
        table.push_back({j, v});
    if (hi == m)
      break;
  }
  return table;
}
} // namespace

namespace {
template <typename Order>
std::vector<RankProgram> programsOf(const ScheduleConfig &cfg, Order order);

std::vector<Action> elasticOrder(const ScheduleConfig &cfg, const ElasticTables &t,
                                 int64_t rank, int64_t warm) {
  const int64_t pp = cfg.pp, vpp = cfg.vpp;
  auto fwd = [&](int64_t k) { return Action{t.fwd[k].second * pp + rank, t.fwd[k].first, false}; };
  auto bwd = [&](int64_t k) {
    return Action{(vpp - 1 - t.bwd[k].second) * pp + rank, t.bwd[k].first, true};
  };
  return oneForwardOneBackward((int64_t)t.fwd.size(), warm, fwd, bwd);
}

/// Elastic warm-up before the deadlock repair: the pipeline term plus the
/// tables' lead (Megatron's formula when the groups are equal).
int64_t elasticBaseWarmup(const ScheduleConfig &cfg, const ElasticTables &t, int64_t rank) {
  int64_t pipeline = (cfg.pp - rank - 1) * (cfg.vpp > 1 ? 2 : 1);
  return std::min(pipeline + t.lead, cfg.microbatches * cfg.vpp);
}

/// A rank's warm-up forwards: the base plus the deadlock repair's `extra`.
int64_t elasticWarmup(const ScheduleConfig &cfg, const ElasticTables &t, int64_t rank,
                      int64_t extra) {
  return std::min(elasticBaseWarmup(cfg, t, rank) + extra, cfg.microbatches * cfg.vpp);
}

/// Groups smaller than pp can deadlock the 1F1B steady state (a forward
/// waits for a backward that waits for it, Megatron's interleaved failure);
/// more warm-up forwards on every rank always cure it (all forwards first
/// is GPipe). The least such extra count.
int64_t elasticExtraWarmup(const ScheduleConfig &cfg, const ElasticTables &t) {
  const int64_t total = cfg.microbatches * cfg.vpp;
  for (int64_t extra = 0; extra < total; ++extra) {
    auto order = [&](int64_t r) {
      return elasticOrder(cfg, t, r, elasticWarmup(cfg, t, r, extra));
    };
    if (findDeadlock(programsOf(cfg, order)).empty())
      return extra;
  }
  return total;
}
} // namespace

int64_t warmupForwards(const ScheduleConfig &cfg, int64_t rank) {
  int64_t m = cfg.microbatches;
  switch (effectiveKind(cfg)) {
  case ScheduleKind::GPipe:
    return m * cfg.vpp;
  case ScheduleKind::OneFOneB:
    return std::min(cfg.pp - rank - 1, m);
  case ScheduleKind::Interleaved: {
    int64_t total = m * cfg.vpp;
    int64_t w = (cfg.pp - rank - 1) * 2 + (cfg.vpp - 1) * effectiveGroup(cfg);
    return std::min(w, total);
  }
  case ScheduleKind::Elastic:
  case ScheduleKind::BFS: {
    ElasticTables t = elasticTables(cfg);
    return elasticWarmup(cfg, t, rank, elasticExtraWarmup(cfg, t));
  }
  case ScheduleKind::ZBH1:
  case ScheduleKind::ZBH2: {
    // As for 1F1B: one forward fewer than run before the first backward.
    std::vector<Action> order = zeroBubbleOrders(cfg)[rank];
    int64_t before =
        std::find_if(order.begin(), order.end(), [](const Action &a) { return a.backward; }) -
        order.begin();
    return before >= m ? m : before - 1;
  }
  }
  return 0;
}

/// defer-w: splits each backward of the per-rank orders `base` (F and B) into
/// B and W. A greedy pass with unit costs (as zeroBubbleOrders) runs a rank's
/// next F or B as soon as its input is there and a pending W where it would
/// wait; the W's left run before the rank's next backward of another chunk
/// (DeferW::Chunk) or at the end (DeferW::All). The F/B order is unchanged,
/// so the communication is too.
static std::vector<std::vector<Action>>
deferWeightGradients(const ScheduleConfig &cfg, const std::vector<std::vector<Action>> &base) {
  const int64_t pp = cfg.pp, chunks = cfg.pp * cfg.vpp;
  constexpr int64_t kUnknown = INT64_MAX;
  std::map<std::pair<int64_t, int64_t>, int64_t> fDone, bDone; // (chunk, mb) -> end time
  auto doneAt = [&](const auto &done, int64_t chunk, int64_t mb) {
    auto it = done.find({chunk, mb});
    return it == done.end() ? kUnknown : it->second;
  };
  std::vector<size_t> next(pp, 0);
  std::vector<int64_t> time(pp, 0);
  std::vector<std::vector<Action>> pending(pp), out(pp);
  // Deadlock-free orders (validateSchedule's check of the unsplit ones) end
  // within their unit-cost length; past it, something waits forever: each
  // W then simply follows its B.
  int64_t horizon = 1;
  for (const auto &order : base)
    horizon += 2 * (int64_t)order.size();
  auto runW = [&](int64_t r) {
    out[r].push_back(pending[r].front());
    pending[r].erase(pending[r].begin());
  };
  while (true) {
    // The unfinished rank earliest in time moves next (anything a later
    // rank runs ends after this moment).
    int64_t r = -1;
    for (int64_t q = 0; q < pp; ++q)
      if ((next[q] < base[q].size() || !pending[q].empty()) && (r < 0 || time[q] < time[r]))
        r = q;
    if (r < 0)
      break;
    const int64_t t = time[r];
    time[r] = t + 1;
    if (t > horizon) {
      std::vector<std::vector<Action>> unsplit(pp);
      for (int64_t q = 0; q < pp; ++q)
        for (const Action &a : base[q]) {
          unsplit[q].push_back(a);
          if (a.backward)
            unsplit[q].push_back({a.chunk, a.microbatch, true, true});
        }
      return unsplit;
    }
    if (next[r] == base[r].size()) {
      runW(r);
      continue;
    }
    const Action &a = base[r][next[r]];
    int64_t ready = !a.backward ? (a.chunk > 0 ? doneAt(fDone, a.chunk - 1, a.microbatch) : 0)
                                : (a.chunk + 1 < chunks ? doneAt(bDone, a.chunk + 1, a.microbatch)
                                                        : 0);
    if (ready <= t && a.backward && cfg.deferW != DeferW::All && !pending[r].empty() &&
        pending[r].front().chunk != a.chunk) {
      runW(r); // the previous chunk's gradient completes first
      continue;
    }
    if (ready <= t) {
      out[r].push_back(a);
      (a.backward ? bDone : fDone)[{a.chunk, a.microbatch}] = t + 1;
      if (a.backward)
        pending[r].push_back({a.chunk, a.microbatch, true, true});
      ++next[r];
    } else if (!pending[r].empty()) {
      runW(r); // fills the wait
    }
  }
  return out;
}

std::vector<Action> rankSchedule(const ScheduleConfig &cfg, int64_t rank) {
  const int64_t pp = cfg.pp, vpp = cfg.vpp, m = cfg.microbatches;
  std::vector<Action> out;
  switch (effectiveKind(cfg)) {
  case ScheduleKind::GPipe:
    // Breadth-first: every micro-batch through each local chunk, then back.
    for (int64_t v = 0; v < vpp; ++v)
      for (int64_t j = 0; j < m; ++j)
        out.push_back({v * pp + rank, j, false});
    for (int64_t v = vpp - 1; v >= 0; --v)
      for (int64_t j = 0; j < m; ++j)
        out.push_back({v * pp + rank, j, true});
    return out;
  case ScheduleKind::OneFOneB: {
    auto fwd = [&](int64_t j) { return Action{rank, j, false}; };
    auto bwd = [&](int64_t j) { return Action{rank, j, true}; };
    return oneForwardOneBackward(m, warmupForwards(cfg, rank), fwd, bwd);
  }
  case ScheduleKind::Interleaved: {
    auto table = scheduleTable(m, vpp, effectiveGroup(cfg));
    int64_t total = (int64_t)table.size();
    auto fwd = [&](int64_t k) {
      return Action{table[k].second * pp + rank, table[k].first, false};
    };
    // The k-th backward walks the table with the chunks reversed.
    auto bwd = [&](int64_t k) {
      return Action{(vpp - 1 - table[k].second) * pp + rank, table[k].first, true};
    };
    return oneForwardOneBackward(total, warmupForwards(cfg, rank), fwd, bwd);
  }
  case ScheduleKind::Elastic:
  case ScheduleKind::BFS:
    if (cfg.deferW != DeferW::None)
      return rankSchedules(cfg)[rank];
    return elasticOrder(cfg, elasticTables(cfg), rank, warmupForwards(cfg, rank));
  case ScheduleKind::ZBH1:
  case ScheduleKind::ZBH2:
    return zeroBubbleOrders(cfg)[rank];
  }
  return out;
}

std::vector<std::vector<Action>> rankSchedules(const ScheduleConfig &cfg) {
  std::vector<std::vector<Action>> out(cfg.pp);
  if (isZeroBubble(cfg.kind))
    return zeroBubbleOrders(cfg);
  if ((cfg.kind == ScheduleKind::Elastic || cfg.kind == ScheduleKind::BFS) &&
      cfg.deferW != DeferW::None) {
    // The W's are placed by timing every rank together, on the unsplit orders.
    ScheduleConfig unsplit = cfg;
    unsplit.deferW = DeferW::None;
    return deferWeightGradients(cfg, rankSchedules(unsplit));
  }
  if (cfg.kind == ScheduleKind::Elastic || cfg.kind == ScheduleKind::BFS) {
    // The deadlock repair's extra warm-up is one count for every rank.
    ElasticTables t = elasticTables(cfg);
    int64_t extra = elasticExtraWarmup(cfg, t);
    for (int64_t r = 0; r < cfg.pp; ++r)
      out[r] = elasticOrder(cfg, t, r, elasticWarmup(cfg, t, r, extra));
    return out;
  }
  for (int64_t r = 0; r < cfg.pp; ++r)
    out[r] = rankSchedule(cfg, r);
  return out;
}

namespace {
/// The communication of a chain of chunks run in the per-rank orders
/// `order(rank)`.
template <typename Order>
std::vector<RankProgram> programsOf(const ScheduleConfig &cfg, Order order) {
  const int64_t s = cfg.pp * cfg.vpp, m = cfg.microbatches;
  auto rankOf = [&](int64_t chunk) { return chunk % cfg.pp; };
  auto tag = [&](int64_t chunk, int64_t j, bool backward) {
    return (chunk * m + j) * 2 + (backward ? 1 : 0);
  };
  std::vector<RankProgram> out(cfg.pp);
  for (int64_t r = 0; r < cfg.pp; ++r) {
    RankProgram &p = out[r];
    p.rank = r;
    for (const Action &a : order(r)) {
      if (a.weight) { // no communication: only local gradients
        p.ops.push_back(CommOp::compute());
        continue;
      }
      int64_t from = a.backward ? a.chunk + 1 : a.chunk - 1;
      int64_t to = a.backward ? a.chunk - 1 : a.chunk + 1;
      if (from >= 0 && from < s && rankOf(from) != r)
        p.ops.push_back(CommOp::recv(rankOf(from), tag(from, a.microbatch, a.backward), 4));
      p.ops.push_back(CommOp::compute());
      if (to >= 0 && to < s && rankOf(to) != r)
        p.ops.push_back(CommOp::send(rankOf(to), tag(a.chunk, a.microbatch, a.backward), 4));
    }
    p.ops.push_back(CommOp::waitSends());
  }
  return out;
}
} // namespace

std::vector<RankProgram> chainPrograms(const ScheduleConfig &cfg) {
  std::vector<std::vector<Action>> orders = rankSchedules(cfg);
  return programsOf(cfg, [&](int64_t r) { return orders[r]; });
}

std::vector<Action> orderWeightParts(const std::vector<Action> &order,
                                     llvm::ArrayRef<int64_t> partsOfChunk, DeferW deferW,
                                     int64_t maxSplit) {
  auto parts = [&](int64_t chunk) {
    return chunk < (int64_t)partsOfChunk.size() ? partsOfChunk[chunk] : 1;
  };
  if (deferW == DeferW::None ||
      llvm::none_of(order, [&](const Action &a) { return a.weight && parts(a.chunk) > 1; }))
    return order;
  const size_t n = order.size();
  // Runs: maximal sequences of one chunk's B's among the rank's B's (F's and
  // W's between do not end one: bfs's last chunk alternates F and B). A W
  // belongs to its B's run; a run's parts flush after its last W.
  std::vector<int64_t> runOf(n, -1);
  std::map<std::pair<int64_t, int64_t>, int64_t> runOfB; // (chunk, mb) -> run
  int64_t runs = 0, lastBChunk = -1;
  for (size_t k = 0; k < n; ++k) {
    const Action &a = order[k];
    if (!a.backward)
      continue;
    if (!a.weight) {
      if (a.chunk != lastBChunk)
        ++runs;
      lastBChunk = a.chunk;
      runOf[k] = runs - 1;
      runOfB[{a.chunk, a.microbatch}] = runs - 1;
    } else if (auto it = runOfB.find({a.chunk, a.microbatch}); it != runOfB.end()) {
      runOf[k] = it->second;
    }
  }
  std::map<int64_t, size_t> lastWOfRun, lastBOfRun;
  for (size_t k = 0; k < n; ++k)
    if (runOf[k] >= 0)
      (order[k].weight ? lastWOfRun : lastBOfRun)[runOf[k]] = k;
  // Bucket: a run's flush moves behind the last B of the next run of B's,
  // if that starts before any forward.
  auto flushAfter = [&](size_t k) -> size_t {
    if (deferW != DeferW::Bucket)
      return k;
    for (size_t j = k + 1; j < n; ++j) {
      const Action &a = order[j];
      if (!a.backward)
        break;
      if (!a.weight && runOf[j] > runOf[k])
        return std::max(k, lastBOfRun[runOf[j]]);
    }
    return k;
  };
  // The W's split: of each run's W's after its last B, the last maxSplit.
  std::vector<bool> split(n, false);
  {
    std::map<int64_t, std::vector<size_t>> late; // run -> its W's after its last B
    for (size_t k = 0; k < n; ++k)
      if (order[k].weight && runOf[k] >= 0 && k > lastBOfRun[runOf[k]] &&
          parts(order[k].chunk) > 1)
        late[runOf[k]].push_back(k);
    for (auto &[run, ws] : late)
      for (size_t i = ws.size() > (size_t)maxSplit ? ws.size() - maxSplit : 0; i < ws.size(); ++i)
        split[ws[i]] = true;
  }
  std::map<size_t, std::vector<int64_t>> flushes; // position -> chunks flushed after it
  for (auto [run, k] : lastWOfRun)
    if (parts(order[k].chunk) > 1)
      flushes[flushAfter(k)].push_back(order[k].chunk);
  std::map<int64_t, std::vector<int64_t>> deferred; // chunk -> micro-batches
  std::vector<Action> out;
  out.reserve(n * 2);
  auto flush = [&](int64_t chunk) {
    std::vector<int64_t> mbs = std::move(deferred[chunk]);
    deferred.erase(chunk);
    for (int64_t part = 1; part < parts(chunk); ++part)
      for (int64_t mb : mbs)
        out.push_back(Action{chunk, mb, true, true, part});
  };
  for (size_t k = 0; k < n; ++k) {
    const Action &a = order[k];
    if (split[k]) {
      out.push_back(Action{a.chunk, a.microbatch, true, true, 0});
      deferred[a.chunk].push_back(a.microbatch);
    } else {
      out.push_back(a);
    }
    if (auto it = flushes.find(k); it != flushes.end())
      for (int64_t chunk : it->second)
        flush(chunk);
  }
  return out;
}

std::string formatAction(const Action &a) {
  std::string s = std::to_string(a.chunk) + (a.weight ? "W" : a.backward ? "B" : "F") +
                  std::to_string(a.microbatch);
  if (a.weight && a.part >= 0)
    s += "." + std::to_string(a.part);
  return s;
}

std::string formatSchedule(llvm::ArrayRef<Action> actions) {
  std::string s;
  for (const Action &a : actions) {
    if (!s.empty())
      s += ' ';
    s += formatAction(a);
  }
  return s;
}

} // namespace pipemesh::plan
