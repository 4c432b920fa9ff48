//===- PartitionSolver.cpp - balancing layers into stage chunks -------------===//
#include "pipemesh/Transforms/Partition.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

using namespace pipemesh::partition;

std::optional<LayerName> pipemesh::partition::layerOfParam(llvm::StringRef name) {
  llvm::SmallVector<llvm::StringRef> parts;
  name.split(parts, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    llvm::StringRef c = parts[i];
    if (c != "h" && c != "layers" && c != "blocks" && c != "layer")
      continue;
    llvm::StringRef idx = parts[i + 1];
    if (idx.empty() || !llvm::all_of(idx, llvm::isDigit))
      continue;
    int64_t index;
    if (idx.getAsInteger(10, index))
      continue;
    // The key: every component up to and including the index.
    size_t len = 0;
    for (size_t k = 0; k <= i + 1; ++k)
      len += parts[k].size() + (k ? 1 : 0);
    return LayerName{name.substr(0, len).str(), index};
  }
  return std::nullopt;
}

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Chunk costs over prefix sums, so that every caller computes a chunk's cost
/// with the same floating-point operations (exact comparisons stay exact).
struct Costs {
  const Problem &p;
  int64_t S, L;
  std::vector<double> t, m, q; // prefix sums: time, memory, parameter bytes

  explicit Costs(const Problem &p)
      : p(p), S(p.numChunks), L((int64_t)p.layerTime.size()), t(L + 1, 0.0), m(L + 1, 0.0),
        q(L + 1, 0.0) {
    for (int64_t i = 0; i < L; ++i) {
      t[i + 1] = t[i] + p.layerTime[i];
      m[i + 1] = m[i] + (i < (int64_t)p.layerMemory.size() ? p.layerMemory[i] : 0.0);
      q[i + 1] = q[i] + (i < (int64_t)p.layerParams.size() ? p.layerParams[i] : 0.0);
    }
  }
  /// Chunk c holds layers [i, j).
  double time(int64_t c, int64_t i, int64_t j) const {
    return (t[j] - t[i]) + (c == 0 ? p.preTime : 0.0) + (c == S - 1 ? p.postTime : 0.0);
  }
  double mem(int64_t c, int64_t i, int64_t j) const {
    return (m[j] - m[i]) + (c == 0 ? p.preMemory : 0.0) + (c == S - 1 ? p.postMemory : 0.0);
  }
  double params(int64_t c, int64_t i, int64_t j) const {
    return (q[j] - q[i]) + (c == 0 ? p.preParams : 0.0) + (c == S - 1 ? p.postParams : 0.0);
  }
};

/// `x <= bound` with a relative slack for sums taken in a different order.
bool within(double x, double bound) {
  return x <= bound + 1e-9 * std::max(std::fabs(bound), 1e-300);
}
} // namespace

Layout pipemesh::partition::evaluate(const Problem &p, llvm::ArrayRef<int64_t> layersPerChunk) {
  Costs c(p);
  Layout out;
  out.layersPerChunk.assign(layersPerChunk.begin(), layersPerChunk.end());
  int64_t i = 0;
  for (int64_t k = 0; k < (int64_t)layersPerChunk.size(); ++k) {
    int64_t j = std::min<int64_t>(c.L, i + layersPerChunk[k]);
    out.chunkTime.push_back(c.time(k, i, j));
    out.chunkMemory.push_back(c.mem(k, i, j));
    out.chunkParams.push_back(c.params(k, i, j));
    out.maxTime = std::max(out.maxTime, out.chunkTime.back());
    out.maxMemory = std::max(out.maxMemory, out.chunkMemory.back());
    i = j;
  }
  return out;
}


InterleavedCriteria pipemesh::partition::interleavedCriteria(const Problem &p,
                                                             llvm::ArrayRef<int64_t> counts) {
  const int64_t R = std::max<int64_t>(p.numRanks, 1), S = (int64_t)counts.size();
  Layout l = evaluate(p, counts);
  InterleavedCriteria out;
  out.rankTime.assign(R, 0.0);
  out.rankParams.assign(R, 0.0);
  std::vector<double> roundMax((S + R - 1) / R, 0.0);
  for (int64_t c = 0; c < S; ++c) {
    out.rankTime[c % R] += l.chunkTime[c];
    out.rankParams[c % R] += l.chunkParams[c];
    roundMax[c / R] = std::max(roundMax[c / R], l.chunkTime[c]);
  }
  out.maxRankTime = *std::max_element(out.rankTime.begin(), out.rankTime.end());
  out.maxRankParams = *std::max_element(out.rankParams.begin(), out.rankParams.end());
  for (double t : roundMax)
    out.roundSum += t;
  out.roundMaxLastFirst.assign(roundMax.rbegin(), roundMax.rend());
  return out;
}

