//===- Elementwise.cpp - binary, unary, where, cast, axpy ---------------===//
//
// Binary ops and `where` broadcast with numpy rules. The operands' strides are
// coalesced so that the inner loop runs over the longest contiguous (or
// broadcast) run, and the inner loop is specialised for the stride patterns
// (1,1), (1,0), (0,1) so that the compiler vectorizes it.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include "pipemesh/runtime/Bf16.h"

#include <type_traits>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

template <typename T> struct AddOp { T operator()(T a, T b) const { return a + b; } };
template <typename T> struct SubOp { T operator()(T a, T b) const { return a - b; } };
template <typename T> struct MulOp { T operator()(T a, T b) const { return a * b; } };
template <typename T> struct DivOp { T operator()(T a, T b) const { return a / b; } };
template <typename T> struct PowOp {
  T operator()(T a, T b) const { return static_cast<T>(std::pow(a, b)); }
};
/// max propagates NaN (torch.maximum); `a != a` is false for integers.
template <typename T> struct MaxOp {
  T operator()(T a, T b) const { return (a > b || a != a) ? a : b; }
};
template <typename T> struct EqualOp { T operator()(T a, T b) const { return T(a == b); } };
template <typename T> struct LessOp { T operator()(T a, T b) const { return T(a < b); } };
template <typename T> struct AndOp {
  T operator()(T a, T b) const { return T(a != T(0) && b != T(0)); }
};

template <typename T, typename F>
void broadcastBinary(F f, const T *a, const Dims &aShape, const T *b, const Dims &bShape, T *out,
                     const Dims &outShape) {
  Dims shape = outShape;
  std::array<Dims, 3> st{broadcastStrides(aShape, outShape), broadcastStrides(bShape, outShape),
                         contiguousStrides(outShape)};
  coalesce(shape, st);
  const int64_t sa = st[0].back(), sb = st[1].back();
  auto run = [&](const std::array<int64_t, 3> &off, int64_t n) {
    const T *pa = a + off[0];
    const T *pb = b + off[1];
    T *po = out + off[2];
    if (sa == 1 && sb == 1) {
      for (int64_t j = 0; j < n; ++j)
        po[j] = f(pa[j], pb[j]);
    } else if (sa == 1 && sb == 0) {
      const T bv = *pb;
      for (int64_t j = 0; j < n; ++j)
        po[j] = f(pa[j], bv);
    } else if (sa == 0 && sb == 1) {
      const T av = *pa;
      for (int64_t j = 0; j < n; ++j)
        po[j] = f(av, pb[j]);
    } else {
      for (int64_t j = 0; j < n; ++j)
        po[j] = f(pa[j * sa], pb[j * sb]);
    }
  };
  // pow is the one binary op with real arithmetic; the others move memory.
  forEachRun(shape, st, run, std::is_same_v<F, PowOp<T>> ? kParallelGrain : kCopyGrain);
}

template <typename T, typename F> void unaryLoop(F f, const T *x, T *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(x[i]);
}

} // namespace

