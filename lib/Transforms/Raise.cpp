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

namespace {
void populateAll(RewritePatternSet &patterns, raise::MaskWindowMemo *memo) {
  raise::populateRaiseLayerNormPatterns(patterns);
  raise::populateRaiseGeluPatterns(patterns);
  raise::populateRaiseAttentionPatterns(patterns, memo);
  raise::populateRaiseGroupedAttentionPatterns(patterns);
  raise::populateRaiseMatMulPatterns(patterns);
}
} // namespace

void pipemesh::populateRaisePatterns(RewritePatternSet &patterns) {
  populateAll(patterns, /*memo=*/nullptr);
}

namespace {
struct PMeshRaisePass : pipemesh::impl::PMeshRaiseBase<PMeshRaisePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    raise::MaskWindowMemo memo;
    populateAll(patterns, &memo);
    for (RegisteredOperationName name : getContext().getRegisteredOperations())
      if (name.getDialectNamespace() == "pmesh")
        name.getCanonicalizationPatterns(patterns, &getContext());
    GreedyRewriteConfig config;
    config.listener = &memo; // forgets the masks of erased ops
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns), config)))
      signalPassFailure();
  }
};
} // namespace
