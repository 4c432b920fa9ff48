//===- DeadlockCheckTest.cpp - simulating per-rank programs ----------------===//
#include "pipemesh/Plan/DeadlockCheck.h"

#include <gtest/gtest.h>

using namespace pipemesh::plan;

namespace {
RankProgram rank(int64_t r, std::vector<CommOp> ops,
                 std::map<std::string, std::vector<int64_t>> groups = {}) {
  RankProgram p;
  p.rank = r;
  p.ops = std::move(ops);
  p.groups = std::move(groups);
  return p;
}
bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}
} // namespace

TEST(DeadlockCheck, ExchangeWithNonBlockingSendsPasses) {
  // Both ranks send first, then receive: fine, sends never block.
  std::vector<RankProgram> p = {
      rank(0, {CommOp::send(1, 7, 16), CommOp::recv(1, 8, 16), CommOp::waitSends()}),
      rank(1, {CommOp::send(0, 8, 16), CommOp::recv(0, 7, 16), CommOp::waitSends()})};
  EXPECT_EQ(findDeadlock(p), "");
}

TEST(DeadlockCheck, ReceivesMatchByTagNotOrder) {
  // MPI matches (source, tag): two queued sends may be received in either
  // order.
  std::vector<RankProgram> p = {
      rank(0, {CommOp::send(1, 1, 4), CommOp::send(1, 2, 4)}),
      rank(1, {CommOp::recv(0, 2, 4), CommOp::recv(0, 1, 4)})};
  EXPECT_EQ(findDeadlock(p), "");
}

TEST(DeadlockCheck, RecvBeforeTheSendItDependsOnDeadlocks) {
  std::vector<RankProgram> p = {
      rank(0, {CommOp::recv(1, 2, 4), CommOp::compute(), CommOp::send(1, 1, 4)}),
      rank(1, {CommOp::recv(0, 1, 4), CommOp::compute(), CommOp::send(0, 2, 4)})};
  std::string why = findDeadlock(p);
  EXPECT_TRUE(contains(why, "deadlock: no rank can proceed")) << why;
  EXPECT_TRUE(contains(why, "rank 0 instruction 0 (recv from rank 1 tag 2) waits for rank 1 to "
                            "send tag 2"))
      << why;
  EXPECT_TRUE(contains(why, "rank 1 instruction 0 (recv from rank 0 tag 1) waits for rank 0 to "
                            "send tag 1"))
      << why;
}

TEST(DeadlockCheck, SendNeverReceived) {
  std::vector<RankProgram> p = {rank(0, {CommOp::compute(), CommOp::send(1, 3, 4)}),
                                rank(1, {CommOp::compute()})};
  EXPECT_EQ(findDeadlock(p),
            "rank 0 instruction 1 sends tag 3 to rank 1, which never receives it");
}

TEST(DeadlockCheck, SizeMismatch) {
  std::vector<RankProgram> p = {rank(0, {CommOp::send(1, 3, 8)}),
                                rank(1, {CommOp::recv(0, 3, 4)})};
  EXPECT_EQ(findDeadlock(p), "rank 1 instruction 0 receives 4 bytes with tag 3 from rank 0, which "
                             "sends 8 bytes (its instruction 0)");
}

TEST(DeadlockCheck, WaitSendsBlocksUntilReceived) {
  // Rank 1 waits for its send to be received before receiving rank 0's, and
  // rank 0 waits the same way: each wait_sends needs the other's recv.
  std::vector<RankProgram> p = {
      rank(0, {CommOp::send(1, 1, 4), CommOp::waitSends(), CommOp::recv(1, 2, 4)}),
      rank(1, {CommOp::send(0, 2, 4), CommOp::waitSends(), CommOp::recv(0, 1, 4)})};
  std::string why = findDeadlock(p);
  EXPECT_TRUE(contains(why, "rank 0 instruction 1 (wait_sends) waits for its sends to be "
                            "received: tag 1 to rank 1 (instruction 0)"))
      << why;
  // Receiving first is fine.
  p[1].ops = {CommOp::send(0, 2, 4), CommOp::recv(0, 1, 4), CommOp::waitSends()};
  EXPECT_EQ(findDeadlock(p), "");
}

