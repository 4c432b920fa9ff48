//===- ConstTensorTest.cpp - the importer's folding kernels ---------------===//
//
// The kernels walk their operands with incremental strides (walkStrided);
// these tests compare them on random shapes, broadcasts, slices, permutations
// and reductions against a plain multi-index evaluation written here, which
// recomputes every source index from scratch.
//
//===----------------------------------------------------------------------===//
#include "ConstTensor.h"

#include <gtest/gtest.h>

#include <functional>
#include <numeric>
#include <random>

using namespace pipemesh;
using namespace pipemesh::onnximport;

namespace {

using Index = std::vector<int64_t>;

int64_t count(const shapes::Shape &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
}

/// Every multi-index of `shape`, row-major.
std::vector<Index> indices(const shapes::Shape &shape) {
  std::vector<Index> all;
  Index idx(shape.size(), 0);
  for (int64_t k = 0; k < count(shape); ++k) {
    all.push_back(idx);
    for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
  return all;
}

/// Row-major flat position of `idx` in `shape`.
int64_t flat(const shapes::Shape &shape, const Index &idx) {
  int64_t k = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    k = k * shape[d] + idx[d];
  return k;
}

/// The element of `from` that numpy broadcasting reads at `idx` of the result.
int64_t broadcastSource(const shapes::Shape &from, const Index &idx) {
  Index own(from.size());
  size_t lead = idx.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    own[d] = from[d] == 1 ? 0 : idx[lead + d];
  return flat(from, own);
}

struct Random {
  std::mt19937_64 gen{20261202};
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
  }
  shapes::Shape shape(int rank) {
    shapes::Shape s;
    for (int d = 0; d < rank; ++d)
      s.push_back(uniform(1, 5));
    return s;
  }
  /// `full` with some dims set to 1 and some leading dims dropped.
  shapes::Shape broadcastable(const shapes::Shape &full) {
    shapes::Shape s(full.begin() + uniform(0, (int64_t)full.size()), full.end());
    for (auto &d : s)
      if (uniform(0, 2) == 0)
        d = 1;
    return s;
  }
  ConstTensor tensor(DType t, const shapes::Shape &shape) {
    ConstTensor c = ConstTensor::zeros(t, shape);
    for (int64_t k = 0; k < c.numel(); ++k)
      c.setInt(k, t == DType::Bool ? uniform(0, 1) : uniform(-9, 9));
    return c;
  }
};

TEST(ConstTensorFold, BinaryBroadcastsLikeNumpy) {
  Random rnd;
  for (int trial = 0; trial < 300; ++trial) {
    shapes::Shape full = rnd.shape((int)rnd.uniform(0, 4));
    shapes::Shape sa = rnd.broadcastable(full), sb = rnd.broadcastable(full);
    std::string why;
    auto out = shapes::broadcast(sa, sb, why);
    ASSERT_TRUE(out) << why;
    bool isFloat = trial % 2;
    ConstTensor a = rnd.tensor(isFloat ? DType::F32 : DType::I64, sa);
    ConstTensor b = rnd.tensor(isFloat ? DType::F32 : DType::I64, sb);
    auto sub = foldBinary(
        a, b, a.dtype, [](double x, double y) { return x - 2 * y; },
        [](int64_t x, int64_t y) { return x - 2 * y; }, why);
    auto less = foldBinary(
        a, b, DType::Bool, [](double x, double y) { return double(x < y); },
        [](int64_t x, int64_t y) { return int64_t(x < y); }, why);
    ASSERT_TRUE(sub && less) << why;
    ASSERT_EQ(sub->shape, *out);
    for (const Index &idx : indices(*out)) {
      double x = a.asDouble(broadcastSource(sa, idx)), y = b.asDouble(broadcastSource(sb, idx));
      int64_t k = flat(*out, idx);
      EXPECT_EQ(sub->asDouble(k), x - 2 * y);
      EXPECT_EQ(less->i[k], x < y ? 1 : 0);
    }
  }
}

TEST(ConstTensorFold, WhereBroadcastsItsThreeOperands) {
  Random rnd;
  for (int trial = 0; trial < 200; ++trial) {
    shapes::Shape full = rnd.shape((int)rnd.uniform(0, 4));
    shapes::Shape sc = rnd.broadcastable(full), sx = rnd.broadcastable(full),
                  sy = rnd.broadcastable(full);
    ConstTensor c = rnd.tensor(DType::Bool, sc);
    ConstTensor x = rnd.tensor(DType::F32, sx), y = rnd.tensor(DType::F32, sy);
    std::string why;
    auto r = foldWhere(c, x, y, why);
    ASSERT_TRUE(r) << why;
    for (const Index &idx : indices(r->shape)) {
      double expected = c.i[broadcastSource(sc, idx)] ? x.f[broadcastSource(sx, idx)]
                                                      : y.f[broadcastSource(sy, idx)];
      EXPECT_EQ(r->f[flat(r->shape, idx)], expected);
    }
  }
}

TEST(ConstTensorFold, MovementMatchesIndexArithmetic) {
  Random rnd;
  for (int trial = 0; trial < 200; ++trial) {
    int rank = (int)rnd.uniform(1, 4);
    shapes::Shape shape = rnd.shape(rank);
    ConstTensor a = rnd.tensor(trial % 2 ? DType::I64 : DType::F32, shape);

    // Broadcast to a shape with more and wider dims.
    shapes::Shape small = rnd.broadcastable(shape), wide = shape;
    ConstTensor s = rnd.tensor(a.dtype, small);
    wide.insert(wide.begin(), rnd.uniform(1, 3));
    ConstTensor bc = foldBroadcast(s, wide);
    for (const Index &idx : indices(wide))
      EXPECT_EQ(bc.asDouble(flat(wide, idx)), s.asDouble(broadcastSource(small, idx)));

    // Transpose by a random permutation.
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rnd.gen);
    ConstTensor t = foldTranspose(a, perm);
    for (const Index &idx : indices(t.shape)) {
      Index src(rank);
      for (int d = 0; d < rank; ++d)
        src[perm[d]] = idx[d];
      EXPECT_EQ(t.asDouble(flat(t.shape, idx)), a.asDouble(flat(shape, src)));
    }

    // Slice with random starts, limits and positive steps.
    std::vector<int64_t> lo, hi, st;
    for (int64_t dim : shape) {
      lo.push_back(rnd.uniform(0, dim - 1));
      hi.push_back(rnd.uniform(lo.back() + 1, dim));
      st.push_back(rnd.uniform(1, 3));
    }
    ConstTensor sl = foldSlice(a, lo, hi, st);
    for (int d = 0; d < rank; ++d)
      ASSERT_EQ(sl.shape[d], (hi[d] - lo[d] + st[d] - 1) / st[d]);
    for (const Index &idx : indices(sl.shape)) {
      Index src(rank);
      for (int d = 0; d < rank; ++d)
        src[d] = lo[d] + idx[d] * st[d];
      EXPECT_EQ(sl.asDouble(flat(sl.shape, idx)), a.asDouble(flat(shape, src)));
    }
  }
}

