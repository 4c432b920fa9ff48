//===- FlashAttention.cu - tensor-core causal attention, fwd and bwd -------===//
//
// The bf16 mode's attention for head dim 64 without an additive mask (every
// GPT-2 size): FlashAttention-2's tiling on the tensor cores. q [BH, Tq, 64],
// k, v [BH, Tk, 64], o [BH, Tq, 64] stay float32 in the arena; tiles are
// rounded to bf16 on their way into shared memory, the products run as
// mma.sync m16n8k16 (bf16 operands, fp32 accumulators), and the softmax,
// its statistics and every accumulator stay fp32. Nothing of size Tq x Tk is
// stored.
//
// A block owns 64 rows (query rows in the forward and in dQ, key rows in
// dK/dV); each of its 4 warps owns 16 of them and keeps their operand
// fragments in registers, while 64-row tiles of the other side stream through
// shared memory. The score tile's accumulator fragment is laid out exactly
// like the A operand of the next product (P V, P^T dO, dS K, dS^T Q), so
// probabilities go from one mma to the next without touching shared memory.
//
// Operands reach shared memory one of two ways. Per tile (the default): each
// tile is cast from the float32 tensor on its way in, and transposed tiles
// are scattered element by element. Staged (FlashOptions::staged): one pass
// first casts q, k, v (and dO) to bf16 copies in the scratch, row-major
// [BH, T, 64] and transposed [BH, 64, Tp] (Tp = T rounded up to 64, zero past
// T), so every tile is 16-byte copies, and a transposed tile (the B operand of
// P V, P^T dO, dS^T Q, dS K) is rows of the transposed copy. On an H200 the
// staging pass costs more than the tiles save (forward 0.49 against 0.30 ms
// at B=16, 12 heads, T=1024); it stays as the starting point of a pipelined
// version (cp.async copies, which cannot convert).
//
// A forward whose gradient follows keeps its row statistics and output
// (FlashSaved), so the backward's first pass is one product per row.
//
// Backward, as in Attention.cu (the plan's attention_grad gets dout, q, k, v
// only): (1) the forward again, keeping per query row the log-sum-exp (base 2)
// and delta = dO . O; (2) per key tile, dV = P^T dO and dK = scale dS^T Q;
// (3) per query tile, dQ = scale dS K. Each output element has one owner that
// adds in a fixed order: deterministic, no atomics.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16): g = lane / 4,
// t = lane % 4. A (16 x 16, row-major) registers: {row g, cols 2t, 2t+1},
// {row g+8, cols 2t, 2t+1}, {row g, cols 2t+8, 2t+9}, {row g+8, cols 2t+8,
// 2t+9}. B (16 x 8, k x n): {k 2t, 2t+1; n g}, {k 2t+8, 2t+9; n g}.
// C (16 x 8, fp32): c0, c1 at row g, cols 2t, 2t+1; c2, c3 at row g+8.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/runtime/cuda/CudaKernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace pipemesh::rt::cuda {
namespace {

constexpr int kD = 64;         ///< head dim (q, k and v)
constexpr int kTile = 64;      ///< rows per streamed tile (and per shared-memory tile)
constexpr int kPitch = kD + 8; ///< bf16 row pitch in shared memory: rows 4 banks apart
constexpr int kStageThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

struct Geo {
  int64_t Tq, Tk;
  float scale2; ///< scale * log2(e): scores in the base-2 domain
  bool causal;
  int64_t off; ///< key j is visible from query i when j <= i + off (off = Tk - Tq)
};

__device__ __forceinline__ bool visible(const Geo &g, int64_t i, int64_t j) {
  return j < g.Tk && i < g.Tq && (!g.causal || j <= i + g.off);
}

/// Whether queries [q0, ...) against keys [k0, k0 + nk) need the per-element
/// visibility test: some key is past the causal diagonal of the first query
/// (q0 is the first of a warp's 16 rows or of a 64-row tile), or (for the
/// forward, whose normalizer would count them) some key is past Tk. Query
/// rows past Tq need no test anywhere: their tiles' rows are zero, their
/// results are not stored, and the backward's statistics for them (lse
/// +inf, delta 0) make their probabilities 0; keys past Tk are zero rows, so
/// the backward's products with them add nothing to a stored result.
__device__ __forceinline__ bool edgeTile(const Geo &g, int64_t q0, int64_t k0, int nk,
                                         bool forward) {
  return (g.causal && k0 + nk - 1 > q0 + g.off) || (forward && k0 + nk > g.Tk);
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); // .x (low half) = lo
  return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16 *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

// The tile loaders take the block's thread count as a template argument: the
// loops unroll, and every load is issued before the first store (a loop over
// blockDim.x ran one load at a time and made every kernel half again slower).

/// This thread's float4s of rows [r0, r0 + 64) of a float [T, 64] matrix
/// (rows past T zero): v[i] is float4 number threadIdx.x + i * THREADS.
template <int THREADS>
__device__ __forceinline__ void loadFloatTile(float4 (&v)[kTile * kD / 4 / THREADS],
                                              const float *src, int64_t r0, int64_t T) {
#pragma unroll
  for (int i = 0; i < kTile * kD / 4 / THREADS; ++i) {
    const int idx = threadIdx.x + i * THREADS, r = idx >> 4, c = (idx & 15) * 4;
    const int64_t row = r0 + r;
    v[i] = row < T ? *reinterpret_cast<const float4 *>(src + row * kD + c)
                   : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

/// Rows [r0, r0 + 64) of a float [T, 64] matrix as bf16 into dst[64][kPitch]
/// (rows past T zero).
template <int THREADS>
__device__ void loadRows(__nv_bfloat16 *dst, const float *src, int64_t r0, int64_t T) {
  constexpr int N = kTile * kD / 4 / THREADS;
  float4 v[N];
  loadFloatTile<THREADS>(v, src, r0, T);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int idx = threadIdx.x + i * THREADS, r = idx >> 4, c = (idx & 15) * 4;
    uint2 u;
    u.x = pack2(v[i].x, v[i].y);
    u.y = pack2(v[i].z, v[i].w);
    *reinterpret_cast<uint2 *>(dst + r * kPitch + c) = u;
  }
}

/// The same rows transposed: dst[d][r] = src[r0 + r][d].
template <int THREADS>
__device__ void loadRowsT(__nv_bfloat16 *dst, const float *src, int64_t r0, int64_t T) {
  constexpr int N = kTile * kD / 4 / THREADS;
  float4 v[N];
  loadFloatTile<THREADS>(v, src, r0, T);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int idx = threadIdx.x + i * THREADS, r = idx >> 4, c = (idx & 15) * 4;
    dst[(c + 0) * kPitch + r] = __float2bfloat16_rn(v[i].x);
    dst[(c + 1) * kPitch + r] = __float2bfloat16_rn(v[i].y);
    dst[(c + 2) * kPitch + r] = __float2bfloat16_rn(v[i].z);
    dst[(c + 3) * kPitch + r] = __float2bfloat16_rn(v[i].w);
  }
}

/// A float32 [BH, T, 64] tensor read tile by tile, cast on the way in.
struct F32Tiles {
  const float *p;
  int64_t T;
  /// Rows [r0, r0 + 64) of head bh into dst[64][kPitch].
  template <int THREADS>
  __device__ void rows(__nv_bfloat16 *dst, int64_t bh, int64_t r0) const {
    loadRows<THREADS>(dst, p + bh * T * kD, r0, T);
  }
  /// The same rows transposed into dst[64 (d)][kPitch].
  template <int THREADS>
  __device__ void cols(__nv_bfloat16 *dst, int64_t bh, int64_t r0) const {
    loadRowsT<THREADS>(dst, p + bh * T * kD, r0, T);
  }
};

/// The same tensor staged by stageKernel: bf16 rows [BH, T, 64] and
/// transposed cols [BH, 64, Tp]; tiles are 16-byte copies.
struct Bf16Tiles {
  const __nv_bfloat16 *r, *c;
  int64_t T, Tp;
  template <int THREADS>
  __device__ void rows(__nv_bfloat16 *dst, int64_t bh, int64_t r0) const {
    constexpr int N = kTile * kD / 8 / THREADS;
    const __nv_bfloat16 *src = r + bh * T * kD;
    uint4 v[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int idx = threadIdx.x + i * THREADS, rr = idx >> 3, c8 = (idx & 7) * 8;
      const int64_t row = r0 + rr;
      v[i] = row < T ? *reinterpret_cast<const uint4 *>(src + row * kD + c8)
                     : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int idx = threadIdx.x + i * THREADS, rr = idx >> 3, c8 = (idx & 7) * 8;
      *reinterpret_cast<uint4 *>(dst + rr * kPitch + c8) = v[i];
    }
  }
  template <int THREADS>
  __device__ void cols(__nv_bfloat16 *dst, int64_t bh, int64_t r0) const {
    constexpr int N = kTile * kD / 8 / THREADS;
    const __nv_bfloat16 *src = c + bh * kD * Tp + r0; // r0 + 64 <= Tp
    uint4 v[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int idx = threadIdx.x + i * THREADS, d = idx >> 3, c8 = (idx & 7) * 8;
      v[i] = *reinterpret_cast<const uint4 *>(src + d * Tp + c8);
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int idx = threadIdx.x + i * THREADS, d = idx >> 3, c8 = (idx & 7) * 8;
      *reinterpret_cast<uint4 *>(dst + d * kPitch + c8) = v[i];
    }
  }
};

/// One 64-row tile of x [BH, T, 64] into its bf16 copies: rows [BH, T, 64]
/// and cols [BH, 64, Tp] (columns past T zero).
__global__ void __launch_bounds__(kStageThreads)
    stageKernel(const float *__restrict__ x, int64_t T, int64_t Tp,
                __nv_bfloat16 *__restrict__ rows, __nv_bfloat16 *__restrict__ cols) {
  __shared__ __align__(16) __nv_bfloat16 tile[kTile * kPitch];
  const int64_t bh = blockIdx.y, r0 = (int64_t)blockIdx.x * kTile;
  const float *src = x + bh * T * kD;
#pragma unroll
  for (int idx = threadIdx.x; idx < kTile * kD / 4; idx += kStageThreads) {
    const int r = idx >> 4, c = (idx & 15) * 4;
    const int64_t row = r0 + r;
    const float4 v = row < T ? *reinterpret_cast<const float4 *>(src + row * kD + c)
                             : make_float4(0.f, 0.f, 0.f, 0.f);
    uint2 u;
    u.x = pack2(v.x, v.y);
    u.y = pack2(v.z, v.w);
    *reinterpret_cast<uint2 *>(tile + r * kPitch + c) = u;
    if (row < T)
      *reinterpret_cast<uint2 *>(rows + (bh * T + row) * kD + c) = u;
  }
  __syncthreads();
  // cols[bh][d][r0 + c8 .. + 8) from tile column d: a warp reads 32
  // neighbouring d (conflict-free) and writes 32 rows of cols.
#pragma unroll
  for (int idx = threadIdx.x; idx < kTile * kD / 8; idx += kStageThreads) {
    const int d = idx & (kD - 1), c8 = (idx >> 6) * 8;
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 two;
      two.x = tile[(c8 + 2 * i) * kPitch + d];
      two.y = tile[(c8 + 2 * i + 1) * kPitch + d];
      w[i] = *reinterpret_cast<uint32_t *>(&two);
    }
    *reinterpret_cast<uint4 *>(cols + (bh * kD + d) * Tp + r0 + c8) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// A fragments of rows [16 w, 16 w + 16) of a [64][kPitch] tile, all 4 k-steps.
__device__ __forceinline__ void loadA(uint32_t a[4][4], const __nv_bfloat16 *tile, int w) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const __nv_bfloat16 *r0 = tile + (16 * w + gq) * kPitch, *r1 = r0 + 8 * kPitch;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = ld32(r0 + 16 * kk + 2 * t);
    a[kk][1] = ld32(r1 + 16 * kk + 2 * t);
    a[kk][2] = ld32(r0 + 16 * kk + 2 * t + 8);
    a[kk][3] = ld32(r1 + 16 * kk + 2 * t + 8);
  }
}

