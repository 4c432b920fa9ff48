//===- SimTest.cpp - the step simulator against closed forms ---------------===//
//
// Synthetic programs with uniform costs (F = 1, B = 2 time units per
// micro-batch and stage, links without latency) built from the compiler's
// own schedules (Schedule.h: rankSchedule + chainPrograms), so the
// simulator is checked against the textbook pipeline bubbles, and small
// hand-made programs for memory, collectives and deadlocks.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/Plan/MemoryPlanner.h"
#include "pipemesh/Plan/Schedule.h"
#include "pipemesh/Sim/PlanLoader.h"
#include "pipemesh/Sim/Program.h"
#include "pipemesh/Sim/Simulator.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cstdio>
#include <random>

using namespace pipemesh;
using namespace pipemesh::sim;

namespace {

/// A cluster whose links cost nothing and whose device is never asked
/// (every compute has a duration).
cost::Cluster freeCluster() {
  cost::Cluster c = *cost::Cluster::preset("cpu");
  c.intraNode = {"free", 0.0, 1e30};
  c.interNode = c.intraNode;
  return c;
}

/// The compiler's chain programs for `cfg` with F = f, B = b, W = w per
/// action (W: the weight-gradient part of split backwards).
Job chainJob(const plan::ScheduleConfig &cfg, double f, double b, double w = 0) {
  std::vector<plan::RankProgram> progs = plan::chainPrograms(cfg);
  Job job;
  job.ranks.resize(progs.size());
  for (size_t r = 0; r < progs.size(); ++r) {
    Program &p = job.ranks[r];
    p.rank = r;
    std::vector<plan::Action> actions = plan::rankSchedule(cfg, r);
    size_t next = 0;
    for (const plan::CommOp &op : progs[r].ops) {
      switch (op.kind) {
      case plan::CommOp::Kind::Compute: {
        const plan::Action &a = actions.at(next++);
        int32_t label = p.label(plan::formatAction(a));
        if (a.weight)
          p.instrs.push_back(Instr::compute(w, Work::WeightGrad, label));
        else
          p.instrs.push_back(Instr::compute(a.backward ? b : f,
                                            a.backward ? Work::Backward : Work::Forward, label));
        break;
      }
      case plan::CommOp::Kind::Send:
        p.instrs.push_back(Instr::send(op.peer, op.tag, op.bytes));
        break;
      case plan::CommOp::Kind::Recv:
        p.instrs.push_back(Instr::recv(op.peer, op.tag, op.bytes));
        break;
      case plan::CommOp::Kind::WaitSends:
        p.instrs.push_back(Instr::waitSends());
        break;
      case plan::CommOp::Kind::Collective:
        ADD_FAILURE() << "chain programs have no collectives";
        break;
      }
    }
    EXPECT_EQ(next, actions.size());
  }
  return job;
}

plan::ScheduleConfig config(plan::ScheduleKind kind, int64_t pp, int64_t m, int64_t vpp = 1) {
  plan::ScheduleConfig c;
  c.kind = kind;
  c.pp = pp;
  c.microbatches = m;
  c.vpp = vpp;
  return c;
}

} // namespace

TEST(SimSchedule, OneFOneBBubbleClosedForm) {
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {1, 4, 8, 16, 32}) {
      Job job = chainJob(config(plan::ScheduleKind::OneFOneB, p, m), 1.0, 2.0);
      SimResult r = simulate(job, freeCluster());
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_NEAR(r.stepTimeS, 3.0 * (m + p - 1), 1e-9) << "p=" << p << " m=" << m;
      EXPECT_NEAR(r.bubbleFrac, double(p - 1) / double(m + p - 1), 1e-12)
          << "p=" << p << " m=" << m;
      EXPECT_NEAR(r.exposedCommFrac, 0.0, 1e-12);
      for (const RankStats &s : r.ranks)
        EXPECT_NEAR(s.computeS, 3.0 * m, 1e-9);
    }
}

TEST(SimSchedule, GPipeBubbleClosedForm) {
  for (int64_t p : {2, 4})
    for (int64_t m : {1, 3, 8}) {
      Job job = chainJob(config(plan::ScheduleKind::GPipe, p, m), 1.0, 2.0);
      SimResult r = simulate(job, freeCluster());
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_NEAR(r.bubbleFrac, double(p - 1) / double(m + p - 1), 1e-12)
          << "p=" << p << " m=" << m;
    }
}

