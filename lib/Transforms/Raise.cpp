//===- Raise.cpp - raise exporter patterns to fused pmesh ops --------------===//
#include "pipemesh/Transforms/Passes.h"

#include "RaiseUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace pipemesh {
#define GEN_PASS_DEF_PMESHRAISE
#include "pipemesh/Transforms/Passes.h.inc"
} // namespace pipemesh

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;

void pipemesh::populateRaisePatterns(RewritePatternSet &patterns) {
  raise::populateRaiseLayerNormPatterns(patterns);
  raise::populateRaiseGeluPatterns(patterns);
  raise::populateRaiseAttentionPatterns(patterns);
  raise::populateRaiseGroupedAttentionPatterns(patterns);
  raise::populateRaiseMatMulPatterns(patterns);
}

namespace {
struct PMeshRaisePass : pipemesh::impl::PMeshRaiseBase<PMeshRaisePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateRaisePatterns(patterns);
    for (RegisteredOperationName name : getContext().getRegisteredOperations())
      if (name.getDialectNamespace() == "pmesh")
        name.getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
