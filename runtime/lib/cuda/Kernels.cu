//===- Kernels.cu - elementwise, movement, norm, loss, embedding, AdamW ----===//
//
// The CUDA kernels behind pipemesh/runtime/cuda/CudaKernels.h, except
// attention (Attention.cu). Written to read like the math: one kernel per
// concern, float32 data, float accumulation inside a row or a chunk and
// partials combined in a fixed order (deterministic: no float atomics).
//
// Memory-bound kernels use grid-stride loops over 64-bit indices; row kernels
// (layer norm, cross-entropy) give a warp or a block to a row.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/cuda/CudaKernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

namespace pipemesh::rt::cuda {
namespace {

__host__ __device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

constexpr int kThreads = 256;

int gridFor(int64_t n, int threads = kThreads) {
  // Enough blocks to fill an H200 many times over; grid-stride loops do the rest.
  int64_t b = (n + threads - 1) / threads;
  return (int)imax(1, imin(b, 132 * 32));
}

__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024), the same
/// tree every time; every thread gets the result.
template <typename T> __device__ T blockSum(T v) {
  __shared__ T part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads(); // part[] may still be read by a previous call
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  T t = lane < warps ? part[lane] : T(0);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

__device__ float blockMax(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  float t = lane < warps ? part[lane] : -INFINITY;
  return warpMax(t);
}

/// Element offsets of linear index i in a Strided space (operands 0..N-1).
template <int N> struct Offsets {
  int64_t o[N];
};
/// I: the index type, uint32_t where the space has fewer than 2^32 elements
/// (a 64-bit division costs several times a 32-bit one, and a transpose does
/// one per dimension per element).
template <int N, typename I = int64_t>
__device__ __forceinline__ Offsets<N> offsetsOf(const Strided &s, I i) {
  Offsets<N> r;
#pragma unroll
  for (int k = 0; k < N; ++k)
    r.o[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const I n = (I)s.shape[d];
    const I q = i / n, x = i - q * n;
    i = q;
#pragma unroll
    for (int k = 0; k < N; ++k)
      r.o[k] += x * s.stride[k][d];
  }
  return r;
}

// --- movement -------------------------------------------------------------------

template <typename E, typename I>
__global__ void copyStridedKernel(Strided s, const E *__restrict__ src, E *__restrict__ dst,
                                  I n) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    Offsets<2> off = offsetsOf<2, I>(s, i);
    dst[off.o[0]] = src[off.o[1]];
  }
}

// --- elementwise --------------------------------------------------------------------

__device__ __forceinline__ float applyBinary(BinaryOp op, float a, float b) {
  switch (op) {
  case BinaryOp::Add:
    return a + b;
  case BinaryOp::Sub:
    return a - b;
  case BinaryOp::Mul:
    return a * b;
  case BinaryOp::Div:
    return a / b;
  case BinaryOp::Pow:
    return powf(a, b);
  case BinaryOp::Max:
    return a > b ? a : b;
  }
  return 0.f;
}

template <typename I>
__global__ void binaryKernel(BinaryOp op, Strided s, const float *__restrict__ a,
                             const float *__restrict__ b, float *__restrict__ out, I n) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    Offsets<3> off = offsetsOf<3, I>(s, i);
    out[off.o[0]] = applyBinary(op, a[off.o[1]], b[off.o[2]]);
  }
}

/// The common case: both operands dense and of the output's shape.
__global__ void binaryDenseKernel(BinaryOp op, const float *__restrict__ a,
                                  const float *__restrict__ b, float *__restrict__ out,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    out[i] = applyBinary(op, a[i], b[i]);
}

/// The same four elements at a time (16-byte loads and stores: the residual
/// adds move hundreds of megabytes each).
__global__ void binaryDenseVec4Kernel(BinaryOp op, const float4 *__restrict__ a,
                                      const float4 *__restrict__ b, float4 *__restrict__ out,
                                      int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float4 x = a[i], y = b[i];
    out[i] = make_float4(applyBinary(op, x.x, y.x), applyBinary(op, x.y, y.y),
                         applyBinary(op, x.z, y.z), applyBinary(op, x.w, y.w));
  }
}

__global__ void unaryKernel(UnaryOp op, const float *__restrict__ x, float *__restrict__ y,
                            int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v = x[i];
    switch (op) {
    case UnaryOp::Neg:
      v = -v;
      break;
    case UnaryOp::Sqrt:
      v = sqrtf(v);
      break;
    case UnaryOp::Tanh:
      v = tanhf(v);
      break;
    case UnaryOp::Erf:
      v = erff(v);
      break;
    case UnaryOp::Exp:
      v = expf(v);
      break;
    case UnaryOp::Log:
      v = logf(v);
      break;
    case UnaryOp::Sigmoid: {
      float e = expf(-fabsf(v)); // no overflow
      v = v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
      break;
    }
    }
    y[i] = v;
  }
}

__global__ void axpyKernel(float alpha, const float *__restrict__ x, float *__restrict__ y,
                           int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] += alpha == 1.0f ? x[i] : alpha * x[i];
}

