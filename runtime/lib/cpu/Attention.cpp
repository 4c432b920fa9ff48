//===- Attention.cpp - blocked scaled dot-product attention -----------------===//
//
// o = softmax(cap(scale * q k^T) + mask, causal) v for each of the BH slices, with
// q [BH, Tq, D], k [BH, Tk, D], v [BH, Tk, Dv]; with off = Tk - Tq, causal
// hides key j from query i when j > i + off, and a sliding window W > 0 also
// when j <= i + off - W. A soft cap C > 0 is cap(s) = C tanh(s / C), else
// cap(s) = s. A query that sees no key at all gets o = 0 and no gradient.
//
// The queries are taken in blocks of Bq rows; a block sees keys [kBegin, kEnd)
// (causal: up to the last row's horizon; windowed: from the first row's). Per
// block, whole score rows are held (Bq x (kEnd - kBegin) per thread: memory
// O(Bq * Tk), nothing of size Tq * Tk), so that every product is one GEMM of
// useful size and the softmax needs no rescaling.
//
// Forward, one task per (bh, query block):
//   S = scale * Q_blk K^T + mask;  P = exp(S - rowmax S);  l = rowsum P
//   o_blk = (P V) / l
// Backward, one task per bh (nothing saved by the forward; P is recomputed
// once), for each query block in order:
//   S, P as above (normalized: P /= l);  dP = dO_blk V^T
//   Dr = rowsum(P * dP);  dS = P * (dP - Dr)  [* (1 - tanh^2) under a cap]
//   dq_blk = scale * dS K;  dv += P^T dO_blk;  dk += scale * dS^T Q_blk
// The task owns its bh's dq, dk and dv, and adds the blocks in a fixed
// order, so the results do not depend on the number of threads, with no
// atomics. (The keys of a bh are first written by the block that first sees
// them, so only the keys no query sees are zeroed.)
//
// The products run on the calling OpenMP thread (gemmOnThisThread).
//
// Grouped-query attention: query slice bh reads key slice bh / gk and value
// slice bh / gv (Llama's repeat_kv without the copies). The backward then
// gives each query slice its own partial dk (dv) in a scratch buffer and
// sums a group's partials in slice order afterwards: every query slice
// still runs as its own task, and the sums do not depend on the threads.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <vector>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

template <typename T> constexpr T kNegInf = -std::numeric_limits<T>::infinity();

/// Query rows per block.
constexpr int64_t kBlockQ = 64;

/// The problem's constant parts, shared by the forward and the backward.
template <typename T> struct Problem {
  const T *q, *k, *v, *mask;
  int64_t mBH, mQ, mK;
  int64_t Tq, Tk, D, Dv;
  T scale;
  bool causal;
  int64_t window; ///< causal only: keys visible to a query, 0 for all before it
  T softcap;      ///< scores capped to softcap * tanh(s / softcap) when > 0
  int64_t groupK, groupV; ///< query slices per key (value) slice

  const T *keys(int64_t bh) const { return k + bh / groupK * Tk * D; }
  const T *values(int64_t bh) const { return v + bh / groupV * Tk * Dv; }

  int64_t offset() const { return Tk - Tq; }
  /// One past the last key that query i may see.
  int64_t keyEnd(int64_t i) const {
    return causal ? std::clamp<int64_t>(i + offset() + 1, 0, Tk) : Tk;
  }
  /// The first key that query i may see.
  int64_t keyBegin(int64_t i) const {
    return causal && window > 0 ? std::clamp<int64_t>(i + offset() + 1 - window, 0, Tk) : 0;
  }

  /// S[nq x (j1 - j0)] (leading dim ldS) = cap(scale * q[i0..] k[j0..j1)^T)
  /// + mask, -inf where causal or the window hides the key. Under a cap,
  /// `tanhOut` (when given, leading dim ldS) receives the tanh values, whose
  /// derivative the backward needs.
  void scores(int64_t bh, int64_t i0, int64_t nq, int64_t j0, int64_t j1, T *S, int64_t ldS,
              T *tanhOut = nullptr) const {
    const int64_t nk = j1 - j0;
    gemmOnThisThread<T>(false, true, nq, nk, D, scale, q + (bh * Tq + i0) * D, D,
                        keys(bh) + j0 * D, D, T(0), S, ldS);
    for (int64_t r = 0; r < nq; ++r) {
      T *s = S + r * ldS;
      if (softcap > T(0)) {
        const T inv = T(1) / softcap;
        for (int64_t c = 0; c < nk; ++c) {
          const T t = std::tanh(s[c] * inv);
          s[c] = softcap * t;
          if (tanhOut)
            tanhOut[r * ldS + c] = t;
        }
      }
      if (mask) {
        const T *m = mask + bh * mBH + (i0 + r) * mQ + j0 * mK;
        for (int64_t c = 0; c < nk; ++c)
          s[c] += m[c * mK];
      }
      for (int64_t c = 0; c < std::min(keyBegin(i0 + r) - j0, nk); ++c)
        s[c] = kNegInf<T>;
      for (int64_t c = std::max<int64_t>(keyEnd(i0 + r) - j0, 0); c < nk; ++c)
        s[c] = kNegInf<T>;
    }
  }
};

