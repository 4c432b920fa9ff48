//===- Movement.cpp - transpose, slice, concat, split, broadcast, reduce ---===//
//
// Every pure data movement here is one strided copy: the destination and the
// source are walked with their own strides over a common iteration shape
// (transpose permutes the source strides, slice scales and offsets them,
// broadcast zeroes them, slice_grad scatters into a zeroed destination).
// Reductions keep a contiguous inner run whenever the layout allows, so that
// they vectorize, and add in a fixed order (results do not depend on the number
// of threads).
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <type_traits>

namespace pipemesh::rt::cpu {
using namespace detail;

namespace {

/// dst[i] = src[i] over `shape`, with per-operand strides (elements).
template <typename T>
void stridedCopy(const T *src, const Dims &srcStrides, T *dst, const Dims &dstStrides,
                 const Dims &shapeIn) {
  if (numel(shapeIn) == 0)
    return;
  Dims shape = shapeIn;
  std::array<Dims, 2> st{srcStrides, dstStrides};
  coalesce(shape, st);
  const size_t rank = shape.size();
  const int64_t ss = st[0].back(), ds = st[1].back();

  // A transpose of the two innermost-in-memory dims: copy in square tiles so
  // that both sides stay in cache. Taken when the destination runs along the
  // last dim but the source does not, and some other dim p is the source's
  // contiguous one.
  size_t p = rank;
  if (ds == 1 && ss != 1)
    for (size_t d = 0; d + 1 < rank; ++d)
      if (st[0][d] == 1)
        p = d;
  if (p < rank && shape[p] >= 8 && shape[rank - 1] >= 8) {
    constexpr int64_t kTile = 32;
    // Outer space: every dim except p and the last.
    Dims oShape;
    std::array<Dims, 2> oSt;
    for (size_t d = 0; d + 1 < rank; ++d)
      if (d != p) {
        oShape.push_back(shape[d]);
        oSt[0].push_back(st[0][d]);
        oSt[1].push_back(st[1][d]);
      }
    const int64_t outer = numel(oShape);
    const int64_t P = shape[p], L = shape[rank - 1];
    const int64_t tp = (P + kTile - 1) / kTile, tl = (L + kTile - 1) / kTile;
    const int64_t dsP = st[1][p];
    const int64_t tasks = outer * tp * tl;
#pragma omp parallel for schedule(static) if (outer * P * L > kCopyGrain)
    for (int64_t t = 0; t < tasks; ++t) {
      int64_t r = t / (tp * tl);
      int64_t i0 = (t / tl) % tp * kTile, j0 = t % tl * kTile;
      int64_t so = 0, dO = 0;
      for (size_t d = oShape.size(); d-- > 0;) {
        int64_t i = r % oShape[d];
        r /= oShape[d];
        so += i * oSt[0][d];
        dO += i * oSt[1][d];
      }
      const int64_t i1 = std::min(i0 + kTile, P), j1 = std::min(j0 + kTile, L);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          dst[dO + i * dsP + j] = src[so + i + j * ss];
    }
    return;
  }

  forEachRun(shape, st, [&](const std::array<int64_t, 2> &off, int64_t n) {
    const T *s = src + off[0];
    T *d = dst + off[1];
    if (ss == 1 && ds == 1)
      std::copy(s, s + n, d);
    else if (ss == 0 && ds == 1)
      std::fill(d, d + n, *s);
    else
      for (int64_t j = 0; j < n; ++j)
        d[j * ds] = s[j * ss];
  });
}

/// Source strides and base offset of x[starts + i * strides].
inline int64_t sliceView(const Dims &xShape, const Dims &starts, const Dims &strides,
                         Dims &viewStrides) {
  Dims xs = contiguousStrides(xShape);
  viewStrides.resize(xShape.size());
  int64_t base = 0;
  for (size_t d = 0; d < xShape.size(); ++d) {
    base += starts[d] * xs[d];
    viewStrides[d] = xs[d] * strides[d];
  }
  return base;
}

template <typename T> using ReduceAcc = std::conditional_t<std::is_integral_v<T>, int64_t, Acc>;

/// acc[j] += row[j] for j < n.
template <typename T, typename A>
PIPEMESH_ALWAYS_INLINE void addRowImpl(const T *row, A *acc, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    acc[j] += A(row[j]);
}
PIPEMESH_ALWAYS_INLINE void addRowFloatImpl(const float *row, Acc *acc, int64_t n) {
  addRowImpl(row, acc, n);
}
PIPEMESH_MULTIVERSION(void, addRowFloat, (const float *row, Acc *acc, int64_t n), (row, acc, n))
template <typename T, typename A> void addRow(const T *row, A *acc, int64_t n) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<A, Acc>)
    addRowFloat(row, acc, n);
  else
    addRowImpl(row, acc, n);
}

} // namespace

