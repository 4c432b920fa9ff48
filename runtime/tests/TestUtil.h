//===- TestUtil.h - helpers of the CPU kernel tests -------------*- C++ -*-===//
//
// Random inputs, float/double conversion, closeness checks and the central
// finite-difference gradient check.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_TESTS_TESTUTIL_H
#define PIPEMESH_RUNTIME_TESTS_TESTUTIL_H

#include "pipemesh/runtime/CpuKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

namespace pipemesh::rt::cpu::test {

using Vec = std::vector<double>;
using VecF = std::vector<float>;

inline int64_t numel(const Dims &d) {
  int64_t n = 1;
  for (int64_t s : d)
    n *= s;
  return n;
}

/// Uniform in [lo, hi), reproducible per seed.
inline Vec randomVec(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double &x : v)
    x = dist(gen);
  return v;
}

inline VecF toFloat(const Vec &v) { return VecF(v.begin(), v.end()); }

inline double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

/// |got - want| <= rtol * |want| + atol, elementwise; reports the worst element.
template <typename G>
void expectClose(const std::vector<G> &got, const Vec &want, double rtol, double atol,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t worstAt = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]) - rtol * std::fabs(want[i]);
    if (!(err <= atol) && (worst == 0 || err > worst || std::isnan(err))) {
      worst = std::isnan(err) ? INFINITY : err;
      worstAt = i;
    }
  }
  if (std::getenv("PIPEMESH_TEST_VERBOSE")) {
    double ratio = 0;
    for (size_t i = 0; i < want.size(); ++i)
      ratio = std::max(ratio, std::fabs(double(got[i]) - want[i]) /
                                  (rtol * std::fabs(want[i]) + atol + 1e-300));
    std::printf("  %s: worst error %.3g of the tolerance\n", what.c_str(), ratio);
  }
  EXPECT_EQ(worst, 0) << what << ": element " << worstAt << " is " << double(got[worstAt])
                      << ", expected " << want[worstAt] << " (rtol " << rtol << ", atol " << atol
                      << ")";
}

/// Central differences of L(x) = <w, f(x)>: for every element i of x (or
/// `maxChecks` of them, spread evenly), the numeric derivative
/// <w, f(x + h e_i) - f(x - h e_i)> / 2h against analytic[i], with
/// |num - ana| <= rtol * max(|num|, |ana|) + atol. f reads x. Taking the
/// difference of the outputs before the dot product keeps the rounding noise
/// to the outputs that x_i moves.
inline void expectGradient(Vec &x, const Vec &analytic, const std::function<Vec()> &f,
                           const Vec &w, const std::string &what, double rtol = 1e-6,
                           double atol = 1e-9, int64_t maxChecks = -1, double h = 1e-6) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const int64_t n = int64_t(x.size());
  const int64_t step = maxChecks > 0 && n > maxChecks ? (n + maxChecks - 1) / maxChecks : 1;
  double worst = 0; // largest err / allowed
  for (int64_t i = 0; i < n; i += step) {
    const double xi = x[i];
    x[i] = xi + h;
    const Vec yp = f();
    x[i] = xi - h;
    const Vec ym = f();
    x[i] = xi;
    ASSERT_EQ(yp.size(), w.size()) << what;
    double num = 0;
    for (size_t j = 0; j < w.size(); ++j)
      if (yp[j] != ym[j])
        num += w[j] * (yp[j] - ym[j]);
    num /= 2 * h;
    const double ana = analytic[i];
    const double err = std::fabs(num - ana);
    const double allowed = rtol * std::max(std::fabs(num), std::fabs(ana)) + atol;
    worst = std::max(worst, err / allowed);
    ASSERT_LE(err, allowed) << what << ": d/dx[" << i << "] numeric " << num << " analytic "
                            << ana;
  }
  if (std::getenv("PIPEMESH_TEST_VERBOSE"))
    std::printf("  %s: worst error %.3g of the tolerance\n", what.c_str(), worst);
}

} // namespace pipemesh::rt::cpu::test

#endif // PIPEMESH_RUNTIME_TESTS_TESTUTIL_H
