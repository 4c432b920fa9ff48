//===- LossOps.cpp - cross_entropy and cross_entropy_grad -------------------===//
//
// logits [N..., V] against integer targets [N...]; targets equal to
// `ignore_index` do not count. reduction "mean" divides by the number of
// counted targets (NaN when none counts, as PyTorch), "sum" does not, "none"
// keeps one loss per target.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <limits>
#include <memory>

namespace pipemesh::rt {
namespace {

enum class Reduction { Mean, Sum, None };

Reduction reduction(OpContext &c) {
  std::string r = c.str("reduction", "mean");
  if (r == "mean")
    return Reduction::Mean;
  if (r == "sum")
    return Reduction::Sum;
  if (r == "none")
    return Reduction::None;
  c.error("attribute 'reduction' must be \"mean\", \"sum\" or \"none\", got \"", r, "\"");
}

/// Targets as i64 (a scratch copy for i32), range-checked per call.
struct Targets {
  TensorRef t;
  std::shared_ptr<std::vector<int64_t>> scratch;
  int64_t V, ignore;

  /// Returns the targets and the number that count.
  std::pair<const int64_t *, int64_t> get() const {
    const int64_t *p = t.as<int64_t>();
    if (scratch) {
      const int32_t *q = t.as<int32_t>();
      for (int64_t i = 0; i < t.numel; ++i)
        (*scratch)[i] = q[i];
      p = scratch->data();
    }
    int64_t counted = 0;
    for (int64_t i = 0; i < t.numel; ++i) {
      if (p[i] == ignore)
        continue;
      if (p[i] < 0 || p[i] >= V)
        fail("target ", p[i], " at position ", i, " of buffer ", t.info->id,
             t.info->name.empty() ? "" : " '" + t.info->name + "'", " is out of range [0, ", V,
             ")");
      ++counted;
    }
    return {p, counted};
  }
};

Targets targets(OpContext &c, const TensorRef &logits, const TensorRef &t) {
  c.expectIndex(t, "the targets");
  if (logits.rank() < 1)
    c.error("logits must have a class dim");
  Dims want(logits.shape.begin(), logits.shape.end() - 1);
  c.expectShape(t, want, "the targets");
  Targets r{t, nullptr, logits.shape.back(), c.i64("ignore_index", -100)};
  if (t.dtype == DType::I32)
    r.scratch = std::make_shared<std::vector<int64_t>>(t.numel);
  return r;
}

Thunk bindCrossEntropy(OpContext &c) {
  c.expectCounts(2, 2, 1, 1);
  TensorRef logits = c.in(0), y = c.out(0);
  c.expectFloat(logits, "the logits");
  c.expectFloat(y, "the result");
  Targets tg = targets(c, logits, c.in(1));
  Reduction red = reduction(c);
  if (red == Reduction::None)
    c.expectShape(y, tg.t.shape, "the result");
  else if (y.numel != 1)
    c.error("result ", shapeStr(y.shape), " must be a scalar for reduction mean/sum");
  int64_t rows = tg.t.numel;
  return [logits, y, tg, red, rows] {
    auto [t, counted] = tg.get();
    float *losses = red == Reduction::None ? y.as<float>() : nullptr;
    auto [sum, n] = cpu::crossEntropy<float>(logits.as<float>(), t, losses, rows, tg.V, tg.ignore);
    (void)counted;
    if (red == Reduction::Mean)
      y.as<float>()[0] = n ? (float)(sum / (double)n) : std::numeric_limits<float>::quiet_NaN();
    else if (red == Reduction::Sum)
      y.as<float>()[0] = (float)sum;
  };
}

Thunk bindCrossEntropyGrad(OpContext &c) {
  c.expectCounts(3, 3, 1, 1);
  TensorRef dloss = c.in(0), logits = c.in(1), dl = c.out(0);
  c.expectFloat(dloss, "dloss");
  c.expectFloat(logits, "the logits");
  c.expectFloat(dl, "dlogits");
  c.expectShape(dl, logits.shape, "dlogits");
  Targets tg = targets(c, logits, c.in(2));
  Reduction red = reduction(c);
  if (red == Reduction::None)
    c.expectShape(dloss, tg.t.shape, "dloss");
  else if (dloss.numel != 1)
    c.error("dloss ", shapeStr(dloss.shape), " must be a scalar for reduction mean/sum");
  int64_t rows = tg.t.numel;
  return [dloss, logits, dl, tg, red, rows] {
    auto [t, counted] = tg.get();
    const float *perRow = red == Reduction::None ? dloss.as<float>() : nullptr;
    float scalar = 0;
    if (red == Reduction::Mean)
      scalar = counted ? dloss.as<float>()[0] / (float)counted : 0.0f;
    else if (red == Reduction::Sum)
      scalar = dloss.as<float>()[0];
    cpu::crossEntropyGrad<float>(logits.as<float>(), t, perRow, scalar, dl.as<float>(), rows, tg.V,
                                 tg.ignore);
  };
}

} // namespace

void registerLossOps(OpTable &t) {
  t["cross_entropy"] = bindCrossEntropy;
  t["cross_entropy_grad"] = bindCrossEntropyGrad;
}

} // namespace pipemesh::rt
