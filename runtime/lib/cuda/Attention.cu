//===- Attention.cu - tiled (flash-style) causal attention, fwd and bwd ----===//
//
// q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv], o [BH, Tq, Dv], float32.
// Nothing of size Tq x Tk is ever stored: the forward keeps a running max and
// sum per query row (online softmax) while key/value tiles stream through
// shared memory; the backward recomputes the probabilities from the row's
// log-sum-exp.
//
// The plan's attention_grad gets (dout, q, k, v) only: no saved output or
// statistics. So the backward runs three kernels:
//   1. per query row: the forward again, keeping lse_i = m + log(l) and
//      delta_i = dO_i . O_i (the row's output never leaves registers);
//   2. per key row j: dV_j = sum_i p_ij dO_i and dK_j = scale sum_i ds_ij q_i,
//      ds_ij = p_ij (dO_i . v_j - delta_i) (two passes, one accumulator each:
//      a head dim of 128 keeps 128 accumulators in registers, not 256);
//   3. per query row i: dQ_i = scale sum_j ds_ij k_j.
// Every output element is owned by one thread that adds in key (or query)
// order: deterministic, no atomics.
//
// One thread per row, the head dim unrolled up to DMAX (64 or 128) so the
// row's vectors stay in registers; tiles are read from shared memory as
// broadcasts (all threads read the same key), a thread's own row (kernels 2
// and 3) from a padded shared array (no bank conflicts).
//
// This is the straightforward CUDA-core version; a tensor-core (wgmma)
// version is the next step for speed (docs/cuda-backend.md).
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/cuda/CudaKernels.h"

#include <cuda_runtime.h>

#include <cmath>

