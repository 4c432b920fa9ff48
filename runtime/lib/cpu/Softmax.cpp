//===- Softmax.cpp - softmax, log-softmax and their gradients ---------------===//
//
// Row-wise over the last `cols` elements, rows in parallel:
//   softmax:      y = exp(x - max) / sum(exp(x - max))
//   log_softmax:  y = x - max - log(sum(exp(x - max)))
//   softmax_grad:     dx = y * (dy - sum(dy * y))
//   log_softmax_grad: dx = dy - exp(y) * sum(dy)
// Sums accumulate in double. A row that is entirely -inf gives softmax 0 and
// log_softmax -inf (PyTorch gives NaN there).
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

template <typename T> PIPEMESH_ALWAYS_INLINE void softmaxRowImpl(const T *xr, T *yr, int64_t cols) {
  const T m = rowMax(xr, cols);
  if (m == -std::numeric_limits<T>::infinity()) {
    for (int64_t j = 0; j < cols; ++j)
      yr[j] = T(0);
    return;
  }
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j) {
    yr[j] = fastExp(xr[j] - m);
    sum += Acc(yr[j]);
  }
  const T inv = T(1.0 / sum);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j)
    yr[j] *= inv;
}
PIPEMESH_MULTIVERSION(void, softmaxRow, (const float *xr, float *yr, int64_t cols), (xr, yr, cols))
void softmaxRow(const double *xr, double *yr, int64_t cols) { softmaxRowImpl(xr, yr, cols); }

template <typename T>
PIPEMESH_ALWAYS_INLINE void logSoftmaxRowImpl(const T *xr, T *yr, int64_t cols) {
  const T m = rowMax(xr, cols);
  if (m == -std::numeric_limits<T>::infinity()) {
    for (int64_t j = 0; j < cols; ++j)
      yr[j] = m;
    return;
  }
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j)
    sum += Acc(fastExp(xr[j] - m));
  const T shift = T(Acc(m) + std::log(sum));
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j)
    yr[j] = xr[j] - shift;
}
PIPEMESH_MULTIVERSION(void, logSoftmaxRow, (const float *xr, float *yr, int64_t cols),
                      (xr, yr, cols))
void logSoftmaxRow(const double *xr, double *yr, int64_t cols) { logSoftmaxRowImpl(xr, yr, cols); }

template <typename T>
PIPEMESH_ALWAYS_INLINE void softmaxGradRowImpl(const T *dyr, const T *yr, T *dxr, int64_t cols) {
  Acc dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < cols; ++j)
    dot += Acc(dyr[j]) * Acc(yr[j]);
  const T d = T(dot);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j)
    dxr[j] = yr[j] * (dyr[j] - d);
}
PIPEMESH_MULTIVERSION(void, softmaxGradRow,
                      (const float *dyr, const float *yr, float *dxr, int64_t cols),
                      (dyr, yr, dxr, cols))
void softmaxGradRow(const double *dyr, const double *yr, double *dxr, int64_t cols) {
  softmaxGradRowImpl(dyr, yr, dxr, cols);
}

template <typename T>
PIPEMESH_ALWAYS_INLINE void logSoftmaxGradRowImpl(const T *dyr, const T *yr, T *dxr,
                                                  int64_t cols) {
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j)
    sum += Acc(dyr[j]);
  const T s = T(sum);
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j)
    dxr[j] = dyr[j] - fastExp(yr[j]) * s;
}
PIPEMESH_MULTIVERSION(void, logSoftmaxGradRow,
                      (const float *dyr, const float *yr, float *dxr, int64_t cols),
                      (dyr, yr, dxr, cols))
void logSoftmaxGradRow(const double *dyr, const double *yr, double *dxr, int64_t cols) {
  logSoftmaxGradRowImpl(dyr, yr, dxr, cols);
}

} // namespace

template <typename T> void softmax(const T *x, T *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    softmaxRow(x + r * cols, y + r * cols, cols);
}

template <typename T> void logSoftmax(const T *x, T *y, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    logSoftmaxRow(x + r * cols, y + r * cols, cols);
}

template <typename T> void softmaxGrad(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    softmaxGradRow(dy + r * cols, y + r * cols, dx + r * cols, cols);
}

template <typename T>
void logSoftmaxGrad(const T *dy, const T *y, T *dx, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    logSoftmaxGradRow(dy + r * cols, y + r * cols, dx + r * cols, cols);
}

#define PIPEMESH_INSTANTIATE(T)                                                                    \
  template void softmax<T>(const T *, T *, int64_t, int64_t);                                      \
  template void logSoftmax<T>(const T *, T *, int64_t, int64_t);                                   \
  template void softmaxGrad<T>(const T *, const T *, T *, int64_t, int64_t);                       \
  template void logSoftmaxGrad<T>(const T *, const T *, T *, int64_t, int64_t);
PIPEMESH_INSTANTIATE(float)
PIPEMESH_INSTANTIATE(double)
#undef PIPEMESH_INSTANTIATE

} // namespace pipemesh::rt::cpu