__global__ void scaleKernel(float *__restrict__ x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    x[i] *= s;
}

__global__ void castBf16Kernel(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                               int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

/// Four floats to four bf16 per thread: 16-byte loads, 8-byte stores (the
/// casts of every bf16 GEMM's operands move gigabytes per step).
__global__ void castBf16Vec4Kernel(const float4 *__restrict__ x, uint2 *__restrict__ y,
                                   int64_t n4) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = x[i];
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    y[i] = make_uint2(*reinterpret_cast<uint32_t *>(&lo), *reinterpret_cast<uint32_t *>(&hi));
  }
}

/// Row r of x [rows, cols] to row r of y [rows, ld], the padding columns zero:
/// rows across blockIdx.y, columns across threads (no division per element).
__global__ void castBf16PitchedKernel(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y,
                                      int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float *xr = x + r * cols;
    __nv_bfloat16 *yr = y + r * ld;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < ld;
         c += (int64_t)gridDim.x * blockDim.x)
      yr[c] = c < cols ? __float2bfloat16_rn(xr[c]) : __float2bfloat16_rn(0.f);
  }
}

/// dst [rows, cols] = the first cols of each row of src [rows, srcPitch].
__global__ void copyRowsKernel(const float *__restrict__ src, int64_t srcPitch,
                               float *__restrict__ dst, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols;
         c += (int64_t)gridDim.x * blockDim.x)
      dst[r * cols + c] = src[r * srcPitch + c];
}

// --- reductions ------------------------------------------------------------------------

/// Pass 1: partial[c][k] = sum of x over the c-th chunk of the reduced space.
__global__ void reducePartialKernel(const float *__restrict__ x, Strided kept, Strided red,
                                    int64_t keptN, int64_t redN, int64_t chunk,
                                    float *__restrict__ partial) {
  const int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (k >= keptN)
    return;
  const int64_t base = offsetsOf<1>(kept, k).o[0];
  const int64_t r0 = c * chunk, r1 = imin(redN, r0 + chunk);
  float s = 0.f;
  if (red.rank == 1) {
    const int64_t st = red.stride[0][0];
    for (int64_t r = r0; r < r1; ++r)
      s += x[base + r * st];
  } else {
    for (int64_t r = r0; r < r1; ++r)
      s += x[base + offsetsOf<1>(red, r).o[0]];
  }
  partial[c * keptN + k] = s;
}

/// Pass 2: y[k] = sum over chunks in order (times 1/redN for a mean).
__global__ void reduceFinalKernel(const float *__restrict__ partial, int64_t chunks,
                                  int64_t keptN, float scale, float *__restrict__ y) {
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < keptN;
       k += (int64_t)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int64_t c = 0; c < chunks; ++c)
      s += partial[c * keptN + k];
    y[k] = s * scale;
  }
}

/// Chunks of the reduced space: enough threads to fill the GPU, chunks of at
/// least 32 elements (a function of the shapes only: deterministic).
int64_t reduceChunks(int64_t keptN, int64_t redN) {
  int64_t want = imax(1, (int64_t)(132 * 2048) / imax(1, keptN));
  int64_t most = imax(1, redN / 32);
  return imin(imin(want, most), 65535);
}

// --- layer norm ---------------------------------------------------------------------------

/// One warp per row: mean, then the variance around it (two passes over the
/// row, the second from L1/L2), then the normalized row.
__global__ void layerNormKernel(const float *__restrict__ x, const float *__restrict__ g,
                                const float *__restrict__ b, float *__restrict__ y, int64_t rows,
                                int64_t cols, float eps) {
  const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows)
    return;
  const float *xr = x + row * cols;
  float s = 0.f;
  for (int64_t j = lane; j < cols; j += 32)
    s += xr[j];
  const float mean = warpSum(s) / (float)cols;
  float v = 0.f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float d = xr[j] - mean;
    v += d * d;
  }
  const float rstd = 1.0f / sqrtf(warpSum(v) / (float)cols + eps);
  float *yr = y + row * cols;
  for (int64_t j = lane; j < cols; j += 32)
    yr[j] = (xr[j] - mean) * rstd * g[j] + (b ? b[j] : 0.f);
}

/// dx per row (one warp), saving mean and rstd for the column sums:
/// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * g.
__global__ void layerNormGradRowKernel(const float *__restrict__ dy, const float *__restrict__ x,
                                       const float *__restrict__ g, float *__restrict__ dx,
                                       float *__restrict__ stats, int64_t rows, int64_t cols,
                                       float eps) {
  const int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows)
    return;
  const float *xr = x + row * cols, *dyr = dy + row * cols;
  float s = 0.f;
  for (int64_t j = lane; j < cols; j += 32)
    s += xr[j];
  const float mean = warpSum(s) / (float)cols;
  float v = 0.f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float d = xr[j] - mean;
    v += d * d;
  }
  const float rstd = 1.0f / sqrtf(warpSum(v) / (float)cols + eps);
  float sdx = 0.f, sdxx = 0.f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float xhat = (xr[j] - mean) * rstd;
    const float dxhat = dyr[j] * g[j];
    sdx += dxhat;
    sdxx += dxhat * xhat;
  }
  const float mdx = warpSum(sdx) / (float)cols, mdxx = warpSum(sdxx) / (float)cols;
  float *dxr = dx + row * cols;
  for (int64_t j = lane; j < cols; j += 32) {
    const float xhat = (xr[j] - mean) * rstd;
    dxr[j] = rstd * (dyr[j] * g[j] - mdx - xhat * mdxx);
  }
  if (lane == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
}