namespace pipemesh::rt::cuda {
namespace {

__host__ __device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

constexpr int kRows = 64; ///< query (or key) rows per block: one per thread
constexpr int kTile = 32; ///< keys (or queries) per shared-memory tile

struct Geometry {
  int64_t BH, Tq, Tk, D, Dv;
  float scale;
  bool causal;
  int64_t off; ///< causal: key j is visible from query i when j <= i + off (off = Tk - Tq)
};

__device__ __forceinline__ bool visible(const Geometry &g, int64_t i, int64_t j) {
  return j < g.Tk && (!g.causal || j <= i + g.off);
}

__device__ __forceinline__ float maskAt(const MaskView &m, int64_t bh, int64_t i, int64_t j) {
  return m.data ? m.data[bh * m.sBH + i * m.sQ + j * m.sK] : 0.f;
}

/// Loads rows [r0, r0 + kTile) of a [T, width] matrix into tile[kTile][DMAX]
/// (rows past T are zero).
template <int DMAX>
__device__ void loadTile(float *tile, const float *src, int64_t r0, int64_t T, int64_t width) {
  for (int idx = threadIdx.x; idx < kTile * DMAX; idx += blockDim.x) {
    const int r = idx / DMAX, d = idx - r * DMAX;
    const int64_t row = r0 + r;
    tile[idx] = (row < T && d < width) ? src[row * width + d] : 0.f;
  }
}

/// Loads this block's own rows [r0, r0 + kRows) into own[kRows][DMAX + 1].
template <int DMAX>
__device__ void loadOwn(float *own, const float *src, int64_t r0, int64_t T, int64_t width) {
  for (int idx = threadIdx.x; idx < kRows * DMAX; idx += blockDim.x) {
    const int r = idx / DMAX, d = idx - r * DMAX;
    const int64_t row = r0 + r;
    own[r * (DMAX + 1) + d] = (row < T && d < width) ? src[row * width + d] : 0.f;
  }
}

/// Kernel 1 (and the forward): per query row, the online softmax over every
/// visible key. STATS = false writes o; STATS = true writes lse and delta.
template <int DMAX, bool STATS>
__global__ void __launch_bounds__(kRows)
    attnRowKernel(const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, MaskView mask, Geometry g, float *__restrict__ o,
                  const float *__restrict__ dO, float *__restrict__ lse,
                  float *__restrict__ delta) {
  __shared__ float kS[kTile * DMAX];
  __shared__ float vS[kTile * DMAX];
  const int64_t bh = blockIdx.y;
  const int64_t q0 = (int64_t)blockIdx.x * kRows;
  const int64_t i = q0 + threadIdx.x;
  const bool active = i < g.Tq;
  const float *qb = q + bh * g.Tq * g.D, *kb = k + bh * g.Tk * g.D, *vb = v + bh * g.Tk * g.Dv;

  float qr[DMAX], acc[DMAX];
#pragma unroll
  for (int d = 0; d < DMAX; ++d) {
    qr[d] = (active && d < g.D) ? qb[i * g.D + d] : 0.f;
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  // Keys any row of this block can see.
  int64_t kEnd = g.Tk;
  if (g.causal)
    kEnd = imin(g.Tk, imax(0, imin(q0 + kRows, g.Tq) - 1 + g.off + 1));
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    loadTile<DMAX>(kS, kb, k0, g.Tk, g.D);
    loadTile<DMAX>(vS, vb, k0, g.Tk, g.Dv);
    __syncthreads();
    if (active) {
      for (int jj = 0; jj < kTile; ++jj) {
        const int64_t j = k0 + jj;
        if (!visible(g, i, j))
          continue;
        float s = 0.f;
#pragma unroll
        for (int d = 0; d < DMAX; ++d)
          s += qr[d] * kS[jj * DMAX + d];
        s = s * g.scale + maskAt(mask, bh, i, j);
        if (s == -INFINITY)
          continue;
        const float mNew = fmaxf(m, s);
        const float corr = expf(m - mNew); // 0 while m is -inf
        const float p = expf(s - mNew);
        l = l * corr + p;
#pragma unroll
        for (int d = 0; d < DMAX; ++d)
          acc[d] = acc[d] * corr + p * vS[jj * DMAX + d];
        m = mNew;
      }
    }
    __syncthreads();
  }
  if (!active)
    return;
  const float inv = l > 0.f ? 1.f / l : 0.f; // a row that sees no key outputs 0
  if (!STATS) {
    float *ob = o + (bh * g.Tq + i) * g.Dv;
#pragma unroll
    for (int d = 0; d < DMAX; ++d)
      if (d < g.Dv)
        ob[d] = acc[d] * inv;
  } else {
    const float *dOr = dO + (bh * g.Tq + i) * g.Dv;
    float dl = 0.f;
#pragma unroll
    for (int d = 0; d < DMAX; ++d)
      if (d < g.Dv)
        dl += dOr[d] * (acc[d] * inv);
    lse[bh * g.Tq + i] = l > 0.f ? m + logf(l) : INFINITY; // p = exp(s - inf) = 0
    delta[bh * g.Tq + i] = dl;
  }
}

/// Kernel 2: per key row j, over every query that sees it. WANT_DK = false
/// accumulates dV_j, true dK_j.
template <int DMAX, bool WANT_DK>
__global__ void __launch_bounds__(kRows)
    attnKeyKernel(const float *__restrict__ q, const float *__restrict__ k,
                  const float *__restrict__ v, MaskView mask, Geometry g,
                  const float *__restrict__ dO, const float *__restrict__ lse,
                  const float *__restrict__ delta, float *__restrict__ dk,
                  float *__restrict__ dv) {
  extern __shared__ float smem[];
  float *kOwn = smem;                        // [kRows][DMAX + 1]
  float *vOwn = kOwn + kRows * (DMAX + 1);   // [kRows][DMAX + 1]
  float *qS = vOwn + kRows * (DMAX + 1);     // [kTile][DMAX]
  float *dOS = qS + kTile * DMAX;            // [kTile][DMAX]
  float *lseS = dOS + kTile * DMAX;          // [kTile]
  float *deltaS = lseS + kTile;              // [kTile]
  const int64_t bh = blockIdx.y;
  const int64_t j0 = (int64_t)blockIdx.x * kRows;
  const int64_t j = j0 + threadIdx.x;
  const bool active = j < g.Tk;
  const float *qb = q + bh * g.Tq * g.D, *dOb = dO + bh * g.Tq * g.Dv;
  loadOwn<DMAX>(kOwn, k + bh * g.Tk * g.D, j0, g.Tk, g.D);
  loadOwn<DMAX>(vOwn, v + bh * g.Tk * g.Dv, j0, g.Tk, g.Dv);
  const float *kr = kOwn + threadIdx.x * (DMAX + 1);
  const float *vr = vOwn + threadIdx.x * (DMAX + 1);

  float acc[DMAX];
#pragma unroll
  for (int d = 0; d < DMAX; ++d)
    acc[d] = 0.f;

  // The first query that sees key j0 (causal): i >= j0 - off.
  int64_t iStart = 0;
  if (g.causal)
    iStart = imax(0, j0 - g.off);
  iStart = (iStart / kTile) * kTile;
  for (int64_t i0 = iStart; i0 < g.Tq; i0 += kTile) {
    __syncthreads(); // the previous tile is consumed (and the own rows loaded)
    loadTile<DMAX>(qS, qb, i0, g.Tq, g.D);
    loadTile<DMAX>(dOS, dOb, i0, g.Tq, g.Dv);
    for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
      const int64_t i = i0 + r;
      lseS[r] = i < g.Tq ? lse[bh * g.Tq + i] : INFINITY;
      deltaS[r] = i < g.Tq ? delta[bh * g.Tq + i] : 0.f;
    }
    __syncthreads();
    if (!active)
      continue;
    for (int ii = 0; ii < kTile; ++ii) {
      const int64_t i = i0 + ii;
      if (i >= g.Tq || !visible(g, i, j))
        continue;
      float s = 0.f;
#pragma unroll
      for (int d = 0; d < DMAX; ++d)
        s += qS[ii * DMAX + d] * kr[d];
      s = s * g.scale + maskAt(mask, bh, i, j);
      if (s == -INFINITY)
        continue;
      const float p = expf(s - lseS[ii]);
      if (!WANT_DK) {
#pragma unroll
        for (int d = 0; d < DMAX; ++d)
          acc[d] += p * dOS[ii * DMAX + d];
      } else {
        float dp = 0.f;
#pragma unroll
        for (int d = 0; d < DMAX; ++d)
          dp += dOS[ii * DMAX + d] * vr[d];
        const float ds = p * (dp - deltaS[ii]) * g.scale;
#pragma unroll
        for (int d = 0; d < DMAX; ++d)
          acc[d] += ds * qS[ii * DMAX + d];
      }
    }
  }
  if (!active)
    return;
  if (!WANT_DK) {
    float *out = dv + (bh * g.Tk + j) * g.Dv;
#pragma unroll
    for (int d = 0; d < DMAX; ++d)
      if (d < g.Dv)
        out[d] = acc[d];
  } else {
    float *out = dk + (bh * g.Tk + j) * g.D;
#pragma unroll
    for (int d = 0; d < DMAX; ++d)
      if (d < g.D)
        out[d] = acc[d];
  }
}

/// Kernel 3: per query row i, dQ_i over every visible key.
template <int DMAX>
__global__ void __launch_bounds__(kRows)
    attnQueryKernel(const float *__restrict__ q, const float *__restrict__ k,
                    const float *__restrict__ v, MaskView mask, Geometry g,
                    const float *__restrict__ dO, const float *__restrict__ lse,
                    const float *__restrict__ delta, float *__restrict__ dq) {
  extern __shared__ float smem[];
  float *qOwn = smem;                       // [kRows][DMAX + 1]
  float *dOOwn = qOwn + kRows * (DMAX + 1); // [kRows][DMAX + 1]
  float *kS = dOOwn + kRows * (DMAX + 1);   // [kTile][DMAX]
  float *vS = kS + kTile * DMAX;            // [kTile][DMAX]
  const int64_t bh = blockIdx.y;
  const int64_t q0 = (int64_t)blockIdx.x * kRows;
  const int64_t i = q0 + threadIdx.x;
  const bool active = i < g.Tq;
  loadOwn<DMAX>(qOwn, q + bh * g.Tq * g.D, q0, g.Tq, g.D);
  loadOwn<DMAX>(dOOwn, dO + bh * g.Tq * g.Dv, q0, g.Tq, g.Dv);
  const float *qr = qOwn + threadIdx.x * (DMAX + 1);
  const float *dOr = dOOwn + threadIdx.x * (DMAX + 1);
  const float *kb = k + bh * g.Tk * g.D, *vb = v + bh * g.Tk * g.Dv;
  const float myLse = active ? lse[bh * g.Tq + i] : INFINITY;
  const float myDelta = active ? delta[bh * g.Tq + i] : 0.f;

  float acc[DMAX];
#pragma unroll
  for (int d = 0; d < DMAX; ++d)
    acc[d] = 0.f;
  int64_t kEnd = g.Tk;
  if (g.causal)
    kEnd = imin(g.Tk, imax(0, imin(q0 + kRows, g.Tq) - 1 + g.off + 1));
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    __syncthreads();
    loadTile<DMAX>(kS, kb, k0, g.Tk, g.D);
    loadTile<DMAX>(vS, vb, k0, g.Tk, g.Dv);
    __syncthreads();
    if (!active)
      continue;
    for (int jj = 0; jj < kTile; ++jj) {
      const int64_t j = k0 + jj;
      if (!visible(g, i, j))
        continue;
      float s = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < DMAX; ++d) {
        s += qr[d] * kS[jj * DMAX + d];
        dp += dOr[d] * vS[jj * DMAX + d];
      }
      s = s * g.scale + maskAt(mask, bh, i, j);
      if (s == -INFINITY)
        continue;
      const float p = expf(s - myLse);
      const float ds = p * (dp - myDelta) * g.scale;
#pragma unroll
      for (int d = 0; d < DMAX; ++d)
        acc[d] += ds * kS[jj * DMAX + d];
    }
  }
  if (!active)
    return;
  float *out = dq + (bh * g.Tq + i) * g.D;
