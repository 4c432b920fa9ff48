//===- ConstTensor.cpp - host tensors for import-time folding --------------===//
#include "ConstTensor.h"

#include "llvm/ADT/APFloat.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace pipemesh::onnximport {

bool isFloatType(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

bool isSupportedType(DType t) {
  switch (t) {
  case DType::F32: case DType::F64: case DType::F16: case DType::BF16:
  case DType::U8: case DType::I8: case DType::U16: case DType::I16:
  case DType::I32: case DType::I64: case DType::U32: case DType::U64:
  case DType::Bool:
    return true;
  default:
    return false;
  }
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "float32";
  case DType::F64: return "float64";
  case DType::F16: return "float16";
  case DType::BF16: return "bfloat16";
  case DType::U8: return "uint8";
  case DType::I8: return "int8";
  case DType::U16: return "uint16";
  case DType::I16: return "int16";
  case DType::I32: return "int32";
  case DType::I64: return "int64";
  case DType::U32: return "uint32";
  case DType::U64: return "uint64";
  case DType::Bool: return "bool";
  case DType::Str: return "string";
  default: return "undefined";
  }
}

int64_t saturateToInt64(double v) {
  if (std::isnan(v))
    return 0;
  if (v >= 9223372036854775807.0)
    return INT64_MAX;
  if (v <= -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)v;
}

std::vector<int64_t> ConstTensor::ints() const {
  std::vector<int64_t> out(numel());
  for (int64_t k = 0; k < numel(); ++k)
    out[k] = asInt(k);
  return out;
}

ConstTensor ConstTensor::zeros(DType dtype, llvm::ArrayRef<int64_t> shape) {
  ConstTensor t;
  t.dtype = dtype;
  t.shape.assign(shape.begin(), shape.end());
  if (t.isFloat())
    t.f.assign(t.numel(), 0.0);
  else
    t.i.assign(t.numel(), 0);
  return t;
}

ConstTensor ConstTensor::scalarInt(int64_t v, DType dtype) {
  ConstTensor t = zeros(dtype, {});
  t.setInt(0, v);
  return t;
}

ConstTensor ConstTensor::vectorInt(llvm::ArrayRef<int64_t> v) {
  ConstTensor t = zeros(DType::I64, {(int64_t)v.size()});
  for (size_t k = 0; k < v.size(); ++k)
    t.i[k] = v[k];
  return t;
}

static double roundTo(DType t, double v) {
  switch (t) {
  case DType::F32: return (double)(float)v;
  case DType::F16:
  case DType::BF16: {
    // The importer materializes these as float32 (every float type computes
    // in float32), so the rounding to the ONNX type happens here.
    llvm::APFloat f(v);
    bool lost;
    f.convert(t == DType::F16 ? llvm::APFloat::IEEEhalf() : llvm::APFloat::BFloat(),
              llvm::APFloat::rmNearestTiesToEven, &lost);
    return f.convertToDouble();
  }
  default: return v;
  }
}

static int64_t wrapTo(DType t, int64_t v) {
  switch (t) {
  case DType::Bool: return v != 0;
  case DType::U8: return (uint8_t)v;
  case DType::I8: return (int8_t)v;
  case DType::U16: return (uint16_t)v;
  case DType::I16: return (int16_t)v;
  case DType::I32: return (int32_t)v;
  case DType::U32: return (uint32_t)v;
  default: return v;
  }
}

void ConstTensor::set(int64_t k, double v) {
  if (isFloat()) {
    f[k] = roundTo(dtype, v);
    return;
  }
  if (dtype == DType::Bool) {
    i[k] = v != 0.0;
    return;
  }
  // float -> int conversion truncates toward zero, as ONNX Cast does.
  i[k] = std::isfinite(v) ? wrapTo(dtype, saturateToInt64(v)) : 0;
}

