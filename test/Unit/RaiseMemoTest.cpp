//===- RaiseMemoTest.cpp - the raise's per-model mask memo ----------------===//
//
// MaskWindowMemo keeps a computed mask's causal window keyed by the op that
// computes it; an erased op's address may be reused by a new op, so erasure
// (the greedy driver's listener notification) must forget exactly that op's
// entries.
//
//===----------------------------------------------------------------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using pipemesh::raise::MaskWindowMemo;

namespace {

TEST(MaskWindowMemo, ErasureForgetsOnlyThatOp) {
  MLIRContext context;
  context.loadDialect<pipemesh::pmesh::PMeshDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(R"mlir(
    func.func @f(%a: tensor<4x1xi64>, %b: tensor<1x4xi64>) -> (tensor<4x4xi1>, tensor<4x4xi1>) {
      %lt = pmesh.less %a, %b : (tensor<4x1xi64>, tensor<1x4xi64>) -> tensor<4x4xi1>
      %ge = pmesh.not %lt : tensor<4x4xi1>
      return %lt, %ge : tensor<4x4xi1>, tensor<4x4xi1>
    }
  )mlir", &context);
  ASSERT_TRUE(module);
  auto func = *module->getOps<func::FuncOp>().begin();
  Operation *less = &func.getBody().front().front();
  Operation *notOp = less->getNextNode();

  MaskWindowMemo memo;
  MaskWindowMemo::Key lessCausal{less, 0, 4, 4, true}, lessOther{less, 0, 4, 4, false},
      notCausal{notOp, 0, 4, 4, true}, notLonger{notOp, 0, 2, 4, true};
  EXPECT_FALSE(memo.lookup(lessCausal).has_value());
  memo.record(lessCausal, std::nullopt); // evaluated: not a causal band
  memo.record(lessOther, 0);
  memo.record(notCausal, 0);             // causal
  memo.record(notLonger, 3);
  ASSERT_TRUE(memo.lookup(lessCausal).has_value());
  EXPECT_FALSE(memo.lookup(lessCausal)->has_value());
  EXPECT_EQ(memo.lookup(notLonger), std::optional<std::optional<int64_t>>(3));

  memo.notifyOperationErased(less);
  EXPECT_FALSE(memo.lookup(lessCausal).has_value());
  EXPECT_FALSE(memo.lookup(lessOther).has_value());
  EXPECT_EQ(memo.lookup(notCausal), std::optional<std::optional<int64_t>>(0));
  EXPECT_EQ(memo.lookup(notLonger), std::optional<std::optional<int64_t>>(3));

  memo.notifyOperationErased(notOp);
  EXPECT_FALSE(memo.lookup(notCausal).has_value());
  EXPECT_FALSE(memo.lookup(notLonger).has_value());
}

} // namespace
