//===- EvaluationTest.cpp - which instructions an evaluation skips ----------===//
//
// evaluationSkips() on programs written here: what it skips, and the plans it
// refuses (a forward reading a backward value on its own rank or through a
// pipeline message, a training step reading what an evaluation left stale).
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Evaluation.h"

#include <gtest/gtest.h>

#include <string>

namespace pipemesh::rt {
namespace {

/// A rank program written op by op: every buffer an f32 [4] of its kind.
struct ProgramBuilder {
  RankPlan r;
  explicit ProgramBuilder(int64_t rank) { r.rank = rank; }
  int64_t buffer(const std::string &name, BufferKind kind = BufferKind::Activation) {
    BufferInfo b;
    b.id = (int64_t)r.buffers.size();
    b.name = name;
    b.shape = {4};
    b.numel = 4;
    b.bytes = 16;
    b.offset = 64 * (uint64_t)b.id;
    b.kind = kind;
    r.buffers.push_back(b);
    return b.id;
  }
  ProgramBuilder &op(const std::string &name, std::vector<int64_t> in, std::vector<int64_t> out,
                     nlohmann::json fields = nlohmann::json::object()) {
    Instruction i;
    i.index = r.program.size();
    i.op = name;
    i.in = std::move(in);
    i.out = std::move(out);
    i.json = std::move(fields);
    i.json["op"] = name;
    r.program.push_back(std::move(i));
    return *this;
  }
};

nlohmann::json action(const std::string &a) { return {{"action", a}}; }

Plan planOf(std::vector<ProgramBuilder> ranks) {
  Plan p;
  p.path = "test.plan";
  p.parallel.pp = (int64_t)ranks.size();
  p.parallel.dp = 1;
  p.parallel.worldSize = (int64_t)ranks.size();
  for (ProgramBuilder &b : ranks) {
    b.r.indexBuffers();
    p.listed.push_back(std::move(b.r));
  }
  return p;
}

/// One rank: zero the gradient, forward, loss, backward into the gradient, update.
ProgramBuilder oneRank(bool zeroFirst = true) {
  ProgramBuilder b(0);
  int64_t x = b.buffer("x"), y = b.buffer("y"), w = b.buffer("w", BufferKind::Param);
  int64_t g = b.buffer("w.grad", BufferKind::Grad), dy = b.buffer("dy");
  if (zeroFirst)
    b.op("zero", {}, {g});
  b.op("matmul", {x, w}, {y}, action("0F0"))
      .op("loss", {y}, {}, action("0F0"))
      .op("gelu_grad", {y, x}, {dy}, action("0B0"))
      .op("accumulate", {dy}, {g}, action("0B0"))
      .op("allreduce", {g}, {g}, {{"group", "dp"}})
      .op("adamw", {}, {});
  return b;
}

std::string refusal(const Plan &p) {
  try {
    evaluationSkips(p, p.listed[0]);
  } catch (const UniformError &e) {
    return e.what();
  }
  return "";
}

TEST(Evaluation, SkipsWhatOnlyTheUpdateNeeds) {
  Plan p = planOf({oneRank()});
  // zero (gradients only), backward kernels and control, the reduction, adamw.
  EXPECT_EQ(evaluationSkips(p, p.listed[0]),
            (std::vector<bool>{true, false, false, true, true, true, true}));
}

TEST(Evaluation, RefusesAForwardReadingABackwardValue) {
  ProgramBuilder b = oneRank();
  b.op("add", {4 /*dy*/, 0}, {1}, action("0F1")).op("loss", {1}, {}, action("0F1"));
  std::string why = refusal(planOf({b}));
  EXPECT_NE(why.find("rank 0, instruction 7 (add, action 0F1)"), std::string::npos) << why;
  EXPECT_NE(why.find("buffer %4 'dy'"), std::string::npos) << why;
  EXPECT_NE(why.find("left by instruction 3 (gelu_grad, action 0B0)"), std::string::npos) << why;
}

TEST(Evaluation, FollowsPipelineMessages) {
  // Rank 0 sends a forward activation (tag 1) and a backward value (tag 2)
  // to rank 1, in that order on their own tags.
  auto pipeline = [](bool forwardReadsTheBackwardMessage) {
    ProgramBuilder a(0);
    int64_t x = a.buffer("x"), y = a.buffer("y"), d = a.buffer("d");
    a.op("gelu", {x}, {y}, action("0F0"))
        .op("send", {y}, {}, {{"peer", 1}, {"tag", 1}})
        .op("gelu_grad", {y, x}, {d}, action("0B0"))
        .op("send", {d}, {}, {{"peer", 1}, {"tag", 2}});
    ProgramBuilder b(1);
    int64_t u = b.buffer("u"), v = b.buffer("v"), l = b.buffer("l");
    b.op("recv", {}, {u}, {{"peer", 0}, {"tag", 1}})
        .op("recv", {}, {v}, {{"peer", 0}, {"tag", 2}})
        .op("gelu", {forwardReadsTheBackwardMessage ? v : u}, {l}, action("1F0"))
        .op("loss", {l}, {}, action("1F0"));
    return planOf({a, b});
  };
  // The backward value's message is stale in every evaluation: left out on
  // both sides.
  Plan good = pipeline(false);
  EXPECT_EQ(evaluationSkips(good, good.listed[0]), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(evaluationSkips(good, good.listed[1]), (std::vector<bool>{false, true, false, false}));
  std::string why = refusal(pipeline(true));
  EXPECT_NE(why.find("rank 1, instruction 2 (gelu, action 1F0)"), std::string::npos) << why;
  EXPECT_NE(why.find("left by instruction 1 (recv)"), std::string::npos) << why;
}

TEST(Evaluation, RefusesWhenATrainingStepWouldReadStaleGradients) {
  // Without the zero at the start, the step after an evaluation would add
  // into the gradients the evaluation did not compute.
  std::string why = refusal(planOf({oneRank(/*zeroFirst=*/false)}));
  EXPECT_NE(why.find("instruction 3 (accumulate, action 0B0) of a training step after one"),
            std::string::npos)
      << why;
}

TEST(Evaluation, NeedsALoss) {
  ProgramBuilder b(0);
  int64_t x = b.buffer("x"), y = b.buffer("y");
  b.op("gelu", {x}, {y}, action("0F0"));
  EXPECT_NE(refusal(planOf({b})).find("no `loss` instruction"), std::string::npos);
}

} // namespace
} // namespace pipemesh::rt
