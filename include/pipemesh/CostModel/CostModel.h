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
// A Device turns that into a time: max(flops / peak, bytes / bandwidth) /
// efficiency, a roofline with one efficiency factor.
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

/// Work of one op (or a sum of ops).
struct OpCost {
  double flops = 0;
  double bytes = 0;
  OpCost &operator+=(const OpCost &o) {
    flops += o.flops;
    bytes += o.bytes;
    return *this;
  }
  friend OpCost operator+(OpCost a, const OpCost &b) { return a += b; }
  friend OpCost operator*(OpCost a, double s) {
    a.flops *= s;
    a.bytes *= s;
    return a;
  }
};

/// A compute device as a roofline: peak FLOP/s, memory bandwidth and the
/// fraction of both that kernels reach.
struct Device {
  std::string name;
  double peakFlops = 0;    // FLOP/s at the runtime's precision (fp32)
  double memBandwidth = 0; // bytes/s
  double efficiency = 1;   // in (0, 1]

  /// This development machine: 2 AMD EPYC cores with AVX2/FMA, OpenBLAS sgemm
  /// peaks near 150 GFLOP/s, streaming bandwidth about 20 GB/s.
  static Device cpu();
  /// Placeholders from the data sheets (fp32 without tensor cores, since the
  /// runtime trains in fp32); to be replaced by calibrated values (issue 5).
  static Device a100();
  static Device h100();
  /// "cpu", "a100", "h100"; nullopt for anything else.
  static std::optional<Device> byName(llvm::StringRef name);
  /// The names byName accepts, for error messages.
  static std::vector<std::string> presetNames();

  /// Time of `c` on this device, in seconds.
  double time(const OpCost &c) const;
};

/// FLOPs and bytes of one op; ops the model does not know count their operand
/// and result bytes and no flops. `pmesh.adamw` looks its parameters up in the
/// nearest symbol table.
OpCost opCost(mlir::Operation *op);
/// max(flops / peak, bytes / bandwidth) / efficiency, in seconds.
double opTime(mlir::Operation *op, const Device &device);

/// Bytes of a statically shaped tensor value type (0 for anything else).
int64_t typeBytes(mlir::Type type);

//===----------------------------------------------------------------------===//
// Shape-level formulas, shared by opCost and by estimates of ops that do not
// exist yet (the loss --pmesh-autodiff will append).
//===----------------------------------------------------------------------===//

/// Visible (query, key) pairs of one attention slice; causal hides key j from
/// query i when j > i + (Tk - Tq).
int64_t attentionVisiblePairs(int64_t tq, int64_t tk, bool causal);
/// Attention forward flops: 2 * bh * visible * (d + dv).
double attentionFlops(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal);
/// Attention backward flops (the runtime's two-pass kernel): 2 * bh * visible * (4 d + 3 dv).
double attentionGradFlops(int64_t bh, int64_t tq, int64_t tk, int64_t d, int64_t dv, bool causal);
/// Matmul flops: 2 * m * n * k * batch, plus m * n * batch for a bias.
double matmulFlops(int64_t batch, int64_t m, int64_t n, int64_t k, bool bias);
/// cross_entropy over logits [rows, vocab] (elementBytes per logit), forward
/// or its gradient.
OpCost crossEntropyCost(int64_t rows, int64_t vocab, int64_t elementBytes, bool grad);

} // namespace pipemesh::cost

#endif // PIPEMESH_COSTMODEL_COSTMODEL_H
