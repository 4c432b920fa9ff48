//===- ScheduleTest.cpp - GPipe, 1F1B and interleaved action orders -------===//
#include "pipemesh/Plan/DeadlockCheck.h"
#include "pipemesh/Plan/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "llvm/ADT/STLExtras.h"

using namespace pipemesh::plan;

namespace {
ScheduleConfig config(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t m, int64_t group = 0) {
  ScheduleConfig c;
  c.kind = kind, c.pp = pp, c.vpp = vpp, c.microbatches = m, c.group = group;
  return c;
}

/// Elastic with forward groups of f micro-batches (the last one smaller).
ScheduleConfig elasticWithGroups(int64_t pp, int64_t vpp, int64_t m, int64_t f) {
  ScheduleConfig c = config(ScheduleKind::Elastic, pp, vpp, m);
  for (int64_t lo = 0; lo < m; lo += f)
    c.fwdGroups.push_back(std::min(f, m - lo));
  return c;
}

std::string row(const ScheduleConfig &c, int64_t rank) {
  return formatSchedule(rankSchedule(c, rank));
}

/// Forwards a rank runs before its first backward.
int64_t forwardsBeforeFirstBackward(const std::vector<Action> &actions) {
  auto it = std::find_if(actions.begin(), actions.end(), [](const Action &a) { return a.backward; });
  return it - actions.begin();
}

/// Megatron's constraints on the interleaved schedule.
bool megatronAccepts(const ScheduleConfig &c) {
  if (effectiveKind(c) != ScheduleKind::Interleaved)
    return true;
  int64_t g = effectiveGroup(c), m = c.microbatches;
  return g >= c.pp && (m <= g || m % g == 0 || m % g >= c.pp);
}

const ScheduleKind kKinds[] = {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                               ScheduleKind::Interleaved};
} // namespace

TEST(Schedule, OneFOneBWarmupIsPpMinusRankMinusOne) {
  // Megatron: min(pp - rank - 1, M) forwards before the steady state.
  for (int64_t m : {1, 2, 3, 8})
    for (int64_t r = 0; r < 4; ++r) {
      ScheduleConfig c = config(ScheduleKind::OneFOneB, 4, 1, m);
      int64_t warm = std::min<int64_t>(4 - r - 1, m);
      EXPECT_EQ(warmupForwards(c, r), warm) << "rank " << r << " M " << m;
      // The steady state opens with one more forward, then the first backward.
      EXPECT_EQ(forwardsBeforeFirstBackward(rankSchedule(c, r)), std::min(warm + 1, m));
    }
}

TEST(Schedule, InterleavedWarmupIsMegatrons) {
  // (pp - rank - 1) * 2 + (vpp - 1) * group, capped at M * vpp.
  struct Case {
    int64_t pp, vpp, m, group, rank, expected;
  } cases[] = {
      {4, 2, 8, 0, 0, 10}, {4, 2, 8, 0, 1, 8},  {4, 2, 8, 0, 2, 6},  {4, 2, 8, 0, 3, 4},
      {4, 2, 4, 0, 0, 8},  {4, 2, 4, 0, 1, 8},  {4, 2, 4, 0, 2, 6},  {4, 2, 4, 0, 3, 4},
      {2, 3, 4, 0, 0, 6},  {2, 3, 4, 0, 1, 4},  {2, 2, 6, 3, 0, 5},  {2, 2, 6, 3, 1, 3},
      {3, 2, 2, 0, 0, 4},  {1, 2, 4, 0, 0, 1},
  };
  for (const Case &k : cases) {
    ScheduleConfig c = config(ScheduleKind::Interleaved, k.pp, k.vpp, k.m, k.group);
    EXPECT_EQ(warmupForwards(c, k.rank), k.expected)
        << "pp " << k.pp << " vpp " << k.vpp << " M " << k.m << " group " << k.group << " rank "
        << k.rank;
    int64_t total = k.m * k.vpp;
    EXPECT_EQ(forwardsBeforeFirstBackward(rankSchedule(c, k.rank)),
              std::min(k.expected + 1, total));
  }
}

