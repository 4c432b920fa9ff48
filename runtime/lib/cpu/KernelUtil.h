//===- KernelUtil.h - shared helpers of the CPU kernels ---------*- C++ -*-===//
//
// Internal to runtime/lib/cpu: shape arithmetic, the vectorizable exponential,
// the BLAS GEMM wrapper and the thresholds that decide when a kernel runs
// multi-threaded.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_CPU_KERNELUTIL_H
#define PIPEMESH_RUNTIME_CPU_KERNELUTIL_H

#include "pipemesh/runtime/CpuKernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace pipemesh::rt::cpu::detail {

/// Below this many elements (or element-operations) a kernel runs on one
/// thread: waking the OpenMP team costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 15;
/// The same for kernels that only move memory (copies, transposes, adds,
/// sums): a second thread hardly speeds up a copy of a few MiB, and each
/// parallel region costs a wake-up (tens of microseconds with idle threads
/// asleep, OMP_WAIT_POLICY=passive). Measured on 2 threads: a [1024, 384]
/// residual add or transpose takes as long on one thread as on two.
constexpr int64_t kCopyGrain = 1 << 20;

/// OpenBLAS 0.3.21 runs a GEMM on the calling thread alone when
/// M * N * K <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4). Its OpenMP build also
/// does for any size inside an OpenMP region; its pthread build would start
/// its own threads on top of ours, so there GEMMs issued from inside an OpenMP
/// region stay at or below this size (gemmOnThisThread).
constexpr int64_t kSingleThreadGemm = 262144;

/// Reductions (row sums, statistics, losses) accumulate in double.
using Acc = double;

// --- two builds of the float hot loops ---------------------------------------
// The library is compiled for x86-64-v2 (SSE4.2), which every x86-64 machine
// runs. The loops that dominate the float kernels (exp, GELU, row statistics,
// sums) are compiled a second time for AVX2 + FMA, and the CPU picks
// at run time. A loop body is written once, as an always-inline function
// (NAME##Impl); PIPEMESH_MULTIVERSION defines NAME, which calls the body
// inlined into a function compiled for AVX2 + FMA when the CPU has them, into
// an ordinary one otherwise. Bodies must not contain OpenMP regions (those are
// outlined before inlining and would keep the base ISA): parallel loops call
// the multiversioned functions per chunk or per row. The AVX2 build contracts
// a * b + c into FMAs, so the two builds may differ in the last bits; each is
// deterministic, whatever the number of threads.

#define PIPEMESH_ALWAYS_INLINE inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__)
#define PIPEMESH_HAVE_AVX2_BUILD 1
#define PIPEMESH_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define PIPEMESH_HAVE_AVX2_BUILD 0
#define PIPEMESH_TARGET_AVX2
#endif

/// 1 while the AVX2 + FMA builds run (the CPU has them and no test chose
/// otherwise), 0 for the base builds.
extern int gKernelIsa;
inline bool useAvx2() { return PIPEMESH_HAVE_AVX2_BUILD && gKernelIsa == 1; }

#define PIPEMESH_MULTIVERSION(RET, NAME, PARAMS, ARGS)                                            \
  PIPEMESH_TARGET_AVX2 __attribute__((noinline)) RET NAME##Avx2 PARAMS { return NAME##Impl ARGS; } \
  __attribute__((noinline)) RET NAME##Base PARAMS { return NAME##Impl ARGS; }                     \
  inline RET NAME PARAMS { return useAvx2() ? NAME##Avx2 ARGS : NAME##Base ARGS; }

/// Calls body(begin, length) over [0, n) in chunks of `chunk`, spread over
/// OpenMP threads when n exceeds `grain`.
template <typename Body>
void forEachChunk(int64_t n, int64_t chunk, int64_t grain, Body body) {
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (chunks > 1 && n > grain)
  for (int64_t c = 0; c < chunks; ++c)
    body(c * chunk, std::min(chunk, n - c * chunk));
}

inline int64_t numel(const Dims &d) {
  int64_t n = 1;
  for (int64_t s : d)
    n *= s;
  return n;
}

/// Row-major strides of a contiguous tensor.
inline Dims contiguousStrides(const Dims &shape) {
  Dims s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

/// Strides with which a contiguous tensor of `shape` is read when broadcast to
/// `out` (numpy rules: shapes right-aligned, size-1 or missing dims repeat).
inline Dims broadcastStrides(const Dims &shape, const Dims &out) {
  Dims s(out.size(), 0);
  Dims in = contiguousStrides(shape);
  size_t off = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i)
    s[off + i] = shape[i] == 1 ? 0 : in[i];
  return s;
}

/// Merges adjacent dims that every operand walks contiguously (stride[i] ==
/// stride[i+1] * shape[i+1], which includes two broadcast dims) and drops
/// size-1 dims, so that loops run over the longest possible inner runs. A
/// scalar becomes shape {1}.
template <size_t N> void coalesce(Dims &shape, std::array<Dims, N> &strides) {
  Dims outShape;
  std::array<Dims, N> outStrides;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1)
      continue;
    bool merge = !outShape.empty();
    for (size_t k = 0; k < N && merge; ++k)
      merge = outStrides[k].back() == strides[k][i] * shape[i];
    if (merge) {
      outShape.back() *= shape[i];
      for (size_t k = 0; k < N; ++k)
        outStrides[k].back() = strides[k][i];
    } else {
      outShape.push_back(shape[i]);
      for (size_t k = 0; k < N; ++k)
        outStrides[k].push_back(strides[k][i]);
    }
  }
  if (outShape.empty()) {
    outShape.push_back(1);
    for (size_t k = 0; k < N; ++k)
      outStrides[k].push_back(0);
  }
  shape = std::move(outShape);
  strides = std::move(outStrides);
}

