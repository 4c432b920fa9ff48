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
// With params=bf16 a trained parameter's f32 master (the whole at zero 0,
// the shard at zero 1-3) gets a bf16 copy that AdamW writes after each
// update; the forward and backward read bf16: the copy itself (zero 0), or
// the whole gathered from the copies (zero 1, 2: persistent and bf16; zero
// 3: per use), so the gathers move bf16.
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
  // params=bf16 (trained parameters only):
  bool masterCopy = false;     // bf16 copy of the f32 master (whole or shard) AdamW writes
  bool bf16Compute = false;    // the whole parameter F and B read is bf16
  /// Bytes of the persistent buffers this storage needs on one rank, for a
  /// parameter of `numel` elements in shards of `shardNumel` (the layout).
  int64_t persistentBytes(int64_t numel, int64_t shardNumel) const;
};

/// The storage for ZeRO level `zero` with `dp` replicas. `trained`: the
/// parameter has a gradient and optimizer state. With dp = 1 nothing is
/// sharded, whatever the level. `bf16Params`: the compile option
/// params=bf16 (it applies to trained parameters).
ParamStorage paramStorage(int64_t zero, int64_t dp, bool trained, bool bf16Params = false);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_SHARDING_H
