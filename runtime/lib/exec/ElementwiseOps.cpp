//===- ElementwiseOps.cpp - binary, unary, cast and where -------------------===//
//
// f32 tensors go to the CPU kernels (numpy broadcasting there); comparisons
// of floats compute 0/1 in a float scratch and store it as i1 bytes; integer
// and i1 operands (index arithmetic, masks) take the generic loops here.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

#include <cmath>
#include <cstring>
#include <memory>

namespace pipemesh::rt {
namespace {

using cpu::Binary;
using cpu::Unary;

bool isComparison(Binary op) {
  return op == Binary::Equal || op == Binary::Less || op == Binary::And;
}

int64_t applyInt(Binary op, int64_t a, int64_t b) {
  switch (op) {
  case Binary::Add:
    return a + b;
  case Binary::Sub:
    return a - b;
  case Binary::Mul:
    return a * b;
  case Binary::Div:
    if (b == 0)
      fail("integer division by zero");
    return a / b;
  case Binary::Pow: {
    int64_t r = 1;
    for (int64_t i = 0; i < b; ++i)
      r *= a;
    return r;
  }
  case Binary::Max:
    return a > b ? a : b;
  case Binary::Equal:
    return a == b;
  case Binary::Less:
    return a < b;
  case Binary::And:
    return (a != 0) && (b != 0);
  }
  return 0;
}

template <Binary OP> Thunk bindBinary(OpContext &c) {
  c.expectCounts(2, 2, 1, 1);
  TensorRef a = c.in(0), b = c.in(1), o = c.out(0);
  if (a.dtype != b.dtype)
    c.error("operands have different element types (", dtypeName(a.dtype), " and ",
            dtypeName(b.dtype), ")");
  if (!ops::broadcastsTo(a.shape, o.shape) || !ops::broadcastsTo(b.shape, o.shape))
    c.error("operand shapes ", shapeStr(a.shape), " and ", shapeStr(b.shape),
            " do not broadcast to the result's ", shapeStr(o.shape));
  if (isComparison(OP))
    c.expectDType(o, DType::I1, "the result");
  else if (o.dtype != a.dtype)
    c.error("result is ", dtypeName(o.dtype), " but the operands are ", dtypeName(a.dtype));

  if (a.dtype == DType::F32 && !isComparison(OP))
    return [a, b, o] {
      cpu::binary<float>(OP, a.as<float>(), a.shape, b.as<float>(), b.shape, o.as<float>(),
                         o.shape);
    };
  if (a.dtype == DType::F32 && OP != Binary::And) {
    auto scratch = std::make_shared<std::vector<float>>(o.numel);
    return [a, b, o, scratch] {
      cpu::binary<float>(OP, a.as<float>(), a.shape, b.as<float>(), b.shape, scratch->data(),
                         o.shape);
      ops::convert(scratch->data(), DType::F32, o.data, DType::I1, o.numel);
    };
  }
  Dims sa = ops::broadcastStrides(a.shape, o.shape), sb = ops::broadcastStrides(b.shape, o.shape);
  bool floating = a.dtype == DType::F32 || a.dtype == DType::F64;
  return [a, b, o, sa, sb, floating] {
    ops::forEachIndex<2>(o.shape, {sa, sb}, [&](int64_t i, const std::array<int64_t, 2> &off) {
      if (floating) {
        double x = ops::loadAsDouble(a.data, a.dtype, off[0]);
        double y = ops::loadAsDouble(b.data, b.dtype, off[1]);
        double r = OP == Binary::Equal  ? x == y
                   : OP == Binary::Less ? x < y
                   : OP == Binary::And  ? (x != 0 && y != 0)
                   : OP == Binary::Add  ? x + y
                   : OP == Binary::Sub  ? x - y
                   : OP == Binary::Mul  ? x * y
                   : OP == Binary::Div  ? x / y
                   : OP == Binary::Pow  ? std::pow(x, y)
                                        : (x > y ? x : y);
        ops::storeFromDouble(o.data, o.dtype, i, r);
      } else {
        ops::storeFromInt(o.data, o.dtype, i,
                          applyInt(OP, ops::loadAsInt(a.data, a.dtype, off[0]),
                                   ops::loadAsInt(b.data, b.dtype, off[1])));
      }
    });
  };
}

template <Unary OP> Thunk bindUnary(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  if (x.numel != y.numel || x.dtype != y.dtype)
    c.error("result ", shapeStr(y.shape), "x", dtypeName(y.dtype), " differs from the operand ",
            shapeStr(x.shape), "x", dtypeName(x.dtype));
  if (OP == Unary::Not) {
    c.expectDType(x, DType::I1, "the operand");
    return [x, y] {
      const uint8_t *p = x.as<uint8_t>();
      uint8_t *q = y.as<uint8_t>();
      for (int64_t i = 0; i < x.numel; ++i)
        q[i] = !p[i];
    };
  }
  if (x.dtype == DType::F32)
    return [x, y] { cpu::unary<float>(OP, x.as<float>(), y.as<float>(), x.numel); };
  if (OP == Unary::Neg && (x.dtype == DType::I64 || x.dtype == DType::I32))
    return [x, y] {
      for (int64_t i = 0; i < x.numel; ++i)
        ops::storeFromInt(y.data, y.dtype, i, -ops::loadAsInt(x.data, x.dtype, i));
    };
  c.error("is not defined on ", dtypeName(x.dtype));
}

Thunk bindCast(OpContext &c) {
  c.expectCounts(1, 1, 1, 1);
  TensorRef x = c.in(0), y = c.out(0);
  if (x.numel != y.numel)
    c.error("result ", shapeStr(y.shape), " and operand ", shapeStr(x.shape), " differ in size");
  return [x, y] { ops::convert(x.data, x.dtype, y.data, y.dtype, x.numel); };
}

Thunk bindWhere(OpContext &c) {
  c.expectCounts(3, 3, 1, 1);
  TensorRef cond = c.in(0), x = c.in(1), y = c.in(2), o = c.out(0);
  c.expectDType(cond, DType::I1, "the condition");
  if (x.dtype != y.dtype || x.dtype != o.dtype)
    c.error("branches and result must share one element type (", dtypeName(x.dtype), ", ",
            dtypeName(y.dtype), ", ", dtypeName(o.dtype), ")");
  for (const TensorRef *t : {&cond, &x, &y})
    if (!ops::broadcastsTo(t->shape, o.shape))
      c.error("operand ", shapeStr(t->shape), " does not broadcast to the result's ",
              shapeStr(o.shape));
  if (x.dtype == DType::F32)
    return [cond, x, y, o] {
      cpu::where<float>(cond.as<uint8_t>(), cond.shape, x.as<float>(), x.shape, y.as<float>(),
                        y.shape, o.as<float>(), o.shape);
    };
  Dims sc = ops::broadcastStrides(cond.shape, o.shape);
  Dims sx = ops::broadcastStrides(x.shape, o.shape), sy = ops::broadcastStrides(y.shape, o.shape);
  size_t es = dtypeSize(o.dtype);
  return [cond, x, y, o, sc, sx, sy, es] {
    const uint8_t *cp = cond.as<uint8_t>();
    ops::forEachIndex<3>(o.shape, {sc, sx, sy}, [&](int64_t i, const std::array<int64_t, 3> &off) {
      const char *src = cp[off[0]] ? static_cast<const char *>(x.data) + off[1] * es
                                   : static_cast<const char *>(y.data) + off[2] * es;
      std::memcpy(static_cast<char *>(o.data) + i * es, src, es);
    });
  };
}

} // namespace

void registerElementwiseOps(OpTable &t) {
  t["add"] = bindBinary<Binary::Add>;
  t["sub"] = bindBinary<Binary::Sub>;
  t["mul"] = bindBinary<Binary::Mul>;
  t["div"] = bindBinary<Binary::Div>;
  t["pow"] = bindBinary<Binary::Pow>;
  t["max"] = bindBinary<Binary::Max>;
  t["equal"] = bindBinary<Binary::Equal>;
  t["less"] = bindBinary<Binary::Less>;
  t["and"] = bindBinary<Binary::And>;
  t["neg"] = bindUnary<Unary::Neg>;
  t["sqrt"] = bindUnary<Unary::Sqrt>;
  t["tanh"] = bindUnary<Unary::Tanh>;
  t["erf"] = bindUnary<Unary::Erf>;
  t["exp"] = bindUnary<Unary::Exp>;
  t["log"] = bindUnary<Unary::Log>;
  t["sigmoid"] = bindUnary<Unary::Sigmoid>;
  t["not"] = bindUnary<Unary::Not>;
  t["cast"] = bindCast;
  t["where"] = bindWhere;
}

} // namespace pipemesh::rt