constexpr int64_t kLnRowsPerChunk = 64;

/// partial[c][j] = sums over the rows of chunk c of dy * xhat (dg) and dy (db).
__global__ void layerNormGradColKernel(const float *__restrict__ dy, const float *__restrict__ x,
                                       const float *__restrict__ stats, int64_t rows,
                                       int64_t cols, float *__restrict__ pg,
                                       float *__restrict__ pb) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (j >= cols)
    return;
  const int64_t r0 = c * kLnRowsPerChunk, r1 = imin(rows, r0 + kLnRowsPerChunk);
  float sg = 0.f, sb = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    const float d = dy[r * cols + j];
    sg += d * (x[r * cols + j] - stats[2 * r]) * stats[2 * r + 1];
    sb += d;
  }
  pg[c * cols + j] = sg;
  pb[c * cols + j] = sb;
}

__global__ void layerNormGradFinalKernel(const float *__restrict__ pg, const float *__restrict__ pb,
                                         int64_t chunks, int64_t cols, float *__restrict__ dg,
                                         float *__restrict__ db) {
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < cols;
       j += (int64_t)gridDim.x * blockDim.x) {
    float sg = 0.f, sb = 0.f;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += pg[c * cols + j];
      sb += pb[c * cols + j];
    }
    dg[j] = sg;
    if (db)
      db[j] = sb;
  }
}

// --- GELU ------------------------------------------------------------------------------------
// Same forms as the CPU kernels (runtime/lib/cpu/Gelu.cpp): the tanh form as
// x * s with s = 1 / (1 + exp(-2u)), avoiding the cancellation of 1 + tanh(u).

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kTanhCoef = 0.044715f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrtHalf = 0.70710678118654752440f;

__device__ __forceinline__ float geluTanh(float x) {
  const float u = kSqrt2OverPi * (x + kTanhCoef * x * x * x);
  const float e = expf(fminf(-2.f * u, 80.f));
  return x / (1.f + e);
}
__device__ __forceinline__ float geluTanhGrad(float x) {
  const float x2 = x * x;
  const float u = kSqrt2OverPi * (x + kTanhCoef * x2 * x);
  const float e = expf(fminf(-2.f * u, 80.f));
  const float s = 1.f / (1.f + e);
  const float du = kSqrt2OverPi * (1.f + 3.f * kTanhCoef * x2);
  return s + 2.f * x * s * (e * s) * du;
}
__device__ __forceinline__ float normalCdf(float x) { return 0.5f * erfcf(-x * kSqrtHalf); }

__global__ void geluKernel(const float *__restrict__ x, float *__restrict__ y, int64_t n,
                           bool tanhApprox) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    y[i] = tanhApprox ? geluTanh(v) : v * normalCdf(v);
  }
}

__global__ void geluGradKernel(const float *__restrict__ dy, const float *__restrict__ x,
                               float *__restrict__ dx, int64_t n, bool tanhApprox) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float v = x[i];
    const float d = tanhApprox ? geluTanhGrad(v)
                               : normalCdf(v) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
    dx[i] = dy[i] * d;
  }
}

// --- ids, errors ------------------------------------------------------------------------------

__device__ __forceinline__ int64_t loadId(const void *ids, bool ids32, int64_t i) {
  return ids32 ? (int64_t) static_cast<const int32_t *>(ids)[i]
               : static_cast<const int64_t *>(ids)[i];
}

/// Records the smallest offending position (deterministic whatever the
/// thread order); the value is written by the thread whose position won.
__device__ void reportError(DeviceError *err, int code, int instruction, int64_t pos,
                            int64_t value) {
  if (!err)
    return;
  unsigned long long *p = reinterpret_cast<unsigned long long *>(&err->position);
  unsigned long long old = atomicMin(p, (unsigned long long)pos);
  if ((unsigned long long)pos < old) {
    err->code = code;
    err->instruction = instruction;
    err->value = value;
  }
}

// --- embedding ------------------------------------------------------------------------------

__global__ void embeddingKernel(const float *__restrict__ table, const void *ids, bool ids32,
                                float *__restrict__ y, int64_t n, int64_t V, int64_t C,
                                DeviceError *err, int instruction) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * C;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t row = i / C, c = i - row * C;
    const int64_t id = loadId(ids, ids32, row);
    if (id < 0 || id >= V) {
      if (c == 0)
        reportError(err, kErrTokenId, instruction, row, id);
      y[i] = 0.f;
      continue;
    }
    y[i] = table[id * C + c];
  }
}