void ConstTensor::setInt(int64_t k, int64_t v) {
  if (isFloat())
    f[k] = roundTo(dtype, (double)v);
  else
    i[k] = wrapTo(dtype, v);
}

shapes::Shape stridesOf(llvm::ArrayRef<int64_t> shape) {
  shapes::Shape s(shape.size(), 1);
  for (int64_t d = (int64_t)shape.size() - 2; d >= 0; --d)
    s[d] = s[d + 1] * shape[d + 1];
  return s;
}

/// The strides of an operand of shape `from`, numpy-broadcast to `to`, along
/// each dim of `to`: 0 where it is broadcast.
static shapes::Shape broadcastStrides(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to) {
  shapes::Shape strides(to.size(), 0);
  shapes::Shape own = stridesOf(from);
  size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1)
      strides[lead + d] = own[d];
  return strides;
}

/// Visits every element of `shape` in row-major order as body(k, offsets):
/// k its flat index, offsets[j] the flat index into operand j, which moves by
/// strides[j][d] along dim d (0 where broadcast). The last dim is a plain
/// loop and the offsets advance incrementally: a [T, T] mask folded at 4096
/// tokens is 2^24 elements, where a multi-index per element cost more than the
/// arithmetic.
template <size_t N, typename Body>
static void walkStrided(llvm::ArrayRef<int64_t> shape,
                        const std::array<shapes::Shape, N> &strides, Body &&body) {
  int64_t n = shapes::numElements(shape);
  if (n == 0)
    return;
  std::array<int64_t, N> base{};
  if (shape.empty()) {
    body(0, base);
    return;
  }
  const size_t rank = shape.size();
  const int64_t inner = shape.back();
  std::array<int64_t, N> innerStride;
  for (size_t j = 0; j < N; ++j)
    innerStride[j] = strides[j][rank - 1];
  shapes::Shape idx(rank - 1, 0);
  for (int64_t k = 0; k < n; k += inner) {
    std::array<int64_t, N> off = base;
    for (int64_t e = 0; e < inner; ++e) {
      body(k + e, off);
      for (size_t j = 0; j < N; ++j)
        off[j] += innerStride[j];
    }
    for (int64_t d = (int64_t)rank - 2; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (size_t j = 0; j < N; ++j)
          base[j] += strides[j][d];
        break;
      }
      for (size_t j = 0; j < N; ++j)
        base[j] -= strides[j][d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

std::optional<ConstTensor> foldBinary(const ConstTensor &a, const ConstTensor &b, DType outType,
                                      BinaryFn ffn, BinaryIntFn ifn, std::string &why) {
  auto shape = shapes::broadcast(a.shape, b.shape, why);
  if (!shape)
    return std::nullopt;
  ConstTensor out = ConstTensor::zeros(outType, *shape);
  std::array<shapes::Shape, 2> strides = {broadcastStrides(a.shape, *shape),
                                          broadcastStrides(b.shape, *shape)};
  if (a.isFloat() || b.isFloat())
    walkStrided(*shape, strides, [&](int64_t k, const std::array<int64_t, 2> &off) {
      out.set(k, ffn(a.asDouble(off[0]), b.asDouble(off[1])));
    });
  else if (outType == DType::Bool) // comparisons and logic: no wrapping to do
    walkStrided(*shape, strides, [&](int64_t k, const std::array<int64_t, 2> &off) {
      out.i[k] = ifn(a.i[off[0]], b.i[off[1]]) != 0;
    });
  else
    walkStrided(*shape, strides, [&](int64_t k, const std::array<int64_t, 2> &off) {
      out.setInt(k, ifn(a.i[off[0]], b.i[off[1]]));
    });
  return out;
}

std::optional<ConstTensor> foldMatMul(const ConstTensor &a, const ConstTensor &b,
                                      int64_t maxWork, std::string &why) {
  if (!a.isFloat() || !b.isFloat() || a.shape.empty() || b.shape.empty()) {
    why = "matmul operands must be floating-point tensors of rank >= 1";
    return std::nullopt;
  }
  shapes::Shape sa = a.shape, sb = b.shape;
  bool vecA = sa.size() == 1, vecB = sb.size() == 1;
  if (vecA)
    sa.insert(sa.begin(), 1);
  if (vecB)
    sb.push_back(1);
  auto shape = shapes::matmul(sa, sb, false, false, why);
  if (!shape)
    return std::nullopt;
  int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  auto outputs = shapes::checkedNumElements(*shape);
  if (!outputs || *outputs > maxWork / std::max<int64_t>(k, 1))
    return std::nullopt;
  shapes::Shape batch(shape->begin(), shape->end() - 2);
  shapes::Shape batchA(sa.begin(), sa.end() - 2), batchB(sb.begin(), sb.end() - 2);
  ConstTensor out = ConstTensor::zeros(a.dtype, *shape);
  std::array<shapes::Shape, 2> strides = {broadcastStrides(batchA, batch),
                                          broadcastStrides(batchB, batch)};
  walkStrided(batch, strides, [&](int64_t bk, const std::array<int64_t, 2> &batchOff) {
    int64_t offA = batchOff[0] * m * k;
    int64_t offB = batchOff[1] * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < k; ++l)
          acc += a.f[offA + i * k + l] * b.f[offB + l * n + j];
        out.set(bk * m * n + i * n + j, acc);
      }
  });
  shapes::Shape result = *shape;
  if (vecB)
    result.pop_back();
  if (vecA)
    result.erase(result.end() - (vecB ? 1 : 2));
  out.shape = result;
  return out;
}

ConstTensor foldUnary(const ConstTensor &a, llvm::function_ref<double(double)> fn) {
  ConstTensor out = ConstTensor::zeros(a.dtype, a.shape);
  for (int64_t k = 0; k < a.numel(); ++k)
    out.set(k, fn(a.asDouble(k)));
  return out;
}

ConstTensor foldCast(const ConstTensor &a, DType to) {
  ConstTensor out = ConstTensor::zeros(to, a.shape);
  for (int64_t k = 0; k < a.numel(); ++k) {
    if (a.isFloat())
      out.set(k, a.f[k]);
    else
      out.setInt(k, a.i[k]);
  }
  return out;
}

std::optional<ConstTensor> foldWhere(const ConstTensor &c, const ConstTensor &a,
                                     const ConstTensor &b, std::string &why) {
  auto ab = shapes::broadcast(a.shape, b.shape, why);
  if (!ab)
    return std::nullopt;
  auto shape = shapes::broadcast(c.shape, *ab, why);
  if (!shape)
    return std::nullopt;
  ConstTensor out = ConstTensor::zeros(a.dtype, *shape);
  std::array<shapes::Shape, 3> strides = {broadcastStrides(c.shape, *shape),
                                          broadcastStrides(a.shape, *shape),
                                          broadcastStrides(b.shape, *shape)};
  walkStrided(*shape, strides, [&](int64_t k, const std::array<int64_t, 3> &off) {
    bool cond = c.asInt(off[0]) != 0;
    const ConstTensor &src = cond ? a : b;
    int64_t ks = cond ? off[1] : off[2];
    if (out.isFloat())
      out.f[k] = src.asDouble(ks);
    else
      out.i[k] = src.asInt(ks);
  });
  return out;
}

std::optional<ConstTensor> foldGather(const ConstTensor &data, const ConstTensor &indices,
                                      int64_t axis, std::string &why) {
  auto ax = shapes::normalizeAxis(axis, data.shape.size());
  if (!ax) {
    why = "axis " + std::to_string(axis) + " out of range for rank " +
          std::to_string(data.shape.size());
    return std::nullopt;
  }
  int64_t dim = data.shape[*ax];
  shapes::Shape outShape(data.shape.begin(), data.shape.begin() + *ax);
  outShape.append(indices.shape.begin(), indices.shape.end());
  outShape.append(data.shape.begin() + *ax + 1, data.shape.end());
  int64_t outer = shapes::numElements(llvm::ArrayRef<int64_t>(data.shape).take_front(*ax));
  int64_t inner = shapes::numElements(llvm::ArrayRef<int64_t>(data.shape).drop_front(*ax + 1));
  ConstTensor out = ConstTensor::zeros(data.dtype, outShape);
  int64_t nidx = indices.numel();
  for (int64_t j = 0; j < nidx; ++j) {
    int64_t ix = indices.asInt(j);
    if (ix < -dim || ix >= dim) {
      why = "index " + std::to_string(ix) + " out of range for dim of size " + std::to_string(dim);
      return std::nullopt;
    }
    if (ix < 0)
      ix += dim;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        int64_t src = (o * dim + ix) * inner + in, dst = (o * nidx + j) * inner + in;
        if (out.isFloat())
          out.f[dst] = data.f[src];
        else
          out.i[dst] = data.i[src];
      }
  }
  return out;
}

