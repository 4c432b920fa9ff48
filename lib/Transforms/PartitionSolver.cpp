//===- PartitionSolver.cpp - balancing layers into stage chunks -------------===//
#include "pipemesh/Transforms/Partition.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
  std::vector<double> t, m; // prefix sums

  explicit Costs(const Problem &p)
      : p(p), S(p.numChunks), L((int64_t)p.layerTime.size()), t(L + 1, 0.0), m(L + 1, 0.0) {
    for (int64_t i = 0; i < L; ++i) {
      t[i + 1] = t[i] + p.layerTime[i];
      m[i + 1] = m[i] + (i < (int64_t)p.layerMemory.size() ? p.layerMemory[i] : 0.0);
    }
  }
  /// Chunk c holds layers [i, j).
  double time(int64_t c, int64_t i, int64_t j) const {
    return (t[j] - t[i]) + (c == 0 ? p.preTime : 0.0) + (c == S - 1 ? p.postTime : 0.0);
  }
  double mem(int64_t c, int64_t i, int64_t j) const {
    return (m[j] - m[i]) + (c == 0 ? p.preMemory : 0.0) + (c == S - 1 ? p.postMemory : 0.0);
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
    out.maxTime = std::max(out.maxTime, out.chunkTime.back());
    out.maxMemory = std::max(out.maxMemory, out.chunkMemory.back());
    i = j;
  }
  return out;
}

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