/// Stable counting sort of the ids, in one block of 1024 threads, chunk by
/// chunk in position order: rank[i] = number of earlier positions holding
/// the same id. cursor[v] ends as the count of v. Ids outside [0, V) are
/// skipped (the forward reported them).
constexpr int kSortThreads = 1024;
__global__ void embeddingRankKernel(const void *ids, bool ids32, int64_t n, int64_t V,
                                    int *__restrict__ cursor, int *__restrict__ rank) {
  __shared__ int64_t chunk[kSortThreads];
  const int t = threadIdx.x;
  for (int64_t base = 0; base < n; base += kSortThreads) {
    const int64_t i = base + t;
    const int64_t id = i < n ? loadId(ids, ids32, i) : -1;
    chunk[t] = id;
    __syncthreads();
    const int len = (int)imin(kSortThreads, n - base);
    int before = 0;
    bool last = true;
    if (i < n && id >= 0 && id < V) {
      for (int j = 0; j < len; ++j) {
        if (chunk[j] == id) {
          if (j < t)
            ++before;
          else if (j > t)
            last = false;
        }
      }
      rank[i] = cursor[id] + before;
    }
    __syncthreads(); // every rank read cursor before it moves
    if (i < n && id >= 0 && id < V && last)
      cursor[id] += before + 1;
    __syncthreads();
  }
}

/// Exclusive scan of counts[0..V) into offsets[0..V], one block.
__global__ void scanKernel(const int *__restrict__ counts, int64_t V, int *__restrict__ offsets) {
  __shared__ int sums[kSortThreads];
  const int t = threadIdx.x;
  const int64_t per = (V + kSortThreads - 1) / kSortThreads;
  const int64_t a = t * per, b = imin(V, a + per);
  int s = 0;
  for (int64_t v = a; v < b; ++v)
    s += counts[v];
  sums[t] = s;
  __syncthreads();
  // Hillis-Steele inclusive scan of the segment sums.
  for (int o = 1; o < kSortThreads; o <<= 1) {
    int add = t >= o ? sums[t - o] : 0;
    __syncthreads();
    sums[t] += add;
    __syncthreads();
  }
  int run = t == 0 ? 0 : sums[t - 1];
  for (int64_t v = a; v < b; ++v) {
    offsets[v] = run;
    run += counts[v];
  }
  if (t == kSortThreads - 1)
    offsets[V] = sums[t];
}

__global__ void embeddingScatterKernel(const void *ids, bool ids32, int64_t n, int64_t V,
                                       const int *__restrict__ offsets,
                                       const int *__restrict__ rank, int *__restrict__ order) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t id = loadId(ids, ids32, i);
    if (id >= 0 && id < V)
      order[offsets[id] + rank[i]] = (int)i;
  }
}

/// One block per vocabulary row (grid-stride over rows): the sum of its dy
/// rows in position order; rows no id names become zero.
/// accumulate: dtable is a parameter's gradient; rows no id names keep what
/// they hold, the others get scale * their sum added.
__global__ void embeddingGatherKernel(const float *__restrict__ dy, const int *__restrict__ offsets,
                                      const int *__restrict__ order, int64_t V, int64_t C,
                                      float *__restrict__ dtable, bool accumulate, float scale) {
  for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
    const int a = offsets[v], b = offsets[v + 1];
    if (accumulate && a == b)
      continue;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      float s = 0.f;
      for (int k = a; k < b; ++k)
        s += dy[(int64_t)order[k] * C + c];
      if (accumulate)
        dtable[v * C + c] += scale * s;
      else
        dtable[v * C + c] = s;
    }
  }
}

// --- cross-entropy -------------------------------------------------------------------------------

/// counted = number of targets != ignoreIndex; targets outside [0, V)
/// (other than ignoreIndex) are reported. One block.
__global__ void countTargetsKernel(const void *targets, bool t32, int64_t rows, int64_t V,
                                   int64_t ignoreIndex, long long *counted, DeviceError *err,
                                   int instruction) {
  long long c = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = loadId(targets, t32, r);
    if (t == ignoreIndex)
      continue;
    if (t < 0 || t >= V)
      reportError(err, kErrTarget, instruction, r, t);
    ++c;
  }
  c = blockSum<long long>(c);
  if (threadIdx.x == 0)
    *counted = c;
}