std::optional<ConstTensor> foldConcat(llvm::ArrayRef<const ConstTensor *> ins, int64_t axis,
                                      std::string &why) {
  llvm::SmallVector<shapes::Shape> shapesIn;
  for (const ConstTensor *t : ins)
    shapesIn.push_back(t->shape);
  auto shape = shapes::concat(shapesIn, axis, why);
  if (!shape)
    return std::nullopt;
  int64_t ax = *shapes::normalizeAxis(axis, shape->size());
  ConstTensor out = ConstTensor::zeros(ins[0]->dtype, *shape);
  int64_t outer = shapes::numElements(llvm::ArrayRef<int64_t>(*shape).take_front(ax));
  int64_t dst = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *t : ins) {
      int64_t chunk = shapes::numElements(llvm::ArrayRef<int64_t>(t->shape).drop_front(ax));
      for (int64_t c = 0; c < chunk; ++c, ++dst) {
        if (out.isFloat())
          out.f[dst] = t->asDouble(o * chunk + c);
        else
          out.i[dst] = t->asInt(o * chunk + c);
      }
    }
  return out;
}

ConstTensor foldReshape(const ConstTensor &a, llvm::ArrayRef<int64_t> shape) {
  ConstTensor out = a;
  out.shape.assign(shape.begin(), shape.end());
  return out;
}

