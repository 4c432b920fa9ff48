//===- LayerNorm.cpp - layer normalization and its gradient -----------------===//
//
// Forward, per row of `cols` elements (rows in parallel):
//   mean = sum(x) / cols,  var = sum((x - mean)^2) / cols  (biased, two-pass)
//   rstd = 1 / sqrt(var + eps),  y = (x - mean) * rstd * g + b
// Backward, with xhat = (x - mean) * rstd and dxhat = dy * g:
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//   dg = sum_rows(dy * xhat),  db = sum_rows(dy)
// The row statistics are recomputed from x (nothing is saved by the forward).
// dg/db are summed over fixed chunks of rows, then across chunks in order, so
// they are deterministic whatever the number of threads.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

/// Mean and 1/sqrt(var + eps) of one row, accumulated in double.
template <typename T> void rowStats(const T *x, int64_t cols, T eps, T &mean, T &rstd) {
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < cols; ++j)
    sum += Acc(x[j]);
  const Acc m = sum / Acc(cols);
  Acc sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < cols; ++j) {
    Acc d = Acc(x[j]) - m;
    sq += d * d;
  }
  mean = T(m);
  rstd = T(1.0 / std::sqrt(sq / Acc(cols) + Acc(eps)));
}

} // namespace

template <typename T>
void layerNorm(const T *x, const T *g, const T *b, T *y, int64_t rows, int64_t cols, T eps) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    T mean, rstd;
    rowStats(xr, cols, eps, mean, rstd);
    if (b) {
      for (int64_t j = 0; j < cols; ++j)
        yr[j] = (xr[j] - mean) * rstd * g[j] + b[j];
    } else {
      for (int64_t j = 0; j < cols; ++j)
        yr[j] = (xr[j] - mean) * rstd * g[j];
    }
  }
}

template <typename T>
void layerNormGrad(const T *dy, const T *x, const T *g, T *dx, T *dg, T *db, int64_t rows,
                   int64_t cols, T eps) {
  std::vector<T> means(rows), rstds(rows);
  // dx, row by row.
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    T *dxr = dx + r * cols;
    T mean, rstd;
    rowStats(xr, cols, eps, mean, rstd);
    means[r] = mean;
    rstds[r] = rstd;
    Acc sumD = 0, sumDX = 0;
#pragma omp simd reduction(+ : sumD, sumDX)
    for (int64_t j = 0; j < cols; ++j) {
      T xhat = (xr[j] - mean) * rstd;
      T dxhat = dyr[j] * g[j];
      sumD += Acc(dxhat);
      sumDX += Acc(dxhat * xhat);
    }
    const T meanD = T(sumD / Acc(cols)), meanDX = T(sumDX / Acc(cols));
    for (int64_t j = 0; j < cols; ++j) {
      T xhat = (xr[j] - mean) * rstd;
      dxr[j] = rstd * (dyr[j] * g[j] - meanD - xhat * meanDX);
    }
  }
  // dg, db: partial sums over fixed chunks of rows (independent of the number
  // of threads), then the partials added in chunk order.
  constexpr int64_t kRowChunk = 256, kColBlock = 64;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const int64_t colBlocks = (cols + kColBlock - 1) / kColBlock;
  std::vector<Acc> partG(chunks * cols), partB(chunks * cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t t = 0; t < chunks * colBlocks; ++t) {
    const int64_t c = t / colBlocks, j0 = t % colBlocks * kColBlock;
    const int64_t n = std::min(kColBlock, cols - j0);
    Acc *pg = partG.data() + c * cols + j0, *pb = partB.data() + c * cols + j0;
    for (int64_t r = c * kRowChunk; r < std::min(rows, (c + 1) * kRowChunk); ++r) {
      const T *xr = x + r * cols + j0, *dyr = dy + r * cols + j0;
      const T mean = means[r], rstd = rstds[r];
      for (int64_t j = 0; j < n; ++j) {
        pg[j] += Acc(dyr[j] * ((xr[j] - mean) * rstd));
        pb[j] += Acc(dyr[j]);
      }
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    Acc sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partG[c * cols + j];
      sb += partB[c * cols + j];
    }
    dg[j] = T(sg);
    if (db)
      db[j] = T(sb);
  }
}

template void layerNorm<float>(const float *, const float *, const float *, float *, int64_t,
                               int64_t, float);
template void layerNorm<double>(const double *, const double *, const double *, double *, int64_t,
                                int64_t, double);
template void layerNormGrad<float>(const float *, const float *, const float *, float *, float *,
                                   float *, int64_t, int64_t, float);
template void layerNormGrad<double>(const double *, const double *, const double *, double *,
                                    double *, double *, int64_t, int64_t, double);

} // namespace pipemesh::rt::cpu
