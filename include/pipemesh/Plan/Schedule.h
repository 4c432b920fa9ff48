//===- Schedule.h - per-rank pipeline action order --------------*- C++ -*-===//
//
// The order in which one pipeline rank runs the forward (F) and backward (B)
// passes of its model chunks over the micro-batches. Chunk c runs on pipeline
// rank c % pp (rank p holds chunks p, p + pp, p + 2pp, ...).
//
//   gpipe        all forwards (chunk by chunk), then all backwards;
//   1f1b         Megatron's non-interleaved schedule;
//   interleaved  Megatron's virtual pipeline (micro-batch groups per chunk);
//   elastic      forward micro-batch groups and backward micro-batch groups
//                given separately (`fwd-groups=8,4 bwd-groups=6,6`): a group
//                goes through every local chunk before the next group starts,
//                so a group of pp is depth-first (= interleaved) and one
//                group of all micro-batches is breadth-first;
//   bfs          looped breadth-first: elastic with one forward and one
//                backward group of all micro-batches (Fold3D / BFS order);
//                With `defer-w=chunk|all` either splits each backward into B
//                and W as the Zero Bubble schedules do: W's run where the
//                rank would wait for a neighbour, and the rest before the
//                rank's next backward of another chunk (chunk: a chunk's
//                gradient completes when it did unsplit, so its
//                data-parallel reduction starts as early) or at the end of
//                the step (all);
//   zb-h1, zb-h2 the Zero Bubble schedules (vpp = 1): the backward is split
//                into B (input gradient, what the previous stage waits for)
//                and W (weight gradient), and the W's fill the bubbles; at
//                most pp micro-batches in flight on any rank, 1F1B's peak
//                (H1), or 2 pp - 1 (H2, which also fills the warm-up bubble).
//
// Actions print in PyTorch's pipelining notation: `0F1` is the forward of
// chunk 0 on micro-batch 1, `1B0` the backward of chunk 1 on micro-batch 0,
// `1W0` its weight-gradient part; the emitter adds `0SEND_F1`, `1RECV_F1`,
// `1SEND_B0`, `0RECV_B0`.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_SCHEDULE_H
#define PIPEMESH_PLAN_SCHEDULE_H

#include "pipemesh/Plan/DeadlockCheck.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipemesh::plan {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, Elastic, BFS, ZBH1, ZBH2 };

std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name);
llvm::StringRef scheduleKindName(ScheduleKind kind);

/// Elastic and bfs: whether each backward is split into B and W, and when the
/// W's that fill no wait run (before the rank's next backward of another
/// chunk, or at the end of the step). Bucket is Chunk for a chunk's first
/// gradient bucket and lets its other buckets' W's follow the B's of the
/// rank's next backward run (orderWeightParts).
enum class DeferW { None, Chunk, All, Bucket };
std::optional<DeferW> parseDeferW(llvm::StringRef name);
llvm::StringRef deferWName(DeferW d);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t microbatches = 1;
  /// Interleaved: how many consecutive micro-batches pass one model chunk
  /// before the rank moves to its next chunk (Megatron's
  /// microbatch_group_size_per_vp_stage). 0 means pp.
  int64_t group = 0;
  /// Elastic: micro-batches per forward group and per backward group, each
  /// summing to microbatches (empty: one group of all, breadth-first).
  std::vector<int64_t> fwdGroups, bwdGroups;
  /// Elastic and bfs: the backward split into B and W (DeferW).
  DeferW deferW = DeferW::None;

  bool operator==(const ScheduleConfig &o) const {
    return kind == o.kind && pp == o.pp && vpp == o.vpp && microbatches == o.microbatches &&
           group == o.group && fwdGroups == o.fwdGroups && bwdGroups == o.bwdGroups &&
           deferW == o.deferW;
  }
};

