//===- Kernels.cpp - reference semantics of the pmesh ops -----------------===//
//
// Every kernel is written as the formula it implements, one output element at
// a time, with explicit index arithmetic. Speed does not matter here (tiny
// models only); being obviously right does.
//
//===----------------------------------------------------------------------===//
#include "Kernels.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace pipemesh::interp {

//===----------------------------------------------------------------------===//
// Tensors, element types and index arithmetic
//===----------------------------------------------------------------------===//

bool Tensor::isFloat() const { return isa<FloatType>(elementType); }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

Tensor Tensor::zeros(Type elementType, llvm::ArrayRef<int64_t> shape) {
  Tensor t;
  t.elementType = elementType;
  t.shape.assign(shape.begin(), shape.end());
  if (t.isFloat())
    t.f.assign(t.numel(), 0.0);
  else
    t.i.assign(t.numel(), 0);
  return t;
}

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? "x" : "") + std::to_string(shape[d]);
  return s;
}

static std::string listStr(llvm::ArrayRef<int64_t> values) {
  std::string s = "[";
  for (size_t d = 0; d < values.size(); ++d)
    s += (d ? ", " : "") + std::to_string(values[d]);
  return s + "]";
}

double roundToFloat(Type t, double v) {
  auto ft = mlir::cast<FloatType>(t);
  if (ft.getWidth() == 64)
    return v;
  llvm::APFloat x(v);
  bool losesInfo;
  x.convert(ft.getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  x.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return x.convertToDouble();
}

int64_t wrapToInt(Type t, int64_t v) {
  unsigned width = mlir::cast<IntegerType>(t).getWidth();
  if (width == 1)
    return v != 0;
  if (width >= 64)
    return v;
  // Two's complement wrap to `width` bits, then sign-extend (signless ints
  // are read as signed, like ONNX's int32/int64).
  uint64_t mask = (uint64_t(1) << width) - 1;
  uint64_t u = uint64_t(v) & mask;
  if (u >> (width - 1))
    u |= ~mask;
  return int64_t(u);
}

/// Stores double `v` at flat index k of `t`, rounded/wrapped to its type.
static void store(Tensor &t, int64_t k, double v) {
  if (t.isFloat())
    t.f[k] = v;
  else
    t.i[k] = wrapToInt(t.elementType, (int64_t)v);
}

/// Copies element ks of `src` to element kd of `dst` (same element type).
static void copyElement(const Tensor &src, int64_t ks, Tensor &dst, int64_t kd) {
  if (src.isFloat())
    dst.f[kd] = src.f[ks];
  else
    dst.i[kd] = src.i[ks];
}

/// Multi-index of row-major flat index `flat` in `shape`.
static Shape unravel(int64_t flat, llvm::ArrayRef<int64_t> shape) {
  Shape idx(shape.size(), 0);
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

/// Row-major flat index of multi-index `idx` in `shape`.
static int64_t ravel(llvm::ArrayRef<int64_t> idx, llvm::ArrayRef<int64_t> shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + idx[d];
  return flat;
}

/// Flat index into a tensor of shape `in` that numpy-broadcasts to the shape
/// `outIdx` indexes: dims are right-aligned and size-1 dims repeat.
static int64_t broadcastIndex(llvm::ArrayRef<int64_t> outIdx, llvm::ArrayRef<int64_t> in) {
  size_t lead = outIdx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d)
    flat = flat * in[d] + (in[d] == 1 ? 0 : outIdx[lead + d]);
  return flat;
}

std::optional<Shape> broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) {
    int64_t da = d + a.size() < rank ? 1 : a[d + a.size() - rank];
    int64_t db = d + b.size() < rank ? 1 : b[d + b.size() - rank];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[d] = da == 1 ? db : da;
  }
  return out;
}

/// True when `from` numpy-broadcasts to exactly `to`.
static bool broadcastsTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to) {
  if (from.size() > to.size())
    return false;
  size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1 && from[d] != to[lead + d])
      return false;
  return true;
}

