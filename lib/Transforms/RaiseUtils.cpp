//===- RaiseUtils.cpp - matchers shared by the raise patterns --------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "mlir/IR/Matchers.h"

#include <cmath>
#include <limits>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;

namespace pipemesh::raise {

bool isNear(double actual, double expected, double relTol, std::optional<double> magnitude) {
  double scale = magnitude ? *magnitude : std::fabs(expected);
  return std::fabs(actual - expected) <= relTol * scale;
}

std::optional<double> getSplatFloat(Value v) {
  DenseFPElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

std::optional<ScalarOperand> matchScalarOperand(Operation *op) {
  if (!op || op->getNumOperands() != 2)
    return std::nullopt;
  if (auto c = getSplatFloat(op->getOperand(1)))
    return ScalarOperand{op->getOperand(0), *c};
  if (op->hasTrait<OpTrait::IsCommutative>())
    if (auto c = getSplatFloat(op->getOperand(0)))
      return ScalarOperand{op->getOperand(1), *c};
  return std::nullopt;
}

std::optional<ScalarOperand> matchScaling(Operation *op) {
  if (!isa_and_nonnull<MulOp, DivOp>(op))
    return std::nullopt;
  auto s = matchScalarOperand(op);
  // A splat of a larger shape would broadcast x: then the op is no pure rescale.
  if (!s || s->other.getType() != op->getResult(0).getType())
    return std::nullopt;
  if (isa<DivOp>(op)) {
    if (s->value == 0.0)
      return std::nullopt;
    s->value = 1.0 / s->value;
  }
  if (!std::isfinite(s->value))
    return std::nullopt;
  return s;
}

SmallVector<int64_t> composePerms(ArrayRef<int64_t> inner, ArrayRef<int64_t> outer) {
  SmallVector<int64_t> perm;
  for (int64_t p : outer)
    perm.push_back(inner[p]);
  return perm;
}

bool isIdentityPerm(ArrayRef<int64_t> perm) {
  for (auto [i, p] : llvm::enumerate(perm))
    if (p != (int64_t)i)
      return false;
  return true;
}

SmallVector<int64_t> swapLastTwo(ArrayRef<int64_t> perm) {
  SmallVector<int64_t> out(perm);
  if (out.size() >= 2)
    std::swap(out[out.size() - 1], out[out.size() - 2]);
  return out;
}

Value buildTranspose(PatternRewriter &rewriter, Location loc, Value v, ArrayRef<int64_t> perm) {
  if (isIdentityPerm(perm))
    return v;
  SmallVector<int64_t> composed(perm);
  while (auto inner = v.getDefiningOp<TransposeOp>()) {
    composed = composePerms(inner.getPerm(), composed);
    v = inner.getInput();
  }
  if (isIdentityPerm(composed))
    return v;
  auto type = cast<RankedTensorType>(v.getType());
  std::string why;
  shapes::OptShape shape = shapes::transpose(type.getShape(), composed, why);
  assert(shape && "callers pass a permutation of v's rank");
  return rewriter.create<TransposeOp>(loc, type.clone(*shape), v, composed);
}

bool movesNoElement(ArrayRef<int64_t> from, ArrayRef<Operation *> chain) {
  // Each dim is a list of atoms (major first): factors of the source's dims
  // of size > 1, split further where a reshape cuts one. `order` lists every
  // atom in the source's row-major order; the chain moves no element iff its
  // result's dims, read in order, list the atoms in that order.
  SmallVector<int64_t> atomSize;
  SmallVector<unsigned> order;
  SmallVector<SmallVector<unsigned>> dims;
  for (int64_t n : from) {
    if (n < 0)
      return false;
    dims.emplace_back();
    if (n > 1) {
      dims.back().push_back(atomSize.size());
      order.push_back(atomSize.size());
      atomSize.push_back(n);
    }
  }
  auto flat = [&] {
    SmallVector<unsigned> seq;
    for (auto &d : dims)
      seq.append(d.begin(), d.end());
    return seq;
  };
  for (Operation *op : chain) {
    if (auto t = dyn_cast<TransposeOp>(op)) {
      ArrayRef<int64_t> perm = t.getPerm();
      if (perm.size() != dims.size())
        return false;
      SmallVector<SmallVector<unsigned>> permuted;
      for (int64_t p : perm)
        permuted.push_back(dims[p]);
      dims = std::move(permuted);
      continue;
    }
    auto r = dyn_cast<ReshapeOp>(op);
    if (!r)
      return false;
    SmallVector<unsigned> seq = flat();
    size_t next = 0;
    SmallVector<SmallVector<unsigned>> reshaped;
    for (int64_t n : cast<RankedTensorType>(r.getType()).getShape()) {
      reshaped.emplace_back();
      int64_t have = 1;
      while (have < n) {
        if (next == seq.size())
          return false;
        unsigned atom = seq[next];
        int64_t size = atomSize[atom];
        if (n % (have * size) == 0) { // the whole atom fits
          reshaped.back().push_back(atom);
          have *= size;
          ++next;
          continue;
        }
        int64_t major = n / have; // cut the atom: its major part ends this dim
        if (n % have || size % major)
          return false;
        unsigned minor = atomSize.size();
        atomSize[atom] = major;
        atomSize.push_back(size / major);
        order.insert(llvm::find(order, atom) + 1, minor);
        seq[next] = minor;
        reshaped.back().push_back(atom);
        have = n;
      }
      if (have != n)
        return false;
    }
    if (next != seq.size())
      return false;
    dims = std::move(reshaped);
  }
  return flat() == order;
}

/// PyTorch's guard of scaled_dot_product_attention over the probabilities p,
/// where(isnan(p), 0, p) (imported as where(not(p == p), 0, p)), which zeroes
/// the rows whose every key is hidden: p when `v` is that guard and nothing
/// else reads p or the test. (The importer drops the guard itself when the
/// mask is a constant; a mask computed from positions stays an expression
/// past 4096 tokens, and with it the guard.)
std::optional<Value> matchNaNGuard(Value v) {
  auto where = v.getDefiningOp<WhereOp>();
  if (!where || !v.hasOneUse())
    return std::nullopt;
  Value probs = where.getOnFalse();
  auto isnan = where.getCond().getDefiningOp<NotOp>();
  auto selfEqual = isnan ? isnan.getInput().getDefiningOp<EqualOp>() : EqualOp();
  std::optional<double> zero = getSplatFloat(where.getOnTrue());
  if (!selfEqual || !isnan->hasOneUse() || !selfEqual->hasOneUse() ||
      selfEqual.getLhs() != probs || selfEqual.getRhs() != probs || !zero || *zero != 0.0 ||
      where.getType() != probs.getType())
    return std::nullopt;
  for (OpOperand &use : probs.getUses())
    if (use.getOwner() != where && use.getOwner() != selfEqual)
      return std::nullopt;
  return probs;
}

std::optional<std::optional<int64_t>> MaskWindowMemo::lookup(const Key &key) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = windows.find(key);
  if (it == windows.end())
    return std::nullopt;
  return it->second;
}

void MaskWindowMemo::record(const Key &key, std::optional<int64_t> window) {
  std::lock_guard<std::mutex> lock(mutex);
  windows[key] = window;
}

void MaskWindowMemo::notifyOperationErased(Operation *op) {
  std::lock_guard<std::mutex> lock(mutex);
  // The keys of one op are contiguous: they order by the op first.
  auto first = windows.lower_bound(
      Key{op, 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min(), false});
  auto last = first;
  while (last != windows.end() && std::get<0>(last->first) == op)
    ++last;
  windows.erase(first, last);
}

} // namespace pipemesh::raise
