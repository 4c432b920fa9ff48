//===- PlanEmitterTest.cpp - emitted multi-rank plans ----------------------===//
//
// Compiles the staged steps of test/Plan/Inputs and checks properties of
// every emitted rank: it passes the deadlock check (and fails it once a
// receive is moved), tags stay in MPI's range, and no two buffers that are
// alive at the same time share arena bytes (a sent buffer stays alive until
// wait_sends).
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Plan/DeadlockCheck.h"
#include "pipemesh/Plan/Replicas.h"
#include "pipemesh/Plan/Plan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

using namespace mlir;
using namespace pipemesh::plan;
namespace json = llvm::json;

namespace {

/// The manifest of the plan compiled from Inputs/<file>.
std::optional<json::Value> compile(const std::string &file, const std::string &options) {
  DialectRegistry registry;
  registry.insert<pipemesh::pmesh::PMeshDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(std::string(PIPEMESH_PLAN_INPUTS) + "/" + file, &context);
  if (!module)
    return std::nullopt;
  CompileOptions opts;
  std::string why;
  if (!parseCompileOptions(options + " shapes-only=1", opts, why)) {
    ADD_FAILURE() << why;
    return std::nullopt;
  }
  std::string bytes;
  llvm::raw_string_ostream os(bytes);
  if (failed(emitPlan(*module, opts, os)))
    return std::nullopt;
  uint64_t lm;
  std::memcpy(&lm, bytes.data() + 16, 8);
  auto parsed = json::parse(llvm::StringRef(bytes).substr(40, lm));
  if (!parsed) {
    ADD_FAILURE() << llvm::toString(parsed.takeError());
    return std::nullopt;
  }
  return std::move(*parsed);
}

std::vector<int64_t> ids(const json::Object &inst, llvm::StringRef field) {
  std::vector<int64_t> out;
  if (const json::Array *a = inst.getArray(field))
    for (const json::Value &v : *a)
      out.push_back(*v.getAsInteger());
  return out;
}

/// No two non-alias buffers alive at the same instruction overlap in bytes.
void expectMemorySafe(const json::Object &rank, const std::string &label) {
  struct Buf {
    int64_t offset, bytes, alias = -1, first = INT64_MAX, last = -1;
    bool persistent;
  };
  std::map<int64_t, Buf> bufs;
  for (const json::Value &bv : *rank.getArray("buffers")) {
    const json::Object &b = *bv.getAsObject();
    llvm::StringRef kind = *b.getString("kind");
    bufs[*b.getInteger("id")] = {*b.getInteger("offset"), *b.getInteger("bytes"),
                                 b.getInteger("alias_of").value_or(-1), INT64_MAX, -1,
                                 kind != "activation" && kind != "input"};
  }
  auto root = [&](int64_t id) {
    while (bufs[id].alias >= 0)
      id = bufs[id].alias;
    return id;
  };
  const json::Array &prog = *rank.getArray("program");
  // A sent buffer lives until the wait_sends that completes its send (every
  // earlier send but the `keep` most recent); unwaited, to the end.
  std::vector<std::pair<int64_t, int64_t>> sent; // (root, completed at)
  size_t completed = 0;
  for (auto [k, iv] : llvm::enumerate(prog)) {
    const json::Object &inst = *iv.getAsObject();
    if (inst.getString("op") == "wait_sends") {
      size_t keep = inst.getInteger("keep").value_or(0);
      for (; completed + keep < sent.size(); ++completed)
        sent[completed].second = k;
    }
    if (inst.getString("op") == "send")
      sent.push_back({root(ids(inst, "in")[0]), (int64_t)prog.size()});
    for (llvm::StringRef f : {"in", "out", "bufs"})
      for (int64_t id : ids(inst, f)) {
        Buf &b = bufs[root(id)];
        b.first = std::min<int64_t>(b.first, k);
        b.last = std::max<int64_t>(b.last, k);
      }
  }
  for (auto [id, at] : sent)
    bufs[id].last = std::max(bufs[id].last, at);
  for (auto &[i, a] : bufs)
    for (auto &[j, b] : bufs) {
      if (i >= j || a.alias >= 0 || b.alias >= 0)
        continue;
      bool time = a.persistent || b.persistent || (a.first <= b.last && b.first <= a.last);
      bool space = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(time && space && a.bytes && b.bytes)
          << label << ": buffers " << i << " and " << j << " overlap while both are alive";
    }
}

struct Config {
  const char *file;
  const char *options;
};
const Config kConfigs[] = {
    {"staged-2-chunks.mlir", "batch=2 seq=4 microbatches=3"},
    {"staged-2-chunks.mlir", "batch=2 seq=4 pp=2 microbatches=3"},
    {"staged-2-chunks.mlir", "batch=2 seq=4 pp=2 microbatches=4 schedule=gpipe"},
    {"staged-2-chunks.mlir", "batch=2 seq=4 pp=2 dp=2 microbatches=2 zero=0"},
    {"staged-2-chunks.mlir", "batch=2 seq=4 pp=2 dp=2 microbatches=2 zero=1"},
    {"staged-2-chunks.mlir", "batch=2 seq=4 pp=2 dp=3 microbatches=2 zero=2"},
    {"staged-2-chunks.mlir", "batch=2 seq=4 pp=2 dp=4 microbatches=3 zero=3"},
    {"staged-4-chunks.mlir", "batch=2 seq=4 pp=2 vpp=2 microbatches=4 schedule=interleaved"},
    {"staged-4-chunks.mlir", "batch=2 seq=4 pp=2 vpp=2 microbatches=5 group=3 zero=3 dp=2"},
    {"staged-4-chunks.mlir", "batch=2 seq=4 pp=4 microbatches=6"},
    {"staged-4-chunks.mlir", "batch=2 seq=4 pp=1 vpp=4 microbatches=2"},
};
} // namespace

