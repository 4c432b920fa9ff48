//===- MatmulOp.cpp - batched matmul with broadcasting ----------------------===//
//
// pmesh.matmul: result = op(a) @ op(b) (+ bias), batch dims broadcasting as
// in numpy. The cases map to as few BLAS calls as possible:
//   b without batch, a not transposed: one GEMM, a's batch dims collapsed into M;
//   b without batch, a transposed:     batched, strideB = 0;
//   a without batch:                   batched, strideA = 0;
//   equal batch dims:                  batched, dense strides;
//   anything else (true broadcast):    one call per output batch.
// "accumulate": the result is a parameter's gradient, to which the product
// times "scale" is added (beta = 1, alpha = scale): the compiler's lowering of
// a weight gradient and its accumulation as one instruction.
//
//===----------------------------------------------------------------------===//
#include "OpContext.h"
#include "OpUtils.h"

#include "pipemesh/runtime/CpuKernels.h"

namespace pipemesh::rt {
namespace {

Thunk bindMatmul(OpContext &c) {
  c.expectCounts(2, 3, 1, 1);
  TensorRef a = c.in(0), b = c.in(1), o = c.out(0);
  c.expectFloat(a, "a");
  c.expectFloat(b, "b");
  c.expectFloat(o, "the result");
  bool transA = c.boolean("transpose_a", false), transB = c.boolean("transpose_b", false);
  if (a.rank() < 2 || b.rank() < 2 || o.rank() < 2)
    c.error("operands and result must have rank >= 2 (", shapeStr(a.shape), ", ", shapeStr(b.shape),
            " -> ", shapeStr(o.shape), ")");
  int64_t M = a.shape[a.rank() - 2], K = a.shape[a.rank() - 1];
  if (transA)
    std::swap(M, K);
  int64_t Kb = b.shape[b.rank() - 2], N = b.shape[b.rank() - 1];
  if (transB)
    std::swap(Kb, N);
  if (K != Kb)
    c.error("contracting dims differ: ", shapeStr(a.shape), transA ? "^T" : "", " @ ",
            shapeStr(b.shape), transB ? "^T" : "");
  Dims aBatch(a.shape.begin(), a.shape.end() - 2), bBatch(b.shape.begin(), b.shape.end() - 2);
  Dims oBatch(o.shape.begin(), o.shape.end() - 2);
  auto batch = ops::broadcastShape(aBatch, bBatch);
  if (!batch || *batch != oBatch || o.shape[o.rank() - 2] != M || o.shape[o.rank() - 1] != N)
    c.error("result ", shapeStr(o.shape), " does not match ", shapeStr(a.shape), transA ? "^T" : "",
            " @ ", shapeStr(b.shape), transB ? "^T" : "");
  const float *bias = nullptr;
  if (c.numIn() == 3) {
    TensorRef t = c.in(2);
    c.expectFloat(t, "the bias");
    if (t.numel != N)
      c.error("bias ", shapeStr(t.shape), " must have the output's last dim ", N);
    bias = t.as<float>();
  }
  const bool accumulate = c.flag("accumulate", false);
  if (accumulate && bias)
    c.error("accumulate cannot add a bias into the gradient it accumulates into");
  // "scale" multiplies the product added into the gradient; on a plain
  // matmul it would be silently dropped, so it is refused there.
  const float scale = (float)c.field("scale", 1.0);
  if (!accumulate && scale != 1.0f)
    c.error("\"scale\" ", scale, " applies only to an accumulating matmul (\"accumulate\": true)");
  const float alpha = accumulate ? scale : 1.0f;
  const float *A = a.as<float>(), *B = b.as<float>();
  float *C = o.as<float>();
  int64_t aCount = ops::product(aBatch, 0, aBatch.size());
  int64_t bCount = ops::product(bBatch, 0, bBatch.size());
  int64_t oCount = ops::product(oBatch, 0, oBatch.size());

  // One cpu::matmul call over `batch` GEMMs of `rows` rows (strides sA, sB).
  auto strided = [=](int64_t batch, int64_t rows, bool tA, int64_t sA, int64_t sB) -> Thunk {
    return [=] {
      cpu::matmul<float>(A, B, bias, C, batch, rows, N, K, tA, transB, sA, sB, alpha, accumulate);
    };
  };
  if (bCount == 1 && !transA)
    return strided(1, aCount * M, false, 0, 0);
  if (bCount == 1)
    return strided(aCount, M, true, M * K, 0);
  if (aCount == 1)
    return strided(bCount, M, transA, 0, K * N);
  if (aCount == oCount && bCount == oCount)
    return strided(oCount, M, transA, M * K, K * N);
  Dims sa = ops::broadcastStrides(aBatch, oBatch), sb = ops::broadcastStrides(bBatch, oBatch);
  return [=] {
    ops::forEachIndex<2>(oBatch, {sa, sb}, [&](int64_t i, const std::array<int64_t, 2> &off) {
      cpu::matmul<float>(A + off[0] * M * K, B + off[1] * K * N, bias, C + i * M * N, 1, M, N, K,
                         transA, transB, 0, 0, alpha, accumulate);
    });
  };
}

} // namespace

void registerMatmulOp(OpTable &t) { t["matmul"] = bindMatmul; }

} // namespace pipemesh::rt
