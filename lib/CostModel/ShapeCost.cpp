//===- ShapeCost.cpp - FLOPs and bytes from shapes (MLIR-free) ------------===//
//
// The shape-level formulas of CostModel.h: opCost (CostModel.cpp) counts pmesh
// ops with them, and `pipemesh-sim --calibrate` counts the kernels it times
// with them, so a calibrated rate is a rate of what the plans count. Part of
// PMeshHardware (LLVM Support only).
//
//===----------------------------------------------------------------------===//
#include "pipemesh/CostModel/CostModel.h"

#include <algorithm>

using namespace pipemesh;
using namespace pipemesh::cost;

int64_t cost::attentionVisiblePairs(int64_t tq, int64_t tk, bool causal, int64_t window) {
  if (!causal)
    return tq * tk;
  // Query i sees keys [max(end - window, 0), end), end = min(i + off + 1, tk),
  // off = tk - tq.
  int64_t off = tk - tq, total = 0;
  for (int64_t i = 0; i < tq; ++i) {
    int64_t end = std::clamp<int64_t>(i + off + 1, 0, tk);
    total += window > 0 ? std::min(end, window) : end;
  }
  return total;
}

double cost::attentionFlops(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                            bool causal, int64_t window) {
  return 2.0 * bh * (double)attentionVisiblePairs(tq, tk, causal, window) * (d + dv);
}

double cost::attentionGradFlops(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv,
                                bool causal, int64_t window) {
  // Pass 1: scores (d), dP = dO v^T (dv), dq = dS k (d); pass 2: scores (d),
  // dP (dv), dv = P^T dO (dv), dk = dS^T q (d).
  return 2.0 * bh * (double)attentionVisiblePairs(tq, tk, causal, window) * (4.0 * d + 3.0 * dv);
}

double cost::matmulFlops(int64_t batch, int64_t m, int64_t n, int64_t k, bool bias) {
  double mn = (double)batch * m * n;
  return 2.0 * mn * k + (bias ? mn : 0.0);
}

OpCost cost::crossEntropyCost(int64_t rows, int64_t vocab, int64_t elementBytes, bool grad) {
  double n = (double)rows * vocab;
  OpCost c;
  // Forward: row max, exp-sum, log, pick the target (about 4 flops a logit);
  // gradient: softmax minus one-hot, scaled (about 5 flops a logit).
  c.flops = (grad ? 5.0 : 4.0) * n;
  c.bytes = (grad ? 2.0 : 1.0) * n * elementBytes + 8.0 * rows;
  return c;
}