bool pipemesh::partition::interleavedBetter(const InterleavedCriteria &a,
                                            const InterleavedCriteria &b) {
  // -1: a clearly smaller, 1: clearly larger, 0: equal within the slack.
  auto cmp = [](double x, double y) {
    double slack = 1e-9 * std::max({std::fabs(x), std::fabs(y), 1e-300});
    return x < y - slack ? -1 : (x > y + slack ? 1 : 0);
  };
  llvm::SmallVector<std::pair<double, double>> keys{{a.maxRankTime, b.maxRankTime},
                                                    {a.maxRankParams, b.maxRankParams},
                                                    {a.roundSum, b.roundSum}};
  for (size_t k = 0; k < a.roundMaxLastFirst.size() && k < b.roundMaxLastFirst.size(); ++k)
    keys.push_back({a.roundMaxLastFirst[k], b.roundMaxLastFirst[k]});
  for (auto [x, y] : keys)
    if (int c = cmp(x, y))
      return c < 0;
  return false;
}

namespace {
/// Whether every layer costs the same (a GPT's blocks), so that a layout is a
/// matter of counts.
bool layersAreEqual(const Problem &p) {
  auto equal = [](const std::vector<double> &v) {
    for (double x : v)
      if (std::fabs(x - v.front()) > 1e-9 * std::max(std::fabs(v.front()), 1e-300))
        return false;
    return true;
  };
  return !p.layerTime.empty() && equal(p.layerTime) &&
         (p.layerMemory.empty() || equal(p.layerMemory)) &&
         (p.layerParams.empty() || equal(p.layerParams));
}

/// The interleaved tie-break of balance() (InterleavedCriteria), for equal
/// layers: each rank's chunk counts within the balanced optimum's bounds.
/// The rank totals come first (criteria 1 and 2 depend on nothing else),
/// then a dynamic program over the ranks whose state is the layers used and
/// the rounds' largest chunk times so far. None when the layers differ, the
/// bounds admit nothing, or the search would be too large.
std::optional<std::vector<int64_t>> interleavedLayout(const Problem &p, double bestTime,
                                                      double bestMem) {
  if (!layersAreEqual(p))
    return std::nullopt;
  Costs costs(p);
  const int64_t S = p.numChunks, R = p.numRanks, V = S / R, L = costs.L;
  // Counts each chunk may hold: within both bounds; the first and last chunk
  // may hold none when they still compute the embedding / head and loss.
  std::vector<int64_t> minN(S), maxN(S);
  for (int64_t c = 0; c < S; ++c) {
    bool mayBeEmpty = (c == 0 && p.preTime > 0) || (c == S - 1 && p.postTime > 0);
    minN[c] = mayBeEmpty ? 0 : 1;
    maxN[c] = minN[c] - 1;
    for (int64_t n = minN[c]; n <= L; ++n) {
      if (!within(costs.time(c, 0, n), bestTime) || !within(costs.mem(c, 0, n), bestMem))
        break;
      maxN[c] = n;
    }
    if (maxN[c] < minN[c])
      return std::nullopt;
  }
  auto chunkOf = [&](int64_t r, int64_t k) { return k * R + r; };
  // A rank's time and parameter bytes follow from its total (equal layers).
  std::vector<int64_t> lo(R, 0), hi(R, 0);
  std::vector<double> extraTime(R, 0.0), extraParams(R, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < V; ++k) {
      int64_t c = chunkOf(r, k);
      lo[r] += minN[c];
      hi[r] += maxN[c];
      extraTime[r] += costs.time(c, 0, 0);
      extraParams[r] += costs.params(c, 0, 0);
    }
  const double layerTime = p.layerTime.front();
  const double layerParams = p.layerParams.empty() ? 0.0 : p.layerParams.front();
  // The least bound on `value(r, n)` the totals can meet, and each rank's
  // largest total under it (cap, narrowed in place).
  auto tighten = [&](std::vector<int64_t> &cap, auto value) {
    std::vector<double> bounds;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t n = lo[r]; n <= cap[r]; ++n)
        bounds.push_back(value(r, n));
    llvm::sort(bounds);
    for (double b : bounds) {
      std::vector<int64_t> under(R);
      int64_t sum = 0;
      bool everyRank = true;
      for (int64_t r = 0; r < R; ++r) {
        under[r] = lo[r] - 1;
        for (int64_t n = lo[r]; n <= cap[r] && within(value(r, n), b); ++n)
          under[r] = n;
        sum += under[r];
        everyRank &= under[r] >= lo[r];
      }
      if (everyRank && sum >= L) {
        cap = under;
        return true;
      }
    }
    return false;
  };
  int64_t loSum = 0;
  for (int64_t r = 0; r < R; ++r)
    loSum += lo[r];
  std::vector<int64_t> cap = hi;
  if (loSum > L ||
      !tighten(cap, [&](int64_t r, int64_t n) { return n * layerTime + extraTime[r]; }) ||
      !tighten(cap, [&](int64_t r, int64_t n) { return n * layerParams + extraParams[r]; }))
    return std::nullopt;