static std::optional<int64_t> normalizeAxis(int64_t axis, size_t rank) {
  int64_t r = (int64_t)rank;
  if (axis < -r || axis >= r)
    return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

static int64_t wrappingAdd(int64_t x, int64_t y) { return int64_t(uint64_t(x) + uint64_t(y)); }
static int64_t wrappingSub(int64_t x, int64_t y) { return int64_t(uint64_t(x) - uint64_t(y)); }
static int64_t wrappingMul(int64_t x, int64_t y) { return int64_t(uint64_t(x) * uint64_t(y)); }

std::optional<Tensor> binary(BinaryKind kind, const Tensor &a, const Tensor &b, Type resultType,
                             std::string &why) {
  if (a.elementType != b.elementType) {
    why = "operand element types differ";
    return std::nullopt;
  }
  auto shape = broadcastShapes(a.shape, b.shape);
  if (!shape) {
    why = "shapes " + shapeStr(a.shape) + " and " + shapeStr(b.shape) + " do not broadcast";
    return std::nullopt;
  }
  if (kind == BinaryKind::And && a.isFloat()) {
    why = "logical and of floats";
    return std::nullopt;
  }
  Tensor out = Tensor::zeros(resultType, *shape);
  for (int64_t k = 0; k < out.numel(); ++k) {
    Shape idx = unravel(k, *shape);
    int64_t ka = broadcastIndex(idx, a.shape), kb = broadcastIndex(idx, b.shape);
    if (a.isFloat()) {
      double x = a.f[ka], y = b.f[kb], r = 0;
      switch (kind) {
      case BinaryKind::Add: r = x + y; break;
      case BinaryKind::Sub: r = x - y; break;
      case BinaryKind::Mul: r = x * y; break;
      case BinaryKind::Div: r = x / y; break;
      case BinaryKind::Pow: r = std::pow(x, y); break;
      case BinaryKind::Max: r = (std::isnan(x) || std::isnan(y)) ? NAN : std::max(x, y); break;
      case BinaryKind::Equal: r = x == y; break;
      case BinaryKind::Less: r = x < y; break;
      case BinaryKind::And: break; // rejected above
      }
      store(out, k, r);
      continue;
    }
    int64_t x = a.i[ka], y = b.i[kb], r = 0;
    switch (kind) {
    case BinaryKind::Add: r = wrappingAdd(x, y); break;
    case BinaryKind::Sub: r = wrappingSub(x, y); break;
    case BinaryKind::Mul: r = wrappingMul(x, y); break;
    case BinaryKind::Div:
      // Integer division truncates toward zero (C++ and ONNX Runtime).
      if (y == 0) {
        why = "integer division by zero";
        return std::nullopt;
      }
      r = (y == -1) ? wrappingSub(0, x) : x / y;
      break;
    case BinaryKind::Pow:
      if (y < 0) {
        why = "integer pow with a negative exponent";
        return std::nullopt;
      }
      r = 1; // exponentiation by squaring, wrapping like the other int ops
      for (int64_t base = x, e = y; e; e >>= 1, base = wrappingMul(base, base))
        if (e & 1)
          r = wrappingMul(r, base);
      break;
    case BinaryKind::Max: r = std::max(x, y); break;
    case BinaryKind::Equal: r = x == y; break;
    case BinaryKind::Less: r = x < y; break;
    case BinaryKind::And: r = (x != 0) && (y != 0); break;
    }
    out.i[k] = wrapToInt(resultType, r);
  }
  return out;
}

Tensor unary(UnaryKind kind, const Tensor &x) {
  Tensor out = Tensor::zeros(x.elementType, x.shape);
  for (int64_t k = 0; k < x.numel(); ++k) {
    if (!x.isFloat()) {
      out.i[k] = kind == UnaryKind::Not ? int64_t(x.i[k] == 0)
                                        : wrapToInt(x.elementType, wrappingSub(0, x.i[k]));
      continue;
    }
    double v = x.f[k];
    switch (kind) {
    case UnaryKind::Neg: out.f[k] = -v; break;
    case UnaryKind::Sqrt: out.f[k] = std::sqrt(v); break;
    case UnaryKind::Tanh: out.f[k] = std::tanh(v); break;
    case UnaryKind::Erf: out.f[k] = std::erf(v); break;
    case UnaryKind::Exp: out.f[k] = std::exp(v); break;
    case UnaryKind::Log: out.f[k] = std::log(v); break;
    case UnaryKind::Sigmoid: out.f[k] = 1.0 / (1.0 + std::exp(-v)); break;
    case UnaryKind::Not: out.f[k] = v == 0; break; // the verifier allows only i1
    }
  }
  return out;
}

std::optional<Tensor> cast(const Tensor &x, Type to, std::string &why) {
  Tensor out = Tensor::zeros(to, x.shape);
  for (int64_t k = 0; k < x.numel(); ++k) {
    if (out.isFloat()) {
      out.f[k] = roundToFloat(to, x.at(k));
    } else if (!x.isFloat()) {
      out.i[k] = wrapToInt(to, x.i[k]);
    } else if (mlir::cast<IntegerType>(to).getWidth() == 1) {
      out.i[k] = x.f[k] != 0.0;
    } else {
      double v = std::trunc(x.f[k]);
      if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) {
        why = "cannot cast " + std::to_string(x.f[k]) + " (element " + std::to_string(k) +
              ") to an integer";
        return std::nullopt;
      }
      out.i[k] = wrapToInt(to, (int64_t)v);
    }
  }
  return out;
}