TEST(SimSchedule, InterleavedBubbleClosedForm) {
  // Each of the v chunks of a rank costs 1/v forward and 2/v backward: the
  // bubble is (p-1)/(v*m) of the ideal time m * (F + B).
  for (int64_t p : {2, 4})
    for (int64_t v : {2, 3})
      for (int64_t m : {p, 2 * p, 4 * p}) {
        Job job = chainJob(config(plan::ScheduleKind::Interleaved, p, m, v), 1.0 / v, 2.0 / v);
        SimResult r = simulate(job, freeCluster());
        ASSERT_TRUE(r.ok) << r.error;
        double ideal = 3.0 * m;
        double expected = double(p - 1) / double(v * m);
        EXPECT_NEAR(r.stepTimeS / ideal - 1.0, expected, 1e-9)
            << "p=" << p << " v=" << v << " m=" << m;
        for (const RankStats &s : r.ranks)
          EXPECT_NEAR(s.bubbleS / s.computeS, expected, 1e-9) << "rank " << s.rank;
      }
}

namespace {
/// A reference Zero Bubble order, made here to check the simulator against
/// the paper: unit-time F, B, W on a chain of p stages; each stage, at each
/// time step, runs a B if one is ready, else an F if fewer than `limit`
/// micro-batches are between their F and their B (p - i for H1,
/// 2 (p - i) - 1 for H2), else a pending W (W's fill the bubbles).
std::vector<std::vector<plan::Action>> greedyZeroBubble(int64_t p, int64_t m, bool h2) {
  std::vector<std::vector<plan::Action>> order(p);
  std::vector<std::vector<int64_t>> fDone(p, std::vector<int64_t>(m, -1)),
      bDone(p, std::vector<int64_t>(m, -1));
  std::vector<int64_t> nextF(p, 0), nextB(p, 0), nextW(p, 0);
  for (int64_t t = 0; t < 10 * (m + p) + 10; ++t)
    for (int64_t i = 0; i < p; ++i) {
      int64_t limit = h2 ? 2 * (p - i) - 1 : p - i;
      int64_t j = nextB[i];
      bool bReady = j < m && fDone[i][j] >= 0 && fDone[i][j] < t &&
                    (i == p - 1 || (bDone[i + 1][j] >= 0 && bDone[i + 1][j] < t));
      int64_t f = nextF[i];
      bool fReady = f < m && f - nextB[i] < limit && (i == 0 || (fDone[i - 1][f] >= 0 && fDone[i - 1][f] < t));
      if (bReady) {
        bDone[i][j] = t;
        order[i].push_back({i, j, true, false});
        ++nextB[i];
      } else if (fReady) {
        fDone[i][f] = t;
        order[i].push_back({i, f, false, false});
        ++nextF[i];
      } else if (nextW[i] < nextB[i]) {
        order[i].push_back({i, nextW[i]++, true, true});
      }
    }
  return order;
}

/// Chain programs of explicit per-stage orders (vpp = 1), unit times.
Job orderJob(const std::vector<std::vector<plan::Action>> &order, int64_t m) {
  int64_t p = order.size();
  Job job;
  job.ranks.resize(p);
  for (int64_t r = 0; r < p; ++r) {
    Program &pr = job.ranks[r];
    pr.rank = r;
    for (const plan::Action &a : order[r]) {
      Work w = a.weight ? Work::WeightGrad : a.backward ? Work::Backward : Work::Forward;
      int64_t from = a.backward ? r + 1 : r - 1, to = a.backward ? r - 1 : r + 1;
      if (!a.weight && from >= 0 && from < p)
        pr.instrs.push_back(Instr::recv(from, (from * m + a.microbatch) * 2 + a.backward, 4));
      pr.instrs.push_back(Instr::compute(1.0, w, pr.label(plan::formatAction(a))));
      if (!a.weight && to >= 0 && to < p)
        pr.instrs.push_back(Instr::send(to, (r * m + a.microbatch) * 2 + a.backward, 4));
    }
    pr.instrs.push_back(Instr::waitSends());
  }
  return job;
}
} // namespace