TEST(ConstTensorFold, ReduceSumsEveryCellIntoItsSlot) {
  Random rnd;
  for (int trial = 0; trial < 100; ++trial) {
    int rank = (int)rnd.uniform(1, 4);
    shapes::Shape shape = rnd.shape(rank);
    ConstTensor a = rnd.tensor(DType::F32, shape);
    std::vector<int64_t> axes;
    for (int d = 0; d < rank; ++d)
      if (rnd.uniform(0, 1))
        axes.push_back(d);
    ConstTensor r = foldReduce(a, axes, /*keepdims=*/true, /*mean=*/false);
    std::vector<double> expected(r.numel(), 0.0);
    for (const Index &idx : indices(shape)) {
      Index into = idx;
      for (int64_t ax : axes)
        into[ax] = 0;
      expected[flat(r.shape, into)] += a.f[flat(shape, idx)];
    }
    for (int64_t k = 0; k < r.numel(); ++k)
      EXPECT_EQ(r.f[k], expected[k]);
  }
}

TEST(ConstTensorFold, MatMulBroadcastsBatchDims) {
  Random rnd;
  for (int trial = 0; trial < 50; ++trial) {
    int64_t m = rnd.uniform(1, 4), k = rnd.uniform(1, 4), n = rnd.uniform(1, 4);
    shapes::Shape batch = rnd.shape((int)rnd.uniform(0, 2));
    shapes::Shape ba = rnd.broadcastable(batch), bb = rnd.broadcastable(batch);
    shapes::Shape sa = ba, sb = bb;
    sa.append({m, k});
    sb.append({k, n});
    ConstTensor a = rnd.tensor(DType::F32, sa), b = rnd.tensor(DType::F32, sb);
    std::string why;
    auto r = foldMatMul(a, b, int64_t(1) << 20, why);
    ASSERT_TRUE(r) << why;
    for (const Index &idx : indices(r->shape)) {
      Index bIdx(idx.begin(), idx.end() - 2);
      int64_t i = idx[idx.size() - 2], j = idx.back();
      double acc = 0;
      for (int64_t l = 0; l < k; ++l)
        acc += a.f[broadcastSource(ba, bIdx) * m * k + i * k + l] *
               b.f[broadcastSource(bb, bIdx) * k * n + l * n + j];
      EXPECT_EQ(r->f[flat(r->shape, idx)], (double)(float)acc);
    }
  }
}

TEST(ConstTensorFold, CompressUniformDimsKeepsOneSliceOfEach) {
  // [3, 4, 5] uniform along dims 0 and 2: values depend on the middle index.
  ConstTensor a = ConstTensor::zeros(DType::I64, {3, 4, 5});
  for (const Index &idx : indices(a.shape))
    a.i[flat(a.shape, idx)] = 10 * idx[1];
  ASSERT_TRUE(hasUniformDim(a));
  ConstTensor c = compressUniformDims(a);
  EXPECT_EQ(c.shape, (shapes::Shape{1, 4, 1}));
  EXPECT_EQ(c.i, (std::vector<int64_t>{0, 10, 20, 30}));
  EXPECT_EQ(foldBroadcast(c, a.shape).i, a.i);

  // Nothing uniform: returned as is.
  a.i[flat(a.shape, {2, 1, 3})] = 7;
  a.i[flat(a.shape, {1, 1, 0})] = 8;
  EXPECT_FALSE(hasUniformDim(a));
  EXPECT_EQ(compressUniformDims(a).i, a.i);
}

} // namespace