std::optional<Tensor> where(const Tensor &cond, const Tensor &onTrue, const Tensor &onFalse,
                            std::string &why) {
  if (cond.isFloat() || onTrue.elementType != onFalse.elementType) {
    why = "where needs an i1 condition and values of one element type";
    return std::nullopt;
  }
  auto values = broadcastShapes(onTrue.shape, onFalse.shape);
  auto shape = values ? broadcastShapes(cond.shape, *values) : std::nullopt;
  if (!shape) {
    why = "shapes " + shapeStr(cond.shape) + ", " + shapeStr(onTrue.shape) + ", " +
          shapeStr(onFalse.shape) + " do not broadcast";
    return std::nullopt;
  }
  Tensor out = Tensor::zeros(onTrue.elementType, *shape);
  for (int64_t k = 0; k < out.numel(); ++k) {
    Shape idx = unravel(k, *shape);
    bool c = cond.i[broadcastIndex(idx, cond.shape)] != 0;
    const Tensor &src = c ? onTrue : onFalse;
    copyElement(src, broadcastIndex(idx, src.shape), out, k);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

std::optional<Tensor> reduce(const Tensor &x, llvm::ArrayRef<int64_t> axes, bool keepdims,
                             bool mean, std::string &why) {
  llvm::SmallVector<bool> reduced(x.shape.size(), false);
  int64_t count = 1;
  for (int64_t ax : axes) {
    auto n = normalizeAxis(ax, x.shape.size());
    if (!n || reduced[*n]) {
      why = "bad reduction axes " + listStr(axes) + " for shape " + shapeStr(x.shape);
      return std::nullopt;
    }
    reduced[*n] = true;
    count *= x.shape[*n];
  }
  // Accumulate into a keepdims-shaped tensor, then drop the reduced dims.
  Shape kept(x.shape);
  for (size_t d = 0; d < kept.size(); ++d)
    if (reduced[d])
      kept[d] = 1;
  Tensor acc = Tensor::zeros(x.elementType, kept);
  for (int64_t k = 0; k < x.numel(); ++k) {
    Shape idx = unravel(k, x.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      if (reduced[d])
        idx[d] = 0;
    int64_t ka = ravel(idx, kept);
    if (x.isFloat())
      acc.f[ka] += x.f[k];
    else
      acc.i[ka] = wrappingAdd(acc.i[ka], x.i[k]);
  }
  if (mean) {
    for (int64_t k = 0; k < acc.numel(); ++k) {
      if (acc.isFloat())
        acc.f[k] = acc.f[k] / (double)count; // NaN for an empty reduction
      else if (count == 0) {
        why = "integer mean over zero elements";
        return std::nullopt;
      } else
        acc.i[k] = acc.i[k] / count;
    }
  }
  if (!keepdims) {
    Shape dropped;
    for (size_t d = 0; d < kept.size(); ++d)
      if (!reduced[d])
        dropped.push_back(kept[d]);
    acc.shape = dropped;
  }
  if (!acc.isFloat())
    for (int64_t &v : acc.i)
      v = wrapToInt(acc.elementType, v);
  return acc;
}

//===----------------------------------------------------------------------===//
// Fused NN ops
//===----------------------------------------------------------------------===//

std::optional<Tensor> matmul(const Tensor &a, const Tensor &b, const Tensor *bias,
                             bool transposeA, bool transposeB, std::string &why) {
  if (a.shape.size() < 2 || b.shape.size() < 2 || !a.isFloat() || !b.isFloat()) {
    why = "matmul needs float operands of rank >= 2";
    return std::nullopt;
  }
  // Stored trailing dims [rows, cols] of each operand.
  int64_t aRows = a.shape[a.shape.size() - 2], aCols = a.shape.back();
  int64_t bRows = b.shape[b.shape.size() - 2], bCols = b.shape.back();
  int64_t m = transposeA ? aCols : aRows, ka = transposeA ? aRows : aCols;
  int64_t kb = transposeB ? bCols : bRows, n = transposeB ? bRows : bCols;
  if (ka != kb) {
    why = "contracting dims differ (" + std::to_string(ka) + " vs " + std::to_string(kb) + ")";
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> aBatch = llvm::ArrayRef<int64_t>(a.shape).drop_back(2);
  llvm::ArrayRef<int64_t> bBatch = llvm::ArrayRef<int64_t>(b.shape).drop_back(2);
  auto batch = broadcastShapes(aBatch, bBatch);
  if (!batch) {
    why = "batch dims " + shapeStr(aBatch) + " and " + shapeStr(bBatch) + " do not broadcast";
    return std::nullopt;
  }
  if (bias && (bias->shape.size() != 1 || bias->shape[0] != n)) {
    why = "bias must be 1-D of size " + std::to_string(n);
    return std::nullopt;
  }
  Shape outShape(*batch);
  outShape.push_back(m);
  outShape.push_back(n);
  Tensor out = Tensor::zeros(a.elementType, outShape);
  int64_t batchCount = 1;
  for (int64_t d : *batch)
    batchCount *= d;
  for (int64_t bi = 0; bi < batchCount; ++bi) {
    Shape idx = unravel(bi, *batch);
    int64_t aBase = broadcastIndex(idx, aBatch) * aRows * aCols;
    int64_t bBase = broadcastIndex(idx, bBatch) * bRows * bCols;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < ka; ++k) {
          double x = transposeA ? a.f[aBase + k * aCols + i] : a.f[aBase + i * aCols + k];
          double y = transposeB ? b.f[bBase + j * bCols + k] : b.f[bBase + k * bCols + j];
          sum += x * y;
        }
        if (bias)
          sum += bias->f[j];
        out.f[(bi * m + i) * n + j] = sum;
      }
    }
  }
  return out;
}

std::optional<Tensor> layerNorm(const Tensor &x, const Tensor &scale, const Tensor *bias,
                                double epsilon, int64_t axis, std::string &why) {
  auto ax = normalizeAxis(axis, x.shape.size());
  if (!ax) {
    why = "layer_norm axis " + std::to_string(axis) + " out of range for " + shapeStr(x.shape);
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> normShape = llvm::ArrayRef<int64_t>(x.shape).drop_front(*ax);
  if (!broadcastsTo(scale.shape, normShape) || (bias && !broadcastsTo(bias->shape, normShape))) {
    why = "layer_norm scale/bias do not broadcast to the normalized dims " + shapeStr(normShape);
    return std::nullopt;
  }
  int64_t inner = 1;
  for (int64_t d : normShape)
    inner *= d;
  int64_t outer = inner == 0 ? 0 : x.numel() / inner;
  Tensor out = Tensor::zeros(x.elementType, x.shape);
  for (int64_t o = 0; o < outer; ++o) {
    const double *row = &x.f[o * inner];
    double mean = 0;
    for (int64_t j = 0; j < inner; ++j)
      mean += row[j];
    mean /= (double)inner;
    double var = 0; // biased, as LayerNormalization and torch
    for (int64_t j = 0; j < inner; ++j)
      var += (row[j] - mean) * (row[j] - mean);
    var /= (double)inner;
    double invStd = 1.0 / std::sqrt(var + epsilon);
    for (int64_t j = 0; j < inner; ++j) {
      Shape idx = unravel(j, normShape);
      double y = (row[j] - mean) * invStd * scale.f[broadcastIndex(idx, scale.shape)];
      if (bias)
        y += bias->f[broadcastIndex(idx, bias->shape)];
      out.f[o * inner + j] = y;
    }
  }
  return out;
}

Tensor gelu(const Tensor &x, GeluKind kind) {
  Tensor out = Tensor::zeros(x.elementType, x.shape);
  const double sqrt2OverPi = std::sqrt(2.0 / M_PI);
  for (int64_t k = 0; k < x.numel(); ++k) {
    double v = x.f[k];
    if (kind == GeluKind::Tanh)
      out.f[k] = 0.5 * v * (1.0 + std::tanh(sqrt2OverPi * (v + 0.044715 * v * v * v)));
    else
      out.f[k] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  }
  return out;
}

std::optional<Tensor> softmax(const Tensor &x, int64_t axis, bool log, std::string &why) {
  auto ax = normalizeAxis(axis, x.shape.size());
  if (!ax) {
    why = "softmax axis " + std::to_string(axis) + " out of range for " + shapeStr(x.shape);
    return std::nullopt;
  }
  int64_t outer = 1, n = x.shape[*ax], inner = 1;
  for (int64_t d = 0; d < *ax; ++d)
    outer *= x.shape[d];
  for (size_t d = *ax + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  Tensor out = Tensor::zeros(x.elementType, x.shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + in; };
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j)
        mx = std::max(mx, x.f[at(j)]);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j)
        sum += std::exp(x.f[at(j)] - mx);
      for (int64_t j = 0; j < n; ++j)
        out.f[at(j)] = log ? x.f[at(j)] - mx - std::log(sum) : std::exp(x.f[at(j)] - mx) / sum;
    }
  }
  return out;
}