/// The elements of `a` at `start` + sum over d of idx[d] * strides[d], for
/// every multi-index idx of `outShape` (transpose, slice, broadcast).
static ConstTensor gatherStrided(const ConstTensor &a, llvm::ArrayRef<int64_t> outShape,
                                 shapes::Shape strides, int64_t start) {
  ConstTensor out = ConstTensor::zeros(a.dtype, outShape);
  std::array<shapes::Shape, 1> operand = {std::move(strides)};
  walkStrided(outShape, operand, [&](int64_t k, const std::array<int64_t, 1> &off) {
    if (out.isFloat())
      out.f[k] = a.f[start + off[0]];
    else
      out.i[k] = a.i[start + off[0]];
  });
  return out;
}

ConstTensor foldTranspose(const ConstTensor &a, llvm::ArrayRef<int64_t> perm) {
  shapes::Shape outShape, strides;
  auto st = stridesOf(a.shape);
  for (int64_t p : perm) {
    outShape.push_back(a.shape[p]);
    strides.push_back(st[p]);
  }
  return gatherStrided(a, outShape, std::move(strides), 0);
}

ConstTensor foldSlice(const ConstTensor &a, llvm::ArrayRef<int64_t> starts,
                      llvm::ArrayRef<int64_t> limits, llvm::ArrayRef<int64_t> strides) {
  shapes::Shape outShape, steps;
  auto st = stridesOf(a.shape);
  int64_t start = 0;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    outShape.push_back((limits[d] - starts[d] + strides[d] - 1) / strides[d]);
    steps.push_back(strides[d] * st[d]);
    start += starts[d] * st[d];
  }
  return gatherStrided(a, outShape, std::move(steps), start);
}

