//===- PlanBytesTest.cpp - byte-range liveness of a rank's program ---------===//
//
// deadAfter decides whether the CUDA backend may leave a GEMM's output
// unwritten (the gradient accumulate fused into it): a later buffer that
// takes part of the dead bytes is written before it is read, and must not
// count as a read of the old value (the first version's mistake, which kept
// the fusion off for every GPT-2 weight gradient on the H200).
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/PlanBytes.h"

#include <gtest/gtest.h>

using namespace pipemesh::rt;

namespace {

/// Buffers 1..4: 1 = [0, 100) the value in question, 2 = [0, 40) and 3 =
/// [40, 100) later buffers in its bytes, 4 = [200, 300) elsewhere; 5 = a view
/// of 1.
RankPlan planWith(std::vector<Instruction> program) {
  RankPlan r;
  auto add = [&](int64_t id, uint64_t off, uint64_t bytes, int64_t aliasOf = -1) {
    BufferInfo b;
    b.id = id;
    b.offset = off;
    b.bytes = bytes;
    b.aliasOf = aliasOf;
    r.buffers.push_back(b);
  };
  add(1, 0, 100);
  add(2, 0, 40);
  add(3, 40, 60);
  add(4, 200, 100);
  add(5, 0, 100, 1);
  r.indexBuffers();
  // Instruction 0 produces buffer 1; the question is asked after it.
  Instruction first;
  first.op = "matmul";
  first.out = {1};
  program.insert(program.begin(), first);
  for (size_t i = 0; i < program.size(); ++i)
    program[i].index = i;
  r.program = std::move(program);
  return r;
}

Instruction op(const char *name, std::vector<int64_t> in, std::vector<int64_t> out) {
  Instruction i;
  i.op = name;
  i.in = std::move(in);
  i.out = std::move(out);
  return i;
}

} // namespace

TEST(PlanBytes, NothingReadsIt) {
  EXPECT_TRUE(deadAfter(planWith({op("add", {4}, {4})}), 0, {0, 100}));
}

TEST(PlanBytes, ReadLater) {
  EXPECT_FALSE(deadAfter(planWith({op("add", {4}, {4}), op("gelu", {1}, {4})}), 0, {0, 100}));
  // Through a view of the same bytes.
  EXPECT_FALSE(deadAfter(planWith({op("gelu", {5}, {4})}), 0, {0, 100}));
}

TEST(PlanBytes, PartlyRewrittenThenReadThere) {
  // Buffer 2 takes the first 40 bytes, is written, then read: the old value
  // in those bytes is gone, the rest never read.
  EXPECT_TRUE(deadAfter(planWith({op("gelu", {4}, {2}), op("gelu", {2}, {4})}), 0, {0, 100}));
}

TEST(PlanBytes, PartlyRewrittenThenReadElsewhere) {
  // Buffer 3's bytes were not rewritten when it is read.
  EXPECT_FALSE(deadAfter(planWith({op("gelu", {4}, {2}), op("gelu", {3}, {4})}), 0, {0, 100}));
  // ... and are once it is written first.
  EXPECT_TRUE(deadAfter(planWith({op("gelu", {4}, {2}), op("gelu", {4}, {3}), op("add", {2, 3}, {4})}),
                        0, {0, 100}));
}

TEST(PlanBytes, AccumulateReadsWhatItAddsInto) {
  EXPECT_FALSE(deadAfter(planWith({op("accumulate", {4}, {1})}), 0, {0, 100}));
  // A GEMM fused with its accumulation (beta = 1) adds into its output too;
  // without the flag it overwrites it.
  Instruction gemm = op("matmul", {4, 4}, {1});
  gemm.json = {{"accumulate", true}};
  EXPECT_TRUE(readsItsOutputs(gemm));
  EXPECT_FALSE(deadAfter(planWith({gemm}), 0, {0, 100}));
  gemm.json = {{"accumulate", false}};
  EXPECT_FALSE(readsItsOutputs(gemm));
  EXPECT_TRUE(deadAfter(planWith({gemm}), 0, {0, 100}));
}

TEST(PlanBytes, CommunicationReadsWhatItNames) {
  Instruction send = op("send", {}, {});
  send.json = {{"bufs", {3}}};
  EXPECT_FALSE(deadAfter(planWith({send}), 0, {0, 100}));
  EXPECT_EQ(namedBytes(planWith({send}), planWith({send}).program[1]).size(), 1u);
}

TEST(PlanBytes, NamedBytesOrder) {
  RankPlan r = planWith({op("add", {2, 4}, {3})});
  auto named = namedBytes(r, r.program[1]);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0], (ByteRange{0, 40}));
  EXPECT_EQ(named[1], (ByteRange{200, 300}));
  EXPECT_EQ(named[2], (ByteRange{40, 100}));
}

TEST(PlanBytes, IndexBuffersRefusesARepeatedId) {
  RankPlan r = planWith({});
  BufferInfo again;
  again.id = 3;
  r.buffers.push_back(again);
  EXPECT_THROW(r.indexBuffers(), Error);
}
