//===- Timeline.h - traces and pictures of a simulated step -----*- C++ -*-===//
//
// Needs a SimResult simulated with SimOptions::timeline.
//   Chrome / Perfetto trace JSON: one process per rank, threads "compute"
//   (actions, idle spans), "p2p" (messages in flight from this rank) and
//   "dp-collective" (the collective stream), and a memory counter.
//   SVG: one row per rank over the step, coloured by forward, backward,
//   weight-gradient, recompute, optimizer, bubble and exposed communication.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_SIM_TIMELINE_H
#define PIPEMESH_SIM_TIMELINE_H

#include "pipemesh/Sim/Program.h"
#include "pipemesh/Sim/Simulator.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

namespace pipemesh::sim {

void writeChromeTrace(llvm::raw_ostream &os, const Job &job, const SimResult &res);

void writeSvgTimeline(llvm::raw_ostream &os, const Job &job, const SimResult &res,
                      llvm::StringRef title);

} // namespace pipemesh::sim

#endif // PIPEMESH_SIM_TIMELINE_H