// --- row loops (float: AVX2 + FMA build where the CPU has it) ----------------

/// s = exp(s - max s); returns 1 / sum(s) (0, with s zeroed, when the row is
/// entirely -inf: the query sees no key).
template <typename T> PIPEMESH_ALWAYS_INLINE T expRowImpl(T *s, int64_t n) {
  const T mx = rowMax(s, n);
  if (mx == kNegInf<T>) {
    for (int64_t c = 0; c < n; ++c)
      s[c] = T(0);
    return T(0);
  }
  Acc sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c) {
    s[c] = fastExp(s[c] - mx);
    sum += Acc(s[c]);
  }
  return T(1.0 / sum);
}
PIPEMESH_MULTIVERSION(float, expRow, (float *s, int64_t n), (s, n))
double expRow(double *s, int64_t n) { return expRowImpl(s, n); }

/// s = P = softmax(s) and dp = dS = P * (dp - sum(P * dp)), one row.
template <typename T> PIPEMESH_ALWAYS_INLINE void softmaxBackRowImpl(T *s, T *dp, int64_t n) {
  const T inv = expRowImpl(s, n);
  Acc dsum = 0;
#pragma omp simd reduction(+ : dsum)
  for (int64_t c = 0; c < n; ++c) {
    s[c] *= inv;
    dsum += Acc(s[c]) * Acc(dp[c]);
  }
  const T Dr = T(dsum);
#pragma omp simd
  for (int64_t c = 0; c < n; ++c)
    dp[c] = s[c] * (dp[c] - Dr);
}
PIPEMESH_MULTIVERSION(void, softmaxBackRow, (float *s, float *dp, int64_t n), (s, dp, n))
void softmaxBackRow(double *s, double *dp, int64_t n) { softmaxBackRowImpl(s, dp, n); }

/// dst[0..n) = 0.
template <typename T> void zero(T *dst, int64_t n) { std::fill(dst, dst + n, T(0)); }

/// dst[s] = sum over r < group of partial[s * group + r] (in r order), for
/// the `slices` slices of `n` elements each.
template <typename T>
void sumGroups(const T *partial, T *dst, int64_t slices, int64_t group, int64_t n) {
#pragma omp parallel for if (slices * group * n > kParallelGrain)
  for (int64_t s = 0; s < slices; ++s) {
    T *out = dst + s * n;
    const T *first = partial + s * group * n;
    std::copy(first, first + n, out);
    for (int64_t r = 1; r < group; ++r) {
      const T *part = first + r * n;
      for (int64_t e = 0; e < n; ++e)
        out[e] += part[e];
    }
  }
}

} // namespace