/// One block per row: the log-sum-exp in one pass (running max and sum per
/// thread, combined), the row's loss, and optionally its gradient
/// dlogits = scale * (softmax - onehot), scale from dloss (and the count).
__global__ void crossEntropyRowKernel(const float *__restrict__ logits, const void *targets,
                                      bool t32, int64_t rows, int64_t V, int64_t ignoreIndex,
                                      float *__restrict__ rowLoss, float *__restrict__ dlogits,
                                      const float *__restrict__ dloss, Reduction red,
                                      const long long *counted) {
  const int64_t r = blockIdx.x;
  const float *x = logits + r * V;
  const int64_t t = loadId(targets, t32, r);
  const bool ignored = t == ignoreIndex || t < 0 || t >= V;
  float m = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = x[j];
    if (v > m) {
      s = s * expf(m - v) + 1.f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float M = blockMax(m);
  s = (m == -INFINITY) ? 0.f : s * expf(m - M);
  const float S = blockSum<float>(s);
  const float lse = M + logf(S);
  if (threadIdx.x == 0 && rowLoss)
    rowLoss[r] = ignored ? (t == ignoreIndex ? 0.f : NAN) : lse - x[t];
  if (!dlogits)
    return;
  float scale;
  if (red == Reduction::None)
    scale = dloss[r];
  else if (red == Reduction::Sum)
    scale = dloss[0];
  else
    scale = *counted ? dloss[0] / (float)*counted : 0.f;
  float *d = dlogits + r * V;
  if (t == ignoreIndex) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
      d[j] = 0.f;
    return;
  }
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    d[j] = scale * (expf(x[j] - lse) - (j == t ? 1.f : 0.f));
}

/// out = sum (or mean over the counted) of the row losses, in double, one block.
__global__ void lossTotalKernel(const float *__restrict__ rowLoss, int64_t rows, bool mean,
                                const long long *counted, float *out) {
  double s = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    s += (double)rowLoss[r];
  s = blockSum<double>(s);
  if (threadIdx.x == 0) {
    if (mean)
      *out = *counted ? (float)(s / (double)*counted) : NAN;
    else
      *out = (float)s;
  }
}

// --- AdamW, gradient norm, loss ----------------------------------------------------------------

__device__ __forceinline__ int findEntry(const AdamEntry *e, int count, int64_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (e[mid].firstBlock <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ void gradNormPartialKernel(const AdamEntry *__restrict__ entries, int count,
                                      double *__restrict__ partial) {
  const int64_t b = blockIdx.x;
  const AdamEntry e = entries[findEntry(entries, count, b)];
  const int64_t i0 = (b - e.firstBlock) * kAdamBlockElems;
  const int64_t i1 = imin(e.n, i0 + kAdamBlockElems);
  double s = 0;
  if (e.normWeight != 0)
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      const double g = e.g[i];
      s += g * g;
    }
  s = blockSum<double>(s);
  if (threadIdx.x == 0)
    partial[b] = s * e.normWeight;
}

__global__ void gradNormFinalKernel(const double *__restrict__ partial, int64_t blocks,
                                    double *normSq) {
  double s = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x)
    s += partial[b];
  s = blockSum<double>(s);
  if (threadIdx.x == 0)
    *normSq = s;
}

__global__ void adamwKernel(const AdamEntry *__restrict__ entries, int count, AdamStep k,
                            const double *__restrict__ normSq) {
  const int64_t b = blockIdx.x;
  const AdamEntry e = entries[findEntry(entries, count, b)];
  // PyTorch clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1.
  double gs = 1.0;
  if (k.clip > 0) {
    const double coef = k.clip / (sqrt(*normSq) + 1e-6);
    if (coef < 1.0)
      gs = coef;
  }
  const bool scales = gs != 1.0;
  const float gsf = (float)gs;
  const int64_t i0 = (b - e.firstBlock) * kAdamBlockElems;
  const int64_t i1 = imin(e.n, i0 + kAdamBlockElems);
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const float gi = scales ? e.g[i] * gsf : e.g[i];
    float pi = e.decay ? e.p[i] * k.decay : e.p[i];
    const float mi = e.m[i] * k.b1 + k.a1 * gi;
    const float vi = e.v[i] * k.b2 + k.a2 * gi * gi;
    const float denom = sqrtf(vi) / k.bc2Sqrt + k.eps;
    pi = pi + k.stepSize * (mi / denom);
    e.p[i] = pi;
    e.m[i] = mi;
    e.v[i] = vi;
  }
}

__global__ void accumulateLossKernel(const float *x, double scale, double *acc) {
  *acc += scale * (double)*x;
}

void check(cudaError_t e, const char *what) {
  // Launch errors surface at the step's synchronization with their name
  // (CudaBackend::finishStep); a bad configuration here is a programming
  // error worth a message on the spot.
  if (e != cudaSuccess)
    std::fprintf(stderr, "pipemesh-run: cuda: %s: %s\n", what, cudaGetErrorString(e));
}

} // namespace

void reportLaunch(const char *what) { check(cudaGetLastError(), what); }

// --- launchers ------------------------------------------------------------------------------------