TEST(PlanEmitter, EmittedPlansAreDeadlockFreeAndMemorySafe) {
  for (const Config &c : kConfigs) {
    std::string label = std::string(c.file) + " " + c.options;
    auto m = compile(c.file, c.options);
    ASSERT_TRUE(m) << label;
    EXPECT_EQ(checkPlanDeadlock(*m->getAsObject()), "") << label;
    for (const json::Value &rv : *m->getAsObject()->getArray("ranks")) {
      const json::Object &r = *rv.getAsObject();
      expectMemorySafe(r, label + " rank " + std::to_string(*r.getInteger("rank")));
      for (const json::Value &iv : *r.getArray("program")) {
        if (auto tag = iv.getAsObject()->getInteger("tag")) {
          EXPECT_TRUE(*tag >= 0 && *tag <= kMaxMessageTag) << label;
        }
      }
    }
  }
}

TEST(PlanEmitter, TiedCopiesCountOnceInTheNorm) {
  auto m = compile("staged-2-chunks.mlir", "batch=2 seq=4 pp=2 dp=2 microbatches=2 zero=0");
  ASSERT_TRUE(m);
  // The plan holds dp rank 0's program of each pipeline rank; its
  // replicated gradients are marked to count on dp rank 0 only.
  json::Object &manifest = *m->getAsObject();
  ASSERT_EQ(manifest.getArray("ranks")->size(), 2u);
  EXPECT_EQ(manifest.getObject("parallel")->getBoolean("replicas_elided"), true);
  // Every rank (pp, dp), as the runtime derives them: the wte copy of the
  // last stage never counts; replicated gradients count on dp rank 0 only.
  std::string why;
  ASSERT_TRUE(expandReplicas(manifest, why)) << why;
  std::map<int64_t, std::vector<double>> weights;
  for (const json::Value &rv : *manifest.getArray("ranks")) {
    const json::Object &r = *rv.getAsObject();
    for (const json::Value &iv : *r.getArray("program")) {
      const json::Object &inst = *iv.getAsObject();
      if (inst.getString("op") != "adamw")
        continue;
      for (const json::Value &e : *inst.getArray("params"))
        weights[*r.getInteger("rank")].push_back(
            e.getAsObject()->getNumber("norm_weight").value_or(1.0));
    }
  }
  EXPECT_EQ(weights[0], (std::vector<double>{1, 1, 1})); // wte, w1, b1
  EXPECT_EQ(weights[1], (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(weights[2], (std::vector<double>{0, 1})); // wte (tied copy), w2
  EXPECT_EQ(weights[3], (std::vector<double>{0, 0}));
}

TEST(PlanEmitter, ElidedManifestMissingAPipelineRank) {
  auto m = compile("staged-2-chunks.mlir", "batch=2 seq=4 pp=2 dp=2 microbatches=2 zero=1");
  ASSERT_TRUE(m);
  json::Object &manifest = *m->getAsObject();
  json::Array &ranks = *manifest.getArray("ranks");
  ranks = json::Array{ranks.back()}; // pipeline rank 1 alone
  std::string why;
  EXPECT_FALSE(expandReplicas(manifest, why));
  EXPECT_EQ(why, "an elided manifest lists 1 of the 2 pipeline ranks");
  EXPECT_EQ(checkPlanDeadlock(manifest), why);
}

TEST(PlanEmitter, DeadlockCheckCatchesAMovedReceive) {
  auto m = compile("staged-2-chunks.mlir", "batch=2 seq=4 pp=2 microbatches=3");
  ASSERT_TRUE(m);
  ASSERT_EQ(checkPlanDeadlock(*m->getAsObject()), "");
  // Rank 0 receives the gradients of micro-batches 0, 1, 2; swapping the
  // first and the last makes it wait for micro-batch 2's before it has sent
  // micro-batch 2's activation, on which that gradient depends.
  json::Array &prog = *(*m->getAsObject()->getArray("ranks"))[0].getAsObject()->getArray("program");
  std::vector<size_t> recvs;
  for (auto [k, iv] : llvm::enumerate(prog))
    if (iv.getAsObject()->getString("op") == "recv")
      recvs.push_back(k);
  ASSERT_EQ(recvs.size(), 3u);
  std::swap(prog[recvs[0]], prog[recvs[2]]);
  std::string why = checkPlanDeadlock(*m->getAsObject());
  EXPECT_NE(why.find("deadlock: no rank can proceed"), std::string::npos) << why;
  EXPECT_NE(why.find("rank 0 instruction " + std::to_string(recvs[0]) + " (recv from rank 1 tag 5)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("rank 1 instruction"), std::string::npos) << why;
}