template <typename T>
void attention(const T *q, const T *k, const T *v, const T *mask, int64_t maskStrideBH,
               int64_t maskStrideQ, int64_t maskStrideK, T *o, int64_t BH, int64_t Tq, int64_t Tk,
               int64_t D, int64_t Dv, T scale, bool causal, int64_t window, T softcap,
               int64_t groupK, int64_t groupV) {
  const Problem<T> P{q, k, v, mask, maskStrideBH, maskStrideQ, maskStrideK, Tq, Tk, D, Dv,
                     scale, causal, window, softcap, groupK, groupV};
  const int64_t Bq = std::max<int64_t>(std::min(kBlockQ, Tq), 1);
  const int64_t qBlocks = (Tq + Bq - 1) / Bq;
#pragma omp parallel if (BH * Tq * Tk * (D + Dv) > kParallelGrain)
  {
    std::vector<T> S(Bq * std::max<int64_t>(Tk, 1)), inv(Bq);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < BH * qBlocks; ++t) {
      const int64_t bh = t / qBlocks, i0 = t % qBlocks * Bq;
      const int64_t nq = std::min(Bq, Tq - i0);
      const int64_t kBegin = P.keyBegin(i0), kEnd = P.keyEnd(i0 + nq - 1);
      const int64_t nk = kEnd - kBegin;
      T *oBlk = o + (bh * Tq + i0) * Dv;
      if (kEnd <= 0) {
        zero(oBlk, nq * Dv);
        continue;
      }
      P.scores(bh, i0, nq, kBegin, kEnd, S.data(), nk);
      for (int64_t r = 0; r < nq; ++r)
        inv[r] = expRow(S.data() + r * nk, nk);
      gemmOnThisThread<T>(false, false, nq, Dv, nk, T(1), S.data(), nk,
                          P.values(bh) + kBegin * Dv, Dv, T(0), oBlk, Dv);
      for (int64_t r = 0; r < nq; ++r) {
        T *out = oBlk + r * Dv;
        const T f = inv[r];
        for (int64_t c = 0; c < Dv; ++c)
          out[c] *= f;
      }
    }
  }
}