/// acc[j] (16 x 8 tiles j = 0..7, 64 columns) += A (16 x 64) B, where B's
/// column n is row n of `tile` ([64][kPitch]: B[k][n] = tile[n][k]).
__device__ __forceinline__ void mmaRows(float acc[8][4], const uint32_t a[4][4],
                                        const __nv_bfloat16 *tile) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const __nv_bfloat16 *row = tile + (8 * j + gq) * kPitch + 2 * t;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      mma(acc[j], a[kk], ld32(row + 16 * kk), ld32(row + 16 * kk + 8));
  }
}

/// A fragments (k = the 64 columns) of a 16 x 64 accumulator (C layout).
__device__ __forceinline__ void accToA(uint32_t a[4][4], const float c[8][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    a[kk][0] = pack2(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

__device__ __forceinline__ void zero(float c[8][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
    c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.f;
}

__device__ __forceinline__ float quadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

__device__ __forceinline__ float quadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/// Keys any query row in [q0, q0 + rows) can see: [0, end).
__device__ __forceinline__ int64_t keyEnd(const Geo &g, int64_t q0, int rows) {
  if (!g.causal)
    return g.Tk;
  const int64_t end = (q0 + rows < g.Tq ? q0 + rows : g.Tq) - 1 + g.off + 1;
  return end < 0 ? 0 : (end < g.Tk ? end : g.Tk);
}

/// A fragments of the block's own rows [r0, r0 + 16 WARPS) of src: 64 rows
/// at a time through buf, each warp taking its 16.
template <int WARPS, class Tiles>
__device__ void loadOwnRows(uint32_t a[4][4], __nv_bfloat16 *buf, const Tiles &src, int64_t bh,
                            int64_t r0) {
  const int w = threadIdx.x >> 5;
#pragma unroll
  for (int part = 0; part < WARPS / 4; ++part) {
    if (part)
      __syncthreads();
    src.template rows<WARPS * 32>(buf, bh, r0 + part * kTile);
    __syncthreads();
    if (w / 4 == part)
      loadA(a, buf, w % 4);
  }
}

/// The forward (STATS = false: o; and, when lse2 and oSaved are given, the
/// row statistics and a copy of o that the backward reads instead of running
/// this pass again) or the backward's first pass (STATS = true: lse2 = the
/// base-2 log-sum-exp of the scaled scores, +inf for a row that sees no key,
/// and delta = dO . O per query row).
template <int WARPS, bool STATS, class Tiles>
__global__ void __launch_bounds__(WARPS * 32)
    flashForwardKernel(Tiles q, Tiles k, Tiles v, Geo g, float *__restrict__ o,
                       const float *__restrict__ dO, float *__restrict__ lse2,
                       float *__restrict__ delta, float *__restrict__ oSaved) {
  __shared__ __align__(16) __nv_bfloat16 kS[kTile * kPitch];
  __shared__ __align__(16) __nv_bfloat16 vT[kD * kPitch];
  const int64_t bh = blockIdx.y, q0 = (int64_t)blockIdx.x * (16 * WARPS);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;

  uint32_t qa[4][4];
  loadOwnRows<WARPS>(qa, kS, q, bh, q0); // the query rows pass through kS once
  const int64_t qw = q0 + 16 * w; // this warp's first row
  const int64_t row[2] = {qw + gq, qw + gq + 8};

  float acc[8][4];
  zero(acc);
  // Per row half h: the running max (base 2) and this thread's share of the
  // running sum (its 16 columns; the quad's shares are added at the end, and
  // each rescaling is the row's, so the shares rescale like the whole).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int64_t kEnd = keyEnd(g, q0, 16 * WARPS);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    __syncthreads();
    k.template rows<WARPS * 32>(kS, bh, k0);
    v.template cols<WARPS * 32>(vT, bh, k0);
    __syncthreads();
    float s[8][4];
    zero(s);
    mmaRows(s, qa, kS);
    float mx[2] = {-INFINITY, -INFINITY};
    if (edgeTile(g, qw, k0, kTile, true)) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          const int64_t key = k0 + 8 * j + 2 * t + (e & 1);
          s[j][e] = visible(g, row[h], key) ? s[j][e] * g.scale2 : -INFINITY;
          mx[h] = fmaxf(mx[h], s[j][e]);
        }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] *= g.scale2;
          mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
        }
    }
    float alpha[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mNew = fmaxf(m[h], quadMax(mx[h]));
      base[h] = mNew == -INFINITY ? 0.f : mNew; // nothing visible yet: every p is 0
      alpha[h] = exp2f(m[h] - base[h]);         // 0 while m is -inf
      m[h] = mNew;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        s[j][e] = exp2f(s[j][e] - base[h]);
        l[h] += s[j][e];
        acc[j][e] *= alpha[h];
      }
    uint32_t pa[4][4];
    accToA(pa, s);
    mmaRows(acc, pa, vT);
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float L = quadSum(l[h]);
    const float inv = L > 0.f ? 1.f / L : 0.f; // a row that sees no key gives 0
    const int64_t r = row[h];
    if (!STATS) {
      if (r < g.Tq) {
        float *orow = o + (bh * g.Tq + r) * kD;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          *reinterpret_cast<float2 *>(orow + 8 * j + 2 * t) =
              make_float2(acc[j][2 * h] * inv, acc[j][2 * h + 1] * inv);
        if (oSaved) {
          float *srow = oSaved + (bh * g.Tq + r) * kD;
#pragma unroll
          for (int j = 0; j < 8; ++j)
            *reinterpret_cast<float2 *>(srow + 8 * j + 2 * t) =
                make_float2(acc[j][2 * h] * inv, acc[j][2 * h + 1] * inv);
          if (t == 0)
            lse2[bh * g.Tq + r] = L > 0.f ? m[h] + log2f(L) : INFINITY;
        }
      }
    } else {
      float dsum = 0.f;
      if (r < g.Tq) {
        const float *drow = dO + (bh * g.Tq + r) * kD;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float2 d2 = *reinterpret_cast<const float2 *>(drow + 8 * j + 2 * t);
          dsum += d2.x * acc[j][2 * h] * inv + d2.y * acc[j][2 * h + 1] * inv;
        }
      }
      dsum = quadSum(dsum);
      if (r < g.Tq && t == 0) {
        lse2[bh * g.Tq + r] = L > 0.f ? m[h] + log2f(L) : INFINITY;
        delta[bh * g.Tq + r] = dsum;
      }
    }
  }
}

