//===- RaiseAttention.cpp - raise scaled dot-product attention -------------===//
//
// ONNX exporters write attention as
//
//   s = matmul(q, k^T)            k^T: transpose of k, or transpose_b
//   s = s * c  |  s / c           any number of scalar factors, also on q / k^T
//   s = where(tril, s, -big)      causal mask (optional)
//   s = s + mask                  additive mask (optional)
//   p = softmax(s, last axis)
//   p = where(isnan(p), 0, p)     PyTorch's guard (optional, see below)
//   o = matmul(p, v)
//
// and pmesh.attention is exactly that with the factors folded into `scale`.
// The causal mask is a compile-time constant once the importer has bound the
// sequence length, but it may still be a constant expression (HF's sliced
// tril buffer, or not(less(rows, cols)) built from Range, which the importer
// leaves unfolded past 4096 tokens); the matcher evaluates it a row at a
// time, each row as runs of affine values, and checks every row, so only a
// mask that really is lower-triangular (or a band) becomes causal.
// The guard, which zeroes rows whose every key is hidden, is dropped only
// then: a causal row always sees its own position.
//
//===----------------------------------------------------------------------===//
#include "RaiseUtils.h"

#include "pipemesh/Dialect/PMesh/FloatConstants.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "mlir/IR/Matchers.h"

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::pmesh;
using namespace pipemesh::raise;

namespace {

//===----------------------------------------------------------------------===//
// Compile-time evaluation of integer / boolean mask expressions
//===----------------------------------------------------------------------===//

/// A dense integer tensor evaluated at compile time: booleans (i1) one byte
/// each, other integers as int64.
struct IntTensor {
  shapes::Shape shape;
  bool boolean = false;
  std::vector<int64_t> ints;   ///< when !boolean
  std::vector<uint8_t> bools;  ///< when boolean: 0 / 1

  IntTensor(ArrayRef<int64_t> shape, bool boolean) : shape(shape), boolean(boolean) {
    reserve(shapes::numElements(shape));
  }
  void reserve(int64_t n) { boolean ? bools.reserve(n) : ints.reserve(n); }
  int64_t at(int64_t i) const { return boolean ? bools[i] : ints[i]; }
  void push(int64_t v) { boolean ? bools.push_back(v != 0) : ints.push_back(v); }
};

/// Masks are evaluated a row at a time as runs (MaskRows). Constants are decoded
/// whole - they are in the IR already - up to 2^27 booleans (one byte each)
/// or 2^26 other integers; a transpose that moves the last dim is read whole,
/// up to 2^24 elements (a [4096, 4096] mask).
constexpr int64_t kMaxHeldElements = int64_t(1) << 24;
constexpr int64_t kMaxConstantMaskElements = int64_t(1) << 26;
constexpr int64_t kMaxConstantBoolMaskElements = int64_t(1) << 27;

/// Row-major strides of `shape`.
SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  return strides;
}

/// The data movement of a transpose: result index `index` reads input element
/// `sum(index[d] * steps[d])`.
IntTensor gather(const IntTensor &in, ArrayRef<int64_t> outShape, ArrayRef<int64_t> steps) {
  IntTensor out(outShape, in.boolean);
  const int64_t n = shapes::numElements(outShape);
  SmallVector<int64_t> index(outShape.size(), 0);
  for (int64_t e = 0, src = 0; e < n; ++e) {
    out.push(in.at(src));
    for (int64_t d = (int64_t)outShape.size() - 1; d >= 0; --d) {
      src += steps[d];
      if (++index[d] < outShape[d])
        break;
      src -= steps[d] * outShape[d];
      index[d] = 0;
    }
  }
  return out;
}

/// Constants' values, decoded once per pass run: every layer's mask chain
/// starts from the same [ctx, ctx] constant, and decoding it element by
/// element through APInt was most of a large model's import. Keyed by the
/// attribute (immutable, alive as long as the context), not by a value
/// that the rewrites may erase.
using DecodedConstants = llvm::DenseMap<Attribute, std::shared_ptr<const IntTensor>>;

/// How deep a mask computation may be (exporters use a handful of ops).
constexpr unsigned kMaxMaskDepth = 16;

/// cast(where(c, x, y)) to i1 with splat floats x and y is where(c, x != 0,
/// y != 0): a float mask turned back into booleans (MPT's exports). The
/// condition and the two booleans, when `op` is that.
struct BoolOfFloatSelect {
  Value cond;
  bool onTrue, onFalse;
};
std::optional<BoolOfFloatSelect> matchBoolOfFloatSelect(Operation *op) {
  auto cast = dyn_cast<CastOp>(op);
  if (!cast || !cast.getType().getElementType().isInteger(1))
    return std::nullopt;
  auto where = cast.getInput().getDefiningOp<WhereOp>();
  if (!where || !isa<FloatType>(where.getType().getElementType()) ||
      where.getType().getShape() != cast.getType().getShape())
    return std::nullopt;
  std::optional<double> x = getSplatFloat(where.getOnTrue()), y = getSplatFloat(where.getOnFalse());
  if (!x || !y)
    return std::nullopt;
  // NaN is nonzero, as a cast to bool reads it.
  return BoolOfFloatSelect{where.getCond(), *x != 0.0, *y != 0.0};
}

/// The values of an integer constant of `type`, decoded once per attribute;
/// nullptr past the constants' limits.
std::shared_ptr<const IntTensor> decodeConstant(DenseIntElementsAttr attr, RankedTensorType type,
                                                DecodedConstants &decoded) {
  const bool isBool = type.getElementType().isInteger(1);
  if (type.getNumElements() > (isBool ? kMaxConstantBoolMaskElements : kMaxConstantMaskElements))
    return nullptr;
  auto [it, added] = decoded.try_emplace(attr);
  if (added) {
    auto t = std::make_shared<IntTensor>(type.getShape(), isBool);
    if (attr.isSplat()) {
      int64_t value = isBool ? (int64_t)attr.getSplatValue<bool>()
                             : attr.getSplatValue<APInt>().getSExtValue();
      for (int64_t i = 0; i < attr.getNumElements(); ++i)
        t->push(value);
    } else if (isBool) {
      for (bool value : attr.getValues<bool>())
        t->push(value);
    } else {
      for (const APInt &value : attr.getValues<APInt>())
        t->push(value.getSExtValue());
    }
    it->second = std::move(t);
  }
  return it->second;
}

/// A stretch of a mask row: `len` consecutive elements valued base, base +
/// slope, base + 2 slope, ... Positions are affine in the key index, their
/// sums and differences stay affine, and a comparison splits a stretch at most
/// twice, so a row of a [T, T] causal mask is two runs whatever T is and a
/// row costs what its runs do, not T. Boolean rows are runs of slope 0. Every
/// value a run stands for fits in int64 (its two ends do, and it is monotone).
struct Run {
  int64_t len, base, slope;
};
using RunRow = std::vector<Run>;
using Wide = __int128;

