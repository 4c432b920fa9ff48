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
//   D/latest                         "step-<s>\n", replaced last
// <s> counts completed steps. Every file is written to a temporary name,
// fsync'ed and renamed; the step directory is built as D/.step-<s>.tmp and
// renamed into place only when complete, so a step-<s> directory is always
// whole. Resume picks the newest complete step directory, verifies the
// configuration (world size, pp, dp, zero: the same only), the plan checksum
// and every file's checksum, and restores the state; the loss trajectory
// then continues bit-identically.
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
};

/// Collective: every rank writes its file, rank 0 the manifest and `latest`.
/// Returns the step directory.
std::string writeCheckpoint(const std::string &dir, const CheckpointState &state, const Plan &plan,
                            const RankPlan &rank, const Arena &arena, Communicator &comm);

/// The newest complete checkpoint directory under `dir` (nullopt if none).
std::optional<std::string> findLatestCheckpoint(const std::string &dir);

/// Collective: verifies and loads the newest checkpoint into the arena.
/// Errors: no checkpoint, another plan, another world size, checksum or size
/// mismatch, missing tensors.
CheckpointState loadCheckpoint(const std::string &dir, const Plan &plan, const RankPlan &rank,
                               Arena &arena, Communicator &comm, std::string &loadedFrom);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_CHECKPOINT_H