/// The backward's first pass when the forward saved its statistics:
/// delta[r] = dO[r] . O[r], one warp per row.
__global__ void deltaKernel(const float *__restrict__ dO, const float *__restrict__ o,
                            int64_t rows, float *__restrict__ delta) {
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (r >= rows)
    return;
  const float2 a = *reinterpret_cast<const float2 *>(dO + r * kD + 2 * lane);
  const float2 b = *reinterpret_cast<const float2 *>(o + r * kD + 2 * lane);
  float sum = a.x * b.x + a.y * b.y;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0)
    delta[r] = sum;
}

/// Pass 2: per key tile, dV = P^T dO and dK = scale dS^T Q over the query
/// tiles that see it (dS = P (dP - delta), dP = dO V^T).
template <int WARPS, class Tiles>
__global__ void __launch_bounds__(WARPS * 32)
    flashKeyKernel(Tiles q, Tiles k, Tiles v, Tiles dO, const float *__restrict__ lse2,
                   const float *__restrict__ delta, Geo g, float scale, float *__restrict__ dk,
                   float *__restrict__ dv) {
  __shared__ __align__(16) __nv_bfloat16 qS[kTile * kPitch];
  __shared__ __align__(16) __nv_bfloat16 qT[kD * kPitch];
  __shared__ __align__(16) __nv_bfloat16 doS[kTile * kPitch];
  __shared__ __align__(16) __nv_bfloat16 doT[kD * kPitch];
  __shared__ float lseS[kTile], deltaS[kTile];
  const int64_t bh = blockIdx.y, k0 = (int64_t)blockIdx.x * (16 * WARPS);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;

  uint32_t ka[4][4], va[4][4];
  loadOwnRows<WARPS>(ka, qS, k, bh, k0); // this block's keys and values pass through once
  loadOwnRows<WARPS>(va, doS, v, bh, k0);
  const int64_t kw = k0 + 16 * w; // this warp's first key
  const int64_t key[2] = {kw + gq, kw + gq + 8};

  float dkAcc[8][4], dvAcc[8][4];
  zero(dkAcc);
  zero(dvAcc);
  int64_t qStart = 0;
  if (g.causal) {
    const int64_t first = k0 - g.off; // the first query that sees key k0
    qStart = first <= 0 ? 0 : first / kTile * kTile;
  }
  for (int64_t q0 = qStart; q0 < g.Tq; q0 += kTile) {
    __syncthreads();
    q.template rows<WARPS * 32>(qS, bh, q0);
    q.template cols<WARPS * 32>(qT, bh, q0);
    dO.template rows<WARPS * 32>(doS, bh, q0);
    dO.template cols<WARPS * 32>(doT, bh, q0);
    if (threadIdx.x < kTile) {
      const int64_t r = q0 + threadIdx.x;
      lseS[threadIdx.x] = r < g.Tq ? lse2[bh * g.Tq + r] : INFINITY;
      deltaS[threadIdx.x] = r < g.Tq ? delta[bh * g.Tq + r] : 0.f;
    }
    __syncthreads();
    float p[8][4], ds[8][4];
    zero(p);
    zero(ds);
    mmaRows(p, ka, qS);   // scores, transposed: [key][query]
    mmaRows(ds, va, doS); // dP^T = V dO^T
    const bool edge = edgeTile(g, q0, kw, 16, false);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1, qi = 8 * j + 2 * t + (e & 1);
        p[j][e] = !edge || visible(g, q0 + qi, key[h]) ? exp2f(p[j][e] * g.scale2 - lseS[qi])
                                                       : 0.f;
        ds[j][e] = p[j][e] * (ds[j][e] - deltaS[qi]);
      }
    uint32_t a[4][4];
    accToA(a, p);
    mmaRows(dvAcc, a, doT);
    accToA(a, ds);
    mmaRows(dkAcc, a, qT);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (key[h] >= g.Tk)
      continue;
    float *dkRow = dk + (bh * g.Tk + key[h]) * kD, *dvRow = dv + (bh * g.Tk + key[h]) * kD;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      *reinterpret_cast<float2 *>(dkRow + 8 * j + 2 * t) =
          make_float2(dkAcc[j][2 * h] * scale, dkAcc[j][2 * h + 1] * scale);
      *reinterpret_cast<float2 *>(dvRow + 8 * j + 2 * t) =
          make_float2(dvAcc[j][2 * h], dvAcc[j][2 * h + 1]);
    }
  }
}