TEST(SimSchedule, ZeroBubbleClosedForms) {
  // Zero Bubble (Qi et al.) with T_F = T_B = T_W = 1: ZB-H1 leaves
  // (p-1)(T_F + T_B - T_W) = p - 1 of bubble on the first rank (1F1B:
  // (p-1)(T_F + T_B + T_W)), which is also the least any order can have on a
  // chain (the last rank cannot start before p - 1), so ZB-H2 reaches it too.
  // Checked on the reference orders above; the compiler's zb-h1 / zb-h2
  // orders (Schedule.h) are printed next to them.
  for (int64_t p : {2, 4, 8})
    for (int64_t m : {2 * p, 4 * p}) {
      SimResult h1 = simulate(orderJob(greedyZeroBubble(p, m, false), m), freeCluster());
      ASSERT_TRUE(h1.ok) << h1.error;
      EXPECT_NEAR(h1.stepTimeS, 3.0 * m + (p - 1), 1e-9) << "zb-h1 p=" << p << " m=" << m;
      EXPECT_NEAR(h1.ranks[0].bubbleS, double(p - 1), 1e-9);
      SimResult one = simulate(chainJob(config(plan::ScheduleKind::OneFOneB, p, m), 1, 2),
                               freeCluster());
      ASSERT_TRUE(one.ok) << one.error;
      EXPECT_NEAR(one.ranks[0].bubbleS, 3.0 * (p - 1), 1e-9);
      SimResult h2 = simulate(orderJob(greedyZeroBubble(p, m, true), m), freeCluster());
      ASSERT_TRUE(h2.ok) << h2.error;
      EXPECT_NEAR(h2.stepTimeS, 3.0 * m + (p - 1), 1e-9) << "zb-h2 p=" << p << " m=" << m;
      SimResult c1 = simulate(chainJob(config(plan::ScheduleKind::ZBH1, p, m), 1, 1, 1),
                              freeCluster());
      SimResult c2 = simulate(chainJob(config(plan::ScheduleKind::ZBH2, p, m), 1, 1, 1),
                              freeCluster());
      ASSERT_TRUE(c1.ok && c2.ok) << c1.error << c2.error;
      std::printf("  p=%lld m=%lld: step of the reference zb-h1 %.0f, zb-h2 %.0f; of the "
                  "compiler's zb-h1 %.0f, zb-h2 %.0f (3m + p - 1 = %lld)\n",
                  (long long)p, (long long)m, h1.stepTimeS, h2.stepTimeS, c1.stepTimeS,
                  c2.stepTimeS, (long long)(3 * m + p - 1));
    }
}

TEST(SimSchedule, AllDeviceIdleOnlyWhenEveryRankWaits) {
  // Pipeline bubbles never idle every rank at once without latency...
  Job job = chainJob(config(plan::ScheduleKind::OneFOneB, 4, 8), 1.0, 2.0);
  SimResult r = simulate(job, freeCluster());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.allDeviceIdleS, 0.0, 1e-12);
  // ... but a slow link leaves all of them waiting while a message flies.
  cost::Cluster slow = freeCluster();
  slow.intraNode = slow.interNode = {"slow", 10.0, 1e30};
  r = simulate(job, slow);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_GT(r.allDeviceIdleS, 10.0);
  EXPECT_LE(r.allDeviceIdleFrac, r.bubbleFrac + 1e-12);
}

TEST(SimSchedule, LargeJobSimulatesInMilliseconds) {
  // 64 ranks x 128 micro-batches x 2 virtual stages: 32768 actions.
  Job job = chainJob(config(plan::ScheduleKind::Interleaved, 64, 128, 2), 0.5, 1.0);
  auto t0 = std::chrono::steady_clock::now();
  SimResult r = simulate(job, freeCluster());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.stepTimeS / (3.0 * 128) - 1.0, 63.0 / (2 * 128), 1e-9);
  RecordProperty("simulate_ms", std::to_string(s * 1e3));
  std::printf("  simulated %lld instructions of 64 ranks in %.2f ms\n",
              (long long)jobSize(job).instructions, s * 1e3);
  EXPECT_LT(s, 0.25) << "simulating " << jobSize(job).instructions << " instructions took " << s
                     << " s";
}