/// Query heads per head of k or v (the dialect's rule, ShapeFunctions.h).
static int64_t headGroup(const Tensor &q, const Tensor &kv) {
  return pipemesh::shapes::attentionHeadGroup(q.shape, kv.shape);
}

std::optional<Tensor> attention(const Tensor &q, const Tensor &k, const Tensor &v,
                                const Tensor *mask, double scale, bool causal,
                                int64_t window, double softcap, std::string &why) {
  size_t r = q.shape.size();
  if (r < 2 || k.shape.size() != r || v.shape.size() != r) {
    why = "attention q, k, v must have equal rank >= 2";
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> lead = llvm::ArrayRef<int64_t>(q.shape).drop_back(2);
  const int64_t gk = headGroup(q, k), gv = headGroup(q, v);
  if (!gk || !gv) {
    why = "attention leading dims of k and v are neither q's nor q's with fewer heads";
    return std::nullopt;
  }
  int64_t tq = q.shape[r - 2], d = q.shape[r - 1];
  int64_t tk = k.shape[r - 2], dv = v.shape[r - 1];
  if (k.shape[r - 1] != d || v.shape[r - 2] != tk) {
    why = "attention q/k head dims or k/v lengths differ";
    return std::nullopt;
  }
  Shape scoresShape(lead);
  scoresShape.push_back(tq);
  scoresShape.push_back(tk);
  if (mask && !broadcastsTo(mask->shape, scoresShape)) {
    why = "attention mask " + shapeStr(mask->shape) + " does not broadcast to the scores " +
          shapeStr(scoresShape);
    return std::nullopt;
  }
  Shape outShape(lead);
  outShape.push_back(tq);
  outShape.push_back(dv);
  Tensor out = Tensor::zeros(q.elementType, outShape);
  int64_t batchCount = 1;
  for (int64_t x : lead)
    batchCount *= x;
  std::vector<double> scores(tk), probs(tk), tanhs(tk);
  for (int64_t b = 0; b < batchCount; ++b) {
    for (int64_t i = 0; i < tq; ++i) {
      // Causal alignment to the end: query i sits at key position i + (tk - tq).
      int64_t lastVisible = causal ? i + (tk - tq) : tk - 1;
      // A sliding window also hides the keys at or before lastVisible - window.
      int64_t firstVisible = window > 0 ? std::max<int64_t>(lastVisible - window + 1, 0) : 0;
      double mx = -INFINITY;
      for (int64_t j = firstVisible; j <= lastVisible && j < tk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += q.f[(b * tq + i) * d + c] * k.f[(b / gk * tk + j) * d + c];
        double s = scale * dot;
        if (softcap > 0) {
          tanhs[j] = std::tanh(s / softcap);
          s = softcap * tanhs[j];
        }
        if (mask) {
          Shape idx = unravel(b, lead);
          idx.push_back(i);
          idx.push_back(j);
          s += mask->f[broadcastIndex(idx, mask->shape)];
        }
        scores[j] = s;
        mx = std::max(mx, s);
      }
      // Hidden keys get probability 0. A row with no visible key is 0/0 = NaN,
      // as softmax over all -inf is in PyTorch.
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        probs[j] = j >= firstVisible && j <= lastVisible ? std::exp(scores[j] - mx) : 0.0;
        sum += probs[j];
      }
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < tk; ++j)
          if (j >= firstVisible && j <= lastVisible)
            acc += probs[j] / sum * v.f[(b / gv * tk + j) * dv + c];
        out.f[(b * tq + i) * dv + c] = lastVisible < 0 ? NAN : acc;
      }
    }
  }
  return out;
}

