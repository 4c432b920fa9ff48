//===- RaiseMatMul.cpp - fold bias adds and transposes into matmul ---------===//
//
// ONNX has no Gemm-with-batch, so exporters write a linear layer as
// MatMul + Add(bias), and a tied or attention-key operand as Transpose +
// MatMul. pmesh.matmul carries both (the optional `bias` operand and the
// transpose_a/transpose_b flags); folding them in keeps the graph small and
// lets later passes see one op per linear layer and the tied embedding weight
// itself instead of a transposed copy.
//
//===----------------------------------------------------------------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;
using namespace pipemesh::raise;

namespace {

/// add(matmul(a, b), bias) -> matmul(a, b) bias(bias), in either operand order.
///
/// Only a 1-D bias along the output's last dim qualifies: that is the one
/// shape pmesh.matmul's bias accepts, and anything else (a residual, a mask)
/// is not a bias. The matmul must feed only this add, or its bias-free result
/// would still be needed.
struct FoldBiasAddIntoMatMul : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    for (auto [mmOperand, biasOperand] :
         {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      auto mm = mmOperand.getDefiningOp<MatMulOp>();
      if (!mm || mm.getBias() || !mm->hasOneUse())
        continue;
      auto resultType = cast<RankedTensorType>(mm.getType());
      auto biasType = cast<RankedTensorType>(biasOperand.getType());
      if (add.getType() != resultType || biasType.getRank() != 1 ||
          biasType.getDimSize(0) != resultType.getShape().back() ||
          biasType.getElementType() != resultType.getElementType())
        continue;
      rewriter.replaceOpWithNewOp<MatMulOp>(add, resultType, mm.getA(), mm.getB(), biasOperand,
                                            mm.getTransposeA(), mm.getTransposeB());
      rewriter.eraseOp(mm);
      return success();
    }
    return rewriter.notifyMatchFailure(add, "not matmul + 1-D bias of the last dim");
  }
};

/// matmul(transpose(x, p), ...) -> matmul(transpose(x, p'), ...) with the
/// operand's transpose flag toggled, where p' = p followed by a swap of the
/// last two dims.
///
/// This applies when p moves x's innermost dim to the second-to-last
/// position (p[r-2] == r-1): then p' keeps the innermost dim in place, so the
/// remaining transpose (if any) only reorders whole rows, and the contraction
/// reads x in its stored layout. Two exporter idioms reduce this way:
///   * a tied LM head, matmul(h, transpose(wte, [1, 0])): p' is the identity,
///     the transpose disappears and the head reads the embedding table itself;
///   * an attention key, transpose(k, [0, 2, 3, 1]) from [B, T, H, D]:
///     p' = [0, 2, 1, 3] gives k as [B, H, T, D] like q and v, with
///     transpose_b = true, which is the form the attention raise expects.
/// A transpose with other users is only absorbed when it disappears entirely,
/// so the rewrite never adds a transpose.
struct AbsorbTransposeIntoMatMul : OpRewritePattern<MatMulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MatMulOp mm, PatternRewriter &rewriter) const override {
    for (unsigned idx : {0u, 1u}) {
      auto transpose = mm->getOperand(idx).getDefiningOp<TransposeOp>();
      if (!transpose)
        continue;
      ArrayRef<int64_t> perm = transpose.getPerm();
      int64_t rank = perm.size();
      if (rank < 2 || perm[rank - 2] != rank - 1)
        continue;
      SmallVector<int64_t> newPerm = swapLastTwo(perm);
      if (!isIdentityPerm(newPerm) && !transpose->hasOneUse())
        continue;
      Value operand = buildTranspose(rewriter, transpose.getLoc(), transpose.getInput(), newPerm);
      rewriter.modifyOpInPlace(mm, [&] {
        mm->setOperand(idx, operand);
        if (idx == 0)
          mm.setTransposeA(!mm.getTransposeA());
        else
          mm.setTransposeB(!mm.getTransposeB());
      });
      return success();
    }
    return rewriter.notifyMatchFailure(mm, "no operand transpose to absorb");
  }
};

} // namespace

void pipemesh::raise::populateRaiseMatMulPatterns(RewritePatternSet &patterns) {
  patterns.add<FoldBiasAddIntoMatMul, AbsorbTransposeIntoMatMul>(patterns.getContext());
}