TEST(SimMemory, PeakEqualsStaticLivenessPeak) {
  // Random buffers with lifetimes over a program; the simulator's peak must
  // be the planner's liveness bound computed from the same ranges, also
  // after merging the compute instructions.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 60;
    std::vector<plan::LiveRange> ranges;
    std::vector<int64_t> alloc(n, 0), freed(n, 0);
    for (int b = 0; b < 40; ++b) {
      int64_t first = rng() % n, last = first + rng() % (n - first);
      int64_t bytes = 64 * (1 + rng() % 100);
      ranges.push_back({bytes, first, last});
      alloc[first] += bytes;
      freed[last] += bytes;
    }
    Job job;
    job.ranks.resize(1);
    Program &p = job.ranks[0];
    p.persistentBytes = 4096;
    for (int k = 0; k < n; ++k) {
      int32_t label = p.label("0F" + std::to_string(k / 7));
      p.instrs.push_back(Instr::compute(0.5, Work::Forward, label).mem(alloc[k], freed[k]));
    }
    int64_t expected = 4096 + plan::liveBytesLowerBound(ranges);
    SimResult r = simulate(job, freeCluster());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.ranks[0].peakMemBytes, expected);
    mergeCompute(job, cost::Device::cpu());
    EXPECT_LT(job.ranks[0].instrs.size(), (size_t)n);
    SimResult m = simulate(job, freeCluster());
    EXPECT_EQ(m.ranks[0].peakMemBytes, expected);
    EXPECT_NEAR(m.stepTimeS, r.stepTimeS, 1e-9);
  }
}

namespace {
/// Two ranks of one "dp" group, each program written by fill(program, group).
template <typename Fill> Job dpPair(Fill fill) {
  Job job;
  int32_t g = job.group("dp", {0, 1});
  job.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    job.ranks[r].rank = r;
    fill(job.ranks[r], g);
  }
  return job;
}

/// Two data-parallel ranks: compute 1, an all-reduce, compute `after`, then
/// (async) wait.
Job dpJob(bool async, double after, double bytes) {
  return dpPair([&](Program &p, int32_t g) {
    p.instrs.push_back(Instr::compute(1.0, Work::Backward));
    p.instrs.push_back(Instr::collective(cost::Collective::AllReduce, g, bytes, async));
    p.instrs.push_back(Instr::compute(after, Work::Backward));
    if (async)
      p.instrs.push_back(Instr::wait(1));
    p.instrs.push_back(Instr::compute(0.5, Work::Optimizer));
  });
}
} // namespace

TEST(SimCollective, ExposedWhenBlockingHiddenWhenOverlapped) {
  cost::Cluster c = freeCluster();
  c.intraNode = c.interNode = {"link", 0.0, 1.0}; // 1 byte/s: easy arithmetic
  // Ring all-reduce over 2 ranks of 2 bytes: 2 * 1/2 * 2 / 1 = 2 s.
  ASSERT_NEAR(c.collectiveTime(cost::Collective::AllReduce, 2.0, {0, 1}), 2.0, 1e-12);

  SimResult blocking = simulate(dpJob(false, 3.0, 2.0), c);
  ASSERT_TRUE(blocking.ok) << blocking.error;
  EXPECT_NEAR(blocking.stepTimeS, 1 + 2 + 3 + 0.5, 1e-12);
  EXPECT_NEAR(blocking.ranks[0].exposedCommS, 2.0, 1e-12);
  EXPECT_NEAR(blocking.allDeviceIdleS, 2.0, 1e-12);
  EXPECT_NEAR(blocking.exposedCommFrac, 2.0 / 6.5, 1e-12);

  SimResult hidden = simulate(dpJob(true, 3.0, 2.0), c);
  ASSERT_TRUE(hidden.ok) << hidden.error;
  EXPECT_NEAR(hidden.stepTimeS, 1 + 3 + 0.5, 1e-12);
  EXPECT_NEAR(hidden.ranks[0].exposedCommS, 0.0, 1e-12);
  EXPECT_NEAR(hidden.allDeviceIdleS, 0.0, 1e-12);

  // Overlap shorter than the collective exposes the rest.
  SimResult partial = simulate(dpJob(true, 0.5, 2.0), c);
  ASSERT_TRUE(partial.ok) << partial.error;
  EXPECT_NEAR(partial.ranks[1].exposedCommS, 1.5, 1e-12);
  EXPECT_NEAR(partial.stepTimeS, 1 + 2 + 0.5, 1e-12);
}

