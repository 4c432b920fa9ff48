//===- Replicas.h - the dp replicas of an elided plan -----------*- C++ -*-===//
//
// A plan for dp > 1 holds one program per pipeline rank, dp rank 0's
// (`parallel.replicas_elided`): the replicas of a pipeline rank run the same
// instructions, so writing them out would make the plan dp times larger (and
// its compile as much slower) for nothing. Replica d of pipeline rank p is
// global rank p * dp + d and runs that program with
//   - every send/recv `peer` and every tied-group member shifted by d,
//   - every ZeRO shard at `elem_offset` + d * `shard_numel`,
//   - `norm_weight` 0 in the adamw entries marked `norm_dp0_only` (a
//     replicated gradient counts once in the global norm), the mark dropped.
// docs/plan-format.md specifies it; pipemesh-run's plan reader applies the
// same rules, the simulator's loader builds its replicas from the programs.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_REPLICAS_H
#define PIPEMESH_PLAN_REPLICAS_H

#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>

namespace pipemesh::plan {

/// Replica `d` of a pipeline rank's manifest entry (`entry` is dp rank 0's).
llvm::json::Object replicaOf(const llvm::json::Object &entry, int64_t d);

/// Whether the manifest lists one entry per pipeline rank.
bool isElided(const llvm::json::Object &manifest);

/// An elided manifest lists dp rank 0 of every pipeline rank once; false with
/// `why` otherwise (true for a manifest that lists every rank).
bool checkElided(const llvm::json::Object &manifest, std::string &why);

/// Rewrites an elided manifest into one entry per global rank, in rank
/// order; a manifest without `parallel.replicas_elided` is left as it is.
/// False with `why` when an elided manifest lacks or repeats a pipeline rank.
bool expandReplicas(llvm::json::Object &manifest, std::string &why);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_REPLICAS_H
