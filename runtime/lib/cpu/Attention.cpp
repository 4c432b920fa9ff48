//===- Attention.cpp - flash-style scaled dot-product attention -------------===//
//
// o = softmax(scale * q k^T + mask, causal) v for each of the BH slices, with
// q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv]; with off = Tk - Tq, causal
// hides key j from query i when j > i + off. A query that sees no key at all
// gets o = 0 and no gradient.
//
// Forward: one task per (bh, block of Bq queries). The task walks the visible
// keys in blocks of Bk with an online softmax (running max m, running sum l):
//   S = scale * Q_blk K_blk^T + mask;  m' = max(m, rowmax S);  P = exp(S - m')
//   l = exp(m - m') l + rowsum P;      O = exp(m - m') O + P V_blk
// and finally o = O / l. Nothing of size Tq * Tk is ever held.
//
// Backward (nothing saved by the forward; probabilities are recomputed):
//  pass 1, per (bh, query block): the block's scores against every visible key
//    (Bq x Tk per thread), then per row m = max S, P = exp(S - m) / l,
//    dP = dO V^T, Dr = rowsum(P * dP), dS = P * (dP - Dr) and
//    dq = scale * dS K. m, 1/l and Dr of every row are kept (BH * Tq each).
//  pass 2, per (bh, key block): over the query blocks that see it, recompute
//    P = exp(S - m) / l and dS = P * (dP - Dr) block by block, and accumulate
//    dv = P^T dO and dk = scale * dS^T Q.
// Every output row is written by one task, so the results do not depend on
// the number of threads, and no atomics are needed.
//
// The block products go to BLAS with M*N*K <= kSingleThreadGemm so that
// OpenBLAS runs them on the calling OpenMP thread.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

template <typename T> constexpr T kNegInf = -std::numeric_limits<T>::infinity();

struct Blocks {
  int64_t q = 64, k = 64;
  Blocks(int64_t D, int64_t Dv) {
    const int64_t d = std::max<int64_t>({D, Dv, 1});
    while (q * k * d > kSingleThreadGemm && k > 8)
      k /= 2;
    while (q * k * d > kSingleThreadGemm && q > 8)
      q /= 2;
  }
};

/// The problem's constant parts, shared by the forward and both backward passes.
template <typename T> struct Problem {
  const T *q, *k, *v, *mask;
  int64_t mBH, mQ, mK;
  int64_t Tq, Tk, D, Dv;
  T scale;
  bool causal;

  int64_t offset() const { return Tk - Tq; }
  /// One past the last key that query i may see.
  int64_t keyEnd(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + offset() + 1, 0, Tk) : Tk;
  }

  /// S[nq x nk] (leading dim ldS) = scale * q[i0..] k[j0..]^T + mask, -inf
  /// where causal hides the key.
  void scores(int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t nk, T *S,
              int64_t ldS) const {
    gemm<T>(false, true, nq, nk, D, scale, q + (bh * Tq + i0) * D, D, k + (bh * Tk + j0) * D, D,
            T(0), S, ldS);
    for (int64_t r = 0; r < nq; ++r) {
      T *s = S + r * ldS;
      if (mask) {
        const T *m = mask + bh * mBH + (i0 + r) * mQ + j0 * mK;
        for (int64_t c = 0; c < nk; ++c)
          s[c] += m[c * mK];
      }
      const int64_t visible = keyEnd(i0 + r) - j0;
      for (int64_t c = std::max<int64_t>(visible, 0); c < nk; ++c)
        s[c] = kNegInf<T>;
    }
  }
};

template <typename T> T rowMax(const T *x, int64_t n) {
  T m = kNegInf<T>;
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < n; ++j)
    m = std::max(m, x[j]);
  return m;
}

} // namespace

