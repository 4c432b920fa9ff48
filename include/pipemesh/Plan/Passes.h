//===- Passes.h - --pmesh-shard and --pmesh-schedule ------------*- C++ -*-===//
//
// The two passes that put the parallel plan into the IR, on a module that
// has been through --pmesh-autodiff (and --pmesh-partition for pp * vpp > 1):
//
//   --pmesh-shard="pp=P vpp=V dp=D zero=Z|Z0,Z1,..."
//       sets `pmesh.zero` on every pmesh.param: the ZeRO level its dp
//       replicas store it with (per chunk: the level of the lowest chunk
//       that uses it), and `pmesh.dp` on the module.
//   --pmesh-schedule="pp=P vpp=V dp=D microbatches=M schedule=S [group=N]
//                     [fwd-groups=.. bwd-groups=..] [wait-lag=1]"
//       adds one pmesh.rank_program per pipeline rank: compute actions,
//       paired sends and receives, wait_sends, the data-parallel gradient
//       collectives (async, right after the action that completes each
//       gradient) and the tied-weight sum, the optimizer step and the
//       all-gather of updated shards (PMeshParallelOps.td).
//
// --pipemesh-compile runs both (with its own searches for zero=auto and
// groups=auto) and lowers the rank programs into the plan.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_PASSES_H
#define PIPEMESH_PLAN_PASSES_H

namespace pipemesh::plan {

/// Registers --pmesh-shard and --pmesh-schedule.
void registerPlanPasses();

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_PASSES_H