TEST(SimCollective, HierarchicalDpCollectivesOnlyOnTheDpGroup) {
  // Four ranks on two nodes of two: a blocking reduce-scatter on the "dp"
  // group costs the hierarchical time when the job says so, the flat time
  // otherwise and on any other group; a layout the runtime refuses is an error.
  cost::Cluster c = freeCluster();
  c.gpusPerNode = 2;
  c.algorithm = cost::CollectiveAlgorithm::Ring;
  c.intraNode = {"in", 0.0, 10.0};
  c.interNode = {"out", 0.0, 1.0};
  auto job = [](const char *groupName, bool hierarchical) {
    Job j;
    j.hierarchicalDp = hierarchical;
    j.ranks.resize(4);
    int32_t g = j.group(groupName, {0, 1, 2, 3});
    for (int32_t r = 0; r < 4; ++r) {
      j.ranks[r].rank = r;
      j.ranks[r].instrs.push_back(
          Instr::collective(cost::Collective::ReduceScatter, g, 8.0, /*async=*/false));
    }
    return j;
  };
  // Within the node: 1/2 of 8 bytes at 10 B/s; between: 1/2 of 4 bytes at 1/2 B/s.
  const double hier = 0.5 * 8 / 10 + 0.5 * 4 / 0.5, flat = 3.0 / 4 * 8 / 1;
  SimResult h = simulate(job("dp", true), c);
  ASSERT_TRUE(h.ok) << h.error;
  EXPECT_NEAR(h.stepTimeS, hier, 1e-12);
  SimResult f = simulate(job("dp", false), c);
  ASSERT_TRUE(f.ok) << f.error;
  EXPECT_NEAR(f.stepTimeS, flat, 1e-12);
  SimResult tied = simulate(job("tied", true), c);
  ASSERT_TRUE(tied.ok) << tied.error;
  EXPECT_NEAR(tied.stepTimeS, flat, 1e-12);
  c.gpusPerNode = 3;
  SimResult uneven = simulate(job("dp", true), c);
  EXPECT_FALSE(uneven.ok);
  EXPECT_NE(uneven.error.find("the group of ranks 0..3 has 3 on node 0, 1 on node 1 (cluster "),
            std::string::npos)
      << uneven.error;
}

TEST(SimCollective, LatePeerIsBubbleNotExposedComm) {
  cost::Cluster c = freeCluster();
  c.intraNode = c.interNode = {"link", 0.0, 1.0};
  Job job = dpJob(false, 0.0, 2.0);
  job.ranks[1].instrs[0].seconds = 4.0; // rank 1 reaches the all-reduce 3 s later
  SimResult r = simulate(job, c);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.ranks[0].bubbleS, 3.0, 1e-12);
  EXPECT_NEAR(r.ranks[0].exposedCommS, 2.0, 1e-12);
  EXPECT_NEAR(r.ranks[1].exposedCommS, 2.0, 1e-12);
  EXPECT_NEAR(r.stepTimeS, 4 + 2 + 0.5, 1e-12);
}

TEST(SimCollective, StreamSerialisesCollectivesOfARank) {
  // Two async all-reduces back to back: the second starts when the first
  // ends on the rank's collective stream.
  cost::Cluster c = freeCluster();
  c.intraNode = c.interNode = {"link", 0.0, 1.0};
  Job job = dpPair([](Program &p, int32_t g) {
    p.instrs.push_back(Instr::collective(cost::Collective::AllReduce, g, 2.0, true));
    p.instrs.push_back(Instr::collective(cost::Collective::AllReduce, g, 2.0, true));
    p.instrs.push_back(Instr::compute(1.0));
    p.instrs.push_back(Instr::wait(-1));
  });
  SimResult r = simulate(job, c);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.stepTimeS, 4.0, 1e-12);
  EXPECT_NEAR(r.ranks[0].exposedCommS, 3.0, 1e-12);
  EXPECT_NEAR(r.ranks[0].collectiveBusyS, 4.0, 1e-12);
}

