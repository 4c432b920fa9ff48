//===- MemoryPlannerTest.cpp - arena offsets from liveness -----------------===//
#include "pipemesh/Plan/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <random>

using namespace pipemesh::plan;

namespace {
/// Every pair alive at the same time must occupy disjoint bytes.
void expectNoOverlap(llvm::ArrayRef<LiveRange> r, llvm::ArrayRef<int64_t> off) {
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = i + 1; j < r.size(); ++j) {
      bool timeOverlap = r[i].first <= r[j].last && r[j].first <= r[i].last;
      bool spaceOverlap = off[i] < off[j] + r[j].bytes && off[j] < off[i] + r[i].bytes;
      EXPECT_FALSE(timeOverlap && spaceOverlap) << "ranges " << i << " and " << j;
    }
}
} // namespace

TEST(MemoryPlanner, DisjointLifetimesShareMemory) {
  llvm::SmallVector<LiveRange> ranges = {{1024, 0, 1}, {1024, 2, 3}, {1024, 4, 5}};
  llvm::SmallVector<int64_t> off;
  EXPECT_EQ(assignOffsets(ranges, off), 1024);
  EXPECT_EQ(off[0], 0);
  EXPECT_EQ(off[1], 0);
  EXPECT_EQ(off[2], 0);
}

TEST(MemoryPlanner, OverlappingLifetimesStack) {
  llvm::SmallVector<LiveRange> ranges = {{100, 0, 5}, {200, 1, 3}, {300, 2, 2}};
  llvm::SmallVector<int64_t> off;
  int64_t peak = assignOffsets(ranges, off);
  expectNoOverlap(ranges, off);
  for (int64_t o : off)
    EXPECT_EQ(o % 64, 0) << "offsets are 64-byte aligned";
  // 128 + 256 + 320 aligned bytes are all alive at instruction 2.
  EXPECT_EQ(peak, 128 + 256 + 320);
  EXPECT_GE(peak, liveBytesLowerBound(ranges));
}

TEST(MemoryPlanner, RandomProgramsNeverOverlapAndStayNearTheBound) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    llvm::SmallVector<LiveRange> ranges;
    for (int i = 0; i < 60; ++i) {
      int64_t first = rng() % 100;
      ranges.push_back({64 * (1 + (int64_t)(rng() % 64)), first, first + (int64_t)(rng() % 20)});
    }
    llvm::SmallVector<int64_t> off;
    int64_t peak = assignOffsets(ranges, off);
    expectNoOverlap(ranges, off);
    int64_t bound = liveBytesLowerBound(ranges);
    EXPECT_GE(peak, bound);
    // Greedy-by-size is not optimal, but far from the bound would mean a bug.
    EXPECT_LE(peak, 2 * bound) << "trial " << trial;
  }
}

TEST(MemoryPlanner, EachRangeAtTheLowestOffsetThatFits) {
  // The greedy's rule, checked directly: in the order of decreasing size
  // (ties in input order), each range sits at the lowest 64-byte multiple
  // where it meets no earlier-placed range alive at the same time.
  // Short programs, and (the last ten trials) long ones whose ranges span
  // anything from one instruction to most of the program, as a
  // breadth-first plan's activations do.
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const bool longProgram = trial >= 30;
    const int64_t times = longProgram ? 3000 : 200, span = longProgram ? 2500 : 60;
    llvm::SmallVector<LiveRange> ranges;
    for (int i = 0; i < (longProgram ? 400 : 80); ++i) {
      int64_t first = rng() % times;
      ranges.push_back({64 * (1 + (int64_t)(rng() % 8)) - (int64_t)(rng() % 64), first,
                        first + (int64_t)(rng() % span)});
    }
    llvm::SmallVector<int64_t> off;
    int64_t peak = assignOffsets(ranges, off);
    std::vector<size_t> order(ranges.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ranges[a].bytes > ranges[b].bytes; });
    auto aligned = [](int64_t b) { return (b + 63) / 64 * 64; };
    int64_t want = 0;
    for (size_t n = 0; n < order.size(); ++n) {
      const LiveRange &r = ranges[order[n]];
      auto clashes = [&](int64_t at) {
        for (size_t k = 0; k < n; ++k) {
          const LiveRange &o = ranges[order[k]];
          if (o.first <= r.last && r.first <= o.last && at < off[order[k]] + aligned(o.bytes) &&
              off[order[k]] < at + aligned(r.bytes))
            return true;
        }
        return false;
      };
      int64_t lowest = 0;
      while (clashes(lowest))
        lowest += 64;
      EXPECT_EQ(off[order[n]], lowest) << "trial " << trial << " range " << order[n];
      want = std::max(want, lowest + aligned(r.bytes));
    }
    EXPECT_EQ(peak, want) << "trial " << trial;
  }
}
