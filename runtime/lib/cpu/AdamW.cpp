//===- AdamW.cpp - the AdamW update and the sum of squares ------------------===//
//
// adamw follows torch.optim.AdamW (PyTorch 1.13, amsgrad=False, maximize=False)
// operation by operation, with the hyper-parameters rounded to T as PyTorch
// does when it applies a Python scalar to a float tensor:
//   g  = gradScale * g                      (clip_grad_norm_ scales the grads)
//   p  = p * (1 - lr * wd)                  (param.mul_)
//   m  = m * b1 + (1 - b1) * g              (exp_avg.mul_(b1).add_(g, alpha=1-b1))
//   v  = v * b2 + (1 - b2) * g * g          (exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2))
//   denom = sqrt(v) / sqrt(1 - b2^step) + eps
//   p  = p + (-lr / (1 - b1^step)) * (m / denom)   (param.addcdiv_)
// The bias corrections are computed in double, as Python does.
// sumSquares adds in double over fixed chunks, then the chunks in order, so the
// global norm does not depend on the number of threads.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include "pipemesh/runtime/Bf16.h"

#include <type_traits>
#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

template <typename T> PIPEMESH_ALWAYS_INLINE double sumSquaresSpanImpl(const T *x, int64_t n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i)
    s += double(x[i]) * double(x[i]);
  return s;
}
PIPEMESH_MULTIVERSION(double, sumSquaresSpan, (const float *x, int64_t n), (x, n))
double sumSquaresSpan(const double *x, int64_t n) { return sumSquaresSpanImpl(x, n); }

/// The update's constants, rounded to T as PyTorch does.
template <typename T> struct AdamConsts {
  T decay, gs, b1, b2, a1, a2, stepSize, bc2Sqrt, e;
  bool decays, scales;
};

template <typename T>
PIPEMESH_ALWAYS_INLINE void adamwSpanImpl(T *p, const T *g, T *m, T *v, int64_t n,
                                          const AdamConsts<T> &k) {
  const AdamConsts<T> c = k;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gi = c.scales ? g[i] * c.gs : g[i];
    T pi = c.decays ? p[i] * c.decay : p[i];
    const T mi = m[i] * c.b1 + c.a1 * gi;
    const T vi = v[i] * c.b2 + c.a2 * gi * gi;
    const T denom = std::sqrt(vi) / c.bc2Sqrt + c.e;
    pi = pi + c.stepSize * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}
// Not multiversioned: the update is memory-bound, and the base build (no FMA
// contraction) keeps PyTorch's rounding of every operation.
void adamwSpan(float *p, const float *g, float *m, float *v, int64_t n,
               const AdamConsts<float> &k) {
  adamwSpanImpl(p, g, m, v, n, k);
}
void adamwSpan(double *p, const double *g, double *m, double *v, int64_t n,
               const AdamConsts<double> &k) {
  adamwSpanImpl(p, g, m, v, n, k);
}

} // namespace

template <typename T> double sumSquares(const T *x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks);
  forEachChunk(n, kChunk, kParallelGrain, [&](int64_t i0, int64_t len) {
    part[i0 / kChunk] = sumSquaresSpan(x + i0, len);
  });
  double total = 0;
  for (double s : part)
    total += s;
  return total;
}

template <typename T>
void adamw(T *p, const T *g, T *m, T *v, int64_t n, double lr, double beta1, double beta2,
           double eps, double weightDecay, int64_t step, double gradScale, uint16_t *bf16Copy) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  AdamConsts<T> k;
  k.decay = T(1.0 - lr * weightDecay);
  k.decays = weightDecay != 0.0;
  k.scales = gradScale != 1.0;
  k.gs = T(gradScale);
  k.b1 = T(beta1);
  k.b2 = T(beta2);
  k.a1 = T(1.0 - beta1);
  k.a2 = T(1.0 - beta2);
  k.stepSize = T(-(lr / bc1));
  k.bc2Sqrt = T(std::sqrt(bc2));
  k.e = T(eps);
  forEachChunk(n, 1 << 14, kParallelGrain, [&](int64_t i0, int64_t len) {
    adamwSpan(p + i0, g + i0, m + i0, v + i0, len, k);
    if constexpr (std::is_same_v<T, float>)
      if (bf16Copy)
        for (int64_t i = i0; i < i0 + len; ++i)
          bf16Copy[i] = floatToBf16(p[i]);
  });
}

template double sumSquares<float>(const float *, int64_t);
template double sumSquares<double>(const double *, int64_t);
template void adamw<float>(float *, const float *, float *, float *, int64_t, double, double,
                           double, double, double, int64_t, double, uint16_t *);
template void adamw<double>(double *, const double *, double *, double *, int64_t, double, double,
                            double, double, double, int64_t, double, uint16_t *);

} // namespace pipemesh::rt::cpu