bool fitsInt64(Wide v) { return v >= INT64_MIN && v <= INT64_MAX; }

/// floor(a / b) and ceil(a / b) for b > 0.
Wide floorDiv(Wide a, Wide b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
Wide ceilDiv(Wide a, Wide b) { return -floorDiv(-a, b); }

/// Appends `len` elements valued base + slope * i to `row`, joining them to
/// the last run when they continue it; false when a value does not fit int64.
bool appendRun(RunRow &row, int64_t len, Wide base, Wide slope, bool boolean) {
  if (len <= 0)
    return true;
  if (len == 1)
    slope = 0;
  if (!fitsInt64(base) || !fitsInt64(slope) || !fitsInt64(base + slope * (len - 1)))
    return false;
  if (!row.empty()) {
    Run &last = row.back();
    if (boolean) {
      if (last.base == base) {
        last.len += len;
        return true;
      }
    } else {
      // The slope the joined run would have: the last run's, or when that is
      // one element, the new run's (or the step between the two elements).
      Wide s = last.len > 1 ? Wide(last.slope) : len > 1 ? slope : base - last.base;
      if ((len == 1 || slope == s) && Wide(last.base) + s * last.len == base && fitsInt64(s)) {
        last.slope = (int64_t)s;
        last.len += len;
        return true;
      }
    }
  }
  row.push_back(Run{len, (int64_t)base, (int64_t)slope});
  return true;
}

/// Appends elements [from, from + count) of `src` to `row`.
bool appendRange(RunRow &row, const RunRow &src, int64_t from, int64_t count, bool boolean) {
  for (const Run &run : src) {
    if (count <= 0)
      break;
    if (from >= run.len) {
      from -= run.len;
      continue;
    }
    int64_t take = std::min(run.len - from, count);
    if (!appendRun(row, take, Wide(run.base) + Wide(run.slope) * from, run.slope, boolean))
      return false;
    count -= take;
    from = 0;
  }
  return count <= 0;
}

/// A mask evaluated one row (its last dim) at a time, each row as runs, so that
/// long ones need not be held whole: a [T, T] mask at 131072 tokens has 2^34
/// elements, its causal rows two runs each. Every row is still computed and
/// checked; only a row of each operand lives at once (constants are held
/// whole). Rows are numbered flat over the leading dims; the last row computed
/// is kept, as consecutive rows of a result often read the same operand row.
class MaskRows {
public:
  MaskRows(ArrayRef<int64_t> shape, bool boolean) : shape(shape), boolean(boolean) {}
  virtual ~MaskRows() = default;
  MaskRows(const MaskRows &) = delete;
  MaskRows &operator=(const MaskRows &) = delete;

  int64_t rowLength() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const { return shapes::numElements(shape) / std::max<int64_t>(rowLength(), 1); }
  /// Row `r`, or nullptr when a value of it does not fit int64.
  const RunRow *row(int64_t r) {
    if (r != cachedRow) {
      cache.clear();
      cachedOk = compute(r, cache);
      cachedRow = r;
    }
    return cachedOk ? &cache : nullptr;
  }

  const shapes::Shape shape;
  const bool boolean; ///< i1: runs of slope 0

protected:
  virtual bool compute(int64_t r, RunRow &out) = 0;

private:
  int64_t cachedRow = -1;
  bool cachedOk = false;
  RunRow cache;
};

/// The multi-index of row `r` over `shape`'s leading dims (all but the last).
SmallVector<int64_t> rowIndex(ArrayRef<int64_t> shape, int64_t r) {
  SmallVector<int64_t> index(shape.empty() ? 0 : shape.size() - 1);
  for (int64_t d = (int64_t)index.size() - 1; d >= 0; --d) {
    index[d] = r % shape[d];
    r /= shape[d];
  }
  return index;
}

/// The flat row of `shape` at leading multi-index `index`.
int64_t flatRow(ArrayRef<int64_t> shape, ArrayRef<int64_t> index) {
  int64_t r = 0;
  for (size_t d = 0; d < index.size(); ++d)
    r = r * shape[d] + index[d];
  return r;
}

/// A tensor held whole, read by rows.
class HeldRows : public MaskRows {
public:
  explicit HeldRows(std::shared_ptr<const IntTensor> t)
      : MaskRows(t->shape, t->boolean), t(std::move(t)) {}

protected:
  bool compute(int64_t r, RunRow &out) override {
    int64_t n = rowLength();
    for (int64_t j = 0; j < n; ++j)
      if (!appendRun(out, 1, t->at(r * n + j), 0, boolean))
        return false;
    return true;
  }

private:
  std::shared_ptr<const IntTensor> t;
};

/// An operand of an elementwise op, broadcast (numpy) to the result's shape.
struct BroadcastRows {
  std::unique_ptr<MaskRows> node;
  bool repeated = false; ///< its rows are one element, the result's are longer

  BroadcastRows(std::unique_ptr<MaskRows> node, ArrayRef<int64_t> outShape)
      : node(std::move(node)) {
    repeated = this->node->rowLength() == 1 && !outShape.empty() && outShape.back() != 1;
  }
  /// Its row for the result's leading index `outIndex`.
  const RunRow *row(ArrayRef<int64_t> outIndex) {
    ArrayRef<int64_t> in = node->shape;
    size_t leading = in.empty() ? 0 : in.size() - 1, offset = outIndex.size() - leading;
    int64_t r = 0;
    for (size_t d = 0; d < leading; ++d)
      r = r * in[d] + (in[d] == 1 ? 0 : outIndex[offset + d]);
    return node->row(r);
  }
};

/// The value base + slope * i of an operand over a stretch where every
/// operand is one run.
struct Affine {
  Wide base, slope;
};

/// An elementwise op of one to three operands. The operands' rows are cut
/// where any of them starts a run; `apply(len, operands, out)` appends the
/// result of such a stretch (false: a value past int64, or a boolean operand
/// that is not one).
template <typename Apply>
class ElementwiseRows : public MaskRows {
public:
  ElementwiseRows(ArrayRef<int64_t> shape, bool boolean, std::vector<BroadcastRows> operands,
                  Apply apply)
      : MaskRows(shape, boolean), operands(std::move(operands)), apply(apply) {}

protected:
  bool compute(int64_t r, RunRow &out) override {
    SmallVector<int64_t> index = rowIndex(shape, r);
    const int64_t n = rowLength();
    const size_t count = operands.size();
    const RunRow *in[3] = {};
    for (size_t k = 0; k < count; ++k) {
      const RunRow *row = operands[k].row(index);
      if (!row || row->empty())
        return false;
      if (operands[k].repeated) { // one element, the same all along the row
        single[k] = {Run{n, row->front().base, 0}};
        row = &single[k];
      }
      in[k] = row;
    }
    size_t at[3] = {0, 0, 0};
    int64_t used[3] = {0, 0, 0};
    for (int64_t pos = 0; pos < n;) {
      int64_t len = n - pos;
      Affine ops[3] = {};
      for (size_t k = 0; k < count; ++k) {
        if (at[k] >= in[k]->size())
          return false;
        const Run &run = (*in[k])[at[k]];
        len = std::min(len, run.len - used[k]);
        ops[k] = {Wide(run.base) + Wide(run.slope) * used[k], run.slope};
      }
      if (len <= 0 || !apply(len, ops, out, boolean))
        return false;
      pos += len;
      for (size_t k = 0; k < count; ++k)
        if ((used[k] += len) == (*in[k])[at[k]].len) {
          ++at[k];
          used[k] = 0;
        }
    }
    return true;
  }

private:
  std::vector<BroadcastRows> operands;
  Apply apply;
  RunRow single[3]; ///< a repeated operand's row, widened (kept: no allocation per row)
};

template <typename Apply>
std::unique_ptr<MaskRows> elementwiseRows(ArrayRef<int64_t> shape, bool boolean,
                                          std::vector<BroadcastRows> operands, Apply apply) {
  return std::make_unique<ElementwiseRows<Apply>>(shape, boolean, std::move(operands), apply);
}

/// `len` elements that are `value` where i < split and `otherwise` from there.
bool appendSplit(RunRow &out, int64_t len, Wide split, int64_t value, int64_t otherwise,
                 bool boolean) {
  int64_t first = (int64_t)std::clamp<Wide>(split, 0, len);
  return appendRun(out, first, value, 0, boolean) &&
         appendRun(out, len - first, otherwise, 0, boolean);
}

/// `len` elements that are `at` at index `where` (when it lies in the
/// stretch) and `elsewhere` everywhere else.
bool appendPoint(RunRow &out, int64_t len, std::optional<Wide> where, int64_t at,
                 int64_t elsewhere, bool boolean) {
  if (!where || *where < 0 || *where >= len)
    return appendRun(out, len, elsewhere, 0, boolean);
  int64_t i = (int64_t)*where;
  return appendRun(out, i, elsewhere, 0, boolean) && appendRun(out, 1, at, 0, boolean) &&
         appendRun(out, len - i - 1, elsewhere, 0, boolean);
}

/// Where the affine `d` is zero, if at an integer index.
std::optional<Wide> zeroOf(const Affine &d) {
  if (d.slope == 0 || (-d.base) % d.slope != 0)
    return std::nullopt;
  return -d.base / d.slope;
}

/// A splat constant too large to decode: every row the same value.
class SplatRows : public MaskRows {
public:
  SplatRows(ArrayRef<int64_t> shape, bool boolean, int64_t value)
      : MaskRows(shape, boolean), value(value) {}

protected:
  bool compute(int64_t, RunRow &out) override {
    return appendRun(out, rowLength(), value, 0, boolean);
  }

private:
  int64_t value;
};

/// A reshape: row r of the result is elements [r * n, (r + 1) * n) of the
/// operand in row-major order (the operand's own row when the last dim stays).
class ReshapeRows : public MaskRows {
public:
  ReshapeRows(ArrayRef<int64_t> shape, std::unique_ptr<MaskRows> in)
      : MaskRows(shape, in->boolean), in(std::move(in)) {}

protected:
  bool compute(int64_t r, RunRow &out) override {
    int64_t n = rowLength(), m = in->rowLength();
    for (int64_t j = 0; j < n;) {
      int64_t flat = r * n + j, inRow = flat / m, at = flat % m;
      int64_t take = std::min(n - j, m - at);
      const RunRow *src = in->row(inRow);
      if (!src || !appendRange(out, *src, at, take, boolean))
        return false;
      j += take;
    }
    return true;
  }

private:
  std::unique_ptr<MaskRows> in;
};

/// A strided slice (stride > 0).
class SliceRows : public MaskRows {
public:
  SliceRows(ArrayRef<int64_t> shape, std::unique_ptr<MaskRows> in, ArrayRef<int64_t> starts,
            ArrayRef<int64_t> strides)
      : MaskRows(shape, in->boolean), in(std::move(in)), starts(starts), strides(strides) {}

protected:
  bool compute(int64_t r, RunRow &out) override {
    SmallVector<int64_t> index = rowIndex(shape, r);
    for (size_t d = 0; d < index.size(); ++d)
      index[d] = starts[d] + strides[d] * index[d];
    const RunRow *src = in->row(flatRow(in->shape, index));
    if (!src)
      return false;
    const int64_t n = rowLength(), start = starts.empty() ? 0 : starts.back(),
                  stride = strides.empty() ? 1 : strides.back();
    // Output j reads element start + stride * j: those of a source run at
    // [s0, s0 + len) are a consecutive range of j, affine again.
    int64_t s0 = 0, written = 0;
    for (const Run &run : *src) {
      Wide lo = std::max<Wide>(ceilDiv(Wide(s0) - start, stride), 0);
      Wide hi = std::min<Wide>(ceilDiv(Wide(s0) + run.len - start, stride), n);
      if (lo < hi) {
        if (lo != written)
          return false; // not in order: a malformed slice
        Wide first = Wide(run.base) + Wide(run.slope) * (start + stride * lo - s0);
        if (!appendRun(out, (int64_t)(hi - lo), first, Wide(run.slope) * stride, boolean))
          return false;
        written = (int64_t)hi;
      }
      s0 += run.len;
    }
    return written == n;
  }

private:
  std::unique_ptr<MaskRows> in;
  SmallVector<int64_t> starts, strides;
};

/// A transpose that keeps the last dim last (it permutes rows only).
class PermuteRows : public MaskRows {
public:
  PermuteRows(ArrayRef<int64_t> shape, std::unique_ptr<MaskRows> in, ArrayRef<int64_t> perm)
      : MaskRows(shape, in->boolean), in(std::move(in)), perm(perm) {}

protected:
  bool compute(int64_t r, RunRow &out) override {
    SmallVector<int64_t> index = rowIndex(shape, r), inIndex(index.size());
    for (size_t d = 0; d < index.size(); ++d)
      inIndex[perm[d]] = index[d];
    const RunRow *src = in->row(flatRow(in->shape, inIndex));
    if (!src)
      return false;
    out = *src;
    return true;
  }

private:
  std::unique_ptr<MaskRows> in;
  SmallVector<int64_t> perm;
};

/// Masks evaluated by rows up to 2^40 elements (a [T, T] mask up to 2^20
/// tokens): the work is the rows times their runs, a few per row for the
/// masks exporters compute.
constexpr int64_t kMaxMaskElements = int64_t(1) << 40;

/// All of `rows`, held whole (for a transpose that moves the last dim).
std::shared_ptr<const IntTensor> holdRows(MaskRows &rows) {
  auto t = std::make_shared<IntTensor>(rows.shape, rows.boolean);
  for (int64_t r = 0; r < rows.rows(); ++r) {
    const RunRow *row = rows.row(r);
    if (!row)
      return nullptr;
    for (const Run &run : *row)
      for (int64_t i = 0; i < run.len; ++i)
        t->push(run.base + run.slope * i);
  }
  return t;
}

/// The integer or boolean tensor `v`, built from constants by the ops a mask
/// computation uses, as rows; nullptr for anything else. Constants are held
/// whole (splats of any size as a value), every other op computes its rows
/// from its operands' rows.
std::unique_ptr<MaskRows> maskRows(Value v, DecodedConstants &decoded, unsigned depth = 0) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !isa<IntegerType>(type.getElementType()) || depth > kMaxMaskDepth ||
      !type.hasStaticShape() || type.getNumElements() > kMaxMaskElements)
    return nullptr;
  const bool isBool = type.getElementType().isInteger(1);
  DenseIntElementsAttr constant;
  if (matchPattern(v, m_Constant(&constant))) {
    if (constant.isSplat())
      return std::make_unique<SplatRows>(type.getShape(), isBool,
                                         isBool ? (int64_t)constant.getSplatValue<bool>()
                                                : constant.getSplatValue<APInt>().getSExtValue());
    std::shared_ptr<const IntTensor> values = decodeConstant(constant, type, decoded);
    return values ? std::make_unique<HeldRows>(std::move(values)) : nullptr;
  }
  Operation *op = v.getDefiningOp();
  if (!op)
    return nullptr;
  ArrayRef<int64_t> shape = type.getShape();
  auto operand = [&](unsigned i) { return maskRows(op->getOperand(i), decoded, depth + 1); };
  auto broadcastOperands = [&]() -> std::optional<std::vector<BroadcastRows>> {
    std::vector<BroadcastRows> operands;
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      std::unique_ptr<MaskRows> node = operand(i);
      if (!node)
        return std::nullopt;
      operands.emplace_back(std::move(node), shape);
    }
    return operands;
  };

  if (auto reshape = dyn_cast<ReshapeOp>(op)) {
    std::unique_ptr<MaskRows> in = operand(0);
    return in ? std::make_unique<ReshapeRows>(shape, std::move(in)) : nullptr;
  }
  if (auto slice = dyn_cast<SliceOp>(op)) {
    std::unique_ptr<MaskRows> in = operand(0);
    return in ? std::make_unique<SliceRows>(shape, std::move(in), slice.getStarts(),
                                            slice.getStrides())
              : nullptr;
  }
  if (auto transpose = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = transpose.getPerm();
    std::unique_ptr<MaskRows> in;
    if (!perm.empty() && perm.back() == (int64_t)perm.size() - 1) {
      in = operand(0);
      return in ? std::make_unique<PermuteRows>(shape, std::move(in), perm) : nullptr;
    }
    // A row of the result is a column of the operand: only a small one,
    // held whole, is read that way.
    if (type.getNumElements() > kMaxHeldElements || !(in = operand(0)))
      return nullptr;
    std::shared_ptr<const IntTensor> held = holdRows(*in);
    if (!held)
      return nullptr;
    SmallVector<int64_t> inStrides = stridesOf(held->shape), steps;
    for (int64_t p : perm)
      steps.push_back(inStrides[p]);
    return std::make_unique<HeldRows>(
        std::make_shared<const IntTensor>(gather(*held, shape, steps)));
  }
  // The stretch functions below read booleans as runs of slope 0 (false
  // for anything else: a malformed boolean).
  auto constant0 = [](const Affine &a) { return a.slope == 0; };
  if (std::optional<BoolOfFloatSelect> select = matchBoolOfFloatSelect(op)) {
    std::unique_ptr<MaskRows> cond = maskRows(select->cond, decoded, depth + 1);
    if (!cond)
      return nullptr;
    std::vector<BroadcastRows> operands;
    operands.emplace_back(std::move(cond), shape);
    int64_t onTrue = select->onTrue, onFalse = select->onFalse;
    return elementwiseRows(shape, isBool, std::move(operands),
                           [=](int64_t len, const Affine *x, RunRow &out, bool b) {
                             return constant0(x[0]) &&
                                    appendRun(out, len, x[0].base != 0 ? onTrue : onFalse, 0, b);
                           });
  }
  if (!isa<CastOp, BroadcastOp, NotOp, AndOp, EqualOp, LessOp, SubOp, AddOp, WhereOp>(op))
    return nullptr;
  std::optional<std::vector<BroadcastRows>> operands = broadcastOperands();
  if (!operands)
    return nullptr;
  auto apply = [&](auto fn) { return elementwiseRows(shape, isBool, std::move(*operands), fn); };
  auto copy = [](int64_t len, const Affine *x, RunRow &out, bool b) {
    return appendRun(out, len, x[0].base, x[0].slope, b);
  };
  if (isa<CastOp>(op)) {
    if (isBool) // a != 0
      return apply([](int64_t len, const Affine *x, RunRow &out, bool b) {
        if (x[0].slope == 0)
          return appendRun(out, len, x[0].base != 0, 0, b);
        return appendPoint(out, len, zeroOf(x[0]), 0, 1, b);
      });
    return apply(copy);
  }
  if (isa<BroadcastOp>(op))
    return apply(copy);
  if (isa<NotOp>(op))
    return apply([=](int64_t len, const Affine *x, RunRow &out, bool b) {
      return constant0(x[0]) && appendRun(out, len, x[0].base == 0, 0, b);
    });
  if (isa<AndOp>(op))
    return apply([=](int64_t len, const Affine *x, RunRow &out, bool b) {
      return constant0(x[0]) && constant0(x[1]) &&
             appendRun(out, len, x[0].base != 0 && x[1].base != 0, 0, b);
    });
  if (isa<EqualOp>(op))
    return apply([](int64_t len, const Affine *x, RunRow &out, bool b) {
      Affine d{x[0].base - x[1].base, x[0].slope - x[1].slope};
      if (d.slope == 0)
        return appendRun(out, len, d.base == 0, 0, b);
      return appendPoint(out, len, zeroOf(d), 1, 0, b);
    });
  if (isa<LessOp>(op))
    return apply([](int64_t len, const Affine *x, RunRow &out, bool b) {
      // a < b where d = a - b = base + slope * i < 0.
      Affine d{x[0].base - x[1].base, x[0].slope - x[1].slope};
      if (d.slope == 0)
        return appendRun(out, len, d.base < 0, 0, b);
      if (d.slope > 0) // true for i < -base / slope
        return appendSplit(out, len, ceilDiv(-d.base, d.slope), 1, 0, b);
      // false up to i <= base / -slope, true after
      return appendSplit(out, len, floorDiv(d.base, -d.slope) + 1, 0, 1, b);
    });
  if (isa<SubOp>(op))
    return apply([](int64_t len, const Affine *x, RunRow &out, bool b) {
      return appendRun(out, len, x[0].base - x[1].base, x[0].slope - x[1].slope, b);
    });
  if (isa<AddOp>(op))
    return apply([](int64_t len, const Affine *x, RunRow &out, bool b) {
      return appendRun(out, len, x[0].base + x[1].base, x[0].slope + x[1].slope, b);
    });
  return apply([=](int64_t len, const Affine *x, RunRow &out, bool b) { // where
    const Affine &pick = x[0].base != 0 ? x[1] : x[2];
    return constant0(x[0]) && appendRun(out, len, pick.base, pick.slope, b);
  });
}

