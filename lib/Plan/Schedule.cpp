//===- Schedule.cpp - per-rank pipeline action order -----------------------===//
//
// GPipe, 1F1B and interleaved 1F1B as Megatron-LM runs them
// (megatron/core/pipeline_parallel/schedules.py): the same warm-up counts,
// the same steady-state order (one forward, then one backward) and, for the
// virtual pipeline, the same micro-batch/chunk table.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/Schedule.h"

#include <algorithm>
#include <utility>

namespace pipemesh::plan {

std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name) {
  if (name == "gpipe")
    return ScheduleKind::GPipe;
  if (name == "1f1b")
    return ScheduleKind::OneFOneB;
  if (name == "interleaved")
    return ScheduleKind::Interleaved;
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
  }
  return "?";
}

ScheduleKind effectiveKind(const ScheduleConfig &cfg) {
  if (cfg.kind == ScheduleKind::GPipe)
    return ScheduleKind::GPipe;
  return cfg.vpp > 1 ? ScheduleKind::Interleaved : ScheduleKind::OneFOneB;
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
  }
  return 0;
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
    int64_t warm = warmupForwards(cfg, rank);
    for (int64_t j = 0; j < warm; ++j)
      out.push_back({rank, j, false});
    for (int64_t k = 0; k < m - warm; ++k) {
      out.push_back({rank, warm + k, false});
      out.push_back({rank, k, true});
    }
    for (int64_t k = std::max<int64_t>(m - warm, 0); k < m; ++k)
      out.push_back({rank, k, true});
    return out;
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
    int64_t warm = warmupForwards(cfg, rank);
    for (int64_t k = 0; k < warm; ++k)
      out.push_back(fwd(k));
    for (int64_t k = 0; k < total - warm; ++k) {
      out.push_back(fwd(warm + k));
      out.push_back(bwd(k));
    }
    for (int64_t k = total - warm; k < total; ++k)
      out.push_back(bwd(k));
    return out;
  }
  }
  return out;
}

std::vector<RankProgram> chainPrograms(const ScheduleConfig &cfg) {
  const int64_t s = cfg.pp * cfg.vpp, m = cfg.microbatches;
  auto rankOf = [&](int64_t chunk) { return chunk % cfg.pp; };
  auto tag = [&](int64_t chunk, int64_t j, bool backward) {
    return (chunk * m + j) * 2 + (backward ? 1 : 0);
  };
  std::vector<RankProgram> out(cfg.pp);
  for (int64_t r = 0; r < cfg.pp; ++r) {
    RankProgram &p = out[r];
    p.rank = r;
    for (const Action &a : rankSchedule(cfg, r)) {
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

std::string formatAction(const Action &a) {
  return std::to_string(a.chunk) + (a.backward ? "B" : "F") + std::to_string(a.microbatch);
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