/// Pass 3: per query tile, dQ = scale dS K over the key tiles it sees.
template <int WARPS, class Tiles>
__global__ void __launch_bounds__(WARPS * 32)
    flashQueryKernel(Tiles q, Tiles k, Tiles v, Tiles dO, const float *__restrict__ lse2,
                     const float *__restrict__ delta, Geo g, float scale,
                     float *__restrict__ dq) {
  __shared__ __align__(16) __nv_bfloat16 kS[kTile * kPitch];
  __shared__ __align__(16) __nv_bfloat16 kT[kD * kPitch];
  __shared__ __align__(16) __nv_bfloat16 vS[kTile * kPitch];
  const int64_t bh = blockIdx.y, q0 = (int64_t)blockIdx.x * (16 * WARPS);
  const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;

  uint32_t qa[4][4], da[4][4];
  loadOwnRows<WARPS>(qa, kS, q, bh, q0); // the query and dO rows pass through once
  loadOwnRows<WARPS>(da, vS, dO, bh, q0);
  const int64_t qw = q0 + 16 * w; // this warp's first row
  const int64_t row[2] = {qw + gq, qw + gq + 8};
  float lse[2], dl[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    lse[h] = row[h] < g.Tq ? lse2[bh * g.Tq + row[h]] : INFINITY;
    dl[h] = row[h] < g.Tq ? delta[bh * g.Tq + row[h]] : 0.f;
  }

  float dqAcc[8][4];
  zero(dqAcc);
  const int64_t kEnd = keyEnd(g, q0, 16 * WARPS);
  for (int64_t k0 = 0; k0 < kEnd; k0 += kTile) {
    __syncthreads();
    k.template rows<WARPS * 32>(kS, bh, k0);
    k.template cols<WARPS * 32>(kT, bh, k0);
    v.template rows<WARPS * 32>(vS, bh, k0);
    __syncthreads();
    float p[8][4], ds[8][4];
    zero(p);
    zero(ds);
    mmaRows(p, qa, kS);  // S = Q K^T
    mmaRows(ds, da, vS); // dP = dO V^T
    const bool edge = edgeTile(g, qw, k0, kTile, false);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int64_t keyIdx = k0 + 8 * j + 2 * t + (e & 1);
        p[j][e] = !edge || visible(g, row[h], keyIdx) ? exp2f(p[j][e] * g.scale2 - lse[h]) : 0.f;
        ds[j][e] = p[j][e] * (ds[j][e] - dl[h]);
      }
    uint32_t a[4][4];
    accToA(a, ds);
    mmaRows(dqAcc, a, kT);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row[h] >= g.Tq)
      continue;
    float *dqRow = dq + (bh * g.Tq + row[h]) * kD;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      *reinterpret_cast<float2 *>(dqRow + 8 * j + 2 * t) =
          make_float2(dqAcc[j][2 * h] * scale, dqAcc[j][2 * h + 1] * scale);
  }
}

