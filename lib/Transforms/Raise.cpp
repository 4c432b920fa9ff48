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
    warnAboutLongDecomposedAttention();
  }

  /// softmax(s) @ v left decomposed over long sequences keeps [.., T, T]
  /// scores per head for the backward: say so, since that memory is what
  /// the user will see fail. (Short ones are common and cheap: GPT-1's, a
  /// padding mask read from an input.)
  void warnAboutLongDecomposedAttention() {
    getOperation().walk([](SoftmaxOp softmax) {
      auto scores = cast<RankedTensorType>(softmax.getType());
      int64_t rank = scores.getRank();
      if (rank < 2 || scores.getDimSize(rank - 2) * scores.getDimSize(rank - 1) < kLongScores)
        return;
      auto feedsMatMulA = [](Value v) {
        return llvm::any_of(v.getUses(), [](OpOperand &use) {
          return isa<MatMulOp>(use.getOwner()) && use.getOperandNumber() == 0;
        });
      };
      bool attention = feedsMatMulA(softmax.getResult());
      for (Operation *user : softmax->getUsers())
        if (isa<WhereOp>(user) && raise::matchNaNGuard(user->getResult(0)))
          attention |= feedsMatMulA(user->getResult(0));
      if (attention)
        softmax.emitWarning()
            << "attention stays decomposed: softmax(scores) @ v keeps scores of type " << scores
            << " for the backward (the raise fuses attention whose mask it proves a causal "
            << "band or leaves as an additive operand; computed masks are evaluated up to 2^40 "
            << "elements)";
    });
  }

  /// Scores of at least 2^24 elements per head ([4096, 4096]) are long.
  static constexpr int64_t kLongScores = int64_t(1) << 24;
};
} // namespace