/// The attention window of `mask`, broadcast to scores [..., tq, tk], when it
/// allows exactly the keys p - window < j <= p to the query at key position
/// p = i + (tk - tq) in every leading position (causal, aligned to the end as
/// pmesh.attention defines it): 0 for plain causal (no lower limit), the
/// window for a sliding-window band; nullopt for any other pattern.
/// `trueMeansVisible` says whether true entries are the visible keys
/// (where(mask, s, -big)) or the hidden ones (where(mask, -big, s), e.g.
/// masked_fill(triu(1), -inf)).
std::optional<int64_t> causalWindow(MaskRows &mask, int64_t tq, int64_t tk,
                                    bool trueMeansVisible) {
  int64_t rank = mask.shape.size();
  int64_t mq = rank >= 2 ? mask.shape[rank - 2] : 1;
  int64_t mk = rank >= 1 ? mask.shape[rank - 1] : 1;
  if (!mask.boolean || (mq != 1 && mq != tq) || (mk != 1 && mk != tk) || tq < 1 || tk < 1 ||
      mask.rows() < 1)
    return std::nullopt;
  // The row query i of leading position l reads, as runs over the tk keys (a
  // row of one element stands for all of them); nullptr if it cannot be read.
  RunRow widened;
  auto rowOf = [&](int64_t l, int64_t i) -> const RunRow * {
    const RunRow *row = mask.row(l * mq + (mq == 1 ? 0 : i));
    if (!row || row->empty() || mk != 1)
      return row;
    widened = {Run{tk, row->front().base, 0}};
    return &widened;
  };
  auto visible = [&](const Run &run) { return (run.base != 0) == trueMeansVisible; };
  // The last query (position tk - 1) sees the window's width of keys, or
  // every key when the band is at least as wide as the sequence.
  const RunRow *last = rowOf(0, tq - 1);
  if (!last)
    return std::nullopt;
  int64_t lastRowKeys = 0;
  for (const Run &run : *last)
    lastRowKeys += visible(run) ? run.len : 0;
  int64_t window = lastRowKeys == tk ? 0 : lastRowKeys;
  if (lastRowKeys == 0)
    return std::nullopt;
  int64_t leading = mask.rows() / mq;
  for (int64_t l = 0; l < leading; ++l)
    for (int64_t i = 0; i < tq; ++i) {
      const RunRow *row = rowOf(l, i);
      if (!row)
        return std::nullopt;
      // Query i sees exactly the keys first..p: a visible run lies inside
      // that range, a hidden one outside it.
      int64_t p = i + (tk - tq), first = window == 0 ? 0 : p - window + 1;
      int64_t start = 0;
      for (const Run &run : *row) {
        int64_t end = start + run.len - 1;
        bool inside = start >= first && end <= p, outside = end < first || start > p;
        if (run.slope != 0 || !(visible(run) ? inside : outside))
          return std::nullopt;
        start = end + 1;
      }
      if (start != tk)
        return std::nullopt;
    }
  return window;
}

