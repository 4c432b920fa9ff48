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
  // keepdims changes the result's shape, not its elements' order.
  const bool keepdims = c.boolean("keepdims", true);
  Dims want;
  for (int64_t d = 0; d < x.rank(); ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced)
      want.push_back(x.shape[d]);
    else if (keepdims)
      want.push_back(1);
  }
  if (y.shape != want)
    c.error("result ", shapeStr(y.shape), " does not match ", shapeStr(x.shape),
            " reduced over the axes", keepdims ? " keeping them" : "", " (", shapeStr(want), ")");
  return [x, y, axes] { cpu::reduce<float>(x.as<float>(), x.shape, axes, MEAN, y.as<float>()); };
}

} // namespace

void registerReduceOps(OpTable &t) {
  t["reduce_sum"] = bindReduce<false>;
  t["reduce_mean"] = bindReduce<true>;
}

} // namespace pipemesh::rt