Geo geo(int64_t Tq, int64_t Tk, float scale, bool causal) {
  return {Tq, Tk, scale * kLog2e, causal, Tk - Tq};
}

int64_t roundUp64(int64_t n) { return (n + kTile - 1) / kTile * kTile; }

/// Bytes of one tensor's staged copies (rows and cols), 256-byte aligned.
size_t stagedBytes(int64_t BH, int64_t T) {
  const size_t b = (size_t)(BH * T * kD + BH * kD * roundUp64(T)) * 2;
  return (b + 255) / 256 * 256;
}

/// Bytes of the backward's row statistics (lse2 and delta, [BH, Tq] each) at
/// the scratch's start, 256-byte aligned: the staged copies follow them.
size_t statsBytes(int64_t BH, int64_t Tq) {
  return ((size_t)(2 * BH * Tq) * sizeof(float) + 255) / 256 * 256;
}

/// Casts x into its staged copies at `at` (advanced past them).
Bf16Tiles stage(cudaStream_t st, const float *x, int64_t BH, int64_t T, char *&at) {
  const int64_t Tp = roundUp64(T);
  auto *rows = reinterpret_cast<__nv_bfloat16 *>(at);
  auto *cols = rows + BH * T * kD;
  at += stagedBytes(BH, T);
  if (T > 0) {
    dim3 grid((unsigned)(Tp / kTile), (unsigned)BH);
    stageKernel<<<grid, kStageThreads, 0, st>>>(x, T, Tp, rows, cols);
  }
  return {rows, cols, T, Tp};
}

