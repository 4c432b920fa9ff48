//===- MatMul.cpp - batched GEMM on OpenBLAS --------------------------------===//
//
// C[b] = op(A[b]) @ op(B[b]) (+ bias) with cblas_sgemm / cblas_dgemm.
// - A weight shared by every batch (strideB == 0, A not transposed and packed)
//   folds the batch into M: one large GEMM, threaded by OpenBLAS.
// - Many small GEMMs (each at most kSingleThreadGemm multiply-adds, which
//   OpenBLAS runs on the calling thread) are spread over OpenMP threads.
// - Otherwise the batches run one after the other, each threaded by OpenBLAS.
// The bias is written into C first and the GEMM accumulates (beta = 1).
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <cblas.h>

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

} // namespace detail

namespace {

/// C (rows x N) = bias broadcast over rows, or zeros when there is no bias.
template <typename T> void initOutput(T *C, const T *bias, int64_t rows, int64_t N) {
#pragma omp parallel for schedule(static) if (rows * N > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < N; ++j)
      C[r * N + j] = bias ? bias[j] : T(0);
}

} // namespace

template <typename T>
void matmul(const T *A, const T *B, const T *bias, T *C, int64_t batch, int64_t M, int64_t N,
            int64_t K, bool transA, bool transB, int64_t strideA, int64_t strideB) {
  if (batch <= 0 || M <= 0 || N <= 0)
    return;
  const T beta = bias ? T(1) : T(0);
  if (bias)
    initOutput(C, bias, batch * M, N);
  if (K == 0) {
    if (!bias)
      initOutput(C, bias, batch * M, N);
    return;
  }
  const int64_t lda = transA ? M : K, ldb = transB ? K : N;

  // x[batch, M, K] @ W: one GEMM with batch * M rows.
  if (batch > 1 && strideB == 0 && !transA && strideA == M * K) {
    gemm<T>(false, transB, batch * M, N, K, T(1), A, lda, B, ldb, beta, C, N);
    return;
  }
  const bool small = M * N * K <= kSingleThreadGemm;
#pragma omp parallel for schedule(static) if (batch > 1 && small && batch * M * N * K > kParallelGrain)
  for (int64_t b = 0; b < batch; ++b)
    gemm<T>(transA, transB, M, N, K, T(1), A + b * strideA, lda, B + b * strideB, ldb, beta,
            C + b * M * N, N);
}

template void matmul<float>(const float *, const float *, const float *, float *, int64_t, int64_t,
                            int64_t, int64_t, bool, bool, int64_t, int64_t);
template void matmul<double>(const double *, const double *, const double *, double *, int64_t,
                             int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t);

} // namespace pipemesh::rt::cpu