ConstTensor foldBroadcast(const ConstTensor &a, llvm::ArrayRef<int64_t> shape) {
  return gatherStrided(a, shape, broadcastStrides(a.shape, shape), 0);
}

ConstTensor foldReduce(const ConstTensor &a, llvm::ArrayRef<int64_t> axes, bool keepdims,
                       bool mean) {
  std::string why;
  shapes::Shape kept = *shapes::reduce(a.shape, axes, /*keepdims=*/true, why);
  ConstTensor acc = ConstTensor::zeros(DType::F64, kept);
  std::array<shapes::Shape, 1> into = {broadcastStrides(kept, a.shape)};
  walkStrided(a.shape, into, [&](int64_t k, const std::array<int64_t, 1> &off) {
    acc.f[off[0]] += a.asDouble(k);
  });
  int64_t count = a.numel() / std::max<int64_t>(1, acc.numel());
  ConstTensor out = ConstTensor::zeros(a.dtype, keepdims ? kept
                                                         : *shapes::reduce(a.shape, axes,
                                                                           false, why));
  for (int64_t k = 0; k < out.numel(); ++k)
    out.set(k, mean ? acc.f[k] / count : acc.f[k]);
  return out;
}

std::optional<ConstTensor> foldCumSum(const ConstTensor &a, int64_t axis, bool exclusive,
                                      bool reverse, std::string &why) {
  auto ax = shapes::normalizeAxis(axis, a.shape.size());
  if (!ax) {
    why = "axis " + std::to_string(axis) + " out of range for rank " +
          std::to_string(a.shape.size());
    return std::nullopt;
  }
  int64_t dim = a.shape[*ax];
  int64_t outer = shapes::numElements(llvm::ArrayRef<int64_t>(a.shape).take_front(*ax));
  int64_t inner = shapes::numElements(llvm::ArrayRef<int64_t>(a.shape).drop_front(*ax + 1));
  if (a.dtype == DType::Bool) {
    why = "expects a numeric input, not bool";
    return std::nullopt;
  }
  ConstTensor out = ConstTensor::zeros(a.dtype, a.shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      // The running sum is held in the tensor's own type (rounded or wrapped
      // after every addition), as ONNX computes it.
      ConstTensor acc = ConstTensor::zeros(a.dtype, {});
      auto store = [&](int64_t k) {
        a.isFloat() ? out.set(k, acc.f[0]) : out.setInt(k, acc.i[0]);
      };
      for (int64_t step = 0; step < dim; ++step) {
        int64_t k = (o * dim + (reverse ? dim - 1 - step : step)) * inner + in;
        if (exclusive)
          store(k);
        if (a.isFloat())
          acc.set(0, acc.f[0] + a.f[k]);
        else
          acc.setInt(0, (int64_t)((uint64_t)acc.i[0] + (uint64_t)a.i[k]));
        if (!exclusive)
          store(k);
      }
    }
  return out;
}