template <int WARPS, class Tiles>
void launchForward(cudaStream_t st, Tiles q, Tiles k, Tiles v, float *o, int64_t BH, Geo g,
                   const FlashSaved &saved) {
  dim3 grid((unsigned)((g.Tq + 16 * WARPS - 1) / (16 * WARPS)), (unsigned)BH);
  flashForwardKernel<WARPS, false>
      <<<grid, WARPS * 32, 0, st>>>(q, k, v, g, o, nullptr, saved.lse2, nullptr, saved.o);
}

/// lse2 and delta: the scratch's; saved (when the forward kept them): lse2
/// and o from there, the first pass reduced to delta = dO . O.
template <int WARPS, class Tiles>
void launchBackward(cudaStream_t st, Tiles q, Tiles k, Tiles v, Tiles dOt, const float *dO,
                    float *dq, float *dk, float *dv, int64_t BH, Geo g, float scale, float *lse2,
                    float *delta, const FlashSaved &saved) {
  constexpr int rows = 16 * WARPS;
  dim3 qGrid((unsigned)((g.Tq + rows - 1) / rows), (unsigned)BH);
  dim3 kGrid((unsigned)((g.Tk + rows - 1) / rows), (unsigned)BH);
  const float *lse = lse2;
  if (saved.lse2) {
    const int64_t n = BH * g.Tq;
    deltaKernel<<<(unsigned)((n + 7) / 8), 256, 0, st>>>(dO, saved.o, n, delta);
    lse = saved.lse2;
  } else {
    flashForwardKernel<WARPS, true>
        <<<qGrid, WARPS * 32, 0, st>>>(q, k, v, g, nullptr, dO, lse2, delta, nullptr);
  }
  flashKeyKernel<WARPS><<<kGrid, WARPS * 32, 0, st>>>(q, k, v, dOt, lse, delta, g, scale, dk, dv);
  flashQueryKernel<WARPS><<<qGrid, WARPS * 32, 0, st>>>(q, k, v, dOt, lse, delta, g, scale, dq);
}