std::optional<Tensor> embedding(const Tensor &table, const Tensor &ids, std::string &why) {
  if (table.shape.size() != 2 || !table.isFloat() || ids.isFloat()) {
    why = "embedding needs a 2-D float table and integer ids";
    return std::nullopt;
  }
  int64_t rows = table.shape[0], width = table.shape[1];
  Shape outShape(ids.shape);
  outShape.push_back(width);
  Tensor out = Tensor::zeros(table.elementType, outShape);
  for (int64_t p = 0; p < ids.numel(); ++p) {
    int64_t id = ids.i[p];
    // table[ids] as in numpy: a negative id counts from the end.
    if (id < -rows || id >= rows) {
      why = "id " + std::to_string(id) + " at position " + shapeStr(unravel(p, ids.shape)) +
            " is out of range for a table of " + std::to_string(rows) + " rows";
      return std::nullopt;
    }
    int64_t row = id < 0 ? id + rows : id;
    for (int64_t c = 0; c < width; ++c)
      out.f[p * width + c] = table.f[row * width + c];
  }
  return out;
}

std::optional<Tensor> crossEntropy(const Tensor &logits, const Tensor &targets,
                                   int64_t ignoreIndex, llvm::StringRef reduction,
                                   std::string &why) {
  if (logits.shape.empty() || !logits.isFloat() || targets.isFloat() ||
      llvm::ArrayRef<int64_t>(logits.shape).drop_back() != llvm::ArrayRef<int64_t>(targets.shape)) {
    why = "cross_entropy needs float logits [N..., V] and integer targets [N...]";
    return std::nullopt;
  }
  if (reduction != "mean" && reduction != "sum" && reduction != "none") {
    why = "unknown reduction '" + reduction.str() + "'";
    return std::nullopt;
  }
  int64_t classes = logits.shape.back();
  int64_t rows = targets.numel();
  std::vector<double> losses(rows, 0.0);
  int64_t counted = 0;
  for (int64_t n = 0; n < rows; ++n) {
    int64_t t = targets.i[n];
    if (t == ignoreIndex)
      continue; // contributes 0 and is not counted
    if (t < 0 || t >= classes) {
      why = "target " + std::to_string(t) + " at position " +
            shapeStr(unravel(n, targets.shape)) + " is out of range for " +
            std::to_string(classes) + " classes";
      return std::nullopt;
    }
    const double *row = &logits.f[n * classes];
    double mx = -INFINITY;
    for (int64_t c = 0; c < classes; ++c)
      mx = std::max(mx, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(row[c] - mx);
    losses[n] = mx + std::log(sum) - row[t]; // logsumexp - logit of the target
    ++counted;
  }
  if (reduction == "none") {
    Tensor out = Tensor::zeros(logits.elementType, targets.shape);
    out.f = losses;
    return out;
  }
  double total = 0;
  for (double l : losses)
    total += l;
  Tensor out = Tensor::zeros(logits.elementType, {});
  // Mean over no counted target is 0/0 = NaN, as in PyTorch.
  out.f[0] = reduction == "sum" ? total : total / (double)counted;
  return out;
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

std::optional<Tensor> reshape(const Tensor &x, llvm::ArrayRef<int64_t> shape, std::string &why) {
  Tensor out = x;
  out.shape.assign(shape.begin(), shape.end());
  if (out.numel() != x.numel()) {
    why = "cannot reshape " + shapeStr(x.shape) + " to " + shapeStr(shape);
    return std::nullopt;
  }
  return out;
}

std::optional<Tensor> transpose(const Tensor &x, llvm::ArrayRef<int64_t> perm, std::string &why) {
  size_t r = x.shape.size();
  llvm::SmallVector<bool> seen(r, false);
  bool ok = perm.size() == r;
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < (int64_t)r && !seen[p];
    if (ok)
      seen[p] = true;
  }
  if (!ok) {
    why = "perm " + listStr(perm) + " is not a permutation of the dims of " + shapeStr(x.shape);
    return std::nullopt;
  }
  Shape outShape;
  for (int64_t p : perm)
    outShape.push_back(x.shape[p]);
  Tensor out = Tensor::zeros(x.elementType, outShape);
  for (int64_t k = 0; k < out.numel(); ++k) {
    Shape outIdx = unravel(k, outShape);
    Shape inIdx(r);
    for (size_t d = 0; d < r; ++d)
      inIdx[perm[d]] = outIdx[d]; // result dim d is input dim perm[d]
    copyElement(x, ravel(inIdx, x.shape), out, k);
  }
  return out;
}

std::optional<Tensor> broadcastTo(const Tensor &x, llvm::ArrayRef<int64_t> shape,
                                  std::string &why) {
  if (!broadcastsTo(x.shape, shape)) {
    why = "cannot broadcast " + shapeStr(x.shape) + " to " + shapeStr(shape);
    return std::nullopt;
  }
  Tensor out = Tensor::zeros(x.elementType, shape);
  for (int64_t k = 0; k < out.numel(); ++k)
    copyElement(x, broadcastIndex(unravel(k, shape), x.shape), out, k);
  return out;
}

/// Copies the box of `x` starting at `offset` with out's shape and `step`
/// stride per dim into `out`.
static void copyBox(const Tensor &x, llvm::ArrayRef<int64_t> offset, llvm::ArrayRef<int64_t> step,
                    Tensor &out) {
  for (int64_t k = 0; k < out.numel(); ++k) {
    Shape idx = unravel(k, out.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      idx[d] = offset[d] + idx[d] * step[d];
    copyElement(x, ravel(idx, x.shape), out, k);
  }
}

std::optional<std::vector<Tensor>> split(const Tensor &x, int64_t axis,
                                         llvm::ArrayRef<int64_t> sizes, std::string &why) {
  auto ax = normalizeAxis(axis, x.shape.size());
  int64_t total = 0;
  bool negative = false;
  for (int64_t s : sizes) {
    negative |= s < 0;
    total += s;
  }
  if (!ax || sizes.empty() || negative || total != x.shape[*ax]) {
    why = "bad split of " + shapeStr(x.shape) + " along axis " + std::to_string(axis) +
          " into " + listStr(sizes);
    return std::nullopt;
  }
  std::vector<Tensor> pieces;
  Shape offset(x.shape.size(), 0), step(x.shape.size(), 1);
  for (int64_t s : sizes) {
    Shape pieceShape(x.shape);
    pieceShape[*ax] = s;
    Tensor piece = Tensor::zeros(x.elementType, pieceShape);
    copyBox(x, offset, step, piece);
    pieces.push_back(std::move(piece));
    offset[*ax] += s;
  }
  return pieces;
}

std::optional<Tensor> concat(llvm::ArrayRef<const Tensor *> xs, int64_t axis, std::string &why) {
  if (xs.empty()) {
    why = "concat of nothing";
    return std::nullopt;
  }
  const Tensor &first = *xs.front();
  auto ax = normalizeAxis(axis, first.shape.size());
  if (!ax) {
    why = "concat axis " + std::to_string(axis) + " out of range";
    return std::nullopt;
  }
  Shape outShape(first.shape);
  outShape[*ax] = 0;
  for (const Tensor *x : xs) {
    bool ok = x->elementType == first.elementType && x->shape.size() == first.shape.size();
    for (size_t d = 0; ok && d < outShape.size(); ++d)
      ok = (int64_t)d == *ax || x->shape[d] == first.shape[d];
    if (!ok) {
      why = "concat inputs " + shapeStr(first.shape) + " and " + shapeStr(x->shape) +
            " differ outside the axis or in element type";
      return std::nullopt;
    }
    outShape[*ax] += x->shape[*ax];
  }
  Tensor out = Tensor::zeros(first.elementType, outShape);
  for (int64_t k = 0; k < out.numel(); ++k) {
    Shape idx = unravel(k, outShape);
    // Find the input holding position idx[axis].
    for (const Tensor *x : xs) {
      if (idx[*ax] < x->shape[*ax]) {
        copyElement(*x, ravel(idx, x->shape), out, k);
        break;
      }
      idx[*ax] -= x->shape[*ax];
    }
  }
  return out;
}

std::optional<Tensor> slice(const Tensor &x, llvm::ArrayRef<int64_t> starts,
                            llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides,
                            std::string &why) {
  size_t r = x.shape.size();
  if (starts.size() != r || limits.size() != r || strides.size() != r) {
    why = "slice needs one start, limit and stride per dim";
    return std::nullopt;
  }
  Shape outShape;
  for (size_t d = 0; d < r; ++d) {
    if (strides[d] <= 0 || starts[d] < 0 || starts[d] > limits[d] || limits[d] > x.shape[d]) {
      why = "slice " + std::to_string(starts[d]) + ":" + std::to_string(limits[d]) + ":" +
            std::to_string(strides[d]) + " is invalid for dim " + std::to_string(d) +
            " of size " + std::to_string(x.shape[d]);
      return std::nullopt;
    }
    int64_t span = limits[d] - starts[d]; // ceil(span / stride) without overflow
    outShape.push_back(span == 0 ? 0 : (span - 1) / strides[d] + 1);
  }
  Tensor out = Tensor::zeros(x.elementType, outShape);
  copyBox(x, starts, strides, out);
  return out;
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

static bool sameShape(const Tensor &a, const Tensor &b) {
  return llvm::ArrayRef<int64_t>(a.shape) == llvm::ArrayRef<int64_t>(b.shape);
}

std::optional<std::vector<Tensor>> layerNormGrad(const Tensor &dy, const Tensor &x,
                                                 const Tensor &scale, double epsilon,
                                                 int64_t axis, std::string &why) {
  auto ax = normalizeAxis(axis, x.shape.size());
  if (!ax) {
    why = "layer_norm_grad axis " + std::to_string(axis) + " out of range for " +
          shapeStr(x.shape);
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> normShape = llvm::ArrayRef<int64_t>(x.shape).drop_front(*ax);
  if (!broadcastsTo(scale.shape, normShape) || !sameShape(dy, x)) {
    why = "layer_norm_grad needs dy of x's shape and a scale broadcasting to " +
          shapeStr(normShape);
    return std::nullopt;
  }
  int64_t inner = 1;
  for (int64_t d : normShape)
    inner *= d;
  int64_t outer = inner == 0 ? 0 : x.numel() / inner;
  Tensor dx = Tensor::zeros(x.elementType, x.shape);
  Tensor dscale = Tensor::zeros(scale.elementType, scale.shape);
  Tensor dbias = Tensor::zeros(scale.elementType, scale.shape);
  // The scale element each normalized position uses.
  std::vector<int64_t> sidx(inner);
  for (int64_t j = 0; j < inner; ++j)
    sidx[j] = broadcastIndex(unravel(j, normShape), scale.shape);
  std::vector<double> xhat(inner), g(inner);
  for (int64_t o = 0; o < outer; ++o) {
    const double *row = &x.f[o * inner];
    const double *drow = &dy.f[o * inner];
    double mean = 0;
    for (int64_t j = 0; j < inner; ++j)
      mean += row[j];
    mean /= (double)inner;
    double var = 0;
    for (int64_t j = 0; j < inner; ++j)
      var += (row[j] - mean) * (row[j] - mean);
    var /= (double)inner;
    double invStd = 1.0 / std::sqrt(var + epsilon);
    // y = xhat * scale + bias with xhat = (x - mean) * invStd; g = dy * scale.
    // dx = invStd * (g - mean(g) - xhat * mean(g * xhat)).
    double sumG = 0, sumGX = 0;
    for (int64_t j = 0; j < inner; ++j) {
      xhat[j] = (row[j] - mean) * invStd;
      g[j] = drow[j] * scale.f[sidx[j]];
      sumG += g[j];
      sumGX += g[j] * xhat[j];
      dscale.f[sidx[j]] += drow[j] * xhat[j];
      dbias.f[sidx[j]] += drow[j];
    }
    for (int64_t j = 0; j < inner; ++j)
      dx.f[o * inner + j] =
          invStd * (g[j] - sumG / (double)inner - xhat[j] * sumGX / (double)inner);
  }
  std::vector<Tensor> out;
  out.push_back(std::move(dx));
  out.push_back(std::move(dscale));
  out.push_back(std::move(dbias));
  return out;
}

std::optional<Tensor> geluGrad(const Tensor &dy, const Tensor &x, GeluKind kind,
                               std::string &why) {
  if (!sameShape(dy, x)) {
    why = "gelu_grad dy " + shapeStr(dy.shape) + " and x " + shapeStr(x.shape) + " differ";
    return std::nullopt;
  }
  Tensor out = Tensor::zeros(x.elementType, x.shape);
  const double sqrt2OverPi = std::sqrt(2.0 / M_PI);
  for (int64_t k = 0; k < x.numel(); ++k) {
    double v = x.f[k], d;
    if (kind == GeluKind::Tanh) {
      // 0.5 * (1 + tanh(u)) + 0.5 * v * (1 - tanh(u)^2) * u'
      double u = sqrt2OverPi * (v + 0.044715 * v * v * v);
      double du = sqrt2OverPi * (1.0 + 3.0 * 0.044715 * v * v);
      double t = std::tanh(u);
      d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du;
    } else {
      // Phi(v) + v * phi(v)
      d = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))) +
          v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    }
    out.f[k] = dy.f[k] * d;
  }
  return out;
}

std::optional<Tensor> softmaxGrad(const Tensor &dy, const Tensor &y, int64_t axis, bool log,
                                  std::string &why) {
  auto ax = normalizeAxis(axis, y.shape.size());
  if (!ax || !sameShape(dy, y)) {
    why = "softmax_grad needs dy and y of one shape and an axis in range";
    return std::nullopt;
  }
  int64_t outer = 1, n = y.shape[*ax], inner = 1;
  for (int64_t d = 0; d < *ax; ++d)
    outer *= y.shape[d];
  for (size_t d = *ax + 1; d < y.shape.size(); ++d)
    inner *= y.shape[d];
  Tensor out = Tensor::zeros(y.elementType, y.shape);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + in; };
      double sum = 0; // softmax: sum(dy * y); log_softmax: sum(dy)
      for (int64_t j = 0; j < n; ++j)
        sum += log ? dy.f[at(j)] : dy.f[at(j)] * y.f[at(j)];
      for (int64_t j = 0; j < n; ++j)
        out.f[at(j)] = log ? dy.f[at(j)] - std::exp(y.f[at(j)]) * sum
                           : y.f[at(j)] * (dy.f[at(j)] - sum);
    }
  }
  return out;
}

