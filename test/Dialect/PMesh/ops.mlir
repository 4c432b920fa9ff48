// RUN: pipemesh-opt %s | pipemesh-opt | FileCheck %s
// RUN: pipemesh-opt %s --mlir-print-op-generic | pipemesh-opt | FileCheck %s

// Round trip of every pmesh op, with its optional operands and attributes
// both present and absent. Attributes explicitly set to their default value
// are elided by the printer.

//===----------------------------------------------------------------------===//
// Parameters and constants
//===----------------------------------------------------------------------===//

// CHECK: pmesh.param @wte : tensor<16x8xf32> {source = "transformer.wte.weight"}
// CHECK: pmesh.param @bias : tensor<8xf32>{{$}}
// CHECK: pmesh.param @shared : tensor<16x8xf32> {source = "transformer.wte.weight"}
pmesh.param @wte : tensor<16x8xf32> {source = "transformer.wte.weight"}
pmesh.param @bias : tensor<8xf32>
pmesh.param @shared : tensor<16x8xf32> {source = "transformer.wte.weight"}

// CHECK-LABEL: func.func @params_and_constants
func.func @params_and_constants() -> (tensor<16x8xf32>, tensor<8xf32>) {
  // CHECK: pmesh.get_param @wte : tensor<16x8xf32>
  %0 = pmesh.get_param @wte : tensor<16x8xf32>
  // CHECK: pmesh.get_param @bias : tensor<8xf32>
  %1 = pmesh.get_param @bias : tensor<8xf32>
  // CHECK: pmesh.constant dense<1.000000e+00> : tensor<2x3xf32>
  %2 = pmesh.constant dense<1.0> : tensor<2x3xf32>
  // CHECK: pmesh.constant dense<[1, 2, 3]> : tensor<3xi64>
  %3 = pmesh.constant dense<[1, 2, 3]> : tensor<3xi64>
  // CHECK: pmesh.constant dense<[true, false]> : tensor<2xi1>
  %4 = pmesh.constant dense<[true, false]> : tensor<2xi1>
  // CHECK: pmesh.constant dense<5.000000e-01> : tensor<bf16>
  %5 = pmesh.constant dense<0.5> : tensor<bf16>
  // CHECK: pmesh.constant {note = "x"} dense<0> : tensor<4xi32>
  %6 = pmesh.constant {note = "x"} dense<0> : tensor<4xi32>
  return %0, %1 : tensor<16x8xf32>, tensor<8xf32>
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @binary(
// CHECK-SAME: %[[A:.*]]: tensor<2x3xf32>, %[[B:.*]]: tensor<3xf32>, %[[C:.*]]: tensor<2x1xi1>, %[[D:.*]]: tensor<1x3xi1>)
func.func @binary(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %c: tensor<2x1xi1>, %d: tensor<1x3xi1>) {
  // CHECK: pmesh.add %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %0 = pmesh.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: pmesh.sub %[[B]], %[[A]] : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = pmesh.sub %b, %a : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: pmesh.mul %[[A]], %[[A]] : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = pmesh.mul %a, %a : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: pmesh.div %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %3 = pmesh.div %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: pmesh.pow %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %4 = pmesh.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: pmesh.max %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %5 = pmesh.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: pmesh.equal %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %6 = pmesh.equal %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // CHECK: pmesh.less %[[A]], %[[B]] : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  %7 = pmesh.less %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xi1>
  // Both operands broadcast: 2x1 and 1x3 give 2x3.
  // CHECK: pmesh.and %[[C]], %[[D]] : (tensor<2x1xi1>, tensor<1x3xi1>) -> tensor<2x3xi1>
  %8 = pmesh.and %c, %d : (tensor<2x1xi1>, tensor<1x3xi1>) -> tensor<2x3xi1>
  return
}

// CHECK-LABEL: func.func @unary(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>, %[[I:.*]]: tensor<4xi32>, %[[M:.*]]: tensor<4xi1>, %[[S:.*]]: tensor<f16>)
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<4xi32>, %m: tensor<4xi1>, %s: tensor<f16>) {
  // CHECK: pmesh.neg %[[X]] : tensor<2x3xf32>
  %0 = pmesh.neg %x : tensor<2x3xf32>
  // CHECK: pmesh.neg %[[I]] : tensor<4xi32>
  %1 = pmesh.neg %i : tensor<4xi32>
  // CHECK: pmesh.sqrt %[[X]] : tensor<2x3xf32>
  %2 = pmesh.sqrt %x : tensor<2x3xf32>
  // CHECK: pmesh.tanh %[[X]] : tensor<2x3xf32>
  %3 = pmesh.tanh %x : tensor<2x3xf32>
  // CHECK: pmesh.erf %[[X]] : tensor<2x3xf32>
  %4 = pmesh.erf %x : tensor<2x3xf32>
  // CHECK: pmesh.exp %[[S]] : tensor<f16>
  %5 = pmesh.exp %s : tensor<f16>
  // CHECK: pmesh.log %[[X]] : tensor<2x3xf32>
  %6 = pmesh.log %x : tensor<2x3xf32>
  // CHECK: pmesh.not %[[M]] : tensor<4xi1>
  %7 = pmesh.not %m : tensor<4xi1>
  return
}

// CHECK-LABEL: func.func @cast_and_where(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>, %[[M:.*]]: tensor<2x3xi1>, %[[C:.*]]: tensor<3xi1>, %[[S:.*]]: tensor<f32>)
func.func @cast_and_where(%x: tensor<2x3xf32>, %m: tensor<2x3xi1>, %c: tensor<3xi1>, %s: tensor<f32>) {
  // CHECK: pmesh.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xbf16>
  %0 = pmesh.cast %x : tensor<2x3xf32> -> tensor<2x3xbf16>
  // CHECK: pmesh.cast %[[M]] : tensor<2x3xi1> -> tensor<2x3xf32>
  %1 = pmesh.cast %m : tensor<2x3xi1> -> tensor<2x3xf32>
  // CHECK: pmesh.where %[[M]], %[[X]], %[[X]] : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = pmesh.where %m, %x, %x : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // The condition and both values broadcast.
  // CHECK: pmesh.where %[[C]], %[[X]], %[[S]] : (tensor<3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %3 = pmesh.where %c, %x, %s : (tensor<3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reductions(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
func.func @reductions(%x: tensor<2x3x4xf32>) {
  // keepdims defaults to true.
  // CHECK: pmesh.reduce_mean %[[X]] axes = [-1] : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
  %0 = pmesh.reduce_mean %x axes = [-1] : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
  // CHECK: pmesh.reduce_mean %[[X]] axes = [0, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<3xf32>
  %1 = pmesh.reduce_mean %x axes = [0, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<3xf32>
  // CHECK: pmesh.reduce_sum %[[X]] axes = [1] : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  %2 = pmesh.reduce_sum %x axes = [1] {keepdims = true} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  // CHECK: pmesh.reduce_sum %[[X]] axes = [0, 1, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  %3 = pmesh.reduce_sum %x axes = [0, 1, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  return
}

//===----------------------------------------------------------------------===//
// Fused neural-network ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul(
// CHECK-SAME: %[[A:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[WT:.*]]: tensor<16x8xf32>, %[[BIAS:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<2x4x8xf32>, %[[C:.*]]: tensor<2x16x4xf32>)
func.func @matmul(%a: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %wt: tensor<16x8xf32>,
                  %bias: tensor<16xf32>, %b: tensor<2x4x8xf32>, %c: tensor<2x16x4xf32>) {
  // A 2-D weight shared by every batch, no bias.
  // CHECK: pmesh.matmul %[[A]], %[[W]] : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %0 = pmesh.matmul %a, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  // CHECK: pmesh.matmul %[[A]], %[[W]] bias %[[BIAS]] : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %1 = pmesh.matmul %a, %w bias %bias : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // CHECK: pmesh.matmul %[[A]], %[[WT]] bias %[[BIAS]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %2 = pmesh.matmul %a, %wt bias %bias {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  // (4x8)^T @ 4x8 per batch.
  // CHECK: pmesh.matmul %[[A]], %[[B]] {transpose_a = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x8x8xf32>
  %3 = pmesh.matmul %a, %b {transpose_a = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x8x8xf32>
  // A flag set to its default (false) is elided.
  // CHECK: pmesh.matmul %[[A]], %[[B]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %4 = pmesh.matmul %a, %b {transpose_a = false, transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  // (4x8)^T @ (16x4)^T per batch.
  // CHECK: pmesh.matmul %[[A]], %[[C]] {transpose_a = true, transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x16x4xf32>) -> tensor<2x8x16xf32>
  %5 = pmesh.matmul %a, %c {transpose_a = true, transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x16x4xf32>) -> tensor<2x8x16xf32>
  return
}

// CHECK-LABEL: func.func @normalization(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>, %[[G:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>, %[[G2:.*]]: tensor<3x4xf32>)
func.func @normalization(%x: tensor<2x3x4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %g2: tensor<3x4xf32>) {
  // CHECK: pmesh.layer_norm %[[X]], %[[G]] : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %0 = pmesh.layer_norm %x, %g : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: pmesh.layer_norm %[[X]], %[[G]], %[[B]] : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %1 = pmesh.layer_norm %x, %g, %b : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: pmesh.layer_norm %[[X]], %[[G2]], %[[B]] {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %2 = pmesh.layer_norm %x, %g2, %b {axis = 1 : i64, epsilon = 1.0e-6 : f32} : (tensor<2x3x4xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: pmesh.layer_norm %[[X]], %[[G]] {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  %3 = pmesh.layer_norm %x, %g {axis = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  // CHECK: pmesh.gelu %[[X]] : tensor<2x3x4xf32>
  %4 = pmesh.gelu %x : tensor<2x3x4xf32>
  // CHECK: pmesh.gelu %[[X]] : tensor<2x3x4xf32>
  %5 = pmesh.gelu %x {approximate = "none"} : tensor<2x3x4xf32>
  // CHECK: pmesh.gelu %[[X]] {approximate = "tanh"} : tensor<2x3x4xf32>
  %6 = pmesh.gelu %x {approximate = "tanh"} : tensor<2x3x4xf32>
  // CHECK: pmesh.softmax %[[X]] : tensor<2x3x4xf32>
  %7 = pmesh.softmax %x : tensor<2x3x4xf32>
  // CHECK: pmesh.softmax %[[X]] {axis = 0 : i64} : tensor<2x3x4xf32>
  %8 = pmesh.softmax %x {axis = 0 : i64} : tensor<2x3x4xf32>
  // CHECK: pmesh.log_softmax %[[X]] : tensor<2x3x4xf32>
  %9 = pmesh.log_softmax %x : tensor<2x3x4xf32>
  // CHECK: pmesh.log_softmax %[[X]] {axis = -2 : i64} : tensor<2x3x4xf32>
  %10 = pmesh.log_softmax %x {axis = -2 : i64} : tensor<2x3x4xf32>
  return
}

// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x10x16xf32>, %[[V:.*]]: tensor<2x4x10x32xf32>, %[[MASK:.*]]: tensor<8x10xf32>)
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x10x16xf32>, %v: tensor<2x4x10x32xf32>,
                     %mask: tensor<8x10xf32>) {
  // causal defaults to true.
  // CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>) -> tensor<2x4x8x32xf32>
  %0 = pmesh.attention %q, %k, %v {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>) -> tensor<2x4x8x32xf32>
  // CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[MASK]] {causal = false, scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>, tensor<8x10xf32>) -> tensor<2x4x8x32xf32>
  %1 = pmesh.attention %q, %k, %v mask %mask {scale = 0.25 : f32, causal = false} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>, tensor<8x10xf32>) -> tensor<2x4x8x32xf32>
  // CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[MASK]] {scale = 1.000000e+00 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>, tensor<8x10xf32>) -> tensor<2x4x8x32xf32>
  %2 = pmesh.attention %q, %k, %v mask %mask {scale = 1.0 : f32, causal = true} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>, tensor<8x10xf32>) -> tensor<2x4x8x32xf32>
  // A sliding window of 3 keys; window = 0 (no limit) is the default.
  // CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32, window = 3 : i64}
  %3 = pmesh.attention %q, %k, %v {scale = 1.0 : f32, window = 3} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>) -> tensor<2x4x8x32xf32>
  // CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32} :
  %4 = pmesh.attention %q, %k, %v {scale = 1.0 : f32, window = 0} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>) -> tensor<2x4x8x32xf32>
  // Soft-capped scores (Gemma 2); softcap = 0 (none) is the default.
  // CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32, softcap = 5.000000e+01 : f32} :
  %5 = pmesh.attention %q, %k, %v {scale = 1.0 : f32, softcap = 50.0 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x10x16xf32>, tensor<2x4x10x32xf32>) -> tensor<2x4x8x32xf32>
  return
}