/// The kernels at the block size the options name (64 or 128 rows).
template <class Tiles>
void forward(const FlashOptions &opt, cudaStream_t st, Tiles q, Tiles k, Tiles v, float *o,
             int64_t BH, Geo g, const FlashSaved &saved) {
  if (opt.blockRows == 64)
    launchForward<4>(st, q, k, v, o, BH, g, saved);
  else
    launchForward<8>(st, q, k, v, o, BH, g, saved);
}

template <class Tiles>
void backward(const FlashOptions &opt, cudaStream_t st, Tiles q, Tiles k, Tiles v, Tiles dOt,
              const float *dO, float *dq, float *dk, float *dv, int64_t BH, Geo g, float scale,
              float *lse2, float *delta, const FlashSaved &saved) {
  if (opt.blockRows == 64)
    launchBackward<4>(st, q, k, v, dOt, dO, dq, dk, dv, BH, g, scale, lse2, delta, saved);
  else
    launchBackward<8>(st, q, k, v, dOt, dO, dq, dk, dv, BH, g, scale, lse2, delta, saved);
}

} // namespace

bool flashAttentionSupported(int64_t D, int64_t Dv, const MaskView &mask) {
  return D == kD && Dv == kD && !mask.data;
}

size_t flashAttentionScratchBytes(int64_t BH, int64_t Tq, int64_t Tk) {
  return stagedBytes(BH, Tq) + 2 * stagedBytes(BH, Tk);
}

