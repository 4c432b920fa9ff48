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

#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

template <typename T> double sumSquares(const T *x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> part(chunks);
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = i0; i < i1; ++i)
      s += double(x[i]) * double(x[i]);
    part[c] = s;
  }
  double total = 0;
  for (double s : part)
    total += s;
  return total;
}

template <typename T>
void adamw(T *p, const T *g, T *m, T *v, int64_t n, double lr, double beta1, double beta2,
           double eps, double weightDecay, int64_t step, double gradScale) {
  const T decay = T(1.0 - lr * weightDecay);
  const bool decays = weightDecay != 0.0;
  const bool scales = gradScale != 1.0;
  const T gs = T(gradScale);
  const T b1 = T(beta1), b2 = T(beta2), a1 = T(1.0 - beta1), a2 = T(1.0 - beta2);
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  const T stepSize = T(-(lr / bc1));
  const T bc2Sqrt = T(std::sqrt(bc2));
  const T e = T(eps);
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const T gi = scales ? g[i] * gs : g[i];
    T pi = decays ? p[i] * decay : p[i];
    const T mi = m[i] * b1 + a1 * gi;
    const T vi = v[i] * b2 + a2 * gi * gi;
    const T denom = std::sqrt(vi) / bc2Sqrt + e;
    pi = pi + stepSize * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

template double sumSquares<float>(const float *, int64_t);
template double sumSquares<double>(const double *, int64_t);
template void adamw<float>(float *, const float *, float *, float *, int64_t, double, double,
                           double, double, double, int64_t, double);
template void adamw<double>(double *, const double *, double *, double *, int64_t, double, double,
                            double, double, double, int64_t, double);

} // namespace pipemesh::rt::cpu
