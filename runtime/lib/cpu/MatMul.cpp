//===- MatMul.cpp - batched GEMM on OpenBLAS --------------------------------===//
//
// C[b] = op(A[b]) @ op(B[b]) (+ bias) with cblas_sgemm / cblas_dgemm.
// - A weight shared by every batch (strideB == 0, A not transposed and packed)
//   folds the batch into M: one large GEMM, threaded by OpenBLAS.
// - Many GEMMs (small ones, each at most kSingleThreadGemm multiply-adds, or
//   at least two per thread) are spread over OpenMP threads, each GEMM on its
//   thread (gemmOnThisThread).
// - Otherwise the batches run one after the other, each threaded by OpenBLAS.
// The bias is written into C first and the GEMM accumulates (beta = 1); so
// does an accumulating matmul into the gradient already in C (alpha = scale).
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <cblas.h>
#include <omp.h>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace detail {

template <>
void gemm<float>(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C,
              blasint(ldc));
}

template <>
void gemm<double>(bool transA, bool transB, int64_t M, int64_t N, int64_t K, double alpha,
                  const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                  double *C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C,
              blasint(ldc));
}

bool blasThreadsInsideOmp() {
  // openblas_get_parallel: 0 sequential, 1 pthread build, 2 OpenMP build.
  static const bool v = openblas_get_parallel() == 1 && openblas_get_num_threads() > 1;
  return v;
}

template <typename T>
void gemmOnThisThread(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha,
                      const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C,
                      int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (!blasThreadsInsideOmp() || K == 0 || M * N * K <= kSingleThreadGemm) {
    gemm<T>(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Pieces of at most kSingleThreadGemm multiply-adds: K in steps of kK, rows
  // and columns in blocks of bm x bn.
  const int64_t kK = std::min<int64_t>(K, kSingleThreadGemm / 64);
  const int64_t bn = std::min<int64_t>(N, 64);
  const int64_t bm = std::max<int64_t>(std::min(M, kSingleThreadGemm / kK / bn), 1);
  for (int64_t k0 = 0; k0 < K; k0 += kK) {
    const int64_t kn = std::min(kK, K - k0);
    const T b = k0 == 0 ? beta : T(1);
    for (int64_t i0 = 0; i0 < M; i0 += bm)
      for (int64_t j0 = 0; j0 < N; j0 += bn) {
        const T *pa = transA ? A + k0 * lda + i0 : A + i0 * lda + k0;
        const T *pb = transB ? B + j0 * ldb + k0 : B + k0 * ldb + j0;
        gemm<T>(transA, transB, std::min(bm, M - i0), std::min(bn, N - j0), kn, alpha, pa, lda,
                pb, ldb, b, C + i0 * ldc + j0, ldc);
      }
  }
}

template void gemmOnThisThread<float>(bool, bool, int64_t, int64_t, int64_t, float, const float *,
                                      int64_t, const float *, int64_t, float, float *, int64_t);
template void gemmOnThisThread<double>(bool, bool, int64_t, int64_t, int64_t, double,
                                       const double *, int64_t, const double *, int64_t, double,
                                       double *, int64_t);

} // namespace detail

namespace {

/// C (rows x N) = bias broadcast over rows, or zeros when there is no bias.
template <typename T> void initOutput(T *C, const T *bias, int64_t rows, int64_t N) {
#pragma omp parallel for schedule(static) if (rows * N > kCopyGrain)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N; ++j)
      C[r * N + j] = bias ? bias[j] : T(0);
}

} // namespace

template <typename T>
void matmul(const T *A, const T *B, const T *bias, T *C, int64_t batch, int64_t M, int64_t N,
            int64_t K, bool transA, bool transB, int64_t strideA, int64_t strideB, T alpha,
            bool accumulate) {
  if (batch <= 0 || M <= 0 || N <= 0)
    return;
  const T beta = bias || accumulate ? T(1) : T(0);
  if (bias && !accumulate)
    initOutput(C, bias, batch * M, N);
  if (K == 0) {
    if (!bias && !accumulate)
      initOutput(C, bias, batch * M, N);
    return;
  }
  const int64_t lda = transA ? M : K, ldb = transB ? K : N;

  // x[batch, M, K] @ W: one GEMM with batch * M rows.
  if (batch > 1 && strideB == 0 && !transA && strideA == M * K) {
    gemm<T>(false, transB, batch * M, N, K, alpha, A, lda, B, ldb, beta, C, N);
    return;
  }
  // One GEMM per thread when the GEMMs are small (BLAS would not thread them
  // anyway), or when there are enough of them to keep every thread busy.
  const bool small = M * N * K <= kSingleThreadGemm;
  const bool many = batch >= 2 * int64_t(omp_get_max_threads());
  if (batch > 1 && (small || many) && batch * M * N * K > kParallelGrain) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < batch; ++b)
      gemmOnThisThread<T>(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB,
                          ldb, beta, C + b * M * N, N);
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    gemm<T>(transA, transB, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta,
            C + b * M * N, N);
}

template void matmul<float>(const float *, const float *, const float *, float *, int64_t, int64_t,
                            int64_t, int64_t, bool, bool, int64_t, int64_t, float, bool);
template void matmul<double>(const double *, const double *, const double *, double *, int64_t,
                             int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, double,
                             bool);

} // namespace pipemesh::rt::cpu