// Grouped-query attention: k has 2 heads for q's 4, v one (multi-query).
// CHECK-LABEL: func.func @attention_grouped(
// CHECK: pmesh.attention %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x10x16xf32>, tensor<2x1x10x32xf32>) -> tensor<2x4x8x32xf32>
// CHECK: pmesh.attention_grad
func.func @attention_grouped(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x10x16xf32>,
                             %v: tensor<2x1x10x32xf32>) {
  %0 = pmesh.attention %q, %k, %v {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x10x16xf32>, tensor<2x1x10x32xf32>) -> tensor<2x4x8x32xf32>
  %1:3 = pmesh.attention_grad %0, %q, %k, %v {scale = 0.25 : f32} : (tensor<2x4x8x32xf32>, tensor<2x4x8x16xf32>, tensor<2x2x10x16xf32>, tensor<2x1x10x32xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x2x10x16xf32>, tensor<2x1x10x32xf32>)
  return
}

// CHECK-LABEL: func.func @embedding_and_loss(
// CHECK-SAME: %[[TABLE:.*]]: tensor<50x8xf32>, %[[IDS:.*]]: tensor<2x4xi64>, %[[IDS32:.*]]: tensor<2x4xi32>, %[[LOGITS:.*]]: tensor<2x4x50xf32>)
func.func @embedding_and_loss(%table: tensor<50x8xf32>, %ids: tensor<2x4xi64>, %ids32: tensor<2x4xi32>,
                              %logits: tensor<2x4x50xf32>) {
  // CHECK: pmesh.embedding %[[TABLE]], %[[IDS]] : (tensor<50x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %0 = pmesh.embedding %table, %ids : (tensor<50x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // CHECK: pmesh.embedding %[[TABLE]], %[[IDS32]] : (tensor<50x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  %1 = pmesh.embedding %table, %ids32 : (tensor<50x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
  // reduction defaults to "mean" and ignore_index to -100.
  // CHECK: pmesh.cross_entropy %[[LOGITS]], %[[IDS]] : (tensor<2x4x50xf32>, tensor<2x4xi64>) -> tensor<f32>
  %2 = pmesh.cross_entropy %logits, %ids : (tensor<2x4x50xf32>, tensor<2x4xi64>) -> tensor<f32>
  // CHECK: pmesh.cross_entropy %[[LOGITS]], %[[IDS]] : (tensor<2x4x50xf32>, tensor<2x4xi64>) -> tensor<f32>
  %3 = pmesh.cross_entropy %logits, %ids {reduction = "mean", ignore_index = -100 : i64} : (tensor<2x4x50xf32>, tensor<2x4xi64>) -> tensor<f32>
  // CHECK: pmesh.cross_entropy %[[LOGITS]], %[[IDS32]] {ignore_index = 0 : i64, reduction = "sum"} : (tensor<2x4x50xf32>, tensor<2x4xi32>) -> tensor<f32>
  %4 = pmesh.cross_entropy %logits, %ids32 {reduction = "sum", ignore_index = 0 : i64} : (tensor<2x4x50xf32>, tensor<2x4xi32>) -> tensor<f32>
  // CHECK: pmesh.cross_entropy %[[LOGITS]], %[[IDS]] {reduction = "none"} : (tensor<2x4x50xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  %5 = pmesh.cross_entropy %logits, %ids {reduction = "none"} : (tensor<2x4x50xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @shape_ops(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>, %[[Y:.*]]: tensor<2x5x4xf32>, %[[S:.*]]: tensor<f32>, %[[V:.*]]: tensor<3xi64>)
func.func @shape_ops(%x: tensor<2x3x4xf32>, %y: tensor<2x5x4xf32>, %s: tensor<f32>, %v: tensor<3xi64>) {
  // CHECK: pmesh.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %0 = pmesh.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  // CHECK: pmesh.reshape %[[S]] : tensor<f32> -> tensor<1x1xf32>
  %1 = pmesh.reshape %s : tensor<f32> -> tensor<1x1xf32>
  // CHECK: pmesh.transpose %[[X]] perm = [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  %2 = pmesh.transpose %x perm = [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  // A 0-d tensor has the empty permutation.
  // CHECK: pmesh.transpose %[[S]] perm = [] : tensor<f32> -> tensor<f32>
  %3 = pmesh.transpose %s perm = [] : tensor<f32> -> tensor<f32>
  // CHECK: pmesh.broadcast %[[S]] : tensor<f32> -> tensor<2x3xf32>
  %4 = pmesh.broadcast %s : tensor<f32> -> tensor<2x3xf32>
  // CHECK: pmesh.broadcast %[[X]] : tensor<2x3x4xf32> -> tensor<5x2x3x4xf32>
  %5 = pmesh.broadcast %x : tensor<2x3x4xf32> -> tensor<5x2x3x4xf32>
  // CHECK: pmesh.split %[[X]] axis = 1 sizes = [1, 2] : tensor<2x3x4xf32> -> tensor<2x1x4xf32>, tensor<2x2x4xf32>
  %6:2 = pmesh.split %x axis = 1 sizes = [1, 2] : tensor<2x3x4xf32> -> tensor<2x1x4xf32>, tensor<2x2x4xf32>
  // CHECK: pmesh.split %[[X]] axis = -1 sizes = [4] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %7 = pmesh.split %x axis = -1 sizes = [4] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  // CHECK: pmesh.concat %[[X]], %[[Y]] axis = 1 : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x8x4xf32>
  %8 = pmesh.concat %x, %y axis = 1 : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x8x4xf32>
  // CHECK: pmesh.concat %[[V]] axis = -1 : (tensor<3xi64>) -> tensor<3xi64>
  %9 = pmesh.concat %v axis = -1 : (tensor<3xi64>) -> tensor<3xi64>
  // FileCheck reads "[[" as a variable use, hence the {{\[\[}} below.
  // CHECK: pmesh.slice %[[X]]{{\[\[}}0, 1, 0] : [2, 3, 4] : [1, 1, 2]] : tensor<2x3x4xf32> -> tensor<2x2x2xf32>
  %10 = pmesh.slice %x [[0, 1, 0] : [2, 3, 4] : [1, 1, 2]] : tensor<2x3x4xf32> -> tensor<2x2x2xf32>
  // An empty slice, and a stride larger than the dim.
  // CHECK: pmesh.slice %[[X]]{{\[\[}}1, 0, 0] : [1, 3, 4] : [1, 5, 1]] : tensor<2x3x4xf32> -> tensor<0x1x4xf32>
  %11 = pmesh.slice %x [[1, 0, 0] : [1, 3, 4] : [1, 5, 1]] : tensor<2x3x4xf32> -> tensor<0x1x4xf32>
  // CHECK: pmesh.slice %[[S]]{{\[\[}}] : [] : []] : tensor<f32> -> tensor<f32>
  %12 = pmesh.slice %s [[] : [] : []] : tensor<f32> -> tensor<f32>
  return
}