template <typename T>
void attention(const T *q, const T *k, const T *v, const T *mask, int64_t maskStrideBH,
               int64_t maskStrideQ, int64_t maskStrideK, T *o, int64_t BH, int64_t Tq, int64_t Tk,
               int64_t D, int64_t Dv, T scale, bool causal) {
  const Problem<T> P{q, k, v, mask, maskStrideBH, maskStrideQ, maskStrideK,
                     Tq, Tk, D, Dv, scale, causal};
  const Blocks B(D, Dv);
  const int64_t qBlocks = (Tq + B.q - 1) / B.q;
#pragma omp parallel if (BH * Tq * Tk * (D + Dv) > kParallelGrain)
  {
    std::vector<T> S(B.q * B.k), acc(B.q * Dv), m(B.q);
    std::vector<Acc> l(B.q);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < BH * qBlocks; ++t) {
      const int64_t bh = t / qBlocks, i0 = t % qBlocks * B.q;
      const int64_t nq = std::min(B.q, Tq - i0);
      const int64_t kEnd = P.keyEnd(i0 + nq - 1);
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(m.begin(), m.end(), kNegInf<T>);
      std::fill(l.begin(), l.end(), Acc(0));
      for (int64_t j0 = 0; j0 < kEnd; j0 += B.k) {
        const int64_t nk = std::min(B.k, kEnd - j0);
        P.scores(bh, i0, nq, j0, nk, S.data(), B.k);
        for (int64_t r = 0; r < nq; ++r) {
          T *s = S.data() + r * B.k;
          const T mNew = std::max(m[r], rowMax(s, nk));
          if (mNew == kNegInf<T>) { // nothing visible yet
            std::fill(s, s + nk, T(0));
            continue;
          }
          const T alpha = fastExp(m[r] - mNew);
          Acc sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < nk; ++c) {
            s[c] = fastExp(s[c] - mNew);
            sum += Acc(s[c]);
          }
          l[r] = Acc(alpha) * l[r] + sum;
          m[r] = mNew;
          if (alpha != T(1)) {
            T *a = acc.data() + r * Dv;
            for (int64_t c = 0; c < Dv; ++c)
              a[c] *= alpha;
          }
        }
        gemm<T>(false, false, nq, Dv, nk, T(1), S.data(), B.k, v + (bh * Tk + j0) * Dv, Dv, T(1),
                acc.data(), Dv);
      }
      for (int64_t r = 0; r < nq; ++r) {
        T *out = o + (bh * Tq + i0 + r) * Dv;
        const T inv = l[r] > 0 ? T(1.0 / l[r]) : T(0);
        const T *a = acc.data() + r * Dv;
        for (int64_t c = 0; c < Dv; ++c)
          out[c] = a[c] * inv;
      }
    }
  }
}

template <typename T>
void attentionGrad(const T *dO, const T *q, const T *k, const T *v, const T *mask,
                   int64_t maskStrideBH, int64_t maskStrideQ, int64_t maskStrideK, T *dq, T *dk,
                   T *dv, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, T scale,
                   bool causal) {
  const Problem<T> P{q, k, v, mask, maskStrideBH, maskStrideQ, maskStrideK,
                     Tq, Tk, D, Dv, scale, causal};
  const Blocks B(D, Dv);
  const int64_t qBlocks = (Tq + B.q - 1) / B.q, kBlocks = (Tk + B.k - 1) / B.k;
  // Per query row: max score, 1 / sum(exp(S - max)) (both 0 when the row sees
  // no key, which makes its P zero) and Dr = sum_j P_ij dP_ij.
  std::vector<T> rowMx(BH * Tq), rowInv(BH * Tq), rowD(BH * Tq);
  const bool parallel = BH * Tq * Tk * (D + Dv) > kParallelGrain;

  // Pass 1: statistics and dq, per (bh, query block).
#pragma omp parallel if (parallel)
  {
    std::vector<T> S(B.q * Tk), dP(B.q * Tk);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < BH * qBlocks; ++t) {
      const int64_t bh = t / qBlocks, i0 = t % qBlocks * B.q;
      const int64_t nq = std::min(B.q, Tq - i0);
      const int64_t kEnd = P.keyEnd(i0 + nq - 1);
      T *dqBlk = dq + (bh * Tq + i0) * D;
      const T *dOBlk = dO + (bh * Tq + i0) * Dv;
      for (int64_t j0 = 0; j0 < kEnd; j0 += B.k) {
        const int64_t nk = std::min(B.k, kEnd - j0);
        P.scores(bh, i0, nq, j0, nk, S.data() + j0, Tk);
        gemm<T>(false, true, nq, nk, Dv, T(1), dOBlk, Dv, v + (bh * Tk + j0) * Dv, Dv, T(0),
                dP.data() + j0, Tk);
      }
      for (int64_t r = 0; r < nq; ++r) {
        T *s = S.data() + r * Tk, *dp = dP.data() + r * Tk;
        const int64_t row = bh * Tq + i0 + r;
        const T mx = rowMax(s, kEnd);
        if (mx == kNegInf<T>) {
          rowMx[row] = rowInv[row] = rowD[row] = T(0);
          std::fill(dp, dp + kEnd, T(0));
          continue;
        }
        Acc sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < kEnd; ++c) {
          s[c] = fastExp(s[c] - mx);
          sum += Acc(s[c]);
        }
        const T inv = T(1.0 / sum);
        Acc dsum = 0;
#pragma omp simd reduction(+ : dsum)
        for (int64_t c = 0; c < kEnd; ++c) {
          s[c] *= inv;
          dsum += Acc(s[c]) * Acc(dp[c]);
        }
        const T Dr = T(dsum);
        rowMx[row] = mx;
        rowInv[row] = inv;
        rowD[row] = Dr;
        for (int64_t c = 0; c < kEnd; ++c)
          dp[c] = s[c] * (dp[c] - Dr);
      }
      if (kEnd <= 0)
        std::fill(dqBlk, dqBlk + nq * D, T(0));
      for (int64_t j0 = 0; j0 < kEnd; j0 += B.k) {
        const int64_t nk = std::min(B.k, kEnd - j0);
        gemm<T>(false, false, nq, D, nk, scale, dP.data() + j0, Tk, k + (bh * Tk + j0) * D, D,
                j0 == 0 ? T(0) : T(1), dqBlk, D);
      }
    }
  }

  // Pass 2: dk and dv, per (bh, key block).
