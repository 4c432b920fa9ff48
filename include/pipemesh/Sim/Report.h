//===- Report.h - what pipemesh-sim prints and writes -----------*- C++ -*-===//
//
// The summary of a simulated step for people (a table on stdout) and for
// programs (--json: the keys docs/pipemesh-sim.md lists; the schedule search
// and the benchmarks read them).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_SIM_REPORT_H
#define PIPEMESH_SIM_REPORT_H

#include "pipemesh/CostModel/Hardware.h"
#include "pipemesh/Sim/Program.h"
#include "pipemesh/Sim/Simulator.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace pipemesh::sim {

/// step_time_s, tokens_per_s, bubble_frac, exposed_comm_frac,
/// all_device_idle_frac, recompute_frac, peak_mem_bytes (one per rank), and
/// the per-rank breakdown under "ranks".
llvm::json::Value summaryJson(const Job &job, const cost::Cluster &cluster,
                              const SimResult &res);

/// A human table: one line for the step, one per rank.
void printSummary(llvm::raw_ostream &os, const Job &job, const cost::Cluster &cluster,
                  const SimResult &res);

} // namespace pipemesh::sim

#endif // PIPEMESH_SIM_REPORT_H