std::optional<ConstTensor> foldGatherND(const ConstTensor &data, const ConstTensor &indices,
                                        int64_t batchDims, int64_t maxElements,
                                        std::string &why) {
  int64_t r = data.shape.size(), q = indices.shape.size();
  if (q < 1 || batchDims < 0 || batchDims >= std::min(r, q)) {
    why = "batch_dims " + std::to_string(batchDims) + " does not fit data of rank " +
          std::to_string(r) + " and indices of rank " + std::to_string(q);
    return std::nullopt;
  }
  int64_t k = indices.shape.back();
  if (k < 1 || k > r - batchDims) {
    why = "indices' last dimension " + std::to_string(k) + " must be in [1, " +
          std::to_string(r - batchDims) + "] for data of rank " + std::to_string(r);
    return std::nullopt;
  }
  for (int64_t d = 0; d < batchDims; ++d)
    if (data.shape[d] != indices.shape[d]) {
      why = "batch dimension " + std::to_string(d) + " differs between data (" +
            std::to_string(data.shape[d]) + ") and indices (" +
            std::to_string(indices.shape[d]) + ")";
      return std::nullopt;
    }
  shapes::Shape outShape(indices.shape.begin(), indices.shape.end() - 1);
  outShape.append(data.shape.begin() + batchDims + k, data.shape.end());
  auto count = shapes::checkedNumElements(outShape);
  if (!count || *count > maxElements) {
    why.clear(); // too large to fold, not malformed
    return std::nullopt;
  }
  llvm::ArrayRef<int64_t> ds(data.shape);
  int64_t batches = shapes::numElements(ds.take_front(batchDims));
  int64_t slice = shapes::numElements(ds.drop_front(batchDims + k));
  int64_t dataPerBatch = shapes::numElements(ds.drop_front(batchDims));
  int64_t tuplesPerBatch =
      shapes::numElements(llvm::ArrayRef<int64_t>(indices.shape).drop_front(batchDims).drop_back());
  auto strides = stridesOf(ds.drop_front(batchDims));
  ConstTensor out = ConstTensor::zeros(data.dtype, outShape);
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t t = 0; t < tuplesPerBatch; ++t) {
      int64_t tuple = (b * tuplesPerBatch + t) * k, offset = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t dim = ds[batchDims + j], ix = indices.asInt(tuple + j);
        if (ix < -dim || ix >= dim) {
          why = "index " + std::to_string(ix) + " out of range for dim of size " +
                std::to_string(dim);
          return std::nullopt;
        }
        offset += (ix < 0 ? ix + dim : ix) * strides[j];
      }
      int64_t src = b * dataPerBatch + offset, dst = (b * tuplesPerBatch + t) * slice;
      for (int64_t e = 0; e < slice; ++e) {
        if (out.isFloat())
          out.f[dst + e] = data.f[src + e];
        else
          out.i[dst + e] = data.i[src + e];
      }
    }
  return out;
}

/// Whether every slice of `a` along dim d (of size > 1) equals the first.
static bool isUniformDim(const ConstTensor &a, size_t d) {
  int64_t dim = a.shape[d];
  if (dim <= 1)
    return false;
  int64_t inner = shapes::numElements(llvm::ArrayRef<int64_t>(a.shape).drop_front(d + 1));
  int64_t outer = shapes::numElements(llvm::ArrayRef<int64_t>(a.shape).take_front(d));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 1; j < dim; ++j)
      for (int64_t in = 0; in < inner; ++in) {
        int64_t k = (o * dim + j) * inner + in, first = o * dim * inner + in;
        bool same = a.isFloat() ? (a.f[k] == a.f[first] ||
                                   (std::isnan(a.f[k]) && std::isnan(a.f[first])))
                                : a.i[k] == a.i[first];
        if (!same)
          return false;
      }
  return true;
}

bool hasUniformDim(const ConstTensor &a) {
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (isUniformDim(a, d))
      return true;
  return false;
}

ConstTensor compressUniformDims(const ConstTensor &a) {
  // Sliced from `a` itself until a dim compresses: `a` may be a mask of 2^24
  // elements, not worth copying.
  std::optional<ConstTensor> cur;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const ConstTensor &from = cur ? *cur : a;
    if (!isUniformDim(from, d))
      continue;
    llvm::SmallVector<int64_t> lo(from.shape.size(), 0), hi(from.shape.begin(), from.shape.end()),
        st(from.shape.size(), 1);
    hi[d] = 1;
    cur = foldSlice(from, lo, hi, st);
  }
  return cur ? std::move(*cur) : a;
}

} // namespace pipemesh::onnximport