template <typename T>
void transpose(const T *x, const Dims &xShape, const std::vector<int64_t> &perm, T *y) {
  Dims xs = contiguousStrides(xShape);
  Dims yShape(perm.size()), srcStrides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    yShape[i] = xShape[perm[i]];
    srcStrides[i] = xs[perm[i]];
  }
  stridedCopy(x, srcStrides, y, contiguousStrides(yShape), yShape);
}

template <typename T>
void slice(const T *x, const Dims &xShape, const Dims &starts, const Dims &strides, T *y,
           const Dims &yShape) {
  Dims view;
  int64_t base = sliceView(xShape, starts, strides, view);
  stridedCopy(x + base, view, y, contiguousStrides(yShape), yShape);
}

template <typename T>
void sliceGrad(const T *dy, const Dims &yShape, const Dims &starts, const Dims &strides, T *dx,
               const Dims &xShape) {
  const int64_t n = numel(xShape);
#pragma omp parallel for schedule(static) if (n > kCopyGrain)
  for (int64_t i = 0; i < n; ++i)
    dx[i] = T(0);
  Dims view;
  int64_t base = sliceView(xShape, starts, strides, view);
  stridedCopy(dy, contiguousStrides(yShape), dx + base, view, yShape);
}

template <typename T>
void concat(const std::vector<const T *> &xs, const std::vector<Dims> &shapes, int64_t axis,
            T *y) {
  if (axis < 0)
    axis += int64_t(shapes[0].size());
  // y viewed as [outer, sum_k inner_k]; input k fills columns [col_k, col_k + inner_k).
  const int64_t outer = numel(Dims(shapes[0].begin(), shapes[0].begin() + axis));
  std::vector<int64_t> inner(xs.size()), col(xs.size());
  int64_t width = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    inner[k] = numel(Dims(shapes[k].begin() + axis, shapes[k].end()));
    col[k] = width;
    width += inner[k];
  }
#pragma omp parallel for schedule(static) if (outer * width > kCopyGrain)
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < xs.size(); ++k)
      std::copy(xs[k] + o * inner[k], xs[k] + (o + 1) * inner[k], y + o * width + col[k]);
}

template <typename T>
void split(const T *x, const Dims &xShape, int64_t axis, const std::vector<int64_t> &sizes,
           const std::vector<T *> &ys) {
  if (axis < 0)
    axis += int64_t(xShape.size());
  const int64_t outer = numel(Dims(xShape.begin(), xShape.begin() + axis));
  const int64_t after = numel(Dims(xShape.begin() + axis + 1, xShape.end()));
  const int64_t width = xShape[axis] * after;
  std::vector<int64_t> inner(sizes.size()), col(sizes.size());
  for (size_t k = 0, c = 0; k < sizes.size(); ++k) {
    inner[k] = sizes[k] * after;
    col[k] = c;
    c += inner[k];
  }
#pragma omp parallel for schedule(static) if (outer * width > kCopyGrain)
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < sizes.size(); ++k)
      std::copy(x + o * width + col[k], x + o * width + col[k] + inner[k], ys[k] + o * inner[k]);
}

template <typename T> void broadcastTo(const T *x, const Dims &xShape, T *y, const Dims &yShape) {
  stridedCopy(x, broadcastStrides(xShape, yShape), y, contiguousStrides(yShape), yShape);
}

