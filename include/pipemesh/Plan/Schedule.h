//===- Schedule.h - per-rank pipeline action order --------------*- C++ -*-===//
//
// The order in which one pipeline rank runs the forward (F) and backward (B)
// passes of its model chunks over the micro-batches: GPipe (all forwards,
// then all backwards), 1F1B (Megatron's non-interleaved schedule) and
// interleaved 1F1B (Megatron's virtual pipeline). Chunk c runs on pipeline
// rank c % pp (rank p holds chunks p, p + pp, p + 2pp, ...).
//
// Actions print in PyTorch's pipelining notation: `0F1` is the forward of
// chunk 0 on micro-batch 1, `1B0` the backward of chunk 1 on micro-batch 0;
// the emitter adds `0SEND_F1`, `1RECV_F1`, `1SEND_B0`, `0RECV_B0`.
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

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name);
llvm::StringRef scheduleKindName(ScheduleKind kind);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t microbatches = 1;
  /// Interleaved: how many consecutive micro-batches pass one model chunk
  /// before the rank moves to its next chunk (Megatron's
  /// microbatch_group_size_per_vp_stage). 0 means pp.
  int64_t group = 0;
};

/// One compute action: the forward or backward of `chunk` on `microbatch`.
struct Action {
  int64_t chunk = 0;
  int64_t microbatch = 0;
  bool backward = false;
  bool operator==(const Action &o) const {
    return chunk == o.chunk && microbatch == o.microbatch && backward == o.backward;
  }
};

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
/// capped at the M * vpp forwards the rank runs.
int64_t warmupForwards(const ScheduleConfig &cfg, int64_t rank);

/// The ordered compute actions of pipeline rank `rank` (every (chunk,
/// micro-batch) of its chunks forward once and backward once).
std::vector<Action> rankSchedule(const ScheduleConfig &cfg, int64_t rank);

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
