//===- Program.h - per-rank instruction streams for the simulator -*- C++ -*-===//
//
// What pipemesh-sim simulates: one Program per rank, the instructions that
// rank's compute stream issues in order. It is the plan's own program
// (PlanLoader.h reads it from a plan file) or one built in memory by the
// schedule search, which uses the simulator as its cost function; so the
// representation is small and flat (one struct per instruction, no strings)
// and the compute of one action may be merged into one instruction.
//
// Streams of a rank: the compute stream runs the instructions; sends travel
// on point-to-point channels (one per ordered pair of ranks); collectives run
// on the rank's data-parallel collective stream, one at a time in issue
// order, each starting when every member of its group has issued it and is
// free. A blocking collective (what pipemesh-run does today: it polls the
// collective to completion) holds the compute stream until it ends; an async
// one lets it go on until a Wait.
//
// Memory: every instruction changes the rank's live bytes. memPeak is the
// most it adds while it runs (relative to before it), memNet what it leaves
// (allocations minus frees); merging two instructions keeps both exact, so
// the simulated peak of a merged program equals the unmerged one's.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_SIM_PROGRAM_H
#define PIPEMESH_SIM_PROGRAM_H

#include "pipemesh/CostModel/Hardware.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipemesh::sim {

/// What a compute instruction works on (for the per-rank breakdown).
enum class Work : uint8_t {
  Forward,    // F actions
  Backward,   // B actions (input gradients; all of the backward when not split)
  WeightGrad, // W actions (zero-bubble weight gradients)
  Recompute,  // R actions (forward slices re-run before a backward)
  Optimizer,  // adamw
  Other,      // zero, loss, and anything outside an action
};
llvm::StringRef workName(Work w);
/// From an action label's letter: `0F1` Forward, `1B0` Backward, `0W1`
/// WeightGrad, `0R1` Recompute; Other when there is none.
Work workOfAction(llvm::StringRef action);

enum class OpKind : uint8_t {
  Compute,    // duration `seconds`, or the device's time for (flops, bytes)
  Send,       // to `peer` with `tag`: non-blocking
  Recv,       // from `peer` with `tag`: blocks until the message has arrived
  WaitSends,  // blocks until every earlier send of the rank but the `keep`
              // most recent has arrived
  Collective, // over `group`; blocks unless `async`
  Wait,       // blocks until the async collective at instruction `handle`
              // has completed; -1: every async collective issued so far but
              // the `keep` most recent
};

struct Instr {
  OpKind kind = OpKind::Compute;
  Work work = Work::Other;
  cost::KernelClass kernelClass = cost::KernelClass::Memory;
  cost::Collective coll = cost::Collective::AllReduce;
  bool async = false;
  int32_t peer = -1;   // Send / Recv: global rank
  int32_t group = -1;  // Collective: index into Job::groups
  int32_t handle = -1; // Wait
  int32_t keep = 0;    // WaitSends, Wait
  int32_t label = -1;  // index into Program::labels (the action, e.g. "0F1")
  int32_t source = -1; // the plan instruction this came from (first, if merged)
  int64_t tag = 0;
  double bytes = 0;    // Send / Recv / Collective payload (a collective's whole buffer)
  double flops = 0;    // Compute work, costed when seconds < 0
  double memBytes = 0; // Compute memory traffic
  double rows = 0;     // Compute: attention's query rows (cost::OpCost::rows)
  /// A compute instruction's work as the device model costs it.
  cost::OpCost opCost() const { return {flops, memBytes, rows}; }
  double seconds = -1; // Compute duration when >= 0
  int64_t memPeak = 0; // live bytes added at most while it runs
  int64_t memNet = 0;  // live bytes it leaves (allocated - freed)

  static Instr compute(double seconds, Work w = Work::Other, int32_t label = -1);
  static Instr kernel(double flops, double bytes, cost::KernelClass k, Work w = Work::Other,
                      int32_t label = -1);
  static Instr send(int32_t peer, int64_t tag, double bytes);
  static Instr recv(int32_t peer, int64_t tag, double bytes);
  static Instr waitSends(int32_t keep = 0);
  static Instr collective(cost::Collective c, int32_t group, double bytes, bool async = false);
  static Instr wait(int32_t handle = -1, int32_t keep = 0);
  /// Sets memPeak / memNet from bytes allocated before and freed after it.
  Instr &mem(int64_t allocated, int64_t freed) {
    memPeak = allocated;
    memNet = allocated - freed;
    return *this;
  }
};

struct Program {
  int32_t rank = 0;
  std::vector<Instr> instrs;
  /// Live for the whole step (parameters, gradients, optimizer state).
  int64_t persistentBytes = 0;
  /// The planner's arena, when known (plans); 0 otherwise.
  int64_t arenaBytes = 0;
  /// Action names referenced by Instr::label.
  std::vector<std::string> labels;
  int32_t label(llvm::StringRef name);
};

/// A communicator: its members are global ranks, in order.
struct Group {
  std::string name;
  std::vector<int64_t> members;
};

struct Job {
  std::string name;
  /// ranks[r] is global rank r's program (ranks[r].rank == r).
  std::vector<Program> ranks;
  std::vector<Group> groups;
  /// Tokens one step trains on (tokens_per_s = tokensPerStep / step time).
  double tokensPerStep = 0;
  /// The plan's model FLOPs of one step (model.flops_per_step; 0: unknown),
  /// for the report's MFU.
  double flopsPerStep = 0;
  /// Describes the plan for reports (schedule, pp, dp, ...); free text.
  std::string description;
  /// The plan's dp-collectives=hierarchical: the collectives of the groups
  /// named "dp" run within each node, then between the nodes
  /// (cost::Cluster::hierarchicalCollectiveTime).
  bool hierarchicalDp = false;

  /// Index of the group with this name and members, added if new.
  int32_t group(llvm::StringRef name, const std::vector<int64_t> &members);
};

/// Costs every Compute instruction without a duration on `device`, then
/// fuses each run of consecutive Compute instructions with the same label
/// and work into one (memory effects kept exact). What a schedule search
/// should do once per candidate before simulating.
void mergeCompute(Job &job, const cost::Device &device);

/// Data-parallel replicas from replica 0: global rank p * dp + d runs
/// rank p * dp's program with its peers and its groups other than "dp" (the
/// tied group) shifted by d. Fills every rank whose dp index is not 0.
void buildReplicas(Job &job, int64_t dp);

/// Async collectives after a program's last Wait are left running into the
/// next step (ZeRO-1/2's parameter gathers, completed by the next step's
/// waits): the simulated step, which starts every rank at 0, issues them
/// first instead, as the previous step would have.
void carryAsyncTailIntoStep(Program &program);

/// Compute instructions of a job after mergeCompute, and all instructions.
struct JobSize {
  int64_t instructions = 0, compute = 0;
};
JobSize jobSize(const Job &job);

} // namespace pipemesh::sim

#endif // PIPEMESH_SIM_PROGRAM_H
