//===- Communicator.h - the communication backend interface -----*- C++ -*-===//
//
// What the runtime asks of its communication layer, behind one interface so
// the MPI backend (CPU) and, later, NCCL bootstrapped over MPI (CUDA) slot in
// without touching the executor. Every blocking call has a deadline
// (`timeoutSeconds`): a peer that stops answering makes the call throw a
// CommError naming the operation (and the peer for point-to-point), never
// hang. World-size-1 runs go through the same calls.
//
// The world collectives serve the training loop (loss, gradient norm,
// per-rank timings, checkpoint checksums); point-to-point transfers and the
// group collectives serve the pipeline / data-parallel instructions
// (docs/parallel-plan.md). Group communicators are created once, at start
// (setupGroups), and warmed up with one tiny collective each.
//
// Messages carry no "rank R:" prefix: the caller (the executor, main) names
// the rank and the instruction.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_COMMUNICATOR_H
#define PIPEMESH_RUNTIME_COMMUNICATOR_H

#include "pipemesh/runtime/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pipemesh::rt {

class CommError : public Error {
public:
  using Error::Error;
};

/// A pending non-blocking operation; wait() throws CommError at its deadline
/// (timeoutSeconds from the call of wait()), test() polls without blocking.
class CommRequest {
public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  /// True once complete (throws CommError when the transfer failed).
  virtual bool test() = 0;
  /// What it transfers, for messages ("send of buffer 3 'x' (64 bytes) to rank 1, tag 0").
  virtual const std::string &what() const = 0;
};

/// The sub-communicators of a plan (docs/parallel-plan.md, `groups`).
enum class Group { Dp, Tied };
const char *groupName(Group g);

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Human name of the backend ("mpi (Open MPI 4.1.4)").
  virtual std::string name() const = 0;

  // --- world collectives (blocking, with the deadline) ---------------------
  virtual void allreduceSum(double *data, int64_t n, const char *what) = 0;
  virtual void barrier(const char *what) = 0;
  /// Gathers `n` values from every rank to rank 0 (result: size()*n values on
  /// rank 0, empty elsewhere).
  virtual std::vector<double> gather(const double *data, int64_t n, const char *what) = 0;
  virtual std::vector<uint64_t> gather(const uint64_t *data, int64_t n, const char *what) = 0;
  /// Gathers every rank's text to rank 0 (size() strings there, in rank
  /// order; empty elsewhere).
  virtual std::vector<std::string> gatherText(const std::string &mine, const char *what) = 0;
  /// A logical AND over the ranks: every rank learns whether all succeeded.
  virtual bool allOk(bool ok, const char *what) = 0;

  // --- point-to-point (non-blocking; tags in [0, maxTag()]) ---------------
  virtual std::unique_ptr<CommRequest> isend(const void *data, uint64_t bytes, int peer, int tag,
                                             const std::string &what) = 0;
  /// A receive of exactly `bytes` (another size is a CommError at completion).
  virtual std::unique_ptr<CommRequest> irecv(void *data, uint64_t bytes, int peer, int tag,
                                             const std::string &what) = 0;
  virtual int maxTag() const = 0;
  /// Exchanges one tiny message with every rank in `peers` (which must list
  /// this rank in turn), so that the first real transfer finds connections
  /// set up. Bounded like every call.
  virtual void warmUpPeers(const std::vector<int64_t> &peers) = 0;

  // --- group collectives (float sums, bounded) -------------------------------
  /// Collective over the world: splits it into the groups (each rank passes
  /// its own group's members in group order; empty = not in any group of
  /// that kind), then runs one tiny all-reduce on each new communicator.
  /// `hierarchicalDp` (a plan compiled with dp-collectives=hierarchical):
  /// the dp group's collectives run within each node, then between the
  /// nodes (nodes: ranksPerNode consecutive ranks, or those sharing memory
  /// when it is 0); a group spread unevenly over the nodes is a CommError.
  virtual void setupGroups(const std::vector<int64_t> &dp, const std::vector<int64_t> &tied,
                           bool hierarchicalDp) = 0;
  /// The dp group's nodes and members per node as setupGroups found them
  /// for hierarchical collectives ({1, size} when it did not look), for the
  /// start-up line.
  virtual std::pair<int, int> dpHierarchy() const = 0;
  /// Size of this rank's group (0 when it is in none) and its position.
  virtual int groupSize(Group g) const = 0;
  virtual int groupRank(Group g) const = 0;
  /// In-place sum of n floats over the group.
  virtual void groupAllreduce(Group g, float *data, int64_t n, const std::string &what) = 0;
  /// in: groupSize() blocks of `block` floats; out: the sum of this rank's block.
  virtual void groupReduceScatter(Group g, const float *in, float *out, int64_t block,
                                  const std::string &what) = 0;
  /// The same two sums over bf16 values (grad-reduce=bf16): each addition
  /// is done in f32 and rounded to bf16 (nearest-even), as NCCL's bf16 sums.
  virtual void groupAllreduceBf16(Group g, uint16_t *data, int64_t n,
                                  const std::string &what) = 0;
  virtual void groupReduceScatterBf16(Group g, const uint16_t *in, uint16_t *out, int64_t block,
                                      const std::string &what) = 0;
  /// in: `blockBytes` bytes; out: groupSize() blocks, member i's at
  /// i * blockBytes (a gather moves bytes as they are: f32 or bf16).
  virtual void groupAllgather(Group g, const void *in, void *out, uint64_t blockBytes,
                              const std::string &what) = 0;

  /// Ends every rank of the job with `code` (after an error on this rank).
  [[noreturn]] virtual void abort(int code) = 0;

  double timeoutSeconds = 300;
  /// Ranks per node for hierarchical collectives (--ranks-per-node); 0: the
  /// ranks that share memory (MPI_COMM_TYPE_SHARED) form a node.
  int64_t ranksPerNode = 0;
};

/// Initializes MPI (thread level funneled) and returns the world
/// communicator. Call once, after cpu::configureBlas (which may re-exec).
std::unique_ptr<Communicator> createMpiCommunicator(int *argc, char ***argv);
/// MPI_Finalize, when MPI was initialized.
void finalizeMpi();

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_COMMUNICATOR_H
