//===- CostModel.h - FLOPs, bytes and time of pmesh ops ---------*- C++ -*-===//
//
// The one cost model of PipeMesh, shared by --pmesh-partition, the schedule
// search and the simulator. For every pmesh op (forward, gradient and
// optimizer ops) it counts
//   - flops: floating-point operations the runtime's kernel performs
//     (a multiply-add is 2), and
//   - bytes: bytes the op moves to and from memory (every operand read once,
//     every result written once; a flash-style kernel never materialises
//     intermediates, so nothing else is counted).
// A Device (Hardware.h, MLIR-free) turns that into a time; kernelClass says
// which of its rooflines an op follows (GEMM-like or memory-bound).
//
// Counting conventions (what the CPU kernels in runtime/ do):
//   matmul            2 * M * N * K * batch (+ M * N * batch with a bias)
//   attention         2 * BH * visible * (D + Dv): q k^T and p v over the
//                     visible (query, key) pairs; visible = Tq * Tk without
//                     causal masking and about half of it with (the kernel
//                     skips hidden keys), so 4 * BH * Tq * Tk * D when D == Dv
//                     and not causal. The softmax's exps are not counted.
//   attention_grad    2 * BH * visible * (4 D + 3 Dv): the kernel recomputes
//                     the scores twice (flash-attention 2 style, two passes).
//   elementwise, layer_norm, gelu, softmax, cross_entropy, reductions: a few
//                     flops per element; they are bound by bytes on every
//                     device, which is what decides their time.
//   shape ops, embedding, slices: 0 flops, bytes only. get_param and constant
//                     move nothing themselves (their readers count the bytes).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_COSTMODEL_COSTMODEL_H
#define PIPEMESH_COSTMODEL_COSTMODEL_H

#include "pipemesh/CostModel/Hardware.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class Operation;
class Type;
} // namespace mlir

namespace pipemesh::cost {

/// FLOPs and bytes of one op; ops the model does not know count their operand
/// and result bytes and no flops. `pmesh.adamw` looks its parameters up in the
/// nearest symbol table.
OpCost opCost(mlir::Operation *op);

/// A weight gradient whose only use is its parameter's gradient accumulation
/// (an embedding_grad, or a matmul without bias: dW = X^T dY) is lowered with
/// it as one instruction that adds into the gradient: the embedding's scaled
/// rows (touching only the rows the ids name), the GEMM with alpha = scale and
/// beta = 1 (Megatron-LM's gradient-accumulation fusion). No temporary is
/// written, read back and added per micro-batch; opCost counts the work on
/// the producer (a fused GEMM also reads C) and nothing on the accumulation.
/// directlyAccumulated: the producer of an accumulate_grad lowered so, if any.
mlir::Operation *directlyAccumulated(mlir::Operation *accumulateGrad);
bool accumulatesDirectly(mlir::Operation *weightGrad);
/// GEMM-like (matmul, attention and its gradient) or memory-bound.
KernelClass kernelClass(mlir::Operation *op);
/// device.time(opCost(op), kernelClass(op)), in seconds.
double opTime(mlir::Operation *op, const Device &device);

/// Bytes of a statically shaped tensor value type (0 for anything else).
int64_t typeBytes(mlir::Type type);

//===----------------------------------------------------------------------===//
// Shape-level formulas, shared by opCost, by estimates of ops that do not
// exist yet (the loss --pmesh-autodiff will append) and by `pipemesh-sim
// --calibrate`. MLIR-free (lib/CostModel/ShapeCost.cpp, in PMeshHardware).
//===----------------------------------------------------------------------===//

/// Visible (query, key) pairs of one attention slice; causal hides key j from
/// query i when j > i + (Tk - Tq), a sliding window (window > 0) also when
/// j <= i + (Tk - Tq) - window.
int64_t attentionVisiblePairs(int64_t tq, int64_t tk, bool causal, int64_t window = 0);
/// Attention forward flops: 2 * bh * visible * (d + dv).
double attentionFlops(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal,
                      int64_t window = 0);
/// Attention backward flops (the runtime's two-pass kernel): 2 * bh * visible * (4 d + 3 dv).
double attentionGradFlops(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal,
                          int64_t window = 0);
/// Matmul flops: 2 * m * n * k * batch, plus m * n * batch for a bias.
double matmulFlops(int64_t batch, int64_t m, int64_t n, int64_t k, bool bias);
/// cross_entropy over logits [rows, vocab] (elementBytes per logit), forward
/// or its gradient.
OpCost crossEntropyCost(int64_t rows, int64_t vocab, int64_t elementBytes, bool grad);

} // namespace pipemesh::cost

#endif // PIPEMESH_COSTMODEL_COSTMODEL_H
