//===- MpiCommunicator.cpp - the MPI communication backend ----------------===//
//
// Non-blocking MPI calls completed by polling MPI_Test against a deadline, so
// that a dead or stuck peer turns into a CommError (and an MPI_Abort of the
// job by the caller) instead of a hang.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Communicator.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace pipemesh::rt {
namespace {

/// Polls `req` until it completes or `timeout` seconds pass.
void waitFor(MPI_Request &req, double timeout, const std::string &what, int rank) {
  auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(0);
  for (;;) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done)
      return;
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout)
      throw CommError(concat("rank ", rank, ": ", what, " did not complete within ", timeout,
                             " s (--comm-timeout): a peer died or stopped answering"));
    if (sleep.count() == 0)
      sleep = std::chrono::microseconds(1);
    else if (sleep < std::chrono::microseconds(1000))
      sleep *= 2;
    std::this_thread::sleep_for(sleep);
  }
}

class MpiRequest : public CommRequest {
public:
  MpiRequest(double timeout, std::string what, int rank)
      : timeout(timeout), what(std::move(what)), rank(rank) {}
  ~MpiRequest() override {
    if (req != MPI_REQUEST_NULL) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
    }
  }
  void wait() override { waitFor(req, timeout, what, rank); }
  MPI_Request req = MPI_REQUEST_NULL;

private:
  double timeout;
  std::string what;
  int rank;
};

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rankId);
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  }
  int rank() const override { return rankId; }
  int size() const override { return worldSize; }
  std::string name() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, len);
    size_t comma = v.find(',');
    return "mpi (" + v.substr(0, comma) + ")";
  }

  void allreduceSum(double *data, int64_t n, const char *what) override {
    if (worldSize == 1)
      return;
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
    waitFor(req, timeoutSeconds, std::string("all-reduce of the ") + what, rankId);
  }
  void barrier(const char *what) override {
    if (worldSize == 1)
      return;
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    waitFor(req, timeoutSeconds, std::string("barrier (") + what + ")", rankId);
  }
  template <typename T>
  std::vector<T> gatherImpl(const T *data, int64_t n, MPI_Datatype type, const char *what) {
    std::vector<T> out(rankId == 0 ? (size_t)(n * worldSize) : 0);
    if (worldSize == 1) {
      out.assign(data, data + n);
      return out;
    }
    MPI_Request req;
    MPI_Igather(data, (int)n, type, out.data(), (int)n, type, 0, MPI_COMM_WORLD, &req);
    waitFor(req, timeoutSeconds, std::string("gather of the ") + what, rankId);
    return out;
  }
  std::vector<double> gather(const double *data, int64_t n, const char *what) override {
    return gatherImpl(data, n, MPI_DOUBLE, what);
  }
  std::vector<uint64_t> gather(const uint64_t *data, int64_t n, const char *what) override {
    return gatherImpl(data, n, MPI_UINT64_T, what);
  }
  bool allOk(bool ok, const char *what) override {
    if (worldSize == 1)
      return ok;
    int v = ok ? 1 : 0;
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
    waitFor(req, timeoutSeconds, std::string("agreement on ") + what, rankId);
    return v == 1;
  }

  std::unique_ptr<CommRequest> isend(const void *data, uint64_t bytes, int peer, int tag,
                                     const std::string &what) override {
    auto r = std::make_unique<MpiRequest>(timeoutSeconds,
                                          concat("send of ", what, " to rank ", peer), rankId);
    MPI_Isend(data, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r->req);
    return r;
  }
  std::unique_ptr<CommRequest> irecv(void *data, uint64_t bytes, int peer, int tag,
                                     const std::string &what) override {
    auto r = std::make_unique<MpiRequest>(timeoutSeconds,
                                          concat("receive of ", what, " from rank ", peer), rankId);
    MPI_Irecv(data, (int)bytes, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r->req);
    return r;
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

private:
  int rankId = 0, worldSize = 1;
};

} // namespace

std::unique_ptr<Communicator> createMpiCommunicator(int *argc, char ***argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  return std::make_unique<MpiCommunicator>();
}

void finalizeMpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Finalize();
}

} // namespace pipemesh::rt
