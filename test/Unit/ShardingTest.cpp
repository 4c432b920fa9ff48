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

TEST(Sharding, Bf16ParamCopies) {
  // params=bf16: a bf16 copy of the master (the whole at zero 0, the shard
  // above), and the whole F and B read is bf16.
  ParamStorage z0 = paramStorage(0, 2, true, true);
  EXPECT_TRUE(z0.masterCopy && z0.bf16Compute && z0.fullParam);
  EXPECT_FALSE(z0.paramShard);
  ParamStorage z1 = paramStorage(1, 2, true, true);
  EXPECT_TRUE(z1.masterCopy && z1.bf16Compute && z1.fullParam && z1.paramShard);
  ParamStorage z3 = paramStorage(3, 2, true, true);
  EXPECT_TRUE(z3.masterCopy && z3.bf16Compute && z3.gatherBeforeUse);
  // Untrained parameters have no master to copy: read as they are.
  ParamStorage frozen = paramStorage(1, 2, false, true);
  EXPECT_FALSE(frozen.masterCopy || frozen.bf16Compute);
}

TEST(Sharding, PersistentBytes) {
  // 8 elements over dp=2 (shards of 4). f32: param, grad, m, v whole at zero 0.
  EXPECT_EQ(paramStorage(0, 2, true).persistentBytes(8, 4), 4 * 8 * 4);
  // + the whole bf16 copy.
  EXPECT_EQ(paramStorage(0, 2, true, true).persistentBytes(8, 4), 4 * 8 * 4 + 2 * 8);
  // zero 1: whole param and grad, shards of param, grad, m, v.
  EXPECT_EQ(paramStorage(1, 2, true).persistentBytes(8, 4), 4 * 8 * 2 + 4 * 4 * 4);
  // bf16: the whole is the 2-byte copy, plus the shard's copy.
  EXPECT_EQ(paramStorage(1, 2, true, true).persistentBytes(8, 4),
            2 * 8 + 4 * 8 + 4 * 4 * 4 + 2 * 4);
  // zero 3: shards only (the gathered whole is a temporary).
  EXPECT_EQ(paramStorage(3, 2, true).persistentBytes(8, 4), 4 * 4 * 4);
  EXPECT_EQ(paramStorage(3, 2, true, true).persistentBytes(8, 4), 4 * 4 * 4 + 2 * 4);
  // Untrained at zero 1: the whole parameter only.
  EXPECT_EQ(paramStorage(1, 2, false).persistentBytes(8, 4), 4 * 8);
}
