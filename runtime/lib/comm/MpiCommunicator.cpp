//===- MpiCommunicator.cpp - the MPI communication backend ----------------===//
//
// Every operation is non-blocking (MPI_Isend/Irecv, MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather, ...) and completed by polling
// MPI_Test against a deadline, so that a dead or stuck peer turns into a
// CommError (and an MPI_Abort of the job by the caller) instead of a hang.
// The communicators use MPI_ERRORS_RETURN: an MPI failure (a truncated
// message, a broken connection) is a CommError naming the operation too.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Bf16.h"
#include "pipemesh/runtime/Communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <limits>
#include <cstdlib>
#include <sched.h>
#include <thread>

namespace pipemesh::rt {

const char *groupName(Group g) { return g == Group::Dp ? "dp" : "tied"; }

namespace {

/// Largest message piece: counts are ints in MPI.
constexpr uint64_t kMaxPiece = 1ull << 30;

std::string mpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    return concat("MPI error ", rc);
  return std::string(text, len);
}

void check(int rc, const std::string &what) {
  if (rc != MPI_SUCCESS)
    throw CommError(concat(what, " failed: ", mpiError(rc)));
}

/// Paces a polling loop: for the first millisecond it yields the CPU between
/// polls (a short wait — a collective's next round, a message in flight —
/// ends soonest, and an oversubscribed peer still gets the core), then it
/// sleeps 50 .. 200 us between polls (a long wait: a peer still computing).
class Poller {
public:
  explicit Poller(double timeout) : timeout(timeout), start(std::chrono::steady_clock::now()) {}
  /// False once the deadline has passed.
  bool again() {
    double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout)
      return false;
    if (waited < 1e-3) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(sleep);
      if (sleep < std::chrono::microseconds(200))
        sleep *= 2;
    }
    return true;
  }
  double timeout;

private:
  std::chrono::steady_clock::time_point start;
  std::chrono::microseconds sleep{50};
};

std::string deadlineMessage(const std::string &what, double timeout, const std::string &hint) {
  return concat(what, " did not complete within ", timeout, " s (--comm-timeout): ", hint);
}

/// Waits for one collective request.
void waitFor(MPI_Request &req, double timeout, const std::string &what) {
  Poller poll(timeout);
  for (;;) {
    int done = 0;
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done)
      return;
    if (!poll.again())
      throw CommError(deadlineMessage(what, timeout,
                                      "a rank of the group died or stopped answering"));
  }
}

/// A transfer split in pieces of at most kMaxPiece bytes (MPI's non-overtaking
/// rule keeps them in order for one sender, receiver and tag).
class MpiRequest : public CommRequest {
public:
  MpiRequest(double timeout, std::string what, int peer, bool recv)
      : timeout(timeout), whatText(std::move(what)), peer(peer), recv(recv) {}
  ~MpiRequest() override {
    for (MPI_Request &r : reqs)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
  }
  const std::string &what() const override { return whatText; }

  bool test() override {
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      MPI_Status st;
      check(MPI_Test(&reqs[i], &done, &st), whatText);
      if (!done)
        return false;
      if (recv) {
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        if ((uint64_t)count != sizes[i])
          throw CommError(concat(whatText, ": received ", count, " bytes in piece ", i,
                                 ", expected ", sizes[i],
                                 " (the sender's buffer has another size)"));
      }
    }
    return true;
  }

  void wait() override {
    Poller poll(timeout);
    while (!test())
      if (!poll.again())
        throw CommError(deadlineMessage(
            whatText, timeout,
            concat("rank ", peer, recv ? " died, stopped answering or never sends it"
                                       : " died, stopped answering or never receives it")));
  }

  std::vector<MPI_Request> reqs;
  std::vector<uint64_t> sizes;

private:
  double timeout;
  std::string whatText;
  int peer;
  bool recv;
};