/// Both bands hide what either hides: the narrower window (0 is none).
int64_t intersectWindows(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return std::max(a, b);
  return std::min(a, b);
}

//===----------------------------------------------------------------------===//
// The attention chain
//===----------------------------------------------------------------------===//

/// The causal fill must lie so far below any real score that exp(fill - max)
/// vanishes whatever the scores are: exporters write finfo.min, -inf or -1e9.
/// A -1e4 fill (old HF, fp16 models) only hides keys while the scores stay
/// well above it, so it is not raised.
constexpr double kMaxMaskFill = -1e9;

/// An additive mask constant of 0 on the visible keys and a mask fill on the
/// hidden ones, as its 0/1 visibility; nullopt for any other value (which
/// would shift the scores). PyTorch 2's exports of transformers' models mask
/// this way.
std::optional<IntTensor> additiveMaskVisibility(Attribute constant) {
  auto attr = dyn_cast<DenseFPElementsAttr>(constant);
  if (!attr || attr.getNumElements() > kMaxConstantBoolMaskElements)
    return std::nullopt;
  IntTensor visible(attr.getType().getShape(), /*boolean=*/true);
  bool additive = forEachFloat(attr, [&](double value) {
    if (value == 0)
      visible.push(1);
    else if (!std::isnan(value) && value <= kMaxMaskFill)
      visible.push(0);
    else
      return false;
    return true;
  });
  if (!additive)
    return std::nullopt;
  return visible;
}

