//===- PartitionTest.cpp - stage balancing, layouts, tied weights, costs ---===//
#include "pipemesh/CostModel/CostModel.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Transforms/Partition.h"
#include "pipemesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

using namespace pipemesh;
using namespace pipemesh::partition;
namespace pm = pipemesh::pmesh;

namespace {

//===----------------------------------------------------------------------===//
// Balance against brute force
//===----------------------------------------------------------------------===//

/// Every composition of L into S positive parts.
void compositions(int64_t L, int64_t S, std::vector<int64_t> &cur,
                  const std::function<void(const std::vector<int64_t> &)> &f) {
  if (S == 1) {
    cur.push_back(L);
    f(cur);
    cur.pop_back();
    return;
  }
  for (int64_t first = 1; first <= L - (S - 1); ++first) {
    cur.push_back(first);
    compositions(L - first, S - 1, cur, f);
    cur.pop_back();
  }
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

/// Checks balance() against every layout: the least largest chunk time, then
/// the least largest memory, then later chunks largest.
void expectOptimal(const Problem &p) {
  std::string why;
  auto got = balance(p, why);
  ASSERT_TRUE(got) << why;
  const int64_t L = p.layerTime.size(), S = p.numChunks;
  ASSERT_EQ((int64_t)got->layersPerChunk.size(), S);
  int64_t sum = 0;
  for (int64_t n : got->layersPerChunk) {
    EXPECT_GE(n, 1);
    sum += n;
  }
  EXPECT_EQ(sum, L);

  std::vector<Layout> all;
  std::vector<int64_t> cur;
  compositions(L, S, cur, [&](const std::vector<int64_t> &c) { all.push_back(evaluate(p, c)); });
  double bestTime = INFINITY;
  for (const Layout &l : all)
    bestTime = std::min(bestTime, l.maxTime);
  double bestMem = INFINITY;
  for (const Layout &l : all)
    if (close(l.maxTime, bestTime) || l.maxTime < bestTime)
      bestMem = std::min(bestMem, l.maxMemory);
  EXPECT_TRUE(close(got->maxTime, bestTime)) << got->maxTime << " vs optimum " << bestTime;
  EXPECT_TRUE(close(got->maxMemory, bestMem)) << got->maxMemory << " vs optimum " << bestMem;
  // Among the optimal layouts, the chosen one has the largest last chunk,
  // then the largest second-to-last, ...
  std::vector<int64_t> want;
  for (const Layout &l : all) {
    if (!close(l.maxTime, bestTime) || !close(l.maxMemory, bestMem))
      continue;
    std::vector<int64_t> rev(l.layersPerChunk.rbegin(), l.layersPerChunk.rend());
    if (want.empty() || rev > want)
      want = rev;
  }
  std::reverse(want.begin(), want.end());
  EXPECT_EQ(got->layersPerChunk, want);
}

TEST(PartitionBalance, OptimalVersusBruteForceOnRandomCosts) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<double> cost(0.1, 10.0);
  for (int trial = 0; trial < 400; ++trial) {
    Problem p;
    int64_t L = 1 + rng() % 9;
    p.numChunks = 1 + rng() % L;
    for (int64_t i = 0; i < L; ++i) {
      p.layerTime.push_back(cost(rng));
      p.layerMemory.push_back(cost(rng));
    }
    if (trial % 2) {
      p.preTime = cost(rng);
      p.postTime = cost(rng) * 2;
      p.preMemory = cost(rng);
      p.postMemory = cost(rng);
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    expectOptimal(p);
  }
}

TEST(PartitionBalance, OptimalWithTies) {
  // Small integer costs: many layouts share the optimum, which exercises the
  // memory and the later-chunks-larger tie-breaks.
  std::mt19937 rng(99);
  for (int trial = 0; trial < 400; ++trial) {
    Problem p;
    int64_t L = 1 + rng() % 9;
    p.numChunks = 1 + rng() % L;
    for (int64_t i = 0; i < L; ++i) {
      p.layerTime.push_back(1 + rng() % 3);
      p.layerMemory.push_back(1 + rng() % 2);
    }
    p.preTime = rng() % 2;
    p.postTime = rng() % 4;
    SCOPED_TRACE("trial " + std::to_string(trial));
    expectOptimal(p);
  }
}

//===----------------------------------------------------------------------===//
// Uneven layouts
//===----------------------------------------------------------------------===//

Problem equalLayers(int64_t L, int64_t S, double pre = 0, double post = 0) {
  Problem p;
  p.numChunks = S;
  p.layerTime.assign(L, 1.0);
  p.layerMemory.assign(L, 1.0);
  p.preTime = pre;
  p.postTime = post;
  return p;
}

std::vector<int64_t> layout(const Problem &p) {
  std::string why;
  auto l = balance(p, why);
  EXPECT_TRUE(l) << why;
  return l ? l->layersPerChunk : std::vector<int64_t>{};
}

TEST(PartitionLayouts, SevenLayersOnThreeStages) {
  // Equal layers, nothing else: the largest chunk has 3; the first stage
  // (most activations in flight under 1F1B) gets the remainder.
  EXPECT_EQ(layout(equalLayers(7, 3)), (std::vector<int64_t>{1, 3, 3}));
  // A head + loss worth 1.5 layers: the last stage takes one layer.
  EXPECT_EQ(layout(equalLayers(7, 3, 0.2, 1.5)), (std::vector<int64_t>{3, 3, 1}));
  // Costs also come out right.
  std::string why;
  auto l = balance(equalLayers(7, 3, 0.2, 1.5), why);
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ(l->chunkTime[0], 3.2);
  EXPECT_DOUBLE_EQ(l->chunkTime[1], 3.0);
  EXPECT_DOUBLE_EQ(l->chunkTime[2], 2.5);
  EXPECT_DOUBLE_EQ(l->maxTime, 3.2);
}

TEST(PartitionLayouts, LayersNotDivisibleByStages) {
  EXPECT_EQ(layout(equalLayers(10, 4)), (std::vector<int64_t>{1, 3, 3, 3}));
  EXPECT_EQ(layout(equalLayers(5, 2)), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(layout(equalLayers(5, 2, 0, 0.5)), (std::vector<int64_t>{3, 2}));
  // A very heavy head: the last stage keeps a single layer; the others tie
  // on time and memory, and the later one takes more.
  EXPECT_EQ(layout(equalLayers(6, 3, 0, 10)), (std::vector<int64_t>{2, 3, 1}));
  // Unequal layers: the cut follows the costs, not the counts.
  Problem p = equalLayers(4, 2);
  p.layerTime = {5, 1, 1, 1};
  EXPECT_EQ(layout(p), (std::vector<int64_t>{1, 3}));
}

TEST(PartitionLayouts, OneStageAndOneLayerPerStage) {
  EXPECT_EQ(layout(equalLayers(7, 1, 1, 1)), (std::vector<int64_t>{7}));
  EXPECT_EQ(layout(equalLayers(4, 4, 1, 1)), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(layout(equalLayers(0, 1)), (std::vector<int64_t>{0}));
}

TEST(PartitionLayouts, MoreStagesThanLayersIsAnError) {
  std::string why;
  EXPECT_FALSE(balance(equalLayers(4, 5), why));
  EXPECT_NE(why.find("stages=5"), std::string::npos) << why;
  EXPECT_NE(why.find("only 4 transformer layers"), std::string::npos) << why;
  EXPECT_FALSE(balance(equalLayers(4, 0), why));
  EXPECT_NE(why.find("at least 1"), std::string::npos) << why;
}

//===----------------------------------------------------------------------===//
// Interleaved stages: ties broken by ranks and rounds
//===----------------------------------------------------------------------===//

/// Every layout of L equal layers into S chunks: at least one layer each,
/// except that the first / last chunk may hold none when it has pre / post.
void interleavedLayouts(const Problem &p, std::vector<int64_t> &cur,
                        const std::function<void(const std::vector<int64_t> &)> &f) {
  const int64_t S = p.numChunks, L = p.layerTime.size();
  int64_t c = cur.size(), used = 0;
  for (int64_t n : cur)
    used += n;
  if (c == S) {
    if (used == L)
      f(cur);
    return;
  }
  int64_t lo = (c == 0 && p.preTime > 0) || (c == S - 1 && p.postTime > 0) ? 0 : 1;
  for (int64_t n = lo; used + n <= L; ++n) {
    cur.push_back(n);
    interleavedLayouts(p, cur, f);
    cur.pop_back();
  }
}

TEST(PartitionInterleaved, OptimalVersusBruteForce) {
  // Equal layers on R ranks x V rounds: balance() keeps the contiguous
  // optimum's two bounds (largest chunk time, then memory, over layouts of
  // at least one layer per chunk) and, within them, no layout beats its
  // interleaved criteria.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Problem p;
    p.numRanks = 2 + rng() % 2;
    p.numChunks = p.numRanks * (2 + rng() % 2);
    int64_t L = p.numChunks + rng() % 7;
    p.layerTime.assign(L, 1.0);
    p.layerMemory.assign(L, 1.0);
    p.layerParams.assign(L, 1.0);
    p.preTime = (rng() % 4) * 0.5;
    p.postTime = (rng() % 5) * 0.5;
    p.preMemory = rng() % 3;
    p.postMemory = rng() % 3;
    p.preParams = rng() % 3;
    p.postParams = rng() % 3;
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::string why;
    auto got = balance(p, why);
    ASSERT_TRUE(got) << why;

    double bestTime = INFINITY, bestMem = INFINITY;
    std::vector<Layout> positive;
    std::vector<int64_t> cur;
    compositions(L, p.numChunks, cur,
                 [&](const std::vector<int64_t> &c) { positive.push_back(evaluate(p, c)); });
    for (const Layout &l : positive)
      bestTime = std::min(bestTime, l.maxTime);
    for (const Layout &l : positive)
      if (close(l.maxTime, bestTime))
        bestMem = std::min(bestMem, l.maxMemory);
    EXPECT_TRUE(got->maxTime <= bestTime * (1 + 1e-9)) << got->maxTime << " vs " << bestTime;
    EXPECT_TRUE(got->maxMemory <= bestMem * (1 + 1e-9)) << got->maxMemory << " vs " << bestMem;

    InterleavedCriteria mine = interleavedCriteria(p, got->layersPerChunk);
    cur.clear();
    interleavedLayouts(p, cur, [&](const std::vector<int64_t> &c) {
      Layout l = evaluate(p, c);
      if (l.maxTime > bestTime * (1 + 1e-9) || l.maxMemory > bestMem * (1 + 1e-9))
        return;
      InterleavedCriteria other = interleavedCriteria(p, c);
      EXPECT_FALSE(interleavedBetter(other, mine))
          << "layout " << ::testing::PrintToString(c) << " beats "
          << ::testing::PrintToString(got->layersPerChunk);
    });
  }
}

TEST(PartitionInterleaved, GptWithAHeavyHead) {
  // GPT 1.3B on 4 ranks x 3 rounds (costs of pmesh-partition on an A100, in
  // layers): the head and the loss weigh 1.78 layers, the tied embedding's
  // parameters 2.1 layers' on the first and the last rank. The contiguous
  // tie-break gave 1,1,1,1,1,3,3,3,3,3,3,1: ranks 1 and 2 with 7 layers and
  // two rounds paced by 3-layer chunks. Here: every rank 7 layers' time or
  // less, the parameters even (5 + embedding, 7, 7, 5 + embedding), rounds of
  // 3, 2 and 2, and the head alone last (the simulated step of 1.3B on 64
  // GPUs falls 6.6%: bench/HISTORY.md, tenth session).
  Problem p;
  p.numChunks = 12;
  p.numRanks = 4;
  p.layerTime.assign(24, 1.0);
  p.layerMemory.assign(24, 1.0);
  p.layerParams.assign(24, 1.0);
  p.preTime = 0.05;
  p.postTime = 1.78;
  p.preMemory = 1.45;
  p.postMemory = 1.73;
  p.preParams = 2.1;
  p.postParams = 2.05;
  EXPECT_EQ(layout(p), (std::vector<int64_t>{1, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 0}));
  // One rank: the contiguous tie-break as before.
  p.numRanks = 1;
  EXPECT_EQ(layout(p), (std::vector<int64_t>{1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 1}));
}

TEST(PartitionInterleaved, UnequalLayersKeepTheContiguousTieBreak) {
  Problem p = equalLayers(8, 4);
  p.numRanks = 2;
  Problem q = p;
  q.numRanks = 1;
  p.layerTime[0] = q.layerTime[0] = 1.5;
  EXPECT_EQ(layout(p), layout(q));
  // Equal layers: 2 each, every criterion even.
  EXPECT_EQ(layout(equalLayers(8, 4)), (std::vector<int64_t>{2, 2, 2, 2}));
}

TEST(PartitionLayouts, ExplicitLayouts) {
  Problem p = equalLayers(7, 3, 0.5, 2);
  std::string why;
  auto l = explicitLayout(p, {2, 3, 2}, why);
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->layersPerChunk, (std::vector<int64_t>{2, 3, 2}));
  EXPECT_DOUBLE_EQ(l->chunkTime[0], 2.5);
  EXPECT_DOUBLE_EQ(l->chunkTime[2], 4.0);
  // First and last stage may be empty of layers.
  EXPECT_TRUE(explicitLayout(p, {0, 5, 2}, why)) << why;
  EXPECT_TRUE(explicitLayout(p, {2, 5, 0}, why)) << why;

  EXPECT_FALSE(explicitLayout(p, {3, 4}, why));
  EXPECT_EQ(why, "layers-per-stage has 2 entries but stages=3");
  EXPECT_FALSE(explicitLayout(p, {3, 3, 3}, why));
  EXPECT_EQ(why, "layers-per-stage sums to 9 but the model has 7 transformer layers");
  EXPECT_FALSE(explicitLayout(p, {4, 4, -1}, why));
  EXPECT_EQ(why, "layers-per-stage gives stage 2 -1 layers; counts must be >= 0");
  EXPECT_FALSE(explicitLayout(p, {3, 0, 4}, why));
  EXPECT_NE(why.find("gives stage 1 no layers"), std::string::npos) << why;
}

TEST(PartitionLayouts, LayerNames) {
  auto check = [](const char *name, const char *key, int64_t index) {
    auto ln = layerOfParam(name);
    ASSERT_TRUE(ln) << name;
    EXPECT_EQ(ln->key, key);
    EXPECT_EQ(ln->index, index);
  };
  check("transformer.h.11.attn.c_attn.weight", "transformer.h.11", 11);
  check("model.layers.3.self_attn.q_proj.weight", "model.layers.3", 3);
  check("blocks.0.w", "blocks.0", 0);
  check("bert.encoder.layer.7.output.dense.bias", "bert.encoder.layer.7", 7);
  // The outermost layer index counts.
  check("model.layers.2.mlp.layers.5.w", "model.layers.2", 2);
  EXPECT_FALSE(layerOfParam("transformer.wte.weight"));
  EXPECT_FALSE(layerOfParam("transformer.ln_f.weight"));
  EXPECT_FALSE(layerOfParam("transformer.h.weight"));
  EXPECT_FALSE(layerOfParam("transformer.h.x1.weight"));
  EXPECT_FALSE(layerOfParam("heads.0.w"));
}

//===----------------------------------------------------------------------===//
// Tied weights through the pass and autodiff
//===----------------------------------------------------------------------===//

/// An embedding tied to the output head through a transpose (weight
/// preprocessing), and a final norm; three layers.
constexpr const char *kTiedModel = R"mlir(
module {
  pmesh.param @wte : tensor<32x8xf32>
  pmesh.param @h.0.w : tensor<8x8xf32>
  pmesh.param @h.1.w : tensor<8x8xf32>
  pmesh.param @h.2.w : tensor<8x8xf32>
  pmesh.param @ln_f.weight : tensor<8xf32>
  func.func @forward(%ids: tensor<2x4xi64>) -> tensor<2x4x32xf32> {
    %wte = pmesh.get_param @wte : tensor<32x8xf32>
    %head = pmesh.transpose %wte perm = [1, 0] : tensor<32x8xf32> -> tensor<8x32xf32>
    %x0 = pmesh.embedding %wte, %ids : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
    %w0 = pmesh.get_param @h.0.w : tensor<8x8xf32>
    %x1 = pmesh.matmul %x0, %w0 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %w1 = pmesh.get_param @h.1.w : tensor<8x8xf32>
    %x2 = pmesh.matmul %x1, %w1 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %w2 = pmesh.get_param @h.2.w : tensor<8x8xf32>
    %x3 = pmesh.matmul %x2, %w2 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %g = pmesh.get_param @ln_f.weight : tensor<8xf32>
    %n = pmesh.layer_norm %x3, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %logits = pmesh.matmul %n, %head : (tensor<2x4x8xf32>, tensor<8x32xf32>) -> tensor<2x4x32xf32>
    return %logits : tensor<2x4x32xf32>
  }
}
)mlir";

struct Fixture {
  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  Fixture(const char *text) {
    ctx.loadDialect<pm::PMeshDialect, mlir::func::FuncDialect>();
    module = mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
  }
  mlir::LogicalResult run(int64_t stages, llvm::ArrayRef<int64_t> layers = {}, bool ad = false) {
    mlir::PassManager pmgr(&ctx);
    PMeshPartitionOptions opts;
    opts.stages = stages;
    opts.layersPerStage = layers;
    pmgr.addPass(createPMeshPartition(opts));
    if (ad)
      pmgr.addPass(createPMeshAutodiff());
    return pmgr.run(*module);
  }
};

int64_t stage(mlir::Operation *op) {
  auto a = op->getAttrOfType<mlir::IntegerAttr>("pmesh.stage");
  EXPECT_TRUE(a) << "op without pmesh.stage";
  return a ? a.getInt() : -1;
}

TEST(PartitionTied, EmbeddingReadOnFirstAndLastStage) {
  Fixture f(kTiedModel);
  ASSERT_TRUE(f.module);
  ASSERT_TRUE(mlir::succeeded(f.run(3)));
  auto fwd = f.module->lookupSymbol<mlir::func::FuncOp>("forward");
  std::map<std::string, std::set<int64_t>> readers;
  for (auto get : fwd.getOps<pm::GetParamOp>()) {
    int64_t s = stage(get);
    EXPECT_TRUE(readers[get.getName().str()].insert(s).second)
        << get.getName().str() << " read twice on stage " << s;
    // Every user of a read (also through the transpose) is on its stage.
    for (mlir::Operation *user : get->getUsers()) {
      EXPECT_EQ(stage(user), s) << get.getName().str();
      if (mlir::isa<pm::TransposeOp>(user)) {
        for (mlir::Operation *u2 : user->getUsers()) {
          EXPECT_EQ(stage(u2), s);
        }
      }
    }
  }
  EXPECT_EQ(readers["wte"], (std::set<int64_t>{0, 2}));
  EXPECT_EQ(readers["h.0.w"], (std::set<int64_t>{0}));
  EXPECT_EQ(readers["h.1.w"], (std::set<int64_t>{1}));
  EXPECT_EQ(readers["h.2.w"], (std::set<int64_t>{2}));
  EXPECT_EQ(readers["ln_f.weight"], (std::set<int64_t>{2}));
  // The transpose feeding the head moved to the last stage with its read.
  int transposes = 0;
  for (auto t : fwd.getOps<pm::TransposeOp>()) {
    ++transposes;
    EXPECT_EQ(stage(t), 2);
  }
  EXPECT_EQ(transposes, 1);
  EXPECT_EQ(mlir::cast<mlir::IntegerAttr>((*f.module)->getAttr("pmesh.num_stages")).getInt(), 3);
}

TEST(PartitionTied, OneAccumulateGradPerParameterAndStage) {
  Fixture f(kTiedModel);
  ASSERT_TRUE(f.module);
  ASSERT_TRUE(mlir::succeeded(f.run(2, {}, /*ad=*/true)));
  auto step = f.module->lookupSymbol<mlir::func::FuncOp>("train_step");
  ASSERT_TRUE(step);
  std::map<std::string, std::vector<int64_t>> accumulated;
  step.walk([&](mlir::Operation *op) {
    if (mlir::isa<mlir::func::ReturnOp, mlir::func::FuncOp>(op))
      return;
    int64_t s = stage(op);
    EXPECT_TRUE(s == 0 || s == 1);
    if (auto acc = mlir::dyn_cast<pm::AccumulateGradOp>(op))
      accumulated[acc.getParam().str()].push_back(s);
    if (mlir::isa<pm::CrossEntropyOp, pm::CrossEntropyGradOp>(op)) {
      EXPECT_EQ(s, 1);
    }
    if (mlir::isa<pm::EmbeddingGradOp>(op)) {
      EXPECT_EQ(s, 0);
    }
  });
  EXPECT_EQ(accumulated["wte"], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(accumulated["h.0.w"].size(), 1u);
  EXPECT_EQ(accumulated["h.2.w"], (std::vector<int64_t>{1}));
  EXPECT_EQ(accumulated["ln_f.weight"], (std::vector<int64_t>{1}));
  // The optimizer still lists every parameter once.
  auto opt = f.module->lookupSymbol<mlir::func::FuncOp>("optimizer_step");
  auto adamw = *opt.getOps<pm::AdamWOp>().begin();
  EXPECT_EQ(adamw.getParams().size(), 5u);
}

TEST(PartitionTied, OneStageKeepsOneRead) {
  Fixture f(kTiedModel);
  ASSERT_TRUE(f.module);
  ASSERT_TRUE(mlir::succeeded(f.run(1, {}, /*ad=*/true)));
  auto step = f.module->lookupSymbol<mlir::func::FuncOp>("train_step");
  int reads = 0, accs = 0;
  for (auto get : step.getOps<pm::GetParamOp>())
    reads += get.getName() == "wte";
  for (auto acc : step.getOps<pm::AccumulateGradOp>())
    accs += acc.getParam() == "wte";
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(accs, 1);
}

TEST(PartitionTied, ExplicitLayoutWithEmptyLastStage) {
  Fixture f(kTiedModel);
  ASSERT_TRUE(f.module);
  ASSERT_TRUE(mlir::succeeded(f.run(2, {3, 0})));
  auto fwd = f.module->lookupSymbol<mlir::func::FuncOp>("forward");
  for (auto get : fwd.getOps<pm::GetParamOp>()) {
    if (get.getName().starts_with("h.")) {
      EXPECT_EQ(stage(get), 0);
    } else if (get.getName() == "ln_f.weight") {
      EXPECT_EQ(stage(get), 1);
    }
  }
}

//===----------------------------------------------------------------------===//
// Cost model
//===----------------------------------------------------------------------===//

constexpr const char *kCostOps = R"mlir(
func.func @ops(%a: tensor<4x8x16xf32>, %b: tensor<16x32xf32>, %bias: tensor<32xf32>,
               %bt: tensor<32x16xf32>, %ba: tensor<4x16x32xf32>,
               %q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>,
               %q2: tensor<1x1x2x16xf32>, %k2: tensor<1x1x5x16xf32>, %v2: tensor<1x1x5x8xf32>,
               %x: tensor<4x8x16xf32>) {
  %0 = pmesh.matmul %a, %b : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %1 = pmesh.matmul %a, %b bias %bias :
      (tensor<4x8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<4x8x32xf32>
  %2 = pmesh.matmul %a, %bt {transpose_b = true} :
      (tensor<4x8x16xf32>, tensor<32x16xf32>) -> tensor<4x8x32xf32>
  %3 = pmesh.matmul %a, %ba : (tensor<4x8x16xf32>, tensor<4x16x32xf32>) -> tensor<4x8x32xf32>
  %4 = pmesh.matmul %a, %x {transpose_a = true} :
      (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x16x16xf32>
  %5 = pmesh.attention %q, %k, %v {causal = false, scale = 0.25 : f32} :
      (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %6 = pmesh.attention %q, %k, %v {scale = 0.25 : f32} :
      (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %7 = pmesh.attention %q2, %k2, %v2 {scale = 0.25 : f32} :
      (tensor<1x1x2x16xf32>, tensor<1x1x5x16xf32>, tensor<1x1x5x8xf32>) -> tensor<1x1x2x8xf32>
  %dq, %dk, %dv = pmesh.attention_grad %5, %q, %k, %v {causal = false, scale = 0.25 : f32} :
      (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
      -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %8 = pmesh.add %a, %x : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %9 = pmesh.reshape %a : tensor<4x8x16xf32> -> tensor<32x16xf32>
  return
}
)mlir";

TEST(CostModel, MatmulAndAttentionFlops) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<pm::PMeshDialect, mlir::func::FuncDialect>();
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kCostOps, &ctx);
  ASSERT_TRUE(module);
  std::vector<mlir::Operation *> ops;
  module->walk([&](mlir::Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "pmesh")
      ops.push_back(op);
  });
  ASSERT_EQ(ops.size(), 11u);
  auto flops = [&](int k) { return cost::opCost(ops[k]).flops; };
  auto bytes = [&](int k) { return cost::opCost(ops[k]).bytes; };
  // matmul: 2 * M * N * K * batch.
  EXPECT_DOUBLE_EQ(flops(0), 2.0 * 8 * 32 * 16 * 4);
  EXPECT_DOUBLE_EQ(bytes(0), 4.0 * (4 * 8 * 16 + 16 * 32 + 4 * 8 * 32));
  EXPECT_DOUBLE_EQ(flops(1), 2.0 * 8 * 32 * 16 * 4 + 4 * 8 * 32); // + the bias adds
  EXPECT_DOUBLE_EQ(flops(2), 2.0 * 8 * 32 * 16 * 4);
  EXPECT_DOUBLE_EQ(flops(3), 2.0 * 8 * 32 * 16 * 4);
  EXPECT_DOUBLE_EQ(flops(4), 2.0 * 16 * 16 * 8 * 4); // a^T: K = 8
  // attention: 4 * BH * Tq * Tk * D without masking (D == Dv).
  EXPECT_DOUBLE_EQ(flops(5), 4.0 * 8 * 8 * 8 * 16);
  // causal: the kernel visits Tq (Tq + 1) / 2 pairs.
  EXPECT_DOUBLE_EQ(flops(6), 2.0 * 8 * 36 * (16 + 16));
  // Tq < Tk, D != Dv: query i sees i + 4 keys (9 in all).
  EXPECT_DOUBLE_EQ(flops(7), 2.0 * 1 * 9 * (16 + 8));
  EXPECT_DOUBLE_EQ(bytes(5), 4.0 * 4 * (2 * 4 * 8 * 16));
  // attention_grad: 2 * BH * visible * (4 D + 3 Dv), 3.5x the forward.
  EXPECT_DOUBLE_EQ(flops(8), 2.0 * 8 * 64 * (4 * 16 + 3 * 16));
  EXPECT_DOUBLE_EQ(flops(8), 3.5 * flops(5));
  // Elementwise: bytes-bound, one flop a result element.
  EXPECT_DOUBLE_EQ(flops(9), 4.0 * 8 * 16);
  EXPECT_DOUBLE_EQ(bytes(9), 3 * 4.0 * 4 * 8 * 16);
  EXPECT_DOUBLE_EQ(flops(10), 0.0);
  // Attention's query rows (a calibrated row's per-row term): batch x heads x
  // queries, for the gradient too; none elsewhere.
  auto rows = [&](int k) { return cost::opCost(ops[k]).rows; };
  EXPECT_DOUBLE_EQ(rows(5), 2.0 * 4 * 8);
  EXPECT_DOUBLE_EQ(rows(7), 1.0 * 1 * 2);
  EXPECT_DOUBLE_EQ(rows(8), 2.0 * 4 * 8);
  EXPECT_DOUBLE_EQ(rows(0), 0.0);
  EXPECT_DOUBLE_EQ(rows(9), 0.0);

  // Shape-level formulas agree.
  EXPECT_DOUBLE_EQ(cost::attentionFlops(8, 8, 8, 16, 16, false), 4.0 * 8 * 8 * 8 * 16);
  EXPECT_EQ(cost::attentionVisiblePairs(8, 8, true), 36);
  EXPECT_EQ(cost::attentionVisiblePairs(2, 5, true), 9);
  EXPECT_EQ(cost::attentionVisiblePairs(5, 2, true), 0 + 0 + 0 + 1 + 2);
  // A sliding window of 3: rows see 1, 2, then 3 keys.
  EXPECT_EQ(cost::attentionVisiblePairs(8, 8, true, 3), 1 + 2 + 3 * 6);
  // Aligned to the end (off = 3): both queries see 2 of their 4 and 5 keys.
  EXPECT_EQ(cost::attentionVisiblePairs(2, 5, true, 2), 4);
  EXPECT_EQ(cost::attentionVisiblePairs(8, 8, true, 8), 36);
  EXPECT_DOUBLE_EQ(cost::attentionGradFlops(1, 8, 8, 4, 4, true, 3),
                   2.0 * 21 * (4.0 * 4 + 3.0 * 4));
  EXPECT_DOUBLE_EQ(cost::matmulFlops(3, 4, 5, 6, false), 2.0 * 3 * 4 * 5 * 6);
}

TEST(CostModel, DeviceRoofline) {
  cost::Device d;
  d.name = "test";
  d.peakFlopsFp32 = 1e9;
  d.memBandwidth = 1e8;
  d.gemmEfficiency = d.memEfficiency = d.vectorEfficiency = 0.5;
  // Compute-bound GEMM: 2e9 flops, 1e6 bytes -> 2 s / 0.5.
  EXPECT_DOUBLE_EQ(d.time({2e9, 1e6}, cost::KernelClass::Gemm), 4.0);
  // Bytes-bound: 1e6 flops, 1e8 bytes -> 1 s / 0.5.
  EXPECT_DOUBLE_EQ(d.time({1e6, 1e8}), 2.0);

  auto cpu = cost::Device::byName("cpu");
  ASSERT_TRUE(cpu);
  EXPECT_EQ(cpu->name, "cpu");
  EXPECT_DOUBLE_EQ(cpu->peakFlops(), 150e9);
  EXPECT_DOUBLE_EQ(cpu->memBandwidth, 20e9);
  EXPECT_TRUE(cost::Device::byName("a100"));
  EXPECT_TRUE(cost::Device::byName("h100"));
  EXPECT_GT(cost::Device::h100().peakFlops(), cost::Device::a100_40gb().peakFlops());
  EXPECT_FALSE(cost::Device::byName("tpu"));
}

} // namespace
