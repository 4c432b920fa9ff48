//===- Simulator.h - discrete-event simulation of a step --------*- C++ -*-===//
//
// Runs one training step of a Job (Program.h) on a Cluster (Hardware.h) and
// says where each rank's time goes. Every rank starts at time 0; its compute
// stream runs its instructions in order:
//   compute       takes its duration;
//   send          costs the compute stream nothing; the message leaves when
//                 the (src, dst) channel is free and arrives alpha +
//                 bytes / bandwidth later (SimOptions::rendezvous: not
//                 before the receiver has posted its receive, as large MPI
//                 and NCCL messages do);
//   recv          waits for the matching send's arrival (matching as MPI:
//                 same (src, dst, tag), in order): *bubble*;
//   wait_sends    waits for every earlier send to arrive: *bubble*;
//   collective    issues on the rank's collective stream; it starts when all
//                 members have issued it and finished their earlier
//                 collectives, lasts the cluster's ring/tree time; a
//                 blocking one (or a later wait) holds the compute stream
//                 until it ends: *exposed communication* from the moment
//                 every member has issued it (before that the rank waits
//                 for a peer that is behind: bubble).
// A rank whose program ends before the step does idles to the step's end;
// that tail counts as bubble. All-device idle is the time during which no
// rank computes (every compute stream waits on communication or is done).
//
// The engine is a dependency walk, not a time-ordered event queue: each rank
// runs until it blocks, a send or a completed collective wakes who waits for
// it. Its cost is linear in the number of instructions (plus a sort of the
// idle intervals), so a merged 64-rank x 128-micro-batch plan simulates in
// milliseconds.
//
// If no rank can go on while some have not finished, the result is an error
// naming every stuck rank, its instruction and what it waits for.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_SIM_SIMULATOR_H
#define PIPEMESH_SIM_SIMULATOR_H

#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/Sim/Program.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pipemesh::sim {

struct SimOptions {
  /// Point-to-point transfers start only when the receive is posted too.
  bool rendezvous = false;
  /// Record spans and memory samples for traces and pictures (slower).
  bool timeline = false;
};

enum class SpanKind : uint8_t {
  Compute,     // compute stream busy (work, label)
  Bubble,      // compute stream waiting on point-to-point (or done early)
  ExposedComm, // compute stream waiting on a collective
  P2P,         // a message in flight (on the sender's p2p stream)
  Collective,  // a collective running (on the collective stream)
};

struct Span {
  double start = 0, end = 0;
  SpanKind kind = SpanKind::Compute;
  Work work = Work::Other;
  int32_t label = -1; // Program::labels
  int32_t instr = -1; // instruction index in the program
  int32_t peer = -1;  // P2P: destination; Collective: group
};

struct RankStats {
  int64_t rank = 0;
  double computeS = 0;      // every compute instruction, recompute included
  double workS[6] = {};     // by Work
  double recomputeS = 0;    // = workS[Recompute]
  double bubbleS = 0;       // waiting on recv / wait_sends / late collective peers, idle tail
  double exposedCommS = 0;  // waiting on collectives once every member issued them
  double endS = 0;          // when the compute stream finished
  int64_t peakMemBytes = 0; // persistent + the most live bytes at once
  int64_t arenaBytes = 0;   // the plan's planned arena (0 when unknown)
  double p2pBytes = 0, collectiveBytes = 0;
  /// Time the rank's collective stream runs collectives: the step can be no
  /// shorter (a floor that no overlap removes).
  double collectiveBusyS = 0;
};

struct SimResult {
  bool ok = true;
  std::string error;

  double stepTimeS = 0;
  double tokensPerS = 0;
  /// Sums over ranks divided by (ranks x step time).
  double computeFrac = 0, bubbleFrac = 0, exposedCommFrac = 0, recomputeFrac = 0;
  /// Time with no rank computing, and its share of the step.
  double allDeviceIdleS = 0, allDeviceIdleFrac = 0;
  int64_t maxPeakMemBytes = 0;
  /// What no schedule of this plan beats: the busiest rank's collective stream
  /// (its gathers and reductions) and the busiest rank's compute (recompute
  /// included); floorS is the larger.
  double collectiveFloorS = 0, computeMaxS = 0, floorS = 0;
  std::vector<RankStats> ranks;

  /// SimOptions::timeline: spans per rank, and (time, live bytes) samples.
  std::vector<std::vector<Span>> spans;
  std::vector<std::vector<std::pair<double, int64_t>>> memory;
};

SimResult simulate(const Job &job, const cost::Cluster &cluster, const SimOptions &opts = {});

} // namespace pipemesh::sim

#endif // PIPEMESH_SIM_SIMULATOR_H