  // Ranks in order; state = (layers used, the rounds' largest chunk times).
  using Key = std::pair<int64_t, std::vector<double>>;
  struct From {
    Key prev;
    std::vector<int64_t> counts; // this rank's, per round
  };
  std::vector<std::map<Key, From>> states(R + 1);
  states[0][{0, std::vector<double>(V, 0.0)}] = {};
  std::vector<int64_t> loAfter(R + 1, 0), capAfter(R + 1, 0);
  for (int64_t r = R - 1; r >= 0; --r) {
    loAfter[r] = loAfter[r + 1] + lo[r];
    capAfter[r] = capAfter[r + 1] + cap[r];
  }
  constexpr int64_t kMaxSteps = 4'000'000;
  int64_t steps = 0;
  for (int64_t r = 0; r < R; ++r) {
    for (const auto &state : states[r]) {
      // Named, not a structured binding: the lambda below captures it, which
      // clang before 16 refuses (scripts/fuzz-import.sh builds with clang 14).
      const auto &key = state.first;
      std::vector<int64_t> counts(V, 0);
      // Every split of this rank's total over its rounds.
      std::function<bool(int64_t, int64_t)> split = [&](int64_t k, int64_t total) {
        if (++steps > kMaxSteps)
          return false;
        if (k == V) {
          int64_t used = key.first + total;
          if (total < lo[r] || total > cap[r] || used + loAfter[r + 1] > L ||
              used + capAfter[r + 1] < L)
            return true;
          std::vector<double> maxima = key.second;
          for (int64_t q = 0; q < V; ++q)
            maxima[q] = std::max(maxima[q], costs.time(chunkOf(r, q), 0, counts[q]));
          states[r + 1].try_emplace({used, std::move(maxima)}, From{key, counts});
          return true;
        }
        int64_t c = chunkOf(r, k);
        for (int64_t n = maxN[c]; n >= minN[c]; --n) {
          if (total + n > cap[r])
            continue;
          counts[k] = n;
          if (!split(k + 1, total + n))
            return false;
        }
        return true;
      };
      if (!split(0, 0))
        return std::nullopt;
    }
  }
  std::optional<std::vector<int64_t>> best;
  InterleavedCriteria bestCriteria;
  for (const auto &entry : states[R]) {
    if (entry.first.first != L)
      continue;
    std::vector<int64_t> layout(S, 0);
    const Key *key = &entry.first;
    for (int64_t r = R; r > 0; --r) {
      const From &from = states[r].at(*key);
      for (int64_t k = 0; k < V; ++k)
        layout[chunkOf(r - 1, k)] = from.counts[k];
      key = &from.prev;
    }
    InterleavedCriteria crit = interleavedCriteria(p, layout);
    if (!best || interleavedBetter(crit, bestCriteria)) {
      best = std::move(layout);
      bestCriteria = std::move(crit);
    }
  }
  return best;
}
} // namespace

