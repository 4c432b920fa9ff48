//===- PendingSends.h - a rank's sends in flight ----------------*- C++ -*-===//
//
// `send` posts a non-blocking send; `wait_sends` with "keep" k completes
// every send but the k most recently *posted*, after which the compiler's
// memory plan reuses those buffers. Sends to different peers can complete
// out of order, and the executor drops completed ones between instructions
// (so MPI progresses them during compute): the count that "keep" refers to
// is therefore kept by posting order here, not by what is still in flight.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_PENDINGSENDS_H
#define PIPEMESH_RUNTIME_PENDINGSENDS_H

#include "pipemesh/runtime/Communicator.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace pipemesh::rt {

class PendingSends {
public:
  void post(std::unique_ptr<CommRequest> request);
  /// A send the program lists but this run leaves out (an evaluation's
  /// stale one): it counts among the posted, already complete, so "keep"
  /// names the same sends as in a training step.
  void postSkipped() { ++posted; }
  /// Drops the sends that have completed.
  void progress();
  /// Completes every send but the `keep` most recently posted (whether or
  /// not those have completed already).
  void waitAllBut(size_t keep);
  bool empty() const { return inFlight.empty(); }

private:
  struct Entry {
    uint64_t seq; // posting order, counted over the run
    std::unique_ptr<CommRequest> request;
  };
  std::vector<Entry> inFlight; // by seq
  uint64_t posted = 0;
};

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_PENDINGSENDS_H
