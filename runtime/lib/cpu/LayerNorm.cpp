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
template <typename T>
PIPEMESH_ALWAYS_INLINE void rowStats(const T *x, int64_t cols, T eps, T &mean, T &rstd) {
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

/// One row of the forward; b may be null.
template <typename T>
PIPEMESH_ALWAYS_INLINE void normRowImpl(const T *xr, const T *g, const T *b, T *yr, int64_t cols,
                                        T eps) {
  T mean, rstd;
  rowStats(xr, cols, eps, mean, rstd);
  if (b) {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
      yr[j] = (xr[j] - mean) * rstd * g[j] + b[j];
  } else {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
      yr[j] = (xr[j] - mean) * rstd * g[j];
  }
}
PIPEMESH_MULTIVERSION(void, normRow,
                      (const float *xr, const float *g, const float *b, float *yr, int64_t cols,
                       float eps),
                      (xr, g, b, yr, cols, eps))
void normRow(const double *xr, const double *g, const double *b, double *yr, int64_t cols,
             double eps) {
  normRowImpl(xr, g, b, yr, cols, eps);
}

/// dx of one row; returns its mean and rstd for dg.
template <typename T>
PIPEMESH_ALWAYS_INLINE void normGradRowImpl(const T *dyr, const T *xr, const T *g, T *dxr,
                                            int64_t cols, T eps, T *meanOut, T *rstdOut) {
  T mean, rstd;
  rowStats(xr, cols, eps, mean, rstd);
  Acc sumD = 0, sumDX = 0;
#pragma omp simd reduction(+ : sumD, sumDX)
  for (int64_t j = 0; j < cols; ++j) {
    T xhat = (xr[j] - mean) * rstd;
    T dxhat = dyr[j] * g[j];
    sumD += Acc(dxhat);
    sumDX += Acc(dxhat * xhat);
  }
  const T meanD = T(sumD / Acc(cols)), meanDX = T(sumDX / Acc(cols));
#pragma omp simd
  for (int64_t j = 0; j < cols; ++j) {
    T xhat = (xr[j] - mean) * rstd;
    dxr[j] = rstd * (dyr[j] * g[j] - meanD - xhat * meanDX);
  }
  *meanOut = mean;
  *rstdOut = rstd;
}
PIPEMESH_MULTIVERSION(void, normGradRow,
                      (const float *dyr, const float *xr, const float *g, float *dxr, int64_t cols,
                       float eps, float *meanOut, float *rstdOut),
                      (dyr, xr, g, dxr, cols, eps, meanOut, rstdOut))
void normGradRow(const double *dyr, const double *xr, const double *g, double *dxr, int64_t cols,
                 double eps, double *meanOut, double *rstdOut) {
  normGradRowImpl(dyr, xr, g, dxr, cols, eps, meanOut, rstdOut);
}

/// pg[j] += sum_r dy[r, j] * xhat[r, j], pb[j] += sum_r dy[r, j] over rows
/// [r0, r1), columns [j0, j0 + n), rows in order.
template <typename T>
PIPEMESH_ALWAYS_INLINE void paramGradBlockImpl(const T *dy, const T *x, const T *means,
                                               const T *rstds, int64_t cols, int64_t r0,
                                               int64_t r1, int64_t j0, int64_t n, Acc *pg,
                                               Acc *pb) {
  for (int64_t r = r0; r < r1; ++r) {
    const T *xr = x + r * cols + j0, *dyr = dy + r * cols + j0;
    const T mean = means[r], rstd = rstds[r];
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      pg[j] += Acc(dyr[j] * ((xr[j] - mean) * rstd));
      pb[j] += Acc(dyr[j]);
    }
  }
}
PIPEMESH_MULTIVERSION(void, paramGradBlock,
                      (const float *dy, const float *x, const float *means, const float *rstds,
                       int64_t cols, int64_t r0, int64_t r1, int64_t j0, int64_t n, Acc *pg,
                       Acc *pb),
                      (dy, x, means, rstds, cols, r0, r1, j0, n, pg, pb))
void paramGradBlock(const double *dy, const double *x, const double *means, const double *rstds,
                    int64_t cols, int64_t r0, int64_t r1, int64_t j0, int64_t n, Acc *pg,
                    Acc *pb) {
  paramGradBlockImpl(dy, x, means, rstds, cols, r0, r1, j0, n, pg, pb);
}

} // namespace

template <typename T>
void layerNorm(const T *x, const T *g, const T *b, T *y, int64_t rows, int64_t cols, T eps) {
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    normRow(x + r * cols, g, b, y + r * cols, cols, eps);
}

template <typename T>
void layerNormGrad(const T *dy, const T *x, const T *g, T *dx, T *dg, T *db, int64_t rows,
                   int64_t cols, T eps) {
  std::vector<T> means(rows), rstds(rows);
  // dg, db: partial sums over fixed chunks of rows (independent of the number
  // of threads), then the partials added in chunk order.
  constexpr int64_t kRowChunk = 256, kColBlock = 64;
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const int64_t colBlocks = (cols + kColBlock - 1) / kColBlock;
  std::vector<Acc> partG(chunks * cols), partB(chunks * cols);
#pragma omp parallel if (rows * cols > kParallelGrain)
  {
    // dx, row by row.
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      normGradRow(dy + r * cols, x + r * cols, g, dx + r * cols, cols, eps, &means[r], &rstds[r]);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < chunks * colBlocks; ++t) {
      const int64_t c = t / colBlocks, j0 = t % colBlocks * kColBlock;
      paramGradBlock(dy, x, means.data(), rstds.data(), cols, c * kRowChunk,
                     std::min(rows, (c + 1) * kRowChunk), j0, std::min(kColBlock, cols - j0),
                     partG.data() + c * cols + j0, partB.data() + c * cols + j0);
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