std::optional<Layout> pipemesh::partition::balance(const Problem &p, std::string &why) {
  Costs c(p);
  const int64_t S = p.numChunks, L = c.L;
  if (S < 1) {
    why = "stages must be at least 1, got " + std::to_string(S);
    return std::nullopt;
  }
  if (S == 1)
    return evaluate(p, {L});
  if (S > L) {
    why = "stages=" + std::to_string(S) + " but the model has only " + std::to_string(L) +
          " transformer layer" + (L == 1 ? "" : "s") +
          ": every stage needs at least one (layers-per-stage may give the first or the last "
          "stage none)";
    return std::nullopt;
  }

  // f[k][j]: the least largest chunk time of layers [0, j) in chunks 0..k-1,
  // each non-empty. best(bound) tables below reuse the same recursion.
  auto table = [&](auto chunkCost, auto admissible) {
    std::vector<std::vector<double>> f(S + 1, std::vector<double>(L + 1, kInf));
    for (int64_t j = 1; j <= L; ++j)
      if (admissible(0, 0, j))
        f[1][j] = chunkCost(0, 0, j);
    for (int64_t k = 2; k <= S; ++k)
      for (int64_t j = k; j <= L; ++j)
        for (int64_t i = k - 1; i < j; ++i)
          if (f[k - 1][i] < kInf && admissible(k - 1, i, j))
            f[k][j] = std::min(f[k][j], std::max(f[k - 1][i], chunkCost(k - 1, i, j)));
    return f;
  };
  auto timeOf = [&](int64_t k, int64_t i, int64_t j) { return c.time(k, i, j); };
  auto memOf = [&](int64_t k, int64_t i, int64_t j) { return c.mem(k, i, j); };
  auto any = [](int64_t, int64_t, int64_t) { return true; };

  // 1. The least largest chunk time.
  const double bestTime = table(timeOf, any)[S][L];
  auto timeOk = [&](int64_t k, int64_t i, int64_t j) { return within(c.time(k, i, j), bestTime); };
  // 2. Among those, the least largest chunk memory.
  const double bestMem = table(memOf, timeOk)[S][L];
  auto fits = [&](int64_t k, int64_t i, int64_t j) {
    return timeOk(k, i, j) && within(c.mem(k, i, j), bestMem);
  };

  // 3. feasible[k][j]: layers [0, j) fit chunks 0..k-1 within both bounds.
  std::vector<std::vector<char>> feasible(S + 1, std::vector<char>(L + 1, 0));
  for (int64_t j = 1; j <= L; ++j)
    feasible[1][j] = fits(0, 0, j);
  for (int64_t k = 2; k <= S; ++k)
    for (int64_t j = k; j <= L; ++j)
      for (int64_t i = k - 1; i < j && !feasible[k][j]; ++i)
        feasible[k][j] = feasible[k - 1][i] && fits(k - 1, i, j);
  if (!feasible[S][L]) { // cannot happen: the optimum itself is feasible
    why = "internal error: no layout within the optimal bounds";
    return std::nullopt;
  }
  // From the last chunk backwards, each takes as many layers as it can.
  std::vector<int64_t> counts(S, 0);
  int64_t j = L;
  for (int64_t k = S - 1; k >= 1; --k) {
    int64_t i = k;
    while (!(feasible[k][i] && fits(k, i, j)))
      ++i;
    counts[k] = j - i;
    j = i;
  }
  counts[0] = j;
  if (p.numRanks > 1 && S > p.numRanks && S % p.numRanks == 0)
    if (auto refined = interleavedLayout(p, bestTime, bestMem))
      counts = std::move(*refined);
  return evaluate(p, counts);
}

std::optional<Layout> pipemesh::partition::explicitLayout(const Problem &p,
                                                          llvm::ArrayRef<int64_t> layers,
                                                          std::string &why) {
  const int64_t S = p.numChunks, L = (int64_t)p.layerTime.size();
  if (S < 1) {
    why = "stages must be at least 1, got " + std::to_string(S);
    return std::nullopt;
  }
  if ((int64_t)layers.size() != S) {
    why = "layers-per-stage has " + std::to_string(layers.size()) + " entr" +
          (layers.size() == 1 ? "y" : "ies") + " but stages=" + std::to_string(S);
    return std::nullopt;
  }
  int64_t sum = 0;
  for (auto [k, n] : llvm::enumerate(layers)) {
    if (n < 0) {
      why = "layers-per-stage gives stage " + std::to_string(k) + " " + std::to_string(n) +
            " layers; counts must be >= 0";
      return std::nullopt;
    }
    sum += n;
  }
  if (sum != L) {
    why = "layers-per-stage sums to " + std::to_string(sum) + " but the model has " +
          std::to_string(L) + " transformer layer" + (L == 1 ? "" : "s");
    return std::nullopt;
  }
  for (int64_t k = 1; k + 1 < S; ++k)
    if (layers[k] == 0) {
      why = "layers-per-stage gives stage " + std::to_string(k) +
            " no layers: only the first and the last stage may have none (they still hold the "
            "embedding, or the head and the loss)";
      return std::nullopt;
    }
  return evaluate(p, layers);
}