/// Widens the elements of a copy while its innermost dim is contiguous on both
/// sides, even in length, and every outer stride and both pointers allow it:
/// a transpose of [B, T, H, 64] moves 16-byte words with a quarter of the
/// index arithmetic, instead of floats one by one.
static size_t widenCopy(Strided &s, size_t elemSize, const void *src, void *dst) {
  while (elemSize < 16 && s.rank > 0) {
    const int last = s.rank - 1;
    bool ok = s.stride[0][last] == 1 && s.stride[1][last] == 1 && s.shape[last] % 2 == 0 &&
              reinterpret_cast<uintptr_t>(src) % (2 * elemSize) == 0 &&
              reinterpret_cast<uintptr_t>(dst) % (2 * elemSize) == 0;
    for (int d = 0; d < last && ok; ++d)
      ok = s.stride[0][d] % 2 == 0 && s.stride[1][d] % 2 == 0;
    if (!ok)
      break;
    s.shape[last] /= 2;
    for (int d = 0; d < last; ++d) {
      s.stride[0][d] /= 2;
      s.stride[1][d] /= 2;
    }
    elemSize *= 2;
  }
  return elemSize;
}

void copyStrided(cudaStream_t st, const Strided &strided, size_t elemSize, const void *src,
                 void *dst) {
  Strided s = strided;
  const int64_t n0 = s.numel();
  if (n0 == 0)
    return;
  elemSize = widenCopy(s, elemSize, src, dst);
  const int64_t n = s.numel();
  auto launch = [&](auto *typed) {
    using E = std::remove_const_t<std::remove_pointer_t<decltype(typed)>>;
    const E *from = static_cast<const E *>(src);
    E *to = static_cast<E *>(dst);
    // (grid-stride steps stay below 2^32 too: n + gridFor's threads < 2^32)
    if (n < (int64_t{1} << 31))
      copyStridedKernel<E, uint32_t><<<gridFor(n), kThreads, 0, st>>>(s, from, to, (uint32_t)n);
    else
      copyStridedKernel<E, int64_t><<<gridFor(n), kThreads, 0, st>>>(s, from, to, n);
  };
  switch (elemSize) {
  case 1:
    launch(static_cast<const uint8_t *>(nullptr));
    break;
  case 2:
    launch(static_cast<const uint16_t *>(nullptr));
    break;
  case 4:
    launch(static_cast<const uint32_t *>(nullptr));
    break;
  case 8:
    launch(static_cast<const uint64_t *>(nullptr));
    break;
  default:
    launch(static_cast<const uint4 *>(nullptr));
    break;
  }
  check(cudaGetLastError(), "copyStrided");
}

void binaryF32(cudaStream_t st, BinaryOp op, const Strided &s, const float *a, const float *b,
               float *out) {
  const int64_t n = s.numel();
  if (n == 0)
    return;
  bool dense = s.rank == 1;
  for (int k = 0; k < 3 && dense; ++k)
    dense = s.stride[k][0] == 1;
  auto aligned16 = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (dense && n % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(out))
    binaryDenseVec4Kernel<<<gridFor(n / 4), kThreads, 0, st>>>(
        op, reinterpret_cast<const float4 *>(a), reinterpret_cast<const float4 *>(b),
        reinterpret_cast<float4 *>(out), n / 4);
  else if (dense)
    binaryDenseKernel<<<gridFor(n), kThreads, 0, st>>>(op, a, b, out, n);
  else if (n < (int64_t{1} << 31))
    binaryKernel<uint32_t><<<gridFor(n), kThreads, 0, st>>>(op, s, a, b, out, (uint32_t)n);
  else
    binaryKernel<int64_t><<<gridFor(n), kThreads, 0, st>>>(op, s, a, b, out, n);
  check(cudaGetLastError(), "binary");
}

void unaryF32(cudaStream_t st, UnaryOp op, const float *x, float *y, int64_t n) {
  if (n == 0)
    return;
  unaryKernel<<<gridFor(n), kThreads, 0, st>>>(op, x, y, n);
  check(cudaGetLastError(), "unary");
}

void axpy(cudaStream_t st, float alpha, const float *x, float *y, int64_t n) {
  if (n == 0)
    return;
  axpyKernel<<<gridFor(n), kThreads, 0, st>>>(alpha, x, y, n);
  check(cudaGetLastError(), "axpy");
}

void scaleF32(cudaStream_t st, float *x, int64_t n, float s) {
  if (n == 0)
    return;
  scaleKernel<<<gridFor(n), kThreads, 0, st>>>(x, n, s);
  check(cudaGetLastError(), "scale");
}

void castToBf16(cudaStream_t st, const float *x, __nv_bfloat16 *y, int64_t n) {
  if (n == 0)
    return;
  if (n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(y) % 8 == 0)
    castBf16Vec4Kernel<<<gridFor(n / 4), kThreads, 0, st>>>(
        reinterpret_cast<const float4 *>(x), reinterpret_cast<uint2 *>(y), n / 4);
  else
    castBf16Kernel<<<gridFor(n), kThreads, 0, st>>>(x, y, n);
  check(cudaGetLastError(), "castToBf16");
}

void castToBf16Pitched(cudaStream_t st, const float *x, __nv_bfloat16 *y, int64_t rows,
                       int64_t cols, int64_t ld) {
  if (ld == cols)
    return castToBf16(st, x, y, rows * cols);
  if (rows == 0)
    return;
  dim3 grid((unsigned)imin((ld + kThreads - 1) / kThreads, 64), (unsigned)imin(rows, 65535));
  castBf16PitchedKernel<<<grid, kThreads, 0, st>>>(x, y, rows, cols, ld);
  check(cudaGetLastError(), "castToBf16Pitched");
}