size_t flashAttentionGradScratchBytes(int64_t BH, int64_t Tq, int64_t Tk) {
  return statsBytes(BH, Tq) + 2 * stagedBytes(BH, Tq) + 2 * stagedBytes(BH, Tk);
}

void flashAttention(cudaStream_t st, const float *q, const float *k, const float *v, float *o,
                    int64_t BH, int64_t Tq, int64_t Tk, float scale, bool causal, void *scratch,
                    FlashOptions opt, FlashSaved saved) {
  if (BH == 0 || Tq == 0)
    return;
  if (Tk == 0) {
    cudaMemsetAsync(o, 0, (size_t)(BH * Tq * kD) * sizeof(float), st);
    return;
  }
  const Geo g = geo(Tq, Tk, scale, causal);
  if (opt.staged) {
    char *at = static_cast<char *>(scratch);
    Bf16Tiles qs = stage(st, q, BH, Tq, at), ks = stage(st, k, BH, Tk, at),
              vs = stage(st, v, BH, Tk, at);
    forward(opt, st, qs, ks, vs, o, BH, g, saved);
  } else {
    forward(opt, st, F32Tiles{q, Tq}, F32Tiles{k, Tk}, F32Tiles{v, Tk}, o, BH, g, saved);
  }
  reportLaunch("flashAttention");
}

void flashAttentionGrad(cudaStream_t st, const float *dO, const float *q, const float *k,
                        const float *v, float *dq, float *dk, float *dv, int64_t BH, int64_t Tq,
                        int64_t Tk, float scale, bool causal, void *scratch,
                        FlashOptions opt, FlashSaved saved) {
  if (BH == 0)
    return;
  if (Tq == 0 || Tk == 0) {
    cudaMemsetAsync(dq, 0, (size_t)(BH * Tq * kD) * sizeof(float), st);
    cudaMemsetAsync(dk, 0, (size_t)(BH * Tk * kD) * sizeof(float), st);
    cudaMemsetAsync(dv, 0, (size_t)(BH * Tk * kD) * sizeof(float), st);
    return;
  }
  const Geo g = geo(Tq, Tk, scale, causal);
  float *lse2 = static_cast<float *>(scratch), *delta = lse2 + BH * Tq;
  if (opt.staged) {
    char *at = static_cast<char *>(scratch) + statsBytes(BH, Tq);
    Bf16Tiles qs = stage(st, q, BH, Tq, at), ks = stage(st, k, BH, Tk, at),
              vs = stage(st, v, BH, Tk, at), ds = stage(st, dO, BH, Tq, at);
    backward(opt, st, qs, ks, vs, ds, dO, dq, dk, dv, BH, g, scale, lse2, delta, saved);
  } else {
    backward(opt, st, F32Tiles{q, Tq}, F32Tiles{k, Tk}, F32Tiles{v, Tk}, F32Tiles{dO, Tq}, dO,
             dq, dk, dv, BH, g, scale, lse2, delta, saved);
  }
  reportLaunch("flashAttentionGrad");
}

} // namespace pipemesh::rt::cuda
