//===- Sampler.h - canonical sampling (DESIGN.md section 2) -----*- C++ -*-===//
//
// N tokens, sequence length T: W = floor((N - 1) / T) windows (several
// shards: each shard's windows, shard after shard; none crosses a shard end). The global
// batch of step s is G = dp * microbatches * batch sequences; sequence k of
// step s reads window w = ((s * G + k) mod W) (or perm[w] with --shuffle):
// inputs are tokens [w*T, w*T + T), targets the same shifted by one.
// Micro-batch j on DP rank d holds k = (j*dp + d)*batch + b, b in [0, batch).
//
// --shuffle SEED: perm is a Fisher-Yates shuffle of 0..W-1 driven by
// splitmix64 seeded with SEED (SplitMix64.h):
//     perm = [0, 1, ..., W-1]
//     for i = W-1 down to 1: j = next() % (i + 1); swap(perm[i], perm[j])
// computed once; every configuration (pp, dp, microbatches) sees the same
// windows in the same order.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_SAMPLER_H
#define PIPEMESH_RUNTIME_SAMPLER_H

#include "pipemesh/runtime/TokenData.h"

#include <cstdint>
#include <memory>
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
  std::vector<int64_t> perm;        ///< empty without --shuffle
  std::vector<int64_t> firstWindow; ///< per shard: the index of its first window
  /// The shard of window w and the index of its first token there.
  std::pair<const TokenData::Shard *, int64_t> windowStart(int64_t w) const;
};

/// splitmix64 Fisher-Yates permutation of 0..n-1 (the --shuffle order).
std::vector<int64_t> shufflePermutation(int64_t n, uint64_t seed);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_SAMPLER_H
