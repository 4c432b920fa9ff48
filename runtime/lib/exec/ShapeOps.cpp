//===- ShapeOps.cpp - reshape, transpose, broadcast, split, concat, slice ---===//
//
// f32 tensors use the CPU kernels; other element types (ids, masks) use the
// element-size generic strided copy.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <cstring>

namespace pipemesh::rt {
namespace {

Thunk bindReshape(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  if (x.numel != y.numel || x.dtype != y.dtype)
    c.error("cannot reshape ", shapeStr(x.shape), "x", dtypeName(x.dtype), " to ",
            shapeStr(y.shape), "x", dtypeName(y.dtype));
  if (x.data == y.data)
    return [] {};
  return [x, y] { std::memmove(y.data, x.data, x.bytes()); };
}

Thunk bindTranspose(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  Dims perm = c.ints("perm");
  if ((int64_t)perm.size() != x.rank())
    c.error("perm has ", perm.size(), " entries for rank ", x.rank());
  std::vector<bool> seen(perm.size(), false);
  Dims want;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[p])
      c.error("perm is not a permutation of 0..", x.rank() - 1);
    seen[p] = true;
    want.push_back(x.shape[p]);
  }
  c.expectShape(y, want, "the result");
  c.expectDType(y, x.dtype, "the result");
  if (x.dtype == DType::F32)
    return [x, y, perm] { cpu::transpose<float>(x.as<float>(), x.shape, perm, y.as<float>()); };
  Dims xs = ops::contiguousStrides(x.shape), src;
  for (int64_t p : perm)
    src.push_back(xs[p]);
  Dims dst = ops::contiguousStrides(y.shape);
  return
      [x, y, src, dst] { ops::copyStrided(y.shape, dtypeSize(x.dtype), x.data, src, y.data, dst); };
}

Thunk bindBroadcast(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  c.expectDType(y, x.dtype, "the result");
  if (!ops::broadcastsTo(x.shape, y.shape))
    c.error(shapeStr(x.shape), " does not broadcast to ", shapeStr(y.shape));
  if (x.dtype == DType::F32)
    return [x, y] { cpu::broadcastTo<float>(x.as<float>(), x.shape, y.as<float>(), y.shape); };
  Dims src = ops::broadcastStrides(x.shape, y.shape), dst = ops::contiguousStrides(y.shape);
  return
      [x, y, src, dst] { ops::copyStrided(y.shape, dtypeSize(x.dtype), x.data, src, y.data, dst); };
}

Thunk bindSplit(OpContext &c) {
  c.expectCounts(1, 1, 1, SIZE_MAX);
  TensorRef x = c.in(0);
  int64_t axis = c.axis(c.i64("axis"), x.rank());
  Dims sizes = c.ints("sizes");
  if (sizes.size() != c.numOut())
    c.error("has ", sizes.size(), " sizes but ", c.numOut(), " outputs");
  std::vector<TensorRef> ys;
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TensorRef y = c.out(i);
    Dims want = x.shape;
    want[axis] = sizes[i];
    c.expectShape(y, want, "output " + std::to_string(i));
    c.expectDType(y, x.dtype, "output " + std::to_string(i));
    total += sizes[i];
    ys.push_back(y);
  }
  if (total != x.shape[axis])
    c.error("sizes add up to ", total, " but dim ", axis, " is ", x.shape[axis]);
  if (x.dtype == DType::F32)
    return [x, ys, axis, sizes] {
      std::vector<float *> ptrs;
      for (const TensorRef &y : ys)
        ptrs.push_back(y.as<float>());
      cpu::split<float>(x.as<float>(), x.shape, axis, sizes, ptrs);
    };
  return [x, ys, axis] {
    Dims xs = ops::contiguousStrides(x.shape);
    size_t es = dtypeSize(x.dtype);
    int64_t at = 0;
    for (const TensorRef &y : ys) {
      ops::copyStrided(y.shape, es, static_cast<const char *>(x.data) + at * xs[axis] * es, xs,
                       y.data, ops::contiguousStrides(y.shape));
      at += y.shape[axis];
    }
  };
}

