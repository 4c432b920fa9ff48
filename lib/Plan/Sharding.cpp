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

ParamStorage paramStorage(int64_t zero, int64_t dp, bool trained) {
  ParamStorage s;
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

} // namespace pipemesh::plan
