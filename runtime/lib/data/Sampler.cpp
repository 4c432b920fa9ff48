//===- Sampler.cpp - canonical sampling -------------------------------------===//
#include "pipemesh/runtime/Sampler.h"

#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/SplitMix64.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace pipemesh::rt {

std::vector<int64_t> shufflePermutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix64 rng(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    int64_t j = (int64_t)(rng.next() % (uint64_t)(i + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

uint64_t epochShuffleSeed(uint64_t seed, uint64_t epoch) {
  return epoch == 0 ? seed : SplitMix64(seed + epoch).next();
}

Sampler::Sampler(std::shared_ptr<const TokenData> data, int64_t seq, int64_t batch, int64_t dp,
                 int64_t microbatches, std::optional<uint64_t> shuffleSeed)
    : tokens(std::move(data)), T(seq), B(batch), dp(dp), M(microbatches),
      shuffleSeed(shuffleSeed) {
  G = dp * M * B;
  // Each shard's windows, shard after shard (one shard: W = floor((N-1)/T)).
  windows = 0;
  for (const TokenData::Shard &s : tokens->shards()) {
    firstWindow.push_back(windows);
    windows += s.count > 0 ? (s.count - 1) / T : 0;
  }
  if (windows < 1)
    fail(tokens->origin(), " has ", tokens->size(), " tokens: too few for one sequence of ", T,
         " tokens plus its shifted target (need at least ", T + 1,
         tokens->shards().size() > 1 ? " in one shard)" : ")");
}

int64_t Sampler::window(int64_t step, int64_t k) const {
  // s*G + k in 128 bits: no overflow for any step count.
  unsigned __int128 position = (unsigned __int128)(uint64_t)step * (uint64_t)G + (uint64_t)k;
  int64_t w = (int64_t)(position % (uint64_t)windows);
  if (!shuffleSeed)
    return w;
  return shuffled((uint64_t)(position / (uint64_t)windows), w);
}

int64_t Sampler::shuffled(uint64_t epoch, int64_t w) const {
  std::lock_guard<std::mutex> lock(permMutex);
  for (const EpochPermutation &p : perms)
    if (p.epoch == epoch)
      return p.perm[w];
  if (perms.size() == 2) // keep the most recently computed one
    perms.erase(perms.begin());
  perms.push_back({epoch, shufflePermutation(windows, epochShuffleSeed(*shuffleSeed, epoch))});
  return perms.back().perm[w];
}

std::pair<const TokenData::Shard *, int64_t> Sampler::windowStart(int64_t w) const {
  // The last shard whose first window is <= w.
  size_t s = std::upper_bound(firstWindow.begin(), firstWindow.end(), w) - firstWindow.begin() - 1;
  return {&tokens->shards()[s], (w - firstWindow[s]) * T};
}

void Sampler::fill(int64_t step, int64_t microbatch, int64_t dpRank, int64_t *inputs,
                   int64_t *targets) const {
  for (int64_t b = 0; b < B; ++b) {
    int64_t k = (microbatch * dp + dpRank) * B + b;
    auto [shard, start] = windowStart(window(step, k));
    for (int64_t i = 0; i < T; ++i) {
      inputs[b * T + i] = shard->at(start + i);
      targets[b * T + i] = shard->at(start + i + 1);
    }
  }
}

} // namespace pipemesh::rt