TEST(SimCollective, WaitKeepCompletesAllButTheMostRecent) {
  // The ZeRO-1 parameter gathers of a step, carried into the next: two
  // async all-gathers left after the program's last wait, one per chunk.
  // Chunk 0 waits for the first only (keep 1) and computes while the second
  // runs; chunk 1 then waits for both.
  cost::Cluster c = freeCluster();
  c.intraNode = c.interNode = {"link", 0.0, 1.0};
  // Ring all-gather over 2 ranks of 4 bytes: 1/2 * 4 / 1 = 2 s.
  ASSERT_NEAR(c.collectiveTime(cost::Collective::AllGather, 4.0, {0, 1}), 2.0, 1e-12);
  auto build = [&](int32_t keep) {
    return dpPair([&](Program &p, int32_t g) {
      p.instrs.push_back(Instr::wait(-1, keep));
      p.instrs.push_back(Instr::compute(3.0, Work::Forward)); // chunk 0
      p.instrs.push_back(Instr::wait(-1));
      p.instrs.push_back(Instr::compute(1.0, Work::Forward)); // chunk 1
      p.instrs.push_back(Instr::compute(0.5, Work::Optimizer));
      p.instrs.push_back(Instr::collective(cost::Collective::AllGather, g, 4.0, true));
      p.instrs.push_back(Instr::collective(cost::Collective::AllGather, g, 4.0, true));
      carryAsyncTailIntoStep(p);
      EXPECT_EQ(p.instrs[0].kind, OpKind::Collective);
      EXPECT_EQ(p.instrs[1].kind, OpKind::Collective);
      EXPECT_EQ(p.instrs[2].kind, OpKind::Wait);
      EXPECT_EQ(p.instrs.back().work, Work::Optimizer);
    });
  };
  // keep 1: gather 0 ends at 2, chunk 0 runs 2..5 while gather 1 runs 2..4.
  SimResult overlapped = simulate(build(1), c);
  ASSERT_TRUE(overlapped.ok) << overlapped.error;
  EXPECT_NEAR(overlapped.stepTimeS, 2 + 3 + 1 + 0.5, 1e-12);
  EXPECT_NEAR(overlapped.ranks[0].exposedCommS, 2.0, 1e-12);
  // keep 0 waits for both gathers before chunk 0.
  SimResult serial = simulate(build(0), c);
  ASSERT_TRUE(serial.ok) << serial.error;
  EXPECT_NEAR(serial.stepTimeS, 4 + 3 + 1 + 0.5, 1e-12);
  EXPECT_NEAR(serial.ranks[0].exposedCommS, 4.0, 1e-12);
}

TEST(SimCollective, CarryLeavesWaitedAndBlockingCollectivesInPlace) {
  Program p;
  p.instrs.push_back(Instr::collective(cost::Collective::ReduceScatter, 0, 8.0, true));
  p.instrs.push_back(Instr::compute(1.0));
  p.instrs.push_back(Instr::wait(0));
  p.instrs.push_back(Instr::collective(cost::Collective::AllGather, 0, 8.0, false));
  p.instrs.push_back(Instr::collective(cost::Collective::AllGather, 0, 8.0, true));
  carryAsyncTailIntoStep(p);
  ASSERT_EQ(p.instrs.size(), 5u);
  // Only the async gather after the last wait moved; the wait's handle
  // follows its collective.
  EXPECT_TRUE(p.instrs[0].async);
  EXPECT_EQ(p.instrs[0].coll, cost::Collective::AllGather);
  EXPECT_EQ(p.instrs[1].coll, cost::Collective::ReduceScatter);
  EXPECT_EQ(p.instrs[3].kind, OpKind::Wait);
  EXPECT_EQ(p.instrs[3].handle, 1);
  EXPECT_FALSE(p.instrs[4].async);
}

TEST(SimDeadlock, NamesStuckRanksAndInstructions) {
  Job job;
  job.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    Program &p = job.ranks[r];
    p.rank = r;
    p.instrs.push_back(Instr::compute(1.0, Work::Forward, p.label(std::to_string(r) + "F0")));
    p.instrs.push_back(Instr::recv(1 - r, 5, 4));
    p.instrs.push_back(Instr::send(1 - r, 5, 4));
  }
  SimResult res = simulate(job, freeCluster());
  ASSERT_FALSE(res.ok);
  EXPECT_NE(res.error.find("deadlock"), std::string::npos) << res.error;
  EXPECT_NE(res.error.find("rank 0 instruction 1 (recv from rank 1 tag 5)"), std::string::npos)
      << res.error;
  EXPECT_NE(res.error.find("rank 1 instruction 1 (recv from rank 0 tag 5)"), std::string::npos)
      << res.error;
}