/// One compute action: the forward or backward of `chunk` on `microbatch`.
/// In schedules that split the backward, `backward` alone is its input-
/// gradient part B and `backward` with `weight` its weight-gradient part W;
/// a W with `part` >= 0 runs only that gradient bucket's share of it
/// (orderWeightParts).
struct Action {
  int64_t chunk = 0;
  int64_t microbatch = 0;
  bool backward = false;
  bool weight = false;
  int64_t part = -1;
  bool operator==(const Action &o) const {
    return chunk == o.chunk && microbatch == o.microbatch && backward == o.backward &&
           weight == o.weight && part == o.part;
  }
  /// 0 forward, 1 backward (B when split), 2 weight gradient (W).
  int phase() const { return weight ? 2 : backward ? 1 : 0; }
};

/// Whether the schedule splits each backward into B and W actions.
bool splitsBackward(const ScheduleConfig &cfg);

/// The schedule actually run: `interleaved` with vpp = 1 is 1F1B, and `1f1b`
/// with vpp > 1 is the interleaved 1F1B (Megatron runs its interleaved
/// schedule whenever there are virtual stages).
ScheduleKind effectiveKind(const ScheduleConfig &cfg);

/// The micro-batch group size of the interleaved schedule (group or pp).
int64_t effectiveGroup(const ScheduleConfig &cfg);

/// Checks the configuration; false with `why`. Refuses the sizes for which
/// the order deadlocks (Megatron's interleaved schedule with a micro-batch
/// group smaller than pp, or some last groups of fewer than pp
/// micro-batches), found by simulating chainPrograms.
bool validateSchedule(const ScheduleConfig &cfg, std::string &why);

/// The number of forwards pipeline rank `rank` runs before its first
/// backward. GPipe: all M * vpp of them; 1F1B (Megatron): min(pp - rank - 1,
/// M); interleaved (Megatron): (pp - rank - 1) * 2 + (vpp - 1) * group,
/// capped at the M * vpp forwards the rank runs. Elastic: the same pipeline
/// term plus the largest lead of a forward over its backward in the group
/// tables (for equal groups g that lead is (vpp - 1) * g: interleaved).
/// Zero Bubble: the forwards its greedy order runs before the first B.
int64_t warmupForwards(const ScheduleConfig &cfg, int64_t rank);

/// The ordered compute actions of pipeline rank `rank` (every (chunk,
/// micro-batch) of its chunks forward once and backward once).
std::vector<Action> rankSchedule(const ScheduleConfig &cfg, int64_t rank);
/// rankSchedule of every rank, computed together where the orders are (the
/// Zero Bubble orders, defer-w's W placement) and the elastic warm-up once.
std::vector<std::vector<Action>> rankSchedules(const ScheduleConfig &cfg);

/// defer-w with chunks whose W accumulates several gradient buckets
/// (`partsOfChunk[c]` > 1; StagedStep::bwdWeightParts): the last `maxSplit`
/// W's of each run of the rank's order `order` that come after the run's
/// last B become their parts, ordered so that the chunk's buckets complete
/// one after another rather than all with the last W: each W runs its first
/// part where the order has it, the other parts follow the run's last W
/// bucket by bucket (every micro-batch's second part, then the third, ...),
/// so each bucket's data-parallel reduction starts when its own gradient is
/// complete. The other W's stay whole: a deferred part keeps its
/// micro-batch's activations (and what the W re-runs of a recomputed
/// forward) alive until it runs, so W's that fill waits before the last B,
/// and all but the last few of a long breadth-first run, free them as
/// before. With DeferW::Bucket the other parts wait further, behind the
/// B's of the rank's next backward run of another chunk (the ranks upstream
/// wait for those) while the first bucket's reduction runs; not past a
/// forward. Orders without split backwards come back unchanged.
std::vector<Action> orderWeightParts(const std::vector<Action> &order,
                                     llvm::ArrayRef<int64_t> partsOfChunk, DeferW deferW,
                                     int64_t maxSplit);

/// The communication of a chain of chunks (chunk c sends its output to
/// chunk c + 1 and receives its gradient back) run in this schedule's order,
/// one program per pipeline rank: what the emitter produces for a pipeline,
/// without the model. The deadlock check of these programs tells whether the
/// order itself can deadlock.
std::vector<RankProgram> chainPrograms(const ScheduleConfig &cfg);

/// `0F1`, `1B0`.
std::string formatAction(const Action &a);
/// Space-separated actions.
std::string formatSchedule(llvm::ArrayRef<Action> actions);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_SCHEDULE_H