Thunk bindConcat(OpContext &c) {
  c.expectCounts(1, SIZE_MAX, 1, 1);
  TensorRef y = c.out(0);
  int64_t axis = c.axis(c.i64("axis"), y.rank());
  std::vector<TensorRef> xs;
  int64_t total = 0;
  for (size_t i = 0; i < c.numIn(); ++i) {
    TensorRef x = c.in(i);
    c.expectDType(x, y.dtype, "input " + std::to_string(i));
    if (x.rank() != y.rank())
      c.error("input ", i, " has rank ", x.rank(), ", the result ", y.rank());
    for (int64_t d = 0; d < y.rank(); ++d)
      if (d != axis && x.shape[d] != y.shape[d])
        c.error("input ", i, " ", shapeStr(x.shape), " differs from the result ", shapeStr(y.shape),
                " outside axis ", axis);
    total += x.shape[axis];
    xs.push_back(x);
  }
  if (total != y.shape[axis])
    c.error("inputs add up to ", total, " along axis ", axis, " but the result has ",
            y.shape[axis]);
  if (y.dtype == DType::F32)
    return [xs, y, axis] {
      std::vector<const float *> ptrs;
      std::vector<Dims> shapes;
      for (const TensorRef &x : xs) {
        ptrs.push_back(x.as<float>());
        shapes.push_back(x.shape);
      }
      cpu::concat<float>(ptrs, shapes, axis, y.as<float>());
    };
  return [xs, y, axis] {
    Dims ys = ops::contiguousStrides(y.shape);
    size_t es = dtypeSize(y.dtype);
    int64_t at = 0;
    for (const TensorRef &x : xs) {
      ops::copyStrided(x.shape, es, x.data, ops::contiguousStrides(x.shape),
                       static_cast<char *>(y.data) + at * ys[axis] * es, ys);
      at += x.shape[axis];
    }
  };
}

/// Normalized slice parameters of `full` (the sliced tensor's shape),
/// checked against `part` (the slice's shape).
struct SliceSpec {
  Dims starts, strides;
};

SliceSpec sliceSpec(OpContext &c, const Dims &full, const Dims &part) {
  Dims starts = c.ints("starts"), limits = c.ints("limits"), strides = c.ints("strides");
  size_t r = full.size();
  if (starts.size() != r || limits.size() != r || strides.size() != r || part.size() != r)
    c.error("starts/limits/strides need one entry per dim of ", shapeStr(full));
  for (size_t d = 0; d < r; ++d) {
    int64_t n = full[d];
    auto norm = [n](int64_t v) {
      if (v < 0)
        v += n;
      return v < 0 ? 0 : v > n ? n : v;
    };
    if (strides[d] <= 0)
      c.error("stride ", strides[d], " of dim ", d, " must be positive");
    starts[d] = norm(starts[d]);
    int64_t lim = norm(limits[d]);
    int64_t len = lim > starts[d] ? (lim - starts[d] + strides[d] - 1) / strides[d] : 0;
    if (len != part[d])
      c.error("slice [", starts[d], ":", lim, ":", strides[d], "] of dim ", d, " (size ", n,
              ") has ", len, " elements but the sliced tensor has ", part[d]);
  }
  return {starts, strides};
}

Thunk bindSlice(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  c.expectDType(y, x.dtype, "the result");
  SliceSpec s = sliceSpec(c, x.shape, y.shape);
  if (x.dtype == DType::F32)
    return [x, y, s] {
      cpu::slice<float>(x.as<float>(), x.shape, s.starts, s.strides, y.as<float>(), y.shape);
    };
  Dims xs = ops::contiguousStrides(x.shape), src;
  int64_t base = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    base += s.starts[d] * xs[d];
    src.push_back(xs[d] * s.strides[d]);
  }
  Dims dst = ops::contiguousStrides(y.shape);
  size_t es = dtypeSize(x.dtype);
  return [x, y, src, dst, base, es] {
    ops::copyStrided(y.shape, es, static_cast<const char *>(x.data) + base * es, src, y.data, dst);
  };
}

Thunk bindSliceGrad(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef dy = c.in(0), dx = c.out(0);
  c.expectDType(dx, dy.dtype, "dx");
  SliceSpec s = sliceSpec(c, dx.shape, dy.shape);
  if (dy.dtype == DType::F32)
    return [dy, dx, s] {
      cpu::sliceGrad<float>(dy.as<float>(), dy.shape, s.starts, s.strides, dx.as<float>(),
                            dx.shape);
    };
  Dims xs = ops::contiguousStrides(dx.shape), dst;
  int64_t base = 0;
  for (size_t d = 0; d < xs.size(); ++d) {
    base += s.starts[d] * xs[d];
    dst.push_back(xs[d] * s.strides[d]);
  }
  Dims src = ops::contiguousStrides(dy.shape);
  size_t es = dtypeSize(dy.dtype);
  return [dy, dx, src, dst, base, es] {
    std::memset(dx.data, 0, dx.bytes());
    ops::copyStrided(dy.shape, es, dy.data, src, static_cast<char *>(dx.data) + base * es, dst);
  };
}

} // namespace

void registerShapeOps(OpTable &t) {
  t["reshape"] = bindReshape;
  t["transpose"] = bindTranspose;
  t["broadcast"] = bindBroadcast;
  t["split"] = bindSplit;
  t["concat"] = bindConcat;
  t["slice"] = bindSlice;
  t["slice_grad"] = bindSliceGrad;
}

} // namespace pipemesh::rt