TEST(SimDeadlock, CollectivesInCrossedOrder) {
  Job job;
  int32_t a = job.group("a", {0, 1}), b = job.group("b", {0, 1});
  job.ranks.resize(2);
  job.ranks[0].rank = 0, job.ranks[1].rank = 1;
  job.ranks[0].instrs = {Instr::collective(cost::Collective::AllReduce, a, 8),
                         Instr::collective(cost::Collective::AllReduce, b, 8)};
  job.ranks[1].instrs = {Instr::collective(cost::Collective::AllReduce, b, 8),
                         Instr::collective(cost::Collective::AllReduce, a, 8)};
  SimResult res = simulate(job, freeCluster());
  ASSERT_FALSE(res.ok);
  EXPECT_NE(res.error.find("rank 0 instruction 0 (allreduce on group a)"), std::string::npos)
      << res.error;
  EXPECT_NE(res.error.find("waits for rank(s) 1 of group a"), std::string::npos) << res.error;
}

TEST(SimDeadlock, UnmatchedAndMismatched) {
  Job job;
  job.ranks.resize(2);
  job.ranks[0].rank = 0, job.ranks[1].rank = 1;
  job.ranks[0].instrs = {Instr::send(1, 3, 16)};
  SimResult res = simulate(job, freeCluster());
  ASSERT_FALSE(res.ok);
  EXPECT_NE(res.error.find("never receives"), std::string::npos) << res.error;
  job.ranks[1].instrs = {Instr::recv(0, 3, 8)};
  res = simulate(job, freeCluster());
  ASSERT_FALSE(res.ok);
  EXPECT_NE(res.error.find("receives 8 bytes"), std::string::npos) << res.error;
}

TEST(SimP2P, LatencyAndBandwidthOfAMessage) {
  cost::Cluster c = freeCluster();
  c.gpusPerNode = 1; // two nodes
  c.interNode = {"net", 0.5, 4.0};
  Job job;
  job.ranks.resize(2);
  job.ranks[0].rank = 0, job.ranks[1].rank = 1;
  job.ranks[0].instrs = {Instr::compute(1.0), Instr::send(1, 0, 8), Instr::send(1, 1, 8),
                         Instr::waitSends()};
  job.ranks[1].instrs = {Instr::recv(0, 1, 8), Instr::recv(0, 0, 8), Instr::compute(1.0)};
  SimResult r = simulate(job, c);
  ASSERT_TRUE(r.ok) << r.error;
  // First message leaves at 1, arrives 1 + 0.5 + 2; the second queues on
  // the channel behind it (busy 2 s) and arrives at 3 + 2.5.
  EXPECT_NEAR(r.ranks[1].endS, 5.5 + 1.0, 1e-12);
  EXPECT_NEAR(r.ranks[0].endS, 5.5, 1e-12);
  EXPECT_NEAR(r.ranks[1].bubbleS, 5.5, 1e-12);

  SimOptions rv;
  rv.rendezvous = true;
  job.ranks[1].instrs.insert(job.ranks[1].instrs.begin(), Instr::compute(10.0));
  r = simulate(job, c, rv);
  ASSERT_TRUE(r.ok) << r.error;
  // The transfers wait for their receives, posted at 10 and (after the
  // first arrived) at 12.5.
  EXPECT_NEAR(r.ranks[0].endS, 12.5 + 2.5, 1e-12);
}

TEST(SimErrors, InfiniteCostsAreAnErrorNotAReport) {
  // A kernel overhead that a cluster file allows (non-negative) but that sums
  // past the largest double: the step would be inf, every fraction nan.
  cost::Cluster c = *cost::Cluster::preset("a100-40g-25gbps");
  c.device.kernelOverhead = 1e308;
  Job job;
  job.ranks.resize(1);
  job.ranks[0].instrs = {Instr::kernel(1e9, 1e6, cost::KernelClass::Gemm, Work::Forward, 0),
                         Instr::kernel(1e9, 1e6, cost::KernelClass::Gemm, Work::Forward, 0)};
  SimResult r = simulate(job, c);
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("costs this plan's step at inf s (rank 0: compute inf s"),
            std::string::npos)
      << r.error;
  c.device.kernelOverhead = 1e300; // large but finite: reported as it is
  r = simulate(job, c);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.stepTimeS, 2e300);
}
