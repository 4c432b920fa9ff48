//===- Sampler.h - canonical sampling (DESIGN.md section 2) -----*- C++ -*-===//
//
// N tokens, sequence length T: W = floor((N - 1) / T) windows (several
// shards: each shard's windows, shard after shard; none crosses a shard end). The global
// batch of step s is G = dp * microbatches * batch sequences; sequence k of
// step s reads window w = ((s * G + k) mod W) (or perm_e[w] with --shuffle):
// inputs are tokens [w*T, w*T + T), targets the same shifted by one.
// Micro-batch j on DP rank d holds k = (j*dp + d)*batch + b, b in [0, batch).
//
// --shuffle SEED: epoch e = floor((s * G + k) / W) reads its windows through
// perm_e, a Fisher-Yates shuffle of 0..W-1 driven by splitmix64 (SplitMix64.h)
// seeded with epochShuffleSeed(SEED, e):
//     perm = [0, 1, ..., W-1]
//     for i = W-1 down to 1: j = next() % (i + 1); swap(perm[i], perm[j])
// so every epoch visits every window once, in a new order (as Megatron's and
// llm.c's loaders do), and every configuration (pp, dp, microbatches) sees
// the same windows in the same order.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_SAMPLER_H
#define PIPEMESH_RUNTIME_SAMPLER_H

#include "pipemesh/runtime/TokenData.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace pipemesh::rt {

class Sampler {
public:
  Sampler(std::shared_ptr<const TokenData> data, int64_t seq, int64_t batch, int64_t dp,
          int64_t microbatches, std::optional<uint64_t> shuffleSeed);

  int64_t numWindows() const { return windows; }
  int64_t globalBatch() const { return G; }
  int64_t seq() const { return T; }
  int64_t batch() const { return B; }
  const TokenData &data() const { return *tokens; }

  /// Window read by sequence k (0 <= k < G) of step s.
  int64_t window(int64_t step, int64_t k) const;
  /// Fills micro-batch j of DP rank d at step s: batch*seq inputs and targets.
  void fill(int64_t step, int64_t microbatch, int64_t dpRank, int64_t *inputs,
            int64_t *targets) const;

private:
  std::shared_ptr<const TokenData> tokens;
  int64_t T, B, dp, M, G, windows;
  std::optional<uint64_t> shuffleSeed;
  std::vector<int64_t> firstWindow; ///< per shard: the index of its first window
  /// The permutations of the last two epochs read (a step can straddle an
  /// epoch's end); the lock keeps window() safe on any thread, as a const
  /// function should be.
  struct EpochPermutation {
    uint64_t epoch;
    std::vector<int64_t> perm;
  };
  mutable std::mutex permMutex;
  mutable std::vector<EpochPermutation> perms;
  int64_t shuffled(uint64_t epoch, int64_t w) const;
  /// The shard of window w and the index of its first token there.
  std::pair<const TokenData::Shard *, int64_t> windowStart(int64_t w) const;
};

/// splitmix64 Fisher-Yates permutation of 0..n-1 (the --shuffle order).
std::vector<int64_t> shufflePermutation(int64_t n, uint64_t seed);
/// The seed of epoch e's permutation: SEED itself for the first epoch (runs
/// that never complete an epoch read what they read before epochs were
/// reshuffled), then splitmix64's output from state SEED + e, so that no two
/// epochs' generators share a stretch of their streams.
uint64_t epochShuffleSeed(uint64_t seed, uint64_t epoch);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_SAMPLER_H
