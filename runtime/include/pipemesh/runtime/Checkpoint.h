//===- Checkpoint.h - atomic, checksummed checkpoints -----------*- C++ -*-===//
//
// Layout (docs/pipemesh-run.md):
//   D/step-<s>/rank-<r>.safetensors  params, Adam m and v of rank r, whole
//                                    or ZeRO shards ("param/<name>",
//                                    "adam_m/<name>@<elem_offset>", ...;
//                                    metadata: step, RNG), written by rank r
//   D/step-<s>/manifest.json         step, plan checksum, world size and
//                                    parallel configuration (pp, dp, zero,
//                                    ...), RNG state, and per rank file its
//                                    size and XXH3-64 checksum (rank 0)
//   D/step-<s>/index.json            per file, its f32 tensors' names and
//                                    element counts (rank 0, from what every
//                                    rank reports; a resharded resume reads
//                                    it instead of every file's header)
//   D/latest                         "step-<s>\n", replaced last
// <s> counts completed steps. Every file is written to a temporary name,
// fsync'ed and renamed; the step directory is built as D/.step-<s>.tmp and
// renamed into place only when complete, so a step-<s> directory is always
// whole. Resume picks the newest complete step directory and verifies it
// (every file it reads against its checksum). With the plan that wrote it,
// each rank restores its own file and the loss trajectory continues
// bit-identically. Another plan of the same model, sequence length and
// global batch (any pp, dp, vpp, zero, schedule, recompute, storage types)
// resumes it resharded: each rank gathers its buffers' elements from the
// files that hold them, opening only those (the manifest records the model
// for that check).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CHECKPOINT_H
#define PIPEMESH_RUNTIME_CHECKPOINT_H

#include "pipemesh/runtime/Arena.h"
#include "pipemesh/runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace pipemesh::rt {

class Communicator;

struct CheckpointState {
  int64_t step = 0;      ///< completed steps: the run resumes at this step
  uint64_t rngState = 0; ///< the runtime RNG (--seed) after those steps
  nlohmann::json run;    ///< informational: steps, optimizer flags, data origin, shuffle
  /// Loaded from another plan's checkpoint: that job's configuration ("pp=2
  /// dp=2 zero=1 (world size 4)"); empty when this plan wrote it.
  std::string reshardedFrom;
};

/// Collective: every rank writes its file, rank 0 the manifest and `latest`.
/// Returns the step directory.
std::string writeCheckpoint(const std::string &dir, const CheckpointState &state, const Plan &plan,
                            const RankPlan &rank, const Arena &arena, Communicator &comm);

/// Removes all but the `keep` newest complete step directories under `dir`
/// (rank 0, after a checkpoint is committed); returns how many went.
int pruneCheckpoints(const std::string &dir, int64_t keep);

/// The newest complete checkpoint directory under `dir` (nullopt if none).
std::optional<std::string> findLatestCheckpoint(const std::string &dir);

/// Collective: verifies and loads the newest checkpoint into the arena.
/// Errors: no checkpoint, another model (parameters, sequence length, global
/// batch), checksum or size mismatch, missing tensors or elements.
CheckpointState loadCheckpoint(const std::string &dir, const Plan &plan, const RankPlan &rank,
                               Arena &arena, Communicator &comm, std::string &loadedFrom);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_CHECKPOINT_H
