//===- ShardingTest.cpp - ZeRO shards and what each level stores ----------===//
#include "pipemesh/Plan/Sharding.h"

#include <gtest/gtest.h>

using namespace pipemesh::plan;

TEST(Sharding, PadsToAMultipleOfDp) {
  ShardLayout l = shardLayout(10, 4);
  EXPECT_EQ(l.numel, 10);
  EXPECT_EQ(l.paddedNumel, 12);
  EXPECT_EQ(l.shardNumel, 3);
  EXPECT_EQ(l.elemOffset(0), 0);
  EXPECT_EQ(l.elemOffset(1), 3);
  EXPECT_EQ(l.elemOffset(2), 6);
  EXPECT_EQ(l.elemOffset(3), 9); // element 9 and two zeros of padding
}

TEST(Sharding, SmallParametersAreShardedToo) {
  // A scalar over dp=2: one element each, the second shard is all padding.
  ShardLayout s = shardLayout(1, 2);
  EXPECT_EQ(s.paddedNumel, 2);
  EXPECT_EQ(s.shardNumel, 1);
  EXPECT_EQ(s.elemOffset(1), 1);
  // A bias of 6 over dp=4: shards of 2, the last one past the end.
  ShardLayout b = shardLayout(6, 4);
  EXPECT_EQ(b.paddedNumel, 8);
  EXPECT_EQ(b.shardNumel, 2);
  EXPECT_EQ(b.elemOffset(3), 6);
  // Exact division needs no padding; dp=1 is the whole parameter.
  EXPECT_EQ(shardLayout(12, 4).paddedNumel, 12);
  EXPECT_EQ(shardLayout(5, 1).shardNumel, 5);
}

TEST(Sharding, StoragePerZeroLevel) {
  ParamStorage z0 = paramStorage(0, 2, true);
  EXPECT_TRUE(z0.fullParam && z0.fullGrad);
  EXPECT_FALSE(z0.paramShard || z0.gradShard || z0.momentShards || z0.gatherBeforeUse);

  ParamStorage z1 = paramStorage(1, 2, true);
  EXPECT_TRUE(z1.fullParam && z1.paramShard && z1.fullGrad && z1.gradShard && z1.momentShards);
  EXPECT_FALSE(z1.transientGrad || z1.gatherBeforeUse);

  ParamStorage z2 = paramStorage(2, 2, true);
  EXPECT_TRUE(z2.fullParam && z2.paramShard && z2.transientGrad && z2.gradShard);
  EXPECT_FALSE(z2.fullGrad || z2.gatherBeforeUse);

  ParamStorage z3 = paramStorage(3, 2, true);
  EXPECT_TRUE(z3.paramShard && z3.gatherBeforeUse && z3.transientGrad && z3.gradShard);
  EXPECT_FALSE(z3.fullParam || z3.fullGrad);

  // One replica: nothing to shard at any level.
  ParamStorage one = paramStorage(3, 1, true);
  EXPECT_TRUE(one.fullParam && one.fullGrad);
  EXPECT_FALSE(one.paramShard || one.gradShard || one.gatherBeforeUse);

  // Untrained parameters have no gradient; only zero 3 shards them.
  ParamStorage frozen1 = paramStorage(1, 2, false);
  EXPECT_TRUE(frozen1.fullParam);
  EXPECT_FALSE(frozen1.paramShard || frozen1.fullGrad || frozen1.gradShard);
  ParamStorage frozen3 = paramStorage(3, 2, false);
  EXPECT_TRUE(frozen3.paramShard && frozen3.gatherBeforeUse);
  EXPECT_FALSE(frozen3.fullParam || frozen3.fullGrad || frozen3.transientGrad);
}