/// What lies between the softmax and the q @ k^T matmul.
struct ScoreChain {
  MatMulOp qk;
  double scale = 1.0;  // product of the scalar factors applied to the scores
  Value additiveMask;  // the `+ mask` operand, if any
  Value causalCond;    // the where condition, if any
  bool condTrueMeansVisible = true;
  double softcap = 0.0; // softcap * tanh(scores / softcap) before the masks, if > 0
  /// Masking may cross reshapes of the leading dims (Bloom adds its ALiBi
  /// bias to [B * H, T, T] scores, then its causal mask to [B, H, T, T]; XGLM
  /// masks in [B, H, T, T] between two reshapes): the additive masks found
  /// before the last one (nearer the softmax) are in another layout than the
  /// scores' and must be constant causal bands, to be dropped.
  int reshapes = 0;
  SmallVector<Value, 2> outerMasks;
};

/// Reshapes the masking may cross (Bloom needs one, XGLM two).
constexpr int kMaxMaskReshapes = 2;

/// A reshape that keeps the last two dims (splits or merges leading ones).
bool reshapesLeadingDimsOnly(ReshapeOp reshape) {
  ArrayRef<int64_t> in = cast<RankedTensorType>(reshape.getInput().getType()).getShape();
  ArrayRef<int64_t> out = cast<RankedTensorType>(reshape.getType()).getShape();
  return in.size() >= 2 && out.size() >= 2 && in.take_back(2) == out.take_back(2);
}

