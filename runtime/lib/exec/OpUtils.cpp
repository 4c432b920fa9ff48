//===- OpUtils.cpp - shape arithmetic and dtype-generic helpers -------------===//
#include "OpUtils.h"

#include "pipemesh/runtime/Bf16.h"

#include <algorithm>
#include <cstring>

namespace pipemesh::rt::ops {

Dims contiguousStrides(const Dims &shape) {
  Dims s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    s[d - 1] = s[d] * shape[d];
  return s;
}

Dims broadcastStrides(const Dims &shape, const Dims &out) {
  Dims own = contiguousStrides(shape);
  Dims s(out.size(), 0);
  size_t off = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    s[off + d] = shape[d] == 1 ? 0 : own[d];
  return s;
}

std::optional<Dims> broadcastShape(const Dims &a, const Dims &b) {
  size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcastsTo(const Dims &from, const Dims &to) {
  if (from.size() > to.size())
    return false;
  size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[off + i])
      return false;
  return true;
}

int64_t product(const Dims &shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    n *= shape[i];
  return n;
}

void copyStrided(const Dims &shape, size_t es, const void *src, const Dims &srcStrides, void *dst,
                 const Dims &dstStrides) {
  const char *s = static_cast<const char *>(src);
  char *d = static_cast<char *>(dst);
  if (shape.empty()) {
    std::memcpy(d, s, es);
    return;
  }
  // Rows of the innermost dim; memcpy them when both sides are contiguous.
  Dims outer(shape.begin(), shape.end() - 1);
  int64_t inner = shape.back();
  int64_t si = srcStrides.back(), di = dstStrides.back();
  Dims so(srcStrides.begin(), srcStrides.end() - 1), dso(dstStrides.begin(), dstStrides.end() - 1);
  if (outer.empty()) {
    outer.push_back(1);
    so.push_back(0);
    dso.push_back(0);
  }
  forEachIndex<2>(outer, {so, dso}, [&](int64_t, const std::array<int64_t, 2> &off) {
    const char *sp = s + off[0] * (int64_t)es;
    char *dp = d + off[1] * (int64_t)es;
    if (si == 1 && di == 1) {
      std::memcpy(dp, sp, inner * es);
      return;
    }
    for (int64_t i = 0; i < inner; ++i)
      std::memcpy(dp + i * di * (int64_t)es, sp + i * si * (int64_t)es, es);
  });
}

double loadAsDouble(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::F32:
    return static_cast<const float *>(p)[i];
  case DType::F64:
    return static_cast<const double *>(p)[i];
  case DType::I64:
    return (double)static_cast<const int64_t *>(p)[i];
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I1:
    return static_cast<const uint8_t *>(p)[i] ? 1.0 : 0.0;
  case DType::BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  }
  return 0;
}

int64_t loadAsInt(const void *p, DType t, int64_t i) {
  switch (t) {
  case DType::F32:
    return (int64_t) static_cast<const float *>(p)[i];
  case DType::F64:
    return (int64_t) static_cast<const double *>(p)[i];
  case DType::I64:
    return static_cast<const int64_t *>(p)[i];
  case DType::I32:
    return static_cast<const int32_t *>(p)[i];
  case DType::I1:
    return static_cast<const uint8_t *>(p)[i] ? 1 : 0;
  case DType::BF16:
    return (int64_t)bf16ToFloat(static_cast<const uint16_t *>(p)[i]);
  }
  return 0;
}

void storeFromDouble(void *p, DType t, int64_t i, double v) {
  switch (t) {
  case DType::F32:
    static_cast<float *>(p)[i] = (float)v;
    return;
  case DType::F64:
    static_cast<double *>(p)[i] = v;
    return;
  case DType::I64:
    static_cast<int64_t *>(p)[i] = (int64_t)v;
    return;
  case DType::I32:
    static_cast<int32_t *>(p)[i] = (int32_t)v;
    return;
  case DType::I1:
    static_cast<uint8_t *>(p)[i] = v != 0;
    return;
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBf16((float)v);
    return;
  }
}

void storeFromInt(void *p, DType t, int64_t i, int64_t v) {
  switch (t) {
  case DType::F32:
    static_cast<float *>(p)[i] = (float)v;
    return;
  case DType::F64:
    static_cast<double *>(p)[i] = (double)v;
    return;
  case DType::I64:
    static_cast<int64_t *>(p)[i] = v;
    return;
  case DType::I32:
    static_cast<int32_t *>(p)[i] = (int32_t)v;
    return;
  case DType::I1:
    static_cast<uint8_t *>(p)[i] = v != 0;
    return;
  case DType::BF16:
    static_cast<uint16_t *>(p)[i] = floatToBf16((float)v);
    return;
  }
}

static bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16;
}

void convert(const void *src, DType from, void *dst, DType to, int64_t n) {
  if (from == to) {
    std::memmove(dst, src, (size_t)n * dtypeSize(to));
    return;
  }
  if (isFloat(from) || isFloat(to)) {
    for (int64_t i = 0; i < n; ++i)
      storeFromDouble(dst, to, i, loadAsDouble(src, from, i));
  } else {
    for (int64_t i = 0; i < n; ++i)
      storeFromInt(dst, to, i, loadAsInt(src, from, i));
  }
}

} // namespace pipemesh::rt::ops