template <typename T>
void binary(Binary op, const T *a, const Dims &aShape, const T *b, const Dims &bShape, T *out,
            const Dims &outShape) {
  switch (op) {
  case Binary::Add: return broadcastBinary(AddOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Sub: return broadcastBinary(SubOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Mul: return broadcastBinary(MulOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Div: return broadcastBinary(DivOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Pow: return broadcastBinary(PowOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Max: return broadcastBinary(MaxOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Equal: return broadcastBinary(EqualOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::Less: return broadcastBinary(LessOp<T>{}, a, aShape, b, bShape, out, outShape);
  case Binary::And: return broadcastBinary(AndOp<T>{}, a, aShape, b, bShape, out, outShape);
  }
}

template <typename T> void unary(Unary op, const T *x, T *y, int64_t n) {
  // Transcendentals in the element type's precision (std::tanh(float) is tanhf).
  switch (op) {
  case Unary::Neg: return unaryLoop([](T v) { return T(-v); }, x, y, n);
  case Unary::Sqrt: return unaryLoop([](T v) { return T(std::sqrt(v)); }, x, y, n);
  case Unary::Tanh: return unaryLoop([](T v) { return T(std::tanh(v)); }, x, y, n);
  case Unary::Erf: return unaryLoop([](T v) { return T(std::erf(v)); }, x, y, n);
  case Unary::Exp: return unaryLoop([](T v) { return T(std::exp(v)); }, x, y, n);
  case Unary::Log: return unaryLoop([](T v) { return T(std::log(v)); }, x, y, n);
  case Unary::Sigmoid: // exp of a non-positive argument only: no overflow
    return unaryLoop(
        [](T v) {
          T e = std::exp(-std::abs(v));
          return v >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
        },
        x, y, n);
  case Unary::Not: return unaryLoop([](T v) { return T(v == T(0)); }, x, y, n);
  }
}

template <typename T>
void where(const uint8_t *cond, const Dims &cShape, const T *x, const Dims &xShape, const T *y,
           const Dims &yShape, T *out, const Dims &outShape) {
  Dims shape = outShape;
  std::array<Dims, 4> st{broadcastStrides(cShape, outShape), broadcastStrides(xShape, outShape),
                         broadcastStrides(yShape, outShape), contiguousStrides(outShape)};
  coalesce(shape, st);
  const int64_t sc = st[0].back(), sx = st[1].back(), sy = st[2].back();
  forEachRun(shape, st, [&](const std::array<int64_t, 4> &off, int64_t n) {
    const uint8_t *pc = cond + off[0];
    const T *px = x + off[1];
    const T *py = y + off[2];
    T *po = out + off[3];
    if (sc == 1 && sx == 1 && sy == 1) {
      for (int64_t j = 0; j < n; ++j)
        po[j] = pc[j] ? px[j] : py[j];
    } else {
      for (int64_t j = 0; j < n; ++j)
        po[j] = pc[j * sc] ? px[j * sx] : py[j * sy];
    }
  });
}

template <typename From, typename To> void castBuffer(const From *x, To *y, int64_t n) {
  if constexpr (std::is_same_v<To, uint8_t>) {
    // uint8 stores i1: anything non-zero is true (ONNX Cast to bool).
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] != From(0);
  } else {
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
    for (int64_t i = 0; i < n; ++i)
      y[i] = static_cast<To>(x[i]);
  }
}

void widenBf16Buffer(const uint16_t *x, float *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
  for (int64_t i = 0; i < n; ++i)
    y[i] = bf16ToFloat(x[i]);
}

void roundBf16Buffer(const float *x, uint16_t *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
  for (int64_t i = 0; i < n; ++i)
    y[i] = floatToBf16(x[i]);
}

void roundBf16Unaligned(const uint8_t *x, uint16_t *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, x + 4 * i, 4);
    y[i] = floatToBf16(f);
  }
}

template <typename T> void axpy(T alpha, const T *x, T *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
  for (int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

#define PIPEMESH_INSTANTIATE(T)                                                                    \
  template void binary<T>(Binary, const T *, const Dims &, const T *, const Dims &, T *,          \
                          const Dims &);                                                           \
  template void unary<T>(Unary, const T *, T *, int64_t);                                          \
  template void where<T>(const uint8_t *, const Dims &, const T *, const Dims &, const T *,       \
                         const Dims &, T *, const Dims &);
PIPEMESH_INSTANTIATE(float)
PIPEMESH_INSTANTIATE(double)
PIPEMESH_INSTANTIATE(int64_t)
PIPEMESH_INSTANTIATE(int32_t)
PIPEMESH_INSTANTIATE(uint8_t)
#undef PIPEMESH_INSTANTIATE

template void axpy<float>(float, const float *, float *, int64_t);
template void axpy<double>(double, const double *, double *, int64_t);

#define PIPEMESH_CAST_FROM(From)                                                                   \
  template void castBuffer<From, float>(const From *, float *, int64_t);                         \
  template void castBuffer<From, double>(const From *, double *, int64_t);                       \
  template void castBuffer<From, int64_t>(const From *, int64_t *, int64_t);                     \
  template void castBuffer<From, int32_t>(const From *, int32_t *, int64_t);                     \
  template void castBuffer<From, uint8_t>(const From *, uint8_t *, int64_t);
PIPEMESH_CAST_FROM(float)
PIPEMESH_CAST_FROM(double)
PIPEMESH_CAST_FROM(int64_t)
PIPEMESH_CAST_FROM(int32_t)
PIPEMESH_CAST_FROM(uint8_t)
#undef PIPEMESH_CAST_FROM

} // namespace pipemesh::rt::cpu
