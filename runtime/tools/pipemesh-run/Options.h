//===- Options.h - pipemesh-run's command line ------------------*- C++ -*-===//
#ifndef PIPEMESH_RUN_OPTIONS_H
#define PIPEMESH_RUN_OPTIONS_H

#include "pipemesh/runtime/Trainer.h"

#include <optional>
#include <string>

namespace pipemesh::run {

struct CommandLine {
  rt::RunOptions run;
  std::string exportOnnx;
  std::string onnxSource;
  std::string writeDefaultCorpus;
  /// --check-rank R: read and check the plan as rank R and exit (no MPI).
  std::optional<int64_t> checkRank;
  double commTimeout = 300;
  /// --ranks-per-node N: nodes of N consecutive ranks for dp-collectives=
  /// hierarchical plans (0: the ranks that share memory).
  int64_t ranksPerNode = 0;
  bool help = false, version = false;
};

/// Parses argv; throws rt::Error with a message for the user on bad input.
CommandLine parseCommandLine(int argc, char **argv);
const char *usage();

} // namespace pipemesh::run

#endif // PIPEMESH_RUN_OPTIONS_H
