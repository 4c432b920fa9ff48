//===- Partition.h - pipeline stage layout of transformer layers -*- C++ -*-===//
//
// The pieces of --pmesh-partition that do not need IR: which layer a
// parameter belongs to (from its name) and the balancing of per-layer costs
// into contiguous stage chunks. Kept separate so unit tests (and the
// schedule search later) can use them directly.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_TRANSFORMS_PARTITION_H
#define PIPEMESH_TRANSFORMS_PARTITION_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipemesh::partition {

/// The transformer layer a parameter belongs to: its name has a component
/// `h`, `layers`, `blocks` or `layer` followed by a decimal index (the first
/// such pair counts). `key` is the name up to and including the index
/// ("transformer.h.3"), which identifies the layer.
struct LayerName {
  std::string key;
  int64_t index = 0;
};
std::optional<LayerName> layerOfParam(llvm::StringRef paramName);

/// Costs of one model, ready to be cut into chunks.
struct Problem {
  std::vector<double> layerTime;   // per layer, seconds (forward + backward)
  std::vector<double> layerMemory; // per layer, bytes
  std::vector<double> layerParams; // per layer, parameter bytes (may be empty: none known)
  double preTime = 0, preMemory = 0, preParams = 0;    // before the first layer: on chunk 0
  double postTime = 0, postMemory = 0, postParams = 0; // after the last layer: on the last chunk
  int64_t numChunks = 1;
  /// Pipeline ranks the chunks are dealt to round-robin: chunk c runs on
  /// rank c % numRanks, in rounds of numRanks chunks (interleaved stages).
  int64_t numRanks = 1;
};

/// A layout and what it costs.
struct Layout {
  std::vector<int64_t> layersPerChunk;
  std::vector<double> chunkTime, chunkMemory, chunkParams;
  double maxTime = 0, maxMemory = 0;
};

/// The costs of a given layout (which must have numChunks entries summing to
/// the layer count).
Layout evaluate(const Problem &p, llvm::ArrayRef<int64_t> layersPerChunk);

/// The balanced layout: every chunk gets at least one layer; minimises the
/// largest chunk time, then (among those) the largest chunk memory; the
/// remaining ties go to the layout whose later chunks are largest (earlier
/// pipeline stages keep more micro-batches in flight). Exact (dynamic
/// programming, O(S L^2)). Fails, with the reason in `why`, when there are
/// fewer layers than chunks or numChunks < 1.
///
/// With interleaved stages (numRanks > 1, numChunks a larger multiple of it)
/// and equal layers (a GPT's blocks), the ties are broken by the ranks and
/// rounds instead (interleavedCriteria below); the first chunk may then be
/// left with the embedding alone and the last with the head and the loss
/// alone, when that stays within the two bounds.
std::optional<Layout> balance(const Problem &p, std::string &why);

/// What the interleaved tie-break minimises, in this order: the largest rank
/// time (a rank's compute bounds the step); the largest rank parameter bytes
/// (its data-parallel traffic); the sum over rounds of the round's largest
/// chunk time (a round moves at the pace of its slowest chunk); then the
/// rounds' largest chunk times from the last round back (the last round's
/// forward and backward lie between a step's last parameter gather and its
/// first complete gradient, where no data-parallel communication can run).
struct InterleavedCriteria {
  std::vector<double> rankTime, rankParams; // per rank
  double maxRankTime = 0, maxRankParams = 0, roundSum = 0;
  std::vector<double> roundMaxLastFirst;
};
InterleavedCriteria interleavedCriteria(const Problem &p, llvm::ArrayRef<int64_t> layersPerChunk);
/// `a` better than `b` (lexicographically, with a relative slack of 1e-9).
bool interleavedBetter(const InterleavedCriteria &a, const InterleavedCriteria &b);

/// Validates an explicit layout (`layers-per-stage`): numChunks entries, each
/// >= 0, summing to the layer count; only the first and the last chunk may
/// have 0 layers (they still carry the embedding, or the head and the loss).
std::optional<Layout> explicitLayout(const Problem &p, llvm::ArrayRef<int64_t> layersPerChunk,
                                     std::string &why);

} // namespace pipemesh::partition

#endif // PIPEMESH_TRANSFORMS_PARTITION_H