#pragma unroll
  for (int d = 0; d < DMAX; ++d)
    if (d < g.D)
      out[d] = acc[d];
}

template <int DMAX> constexpr size_t bwdSmemBytes() {
  return (size_t)(2 * kRows * (DMAX + 1) + 2 * kTile * DMAX + 2 * kTile) * sizeof(float);
}

template <int DMAX> void setSmemLimits() {
  cudaFuncSetAttribute(attnKeyKernel<DMAX, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       (int)bwdSmemBytes<DMAX>());
  cudaFuncSetAttribute(attnKeyKernel<DMAX, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       (int)bwdSmemBytes<DMAX>());
  cudaFuncSetAttribute(attnQueryKernel<DMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       (int)bwdSmemBytes<DMAX>());
}

Geometry geometry(int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, float scale,
                  bool causal) {
  return {BH, Tq, Tk, D, Dv, scale, causal, Tk - Tq};
}

template <int DMAX>
void forward(cudaStream_t st, const float *q, const float *k, const float *v, MaskView mask,
             float *o, const Geometry &g) {
  dim3 grid((unsigned)((g.Tq + kRows - 1) / kRows), (unsigned)g.BH);
  attnRowKernel<DMAX, false>
      <<<grid, kRows, 0, st>>>(q, k, v, mask, g, o, nullptr, nullptr, nullptr);
  reportLaunch("attention");
}