/// Matches the scores chain from the softmax input `v` down to the matmul.
/// Masking (where, add) comes after the scaling: a factor applied after the
/// mask would scale the mask too, which `scale` cannot express. A soft cap,
/// c * tanh(x) with the scaling inside x (Gemma 2), sits between the two.
/// Every value on the chain must feed only the next step.
bool matchScoreChain(Value v, ScoreChain &chain, bool maskingAllowed) {
  if (!v.hasOneUse())
    return false;
  Operation *op = v.getDefiningOp();
  if (auto mm = dyn_cast_or_null<MatMulOp>(op)) {
    if (mm.getTransposeA())
      return false;
    if (Value bias = mm.getBias()) {
      // An additive mask of shape [Tk] looks like a bias and may already have
      // been folded into the matmul; it is a mask all the same, provided no
      // factor scaled it afterwards.
      if (chain.additiveMask || chain.scale != 1.0 || chain.softcap != 0.0)
        return false;
      chain.additiveMask = bias;
    }
    chain.qk = mm;
    return true;
  }
  if (auto scaling = matchScaling(op)) {
    // c * tanh(scale / c * q @ k^T): the cap c, and the scale inside it.
    auto tanh = scaling->other.getDefiningOp<TanhOp>();
    if (tanh && scaling->other.hasOneUse() && chain.scale == 1.0 && chain.softcap == 0.0 &&
        scaling->value > 0.0) {
      ScoreChain saved = chain;
      chain.softcap = scaling->value;
      if (matchScoreChain(tanh.getInput(), chain, /*maskingAllowed=*/false)) {
        chain.scale *= chain.softcap;
        return true;
      }
      chain = saved;
    }
    chain.scale *= scaling->value;
    return matchScoreChain(scaling->other, chain, /*maskingAllowed=*/false);
  }
  if (auto tanh = dyn_cast_or_null<TanhOp>(op)) {
    // A bare tanh is the cap 1: c * tanh(x / c) whose two factors of 1 the
    // exporter's optimizer folded away (Gemma 2 with a cap of 1).
    if (chain.scale != 1.0 || chain.softcap != 0.0)
      return false;
    ScoreChain saved = chain;
    chain.softcap = 1.0;
    if (matchScoreChain(tanh.getInput(), chain, /*maskingAllowed=*/false))
      return true;
    chain = saved;
    return false;
  }
  if (!maskingAllowed)
    return false;

  if (auto reshape = dyn_cast_or_null<ReshapeOp>(op)) {
    if (chain.reshapes == kMaxMaskReshapes || !reshapesLeadingDimsOnly(reshape))
      return false;
    ScoreChain saved = chain;
    ++chain.reshapes;
    if (chain.additiveMask)
      chain.outerMasks.push_back(chain.additiveMask);
    chain.additiveMask = nullptr;
    if (matchScoreChain(reshape.getInput(), chain, /*maskingAllowed=*/true))
      return true;
    chain = saved;
    return false;
  }
  if (auto max = dyn_cast_or_null<MaxOp>(op)) {
    // max(masked scores, finfo.min) (XGLM, BART-style code) keeps the hidden
    // keys hidden and the real scores as they are: a no-op for the attention.
    for (auto [scores, floor] :
         {std::pair(max.getLhs(), max.getRhs()), std::pair(max.getRhs(), max.getLhs())}) {
      std::optional<double> floorValue = getSplatFloat(floor);
      if (!floorValue || !(*floorValue <= kMaxMaskFill) || scores.getType() != max.getType())
        continue;
      ScoreChain saved = chain;
      if (matchScoreChain(scores, chain, /*maskingAllowed=*/true))
        return true;
      chain = saved;
    }
    return false;
  }
  if (auto where = dyn_cast_or_null<WhereOp>(op)) {
    if (chain.causalCond)
      return false;
    for (bool trueMeansVisible : {true, false}) {
      Value scores = trueMeansVisible ? where.getOnTrue() : where.getOnFalse();
      Value fill = trueMeansVisible ? where.getOnFalse() : where.getOnTrue();
      std::optional<double> fillValue = getSplatFloat(fill);
      if (!fillValue || !(*fillValue <= kMaxMaskFill) || scores.getType() != where.getType())
        continue;
      ScoreChain saved = chain;
      chain.causalCond = where.getCond();
      chain.condTrueMeansVisible = trueMeansVisible;
      if (matchScoreChain(scores, chain, /*maskingAllowed=*/true))
        return true;
      chain = saved;
    }
    return false;
  }
  if (auto add = dyn_cast_or_null<AddOp>(op)) {
    // Either operand may be the scores; the other must broadcast into them.
    // A zero constant (the zeros GPT-NeoX-Japanese's baddbmm starts from)
    // changes no probability: looked through rather than taken for a mask.
    for (auto [scores, mask] :
         {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      if (scores.getType() != add.getType())
        continue;
      std::optional<double> splat = getSplatFloat(mask);
      bool zero = splat && *splat == 0.0;
      // Known divergence: where(tril, s, finfo.min) + mask with a mask that
      // hides every visible key of a query row (left padding) gives that row
      // finite ties with the hidden keys, so the decomposed graph attends to
      // future keys there, while causal attention never does. Only such rows
      // (whose outputs are padding) differ.
      if (!zero && chain.additiveMask)
        continue;
      ScoreChain saved = chain;
      if (!zero)
        chain.additiveMask = mask;
      if (matchScoreChain(scores, chain, /*maskingAllowed=*/true))
        return true;
      chain = saved;
    }
    return false;
  }
  return false;
}

/// A q or k^T operand with the scalar factors peeled off: the operand equals
/// transpose(base, perm) * factor. Transposes are looked through only on the
/// way to a factor (a transpose not hiding one stays part of the base).
struct PeeledOperand {
  Value base;
  SmallVector<int64_t> perm;
  double factor = 1.0;
};

PeeledOperand peelFactors(Value v) {
  int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
  auto identity = llvm::seq<int64_t>(0, rank);
  SmallVector<int64_t> perm(identity.begin(), identity.end());
  PeeledOperand result{v, perm, 1.0};
  double factor = 1.0;
  while (v.hasOneUse()) {
    Operation *op = v.getDefiningOp();
    if (auto transpose = dyn_cast_or_null<TransposeOp>(op)) {
      perm = composePerms(transpose.getPerm(), perm);
      v = transpose.getInput();
      continue;
    }
    auto scaling = matchScaling(op);
    if (!scaling)
      break;
    factor *= scaling->value;
    v = scaling->other;
    result = {v, perm, factor};
  }
  return result;
}

/// softmax(scale * q @ k^T [masks]) @ v -> pmesh.attention q, k, v.
///
/// Rooted at the final matmul. k is rebuilt as [..., Tk, D] from whatever
/// produced k^T (transpose_b, a swap of the last two dims, or a transpose that
/// splits heads straight into [B, H, D, T]); only a mask that evaluates to the
/// exact causal pattern sets `causal`, any other where stays unraised.
struct RaiseAttention : OpRewritePattern<MatMulOp> {
  RaiseAttention(MLIRContext *context, MaskWindowMemo *memo)
      : OpRewritePattern(context), memo(memo) {}
  MaskWindowMemo *memo; // may be null
  // One pattern set serves one context (--pmesh-raise builds it per run); the
  // lock keeps the cache sound if a pass ever applies it on several threads.
  mutable DecodedConstants decoded;
  /// The causal window of an additive mask constant for (tq, tk) (nullopt:
  /// not a causal band), by its attribute: every layer adds the same one.
  mutable std::map<std::tuple<const void *, int64_t, int64_t>, std::optional<int64_t>>
      causalMasks;
  mutable std::mutex decodedMutex;

  /// The causal window of the i1 mask `cond` broadcast to scores [..., tq,
  /// tk] (nullopt: not a causal band), evaluated element by element.
  std::optional<int64_t> conditionWindow(Value cond, int64_t tq, int64_t tk,
                                         bool trueMeansVisible) const {
    if (tq > tk) // some rows would hide every key: no causal attention
      return std::nullopt;
    std::optional<MaskWindowMemo::Key> key;
    if (auto result = dyn_cast<OpResult>(cond); result && memo) {
      key = MaskWindowMemo::Key{result.getOwner(), result.getResultNumber(), tq, tk,
                                trueMeansVisible};
      if (auto known = memo->lookup(*key))
        return *known;
    }
    std::optional<int64_t> window;
    {
      std::lock_guard<std::mutex> lock(decodedMutex);
      if (std::unique_ptr<MaskRows> mask = maskRows(cond, decoded))
        window = causalWindow(*mask, tq, tk, trueMeansVisible);
    }
    if (key)
      memo->record(*key, window);
    return window;
  }

  LogicalResult matchAndRewrite(MatMulOp pv, PatternRewriter &rewriter) const override {
    if (pv.getBias() || pv.getTransposeA() || pv.getTransposeB())
      return rewriter.notifyMatchFailure(pv, "not a plain p @ v");
    // The probabilities, possibly reshaped in their leading dims (Bloom) or
    // guarded against NaN rows (PyTorch's SDPA).
    std::optional<Value> guarded = matchNaNGuard(pv.getA());
    auto softmax = guarded ? guarded->getDefiningOp<SoftmaxOp>()
                           : pv.getA().getDefiningOp<SoftmaxOp>();
    if (auto reshape = pv.getA().getDefiningOp<ReshapeOp>();
        reshape && reshape->hasOneUse() && reshapesLeadingDimsOnly(reshape))
      softmax = reshape.getInput().getDefiningOp<SoftmaxOp>();
    if (!softmax || (!guarded && !softmax->hasOneUse()))
      return rewriter.notifyMatchFailure(pv, "not softmax(...) @ v");
    auto scoresType = cast<RankedTensorType>(softmax.getType());
    int64_t rank = scoresType.getRank();
    if (shapes::normalizeAxis(static_cast<int64_t>(softmax.getAxis()), rank) != rank - 1)
      return rewriter.notifyMatchFailure(pv, "softmax is not over the keys");

    ScoreChain chain;
    if (!matchScoreChain(softmax.getInput(), chain, /*maskingAllowed=*/true))
      return rewriter.notifyMatchFailure(pv, "softmax input is not masked, scaled q @ k^T");
    // The attention is built in the layout of the probabilities pv reads. That
    // is the scores' matmul's, or, when the masking crossed reshapes of the
    // leading dims (GPT-NeoX-Japanese computes the scores as [B * H, T, T] and
    // masks and normalizes them as [B, H, T, T]), another split of the same
    // leading dims: q and k are then reshaped to it, which leaves every
    // (query, key) pair where it was. Without a reshape, differing types
    // mean the scores were broadcast after the matmul.
    auto probsType = cast<RankedTensorType>(pv.getA().getType());
    ArrayRef<int64_t> scoresLeading = chain.qk.getType().getShape().drop_back(2);
    ArrayRef<int64_t> attnLeading = probsType.getShape().drop_back(2);
    const bool relayout = chain.qk.getType() != probsType;
    if (relayout && (chain.reshapes == 0 ||
                     probsType.getShape().take_back(2) != chain.qk.getType().getShape().take_back(2) ||
                     shapes::numElements(scoresLeading) != shapes::numElements(attnLeading)))
      return rewriter.notifyMatchFailure(pv, "scores are broadcast after the matmul");

    // Causality, element by element.
    int64_t tq = scoresType.getDimSize(rank - 2), tk = scoresType.getDimSize(rank - 1);
    int64_t window = 0;
    if (chain.causalCond) {
      std::optional<int64_t> condWindow =
          conditionWindow(chain.causalCond, tq, tk, chain.condTrueMeansVisible);
      if (!condWindow)
        return rewriter.notifyMatchFailure(pv, "where mask is not a constant causal band");
      window = *condWindow;
    }

    // An additive mask of 0 and the fill in a causal band is causal attention
    // (which skips the hidden keys instead of adding to them); after a causal
    // where it narrows the band (GPT-Neo's local layers write both).
    bool causal = static_cast<bool>(chain.causalCond);
    auto additiveWindow = [&](Value root) -> std::optional<int64_t> {
      Attribute key;
      if (matchPattern(root, m_Constant(&key))) {
        std::lock_guard<std::mutex> lock(decodedMutex);
        auto [it, added] = causalMasks.try_emplace({key.getAsOpaquePointer(), tq, tk});
        if (added) {
          std::optional<IntTensor> visible = additiveMaskVisibility(key);
          if (visible) {
            HeldRows rows(std::make_shared<const IntTensor>(std::move(*visible)));
            it->second = causalWindow(rows, tq, tk, /*trueMeansVisible=*/true);
          }
        }
        return it->second;
      }
      // where(visible, 0, fill) computed from positions (transformers' masks
      // past the importer's folding limit).
      auto where = root.getDefiningOp<WhereOp>();
      if (!where)
        return std::nullopt;
      std::optional<double> onTrue = getSplatFloat(where.getOnTrue()),
                            onFalse = getSplatFloat(where.getOnFalse());
      if (!onTrue || !onFalse)
        return std::nullopt;
      if (*onTrue == 0.0 && *onFalse <= kMaxMaskFill)
        return conditionWindow(where.getCond(), tq, tk, /*trueMeansVisible=*/true);
      if (*onFalse == 0.0 && *onTrue <= kMaxMaskFill)
        return conditionWindow(where.getCond(), tq, tk, /*trueMeansVisible=*/false);
      return std::nullopt;
    };
    auto dropIfCausalBand = [&](Value mask) {
      if (!mask || tq > tk)
        return false;
      Value root = mask;
      while (auto broadcast = root.getDefiningOp<BroadcastOp>())
        root = broadcast.getInput();
      std::optional<int64_t> band = additiveWindow(root);
      if (!band)
        return false;
      window = causal ? intersectWindows(window, *band) : *band;
      causal = true;
      return true;
    };
    // Masks on both sides of a reshape must be causal bands (dropped), but for
    // the last one found, in the scores' layout, when that is the attention's.
    for (Value outer : chain.outerMasks)
      if (!dropIfCausalBand(outer))
        return rewriter.notifyMatchFailure(pv, "mask after a reshape is no causal band");
    Value additiveMask = chain.additiveMask;
    if (dropIfCausalBand(additiveMask))
      additiveMask = nullptr;
    if (relayout && additiveMask)
      return rewriter.notifyMatchFailure(pv, "mask in the scores' layout, which is not the "
                                             "probabilities'");
    // The guard is a no-op when every query sees a key: causal attention (a
    // band of at least one key, aligned so the query's own position is in
    // it) with no other mask.
    if (guarded && (!causal || additiveMask))
      return rewriter.notifyMatchFailure(pv, "NaN guard over a mask that may hide whole rows");

    PeeledOperand q = peelFactors(chain.qk.getA());
    PeeledOperand kT = peelFactors(chain.qk.getB());
    // The matmul reads k^T (or k itself with transpose_b); attention wants k.
    SmallVector<int64_t> kPerm = chain.qk.getTransposeB() ? kT.perm : swapLastTwo(kT.perm);
    double scale = chain.scale * q.factor * kT.factor;
    if (!std::isfinite(scale) || !std::isfinite((float)scale))
      return rewriter.notifyMatchFailure(pv, "scale is not a finite f32");
    if (!std::isfinite((float)chain.softcap) || (chain.softcap > 0 && (float)chain.softcap == 0.0f))
      return rewriter.notifyMatchFailure(pv, "soft cap is not a positive finite f32");

    // Check the shapes before building anything: a failed pattern must leave
    // the IR untouched.
    std::string why;
    auto qShape = shapes::transpose(
        cast<RankedTensorType>(q.base.getType()).getShape(), q.perm, why);
    auto kShape = shapes::transpose(
        cast<RankedTensorType>(kT.base.getType()).getShape(), kPerm, why);
    auto vType = cast<RankedTensorType>(pv.getB().getType());
    if (!qShape || !kShape)
      return rewriter.notifyMatchFailure(pv, why);
    // Multi-query and grouped-query attention written without repeat_kv
    // (Falcon): k^T and v keep one head (or one per group) and the matmuls
    // broadcast them over q's heads. pmesh.attention wants equal leading dims,
    // so such an operand is broadcast first, which materializes what Llama's
    // exports repeat themselves (Expand); its gradient sums over the copies.
    auto broadcastShape = [&](ArrayRef<int64_t> shape, ArrayRef<int64_t> leading)
        -> std::optional<SmallVector<int64_t>> {
      SmallVector<int64_t> full(leading.begin(), leading.end());
      full.append(shape.end() - std::min<size_t>(shape.size(), 2), shape.end());
      if (shape.size() < 2 || !shapes::broadcastsTo(shape, full))
        return std::nullopt;
      return full;
    };
    // q and k broadcast in the scores' layout, then (relayout) take the
    // attention's leading dims; v is read in the attention's layout.
    auto qFull = broadcastShape(*qShape, scoresLeading),
         kFull = broadcastShape(*kShape, scoresLeading),
         vFull = broadcastShape(vType.getShape(), attnLeading);
    if (!qFull || !kFull || !vFull)
      return rewriter.notifyMatchFailure(pv, "q, k or v does not broadcast to the scores' leading dims");
    auto inAttnLayout = [&](ArrayRef<int64_t> full) {
      SmallVector<int64_t> shape(attnLeading.begin(), attnLeading.end());
      shape.append(full.end() - 2, full.end());
      return shape;
    };
    SmallVector<int64_t> qAttn = inAttnLayout(*qFull), kAttn = inAttnLayout(*kFull);
    std::optional<ArrayRef<int64_t>> maskShape;
    if (additiveMask) {
      auto maskType = cast<RankedTensorType>(additiveMask.getType());
      if (maskType.getElementType() != scoresType.getElementType())
        return rewriter.notifyMatchFailure(pv, "mask element type differs");
      maskShape = maskType.getShape();
    }
    auto outShape = shapes::attention(qAttn, kAttn, *vFull, maskShape, why);
    if (!outShape || ArrayRef<int64_t>(*outShape) != pv.getType().getShape())
      return rewriter.notifyMatchFailure(pv, "q, k, v do not form an attention: " + why);
    Type elt = scoresType.getElementType();
    if (cast<RankedTensorType>(q.base.getType()).getElementType() != elt ||
        cast<RankedTensorType>(kT.base.getType()).getElementType() != elt ||
        vType.getElementType() != elt)
      return rewriter.notifyMatchFailure(pv, "element types differ");

    Location loc = pv.getLoc();
    auto broadcastIfNeeded = [&](Value value, ArrayRef<int64_t> full) -> Value {
      if (cast<RankedTensorType>(value.getType()).getShape() == full)
        return value;
      return rewriter.create<BroadcastOp>(loc, RankedTensorType::get(full, elt), value);
    };
    auto reshapeIfNeeded = [&](Value value, ArrayRef<int64_t> shape) -> Value {
      if (cast<RankedTensorType>(value.getType()).getShape() == shape)
        return value;
      return rewriter.create<ReshapeOp>(loc, RankedTensorType::get(shape, elt), value);
    };
    Value qValue = reshapeIfNeeded(
        broadcastIfNeeded(buildTranspose(rewriter, loc, q.base, q.perm), *qFull), qAttn);
    Value kValue = reshapeIfNeeded(
        broadcastIfNeeded(buildTranspose(rewriter, loc, kT.base, kPerm), *kFull), kAttn);
    Value vValue = broadcastIfNeeded(pv.getB(), *vFull);
    rewriter.replaceOpWithNewOp<AttentionOp>(
        pv, pv.getType(), qValue, kValue, vValue, additiveMask,
        rewriter.getF32FloatAttr(static_cast<float>(scale)), rewriter.getBoolAttr(causal),
        rewriter.getI64IntegerAttr(window),
        rewriter.getF32FloatAttr(static_cast<float>(chain.softcap)));
    return success();
  }
};

} // namespace

void pipemesh::raise::populateRaiseAttentionPatterns(RewritePatternSet &patterns,
                                                     MaskWindowMemo *memo) {
  patterns.add<RaiseAttention>(patterns.getContext(), memo);
}
