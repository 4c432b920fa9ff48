//===- RaiseGroupedAttention.cpp - attention reads grouped k and v heads ----===//
//
// Grouped-query and multi-query attention keep fewer key/value heads than
// query heads. Exporters give every query head its own copy first:
//
//   Llama's repeat_kv    k [B, Hkv, T, D] -> [B, Hkv, 1, T, D]
//                          -> broadcast [B, Hkv, g, T, D] -> reshape [B, Hkv*g, T, D]
//   multi-query          k [B, 1, T, D] -> broadcast [B, H, T, D]
//                        (the raise's own broadcast where a matmul broadcast k)
//
// pmesh.attention reads grouped k and v directly (query head h reads head
// h / g), so the copy, H / Hkv times the key/value activations, and its
// gradient's sum over the copies go away. The reshape back to H heads may be
// written as reshapes and transposes that cancel (PyTorch 2 transposes k
// over merged batch dims); any chain that moves no element qualifies. A
// broadcast of a group's size-1 axis in front of the key/value heads
// ([B, 1, Hkv, ...]: head h reads h % Hkv) is not this order and stays.
//
//===----------------------------------------------------------------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;
using namespace pipemesh::raise;

namespace {

/// The grouped heads that `operand` (an attention's k or v, of shape
/// [P..., H, T, D]) copies to every query head, or null. `replacement`
/// receives the shape the grouped value must take: [P..., Hkv, T, D].
Value groupedSource(Value operand, SmallVectorImpl<int64_t> &replacement) {
  auto type = cast<RankedTensorType>(operand.getType());
  ArrayRef<int64_t> shape = type.getShape();
  const size_t r = shape.size();
  if (r < 3)
    return nullptr;
  // Walk back through reshapes and transposes to the broadcast.
  SmallVector<Operation *> chain;
  Value at = operand;
  while (Operation *def = at.getDefiningOp()) {
    if (!isa<ReshapeOp, TransposeOp>(def))
      break;
    chain.push_back(def);
    at = def->getOperand(0);
  }
  auto broadcast = at.getDefiningOp<BroadcastOp>();
  if (!broadcast)
    return nullptr;
  std::reverse(chain.begin(), chain.end());
  ArrayRef<int64_t> copied = cast<RankedTensorType>(broadcast.getType()).getShape();
  ArrayRef<int64_t> in = cast<RankedTensorType>(broadcast.getInput().getType()).getShape();
  if (in.size() != copied.size() || !movesNoElement(copied, chain))
    return nullptr;
  // The one axis the broadcast widens, at `axis`; every other axis kept.
  std::optional<size_t> axis;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == copied[d])
      continue;
    if (axis || in[d] != 1)
      return nullptr;
    axis = d;
  }
  if (!axis)
    return nullptr;
  replacement.assign(shape.begin(), shape.end());
  if (copied == shape && *axis == r - 3) {
    // Multi-query: [P..., 1, T, D] broadcast to [P..., H, T, D].
    replacement[r - 3] = 1;
    return broadcast.getInput();
  }
  // repeat_kv: [P..., Hkv, 1, T, D] -> [P..., Hkv, g, T, D], Hkv and g merged
  // (the chain moves no element, so the shapes say which dims it merges).
  if (copied.size() != r + 1 || *axis != r - 2 ||
      ArrayRef<int64_t>(copied).take_front(r - 3) != shape.take_front(r - 3) ||
      ArrayRef<int64_t>(copied).take_back(2) != shape.take_back(2) ||
      copied[r - 3] * copied[r - 2] != shape[r - 3])
    return nullptr;
  replacement[r - 3] = copied[r - 3];
  return broadcast.getInput();
}

struct ReadGroupedKeyValues : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op, PatternRewriter &rewriter) const override {
    bool changed = false;
    for (OpOperand *operand : {&op.getKMutable(), &op.getVMutable()}) {
      Value current = operand->get();
      // Only an operand at q's heads: a grouped one already reads its heads.
      if (shapes::attentionHeadGroup(cast<RankedTensorType>(op.getQ().getType()).getShape(),
                                     cast<RankedTensorType>(current.getType()).getShape()) != 1)
        continue;
      SmallVector<int64_t> shape;
      Value source = groupedSource(current, shape);
      if (!source)
        continue;
      auto type = RankedTensorType::get(
          shape, cast<RankedTensorType>(current.getType()).getElementType());
      Value grouped = source;
      if (cast<RankedTensorType>(source.getType()).getShape() != ArrayRef<int64_t>(shape))
        grouped = rewriter.create<ReshapeOp>(op.getLoc(), type, source);
      rewriter.modifyOpInPlace(op, [&] { operand->set(grouped); });
      changed = true;
    }
    return success(changed);
  }
};

} // namespace

void pipemesh::raise::populateRaiseGroupedAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<ReadGroupedKeyValues>(patterns.getContext());
}
