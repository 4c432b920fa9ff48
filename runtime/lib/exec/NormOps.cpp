//===- NormOps.cpp - layer_norm and layer_norm_grad -------------------------===//
//
// Normalization runs over the trailing dims from `axis`: rows are the
// product of the dims before it, columns the product from it on; scale and
// bias hold one value per column.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <memory>

namespace pipemesh::rt {
namespace {

struct RowsCols {
  int64_t rows, cols;
};

RowsCols rowsCols(OpContext &c, const TensorRef &x) {
  int64_t axis = c.axis(c.i64("axis", -1), x.rank());
  return {ops::product(x.shape, 0, axis), ops::product(x.shape, axis, x.shape.size())};
}

Thunk bindLayerNorm(OpContext &c) {
  c.expectCounts(2, 3, 1, 1);
  TensorRef x = c.in(0), g = c.in(1), y = c.out(0);
  c.expectFloat(x, "the input");
  c.expectFloat(g, "the scale");
  c.expectShape(y, x.shape, "the result");
  c.expectFloat(y, "the result");
  RowsCols rc = rowsCols(c, x);
  if (g.numel != rc.cols)
    c.error("scale ", shapeStr(g.shape), " must hold ", rc.cols, " values (the normalized dims)");
  float eps = (float)c.f64("epsilon", 1e-5);
  std::shared_ptr<std::vector<float>> zeros;
  const float *bias = nullptr;
  if (c.numIn() == 3) {
    TensorRef b = c.in(2);
    c.expectFloat(b, "the bias");
    if (b.numel != rc.cols)
      c.error("bias ", shapeStr(b.shape), " must hold ", rc.cols, " values");
    bias = b.as<float>();
  } else {
    zeros = std::make_shared<std::vector<float>>(rc.cols, 0.0f);
    bias = zeros->data();
  }
  return [x, g, y, bias, zeros, rc, eps] {
    cpu::layerNorm<float>(x.as<float>(), g.as<float>(), bias, y.as<float>(), rc.rows, rc.cols, eps);
  };
}

Thunk bindLayerNormGrad(OpContext &c) {
  c.expectCounts(3, 3, 2, 3);
  TensorRef dy = c.in(0), x = c.in(1), g = c.in(2), dx = c.out(0), dg = c.out(1);
  for (const TensorRef *t : {&dy, &x, &g, &dx, &dg})
    c.expectFloat(*t, "operand");
  c.expectShape(dy, x.shape, "dy");
  c.expectShape(dx, x.shape, "dx");
  RowsCols rc = rowsCols(c, x);
  if (g.numel != rc.cols || dg.numel != rc.cols)
    c.error("scale and dscale must hold ", rc.cols, " values");
  float *db = nullptr;
  if (c.numOut() == 3) {
    TensorRef b = c.out(2);
    c.expectFloat(b, "dbias");
    if (b.numel != rc.cols)
      c.error("dbias must hold ", rc.cols, " values");
    db = b.as<float>();
  }
  float eps = (float)c.f64("epsilon", 1e-5);
  return [dy, x, g, dx, dg, db, rc, eps] {
    cpu::layerNormGrad<float>(dy.as<float>(), x.as<float>(), g.as<float>(), dx.as<float>(),
                              dg.as<float>(), db, rc.rows, rc.cols, eps);
  };
}

} // namespace

void registerNormOps(OpTable &t) {
  t["layer_norm"] = bindLayerNorm;
  t["layer_norm_grad"] = bindLayerNormGrad;
}

} // namespace pipemesh::rt