void copyRowsF32(cudaStream_t st, const float *src, int64_t srcPitch, float *dst, int64_t rows,
                 int64_t cols) {
  if (rows == 0 || cols == 0)
    return;
  dim3 grid((unsigned)imin((cols + kThreads - 1) / kThreads, 64), (unsigned)imin(rows, 65535));
  copyRowsKernel<<<grid, kThreads, 0, st>>>(src, srcPitch, dst, rows, cols);
  check(cudaGetLastError(), "copyRows");
}

size_t reduceScratchBytes(const Strided &kept, const Strided &red) {
  const int64_t k = kept.numel(), r = red.numel();
  return (size_t)(reduceChunks(k, r) * k) * sizeof(float);
}

void reduceF32(cudaStream_t st, const float *x, const Strided &kept, const Strided &red, bool mean,
               float *y, void *scratch) {
  const int64_t keptN = kept.numel(), redN = red.numel();
  if (keptN == 0)
    return;
  const int64_t chunks = reduceChunks(keptN, redN);
  const int64_t chunk = (redN + chunks - 1) / chunks;
  float *partial = static_cast<float *>(scratch);
  dim3 grid((unsigned)((keptN + kThreads - 1) / kThreads), (unsigned)chunks);
  reducePartialKernel<<<grid, kThreads, 0, st>>>(x, kept, red, keptN, redN, chunk, partial);
  const float scale = mean ? (redN ? 1.0f / (float)redN : NAN) : 1.0f;
  reduceFinalKernel<<<gridFor(keptN), kThreads, 0, st>>>(partial, chunks, keptN, scale, y);
  check(cudaGetLastError(), "reduce");
}

void layerNorm(cudaStream_t st, const float *x, const float *g, const float *b, float *y,
               int64_t rows, int64_t cols, float eps) {
  if (rows == 0)
    return;
  const int warps = kThreads / 32;
  layerNormKernel<<<(unsigned)((rows + warps - 1) / warps), kThreads, 0, st>>>(x, g, b, y, rows,
                                                                               cols, eps);
  check(cudaGetLastError(), "layerNorm");
}

size_t layerNormGradScratchBytes(int64_t rows, int64_t cols) {
  const int64_t chunks = (rows + kLnRowsPerChunk - 1) / kLnRowsPerChunk;
  return (size_t)(2 * rows + 2 * chunks * cols) * sizeof(float);
}

void layerNormGrad(cudaStream_t st, const float *dy, const float *x, const float *g, float *dx,
                   float *dg, float *db, int64_t rows, int64_t cols, float eps, void *scratch) {
  const int64_t chunks = (rows + kLnRowsPerChunk - 1) / kLnRowsPerChunk;
  float *stats = static_cast<float *>(scratch);
  float *pg = stats + 2 * rows, *pb = pg + chunks * cols;
  const int warps = kThreads / 32;
  if (rows > 0)
    layerNormGradRowKernel<<<(unsigned)((rows + warps - 1) / warps), kThreads, 0, st>>>(
        dy, x, g, dx, stats, rows, cols, eps);
  if (rows > 0) {
    dim3 grid((unsigned)((cols + kThreads - 1) / kThreads), (unsigned)chunks);
    layerNormGradColKernel<<<grid, kThreads, 0, st>>>(dy, x, stats, rows, cols, pg, pb);
  }
  layerNormGradFinalKernel<<<gridFor(cols), kThreads, 0, st>>>(pg, pb, chunks, cols, dg, db);
  check(cudaGetLastError(), "layerNormGrad");
}

void gelu(cudaStream_t st, const float *x, float *y, int64_t n, bool tanhApprox) {
  if (n == 0)
    return;
  geluKernel<<<gridFor(n), kThreads, 0, st>>>(x, y, n, tanhApprox);
  check(cudaGetLastError(), "gelu");
}

void geluGrad(cudaStream_t st, const float *dy, const float *x, float *dx, int64_t n,
              bool tanhApprox) {
  if (n == 0)
    return;
  geluGradKernel<<<gridFor(n), kThreads, 0, st>>>(dy, x, dx, n, tanhApprox);
  check(cudaGetLastError(), "geluGrad");
}

void embedding(cudaStream_t st, const float *table, const void *ids, bool ids32, float *y,
               int64_t n, int64_t V, int64_t C, DeviceError *err, int instruction) {
  if (n * C == 0)
    return;
  embeddingKernel<<<gridFor(n * C), kThreads, 0, st>>>(table, ids, ids32, y, n, V, C, err,
                                                       instruction);
  check(cudaGetLastError(), "embedding");
}

size_t embeddingGradScratchBytes(int64_t n, int64_t V) {
  // cursor (counts) [V], offsets [V + 1], rank [n], order [n]
  return (size_t)(2 * V + 1 + 2 * n) * sizeof(int);
}