template <typename T>
void reduce(const T *x, const Dims &xShape, const std::vector<int64_t> &axes, bool mean, T *y) {
  using A = ReduceAcc<T>;
  // Split x's dims into kept and reduced ones, each list with its input
  // strides; neighbouring dims of the same kind merge, size-1 dims drop out.
  Dims xs = contiguousStrides(xShape);
  std::vector<bool> isReduced(xShape.size(), false);
  for (int64_t a : axes)
    isReduced[a] = true;
  Dims keptShape, keptStrides, redShape, redStrides;
  int64_t count = 1;
  for (size_t d = 0; d < xShape.size(); ++d) {
    if (isReduced[d])
      count *= xShape[d];
    if (xShape[d] == 1)
      continue;
    Dims &sh = isReduced[d] ? redShape : keptShape;
    Dims &st = isReduced[d] ? redStrides : keptStrides;
    if (!sh.empty() && st.back() == xs[d] * xShape[d]) {
      sh.back() *= xShape[d];
      st.back() = xs[d];
    } else {
      sh.push_back(xShape[d]);
      st.push_back(xs[d]);
    }
  }
  const int64_t nOut = numel(keptShape), nRed = numel(redShape);
  const double scale = mean && count > 0 ? 1.0 / double(count) : 1.0;
  auto finish = [&](A v) -> T {
    if constexpr (std::is_integral_v<T>)
      return mean && count > 0 ? T(v / count) : T(v);
    else
      return T(v * scale);
  };
  // Offset of the r-th reduced (or kept) multi-index.
  auto offsetOf = [](const Dims &shape, const Dims &strides, int64_t r) {
    int64_t off = 0;
    for (size_t d = shape.size(); d-- > 0;) {
      off += (r % shape[d]) * strides[d];
      r /= shape[d];
    }
    return off;
  };

  const bool innerKept = !keptStrides.empty() && keptStrides.back() == 1;
  if (innerKept) {
    // Case A: the contiguous run is kept (e.g. summing [rows, C] over rows):
    // accumulate whole runs of the output, in column blocks for parallelism.
    constexpr int64_t kBlock = 256;
    const int64_t I = keptShape.back();
    Dims oShape(keptShape.begin(), keptShape.end() - 1);
    Dims oStrides(keptStrides.begin(), keptStrides.end() - 1);
    const int64_t outer = numel(oShape), blocks = (I + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (nOut * nRed > kCopyGrain)
    for (int64_t t = 0; t < outer * blocks; ++t) {
      const int64_t o = t / blocks, j0 = t % blocks * kBlock, n = std::min(kBlock, I - j0);
      const T *base = x + offsetOf(oShape, oStrides, o) + j0;
      A acc[kBlock] = {};
      for (int64_t r = 0; r < nRed; ++r)
        addRow(base + offsetOf(redShape, redStrides, r), acc, n);
      for (int64_t j = 0; j < n; ++j)
        y[o * I + j0 + j] = finish(acc[j]);
    }
    return;
  }
  // Case B: the contiguous run (if any) is reduced: one sum per output element.
  const bool innerRed = !redStrides.empty() && redStrides.back() == 1;
  const int64_t R = innerRed ? redShape.back() : 1;
  Dims rShape = redShape, rStrides = redStrides;
  if (innerRed) {
    rShape.pop_back();
    rStrides.pop_back();
  }
  const int64_t nOuterRed = numel(rShape);
#pragma omp parallel for schedule(static) if (nOut * nRed > kCopyGrain)
  for (int64_t o = 0; o < nOut; ++o) {
    const T *base = x + offsetOf(keptShape, keptStrides, o);
    A acc = 0;
    for (int64_t r = 0; r < nOuterRed; ++r) {
      const T *run = base + offsetOf(rShape, rStrides, r);
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < R; ++j)
        s += A(run[j]);
      acc += s;
    }
    y[o] = finish(acc);
  }
}

#define PIPEMESH_INSTANTIATE(T)                                                                    \
  template void transpose<T>(const T *, const Dims &, const std::vector<int64_t> &, T *);         \
  template void slice<T>(const T *, const Dims &, const Dims &, const Dims &, T *, const Dims &);  \
  template void sliceGrad<T>(const T *, const Dims &, const Dims &, const Dims &, T *,             \
                             const Dims &);                                                        \
  template void concat<T>(const std::vector<const T *> &, const std::vector<Dims> &, int64_t,     \
                          T *);                                                                    \
  template void split<T>(const T *, const Dims &, int64_t, const std::vector<int64_t> &,          \
                         const std::vector<T *> &);                                                \
  template void broadcastTo<T>(const T *, const Dims &, T *, const Dims &);                       \
  template void reduce<T>(const T *, const Dims &, const std::vector<int64_t> &, bool, T *);
PIPEMESH_INSTANTIATE(float)
PIPEMESH_INSTANTIATE(double)
PIPEMESH_INSTANTIATE(int64_t)
PIPEMESH_INSTANTIATE(int32_t)
PIPEMESH_INSTANTIATE(uint8_t)
#undef PIPEMESH_INSTANTIATE

} // namespace pipemesh::rt::cpu
