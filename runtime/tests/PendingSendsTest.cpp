//===- PendingSendsTest.cpp - wait_sends "keep" counts posted sends -------===//
#include "pipemesh/runtime/PendingSends.h"

#include <gtest/gtest.h>

using namespace pipemesh::rt;

namespace {

/// What the test sees of a send: PendingSends destroys the request once it
/// has waited for it, so the outcome lives with the test.
struct SendState {
  bool done = false, waited = false;
};

/// A send that the test completes: test() reports `done`, wait() records
/// that the executor waited for it.
struct FakeSend : CommRequest {
  FakeSend(std::string name, SendState &state) : name(std::move(name)), state(state) {}
  void wait() override { state.waited = state.done = true; }
  bool test() override { return state.done; }
  const std::string &what() const override { return name; }
  std::string name;
  SendState &state;
};

void post(PendingSends &p, const char *name, SendState &state) {
  p.post(std::make_unique<FakeSend>(name, state));
}

} // namespace

// Sends to two peers: the newest completes first and is dropped between
// instructions. "keep 1" still means every send but the newest posted, so
// both older ones are waited for (counting what is left in flight instead
// left the second one outstanding while the plan reused its buffer: the
// corrupted activations pp=4 dp=2 bfs plans trained over Open MPI's shared
// memory transport, found by scripts/fuzz-parallel.py).
TEST(PendingSends, KeepCountsPostedSendsNotTheOnesInFlight) {
  SendState a, b, c; // outlive p, whose destructor may still wait
  PendingSends p;
  post(p, "a", a);
  post(p, "b", b);
  post(p, "c", c);
  c.done = true;
  p.progress();
  p.waitAllBut(1);
  EXPECT_TRUE(a.waited);
  EXPECT_TRUE(b.waited);
  EXPECT_TRUE(p.empty());
}

TEST(PendingSends, KeptSendsStayInFlightUntilAWaitCoversThem) {
  SendState a, b, c; // outlive p, whose destructor may still wait
  PendingSends p;
  post(p, "a", a);
  post(p, "b", b);
  p.waitAllBut(2);
  EXPECT_FALSE(a.waited || b.waited);
  post(p, "c", c);
  p.waitAllBut(2); // all but b and c
  EXPECT_TRUE(a.waited);
  EXPECT_FALSE(b.waited || c.waited);
  p.waitAllBut(0);
  EXPECT_TRUE(b.waited && c.waited);
  EXPECT_TRUE(p.empty());
}

// An evaluation leaves out a stale send (a backward's): it still counts as
// posted, so "keep 2" after a, (skipped), b completes a, as in a step where the
// middle send is real; not counting it would leave a in flight.
TEST(PendingSends, ASkippedSendCountsAsPosted) {
  SendState a, b; // outlive p, whose destructor may still wait
  PendingSends p;
  post(p, "a", a);
  p.postSkipped();
  post(p, "b", b);
  p.waitAllBut(2);
  EXPECT_TRUE(a.waited);
  EXPECT_FALSE(b.waited);
}
