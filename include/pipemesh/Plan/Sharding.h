//===- Sharding.h - ZeRO storage of parameters over data parallel -*- C++ -*-===//
//
// How a parameter, its gradient and its AdamW moments are stored on the dp
// replicas of one pipeline rank for each ZeRO level (docs/parallel-plan.md):
//
//   zero 0: everything whole; gradients all-reduced over dp.
//   zero 1: the moments are 1-D shards; gradients are reduce-scattered into a
//           gradient shard; AdamW updates a parameter shard, all-gathered
//           back into the whole parameter after the step.
//   zero 2: as 1, but only the gradient shard persists: each backward's whole
//           gradient is a temporary, reduce-scattered into the shard right
//           after that backward.
//   zero 3: as 2, and the parameter itself is stored as a shard: it is
//           all-gathered into a temporary before each use and freed after.
//
// A parameter of N elements is zero-padded to a multiple of dp; every shard
// has padded / dp elements and dp rank d holds [d * shard, (d + 1) * shard).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_SHARDING_H
#define PIPEMESH_PLAN_SHARDING_H

#include <cstdint>

namespace pipemesh::plan {

struct ShardLayout {
  int64_t numel = 0;       // elements of the parameter
  int64_t paddedNumel = 0; // numel rounded up to a multiple of dp
  int64_t shardNumel = 0;  // paddedNumel / dp
  int64_t elemOffset(int64_t dpRank) const { return dpRank * shardNumel; }
};

/// The layout of a parameter of `numel` elements sharded over `dp` replicas
/// (dp = 1: one shard, the whole parameter).
ShardLayout shardLayout(int64_t numel, int64_t dp);

/// Which buffers hold a parameter's state on one rank.
struct ParamStorage {
  bool fullParam = true;       // persistent whole parameter (read by F and B)
  bool paramShard = false;     // persistent shard (AdamW updates it)
  bool gatherBeforeUse = false; // zero 3: whole parameter is a per-use temporary
  bool fullGrad = true;        // persistent whole gradient
  bool transientGrad = false;  // whole gradient lives only until reduce-scatter
  bool gradShard = false;      // persistent gradient shard
  bool momentShards = false;   // adam_m / adam_v are shards
};

/// The storage for ZeRO level `zero` with `dp` replicas. `trained`: the
/// parameter has a gradient and optimizer state. With dp = 1 nothing is
/// sharded, whatever the level.
ParamStorage paramStorage(int64_t zero, int64_t dp, bool trained);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_SHARDING_H
