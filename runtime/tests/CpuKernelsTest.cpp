//===- CpuKernelsTest.cpp - unit tests of the CPU kernels -------------------===//
//
// For every kernel: (a) finite-difference gradient checks in double, (b)
// float against double, (c) semantics against values computed here from the
// definition. Attention lives in AttentionTest.cpp, BLAS setup in BlasTest.cpp.
//
// Tolerances: gradient checks use central differences with h = 1e-6 and
// |numeric - analytic| <= 1e-6 * max(|numeric|, |analytic|) + 1e-9. Float vs
// double: stated per kernel (relative to the double result, plus a small
// absolute term for values near 0).
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include "../lib/cpu/KernelUtil.h"

#include "pipemesh/runtime/Bf16.h"

#include <omp.h>

#include <cstring>

namespace pipemesh::rt::cpu::test {
namespace {

// --- helpers ---------------------------------------------------------------------

Dims unravel(int64_t i, const Dims &shape) {
  Dims idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

/// Linear index in `shape` of the element that out-index `idx` reads under numpy
/// broadcasting.
int64_t broadcastIndex(const Dims &idx, const Dims &shape) {
  const size_t off = idx.size() - shape.size();
  int64_t lin = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    lin = lin * shape[d] + (shape[d] == 1 ? 0 : idx[off + d]);
  return lin;
}

bool sameOrBothNaN(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

/// Runs `f` with `threads` OpenMP threads.
template <typename F> void withThreads(int threads, F f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  f();
  omp_set_num_threads(saved);
}

template <typename T> bool bitEqual(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// --- elementwise -------------------------------------------------------------------

double naiveBinary(Binary op, double a, double b) {
  switch (op) {
  case Binary::Add: return a + b;
  case Binary::Sub: return a - b;
  case Binary::Mul: return a * b;
  case Binary::Div: return a / b;
  case Binary::Pow: return std::pow(a, b);
  case Binary::Max: return std::max(a, b);
  case Binary::Equal: return a == b;
  case Binary::Less: return a < b;
  case Binary::And: return a != 0 && b != 0;
  }
  return 0;
}

const Binary kAllBinary[] = {Binary::Add, Binary::Sub,   Binary::Mul,  Binary::Div, Binary::Pow,
                             Binary::Max, Binary::Equal, Binary::Less, Binary::And};

/// Values on a coarse grid so that Equal and Less see ties; a > 0 for Pow.
Vec gridVec(int64_t n, uint64_t seed, double lo, int steps) {
  std::mt19937_64 gen(seed);
  Vec v(n);
  for (double &x : v)
    x = lo + 0.5 * double(gen() % steps);
  return v;
}

struct BroadcastCase {
  Dims a, b, out;
};
const BroadcastCase kBroadcastCases[] = {
    {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}}, // same shape
    {{2, 3, 1}, {4}, {2, 3, 4}},       // both broadcast
    {{1, 3, 1}, {2, 1, 5}, {2, 3, 5}}, // interleaved
    {{}, {5, 2}, {5, 2}},              // scalar lhs
    {{6, 7}, {1}, {6, 7}},             // scalar-like rhs
    {{4, 1}, {1, 40000}, {4, 40000}},  // large: parallel runs
};

TEST(Elementwise, BinaryMatchesNumpyBroadcasting) {
  for (const BroadcastCase &c : kBroadcastCases) {
    const Vec a = gridVec(numel(c.a), 1, 0.5, 4), b = gridVec(numel(c.b), 2, -1.0, 5);
    const VecF af = toFloat(a), bf = toFloat(b);
    for (Binary op : kAllBinary) {
      Vec out(numel(c.out));
      VecF outF(out.size());
      binary<double>(op, a.data(), c.a, b.data(), c.b, out.data(), c.out);
      binary<float>(op, af.data(), c.a, bf.data(), c.b, outF.data(), c.out);
      for (int64_t i = 0; i < numel(c.out); ++i) {
        const Dims idx = unravel(i, c.out);
        const double want = naiveBinary(op, a[broadcastIndex(idx, c.a)], b[broadcastIndex(idx, c.b)]);
        ASSERT_TRUE(sameOrBothNaN(out[i], want)) << "op " << int(op) << " at " << i;
        // float: exact for these grid values, except pow (powf rounding).
        ASSERT_TRUE(sameOrBothNaN(outF[i], want) ||
                    std::fabs(outF[i] - want) <= 1e-6 * std::fabs(want))
            << "float op " << int(op) << ": " << outF[i] << " vs " << want;
      }
    }
  }
}

TEST(Elementwise, BinaryIntegerTypes) {
  const std::vector<int64_t> a{1, 5, -3, 0}, b{2};
  std::vector<int64_t> out(4);
  binary<int64_t>(Binary::Add, a.data(), {4}, b.data(), {1}, out.data(), {4});
  EXPECT_EQ(out, (std::vector<int64_t>{3, 7, -1, 2}));
  binary<int64_t>(Binary::Equal, a.data(), {4}, a.data(), {4}, out.data(), {4});
  EXPECT_EQ(out, (std::vector<int64_t>{1, 1, 1, 1}));
  const std::vector<uint8_t> p{1, 0, 1, 0}, q{1, 1, 0, 0};
  std::vector<uint8_t> r(4);
  binary<uint8_t>(Binary::And, p.data(), {4}, q.data(), {4}, r.data(), {4});
  EXPECT_EQ(r, (std::vector<uint8_t>{1, 0, 0, 0}));
  unary<uint8_t>(Unary::Not, p.data(), r.data(), 4);
  EXPECT_EQ(r, (std::vector<uint8_t>{0, 1, 0, 1}));
}

TEST(Elementwise, UnaryMatchesLibm) {
  const Vec x = randomVec(50000, 3, 0.1, 3.0); // positive: sqrt and log defined
  const VecF xf = toFloat(x);
  struct Case {
    Unary op;
    double (*f)(double);
  };
  const Case cases[] = {{Unary::Neg, [](double v) { return -v; }},
                        {Unary::Sqrt, [](double v) { return std::sqrt(v); }},
                        {Unary::Tanh, [](double v) { return std::tanh(v); }},
                        {Unary::Erf, [](double v) { return std::erf(v); }},
                        {Unary::Exp, [](double v) { return std::exp(v); }},
                        {Unary::Log, [](double v) { return std::log(v); }},
                        {Unary::Not, [](double v) { return double(v == 0); }}};
  for (const Case &c : cases) {
    Vec y(x.size()), want(x.size());
    VecF yf(x.size());
    unary<double>(c.op, x.data(), y.data(), int64_t(x.size()));
    unary<float>(c.op, xf.data(), yf.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i)
      want[i] = c.f(x[i]);
    expectClose(y, want, 0, 0, "unary double");
    // Float: the input is rounded to float first (relative 6e-8, times the
    // function's condition number, at most ~3 here for exp on [0.1, 3)).
    expectClose(yf, want, 5e-7, 1e-7, "unary float");
  }
}

TEST(Elementwise, SigmoidIsFiniteAndAccurateEverywhere) {
  // Both signs, and far past where exp(-x) overflows float (x < -88): the
  // kernel never exponentiates a positive argument.
  Vec x = randomVec(20000, 5, -30.0, 30.0);
  for (double v : {-1000.0, -100.0, -88.8, 0.0, 88.8, 100.0, 1000.0})
    x.push_back(v);
  const VecF xf = toFloat(x);
  Vec y(x.size()), want(x.size());
  VecF yf(x.size());
  unary<double>(Unary::Sigmoid, x.data(), y.data(), int64_t(x.size()));
  unary<float>(Unary::Sigmoid, xf.data(), yf.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    want[i] = double(1.0L / (1.0L + std::exp(-(long double)x[i]))); // as written, in long double
  expectClose(y, want, 1e-14, 1e-300, "sigmoid double");
  // Float: the input rounded (relative 6e-8 times |x| (1 - sigmoid(x)), at most ~2 here).
  expectClose(yf, want, 2e-6, 1e-30, "sigmoid float");
}

TEST(Elementwise, WhereBroadcasts) {
  const std::vector<uint8_t> cond{1, 0, 1}; // [3, 1]
  const Vec x{10, 20, 30, 40};              // [4]
  const Vec y{-1};                          // scalar
  Vec out(12);
  where<double>(cond.data(), {3, 1}, x.data(), {4}, y.data(), {}, out.data(), {3, 4});
  EXPECT_EQ(out, (Vec{10, 20, 30, 40, -1, -1, -1, -1, 10, 20, 30, 40}));
}

TEST(Elementwise, CastAndAxpy) {
  const VecF x{0.0f, 0.5f, -2.0f, 3.75f};
  std::vector<uint8_t> b(4);
  castBuffer<float, uint8_t>(x.data(), b.data(), 4);
  EXPECT_EQ(b, (std::vector<uint8_t>{0, 1, 1, 1}));
  std::vector<int64_t> n(4);
  castBuffer<float, int64_t>(x.data(), n.data(), 4);
  EXPECT_EQ(n, (std::vector<int64_t>{0, 0, -2, 3}));
  VecF back(4);
  castBuffer<uint8_t, float>(b.data(), back.data(), 4);
  EXPECT_EQ(back, (VecF{0, 1, 1, 1}));
  Vec y{1, 1, 1, 1};
  const Vec d{1, 2, 3, 4};
  axpy<double>(0.5, d.data(), y.data(), 4);
  EXPECT_EQ(y, (Vec{1.5, 2, 2.5, 3}));
}

// --- data movement ----------------------------------------------------------------

Dims permuted(const Dims &shape, const Dims &perm) {
  Dims out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    out[i] = shape[perm[i]];
  return out;
}

Dims inversePerm(const Dims &perm) {
  Dims inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = int64_t(i);
  return inv;
}

struct TransposeCase {
  Dims shape, perm;
};
const TransposeCase kTransposeCases[] = {
    {{2, 3, 4, 5}, {0, 2, 1, 3}}, // [B,T,H,D] -> [B,H,T,D]
    {{2, 3, 4, 5}, {0, 1, 3, 2}}, // last two
    {{3, 4, 5}, {2, 0, 1}},
    {{70, 45}, {1, 0}},            // tiled path with partial tiles
    {{2, 33, 40}, {0, 2, 1}},      // batched tiled path
    {{3, 1, 4}, {1, 2, 0}},        // size-1 dim
    {{300, 257}, {1, 0}},          // large: parallel tiles
};

TEST(Movement, TransposeMatchesDefinition) {
  for (const TransposeCase &c : kTransposeCases) {
    const Vec x = randomVec(numel(c.shape), 4);
    const Dims yShape = permuted(c.shape, c.perm);
    Vec y(x.size());
    transpose<double>(x.data(), c.shape, c.perm, y.data());
    std::vector<int64_t> xi(x.size()), yi(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      xi[i] = int64_t(i);
    transpose<int64_t>(xi.data(), c.shape, c.perm, yi.data());
    for (int64_t i = 0; i < numel(yShape); ++i) {
      const Dims idx = unravel(i, yShape);
      Dims xIdx(idx.size());
      for (size_t d = 0; d < idx.size(); ++d)
        xIdx[c.perm[d]] = idx[d];
      int64_t lin = 0;
      for (size_t d = 0; d < xIdx.size(); ++d)
        lin = lin * c.shape[d] + xIdx[d];
      ASSERT_EQ(y[i], x[lin]);
      ASSERT_EQ(yi[i], lin);
    }
  }
}

TEST(Movement, TransposeGradientIsInverseTranspose) {
  for (const TransposeCase &c : kTransposeCases) {
    if (numel(c.shape) > 5000)
      continue;
    Vec x = randomVec(numel(c.shape), 5);
    const Vec w = randomVec(x.size(), 6);
    Vec y(x.size()), grad(x.size());
    transpose<double>(w.data(), permuted(c.shape, c.perm), inversePerm(c.perm), grad.data());
    expectGradient(x, grad, [&] {
      transpose<double>(x.data(), c.shape, c.perm, y.data());
      return y;
    }, w, "transpose");
  }
}

struct SliceCase {
  Dims xShape, starts, strides, yShape;
};
const SliceCase kSliceCases[] = {
    {{5, 6}, {1, 2}, {1, 1}, {3, 4}},
    {{5, 6, 7}, {0, 1, 0}, {2, 2, 3}, {3, 3, 3}},
    {{4, 10}, {0, 3}, {1, 2}, {4, 3}},
    {{2, 3, 8, 4}, {0, 0, 2, 0}, {1, 1, 1, 1}, {2, 3, 5, 4}},
    {{300, 200}, {10, 0}, {1, 1}, {250, 200}}, // large: parallel
};

TEST(Movement, SliceMatchesDefinition) {
  for (const SliceCase &c : kSliceCases) {
    const Vec x = randomVec(numel(c.xShape), 7);
    Vec y(numel(c.yShape));
    slice<double>(x.data(), c.xShape, c.starts, c.strides, y.data(), c.yShape);
    for (int64_t i = 0; i < numel(c.yShape); ++i) {
      const Dims idx = unravel(i, c.yShape);
      int64_t lin = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        lin = lin * c.xShape[d] + c.starts[d] + idx[d] * c.strides[d];
      ASSERT_EQ(y[i], x[lin]);
    }
  }
}

TEST(Movement, SliceGradGradients) {
  for (const SliceCase &c : kSliceCases) {
    if (numel(c.xShape) > 5000)
      continue;
    // d<w, slice(x)>/dx = sliceGrad(w)
    Vec x = randomVec(numel(c.xShape), 8);
    const Vec wy = randomVec(numel(c.yShape), 9);
    Vec y(wy.size()), gx(x.size());
    sliceGrad<double>(wy.data(), c.yShape, c.starts, c.strides, gx.data(), c.xShape);
    expectGradient(x, gx, [&] {
      slice<double>(x.data(), c.xShape, c.starts, c.strides, y.data(), c.yShape);
      return y;
    }, wy, "slice");
    // d<w, sliceGrad(dy)>/d(dy) = slice(w): sliceGrad is linear, check it too.
    Vec dy = randomVec(numel(c.yShape), 10);
    const Vec wx = randomVec(numel(c.xShape), 11);
    Vec dx(wx.size()), gdy(dy.size());
    slice<double>(wx.data(), c.xShape, c.starts, c.strides, gdy.data(), c.yShape);
    expectGradient(dy, gdy, [&] {
      sliceGrad<double>(dy.data(), c.yShape, c.starts, c.strides, dx.data(), c.xShape);
      return dx;
    }, wx, "sliceGrad");
  }
}

TEST(Movement, SliceGradZeroesTheRest) {
  const Vec dy{1, 2, 3};
  Vec dx(7, 99.0);
  sliceGrad<double>(dy.data(), {3}, {1}, {2}, dx.data(), {7});
  EXPECT_EQ(dx, (Vec{0, 1, 0, 2, 0, 3, 0}));
}

TEST(Movement, ConcatAndSplit) {
  const Dims s0{2, 1, 3}, s1{2, 4, 3}, s2{2, 2, 3};
  const Vec x0 = randomVec(numel(s0), 12), x1 = randomVec(numel(s1), 13),
            x2 = randomVec(numel(s2), 14);
  Vec y(x0.size() + x1.size() + x2.size());
  concat<double>({x0.data(), x1.data(), x2.data()}, {s0, s1, s2}, 1, y.data());
  const Dims yShape{2, 7, 3};
  for (int64_t i = 0; i < numel(yShape); ++i) {
    const Dims idx = unravel(i, yShape);
    double want;
    if (idx[1] < 1)
      want = x0[(idx[0] * 1 + idx[1]) * 3 + idx[2]];
    else if (idx[1] < 5)
      want = x1[(idx[0] * 4 + idx[1] - 1) * 3 + idx[2]];
    else
      want = x2[(idx[0] * 2 + idx[1] - 5) * 3 + idx[2]];
    ASSERT_EQ(y[i], want);
  }
  Vec z0(x0.size()), z1(x1.size()), z2(x2.size());
  split<double>(y.data(), yShape, 1, {1, 4, 2}, {z0.data(), z1.data(), z2.data()});
  EXPECT_EQ(z0, x0);
  EXPECT_EQ(z1, x1);
  EXPECT_EQ(z2, x2);
  // Negative axis, axis 0 and the last axis.
  Vec w(x1.size() * 2);
  concat<double>({x1.data(), x1.data()}, {s1, s1}, -1, w.data());
  EXPECT_EQ(w[5], x1[2]);
  EXPECT_EQ(w[3], x1[0]);
  concat<double>({x1.data(), x1.data()}, {s1, s1}, 0, w.data());
  EXPECT_TRUE(std::equal(x1.begin(), x1.end(), w.begin() + x1.size()));
}

TEST(Movement, BroadcastToMatchesDefinition) {
  for (const BroadcastCase &c : kBroadcastCases) {
    const Vec x = randomVec(numel(c.a), 15);
    Vec y(numel(c.out));
    broadcastTo<double>(x.data(), c.a, y.data(), c.out);
    for (int64_t i = 0; i < numel(c.out); ++i)
      ASSERT_EQ(y[i], x[broadcastIndex(unravel(i, c.out), c.a)]);
  }
}

struct ReduceCase {
  Dims shape, axes;
};
const ReduceCase kReduceCases[] = {
    {{3, 4, 5}, {0}},       {{3, 4, 5}, {1}},      {{3, 4, 5}, {2}},
    {{3, 4, 5}, {0, 2}},    {{3, 4, 5}, {0, 1}},   {{3, 4, 5}, {1, 2}},
    {{3, 4, 5}, {0, 1, 2}}, {{3, 1, 5}, {1}},      {{2, 3, 4, 5}, {1, 3}},
    {{3, 300}, {0}},        {{600, 300}, {0}},     {{600, 300}, {1}}, // large: parallel
    {{4, 5}, {}},
};

Dims keptShape(const Dims &shape, const Dims &axes) {
  Dims kept = shape;
  for (int64_t a : axes)
    kept[a] = 1;
  return kept;
}

TEST(Movement, ReduceMatchesDefinition) {
  for (const ReduceCase &c : kReduceCases) {
    const Vec x = randomVec(numel(c.shape), 16);
    const Dims kept = keptShape(c.shape, c.axes);
    for (bool mean : {false, true}) {
      Vec y(numel(kept)), want(numel(kept), 0.0);
      reduce<double>(x.data(), c.shape, c.axes, mean, y.data());
      for (int64_t i = 0; i < numel(c.shape); ++i)
        want[broadcastIndex(unravel(i, c.shape), kept)] += x[i];
      if (mean)
        for (double &v : want)
          v /= double(numel(c.shape) / numel(kept));
      expectClose(y, want, 1e-13, 1e-13, "reduce");
      VecF xf = toFloat(x), yf(y.size());
      reduce<float>(xf.data(), c.shape, c.axes, mean, yf.data());
      // float: inputs rounded to float, summed in double: 1e-6 of the sum of |x|.
      expectClose(yf, want, 1e-6, 1e-6 * double(numel(c.shape) / numel(kept)), "reduce float");
    }
  }
  const std::vector<int64_t> xi{1, 2, 3, 4, 5, 6};
  std::vector<int64_t> yi(2);
  reduce<int64_t>(xi.data(), {2, 3}, {1}, false, yi.data());
  EXPECT_EQ(yi, (std::vector<int64_t>{6, 15}));
}

TEST(Movement, ReduceAndBroadcastAreAdjoint) {
  for (const ReduceCase &c : kReduceCases) {
    if (numel(c.shape) > 5000)
      continue;
    const Dims kept = keptShape(c.shape, c.axes);
    const double count = double(numel(c.shape) / numel(kept));
    for (bool mean : {false, true}) {
      // d<w, reduce(x)>/dx = broadcastTo(w) (/ count for mean).
      Vec x = randomVec(numel(c.shape), 17);
      const Vec w = randomVec(numel(kept), 18);
      Vec y(w.size()), gx(x.size());
      broadcastTo<double>(w.data(), kept, gx.data(), c.shape);
      if (mean)
        for (double &v : gx)
          v /= count;
      expectGradient(x, gx, [&] {
        reduce<double>(x.data(), c.shape, c.axes, mean, y.data());
        return y;
      }, w, "reduce");
    }
    // d<w, broadcastTo(z)>/dz = reduce(w) (sum).
    Vec z = randomVec(numel(kept), 19);
    const Vec w = randomVec(numel(c.shape), 20);
    Vec b(w.size()), gz(z.size());
    reduce<double>(w.data(), c.shape, c.axes, false, gz.data());
    expectGradient(z, gz, [&] {
      broadcastTo<double>(z.data(), kept, b.data(), c.shape);
      return b;
    }, w, "broadcastTo");
  }
}

// --- matmul --------------------------------------------------------------------------

struct MatMulCase {
  int64_t batch, M, N, K;
  bool shareA, shareB; // stride 0: one matrix for every batch
  bool bias;
};

Vec naiveMatmul(const Vec &A, const Vec &B, const double *bias, int64_t batch, int64_t M,
                int64_t N, int64_t K, bool tA, bool tB, int64_t sA, int64_t sB) {
  Vec C(batch * M * N);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = bias ? bias[j] : 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double a = tA ? A[b * sA + k * M + i] : A[b * sA + i * K + k];
          const double bb = tB ? B[b * sB + j * K + k] : B[b * sB + k * N + j];
          s += a * bb;
        }
        C[(b * M + i) * N + j] = s;
      }
  return C;
}

const MatMulCase kMatMulCases[] = {
    {1, 4, 5, 3, false, false, false}, {3, 4, 5, 3, false, false, true},
    {3, 4, 5, 3, false, true, true},   {3, 4, 5, 3, true, false, false},
    {2, 1, 7, 6, false, false, true},  {4, 3, 1, 2, false, true, false},
};

// Every batching path (folded, OpenMP over batches, one after the other) and
// transpose, writing C and (accumulate mode) adding into it.
TEST(MatMul, MatchesNaiveAllTransposes) {
  const MatMulCase big[] = {
      {64, 16, 16, 16, false, false, true},  // many small GEMMs: OpenMP over batches
      {8, 40, 50, 30, false, true, true},    // shared weight: batch folded into M
      {3, 100, 90, 80, false, false, false}, // large GEMMs, one after the other
  };
  std::vector<MatMulCase> cases(std::begin(kMatMulCases), std::end(kMatMulCases));
  cases.insert(cases.end(), std::begin(big), std::end(big));
  for (const MatMulCase &c : cases)
    for (bool tA : {false, true})
      for (bool tB : {false, true}) {
        const int64_t sA = c.shareA ? 0 : c.M * c.K, sB = c.shareB ? 0 : c.K * c.N;
        const Vec A = randomVec((c.shareA ? 1 : c.batch) * c.M * c.K, 21);
        const Vec B = randomVec((c.shareB ? 1 : c.batch) * c.K * c.N, 22);
        const Vec bias = randomVec(c.N, 23);
        const double *bp = c.bias ? bias.data() : nullptr;
        Vec C(c.batch * c.M * c.N, std::nan(""));
        matmul<double>(A.data(), B.data(), bp, C.data(), c.batch, c.M, c.N, c.K, tA, tB, sA, sB);
        const Vec want = naiveMatmul(A, B, bp, c.batch, c.M, c.N, c.K, tA, tB, sA, sB);
        expectClose(C, want, 1e-12, 1e-12, "matmul double");
        const VecF Af = toFloat(A), Bf = toFloat(B), biasF = toFloat(bias);
        VecF Cf(C.size(), std::nanf(""));
        matmul<float>(Af.data(), Bf.data(), c.bias ? biasF.data() : nullptr, Cf.data(), c.batch,
                      c.M, c.N, c.K, tA, tB, sA, sB);
        // float: K products of |a|,|b| <= 1: 2e-7 * K absolute.
        expectClose(Cf, want, 1e-6, 2e-7 * double(c.K + 1), "matmul float");

        // Accumulate mode (a weight gradient added into its accumulation by
        // the GEMM, alpha = scale, beta = 1; no bias): C0 + alpha op(A) op(B).
        const double alpha = 0.125;
        const Vec C0 = randomVec(C.size(), 24);
        Vec accWant = naiveMatmul(A, B, nullptr, c.batch, c.M, c.N, c.K, tA, tB, sA, sB);
        for (size_t i = 0; i < accWant.size(); ++i)
          accWant[i] = C0[i] + alpha * accWant[i];
        Vec acc = C0;
        matmul<double>(A.data(), B.data(), nullptr, acc.data(), c.batch, c.M, c.N, c.K, tA, tB,
                       sA, sB, alpha, /*accumulate=*/true);
        expectClose(acc, accWant, 1e-12, 1e-12, "accumulating matmul double");
        VecF accF = toFloat(C0);
        matmul<float>(Af.data(), Bf.data(), nullptr, accF.data(), c.batch, c.M, c.N, c.K, tA, tB,
                      sA, sB, (float)alpha, true);
        expectClose(accF, accWant, 1e-6, 2e-7 * double(c.K + 2), "accumulating matmul float");
      }
}

TEST(MatMul, GradientsAllTransposes) {
  for (const MatMulCase &c : kMatMulCases)
    for (bool tA : {false, true})
      for (bool tB : {false, true}) {
        const int64_t sA = c.shareA ? 0 : c.M * c.K, sB = c.shareB ? 0 : c.K * c.N;
        Vec A = randomVec((c.shareA ? 1 : c.batch) * c.M * c.K, 24);
        Vec B = randomVec((c.shareB ? 1 : c.batch) * c.K * c.N, 25);
        Vec bias = randomVec(c.N, 26);
        const Vec W = randomVec(c.batch * c.M * c.N, 27);
        Vec C(W.size());
        auto loss = [&] {
          matmul<double>(A.data(), B.data(), c.bias ? bias.data() : nullptr, C.data(), c.batch,
                         c.M, c.N, c.K, tA, tB, sA, sB);
          return C;
        };
        // Analytic gradients with the kernel itself, one batch at a time
        // (accumulated where a matrix is shared), as the compiler's backward does.
        Vec dA(A.size(), 0.0), dB(B.size(), 0.0), db(c.N, 0.0), tmpA(c.M * c.K),
            tmpB(c.K * c.N);
        for (int64_t b = 0; b < c.batch; ++b) {
          const double *Wb = W.data() + b * c.M * c.N;
          const double *Ab = A.data() + b * sA, *Bb = B.data() + b * sB;
          if (!tA) // dA = W op(B)^T  [M, K]
            matmul<double>(Wb, Bb, nullptr, tmpA.data(), 1, c.M, c.K, c.N, false, !tB, 0, 0);
          else // dA^T = op(B) W^T  [K, M]
            matmul<double>(Bb, Wb, nullptr, tmpA.data(), 1, c.K, c.M, c.N, tB, true, 0, 0);
          if (!tB) // dB = op(A)^T W  [K, N]
            matmul<double>(Ab, Wb, nullptr, tmpB.data(), 1, c.K, c.N, c.M, !tA, false, 0, 0);
          else // dB^T = W^T op(A)  [N, K]
            matmul<double>(Wb, Ab, nullptr, tmpB.data(), 1, c.N, c.K, c.M, true, tA, 0, 0);
          for (int64_t i = 0; i < c.M * c.K; ++i)
            dA[b * sA + i] += tmpA[i];
          for (int64_t i = 0; i < c.K * c.N; ++i)
            dB[b * sB + i] += tmpB[i];
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < c.N; ++j)
              db[j] += Wb[i * c.N + j];
        }
        expectGradient(A, dA, loss, W, "matmul dA");
        expectGradient(B, dB, loss, W, "matmul dB");
        if (c.bias)
          expectGradient(bias, db, loss, W, "matmul dbias");
      }
}

TEST(MatMul, EmptyInnerDimensionGivesBias) {
  const Vec bias{1, 2, 3};
  Vec C(6, std::nan(""));
  matmul<double>(nullptr, nullptr, bias.data(), C.data(), 1, 2, 3, 0, false, false, 0, 0);
  EXPECT_EQ(C, (Vec{1, 2, 3, 1, 2, 3}));
  matmul<double>(nullptr, nullptr, nullptr, C.data(), 1, 2, 3, 0, false, false, 0, 0);
  EXPECT_EQ(C, Vec(6, 0.0));
  // Accumulating, an empty contraction adds nothing.
  Vec acc{1, 2, 3, 4, 5, 6};
  matmul<double>(nullptr, nullptr, nullptr, acc.data(), 1, 2, 3, 0, false, false, 0, 0, 2.0, true);
  EXPECT_EQ(acc, (Vec{1, 2, 3, 4, 5, 6}));
}

// --- layer norm ----------------------------------------------------------------------

TEST(LayerNorm, MatchesDefinition) {
  const int64_t rows = 5, cols = 16;
  const Vec x = randomVec(rows * cols, 28, -2, 3), g = randomVec(cols, 29),
            b = randomVec(cols, 30);
  Vec y(x.size()), yNoBias(x.size());
  layerNorm<double>(x.data(), g.data(), b.data(), y.data(), rows, cols, 1e-5);
  layerNorm<double>(x.data(), g.data(), nullptr, yNoBias.data(), rows, cols, 1e-5);
  Vec want(x.size()), wantNoBias(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j)
      mean += x[r * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j)
      var += (x[r * cols + j] - mean) * (x[r * cols + j] - mean) / cols;
    for (int64_t j = 0; j < cols; ++j) {
      const double xhat = (x[r * cols + j] - mean) / std::sqrt(var + 1e-5);
      want[r * cols + j] = xhat * g[j] + b[j];
      wantNoBias[r * cols + j] = xhat * g[j];
    }
  }
  expectClose(y, want, 1e-13, 1e-13, "layerNorm");
  expectClose(yNoBias, wantNoBias, 1e-13, 1e-13, "layerNorm without bias");
}

TEST(LayerNorm, Gradients) {
  const int64_t rows = 6, cols = 7;
  Vec x = randomVec(rows * cols, 31, -2, 2), g = randomVec(cols, 32), b = randomVec(cols, 33);
  const Vec w = randomVec(rows * cols, 34);
  Vec y(x.size()), dx(x.size()), dg(cols), db(cols);
  const double eps = 1e-5;
  layerNormGrad<double>(w.data(), x.data(), g.data(), dx.data(), dg.data(), db.data(), rows, cols,
                        eps);
  auto loss = [&] {
    layerNorm<double>(x.data(), g.data(), b.data(), y.data(), rows, cols, eps);
    return y;
  };
  expectGradient(x, dx, loss, w, "layerNorm dx");
  expectGradient(g, dg, loss, w, "layerNorm dg");
  expectGradient(b, db, loss, w, "layerNorm db");
  // db may be null; dg is overwritten, not accumulated.
  Vec dg2(cols, 123.0), dx2(x.size());
  layerNormGrad<double>(w.data(), x.data(), g.data(), dx2.data(), dg2.data(), nullptr, rows, cols,
                        eps);
  EXPECT_EQ(dg2, dg);
  EXPECT_EQ(dx2, dx);
}

TEST(LayerNorm, FloatMatchesDouble) {
  const int64_t rows = 300, cols = 768; // parallel, several row chunks
  const Vec x = randomVec(rows * cols, 35, -3, 3), g = randomVec(cols, 36),
            b = randomVec(cols, 37), w = randomVec(rows * cols, 38);
  Vec y(x.size()), dx(x.size()), dg(cols), db(cols);
  layerNorm<double>(x.data(), g.data(), b.data(), y.data(), rows, cols, 1e-5);
  layerNormGrad<double>(w.data(), x.data(), g.data(), dx.data(), dg.data(), db.data(), rows, cols,
                        1e-5);
  const VecF xf = toFloat(x), gf = toFloat(g), bf = toFloat(b), wf = toFloat(w);
  VecF yf(x.size()), dxf(x.size()), dgf(cols), dbf(cols);
  layerNorm<float>(xf.data(), gf.data(), bf.data(), yf.data(), rows, cols, 1e-5f);
  layerNormGrad<float>(wf.data(), xf.data(), gf.data(), dxf.data(), dgf.data(), dbf.data(), rows,
                       cols, 1e-5f);
  expectClose(yf, y, 1e-5, 1e-6, "layerNorm float y");
  expectClose(dxf, dx, 1e-5, 1e-5, "layerNorm float dx");
  expectClose(dgf, dg, 1e-5, 1e-4, "layerNorm float dg"); // sums of 300 terms
  expectClose(dbf, db, 1e-5, 1e-4, "layerNorm float db");
}

// --- gelu -------------------------------------------------------------------------------

double geluRef(double x, bool tanhApprox) {
  if (tanhApprox)
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

TEST(Gelu, MatchesDefinition) {
  const Vec x = randomVec(1000, 39, -6, 6);
  for (bool tanhApprox : {false, true}) {
    Vec y(x.size()), want(x.size());
    gelu<double>(x.data(), y.data(), int64_t(x.size()), tanhApprox);
    for (size_t i = 0; i < x.size(); ++i)
      want[i] = geluRef(x[i], tanhApprox);
    expectClose(y, want, 1e-14, 1e-15, "gelu");
  }
  double y1;
  const double one = 1.0;
  gelu<double>(&one, &y1, 1, false);
  EXPECT_NEAR(y1, 0.8413447460685429, 1e-15);
}

TEST(Gelu, Gradients) {
  for (bool tanhApprox : {false, true}) {
    Vec x = randomVec(200, 40, -5, 5);
    const Vec w = randomVec(x.size(), 41);
    Vec y(x.size()), dx(x.size());
    const int64_t n = int64_t(x.size());
    geluGrad<double>(w.data(), x.data(), dx.data(), n, tanhApprox);
    expectGradient(x, dx, [&] {
      gelu<double>(x.data(), y.data(), n, tanhApprox);
      return y;
    }, w, tanhApprox ? "gelu tanh" : "gelu erf");
  }
}

TEST(Gelu, FloatMatchesDouble) {
  // Includes the far tails (|x| up to 12) and the parallel path.
  const Vec x = randomVec(100000, 42, -12, 12), w = randomVec(x.size(), 43);
  const VecF xf = toFloat(x), wf = toFloat(w);
  const int64_t n = int64_t(x.size());
  for (bool tanhApprox : {false, true}) {
    Vec y(n), dx(n);
    VecF yf(n), dxf(n);
    gelu<double>(x.data(), y.data(), n, tanhApprox);
    geluGrad<double>(w.data(), x.data(), dx.data(), n, tanhApprox);
    gelu<float>(xf.data(), yf.data(), n, tanhApprox);
    geluGrad<float>(wf.data(), xf.data(), dxf.data(), n, tanhApprox);
    // The input itself is rounded to float (relative 6e-8); gelu's slope is
    // at most ~1.13, so the float results carry ~1e-7 relative error plus a
    // tiny absolute error in the tails where gelu -> 0.
    expectClose(yf, y, 1e-6, 1e-7, "gelu float");
    expectClose(dxf, dx, 1e-6, 1e-6, "gelu grad float");
  }
}

// --- fastExp (the float kernels' exp) ---------------------------------------------------

TEST(FastExp, MatchesExpAndKeepsNonFiniteValues) {
  using detail::fastExp;
  // Within 2 ulp of exp on its range (a few ulp of float, relative).
  for (float x = -87.0f; x <= 88.0f; x += 0.01171875f) {
    double want = std::exp((double)x);
    EXPECT_NEAR(fastExp(x) / want, 1.0, 3e-7) << "x = " << x;
  }
  EXPECT_EQ(fastExp(-87.5f), 0.0f);
  EXPECT_EQ(fastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(fastExp(88.5f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fastExp(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  // NaN stays NaN, without converting it to an integer on the way (undefined:
  // scripts/sanitize.sh's UBSan aborts on it).
  EXPECT_TRUE(std::isnan(fastExp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(fastExp(-std::numeric_limits<float>::quiet_NaN())));
}

// --- softmax --------------------------------------------------------------------------

TEST(Softmax, MatchesDefinition) {
  const int64_t rows = 4, cols = 9;
  const Vec x = randomVec(rows * cols, 44, -5, 5);
  Vec y(x.size()), ly(x.size());
  softmax<double>(x.data(), y.data(), rows, cols);
  logSoftmax<double>(x.data(), ly.data(), rows, cols);
  Vec want(x.size()), lwant(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t j = 0; j < cols; ++j)
      s += std::exp(x[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j) {
      want[r * cols + j] = std::exp(x[r * cols + j]) / s;
      lwant[r * cols + j] = x[r * cols + j] - std::log(s);
    }
  }
  expectClose(y, want, 1e-14, 1e-15, "softmax");
  expectClose(ly, lwant, 1e-14, 1e-14, "logSoftmax");
  // A row of -inf: softmax 0, log_softmax -inf; a row with one -inf entry is fine.
  const double inf = INFINITY;
  const Vec z{-inf, -inf, -inf, 1.0, -inf, 1.0};
  Vec sz(6), lz(6);
  softmax<double>(z.data(), sz.data(), 2, 3);
  logSoftmax<double>(z.data(), lz.data(), 2, 3);
  EXPECT_EQ(sz, (Vec{0, 0, 0, 0.5, 0, 0.5}));
  EXPECT_EQ(lz[0], -inf);
  EXPECT_NEAR(lz[3], -std::log(2.0), 1e-15);
  EXPECT_EQ(lz[4], -inf);
}

TEST(Softmax, Gradients) {
  const int64_t rows = 5, cols = 6;
  for (bool logForm : {false, true}) {
    Vec x = randomVec(rows * cols, 45, -3, 3);
    const Vec w = randomVec(x.size(), 46);
    Vec y(x.size()), dx(x.size());
    auto fwd = [&] {
      if (logForm)
        logSoftmax<double>(x.data(), y.data(), rows, cols);
      else
        softmax<double>(x.data(), y.data(), rows, cols);
    };
    fwd();
    if (logForm)
      logSoftmaxGrad<double>(w.data(), y.data(), dx.data(), rows, cols);
    else
      softmaxGrad<double>(w.data(), y.data(), dx.data(), rows, cols);
    expectGradient(x, dx, [&] {
      fwd();
      return y;
    }, w, logForm ? "logSoftmax" : "softmax");
  }
}

TEST(Softmax, FloatMatchesDouble) {
  const int64_t rows = 64, cols = 1000;
  const Vec x = randomVec(rows * cols, 47, -10, 10), w = randomVec(x.size(), 48);
  const VecF xf = toFloat(x), wf = toFloat(w);
  for (bool logForm : {false, true}) {
    Vec y(x.size()), dx(x.size());
    VecF yf(x.size()), dxf(x.size());
    if (logForm) {
      logSoftmax<double>(x.data(), y.data(), rows, cols);
      logSoftmaxGrad<double>(w.data(), y.data(), dx.data(), rows, cols);
      logSoftmax<float>(xf.data(), yf.data(), rows, cols);
      logSoftmaxGrad<float>(wf.data(), yf.data(), dxf.data(), rows, cols);
      // |y| up to ~25: float's absolute resolution there is ~2e-6.
      expectClose(yf, y, 1e-6, 2e-6, "logSoftmax float");
      expectClose(dxf, dx, 1e-5, 1e-6, "logSoftmax grad float");
    } else {
      softmax<double>(x.data(), y.data(), rows, cols);
      softmaxGrad<double>(w.data(), y.data(), dx.data(), rows, cols);
      softmax<float>(xf.data(), yf.data(), rows, cols);
      softmaxGrad<float>(wf.data(), yf.data(), dxf.data(), rows, cols);
      // exp(x - max) with |x - max| <= 20 in float: ~20 * 6e-8 relative.
      expectClose(yf, y, 2e-6, 1e-12, "softmax float");
      expectClose(dxf, dx, 1e-5, 1e-9, "softmax grad float");
    }
  }
}

// --- embedding ----------------------------------------------------------------------

TEST(Embedding, LookupAndOutOfRange) {
  const int64_t V = 5, C = 3;
  const Vec table = randomVec(V * C, 49);
  const std::vector<int64_t> ids{4, 0, 4, 2};
  Vec y(ids.size() * C);
  ASSERT_TRUE(embedding<double>(table.data(), ids.data(), y.data(), 4, V, C));
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t j = 0; j < C; ++j)
      EXPECT_EQ(y[i * C + j], table[ids[i] * C + j]);
  const std::vector<int64_t> bad{1, 5}, negative{-1};
  EXPECT_FALSE(embedding<double>(table.data(), bad.data(), y.data(), 2, V, C));
  EXPECT_FALSE(embedding<double>(table.data(), negative.data(), y.data(), 1, V, C));
}

TEST(Embedding, Gradient) {
  const int64_t V = 6, C = 4, n = 9;
  Vec table = randomVec(V * C, 50);
  const std::vector<int64_t> ids{1, 3, 1, 0, 5, 3, 1, 0, 2}; // repeats; id 4 unused
  const Vec w = randomVec(n * C, 51);
  Vec y(n * C), dtable(V * C, 77.0);
  embeddingGrad<double>(w.data(), ids.data(), dtable.data(), n, V, C);
  for (int64_t j = 0; j < C; ++j)
    EXPECT_EQ(dtable[4 * C + j], 0.0); // overwritten, not accumulated
  expectGradient(table, dtable, [&] {
    EXPECT_TRUE(embedding<double>(table.data(), ids.data(), y.data(), n, V, C));
    return y;
  }, w, "embedding");
  const VecF wf = toFloat(w);
  VecF dtf(V * C);
  embeddingGrad<float>(wf.data(), ids.data(), dtf.data(), n, V, C);
  expectClose(dtf, dtable, 1e-6, 1e-7, "embedding grad float");
  // Accumulate mode, into a gradient holding values: the same bits as the
  // overwriting gradient followed by an axpy (the plan's unfused form) on the
  // rows some id names; row 4 (no id) untouched.
  VecF held = toFloat(randomVec(V * C, 52)), fused = held, unfused = held;
  embeddingGrad<float>(wf.data(), ids.data(), fused.data(), n, V, C, true, 0.125f);
  for (int64_t k = 0; k < V * C; ++k)
    unfused[k] += 0.125f * dtf[k];
  for (int64_t k = 0; k < V * C; ++k)
    EXPECT_EQ(fused[k], unfused[k]) << k;
  for (int64_t j = 0; j < C; ++j)
    EXPECT_EQ(fused[4 * C + j], held[4 * C + j]);
}

// --- cross-entropy ------------------------------------------------------------------

TEST(CrossEntropy, MatchesDefinitionWithIgnoredRows) {
  const int64_t rows = 6, V = 7, ignore = -100;
  const Vec logits = randomVec(rows * V, 52, -4, 4);
  const std::vector<int64_t> targets{3, ignore, 0, 6, ignore, 2};
  Vec losses(rows, 55.0);
  const auto [total, counted] =
      crossEntropy<double>(logits.data(), targets.data(), losses.data(), rows, V, ignore);
  EXPECT_EQ(counted, 4);
  double want = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == ignore) {
      EXPECT_EQ(losses[r], 0.0);
      continue;
    }
    double s = 0;
    for (int64_t j = 0; j < V; ++j)
      s += std::exp(logits[r * V + j]);
    const double l = std::log(s) - logits[r * V + targets[r]];
    EXPECT_NEAR(losses[r], l, 1e-14);
    want += l;
  }
  EXPECT_NEAR(total, want, 1e-13);
  // A target out of range is NaN (and counted), not a crash.
  const std::vector<int64_t> bad{3, 7};
  const auto [badTotal, badCount] =
      crossEntropy<double>(logits.data(), bad.data(), nullptr, 2, V, ignore);
  EXPECT_TRUE(std::isnan(badTotal));
  EXPECT_EQ(badCount, 2);
}

TEST(CrossEntropy, Gradients) {
  const int64_t rows = 5, V = 6, ignore = 2;
  Vec logits = randomVec(rows * V, 53, -3, 3);
  const std::vector<int64_t> targets{0, 2, 5, 1, 2}; // rows 1 and 4 ignored
  // Per-row weights (reduction "none") and one scalar (reduction "sum").
  Vec rowW = randomVec(rows, 54);
  Vec losses(rows), dl(logits.size());
  crossEntropyGrad<double>(logits.data(), targets.data(), rowW.data(), 0.0, dl.data(), rows, V,
                           ignore);
  expectGradient(logits, dl, [&] {
    crossEntropy<double>(logits.data(), targets.data(), losses.data(), rows, V, ignore);
    return losses;
  }, rowW, "crossEntropy per-row");
  crossEntropyGrad<double>(logits.data(), targets.data(), nullptr, 0.75, dl.data(), rows, V,
                           ignore);
  for (int64_t j = 0; j < V; ++j)
    EXPECT_EQ(dl[1 * V + j], 0.0);
  expectGradient(logits, dl, [&] {
    return Vec{crossEntropy<double>(logits.data(), targets.data(), nullptr, rows, V, ignore).first};
  }, Vec{0.75}, "crossEntropy scalar");
}

TEST(CrossEntropy, FloatMatchesDouble) {
  const int64_t rows = 40, V = 5000;
  const Vec logits = randomVec(rows * V, 55, -8, 8);
  std::vector<int64_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r)
    targets[r] = r % 5 == 0 ? -100 : (r * 997) % V;
  const VecF lf = toFloat(logits);
  Vec losses(rows), dl(logits.size());
  VecF lossesF(rows), dlf(logits.size());
  const auto d = crossEntropy<double>(logits.data(), targets.data(), losses.data(), rows, V, -100);
  const auto f = crossEntropy<float>(lf.data(), targets.data(), lossesF.data(), rows, V, -100);
  EXPECT_EQ(d.second, f.second);
  EXPECT_NEAR(f.first, d.first, 1e-6 * std::fabs(d.first));
  expectClose(lossesF, losses, 1e-6, 1e-6, "crossEntropy float losses");
  crossEntropyGrad<double>(logits.data(), targets.data(), nullptr, 1.0 / d.second, dl.data(), rows,
                           V, -100);
  crossEntropyGrad<float>(lf.data(), targets.data(), nullptr, float(1.0 / f.second), dlf.data(),
                          rows, V, -100);
  expectClose(dlf, dl, 2e-6, 1e-12, "crossEntropy float grad");
}

// --- AdamW ------------------------------------------------------------------------------

/// torch.optim.AdamW's update (torch/optim/adamw.py, _single_tensor_adamw), in double.
void adamwReference(Vec &p, const Vec &g, Vec &m, Vec &v, double lr, double b1, double b2,
                    double eps, double wd, int64_t step, double gradScale) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] * gradScale;
    p[i] *= 1 - lr * wd;
    m[i] = m[i] * b1 + (1 - b1) * gi;
    v[i] = v[i] * b2 + (1 - b2) * gi * gi;
    const double bc1 = 1 - std::pow(b1, double(step)), bc2 = 1 - std::pow(b2, double(step));
    const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
    p[i] += -(lr / bc1) * m[i] / denom;
  }
}

TEST(AdamW, OneAndTwoStepsMatchPyTorchFormula) {
  const int64_t n = 1000;
  struct Case {
    double lr, wd, gradScale;
  };
  for (const Case &c : {Case{1e-3, 0.1, 1.0}, Case{6e-4, 0.0, 1.0}, Case{1e-2, 0.01, 0.37}}) {
    Vec p = randomVec(n, 56), m(n, 0.0), v(n, 0.0);
    Vec pr = p, mr = m, vr = v;
    VecF pf = toFloat(p), mf(n, 0.f), vf(n, 0.f);
    for (int64_t step = 1; step <= 2; ++step) {
      const Vec g = randomVec(n, 57 + step, -2, 2);
      const VecF gf = toFloat(g);
      adamw<double>(p.data(), g.data(), m.data(), v.data(), n, c.lr, 0.9, 0.95, 1e-8, c.wd, step,
                    c.gradScale);
      adamw<float>(pf.data(), gf.data(), mf.data(), vf.data(), n, c.lr, 0.9, 0.95, 1e-8, c.wd,
                   step, c.gradScale);
      adamwReference(pr, g, mr, vr, c.lr, 0.9, 0.95, 1e-8, c.wd, step, c.gradScale);
      expectClose(p, pr, 1e-15, 1e-16, "adamw p");
      expectClose(m, mr, 1e-15, 1e-16, "adamw m");
      expectClose(v, vr, 1e-15, 1e-16, "adamw v");
      // float: parameters of size ~1 move by ~lr; 1e-6 relative to p.
      expectClose(pf, pr, 1e-6, 1e-7, "adamw float p");
      expectClose(mf, mr, 1e-6, 1e-7, "adamw float m");
      expectClose(vf, vr, 1e-5, 1e-9, "adamw float v");
    }
  }
}

TEST(AdamW, Bf16CopyIsTheRoundedUpdate) {
  // params=bf16: the copy written beside the update equals the updated master
  // rounded to nearest-even, over several chunks of the parallel split.
  const int64_t n = 100000;
  const VecF g = toFloat(randomVec(n, 58, -2, 2));
  VecF p = toFloat(randomVec(n, 59)), m(n, 0.f), v(n, 0.f), same = p, ms(n, 0.f), vs(n, 0.f);
  std::vector<uint16_t> copy(n, 0);
  adamw<float>(p.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 1.0,
               copy.data());
  adamw<float>(same.data(), g.data(), ms.data(), vs.data(), n, 1e-3, 0.9, 0.95, 1e-8, 0.1, 1, 1.0);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    wrong += p[i] != same[i] || copy[i] != rt::floatToBf16(p[i]);
  EXPECT_EQ(wrong, 0);
}

TEST(AdamW, FirstStepMovesByLr) {
  // Step 1 with zero moments and no decay: the update is lr * g / (|g| + eps).
  Vec p{1.0, -2.0}, g{0.5, -3.0}, m(2, 0.0), v(2, 0.0);
  adamw<double>(p.data(), g.data(), m.data(), v.data(), 2, 0.01, 0.9, 0.999, 1e-8, 0.0, 1, 1.0);
  EXPECT_NEAR(p[0], 1.0 - 0.01 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p[1], -2.0 + 0.01 * 3.0 / (3.0 + 1e-8), 1e-15);
}

TEST(AdamW, SumSquares) {
  const Vec x = randomVec(200001, 58);
  double want = 0;
  for (double v : x)
    want += v * v;
  EXPECT_NEAR(sumSquares<double>(x.data(), int64_t(x.size())), want, 1e-10 * want);
  const VecF xf = toFloat(x);
  EXPECT_NEAR(sumSquares<float>(xf.data(), int64_t(xf.size())), want, 1e-6 * want);
  EXPECT_EQ(sumSquares<double>(x.data(), 0), 0.0);
}

// --- determinism -----------------------------------------------------------------

TEST(Determinism, SameBitsWithAnyThreadCount) {
  const int64_t rows = 1024, cols = 384, V = 700;
  const VecF x = toFloat(randomVec(rows * cols, 59, -3, 3)), w = toFloat(randomVec(rows * cols, 60));
  const VecF g = toFloat(randomVec(cols, 61));
  std::vector<int64_t> ids(rows);
  for (int64_t i = 0; i < rows; ++i)
    ids[i] = (i * 7919) % V;
  auto run = [&](int threads) {
    std::vector<VecF> out;
    withThreads(threads, [&] {
      VecF dx(x.size()), dg(cols), db(cols), red(cols), dt(V * cols);
      layerNormGrad<float>(w.data(), x.data(), g.data(), dx.data(), dg.data(), db.data(), rows,
                           cols, 1e-5f);
      reduce<float>(x.data(), {rows, cols}, {0}, false, red.data());
      embeddingGrad<float>(w.data(), ids.data(), dt.data(), rows, V, cols);
      const float ss = float(sumSquares<float>(x.data(), int64_t(x.size())));
      std::vector<int64_t> tg(rows);
      for (int64_t r = 0; r < rows; ++r)
        tg[r] = r % cols;
      const float ce = float(crossEntropy<float>(x.data(), tg.data(), nullptr, rows, cols, -1).first);
      out = {dx, dg, db, red, dt, VecF{ss, ce}};
    });
    return out;
  };
  const auto one = run(1), many = run(4);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(bitEqual(one[i], many[i])) << "output " << i;
}

} // namespace
} // namespace pipemesh::rt::cpu::test