/// Walks a coalesced iteration space as runs along the last dim: calls
/// body(offsets, len) where offsets[k] is operand k's element offset of the
/// run's first element; the caller knows the operands' last-dim strides. Long
/// runs are cut in chunks; runs are spread over OpenMP threads when the space
/// is large (more than `grain` elements). Every element is visited exactly
/// once, so any order is fine.
template <size_t N, typename Body>
void forEachRun(const Dims &shape, const std::array<Dims, N> &strides, Body body,
                int64_t grain = kCopyGrain) {
  constexpr int64_t kChunk = 16384;
  if (numel(shape) == 0)
    return;
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const int64_t outer = numel(shape) / inner;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = outer * chunks;
#pragma omp parallel for schedule(static) if (tasks > 1 && outer * inner > grain)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t r = t / chunks, c = t % chunks;
    std::array<int64_t, N> off{};
    for (size_t d = rank - 1; d-- > 0;) {
      int64_t i = r % shape[d];
      r /= shape[d];
      for (size_t k = 0; k < N; ++k)
        off[k] += i * strides[k][d];
    }
    int64_t j0 = c * kChunk;
    for (size_t k = 0; k < N; ++k)
      off[k] += j0 * strides[k][rank - 1];
    body(off, std::min(kChunk, inner - j0));
  }
}

/// The largest element of x[0, n) (-inf for n = 0). NaNs are skipped, as
/// std::max(m, x) skips them (they still reach the callers' sums and
/// outputs). Written as `x > m ? x : m`, which is exactly MAXPS (a NaN x
/// keeps m): GCC 12 leaves the std::max form of this reduction scalar even
/// under `omp simd`, a 4-cycle dependency per element that was 40 % of the
/// attention's softmax rows.
template <typename T> PIPEMESH_ALWAYS_INLINE T rowMax(const T *x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j)
    m = x[j] > m ? x[j] : m;
  return m;
}

/// exp(x). double: libm. float: Cephes' expf (range reduction by ln 2 and a
/// degree-6 polynomial, within 2 ulp), written so that loops calling it
/// vectorize; exactly 0 below -87.3 (so masked -inf scores vanish), +inf above 88,
/// NaN stays NaN.
PIPEMESH_ALWAYS_INLINE double fastExp(double x) { return std::exp(x); }
PIPEMESH_ALWAYS_INLINE float fastExp(float x) {
  constexpr float lo = -87.3f, hi = 88.0f;
  // Clamped so that NaN becomes lo too: converting NaN to int is undefined
  // (UBSan's float-cast-overflow); it is put back at the end.
  float xc = x > lo ? x : lo;
  xc = xc < hi ? xc : hi;
  float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float z = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * z + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float y = p * scale;
  y = x < lo ? 0.0f : y;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

/// C = alpha * op(A) @ op(B) + beta * C, row-major (cblas_sgemm / cblas_dgemm).
template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T *A,
          int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc);

/// gemm for a thread inside an OpenMP parallel region: it must run on the
/// calling thread alone. OpenBLAS's OpenMP build does that by itself
/// (omp_in_parallel); its pthread build would start its own threads above
/// kSingleThreadGemm multiply-adds, so there the product is cut into pieces
/// below that size (along M and N, then K, a split that depends on the shape
/// only: the result does not depend on the number of threads).
template <typename T>
void gemmOnThisThread(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha,
                      const T *A, int64_t lda, const T *B, int64_t ldb, T beta, T *C,
                      int64_t ldc);

/// True when OpenBLAS may start threads of its own for a GEMM issued inside
/// an OpenMP region (its pthread build, with more than one thread).
bool blasThreadsInsideOmp();

} // namespace pipemesh::rt::cpu::detail

#endif // PIPEMESH_RUNTIME_CPU_KERNELUTIL_H
