//===- RankPrograms.h - sharding and per-rank programs in the IR -*- C++ -*-===//
//
// Internal to lib/Plan; the passes --pmesh-shard and --pmesh-schedule and the
// plan emitter share it.
//
//   annotateSharding   sets `pmesh.zero` on every pmesh.param: the ZeRO level
//                      its data-parallel replicas store it with (that of the
//                      lowest chunk that reads it or accumulates its
//                      gradient), and `pmesh.dp` on the module.
//   buildRankPrograms  replaces the module's pmesh.rank_program ops with one
//                      per pipeline rank: the schedule's compute actions, a
//                      recv before the first action that reads a remote value,
//                      a send after the action that produces one, wait_sends
//                      `waitLag` actions later, each gradient's data-parallel
//                      reduction (async) right after the action that completes
//                      it (ZeRO-2/3: a blocking reduce-scatter into the shard
//                      after every action that accumulates it), the tied sum, then the optimizer step and
//                      the all-gather of updated shards.
//
// The emitter lowers these ops instruction by instruction
// (PlanEmitter.cpp); docs/parallel-plan.md describes what they become.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_PLAN_RANKPROGRAMS_H
#define PIPEMESH_LIB_PLAN_RANKPROGRAMS_H

#include "StagedStep.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Plan/DeadlockCheck.h"
#include "pipemesh/Plan/Schedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

namespace pipemesh::plan::detail {

/// The action a pmesh.compute op runs.
Action actionOf(pmesh::ComputeOp compute);

/// ZeRO level of every chunk (one entry per chunk) over `dp` replicas.
void annotateSharding(mlir::ModuleOp module, const StagedStep &step,
                      llvm::ArrayRef<int64_t> zeroChunks, int64_t dp);

/// The `pmesh.zero` of every pmesh.param (absent: 0), in one pass over the
/// module (a symbol lookup by name walks the module each time).
llvm::StringMap<int64_t> zeroLevels(mlir::ModuleOp module);

/// Builds the pmesh.rank_program ops (annotateSharding first).
mlir::LogicalResult buildRankPrograms(mlir::ModuleOp module, const StagedStep &step,
                                      const ScheduleConfig &sched, int64_t dp,
                                      int64_t waitLag);

/// What the deadlock check (DeadlockCheck.h) sees of the rank programs in
/// the IR, one program per pipeline rank (ranks and peers are pipeline
/// ranks; each dp group is the rank alone, as in an elided plan). The
/// emitter lowers these sends, receives, wait_sends and collectives in the
/// same order, but for the sends that follow an action, which it moves into
/// the action right behind the op computing their value: sends never block,
/// and a wait_sends between actions completes all of them or none. So the
/// emitted plan deadlocks exactly when these programs do, found without
/// emitting it. Buffer sizes are not checked here (messages carry no bytes,
/// collectives are named by op and group): the emitted plan's check does that.
std::vector<RankProgram> communicationOfRankPrograms(mlir::ModuleOp module,
                                                     llvm::ArrayRef<int64_t> tiedRanks);

} // namespace pipemesh::plan::detail

#endif // PIPEMESH_LIB_PLAN_RANKPROGRAMS_H
