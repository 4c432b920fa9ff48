//===- Sharding.cpp - ZeRO storage of parameters over data parallel --------===//
#include "pipemesh/Plan/Sharding.h"

namespace pipemesh::plan {

ShardLayout shardLayout(int64_t numel, int64_t dp) {
  ShardLayout l;
  l.numel = numel;
  l.shardNumel = dp > 0 ? (numel + dp - 1) / dp : numel;
  l.paddedNumel = l.shardNumel * (dp > 0 ? dp : 1);
  return l;
}

ParamStorage paramStorage(int64_t zero, int64_t dp, bool trained, bool bf16Params) {
  ParamStorage s;
  s.masterCopy = s.bf16Compute = trained && bf16Params;
  if (dp <= 1 || zero <= 0) {
    s.fullGrad = trained;
    return s;
  }
  // The parameter: whole (zero 1, 2) plus the shard AdamW updates, or only
  // the shard (zero 3). Untrained parameters are only sharded at zero 3.
  s.fullParam = zero < 3;
  s.paramShard = trained || zero >= 3;
  s.gatherBeforeUse = zero >= 3;
  s.fullGrad = trained && zero == 1;
  s.transientGrad = trained && zero >= 2;
  s.gradShard = trained;
  s.momentShards = trained;
  return s;
}

int64_t ParamStorage::persistentBytes(int64_t numel, int64_t shardNumel) const {
  const int64_t f32 = 4, bf16 = 2;
  // The whole is the master (f32) unless a shard is: then, with bf16
  // compute, it is the bf16 gather target.
  int64_t bytes = fullParam ? numel * (bf16Compute && paramShard ? bf16 : f32) : 0;
  bytes += paramShard ? shardNumel * f32 : 0;
  bytes += masterCopy ? (paramShard ? shardNumel : numel) * bf16 : 0;
  bytes += fullGrad ? numel * f32 : 0;
  bytes += gradShard ? shardNumel * f32 : 0;
  if (fullGrad || gradShard) // trained: two AdamW moments
    bytes += 2 * f32 * (momentShards ? shardNumel : numel);
  return bytes;
}

} // namespace pipemesh::plan
