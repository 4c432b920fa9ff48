//===- SkeletonJob.h - a simulator job straight from rank programs -*- C++ -*-===//
//
// Internal to lib/Plan. The schedule search ranks its candidates with this:
// a simulator Job built from the pmesh.rank_program ops (what
// --pmesh-schedule wrote) without emitting a plan. Each compute action
// becomes one instruction whose time is the cost model's time of its ops on
// the cluster's device; transfers and collectives carry the bytes of their
// values and parameters; ZeRO-3 adds the per-run all-gathers the emitter
// would. Memory is an estimate (a forward keeps what its chunk's backward
// reads, the backward frees it; no recomputation, no arena packing), so the
// search simulates its best candidates exactly (the emitted plan) before it
// chooses. Building and simulating a skeleton takes milliseconds where
// emitting a plan of a large model takes seconds.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_PLAN_SKELETONJOB_H
#define PIPEMESH_LIB_PLAN_SKELETONJOB_H

#include "StagedStep.h"

#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/Plan/Schedule.h"
#include "pipemesh/Sim/Program.h"

#include "mlir/IR/BuiltinOps.h"

namespace pipemesh::plan::detail {

/// The job of the module's rank programs for `dp` replicas on `device`.
/// `tokensPerStep` sets the job's throughput unit.
sim::Job skeletonJob(mlir::ModuleOp module, const StagedStep &step, const ScheduleConfig &sched,
                     int64_t dp, const cost::Device &device, double tokensPerStep);

} // namespace pipemesh::plan::detail

#endif // PIPEMESH_LIB_PLAN_SKELETONJOB_H
