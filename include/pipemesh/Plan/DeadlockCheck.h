//===- DeadlockCheck.h - every rank of a plan runs to completion -*- C++ -*-===//
//
// Simulates the per-rank programs of a plan (docs/parallel-plan.md, "Deadlock
// check"): each rank advances through its instructions; a `send` never
// blocks; a `recv` blocks until its peer has executed the send with the same
// (source, destination, tag) (sends with equal tags match in order, as MPI's
// non-overtaking rule says); `wait_sends` blocks until every earlier send of
// the rank but the `keep` most recent has been received; a collective blocks until every member of its
// group has reached the same collective (same op, same buffer sizes). The
// plan fails when no rank can advance and some have not finished, when a
// send is never received, or when sizes or groups disagree.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_PLAN_DEADLOCKCHECK_H
#define PIPEMESH_PLAN_DEADLOCKCHECK_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pipemesh::sim {
class ProgramView;
}

namespace pipemesh::plan {

/// What one instruction means to the check.
struct CommOp {
  enum class Kind { Compute, Send, Recv, WaitSends, Collective };
  Kind kind = Kind::Compute;
  int64_t peer = -1; // send / recv
  int64_t tag = -1;  // send / recv
  int64_t bytes = 0; // send / recv
  std::string group; // collective: a key of RankProgram::groups
  /// Collective: what every member must agree on (op name and buffer sizes).
  std::string signature;
  /// wait_sends: how many of the most recent sends it leaves outstanding.
  int64_t keep = 0;

  static CommOp compute() { return {}; }
  static CommOp send(int64_t peer, int64_t tag, int64_t bytes) {
    CommOp c;
    c.kind = Kind::Send, c.peer = peer, c.tag = tag, c.bytes = bytes;
    return c;
  }
  static CommOp recv(int64_t peer, int64_t tag, int64_t bytes) {
    CommOp c = send(peer, tag, bytes);
    c.kind = Kind::Recv;
    return c;
  }
  /// Completes every earlier send of the rank but the `keep` most recent.
  static CommOp waitSends(int64_t keep = 0) {
    CommOp c;
    c.kind = Kind::WaitSends;
    c.keep = keep;
    return c;
  }
  static CommOp collective(std::string group, std::string signature) {
    CommOp c;
    c.kind = Kind::Collective, c.group = std::move(group), c.signature = std::move(signature);
    return c;
  }
};

/// One rank's program; ops[i] is instruction i.
struct RankProgram {
  int64_t rank = 0;
  std::vector<CommOp> ops;
  /// Group name -> member ranks (the rank itself included).
  std::map<std::string, std::vector<int64_t>> groups;
};

/// Empty when every rank runs to completion; otherwise a message naming
/// each blocked rank, its instruction index and what it waits for (or the
/// first mismatch found).
std::string findDeadlock(llvm::ArrayRef<RankProgram> ranks);

/// Appends what the check sees of each instruction of `program` to rp.ops;
/// `bytes` maps buffer ids to their sizes. False with `why` when an
/// instruction is malformed.
bool readCommunication(const sim::ProgramView &program, const std::map<int64_t, int64_t> &bytes,
                       RankProgram &rp, std::string &why);

/// Reads the ranks of a plan manifest (the JSON of docs/plan-format.md)
/// into programs; false with `why` when the manifest is malformed.
bool programsFromManifest(const llvm::json::Object &manifest, std::vector<RankProgram> &out,
                          std::string &why);

/// programsFromManifest + findDeadlock; an elided manifest (one program per
/// pipeline rank, Replicas.h) is checked through its dp rank 0 replicas.
std::string checkPlanDeadlock(const llvm::json::Object &manifest);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_DEADLOCKCHECK_H
