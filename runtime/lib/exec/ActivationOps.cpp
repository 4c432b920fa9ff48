//===- ActivationOps.cpp - gelu, softmax, log_softmax and their grads -------===//
//
// The softmax kernels work on rows (the last axis). For another axis the
// operands are viewed as [outer, A, inner], transposed to [outer, inner, A]
// in a scratch buffer, processed, and transposed back.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <memory>

namespace pipemesh::rt {
namespace {

bool approximateTanh(OpContext &c) {
  std::string a = c.str("approximate", "none");
  if (a != "none" && a != "tanh")
    c.error("attribute 'approximate' must be \"none\" or \"tanh\", got \"", a, "\"");
  return a == "tanh";
}

Thunk bindGelu(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  c.expectFloat(x, "the input");
  c.expectShape(y, x.shape, "the result");
  c.expectFloat(y, "the result");
  bool tanhApprox = approximateTanh(c);
  return
      [x, y, tanhApprox] { cpu::gelu<float>(x.as<float>(), y.as<float>(), x.numel, tanhApprox); };
}

Thunk bindGeluGrad(OpContext &c) {
  c.expectCounts(2, 2, 1, 1);
  TensorRef dy = c.in(0), x = c.in(1), dx = c.out(0);
  for (const TensorRef *t : {&dy, &x, &dx})
    c.expectFloat(*t, "operand");
  c.expectShape(dy, x.shape, "dy");
  c.expectShape(dx, x.shape, "dx");
  bool tanhApprox = approximateTanh(c);
  return [dy, x, dx, tanhApprox] {
    cpu::geluGrad<float>(dy.as<float>(), x.as<float>(), dx.as<float>(), x.numel, tanhApprox);
  };
}

/// [outer, A, inner] view of a tensor around `axis`.
struct AxisView {
  int64_t outer, len, inner;
  Dims shape3() const { return {outer, len, inner}; }
  Dims shapeT() const { return {outer, inner, len}; }
};

AxisView axisView(OpContext &c, const TensorRef &x) {
  int64_t ax = c.axis(c.i64("axis", -1), x.rank());
  return {ops::product(x.shape, 0, ax), x.shape[ax], ops::product(x.shape, ax + 1, x.shape.size())};
}

using RowFn = void (*)(const float *, float *, int64_t, int64_t);
using RowGradFn = void (*)(const float *, const float *, float *, int64_t, int64_t);

template <bool LOG> Thunk bindSoftmax(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  c.expectFloat(x, "the input");
  c.expectShape(y, x.shape, "the result");
  c.expectFloat(y, "the result");
  AxisView v = axisView(c, x);
  RowFn fn = LOG ? cpu::logSoftmax<float> : cpu::softmax<float>;
  if (v.inner == 1)
    return [x, y, v, fn] { fn(x.as<float>(), y.as<float>(), v.outer, v.len); };
  auto a = std::make_shared<std::vector<float>>(x.numel),
       b = std::make_shared<std::vector<float>>(x.numel);
  return [x, y, v, fn, a, b] {
    cpu::transpose<float>(x.as<float>(), v.shape3(), {0, 2, 1}, a->data());
    fn(a->data(), b->data(), v.outer * v.inner, v.len);
    cpu::transpose<float>(b->data(), v.shapeT(), {0, 2, 1}, y.as<float>());
  };
}

template <bool LOG> Thunk bindSoftmaxGrad(OpContext &c) {
  c.expectCounts(2, 2, 1, 1);
  TensorRef dy = c.in(0), y = c.in(1), dx = c.out(0);
  for (const TensorRef *t : {&dy, &y, &dx})
    c.expectFloat(*t, "operand");
  c.expectShape(dy, y.shape, "dy");
  c.expectShape(dx, y.shape, "dx");
  AxisView v = axisView(c, y);
  RowGradFn fn = LOG ? cpu::logSoftmaxGrad<float> : cpu::softmaxGrad<float>;
  if (v.inner == 1)
    return
        [dy, y, dx, v, fn] { fn(dy.as<float>(), y.as<float>(), dx.as<float>(), v.outer, v.len); };
  auto a = std::make_shared<std::vector<float>>(y.numel),
       b = std::make_shared<std::vector<float>>(y.numel),
       r = std::make_shared<std::vector<float>>(y.numel);
  return [dy, y, dx, v, fn, a, b, r] {
    cpu::transpose<float>(dy.as<float>(), v.shape3(), {0, 2, 1}, a->data());
    cpu::transpose<float>(y.as<float>(), v.shape3(), {0, 2, 1}, b->data());
    fn(a->data(), b->data(), r->data(), v.outer * v.inner, v.len);
    cpu::transpose<float>(r->data(), v.shapeT(), {0, 2, 1}, dx.as<float>());
  };
}

} // namespace

void registerActivationOps(OpTable &t) {
  t["gelu"] = bindGelu;
  t["gelu_grad"] = bindGeluGrad;
  t["softmax"] = bindSoftmax<false>;
  t["log_softmax"] = bindSoftmax<true>;
  t["softmax_grad"] = bindSoftmaxGrad<false>;
  t["log_softmax_grad"] = bindSoftmaxGrad<true>;
}

} // namespace pipemesh::rt
