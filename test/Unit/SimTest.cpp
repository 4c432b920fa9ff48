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

/// The compiler's chain programs for `cfg` with F = f, B = b per action.
Job chainJob(const plan::ScheduleConfig &cfg, double f, double b) {
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
        p.instrs.push_back(
            Instr::compute(a.backward ? b : f, a.backward ? Work::Backward : Work::Forward, label));
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
/// Two data-parallel ranks: compute 1, an all-reduce, compute `after`, then
/// (async) wait.
Job dpJob(bool async, double after, double bytes) {
  Job job;
  int32_t g = job.group("dp", {0, 1});
  job.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    Program &p = job.ranks[r];
    p.rank = r;
    p.instrs.push_back(Instr::compute(1.0, Work::Backward));
    p.instrs.push_back(Instr::collective(cost::Collective::AllReduce, g, bytes, async));
    p.instrs.push_back(Instr::compute(after, Work::Backward));
    if (async)
      p.instrs.push_back(Instr::wait(1));
    p.instrs.push_back(Instr::compute(0.5, Work::Optimizer));
  }
  return job;
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
  Job job;
  int32_t g = job.group("dp", {0, 1});
  job.ranks.resize(2);
  for (int r = 0; r < 2; ++r) {
    Program &p = job.ranks[r];
    p.rank = r;
    p.instrs.push_back(Instr::collective(cost::Collective::AllReduce, g, 2.0, true));
    p.instrs.push_back(Instr::collective(cost::Collective::AllReduce, g, 2.0, true));
    p.instrs.push_back(Instr::compute(1.0));
    p.instrs.push_back(Instr::wait(-1));
  }
  SimResult r = simulate(job, c);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.stepTimeS, 4.0, 1e-12);
  EXPECT_NEAR(r.ranks[0].exposedCommS, 3.0, 1e-12);
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
