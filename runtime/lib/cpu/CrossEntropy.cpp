//===- CrossEntropy.cpp - softmax cross-entropy and its gradient ------------===//
//
// Per row of logits x[V] with target t (rows in parallel):
//   loss = logsumexp(x) - x[t],   dlogits = dloss * (softmax(x) - onehot(t)).
// Rows whose target is ignoreIndex have loss 0, are not counted and get a zero
// gradient. A target outside [0, V) (other than ignoreIndex) is a bad input:
// its row's loss and gradient are NaN, so that the run shows it. The total is
// summed in row order in double (independent of the number of threads).
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

/// max and sum(exp(x - max)) of one row.
template <typename T>
PIPEMESH_ALWAYS_INLINE void rowMaxSumImpl(const T *x, int64_t V, T *max, Acc *expSum) {
  const T m = rowMax(x, V);
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; ++j)
    sum += Acc(fastExp(x[j] - m));
  *max = m;
  *expSum = sum;
}
PIPEMESH_MULTIVERSION(void, rowMaxSum, (const float *x, int64_t V, float *max, Acc *expSum),
                      (x, V, max, expSum))
void rowMaxSum(const double *x, int64_t V, double *max, Acc *expSum) {
  rowMaxSumImpl(x, V, max, expSum);
}

/// dx = d * softmax(x) - d * onehot(t), one row: the exponentials are written
/// once (dx = exp(x - max), summed on the way), then scaled in place.
template <typename T>
PIPEMESH_ALWAYS_INLINE void gradRowImpl(const T *x, int64_t t, T d, T *dx, int64_t V) {
  const T m = rowMax(x, V);
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < V; ++j) {
    dx[j] = fastExp(x[j] - m);
    sum += Acc(dx[j]);
  }
  const T scale = T(Acc(d) / sum);
#pragma omp simd
  for (int64_t j = 0; j < V; ++j)
    dx[j] *= scale;
  dx[t] -= d;
}
PIPEMESH_MULTIVERSION(void, gradRow, (const float *x, int64_t t, float d, float *dx, int64_t V),
                      (x, t, d, dx, V))
void gradRow(const double *x, int64_t t, double d, double *dx, int64_t V) {
  gradRowImpl(x, t, d, dx, V);
}

} // namespace

template <typename T>
std::pair<double, int64_t> crossEntropy(const T *logits, const int64_t *targets, T *losses,
                                        int64_t rows, int64_t V, int64_t ignoreIndex) {
  std::vector<double> rowLoss(rows);
#pragma omp parallel for schedule(static) if (rows * V > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targets[r];
    if (t == ignoreIndex) {
      rowLoss[r] = 0;
      continue;
    }
    if (t < 0 || t >= V) {
      rowLoss[r] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    const T *x = logits + r * V;
    T m;
    Acc sum;
    rowMaxSum(x, V, &m, &sum);
    rowLoss[r] = std::log(sum) - (Acc(x[t]) - Acc(m));
  }
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (losses)
      losses[r] = T(rowLoss[r]);
    if (targets[r] != ignoreIndex) {
      total += rowLoss[r];
      ++counted;
    }
  }
  return {total, counted};
}

template <typename T>
void crossEntropyGrad(const T *logits, const int64_t *targets, const T *dlossPerRow,
                      T dlossScalar, T *dlogits, int64_t rows, int64_t V, int64_t ignoreIndex) {
#pragma omp parallel for schedule(static) if (rows * V > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targets[r];
    T *dx = dlogits + r * V;
    if (t == ignoreIndex) {
      std::fill(dx, dx + V, T(0));
      continue;
    }
    if (t < 0 || t >= V) {
      std::fill(dx, dx + V, std::numeric_limits<T>::quiet_NaN());
      continue;
    }
    gradRow(logits + r * V, t, dlossPerRow ? dlossPerRow[r] : dlossScalar, dx, V);
  }
}

#define PIPEMESH_INSTANTIATE(T)                                                                    \
  template std::pair<double, int64_t> crossEntropy<T>(const T *, const int64_t *, T *, int64_t,   \
                                                      int64_t, int64_t);                           \
  template void crossEntropyGrad<T>(const T *, const int64_t *, const T *, T, T *, int64_t,       \
                                    int64_t, int64_t);
PIPEMESH_INSTANTIATE(float)
PIPEMESH_INSTANTIATE(double)
#undef PIPEMESH_INSTANTIATE

} // namespace pipemesh::rt::cpu