template <typename T>
void attentionGrad(const T *dO, const T *q, const T *k, const T *v, const T *mask,
                   int64_t maskStrideBH, int64_t maskStrideQ, int64_t maskStrideK, T *dq, T *dk,
                   T *dv, int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv, T scale,
                   bool causal, int64_t window, T softcap, int64_t groupK, int64_t groupV) {
  const Problem<T> P{q, k, v, mask, maskStrideBH, maskStrideQ, maskStrideK, Tq, Tk, D, Dv,
                     scale, causal, window, softcap, groupK, groupV};
  const int64_t Bq = std::max<int64_t>(std::min(kBlockQ, Tq), 1);
  // A grouped dk (dv) is first one partial per query slice.
  std::vector<T> dkPartial(groupK > 1 ? BH * Tk * D : 0), dvPartial(groupV > 1 ? BH * Tk * Dv : 0);
  T *dkSlices = groupK > 1 ? dkPartial.data() : dk, *dvSlices = groupV > 1 ? dvPartial.data() : dv;
#pragma omp parallel if (BH > 1 && BH * Tq * Tk * (D + Dv) > kParallelGrain)
  {
    std::vector<T> S(Bq * std::max<int64_t>(Tk, 1)), dP(Bq * std::max<int64_t>(Tk, 1));
    std::vector<T> tanhS(softcap > T(0) ? Bq * std::max<int64_t>(Tk, 1) : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const T *qB = q + bh * Tq * D, *kB = P.keys(bh), *vB = P.values(bh);
      const T *dOB = dO + bh * Tq * Dv;
      T *dqB = dq + bh * Tq * D, *dkB = dkSlices + bh * Tk * D, *dvB = dvSlices + bh * Tk * Dv;
      // Keys [0, touched) of dk, dv hold a partial sum (or zero): a window
      // hides the first keys from every query when Tq < Tk.
      int64_t touched = P.keyBegin(0);
      zero(dkB, touched * D);
      zero(dvB, touched * Dv);
      for (int64_t i0 = 0; i0 < Tq; i0 += Bq) {
        const int64_t nq = std::min(Bq, Tq - i0);
        // Both non-decreasing in i0, and kBegin <= touched once a block ran.
        const int64_t kBegin = P.keyBegin(i0), kEnd = P.keyEnd(i0 + nq - 1);
        const int64_t nk = kEnd - kBegin;
        if (kEnd <= 0) {
          zero(dqB + i0 * D, nq * D);
          continue;
        }
        P.scores(bh, i0, nq, kBegin, kEnd, S.data(), nk, tanhS.empty() ? nullptr : tanhS.data());
        gemmOnThisThread<T>(false, true, nq, nk, Dv, T(1), dOB + i0 * Dv, Dv, vB + kBegin * Dv,
                            Dv, T(0), dP.data(), nk);
        for (int64_t r = 0; r < nq; ++r)
          softmaxBackRow(S.data() + r * nk, dP.data() + r * nk, nk);
        // Through the cap: d(C tanh(s / C)) / ds = 1 - tanh^2.
        if (!tanhS.empty())
          for (int64_t e = 0; e < nq * nk; ++e)
            dP[e] *= T(1) - tanhS[e] * tanhS[e];
        // S now holds P, dP holds dS.
        gemmOnThisThread<T>(false, false, nq, D, nk, scale, dP.data(), nk, kB + kBegin * D, D,
                            T(0), dqB + i0 * D, D);
        // Keys seen before add to their sums (beta 1); new keys start theirs.
        const int64_t old = std::clamp(touched, kBegin, kEnd);
        for (int64_t part = 0; part < 2; ++part) {
          const int64_t j0 = part == 0 ? kBegin : old, n = part == 0 ? old - kBegin : kEnd - old;
          if (n <= 0)
            continue;
          const T beta = part == 0 ? T(1) : T(0);
          gemmOnThisThread<T>(true, false, n, Dv, nq, T(1), S.data() + (j0 - kBegin), nk,
                              dOB + i0 * Dv, Dv, beta, dvB + j0 * Dv, Dv);
          gemmOnThisThread<T>(true, false, n, D, nq, scale, dP.data() + (j0 - kBegin), nk,
                              qB + i0 * D, D, beta, dkB + j0 * D, D);
        }
        touched = std::max(touched, kEnd);
      }
      // Keys no query sees.
      zero(dkB + touched * D, (Tk - touched) * D);
      zero(dvB + touched * Dv, (Tk - touched) * Dv);
    }
  }
  if (groupK > 1)
    sumGroups(dkSlices, dk, BH / groupK, groupK, Tk * D);
  if (groupV > 1)
    sumGroups(dvSlices, dv, BH / groupV, groupV, Tk * Dv);
}

#define PIPEMESH_INSTANTIATE(T)                                                                    \
  template void attention<T>(const T *, const T *, const T *, const T *, int64_t, int64_t,        \
                             int64_t, T *, int64_t, int64_t, int64_t, int64_t, int64_t, T, bool,  \
                             int64_t, T, int64_t, int64_t);                                       \
  template void attentionGrad<T>(const T *, const T *, const T *, const T *, const T *, int64_t,  \
                                 int64_t, int64_t, T *, T *, T *, int64_t, int64_t, int64_t,       \
                                 int64_t, int64_t, T, bool, int64_t, T, int64_t, int64_t);
PIPEMESH_INSTANTIATE(float)
PIPEMESH_INSTANTIATE(double)
#undef PIPEMESH_INSTANTIATE

} // namespace pipemesh::rt::cpu