TEST(Schedule, HandWrittenOrders) {
  ScheduleConfig gpipe = config(ScheduleKind::GPipe, 2, 1, 2);
  EXPECT_EQ(row(gpipe, 0), "0F0 0F1 0B0 0B1");
  EXPECT_EQ(row(gpipe, 1), "1F0 1F1 1B0 1B1");

  ScheduleConfig ofob = config(ScheduleKind::OneFOneB, 2, 1, 3);
  EXPECT_EQ(row(ofob, 0), "0F0 0F1 0B0 0F2 0B1 0B2");
  EXPECT_EQ(row(ofob, 1), "1F0 1B0 1F1 1B1 1F2 1B2");

  ScheduleConfig ofob4 = config(ScheduleKind::OneFOneB, 4, 1, 4);
  EXPECT_EQ(row(ofob4, 0), "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3");
  EXPECT_EQ(row(ofob4, 1), "1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3");
  EXPECT_EQ(row(ofob4, 2), "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2B3");
  EXPECT_EQ(row(ofob4, 3), "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3");

  // Megatron's interleaved schedule, pp=2 vpp=2 M=4 (groups of 2).
  ScheduleConfig il = config(ScheduleKind::Interleaved, 2, 2, 4);
  EXPECT_EQ(row(il, 0), "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
  EXPECT_EQ(row(il, 1), "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
  // M = pp: every forward first on rank 0.
  ScheduleConfig il2 = config(ScheduleKind::Interleaved, 2, 2, 2);
  EXPECT_EQ(row(il2, 0), "0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1");
  EXPECT_EQ(row(il2, 1), "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1");

  // Breadth-first (GPipe with virtual stages).
  ScheduleConfig bfs = config(ScheduleKind::GPipe, 2, 2, 2);
  EXPECT_EQ(row(bfs, 0), "0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1");
}

TEST(Schedule, VirtualStagesPickTheInterleavedSchedule) {
  EXPECT_EQ(effectiveKind(config(ScheduleKind::OneFOneB, 2, 2, 4)), ScheduleKind::Interleaved);
  EXPECT_EQ(effectiveKind(config(ScheduleKind::Interleaved, 2, 1, 4)), ScheduleKind::OneFOneB);
  EXPECT_EQ(effectiveKind(config(ScheduleKind::GPipe, 2, 2, 4)), ScheduleKind::GPipe);
  EXPECT_EQ(effectiveGroup(config(ScheduleKind::Interleaved, 3, 2, 4)), 3);
  EXPECT_EQ(effectiveGroup(config(ScheduleKind::Interleaved, 3, 2, 4, 5)), 5);
}

TEST(Schedule, EveryActionOnceAndInDependencyOrder) {
  for (ScheduleKind kind : kKinds)
    for (int64_t pp = 1; pp <= 4; ++pp)
      for (int64_t vpp = 1; vpp <= 3; ++vpp)
        for (int64_t m = 1; m <= 8; ++m)
          for (int64_t group : {0, 1, 3}) {
            ScheduleConfig c = config(kind, pp, vpp, m, group);
            std::string label = std::string(scheduleKindName(kind)) + " pp " +
                                std::to_string(pp) + " vpp " + std::to_string(vpp) + " M " +
                                std::to_string(m) + " group " + std::to_string(group);
            std::map<std::tuple<int64_t, int64_t, bool>, int> seen;
            for (int64_t r = 0; r < pp; ++r) {
              std::vector<Action> actions = rankSchedule(c, r);
              ASSERT_EQ((int64_t)actions.size(), 2 * m * vpp) << label;
              std::map<std::tuple<int64_t, int64_t, bool>, size_t> at;
              for (auto [k, a] : llvm::enumerate(actions)) {
                ASSERT_EQ(a.chunk % pp, r) << label << ": rank " << r << " runs chunk " << a.chunk;
                ++seen[{a.chunk, a.microbatch, a.backward}];
                at[{a.chunk, a.microbatch, a.backward}] = k;
              }
              // Backward after its own forward; on one rank, chunk order holds.
              for (auto &[key, k] : at) {
                auto [chunk, j, backward] = key;
                if (backward) {
                  EXPECT_LT((at[{chunk, j, false}]), k) << label << ": B before F of " << chunk;
                }
                int64_t dep = backward ? chunk + 1 : chunk - 1;
                if (dep >= 0 && dep < pp * vpp && dep % pp == r) {
                  EXPECT_LT((at[{dep, j, backward}]), k) << label << ": chunk " << chunk
                                                       << " before its input chunk " << dep;
                }
              }
            }
            EXPECT_EQ((int64_t)seen.size(), 2 * m * vpp * pp) << label;
            for (auto &[key, n] : seen)
              EXPECT_EQ(n, 1) << label;
          }
}

TEST(Schedule, ChainOfChunksNeverDeadlocks) {
  // Every GPipe and 1F1B order, and every interleaved order within
  // Megatron's constraints, is deadlock-free; what validateSchedule refuses
  // is exactly what deadlocks.
  int checked = 0;
  for (ScheduleKind kind : kKinds)
    for (int64_t pp = 1; pp <= 4; ++pp)
      for (int64_t vpp = 1; vpp <= 3; ++vpp)
        for (int64_t m = 1; m <= 9; ++m)
          for (int64_t group : {0, 1, 2, 3, 4, 5}) {
            ScheduleConfig c = config(kind, pp, vpp, m, group);
            std::string label = std::string(scheduleKindName(kind)) + " pp " +
                                std::to_string(pp) + " vpp " + std::to_string(vpp) + " M " +
                                std::to_string(m) + " group " + std::to_string(group);
            std::string dead = findDeadlock(chainPrograms(c)), why;
            if (megatronAccepts(c)) {
              EXPECT_EQ(dead, "") << label;
              ++checked;
            }
            EXPECT_EQ(validateSchedule(c, why), dead.empty()) << label << ": " << why;
          }
  EXPECT_GT(checked, 1000);
}

TEST(Schedule, DeadlockingInterleavedOrdersAreRefused) {
  std::string why;
  // A group smaller than pp.
  EXPECT_FALSE(validateSchedule(config(ScheduleKind::Interleaved, 4, 2, 8, 2), why));
  EXPECT_EQ(why, "the interleaved schedule with pp=4 vpp=2 microbatches=8 group=2 deadlocks (a "
                 "forward waits for a backward that waits for it); Megatron's interleaved "
                 "schedule needs group >= pp and microbatches % group either 0 or >= pp");
  // A last group of one micro-batch with three virtual stages.
  EXPECT_FALSE(validateSchedule(config(ScheduleKind::Interleaved, 4, 3, 5), why));
  // Outside Megatron's constraints but deadlock-free (a bubblier order): allowed.
  EXPECT_TRUE(validateSchedule(config(ScheduleKind::Interleaved, 3, 2, 4), why)) << why;
  EXPECT_TRUE(validateSchedule(config(ScheduleKind::Interleaved, 4, 2, 5), why)) << why;
  // Fewer micro-batches than pp: one group, every forward first.
  EXPECT_TRUE(validateSchedule(config(ScheduleKind::Interleaved, 4, 2, 3), why)) << why;
}

TEST(Schedule, SwappedRecvOrderDeadlocks) {
  // 1F1B pp=2 M=4: rank 0 waits for the gradient of micro-batch 2 where it
  // should wait for micro-batch 0's, but rank 1 computes it only after rank
  // 0's forward of micro-batch 2, which comes later.
  std::vector<RankProgram> programs = chainPrograms(config(ScheduleKind::OneFOneB, 2, 1, 4));
  ASSERT_EQ(findDeadlock(programs), "");
  std::vector<size_t> recvs;
  for (auto [k, op] : llvm::enumerate(programs[0].ops))
    if (op.kind == CommOp::Kind::Recv)
      recvs.push_back(k);
  ASSERT_EQ(recvs.size(), 4u);
  std::swap(programs[0].ops[recvs[0]], programs[0].ops[recvs[2]]);
  std::string why = findDeadlock(programs);
  EXPECT_NE(why.find("deadlock"), std::string::npos) << why;
  std::string tag = std::to_string(programs[0].ops[recvs[0]].tag); // micro-batch 2's
  EXPECT_NE(why.find("rank 0 instruction " + std::to_string(recvs[0]) + " (recv from rank 1 tag " +
                     tag + ") waits for rank 1 to send tag " + tag),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("rank 1 instruction"), std::string::npos) << why;
}

namespace {
/// Each (chunk, micro-batch) of the rank runs F once and B once (and W once
/// when the schedule splits the backward), F before B before W.
void expectComplete(const ScheduleConfig &c) {
  for (int64_t r = 0; r < c.pp; ++r) {
    std::map<std::tuple<int64_t, int64_t, int>, int64_t> pos;
    auto actions = rankSchedule(c, r);
    for (auto [k, a] : llvm::enumerate(actions)) {
      int phase = a.phase();
      EXPECT_EQ(a.chunk % c.pp, r);
      EXPECT_TRUE(pos.insert({{a.chunk, a.microbatch, phase}, (int64_t)k}).second)
          << formatAction(a) << " twice on rank " << r;
    }
    int phases = splitsBackward(c) ? 3 : 2;
    EXPECT_EQ((int64_t)pos.size(), c.vpp * c.microbatches * phases) << "rank " << r;
    for (auto &[key, k] : pos) {
      auto [chunk, j, phase] = key;
      if (phase > 0) {
        EXPECT_LT(pos[std::make_tuple(chunk, j, phase - 1)], k) << "rank " << r;
      }
    }
  }
}

/// Most micro-batches a rank holds activations for at once (forwarded and
/// not yet through their last backward action).
int64_t peakInFlight(const ScheduleConfig &c, int64_t r) {
  int64_t live = 0, peak = 0;
  for (const Action &a : rankSchedule(c, r)) {
    if (!a.backward)
      peak = std::max(peak, ++live);
    else if (a.weight || !splitsBackward(c))
      --live;
  }
  return peak;
}
} // namespace

TEST(Schedule, NewSchedulesAreCompleteAndDeadlockFree) {
  std::string why;
  for (int64_t pp : {1, 2, 3, 4})
    for (int64_t m : {1, 2, 3, 4, 8}) {
      for (auto kind : {ScheduleKind::ZBH1, ScheduleKind::ZBH2}) {
        ScheduleConfig c = config(kind, pp, 1, m);
        EXPECT_TRUE(validateSchedule(c, why)) << why;
        expectComplete(c);
      }
      for (int64_t vpp : {1, 2, 3}) {
        ScheduleConfig b = config(ScheduleKind::BFS, pp, vpp, m);
        EXPECT_TRUE(validateSchedule(b, why)) << why;
        expectComplete(b);
        // Every split of m into forward groups and backward groups.
        for (int64_t f = 1; f <= m; ++f)
          for (int64_t g = 1; g <= m; ++g) {
            ScheduleConfig e = elasticWithGroups(pp, vpp, m, f);
            for (int64_t lo = 0; lo < m; lo += g)
              e.bwdGroups.push_back(std::min(g, m - lo));
            EXPECT_TRUE(validateSchedule(e, why)) << why;
            expectComplete(e);
          }
      }
    }
}

namespace {
/// Step time of a vpp = 1 schedule with unit-time F, B and W (an unsplit
/// backward takes 2): F waits for the previous rank's F, B for the next
/// rank's B; -1 when the orders deadlock.
int64_t unitMakespan(const ScheduleConfig &c) {
  const int64_t pp = c.pp;
  std::vector<std::vector<Action>> orders;
  for (int64_t r = 0; r < pp; ++r)
    orders.push_back(rankSchedule(c, r));
  std::map<std::pair<int64_t, int64_t>, int64_t> fEnd, bEnd;
  std::vector<size_t> pc(pp, 0);
  std::vector<int64_t> t(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < pp; ++r)
      for (; pc[r] < orders[r].size(); ++pc[r], progress = true) {
        const Action &a = orders[r][pc[r]];
        int64_t start = t[r], len = 1;
        if (!a.backward) {
          if (r > 0 && !fEnd.count({r - 1, a.microbatch}))
            break;
          if (r > 0)
            start = std::max(start, fEnd[{r - 1, a.microbatch}]);
          fEnd[{r, a.microbatch}] = start + 1;
        } else if (!a.weight) {
          if (r < pp - 1 && !bEnd.count({r + 1, a.microbatch}))
            break;
          if (r < pp - 1)
            start = std::max(start, bEnd[{r + 1, a.microbatch}]);
          len = splitsBackward(c) ? 1 : 2;
          bEnd[{r, a.microbatch}] = start + len;
        }
        t[r] = start + len;
      }
  }
  for (int64_t r = 0; r < pp; ++r)
    if (pc[r] != orders[r].size())
      return -1;
  return *std::max_element(t.begin(), t.end());
}
} // namespace

TEST(Schedule, ZeroBubbleOrdersMatchThePaper) {
  // ZB-H1 (Zero Bubble paper, figure 3): 1F1B's warm-up, then F B W in the
  // steady state, W's filling what would be bubbles.
  ScheduleConfig h1 = config(ScheduleKind::ZBH1, 4, 1, 8);
  EXPECT_EQ(row(h1, 0), "0F0 0F1 0F2 0F3 0B0 0W0 0B1 0F4 0B2 0W1 0B3 0F5 0W2 0F6 0B4 0W3 0F7 "
                        "0W4 0B5 0W5 0B6 0W6 0B7 0W7");
  ScheduleConfig h2 = config(ScheduleKind::ZBH2, 4, 1, 8);
  for (int64_t pp : {2, 3, 4, 8})
    for (int64_t m : {pp, 2 * pp, 3 * pp + 1}) {
      ScheduleConfig one = config(ScheduleKind::OneFOneB, pp, 1, m);
      ScheduleConfig a = config(ScheduleKind::ZBH1, pp, 1, m);
      ScheduleConfig b = config(ScheduleKind::ZBH2, pp, 1, m);
      // Unit costs: 1F1B's bubble is 3 (pp - 1); the chain's bound is pp - 1
      // (the paper's H1 reaches it with hand-placed W's; the greedy order
      // stays within 3 of it).
      EXPECT_EQ(unitMakespan(one), 3 * m + 3 * (pp - 1)) << "pp " << pp << " m " << m;
      EXPECT_LE(unitMakespan(a), 3 * m + pp + 2) << "ZB-H1 pp " << pp << " m " << m;
      if (pp >= 3) {
        EXPECT_LT(unitMakespan(a), unitMakespan(one)) << "ZB-H1 pp " << pp << " m " << m;
      }
      EXPECT_GE(unitMakespan(a), 3 * m + pp - 1);
      EXPECT_EQ(unitMakespan(b), 3 * m + pp - 1) << "ZB-H2 pp " << pp << " m " << m;
      for (int64_t r = 0; r < pp; ++r) {
        // H1 never holds more than 1F1B's first rank does; H2 2 pp - 1.
        EXPECT_LE(peakInFlight(a, r), std::min(pp, m)) << "H1 rank " << r;
        EXPECT_LE(peakInFlight(b, r), std::min(2 * pp - 1, m)) << "H2 rank " << r;
      }
    }
  EXPECT_EQ(peakInFlight(h2, 0), 7);
  ScheduleConfig bad = config(ScheduleKind::ZBH1, 2, 2, 4);
  std::string why;
  EXPECT_FALSE(validateSchedule(bad, why));
  EXPECT_NE(why.find("vpp=1"), std::string::npos) << why;
}

TEST(Schedule, DeferredWeightGradients) {
  // defer-w splits elastic's and bfs's backwards into B and W without
  // changing their forward/backward order (so the messages, checked free of
  // deadlock, are the same); with chunk, a chunk's W's all run before the
  // rank's next backward of another chunk; with unit costs the split order is
  // never slower than the unsplit one (W's run only where the rank would wait
  // or after its last F and B, and a B alone takes half the time).
  std::string why;
  for (int64_t pp : {1, 2, 3, 4})
    for (int64_t vpp : {1, 2, 3})
      for (int64_t m : {1, 2, 4, 8})
        for (int64_t f : {pp, m})
          for (DeferW d : {DeferW::Chunk, DeferW::All, DeferW::Bucket}) {
            ScheduleConfig plain = elasticWithGroups(pp, vpp, m, f);
            plain.bwdGroups = plain.fwdGroups;
            if (!validateSchedule(plain, why))
              continue; // groups below pp that deadlock unsplit
            ScheduleConfig split = plain;
            split.deferW = d;
            SCOPED_TRACE("pp " + std::to_string(pp) + " vpp " + std::to_string(vpp) + " m " +
                         std::to_string(m) + " f " + std::to_string(f) + " " +
                         deferWName(d).str());
            ASSERT_TRUE(splitsBackward(split));
            EXPECT_TRUE(validateSchedule(split, why)) << why;
            expectComplete(split);
            for (int64_t r = 0; r < pp; ++r) {
              std::vector<Action> order = rankSchedule(split, r), withoutW;
              for (const Action &a : order)
                if (!a.weight)
                  withoutW.push_back(a);
              EXPECT_EQ(formatSchedule(withoutW), row(plain, r)) << "rank " << r;
              if (d == DeferW::All)
                continue;
              for (size_t k = 0; k < order.size(); ++k) {
                if (!order[k].backward || order[k].weight)
                  continue;
                Action w = order[k];
                w.weight = true;
                size_t at = std::find(order.begin(), order.end(), w) - order.begin();
                for (size_t q = k + 1; q < at; ++q)
                  EXPECT_FALSE(order[q].backward && !order[q].weight &&
                               order[q].chunk != w.chunk)
                      << formatAction(order[q]) << " before " << formatAction(w);
              }
            }
            if (vpp == 1) {
              EXPECT_LE(unitMakespan(split), unitMakespan(plain));
            }
          }
  ScheduleConfig bad = config(ScheduleKind::Interleaved, 2, 2, 4);
  bad.deferW = DeferW::Chunk;
  EXPECT_FALSE(validateSchedule(bad, why));
  EXPECT_NE(why.find("defer-w is an option of schedule=elastic"), std::string::npos) << why;
}

TEST(Schedule, WeightPartsByBucket) {
  // Chunk 1's W has two parts (gradient buckets), chunk 0's three. A W
  // before its run's last B (1W0, filling a wait) stays whole; of the others
  // the first part stays where the W was, the rest follow the run's last W
  // bucket by bucket (chunk), or behind the next run's B's (bucket).
  const std::vector<Action> order = {{1, 0, true}, {1, 0, true, true}, {1, 1, true},
                                     {1, 1, true, true}, {0, 0, true}, {0, 1, true},
                                     {0, 0, true, true}, {0, 1, true, true}};
  const std::vector<int64_t> parts = {3, 2};
  EXPECT_EQ(formatSchedule(orderWeightParts(order, parts, DeferW::Chunk, 8)),
            "1B0 1W0 1B1 1W1.0 1W1.1 0B0 0B1 0W0.0 0W1.0 0W0.1 0W1.1 0W0.2 0W1.2");
  EXPECT_EQ(formatSchedule(orderWeightParts(order, parts, DeferW::Bucket, 8)),
            "1B0 1W0 1B1 1W1.0 0B0 0B1 1W1.1 0W0.0 0W1.0 0W0.1 0W1.1 0W0.2 0W1.2");
  // At most one split W per run: the run's last.
  EXPECT_EQ(formatSchedule(orderWeightParts(order, parts, DeferW::Chunk, 1)),
            "1B0 1W0 1B1 1W1.0 1W1.1 0B0 0B1 0W0 0W1.0 0W1.1 0W1.2");
  EXPECT_EQ(formatSchedule(orderWeightParts(order, {1, 1}, DeferW::Bucket, 8)),
            formatSchedule(order));
  EXPECT_EQ(formatSchedule(orderWeightParts(order, parts, DeferW::None, 8)), formatSchedule(order));
  // A forward before the next run's B's: bucket flushes where chunk does.
  std::vector<Action> withF = {{1, 0, true}, {1, 0, true, true}, {0, 0, false}, {0, 0, true},
                               {0, 0, true, true}};
  EXPECT_EQ(formatSchedule(orderWeightParts(withF, {1, 2}, DeferW::Bucket, 8)),
            "1B0 1W0.0 1W0.1 0F0 0B0 0W0");

  // Every elastic order: each W after its run's last B becomes its parts,
  // each once (the others stay whole); with the parts after the first
  // dropped and the first read as the whole W, the order is unchanged; a
  // run's later parts run bucket by bucket after its first parts and no
  // forward comes between; chunk: no B of another chunk either.
  std::string why;
  for (int64_t pp : {1, 2, 4})
    for (int64_t vpp : {1, 2, 3})
      for (int64_t m : {1, 2, 4, 8})
        for (int64_t f : {pp, m})
          for (DeferW d : {DeferW::Chunk, DeferW::All, DeferW::Bucket}) {
            ScheduleConfig c = elasticWithGroups(pp, vpp, m, f);
            c.bwdGroups = {m};
            c.deferW = d;
            if (!validateSchedule(c, why))
              continue;
            SCOPED_TRACE("pp " + std::to_string(pp) + " vpp " + std::to_string(vpp) + " m " +
                         std::to_string(m) + " f " + std::to_string(f) + " " +
                         deferWName(d).str());
            std::vector<int64_t> parts;
            for (int64_t k = 0; k < pp * vpp; ++k)
              parts.push_back(1 + k % 3);
            for (int64_t r = 0; r < pp; ++r) {
              std::vector<Action> order = rankSchedule(c, r);
              std::vector<Action> split = orderWeightParts(order, parts, d, 2 * pp), firstParts;
              std::map<std::tuple<int64_t, int64_t, int64_t>, size_t> at; // (c, mb, part)
              for (auto [k, a] : llvm::enumerate(split)) {
                if (a.weight && parts[a.chunk] > 1 && a.part >= 0) {
                  ASSERT_GE(a.part, 0);
                  ASSERT_LT(a.part, parts[a.chunk]);
                  EXPECT_TRUE(at.insert({{a.chunk, a.microbatch, a.part}, k}).second)
                      << formatAction(a) << " twice";
                } else {
                  EXPECT_EQ(a.part, -1) << formatAction(a);
                }
                if (!a.weight || a.part <= 0)
                  firstParts.push_back(Action{a.chunk, a.microbatch, a.backward, a.weight});
              }
              EXPECT_EQ(formatSchedule(firstParts), formatSchedule(order)) << "rank " << r;
              for (auto [key, k] : at) {
                auto [chunk, mb, part] = key;
                if (part == 0)
                  continue;
                // After every first part of its chunk's W's before it, and
                // after the previous part of every micro-batch of its run.
                const size_t first = at[std::make_tuple(chunk, mb, int64_t(0))];
                EXPECT_GT(k, first);
                for (size_t q = first; q < k; ++q) {
                  const Action &x = split[q];
                  std::string where = formatAction(x) + " before " + formatAction(split[k]);
                  EXPECT_FALSE(x.weight && x.chunk == chunk && x.part > part) << where;
                  EXPECT_TRUE(x.backward) << where;
                  if (d == DeferW::Chunk) {
                    EXPECT_FALSE(!x.weight && x.chunk != chunk) << where;
                  }
                }
              }
            }
          }
}

TEST(Schedule, ElasticSpansInterleavedToBreadthFirst) {
  // Groups of pp in both directions are Megatron's interleaved schedule.
  for (int64_t m : {4, 8, 12}) {
    ScheduleConfig in = config(ScheduleKind::Interleaved, 4, 2, m);
    ScheduleConfig el = config(ScheduleKind::Elastic, 4, 2, m);
    el.fwdGroups = el.bwdGroups = std::vector<int64_t>(m / 4, 4);
    for (int64_t r = 0; r < 4; ++r)
      EXPECT_EQ(row(el, r), row(in, r)) << "M " << m << " rank " << r;
  }
  // One group of all: breadth-first (bfs), every chunk but the last one
  // forwards every micro-batch before the first backward.
  ScheduleConfig bfs = config(ScheduleKind::BFS, 2, 2, 4);
  EXPECT_EQ(row(bfs, 0), "0F0 0F1 0F2 0F3 2F0 2F1 2F2 2B0 2F3 2B1 2B2 2B3 0B0 0B1 0B2 0B3");
  EXPECT_EQ(row(bfs, 1), "1F0 1F1 1F2 1F3 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 1B0 1B1 1B2 1B3");
  // The example: forward 8,4 and backward 6,6 for 12 micro-batches.
  ScheduleConfig e = config(ScheduleKind::Elastic, 2, 2, 12);
  e.fwdGroups = {8, 4};
  e.bwdGroups = {6, 6};
  std::string why;
  EXPECT_TRUE(validateSchedule(e, why)) << why;
  EXPECT_EQ(row(e, 1).substr(0, 47), "1F0 1F1 1F2 1F3 1F4 1F5 1F6 1F7 3F0 3B0 3F1 3B1");
  // Groups that do not sum to the micro-batches are refused.
  e.bwdGroups = {6, 5};
  EXPECT_FALSE(validateSchedule(e, why));
  EXPECT_NE(why.find("bwd-groups sums to 11"), std::string::npos) << why;
}

