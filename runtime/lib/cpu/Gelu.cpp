//===- Gelu.cpp - GELU, exact and tanh-approximated, and its gradient -------===//
//
// exact:  gelu(x) = x * Phi(x),  Phi(x) = erfc(-x / sqrt 2) / 2
//         gelu'(x) = Phi(x) + x * phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
// tanh:   u = sqrt(2/pi) * (x + 0.044715 x^3)
//         gelu(x) = x/2 * (1 + tanh u) = x * s,  s = 1 / (1 + exp(-2u))
//         gelu'(x) = s + 2 x s (1 - s) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2)
// Writing 1 + tanh u as 2s avoids the cancellation of 1 + tanh u for u << 0.
// double uses libm's erfc/exp (the reference); float uses vectorizable
// approximations (fastExp, and erfc from Numerical Recipes' Chebyshev fit,
// relative error < 1.2e-7), so the loops vectorize (AVX2 + FMA where the CPU
// has them: see KernelUtil.h).
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;    // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2 / pi)
constexpr double kTanhCoef = 0.044715;

PIPEMESH_ALWAYS_INLINE double normalCdf(double x) { return 0.5 * std::erfc(-x * kSqrtHalf); }
PIPEMESH_ALWAYS_INLINE float normalCdf(float x) {
  const float w = -x * float(kSqrtHalf);
  const float z = std::fabs(w);
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float erfcAbs = t * fastExp(p - z * z);
  return 0.5f * (w >= 0.0f ? erfcAbs : 2.0f - erfcAbs);
}

/// Largest argument given to exp in the tanh form: 1 / (1 + e) stays finite
/// and e * s stays a number.
template <typename T> constexpr T kMaxExpArg = sizeof(T) == 4 ? T(80) : T(700);

template <typename T> PIPEMESH_ALWAYS_INLINE T geluTanh(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kTanhCoef) * x * x * x);
  const T e = fastExp(std::min(T(-2) * u, kMaxExpArg<T>));
  return x / (T(1) + e);
}

template <typename T> PIPEMESH_ALWAYS_INLINE T geluTanhGrad(T x) {
  const T x2 = x * x;
  const T u = T(kSqrt2OverPi) * (x + T(kTanhCoef) * x2 * x);
  const T e = fastExp(std::min(T(-2) * u, kMaxExpArg<T>));
  const T s = T(1) / (T(1) + e);
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kTanhCoef) * x2);
  return s + T(2) * x * s * (e * s) * du;
}

template <typename T> PIPEMESH_ALWAYS_INLINE T geluExactGrad(T x) {
  return normalCdf(x) + x * T(kInvSqrt2Pi) * fastExp(T(-0.5) * x * x);
}

/// y[0..n) = gelu(x[0..n)), one chunk.
template <typename T>
PIPEMESH_ALWAYS_INLINE void geluSpanImpl(const T *x, T *y, int64_t n, bool tanhApprox) {
  if (tanhApprox) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = geluTanh(x[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = x[i] * normalCdf(x[i]);
  }
}
PIPEMESH_MULTIVERSION(void, geluSpan, (const float *x, float *y, int64_t n, bool tanhApprox),
                      (x, y, n, tanhApprox))
void geluSpan(const double *x, double *y, int64_t n, bool t) { geluSpanImpl(x, y, n, t); }

/// dx[0..n) = dy * gelu'(x), one chunk.
template <typename T>
PIPEMESH_ALWAYS_INLINE void geluGradSpanImpl(const T *dy, const T *x, T *dx, int64_t n,
                                             bool tanhApprox) {
  if (tanhApprox) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = dy[i] * geluTanhGrad(x[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      dx[i] = dy[i] * geluExactGrad(x[i]);
  }
}
PIPEMESH_MULTIVERSION(void, geluGradSpan,
                      (const float *dy, const float *x, float *dx, int64_t n, bool tanhApprox),
                      (dy, x, dx, n, tanhApprox))
void geluGradSpan(const double *dy, const double *x, double *dx, int64_t n, bool t) {
  geluGradSpanImpl(dy, x, dx, n, t);
}

constexpr int64_t kChunk = 8192;

} // namespace

// `omp simd` vectorizes the spans without alias checks: an output may be an
// input (in place), since every element is read and written at one index.
template <typename T> void gelu(const T *x, T *y, int64_t n, bool tanhApprox) {
  forEachChunk(n, kChunk, kParallelGrain,
               [&](int64_t i0, int64_t len) { geluSpan(x + i0, y + i0, len, tanhApprox); });
}

template <typename T> void geluGrad(const T *dy, const T *x, T *dx, int64_t n, bool tanhApprox) {
  forEachChunk(n, kChunk, kParallelGrain, [&](int64_t i0, int64_t len) {
    geluGradSpan(dy + i0, x + i0, dx + i0, len, tanhApprox);
  });
}

template void gelu<float>(const float *, float *, int64_t, bool);
template void gelu<double>(const double *, double *, int64_t, bool);
template void geluGrad<float>(const float *, const float *, float *, int64_t, bool);
template void geluGrad<double>(const double *, const double *, double *, int64_t, bool);

} // namespace pipemesh::rt::cpu