TEST(DeadlockCheck, CollectivesWaitForEveryMember) {
  std::map<std::string, std::vector<int64_t>> dp = {{"dp", {0, 1}}};
  std::vector<RankProgram> p = {
      rank(0, {CommOp::collective("dp", "allreduce of 64 bytes")}, dp),
      rank(1, {CommOp::compute(), CommOp::collective("dp", "allreduce of 64 bytes")}, dp)};
  EXPECT_EQ(findDeadlock(p), "");
  p[1].ops = {CommOp::compute()};
  std::string why = findDeadlock(p);
  EXPECT_TRUE(contains(why, "rank 0 instruction 0 (allreduce of 64 bytes on group dp) waits for "
                            "ranks [1] of group dp [0, 1]"))
      << why;
}

TEST(DeadlockCheck, CollectiveMismatch) {
  std::map<std::string, std::vector<int64_t>> dp = {{"dp", {0, 1}}};
  std::vector<RankProgram> p = {rank(0, {CommOp::collective("dp", "allreduce of 64 bytes")}, dp),
                                rank(1, {CommOp::collective("dp", "allreduce of 32 bytes")}, dp)};
  std::string why = findDeadlock(p);
  EXPECT_TRUE(contains(why, "runs allreduce of") && contains(why, "while rank")) << why;
}

TEST(DeadlockCheck, GroupsMustAgree) {
  std::vector<RankProgram> p = {rank(0, {}, {{"tied", {0, 1}}}), rank(1, {}, {{"tied", {1}}})};
  EXPECT_EQ(findDeadlock(p), "rank 0's group 'tied' is [0, 1] but rank 1's is [1]");
}

TEST(DeadlockCheck, SwappedRecvsInAManifest) {
  // A hand-written two-rank plan: rank 1 swaps the order of its two receives
  // relative to the sends they depend on.
  const char *good = R"({"ranks": [
    {"rank": 0, "groups": {"dp": [0], "tied": []},
     "buffers": [{"id": 0, "bytes": 16}, {"id": 1, "bytes": 16}],
     "program": [{"op": "matmul", "in": [0], "out": [1]},
                 {"op": "send", "in": [1], "peer": 1, "tag": 0},
                 {"op": "recv", "out": [0], "peer": 1, "tag": 2},
                 {"op": "send", "in": [0], "peer": 1, "tag": 1},
                 {"op": "wait_sends"}]},
    {"rank": 1, "groups": {"dp": [1], "tied": []},
     "buffers": [{"id": 0, "bytes": 16}, {"id": 1, "bytes": 16}],
     "program": [{"op": "recv", "out": [0], "peer": 0, "tag": 0},
                 {"op": "send", "in": [0], "peer": 0, "tag": 2},
                 {"op": "recv", "out": [1], "peer": 0, "tag": 1},
                 {"op": "wait_sends"}]}]})";
  auto parsed = llvm::json::parse(good);
  ASSERT_TRUE((bool)parsed) << llvm::toString(parsed.takeError());
  EXPECT_EQ(checkPlanDeadlock(*parsed->getAsObject()), "");

  std::string bad = good;
  // Rank 1 now first waits for tag 1, which rank 0 sends only after tag 2.
  bad.replace(bad.find(R"("out": [0], "peer": 0, "tag": 0)"), 31,
              R"("out": [0], "peer": 0, "tag": 1)");
  bad.replace(bad.find(R"("out": [1], "peer": 0, "tag": 1)"), 31,
              R"("out": [1], "peer": 0, "tag": 0)");
  auto broken = llvm::json::parse(bad);
  ASSERT_TRUE((bool)broken) << llvm::toString(broken.takeError());
  std::string why = checkPlanDeadlock(*broken->getAsObject());
  EXPECT_TRUE(contains(why, "rank 1 instruction 0 (recv from rank 0 tag 1) waits for rank 0 to "
                            "send tag 1"))
      << why;
  EXPECT_TRUE(contains(why, "rank 0 instruction 2 (recv from rank 1 tag 2)")) << why;
}
