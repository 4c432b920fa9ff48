//===- ReduceOps.cpp - reduce_sum and reduce_mean ---------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <algorithm>

namespace pipemesh::rt {
namespace {

template <bool MEAN> Thunk bindReduce(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  c.expectFloat(x, "the input");
  c.expectFloat(y, "the result");
  Dims axes;
  for (int64_t a : c.ints("axes"))
    axes.push_back(c.axis(a, x.rank(), "reduction axis"));
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    c.error("reduction axes name a dim twice");
  int64_t kept = x.numel;
  for (int64_t a : axes)
    kept = x.shape[a] ? kept / x.shape[a] : 0;
  if (y.numel != kept)
    c.error("result ", shapeStr(y.shape), " does not match ", shapeStr(x.shape),
            " reduced over the axes");
  return [x, y, axes] { cpu::reduce<float>(x.as<float>(), x.shape, axes, MEAN, y.as<float>()); };
}

} // namespace

void registerReduceOps(OpTable &t) {
  t["reduce_sum"] = bindReduce<false>;
  t["reduce_mean"] = bindReduce<true>;
}

} // namespace pipemesh::rt