void embeddingGrad(cudaStream_t st, const float *dy, const void *ids, bool ids32, float *dtable,
                   int64_t n, int64_t V, int64_t C, void *scratch, bool accumulate, float scale) {
  int *cursor = static_cast<int *>(scratch);
  int *offsets = cursor + V;
  int *rank = offsets + V + 1;
  int *order = rank + n;
  cudaMemsetAsync(cursor, 0, (size_t)V * sizeof(int), st);
  if (n > 0) {
    embeddingRankKernel<<<1, kSortThreads, 0, st>>>(ids, ids32, n, V, cursor, rank);
  }
  scanKernel<<<1, kSortThreads, 0, st>>>(cursor, V, offsets);
  if (n > 0)
    embeddingScatterKernel<<<gridFor(n), kThreads, 0, st>>>(ids, ids32, n, V, offsets, rank,
                                                            order);
  // Each block walks many vocabulary rows (most of a GPT-2 vocabulary's 50257
  // rows take no token of a batch: a block per row spent ~1 ms launching
  // blocks that only wrote zeros).
  const int threads = (int)std::min<int64_t>(256, ((C + 31) / 32) * 32);
  embeddingGatherKernel<<<(unsigned)std::min<int64_t>(V, 2048), std::max(32, threads), 0, st>>>(
      dy, offsets, order, V, C, dtable, accumulate, scale);
  check(cudaGetLastError(), "embeddingGrad");
}

size_t crossEntropyScratchBytes(int64_t rows) {
  // counted (8 bytes, padded to 16), then the row losses
  return 16 + (size_t)rows * sizeof(float);
}

void crossEntropy(cudaStream_t st, const float *logits, const void *targets, bool t32,
                  int64_t rows, int64_t V, int64_t ignoreIndex, Reduction red, float *out,
                  float *dlogits, const float *dloss, void *scratch, DeviceError *err,
                  int instruction) {
  long long *counted = static_cast<long long *>(scratch);
  float *rowLoss = red == Reduction::None
                       ? out
                       : reinterpret_cast<float *>(static_cast<char *>(scratch) + 16);
  countTargetsKernel<<<1, kThreads, 0, st>>>(targets, t32, rows, V, ignoreIndex, counted, err,
                                             instruction);
  if (rows > 0)
    crossEntropyRowKernel<<<(unsigned)rows, 512, 0, st>>>(logits, targets, t32, rows, V,
                                                          ignoreIndex, rowLoss, dlogits, dloss,
                                                          red, counted);
  if (red != Reduction::None)
    lossTotalKernel<<<1, 512, 0, st>>>(rowLoss, rows, red == Reduction::Mean, counted, out);
  check(cudaGetLastError(), "crossEntropy");
}

void crossEntropyGrad(cudaStream_t st, const float *dloss, const float *logits,
                      const void *targets, bool t32, int64_t rows, int64_t V,
                      int64_t ignoreIndex, Reduction red, float *dlogits, void *scratch,
                      DeviceError *err, int instruction) {
  long long *counted = static_cast<long long *>(scratch);
  countTargetsKernel<<<1, kThreads, 0, st>>>(targets, t32, rows, V, ignoreIndex, counted, err,
                                             instruction);
  if (rows > 0)
    crossEntropyRowKernel<<<(unsigned)rows, 512, 0, st>>>(logits, targets, t32, rows, V,
                                                          ignoreIndex, nullptr, dlogits, dloss,
                                                          red, counted);
  check(cudaGetLastError(), "crossEntropyGrad");
}

int64_t adamAssignBlocks(AdamEntry *entries, int count) {
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    entries[i].firstBlock = blocks;
    blocks += imax(1, (entries[i].n + kAdamBlockElems - 1) / kAdamBlockElems);
  }
  return blocks;
}

size_t gradNormScratchBytes(int64_t blocks) { return (size_t)blocks * sizeof(double); }

void gradNormSq(cudaStream_t st, const AdamEntry *devEntries, int count, int64_t blocks,
                double *normSq, void *scratch) {
  double *partial = static_cast<double *>(scratch);
  if (blocks > 0)
    gradNormPartialKernel<<<(unsigned)blocks, kThreads, 0, st>>>(devEntries, count, partial);
  gradNormFinalKernel<<<1, 1024, 0, st>>>(partial, blocks, normSq);
  check(cudaGetLastError(), "gradNormSq");
}

void adamw(cudaStream_t st, const AdamEntry *devEntries, int count, int64_t blocks,
           const AdamStep &k, const double *normSq) {
  if (blocks == 0)
    return;
  adamwKernel<<<(unsigned)blocks, kThreads, 0, st>>>(devEntries, count, k, normSq);
  check(cudaGetLastError(), "adamw");
}

void accumulateLoss(cudaStream_t st, const float *x, double scale, double *acc) {
  accumulateLossKernel<<<1, 1, 0, st>>>(x, scale, acc);
  check(cudaGetLastError(), "accumulateLoss");
}

const char *compiledArch() { return PIPEMESH_CUDA_ARCH_NAME; }

} // namespace pipemesh::rt::cuda
