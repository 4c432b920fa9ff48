//===- AttentionTest.cpp - flash attention against the full-matrix formula --===//
//
// The reference here builds the whole [Tq, Tk] probability matrix per slice:
//   S = cap(scale q k^T) + mask (-inf where causal or the window hides), P = softmax(S) (rows
//   with no visible key are 0), o = P v;
//   dP = dO v^T, dv = P^T dO, dS = P * (dP - rowsum(P * dP)),
//   dq = scale dS k, dk = scale dS^T q (dS times 1 - tanh^2 under a soft cap,
//   cap(s) = C tanh(s / C)).
// Sizes above 64 cross the kernel's query/key blocks. Grouped-query cases
// (gk, gv query slices per key, value slice) read k[bh / gk] and v[bh / gv],
// so the reference's dk and dv add up over each group.
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <omp.h>

#include <cstring>

namespace pipemesh::rt::cpu::test {
namespace {

enum class MaskKind { None, Full, KeyPadding, Shared };

struct AttnCase {
  int64_t BH, Tq, Tk, D, Dv;
  bool causal;
  MaskKind mask;
  int64_t window = 0; ///< sliding window (with causal): keys visible to a query
  double softcap = 0;  ///< scores capped to softcap * tanh(s / softcap) when > 0
  int64_t gk = 1, gv = 1; ///< query slices per key (value) slice
};

struct AttnData {
  AttnCase c;
  Vec q, k, v, mask;
  int64_t mBH = 0, mQ = 0, mK = 0;
  double scale;

