//===- PlanLoader.h - a plan file's programs as a simulator Job -*- C++ -*-===//
//
// Reads a plan (docs/plan-format.md: 40-byte header, JSON manifest,
// safetensors weights; only the header and the manifest are read, so
// shapes-only plans of huge models load in a moment) into one Program per
// global rank, instruction for instruction:
//   kernels         their "flops" and "bytes" (the compiler's cost model),
//                   GEMM-class for matmul / attention / attention_grad;
//                   instructions without them count the bytes of their
//                   operands and results;
//   accumulate      dst += s * src: reads two buffers, writes one;
//   zero, load_microbatch, loss: write their outputs;
//   adamw           reads param, grad, m, v and writes param, m, v
//                   (Work::Optimizer);
//   send / recv     bytes of their buffer; wait_sends;
//   allreduce / reduce_scatter / allgather: blocking collectives over the
//                   rank's "groups" entry (as pipemesh-run runs them), bytes
//                   of the whole buffers; `"async": true` makes one
//                   non-blocking, completed by a later `wait` (its "handle":
//                   the collective's instruction index) or `wait_collectives`
//                   (all but its "keep" most recent); async ones after the
//                   last wait run into the next step, so they are simulated
//                   as issued first (carryAsyncTailIntoStep);
//   free            nothing.
// Each instruction's "action" (`0F1`, `1B0`, `0W1`, `0R1`) is its label and
// decides its Work.
//
// Memory follows the plan's memory planner (lib/Plan layout()): param, grad,
// adam_m, adam_v and constant buffers are live all step; every other buffer
// (an alias counts as the buffer it views) from its first to its last use in
// program order ("in", "out", "bufs"), and a sent buffer until the
// wait_sends that completes its send (every earlier send but the `keep` most
// recent); sizes rounded up to 64 bytes like the arena's.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_SIM_PLANLOADER_H
#define PIPEMESH_SIM_PLANLOADER_H

#include "pipemesh/Sim/Program.h"
#include "pipemesh/Sim/ProgramView.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pipemesh::sim {

/// What a plan says about itself (for reports).
struct PlanInfo {
  int64_t pp = 1, dp = 1, vpp = 1, microbatches = 1, worldSize = 1, zero = 0;
  int64_t batch = 0, seq = 0;
  std::string schedule, source;
  bool shapesOnly = false;
  /// parallel.dp_collectives == "hierarchical" (Job::hierarchicalDp).
  bool hierarchicalDp = false;
  double flopsPerStep = 0;
};

struct LoadedPlan {
  Job job;
  PlanInfo info;
  /// opNames[r][k]: the op of rank r's instruction k (before mergeCompute),
  /// for per-op breakdowns.
  std::vector<std::vector<std::string>> opNames;
};

/// A buffer as the loader needs it (a manifest's "buffers" entry).
struct BufferDesc {
  int64_t id = 0, bytes = 0, numel = 1;
  /// The shape's last dimension (1 for a scalar): attention's query rows
  /// are its output's numel / lastDim.
  int64_t lastDim = 1;
  int64_t aliasOf = -1;
  /// Alive all step (isPersistentKind of its kind).
  bool persistent = false;
};

/// param, param_copy, grad, adam_m, adam_v and constant buffers live all step.
bool isPersistentKind(llvm::StringRef kind);

/// One rank of a plan as jobFromRanks reads it.
struct RankSource {
  int64_t rank = 0; // global
  std::string path; // names the rank in messages ("ranks[2]")
  std::vector<BufferDesc> buffers;
  /// Group name -> member (global) ranks.
  std::map<std::string, std::vector<int64_t>> groups;
  int64_t arenaBytes = 0;
  const ProgramView *program = nullptr;
};

/// The ranks as programs; with `replicasElided` the ranks are dp rank 0 of
/// each pipeline rank and the other replicas are derived. False with `why`.
bool jobFromRanks(const PlanInfo &info, bool replicasElided, llvm::ArrayRef<RankSource> ranks,
                  LoadedPlan &out, std::string &why);

/// Reads the header and manifest of a plan file. False with `why`.
bool loadPlanFile(llvm::StringRef path, LoadedPlan &out, std::string &why);
/// The manifest's ranks as programs. False with `why` (naming the JSON path).
bool jobFromManifest(const llvm::json::Object &manifest, LoadedPlan &out, std::string &why);

} // namespace pipemesh::sim

#endif // PIPEMESH_SIM_PLANLOADER_H