std::optional<std::vector<Tensor>> attentionGrad(const Tensor &dout, const Tensor &q,
                                                 const Tensor &k, const Tensor &v,
                                                 const Tensor *mask, double scale, bool causal,
                                                 int64_t window, double softcap, std::string &why) {
  // The forward kernel checks the operands and gives the output's shape.
  auto fwd = attention(q, k, v, mask, scale, causal, window, softcap, why);
  if (!fwd)
    return std::nullopt;
  if (!sameShape(dout, *fwd)) {
    why = "attention_grad dout " + shapeStr(dout.shape) + " differs from the output " +
          shapeStr(fwd->shape);
    return std::nullopt;
  }
  size_t r = q.shape.size();
  llvm::ArrayRef<int64_t> lead = llvm::ArrayRef<int64_t>(q.shape).drop_back(2);
  int64_t tq = q.shape[r - 2], d = q.shape[r - 1];
  int64_t tk = k.shape[r - 2], dv = v.shape[r - 1];
  const int64_t gk = headGroup(q, k), gv = headGroup(q, v);
  int64_t batchCount = 1;
  for (int64_t x : lead)
    batchCount *= x;
  // A grouped head's gradients add up over the query heads that read it.
  Tensor dq = Tensor::zeros(q.elementType, q.shape);
  Tensor dk = Tensor::zeros(k.elementType, k.shape);
  Tensor dV = Tensor::zeros(v.elementType, v.shape);
  std::vector<double> scores(tk), probs(tk), dprobs(tk), tanhs(tk);
  for (int64_t b = 0; b < batchCount; ++b) {
    for (int64_t i = 0; i < tq; ++i) {
      int64_t lastVisible = causal ? i + (tk - tq) : tk - 1;
      // A sliding window also hides the keys at or before lastVisible - window.
      int64_t firstVisible = window > 0 ? std::max<int64_t>(lastVisible - window + 1, 0) : 0;
      if (lastVisible < 0) { // no visible key: the forward row is NaN
        for (int64_t c = 0; c < d; ++c)
          dq.f[(b * tq + i) * d + c] = NAN;
        continue;
      }
      // Recompute the probabilities exactly as the forward kernel does.
      double mx = -INFINITY;
      for (int64_t j = firstVisible; j <= lastVisible && j < tk; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c)
          dot += q.f[(b * tq + i) * d + c] * k.f[(b / gk * tk + j) * d + c];
        double s = scale * dot;
        if (softcap > 0) {
          tanhs[j] = std::tanh(s / softcap);
          s = softcap * tanhs[j];
        }
        if (mask) {
          Shape idx = unravel(b, lead);
          idx.push_back(i);
          idx.push_back(j);
          s += mask->f[broadcastIndex(idx, mask->shape)];
        }
        scores[j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j) {
        probs[j] = j >= firstVisible && j <= lastVisible ? std::exp(scores[j] - mx) : 0.0;
        sum += probs[j];
      }
      for (int64_t j = 0; j < tk; ++j)
        probs[j] /= sum;
      // out_i = sum_j p_j v_j: dv_j += p_j dout_i, dp_j = dout_i . v_j.
      double rowDot = 0;
      for (int64_t j = firstVisible; j <= lastVisible && j < tk; ++j) {
        double dp = 0;
        for (int64_t c = 0; c < dv; ++c) {
          double g = dout.f[(b * tq + i) * dv + c];
          dp += g * v.f[(b / gv * tk + j) * dv + c];
          dV.f[(b / gv * tk + j) * dv + c] += probs[j] * g;
        }
        dprobs[j] = dp;
        rowDot += probs[j] * dp;
      }
      // Softmax backward: ds_j = p_j (dp_j - sum_l p_l dp_l); s_j = scale q_i . k_j.
      for (int64_t j = firstVisible; j <= lastVisible && j < tk; ++j) {
        double ds = probs[j] * (dprobs[j] - rowDot);
        if (softcap > 0) // through softcap * tanh(s / softcap)
          ds *= 1.0 - tanhs[j] * tanhs[j];
        for (int64_t c = 0; c < d; ++c) {
          dq.f[(b * tq + i) * d + c] += scale * ds * k.f[(b / gk * tk + j) * d + c];
          dk.f[(b / gk * tk + j) * d + c] += scale * ds * q.f[(b * tq + i) * d + c];
        }
      }
    }
  }
  std::vector<Tensor> out;
  out.push_back(std::move(dq));
  out.push_back(std::move(dk));
  out.push_back(std::move(dV));
  return out;
}