template <int DMAX>
void backward(cudaStream_t st, const float *dO, const float *q, const float *k, const float *v,
              MaskView mask, float *dq, float *dk, float *dv, const Geometry &g, float *lse,
              float *delta) {
  dim3 qGrid((unsigned)((g.Tq + kRows - 1) / kRows), (unsigned)g.BH);
  dim3 kGrid((unsigned)((g.Tk + kRows - 1) / kRows), (unsigned)g.BH);
  const size_t smem = bwdSmemBytes<DMAX>();
  attnRowKernel<DMAX, true><<<qGrid, kRows, 0, st>>>(q, k, v, mask, g, nullptr, dO, lse, delta);
  attnKeyKernel<DMAX, false>
      <<<kGrid, kRows, smem, st>>>(q, k, v, mask, g, dO, lse, delta, dk, dv);
  attnKeyKernel<DMAX, true>
      <<<kGrid, kRows, smem, st>>>(q, k, v, mask, g, dO, lse, delta, dk, dv);
  attnQueryKernel<DMAX><<<qGrid, kRows, smem, st>>>(q, k, v, mask, g, dO, lse, delta, dq);
  reportLaunch("attentionGrad");
}

} // namespace

void attentionInit() {
  setSmemLimits<64>();
  setSmemLimits<128>();
}

void attention(cudaStream_t st, const float *q, const float *k, const float *v, MaskView mask,
               float *o, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, float scale,
               bool causal) {
  if (BH == 0 || Tq == 0)
    return;
  if (Tk == 0) {
    cudaMemsetAsync(o, 0, (size_t)(BH * Tq * Dv) * sizeof(float), st);
    return;
  }
  Geometry g = geometry(BH, Tq, Tk, D, Dv, scale, causal);
  if (D <= 64 && Dv <= 64)
    forward<64>(st, q, k, v, mask, o, g);
  else
    forward<128>(st, q, k, v, mask, o, g);
}

size_t attentionGradScratchBytes(int64_t BH, int64_t Tq) {
  return (size_t)(2 * BH * Tq) * sizeof(float);
}

void attentionGrad(cudaStream_t st, const float *dO, const float *q, const float *k,
                   const float *v, MaskView mask, float *dq, float *dk, float *dv, int64_t BH,
                   int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, float scale, bool causal,
                   void *scratch) {
  if (BH == 0)
    return;
  if (Tq == 0 || Tk == 0) {
    cudaMemsetAsync(dq, 0, (size_t)(BH * Tq * D) * sizeof(float), st);
    cudaMemsetAsync(dk, 0, (size_t)(BH * Tk * D) * sizeof(float), st);
    cudaMemsetAsync(dv, 0, (size_t)(BH * Tk * Dv) * sizeof(float), st);
    return;
  }
  Geometry g = geometry(BH, Tq, Tk, D, Dv, scale, causal);
  float *lse = static_cast<float *>(scratch), *delta = lse + BH * Tq;
  if (D <= 64 && Dv <= 64)
    backward<64>(st, dO, q, k, v, mask, dq, dk, dv, g, lse, delta);
  else
    backward<128>(st, dO, q, k, v, mask, dq, dk, dv, g, lse, delta);
}

} // namespace pipemesh::rt::cuda