/// MPI_Op for sums of bf16 values (as uint16): in f32, rounded per addition.
void bf16Sum(void *in, void *inout, int *len, MPI_Datatype *) {
  const auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = floatToBf16(bf16ToFloat(a[i]) + bf16ToFloat(b[i]));
}

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rankId);
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int *ub = nullptr, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    tagUb = flag && ub ? *ub : 32767;
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
      return;
    for (MPI_Comm *c : {&dpComm, &tiedComm, &dpIntra, &dpInter})
      if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
    if (bf16SumOp != MPI_OP_NULL)
      MPI_Op_free(&bf16SumOp);
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

  // --- world collectives -----------------------------------------------------
  void allreduceSum(double *data, int64_t n, const char *what) override {
    if (worldSize == 1)
      return;
    std::string w = std::string("all-reduce of the ") + what;
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req), w);
    waitFor(req, timeoutSeconds, w);
  }
  void barrier(const char *what) override {
    if (worldSize == 1)
      return;
    std::string w = std::string("barrier (") + what + ")";
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), w);
    waitFor(req, timeoutSeconds, w);
  }
  template <typename T>
  std::vector<T> gatherImpl(const T *data, int64_t n, MPI_Datatype type, const char *what) {
    std::vector<T> out(rankId == 0 ? (size_t)(n * worldSize) : 0);
    if (worldSize == 1) {
      out.assign(data, data + n);
      return out;
    }
    std::string w = std::string("gather of the ") + what;
    MPI_Request req;
    check(MPI_Igather(data, (int)n, type, out.data(), (int)n, type, 0, MPI_COMM_WORLD, &req), w);
    waitFor(req, timeoutSeconds, w);
    return out;
  }
  std::vector<double> gather(const double *data, int64_t n, const char *what) override {
    return gatherImpl(data, n, MPI_DOUBLE, what);
  }
  std::vector<uint64_t> gather(const uint64_t *data, int64_t n, const char *what) override {
    return gatherImpl(data, n, MPI_UINT64_T, what);
  }
  std::vector<std::string> gatherText(const std::string &mine, const char *what) override {
    if (worldSize == 1)
      return {mine};
    if (mine.size() > (size_t)std::numeric_limits<int>::max())
      throw CommError(concat("gather of the ", what, ": ", mine.size(), " bytes on rank ", rankId,
                             " (MPI counts are int)"));
    const int n = (int)mine.size();
    std::vector<int> sizes(rankId == 0 ? (size_t)worldSize : 0), at;
    std::string w = std::string("gather of the ") + what;
    MPI_Request req;
    check(MPI_Igather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &req), w);
    waitFor(req, timeoutSeconds, w);
    std::string all;
    if (rankId == 0) {
      int64_t total = 0;
      for (int s : sizes) {
        at.push_back((int)total);
        total += s;
      }
      if (total > std::numeric_limits<int>::max())
        throw CommError(
            concat("gather of the ", what, ": ", total, " bytes in all (MPI counts are int)"));
      all.resize((size_t)total);
    }
    check(MPI_Igatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), at.data(), MPI_CHAR, 0,
                       MPI_COMM_WORLD, &req),
          w);
    waitFor(req, timeoutSeconds, w);
    std::vector<std::string> out;
    for (size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr((size_t)at[r], (size_t)sizes[r]));
    return out;
  }
  bool allOk(bool ok, const char *what) override {
    if (worldSize == 1)
      return ok;
    std::string w = std::string("agreement on ") + what;
    int v = ok ? 1 : 0;
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req), w);
    waitFor(req, timeoutSeconds, w);
    return v == 1;
  }

  // --- point-to-point ----------------------------------------------------------
  std::unique_ptr<CommRequest> isend(const void *data, uint64_t bytes, int peer, int tag,
                                     const std::string &what) override {
    auto r = std::make_unique<MpiRequest>(timeoutSeconds, what, peer, false);
    const char *p = static_cast<const char *>(data);
    uint64_t off = 0;
    do {
      uint64_t n = std::min(bytes - off, kMaxPiece);
      r->reqs.push_back(MPI_REQUEST_NULL);
      r->sizes.push_back(n);
      check(MPI_Isend(p + off, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r->reqs.back()), what);
      off += n;
    } while (off < bytes);
    return r;
  }
  std::unique_ptr<CommRequest> irecv(void *data, uint64_t bytes, int peer, int tag,
                                     const std::string &what) override {
    auto r = std::make_unique<MpiRequest>(timeoutSeconds, what, peer, true);
    char *p = static_cast<char *>(data);
    uint64_t off = 0;
    do {
      uint64_t n = std::min(bytes - off, kMaxPiece);
      r->reqs.push_back(MPI_REQUEST_NULL);
      r->sizes.push_back(n);
      check(MPI_Irecv(p + off, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r->reqs.back()), what);
      off += n;
    } while (off < bytes);
    return r;
  }
  int maxTag() const override { return tagUb; }

  void warmUpPeers(const std::vector<int64_t> &peers) override {
    std::vector<std::unique_ptr<CommRequest>> reqs;
    std::vector<char> in(peers.size()), out(peers.size(), 1);
    for (size_t i = 0; i < peers.size(); ++i) {
      int peer = (int)peers[i];
      reqs.push_back(irecv(&in[i], 1, peer, tagUb,
                           concat("warm-up exchange with rank ", peer, " (receive)")));
      reqs.push_back(isend(&out[i], 1, peer, tagUb,
                           concat("warm-up exchange with rank ", peer, " (send)")));
    }
    for (auto &r : reqs)
      r->wait();
  }

  // --- groups ----------------------------------------------------------------------
  void setupGroups(const std::vector<int64_t> &dp, const std::vector<int64_t> &tied,
                   bool hierarchicalDp) override {
    // Every rank must get here before the (blocking) splits: the agreement
    // is bounded, so a rank that never arrives ends the job at the deadline.
    if (!allOk(true, "communicator setup"))
      throw CommError("another rank failed before the communicator setup");
    split(dp, dpComm, dpSize, dpRank, "dp");
    split(tied, tiedComm, tiedSize, tiedRank, "tied");
    if (hierarchicalDp)
      setupDpHierarchy(dp);
    for (Group g : {Group::Dp, Group::Tied})
      if (groupSize(g) > 0) {
        float x = 1;
        groupAllreduce(g, &x, 1, concat("warm-up all-reduce on the ", groupName(g), " group"));
        if (x != (float)groupSize(g))
          throw CommError(concat("the warm-up all-reduce on the ", groupName(g), " group gave ", x,
                                 ", expected ", groupSize(g)));
      }
  }
  std::pair<int, int> dpHierarchy() const override {
    return hier.found ? std::pair<int, int>{hier.nodes, hier.perNode}
                      : std::pair<int, int>{1, dpSize};
  }
  int groupSize(Group g) const override { return g == Group::Dp ? dpSize : tiedSize; }
  int groupRank(Group g) const override { return g == Group::Dp ? dpRank : tiedRank; }

  void groupAllreduce(Group g, float *data, int64_t n, const std::string &what) override {
    allreduce(g, data, n, sizeof(float), MPI_FLOAT, MPI_SUM, what);
  }
  void groupReduceScatter(Group g, const float *in, float *out, int64_t block,
                          const std::string &what) override {
    reduceScatter(g, in, out, block, sizeof(float), MPI_FLOAT, MPI_SUM, what);
  }
  void groupAllreduceBf16(Group g, uint16_t *data, int64_t n, const std::string &what) override {
    allreduce(g, data, n, sizeof(uint16_t), MPI_UINT16_T, bf16Op(what), what);
  }
  void groupReduceScatterBf16(Group g, const uint16_t *in, uint16_t *out, int64_t block,
                              const std::string &what) override {
    reduceScatter(g, in, out, block, sizeof(uint16_t), MPI_UINT16_T, bf16Op(what), what);
  }
  void groupAllgather(Group g, const void *in, void *out, uint64_t blockBytes,
                      const std::string &what) override {
    MPI_Comm c = comm(g, what);
    if (blockBytes > INT_MAX)
      throw CommError(concat(what, ": a shard of ", blockBytes, " bytes exceeds MPI's int count"));
    if (g == Group::Dp && hier.on())
      return hierarchicalAllgather(in, out, blockBytes, what);
    MPI_Request req;
    check(MPI_Iallgather(in, (int)blockBytes, MPI_BYTE, out, (int)blockBytes, MPI_BYTE, c, &req),
          what);
    waitFor(req, timeoutSeconds, what);
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

private:
  void allreduce(Group g, void *data, int64_t n, size_t elemSize, MPI_Datatype type, MPI_Op op,
                 const std::string &what) {
    MPI_Comm c = comm(g, what);
    for (int64_t off = 0; off < n; off += INT_MAX) {
      int k = (int)std::min<int64_t>(n - off, INT_MAX);
      char *piece = static_cast<char *>(data) + off * elemSize;
      if (g == Group::Dp && hier.on()) {
        hierarchicalAllreduce(piece, k, elemSize, type, op, what);
        continue;
      }
      MPI_Request req;
      check(MPI_Iallreduce(MPI_IN_PLACE, piece, k, type, op, c, &req), what);
      waitFor(req, timeoutSeconds, what);
    }
  }
  void reduceScatter(Group g, const void *in, void *out, int64_t block, size_t elemSize,
                     MPI_Datatype type, MPI_Op op, const std::string &what) {
    MPI_Comm c = comm(g, what);
    if (block > INT_MAX)
      throw CommError(concat(what, ": a shard of ", block, " elements exceeds MPI's int count"));
    if (g == Group::Dp && hier.on())
      return hierarchicalReduceScatter(in, out, block, elemSize, type, op, what);
    MPI_Request req;
    check(MPI_Ireduce_scatter_block(in, out, (int)block, type, op, c, &req), what);
    waitFor(req, timeoutSeconds, what);
  }

  // --- hierarchical dp collectives ---------------------------------------------
  // The dp group's members sit on `nodes` nodes, `perNode` on each: member r
  // at node(r), place(r) (its order among its node's members). dpIntra joins
  // a node's members (ordered by place), dpInter the members at one place on
  // every node (ordered by node). A reduce-scatter first sums within the
  // node, each member a `nodes`-chunk slab, then between the nodes, so that
  // only 1/perNode of the buffer leaves each member's node and, with one
  // network link per node, (nodes - 1) / nodes of it crosses that link,
  // against a flat ring's (n - 1) / n. Group rank r's chunk is put in slot
  // place(r) * nodes + node(r) first, so the shards are the flat ones.

  /// Which nodes the dp members are on (collective over the world, every
  /// rank calls it), the evenness check, and the two communicators.
  void setupDpHierarchy(const std::vector<int64_t> &dp) {
    std::vector<int> nodeOf(worldSize);
    const std::string w = "finding the nodes for dp-collectives=hierarchical";
    if (ranksPerNode > 0) {
      for (int r = 0; r < worldSize; ++r)
        nodeOf[r] = (int)(r / ranksPerNode);
    } else {
      // A node is named by its lowest world rank.
      MPI_Comm shared;
      check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rankId, MPI_INFO_NULL,
                                &shared),
            w);
      int leader = rankId;
      MPI_Request req;
      check(MPI_Iallreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, shared, &req), w);
      waitFor(req, timeoutSeconds, w);
      MPI_Comm_free(&shared);
      check(MPI_Iallgather(&leader, 1, MPI_INT, nodeOf.data(), 1, MPI_INT, MPI_COMM_WORLD, &req),
            w);
      waitFor(req, timeoutSeconds, w);
    }
    if (dpComm == MPI_COMM_NULL)
      return;
    std::vector<int> nodes, count; // nodes in order of first member
    std::vector<int64_t> firstMember;
    hier.node.assign(dp.size(), 0);
    hier.place.assign(dp.size(), 0);
    for (size_t i = 0; i < dp.size(); ++i) {
      int n = nodeOf[dp[i]];
      size_t at = std::find(nodes.begin(), nodes.end(), n) - nodes.begin();
      if (at == nodes.size()) {
        nodes.push_back(n);
        count.push_back(0);
        firstMember.push_back(dp[i]);
      }
      hier.node[i] = (int)at;
      hier.place[i] = count[at]++;
    }
    if (std::any_of(count.begin(), count.end(), [&](int n) { return n != count.front(); })) {
      std::string spread;
      for (size_t j = 0; j < nodes.size(); ++j)
        spread += concat(j ? ", " : "", count[j], " on the node of rank ", firstMember[j]);
      throw CommError(concat(
          "dp-collectives=hierarchical needs the same number of the dp group's ranks on every "
          "node; the group of ranks ",
          dp.front(), "..", dp.back(), " has ", spread, " (nodes: ",
          ranksPerNode > 0 ? concat("--ranks-per-node ", ranksPerNode)
                           : std::string("the ranks that share memory"),
          ")"));
    }
    hier.nodes = (int)nodes.size();
    hier.perNode = count.front();
    hier.found = true;
    // One node, or one member per node: the flat collective is the same.
    if (hier.nodes == 1 || hier.perNode == 1)
      return;
    check(MPI_Comm_split(dpComm, hier.node[dpRank], hier.place[dpRank], &dpIntra),
          "creating the dp group's within-node communicator");
    check(MPI_Comm_split(dpComm, hier.place[dpRank], hier.node[dpRank], &dpInter),
          "creating the dp group's between-node communicator");
    for (MPI_Comm c : {dpIntra, dpInter})
      MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  }
  size_t slot(size_t r) const { return (size_t)hier.place[r] * hier.nodes + hier.node[r]; }

  void hierarchicalReduceScatter(const void *in, void *out, int64_t block, size_t elemSize,
                                 MPI_Datatype type, MPI_Op op, const std::string &what) {
    const size_t chunk = (size_t)block * elemSize;
    if ((int64_t)hier.nodes * block > INT_MAX)
      throw CommError(concat(what, ": ", hier.nodes, " shards of ", block,
                             " elements exceed MPI's int count"));
    hier.scratch.resize(chunk * dpSize);
    for (size_t r = 0; r < (size_t)dpSize; ++r)
      std::memcpy(hier.scratch.data() + slot(r) * chunk, static_cast<const char *>(in) + r * chunk,
                  chunk);
    hier.slab.resize(chunk * hier.nodes);
    MPI_Request req;
    const std::string within = what + " (within the node)", between = what + " (between nodes)";
    check(MPI_Ireduce_scatter_block(hier.scratch.data(), hier.slab.data(),
                                    (int)(hier.nodes * block), type, op, dpIntra, &req),
          within);
    waitFor(req, timeoutSeconds, within);
    check(MPI_Ireduce_scatter_block(hier.slab.data(), out, (int)block, type, op, dpInter, &req),
          between);
    waitFor(req, timeoutSeconds, between);
  }

  void hierarchicalAllgather(const void *in, void *out, uint64_t blockBytes,
                             const std::string &what) {
    if ((uint64_t)hier.nodes * blockBytes > INT_MAX)
      throw CommError(concat(what, ": ", hier.nodes, " shards of ", blockBytes,
                             " bytes exceed MPI's int count"));
    hier.slab.resize(blockBytes * hier.nodes);
    hier.scratch.resize(blockBytes * dpSize);
    MPI_Request req;
    const std::string within = what + " (within the node)", between = what + " (between nodes)";
    check(MPI_Iallgather(in, (int)blockBytes, MPI_BYTE, hier.slab.data(), (int)blockBytes,
                         MPI_BYTE, dpInter, &req),
          between);
    waitFor(req, timeoutSeconds, between);
    const int slabBytes = (int)(blockBytes * hier.nodes);
    check(MPI_Iallgather(hier.slab.data(), slabBytes, MPI_BYTE, hier.scratch.data(), slabBytes,
                         MPI_BYTE, dpIntra, &req),
          within);
    waitFor(req, timeoutSeconds, within);
    for (size_t r = 0; r < (size_t)dpSize; ++r)
      std::memcpy(static_cast<char *>(out) + r * blockBytes,
                  hier.scratch.data() + slot(r) * blockBytes, blockBytes);
  }

  /// In place over `n` elements: each member of a node sums one part of them
  /// within the node, all-reduces it with the members at its place on the
  /// other nodes, and the node gathers the parts back.
  void hierarchicalAllreduce(char *data, int n, size_t elemSize, MPI_Datatype type, MPI_Op op,
                             const std::string &what) {
    const int g = hier.perNode, me = hier.place[dpRank];
    std::vector<int> counts(g), displs(g);
    for (int l = 0, at = 0; l < g; ++l) {
      counts[l] = n / g + (l < n % g);
      displs[l] = at;
      at += counts[l];
    }
    hier.slab.resize((size_t)counts[0] * elemSize);
    MPI_Request req;
    const std::string within = what + " (within the node)", between = what + " (between nodes)";
    check(MPI_Ireduce_scatter(data, hier.slab.data(), counts.data(), type, op, dpIntra, &req),
          within);
    waitFor(req, timeoutSeconds, within);
    check(MPI_Iallreduce(MPI_IN_PLACE, hier.slab.data(), counts[me], type, op, dpInter, &req),
          between);
    waitFor(req, timeoutSeconds, between);
    check(MPI_Iallgatherv(hier.slab.data(), counts[me], type, data, counts.data(), displs.data(),
                          type, dpIntra, &req),
          within);
    waitFor(req, timeoutSeconds, within);
  }

  struct Hierarchy {
    bool found = false; ///< nodes and perNode describe the dp group
    int nodes = 1, perNode = 1;
    /// The dp collectives run hierarchically (the two communicators exist).
    bool on() const { return found && nodes > 1 && perNode > 1; }
    std::vector<int> node, place; // per dp group rank
    /// Staging outside the arena: the permuted buffer and one member's slab.
    std::vector<char> scratch, slab;
  } hier;
  MPI_Op bf16Op(const std::string &what) {
    if (bf16SumOp == MPI_OP_NULL)
      check(MPI_Op_create(bf16Sum, /*commute=*/1, &bf16SumOp), what);
    return bf16SumOp;
  }
  MPI_Op bf16SumOp = MPI_OP_NULL;

  MPI_Comm comm(Group g, const std::string &what) const {
    MPI_Comm c = g == Group::Dp ? dpComm : tiedComm;
    if (c == MPI_COMM_NULL)
      throw CommError(concat(what, ": this rank is in no ", groupName(g), " group"));
    return c;
  }
  void split(const std::vector<int64_t> &members, MPI_Comm &c, int &size, int &pos,
             const char *name) {
    // Members list the same group in the same order: its first member is a
    // color every member agrees on, the position orders the new ranks.
    int color = MPI_UNDEFINED, key = 0;
    if (!members.empty()) {
      color = (int)members[0];
      key = (int)(std::find(members.begin(), members.end(), rankId) - members.begin());
    }
    std::string w = concat("creating the ", name, " communicator");
    check(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c), w);
    size = pos = 0;
    if (c == MPI_COMM_NULL)
      return;
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Comm_size(c, &size);
    MPI_Comm_rank(c, &pos);
    if (size != (int)members.size() || pos != key)
      throw CommError(concat(w, ": got ", size, " members (position ", pos, "), the plan lists ",
                             members.size(), " (position ", key, ")"));
  }

  int rankId = 0, worldSize = 1, tagUb = 32767;
  MPI_Comm dpComm = MPI_COMM_NULL, tiedComm = MPI_COMM_NULL;
  MPI_Comm dpIntra = MPI_COMM_NULL, dpInter = MPI_COMM_NULL;
  int dpSize = 0, dpRank = 0, tiedSize = 0, tiedRank = 0;
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