std::optional<Tensor> embeddingGrad(const Tensor &dy, const Tensor &ids, int64_t rows,
                                    std::string &why) {
  if (!dy.isFloat() || ids.isFloat() || dy.shape.size() != ids.shape.size() + 1 ||
      llvm::ArrayRef<int64_t>(dy.shape).drop_back() != llvm::ArrayRef<int64_t>(ids.shape)) {
    why = "embedding_grad needs dy of shape ids x width";
    return std::nullopt;
  }
  int64_t width = dy.shape.back();
  Tensor out = Tensor::zeros(dy.elementType, {rows, width});
  for (int64_t p = 0; p < ids.numel(); ++p) { // in order: deterministic sums
    int64_t id = ids.i[p];
    if (id < -rows || id >= rows) {
      why = "id " + std::to_string(id) + " at position " + shapeStr(unravel(p, ids.shape)) +
            " is out of range for a table of " + std::to_string(rows) + " rows";
      return std::nullopt;
    }
    int64_t row = id < 0 ? id + rows : id;
    for (int64_t c = 0; c < width; ++c)
      out.f[row * width + c] += dy.f[p * width + c];
  }
  return out;
}

std::optional<Tensor> crossEntropyGrad(const Tensor &dloss, const Tensor &logits,
                                       const Tensor &targets, int64_t ignoreIndex,
                                       llvm::StringRef reduction, std::string &why) {
  // The forward kernel checks the operands (and the targets' range).
  auto fwd = crossEntropy(logits, targets, ignoreIndex, reduction, why);
  if (!fwd)
    return std::nullopt;
  if (!sameShape(dloss, *fwd)) {
    why = "cross_entropy_grad dloss " + shapeStr(dloss.shape) + " differs from the loss " +
          shapeStr(fwd->shape);
    return std::nullopt;
  }
  int64_t classes = logits.shape.back();
  int64_t rows = targets.numel();
  int64_t counted = 0;
  for (int64_t n = 0; n < rows; ++n)
    counted += targets.i[n] != ignoreIndex;
  Tensor out = Tensor::zeros(logits.elementType, logits.shape);
  for (int64_t n = 0; n < rows; ++n) {
    int64_t t = targets.i[n];
    if (t == ignoreIndex)
      continue; // no loss, no gradient
    double g = reduction == "none"  ? dloss.f[n]
               : reduction == "sum" ? dloss.f[0]
                                    : dloss.f[0] / (double)counted;
    const double *row = &logits.f[n * classes];
    double mx = -INFINITY;
    for (int64_t c = 0; c < classes; ++c)
      mx = std::max(mx, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(row[c] - mx);
    for (int64_t c = 0; c < classes; ++c)
      out.f[n * classes + c] = g * (std::exp(row[c] - mx) / sum - (c == t ? 1.0 : 0.0));
  }
  return out;
}

std::optional<Tensor> sliceGrad(const Tensor &dy, llvm::ArrayRef<int64_t> shape,
                                llvm::ArrayRef<int64_t> starts, llvm::ArrayRef<int64_t> limits,
                                llvm::ArrayRef<int64_t> strides, std::string &why) {
  Tensor out = Tensor::zeros(dy.elementType, shape);
  // The forward kernel checks the slice against the input's shape.
  auto sliced = slice(out, starts, limits, strides, why);
  if (!sliced)
    return std::nullopt;
  if (!sameShape(dy, *sliced)) {
    why = "slice_grad dy " + shapeStr(dy.shape) + " is not the slice's shape " +
          shapeStr(sliced->shape);
    return std::nullopt;
  }
  for (int64_t k = 0; k < dy.numel(); ++k) {
    Shape idx = unravel(k, dy.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      idx[d] = starts[d] + idx[d] * strides[d];
    copyElement(dy, k, out, ravel(idx, shape));
  }
  return out;
}

} // namespace pipemesh::interp