  explicit AttnData(const AttnCase &cs, uint64_t seed) : c(cs) {
    q = randomVec(c.BH * c.Tq * c.D, seed, -1.5, 1.5);
    k = randomVec(c.BH / c.gk * c.Tk * c.D, seed + 1, -1.5, 1.5);
    v = randomVec(c.BH / c.gv * c.Tk * c.Dv, seed + 2);
    scale = 1.0 / std::sqrt(double(c.D));
    switch (c.mask) {
    case MaskKind::None:
      break;
    case MaskKind::Full: // [BH, Tq, Tk]
      mask = randomVec(c.BH * c.Tq * c.Tk, seed + 3);
      mBH = c.Tq * c.Tk, mQ = c.Tk, mK = 1;
      break;
    case MaskKind::KeyPadding: // [Tk] broadcast; the last key is padding
      mask = randomVec(c.Tk, seed + 3);
      mask[c.Tk - 1] = -INFINITY;
      mK = 1;
      break;
    case MaskKind::Shared: // [Tq, Tk] shared by every slice; some -inf
      mask = randomVec(c.Tq * c.Tk, seed + 3);
      for (size_t i = 0; i < mask.size(); i += 7)
        mask[i] = -INFINITY;
      mQ = c.Tk, mK = 1;
      break;
    }
  }
  const double *maskPtr() const { return mask.empty() ? nullptr : mask.data(); }
};

struct Reference {
  Vec o, dq, dk, dv;
};

Reference naiveAttention(const AttnData &a, const Vec *dO) {
  const AttnCase &c = a.c;
  Reference r;
  r.o.assign(c.BH * c.Tq * c.Dv, 0.0);
  r.dq.assign(c.BH * c.Tq * c.D, 0.0);
  r.dk.assign(c.BH / c.gk * c.Tk * c.D, 0.0);
  r.dv.assign(c.BH / c.gv * c.Tk * c.Dv, 0.0);
  const int64_t off = c.Tk - c.Tq;
  for (int64_t bh = 0; bh < c.BH; ++bh) {
    const int64_t kh = bh / c.gk, vh = bh / c.gv;
    Vec P(c.Tq * c.Tk, 0.0), dS(c.Tq * c.Tk, 0.0), tanhS(c.Tq * c.Tk, 0.0);
    for (int64_t i = 0; i < c.Tq; ++i) {
      Vec s(c.Tk);
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.Tk; ++j) {
        double d = 0;
        for (int64_t e = 0; e < c.D; ++e)
          d += a.q[(bh * c.Tq + i) * c.D + e] * a.k[(kh * c.Tk + j) * c.D + e];
        s[j] = a.scale * d;
        if (c.softcap > 0) {
          tanhS[i * c.Tk + j] = std::tanh(s[j] / c.softcap);
          s[j] = c.softcap * tanhS[i * c.Tk + j];
        }
        if (a.maskPtr())
          s[j] += a.mask[bh * a.mBH + i * a.mQ + j * a.mK];
        if (c.causal && j > i + off)
          s[j] = -INFINITY;
        if (c.causal && c.window > 0 && j <= i + off - c.window)
          s[j] = -INFINITY;
        mx = std::max(mx, s[j]);
      }
      if (mx == -INFINITY)
        continue;
      double sum = 0;
      for (int64_t j = 0; j < c.Tk; ++j)
        sum += std::exp(s[j] - mx);
      for (int64_t j = 0; j < c.Tk; ++j)
        P[i * c.Tk + j] = std::exp(s[j] - mx) / sum;
    }
    for (int64_t i = 0; i < c.Tq; ++i)
      for (int64_t j = 0; j < c.Tk; ++j)
        for (int64_t e = 0; e < c.Dv; ++e)
          r.o[(bh * c.Tq + i) * c.Dv + e] += P[i * c.Tk + j] * a.v[(vh * c.Tk + j) * c.Dv + e];
    if (!dO)
      continue;
    for (int64_t i = 0; i < c.Tq; ++i) {
      Vec dP(c.Tk);
      double rowD = 0;
      for (int64_t j = 0; j < c.Tk; ++j) {
        double d = 0;
        for (int64_t e = 0; e < c.Dv; ++e)
          d += (*dO)[(bh * c.Tq + i) * c.Dv + e] * a.v[(vh * c.Tk + j) * c.Dv + e];
        dP[j] = d;
        rowD += P[i * c.Tk + j] * d;
      }
      for (int64_t j = 0; j < c.Tk; ++j) {
        dS[i * c.Tk + j] = P[i * c.Tk + j] * (dP[j] - rowD);
        if (c.softcap > 0)
          dS[i * c.Tk + j] *= 1 - tanhS[i * c.Tk + j] * tanhS[i * c.Tk + j];
      }
    }
    for (int64_t i = 0; i < c.Tq; ++i)
      for (int64_t j = 0; j < c.Tk; ++j) {
        const double p = P[i * c.Tk + j], ds = dS[i * c.Tk + j];
        for (int64_t e = 0; e < c.Dv; ++e)
          r.dv[(vh * c.Tk + j) * c.Dv + e] += p * (*dO)[(bh * c.Tq + i) * c.Dv + e];
        for (int64_t e = 0; e < c.D; ++e) {
          r.dq[(bh * c.Tq + i) * c.D + e] += a.scale * ds * a.k[(kh * c.Tk + j) * c.D + e];
          r.dk[(kh * c.Tk + j) * c.D + e] += a.scale * ds * a.q[(bh * c.Tq + i) * c.D + e];
        }
      }
  }
  return r;
}

template <typename T> struct Kernel {
  const AttnData &a;
  std::vector<T> q, k, v, mask;
  explicit Kernel(const AttnData &d)
      : a(d), q(d.q.begin(), d.q.end()), k(d.k.begin(), d.k.end()), v(d.v.begin(), d.v.end()),
        mask(d.mask.begin(), d.mask.end()) {}
  const T *maskPtr() const { return mask.empty() ? nullptr : mask.data(); }
  std::vector<T> forward() const {
    const AttnCase &c = a.c;
    std::vector<T> o(c.BH * c.Tq * c.Dv, T(std::nan("")));
    attention<T>(q.data(), k.data(), v.data(), maskPtr(), a.mBH, a.mQ, a.mK, o.data(), c.BH, c.Tq,
                 c.Tk, c.D, c.Dv, T(a.scale), c.causal, c.window, T(c.softcap), c.gk, c.gv);
    return o;
  }
  void backward(const std::vector<T> &dO, std::vector<T> &dq, std::vector<T> &dk,
                std::vector<T> &dv) const {
    const AttnCase &c = a.c;
    dq.assign(q.size(), T(std::nan("")));
    dk.assign(k.size(), T(std::nan("")));
    dv.assign(v.size(), T(std::nan("")));
    attentionGrad<T>(dO.data(), q.data(), k.data(), v.data(), maskPtr(), a.mBH, a.mQ, a.mK,
                     dq.data(), dk.data(), dv.data(), c.BH, c.Tq, c.Tk, c.D, c.Dv, T(a.scale),
                     c.causal, c.window, T(c.softcap), c.gk, c.gv);
  }
};

const AttnCase kSmall[] = {
    {2, 3, 5, 4, 3, false, MaskKind::None}, {2, 3, 5, 4, 3, true, MaskKind::None},
    {2, 4, 4, 3, 2, true, MaskKind::Full},  {2, 3, 6, 4, 3, false, MaskKind::Full},
    {1, 5, 5, 2, 4, true, MaskKind::KeyPadding},
    {3, 4, 6, 3, 3, true, MaskKind::Shared},
    {1, 5, 3, 2, 2, true, MaskKind::None}, // Tq > Tk causal: first rows see nothing
    // Sliding windows: a band of 2; Tq < Tk (key 0 is seen by no query); Tq > Tk.
    {2, 6, 6, 3, 3, true, MaskKind::None, 2},
    {1, 4, 7, 3, 2, true, MaskKind::KeyPadding, 3},
    {1, 5, 3, 2, 2, true, MaskKind::Shared, 2},
    // Soft caps the scores reach (the inputs are up to 1.5, scale 1/sqrt(D)): plain,
    // with a full mask and not causal, with a window.
    {2, 4, 4, 3, 2, true, MaskKind::None, 0, 0.5},
    {2, 3, 6, 4, 3, false, MaskKind::Full, 0, 1.0},
    {1, 6, 6, 3, 3, true, MaskKind::KeyPadding, 3, 0.7},
    // Grouped-query attention: 2 query slices per k and v slice; multi-query
    // k (one slice for 4) with v in pairs; a group with a window, a cap and a
    // full mask (indexed by the query slice).
    {4, 3, 5, 4, 3, true, MaskKind::None, 0, 0, 2, 2},
    {4, 4, 4, 3, 2, false, MaskKind::Shared, 0, 0, 4, 2},
    {6, 6, 6, 3, 3, true, MaskKind::Full, 2, 0.6, 3, 3},
};

const AttnCase kLarge[] = {
    {2, 70, 130, 8, 5, true, MaskKind::None},
    {2, 70, 130, 8, 5, false, MaskKind::Full},
    {3, 129, 129, 16, 16, true, MaskKind::KeyPadding},
    {2, 100, 65, 8, 8, true, MaskKind::Shared}, // Tq > Tk
    {1, 64, 200, 96, 80, false, MaskKind::None}, // head dim > 64: smaller key blocks
    // Windows across query blocks: later blocks start past key 0; Tq < Tk with
    // the first 70 keys seen by no query; a window of one key.
    {2, 150, 150, 8, 8, true, MaskKind::None, 40},
    {2, 70, 200, 8, 5, true, MaskKind::Shared, 64},
    {1, 130, 130, 16, 16, true, MaskKind::Full, 1},
    {2, 100, 140, 8, 8, true, MaskKind::Shared, 50, 0.8}, // a cap and a window, across blocks
    {8, 70, 130, 8, 5, true, MaskKind::KeyPadding, 0, 0, 4, 4}, // grouped, across blocks
};

TEST(Attention, ForwardAndBackwardMatchFullMatrix) {
  uint64_t seed = 100;
  std::vector<AttnCase> cases(std::begin(kSmall), std::end(kSmall));
  cases.insert(cases.end(), std::begin(kLarge), std::end(kLarge));
  for (const AttnCase &c : cases) {
    const AttnData a(c, seed += 10);
    const Vec dO = randomVec(c.BH * c.Tq * c.Dv, seed + 5);
    const Reference ref = naiveAttention(a, &dO);
    Kernel<double> kd(a);
    const Vec o = kd.forward();
    Vec dq, dk, dv;
    kd.backward(dO, dq, dk, dv);
    const std::string what = "attention Tq=" + std::to_string(c.Tq) + " Tk=" + std::to_string(c.Tk) +
                             (c.causal ? " causal" : "") + " mask " + std::to_string(int(c.mask)) +
                             " window " + std::to_string(c.window) +
                             " softcap " + std::to_string(c.softcap) + " groups " +
                             std::to_string(c.gk) + "/" + std::to_string(c.gv);
    expectClose(o, ref.o, 1e-12, 1e-13, what + " o");
    expectClose(dq, ref.dq, 1e-11, 1e-13, what + " dq");
    expectClose(dk, ref.dk, 1e-11, 1e-13, what + " dk");
    expectClose(dv, ref.dv, 1e-11, 1e-13, what + " dv");
  }
}

TEST(Attention, RowsThatSeeNoKeyAreZero) {
  const AttnData a({1, 5, 3, 2, 2, true, MaskKind::None}, 7);
  Kernel<double> kd(a);
  const Vec o = kd.forward();
  // off = Tk - Tq = -2: queries 0 and 1 see no key.
  for (int64_t i = 0; i < 2 * 2; ++i)
    EXPECT_EQ(o[i], 0.0);
  Vec dq, dk, dv;
  kd.backward(randomVec(o.size(), 8), dq, dk, dv);
  for (int64_t i = 0; i < 2 * 2; ++i)
    EXPECT_EQ(dq[i], 0.0);
}

TEST(Attention, Gradients) {
  uint64_t seed = 300;
  std::vector<AttnCase> cases(std::begin(kSmall), std::end(kSmall));
  cases.push_back(kLarge[0]); // crosses blocks; checked on a subset of elements
  cases.push_back(kLarge[3]);
  for (const AttnCase &c : cases) {
    AttnData a(c, seed += 10);
    const Vec w = randomVec(c.BH * c.Tq * c.Dv, seed + 5);
    Kernel<double> base(a);
    Vec dq, dk, dv;
    base.backward(w, dq, dk, dv);
    const int64_t checks = c.Tq > 64 ? 40 : -1;
    // L(q, k, v) = <w, attention(q, k, v)>, perturbing one input at a time.
    auto loss = [&] {
      Kernel<double> kd(a);
      return kd.forward();
    };
    const std::string what = "attention grad Tq=" + std::to_string(c.Tq) +
                             " Tk=" + std::to_string(c.Tk) + (c.causal ? " causal" : "") +
                             " window " + std::to_string(c.window) +
                             " softcap " + std::to_string(c.softcap) + " groups " +
                             std::to_string(c.gk) + "/" + std::to_string(c.gv);
    expectGradient(a.q, dq, loss, w, what + " dq", 1e-6, 1e-9, checks);
    expectGradient(a.k, dk, loss, w, what + " dk", 1e-6, 1e-9, checks);
    expectGradient(a.v, dv, loss, w, what + " dv", 1e-6, 1e-9, checks);
  }
}

TEST(Attention, FloatMatchesDouble) {
  uint64_t seed = 500;
  for (const AttnCase &c : kLarge) {
    const AttnData a(c, seed += 10);
    const Vec dO = randomVec(c.BH * c.Tq * c.Dv, seed + 5);
    Kernel<double> kd(a);
    Kernel<float> kf(a);
    const Vec o = kd.forward();
    const VecF of = kf.forward();
    Vec dq, dk, dv;
    VecF dqf, dkf, dvf;
    kd.backward(dO, dq, dk, dv);
    kf.backward(toFloat(dO), dqf, dkf, dvf);
    // Scores of D products in float, exp, sums over up to 200 keys: 1e-5
    // relative to the result plus 1e-6 absolute (outputs are O(1)).
    expectClose(of, o, 1e-5, 1e-6, "attention float o");
    expectClose(dqf, dq, 1e-5, 1e-6, "attention float dq");
    expectClose(dkf, dk, 1e-5, 1e-6, "attention float dk");
    expectClose(dvf, dv, 1e-5, 1e-6, "attention float dv");
  }
}

TEST(Attention, SameBitsWithAnyThreadCount) {
  // Plain, and grouped (dk and dv summed over 4 and 2 query slices).
  for (const AttnCase &c : {AttnCase{4, 200, 200, 32, 32, true, MaskKind::KeyPadding},
                            AttnCase{4, 200, 200, 32, 32, true, MaskKind::KeyPadding, 0, 0, 4, 2}}) {
    const AttnData a(c, 900);
    const Kernel<float> kf(a);
    const VecF dO = toFloat(randomVec(4 * 200 * 32, 901));
    auto run = [&](int threads) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      std::vector<VecF> out(4);
      out[0] = kf.forward();
      kf.backward(dO, out[1], out[2], out[3]);
      omp_set_num_threads(saved);
      return out;
    };
    const auto one = run(1), many = run(3);
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(std::memcmp(one[i].data(), many[i].data(), one[i].size() * sizeof(float)), 0)
          << "output " << i << " groups " << c.gk << "/" << c.gv;
  }
}

} // namespace
} // namespace pipemesh::rt::cpu::test
