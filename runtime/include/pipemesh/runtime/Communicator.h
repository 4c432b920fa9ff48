//===- Communicator.h - the communication backend interface -----*- C++ -*-===//
//
// What the runtime asks of its communication layer, behind one interface so
// the MPI backend (CPU) and, later, NCCL bootstrapped over MPI (CUDA) slot in
// without touching the executor. Every blocking call has a deadline
// (`timeoutSeconds`): a peer that stops answering makes the call throw a
// CommError naming the operation (and the peer for point-to-point), never
// hang. World-size-1 runs go through the same calls.
//
// Today the runtime uses the world collectives (loss, gradient norm, per-rank
// timings, checkpoint checksums). The point-to-point and group collectives
// the pipeline / data-parallel instructions need are declared so their
// instructions can be bound against this interface when they arrive.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_COMMUNICATOR_H
#define PIPEMESH_RUNTIME_COMMUNICATOR_H

#include "pipemesh/runtime/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipemesh::rt {

class CommError : public Error {
public:
  using Error::Error;
};

/// A pending non-blocking operation; wait() throws CommError at its deadline.
class CommRequest {
public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
};

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
  /// A logical AND over the ranks: every rank learns whether all succeeded.
  virtual bool allOk(bool ok, const char *what) = 0;

  // --- point-to-point (non-blocking) ---------------------------------------
  virtual std::unique_ptr<CommRequest> isend(const void *data, uint64_t bytes, int peer, int tag,
                                             const std::string &what) = 0;
  virtual std::unique_ptr<CommRequest> irecv(void *data, uint64_t bytes, int peer, int tag,
                                             const std::string &what) = 0;

  /// Ends every rank of the job with `code` (after an error on this rank).
  [[noreturn]] virtual void abort(int code) = 0;

  double timeoutSeconds = 300;
};

/// Initializes MPI (thread level funneled) and returns the world
/// communicator. Call once, after cpu::configureBlas (which may re-exec).
std::unique_ptr<Communicator> createMpiCommunicator(int *argc, char ***argv);
/// MPI_Finalize, when MPI was initialized.
void finalizeMpi();

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_COMMUNICATOR_H
