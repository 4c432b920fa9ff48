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

/// OpenBLAS 0.3.21 runs a GEMM on the calling thread alone when
/// M * N * K <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4). GEMMs issued from inside
/// an OpenMP region must stay at or below this size, or OpenBLAS would start
/// its own threads on top of ours.
constexpr int64_t kSingleThreadGemm = 262144;

/// Reductions (row sums, statistics, losses) accumulate in double.
using Acc = double;

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
/// is large. Every element is visited exactly once, so any order is fine.
template <size_t N, typename Body>
void forEachRun(const Dims &shape, const std::array<Dims, N> &strides, Body body) {
  constexpr int64_t kChunk = 16384;
  if (numel(shape) == 0)
    return;
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  const int64_t outer = numel(shape) / inner;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const int64_t tasks = outer * chunks;
#pragma omp parallel for schedule(static) if (tasks > 1 && outer * inner > kParallelGrain)
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

/// exp(x). double: libm. float: Cephes' expf (range reduction by ln 2 and a
/// degree-6 polynomial, within 2 ulp), written so that loops calling it
/// vectorize; exactly 0 below -87.3 (so masked -inf scores vanish), +inf above 88,
/// NaN stays NaN.
inline double fastExp(double x) { return std::exp(x); }
inline float fastExp(float x) {
  constexpr float lo = -87.3f, hi = 88.0f;
  float xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
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
  return x > hi ? std::numeric_limits<float>::infinity() : y;
}

/// C = alpha * op(A) @ op(B) + beta * C, row-major (cblas_sgemm / cblas_dgemm).
template <typename T>
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, T alpha, const T *A,
          int64_t lda, const T *B, int64_t ldb, T beta, T *C, int64_t ldc);

} // namespace pipemesh::rt::cpu::detail

#endif // PIPEMESH_RUNTIME_CPU_KERNELUTIL_H