#pragma omp parallel if (parallel)
  {
    std::vector<T> S(B.q * B.k), dP(B.q * B.k);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < BH * kBlocks; ++t) {
      const int64_t bh = t / kBlocks, j0 = t % kBlocks * B.k;
      const int64_t nk = std::min(B.k, Tk - j0);
      T *dkBlk = dk + (bh * Tk + j0) * D, *dvBlk = dv + (bh * Tk + j0) * Dv;
      // The first query that may see key j0.
      const int64_t qStart = causal ? std::clamp<int64_t>(j0 - P.offset(), 0, Tq) : 0;
      if (qStart >= Tq) {
        std::fill(dkBlk, dkBlk + nk * D, T(0));
        std::fill(dvBlk, dvBlk + nk * Dv, T(0));
        continue;
      }
      for (int64_t i0 = qStart; i0 < Tq; i0 += B.q) {
        const int64_t nq = std::min(B.q, Tq - i0);
        const T *dOBlk = dO + (bh * Tq + i0) * Dv;
        P.scores(bh, i0, nq, j0, nk, S.data(), B.k);
        gemm<T>(false, true, nq, nk, Dv, T(1), dOBlk, Dv, v + (bh * Tk + j0) * Dv, Dv, T(0),
                dP.data(), B.k);
        for (int64_t r = 0; r < nq; ++r) {
          T *s = S.data() + r * B.k, *dp = dP.data() + r * B.k;
          const int64_t row = bh * Tq + i0 + r;
          const T mx = rowMx[row], inv = rowInv[row], Dr = rowD[row];
          for (int64_t c = 0; c < nk; ++c) {
            s[c] = fastExp(s[c] - mx) * inv;
            dp[c] = s[c] * (dp[c] - Dr);
          }
        }
        const T beta = i0 == qStart ? T(0) : T(1);
        gemm<T>(true, false, nk, Dv, nq, T(1), S.data(), B.k, dOBlk, Dv, beta, dvBlk, Dv);
        gemm<T>(true, false, nk, D, nq, scale, dP.data(), B.k, q + (bh * Tq + i0) * D, D, beta,
                dkBlk, D);
      }
    }
  }
}

#define PIPEMESH_INSTANTIATE(T)                                                                    \
  template void attention<T>(const T *, const T *, const T *, const T *, int64_t, int64_t,        \
                             int64_t, T *, int64_t, int64_t, int64_t, int64_t, int64_t, T, bool); \
  template void attentionGrad<T>(const T *, const T *, const T *, const T *, const T *, int64_t,  \
                                 int64_t, int64_t, T *, T *, T *, int64_t, int64_t, int64_t,       \
                                 int64_t, int64_t, T, bool);
PIPEMESH_INSTANTIATE(float)
PIPEMESH_INSTANTIATE(double)
#undef PIPEMESH_INSTANTIATE

} // namespace pipemesh::rt::cpu
