// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Choosing the loss: a 0-d float result of @forward is the loss (the one
// named "loss" when there are several); otherwise [batch, seq, vocab] logits
// get the causal-LM cross-entropy appended, with a new i64 `targets`
// argument of shape [batch, seq] and reduction "mean". @train_step keeps the
// names of @forward's arguments and returns the loss as f32, named "loss".

// Logits [2,4,16]: cross_entropy(logits, targets) mean is appended, its
// gradient seeds the backward.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4xi64> {pmesh.name = "input_ids"}, %[[ARG1:[a-z0-9]+]]: tensor<2x4xi64> {pmesh.name = "targets"}) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[WTE:.*]] = pmesh.get_param @wte : tensor<16x8xf32>
// CHECK-NEXT: %[[EMBEDDING:.*]] = pmesh.embedding %[[WTE]], %[[ARG0]] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[HEAD:.*]] = pmesh.get_param @head : tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[EMBEDDING]], %[[HEAD]] : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY:.*]] = pmesh.cross_entropy %[[MATMUL]], %[[ARG1]] : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CROSS_ENTROPY_GRAD:.*]] = pmesh.cross_entropy_grad %[[CONSTANT]], %[[MATMUL]], %[[ARG1]] : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[CROSS_ENTROPY_GRAD]], %[[HEAD]] {transpose_b = true} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[EMBEDDING]] : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[CROSS_ENTROPY_GRAD]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[RESHAPE]], %[[RESHAPE_1]] {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %[[EMBEDDING_GRAD:.*]] = pmesh.embedding_grad %[[MATMUL_1]], %[[ARG0]] : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @wte, %[[EMBEDDING_GRAD]] : tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @head, %[[MATMUL_2]] : tensor<8x16xf32>
// CHECK-NEXT: return %[[CROSS_ENTROPY]] : tensor<f32>
// CHECK-NEXT: }

// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: ()
// CHECK-NEXT: pmesh.adamw [@wte, @head] decay = [true, true]
// CHECK-NEXT: return
// CHECK-NEXT: }
pmesh.param @wte : tensor<16x8xf32>
pmesh.param @head : tensor<8x16xf32>
func.func @forward(%ids: tensor<2x4xi64> {pmesh.name = "input_ids"}) -> (tensor<2x4x16xf32> {pmesh.name = "logits"}) {
  %wte = pmesh.get_param @wte : tensor<16x8xf32>
  %h = pmesh.embedding %wte, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %w = pmesh.get_param @head : tensor<8x16xf32>
  %z = pmesh.matmul %h, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %z : tensor<2x4x16xf32>
}

// -----

// Unnamed logits (the only rank-3 float result) next to an integer result:
// still the logits; the targets follow the existing arguments.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<1x3xi64>, %[[ARG1:[a-z0-9]+]]: tensor<1x3xi64>, %[[ARG2:[a-z0-9]+]]: tensor<1x3xi64> {pmesh.name = "targets"}) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[Z:.*]] = pmesh.get_param @z : tensor<1x3x5xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY:.*]] = pmesh.cross_entropy %[[Z]], %[[ARG2]] : (tensor<1x3x5xf32>, tensor<1x3xi64>) -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CROSS_ENTROPY_GRAD:.*]] = pmesh.cross_entropy_grad %[[CONSTANT]], %[[Z]], %[[ARG2]] : (tensor<f32>, tensor<1x3x5xf32>, tensor<1x3xi64>) -> tensor<1x3x5xf32>
// CHECK-NEXT: pmesh.accumulate_grad @z, %[[CROSS_ENTROPY_GRAD]] : tensor<1x3x5xf32>
// CHECK-NEXT: return %[[CROSS_ENTROPY]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @z : tensor<1x3x5xf32>
func.func @forward(%ids: tensor<1x3xi64>, %pos: tensor<1x3xi64>) -> (tensor<1x3xi64>, tensor<1x3x5xf32>) {
  %z = pmesh.get_param @z : tensor<1x3x5xf32>
  return %ids, %z : tensor<1x3xi64>, tensor<1x3x5xf32>
}

// -----

// The model's own loss: of several 0-d results the one named "loss" is
// used; the logits and the other scalar are ignored.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[A]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[REDUCE_MEAN:.*]] = pmesh.reduce_mean %[[A]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<6.400000e+01> : tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[CONSTANT]], %[[CONSTANT_1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[DIV]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<2x4x8xf32>
// CHECK-NEXT: return %[[REDUCE_MEAN]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x4x8xf32>
func.func @forward() -> (tensor<2x4x8xf32> {pmesh.name = "logits"}, tensor<f32> {pmesh.name = "aux"}, tensor<f32> {pmesh.name = "loss"}) {
  %a = pmesh.get_param @a : tensor<2x4x8xf32>
  %aux = pmesh.reduce_sum %a axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  %loss = pmesh.reduce_mean %a axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %a, %aux, %loss : tensor<2x4x8xf32>, tensor<f32>, tensor<f32>
}

// -----

// A single unnamed 0-d result is the loss, even next to logits.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_MEAN:.*]] = pmesh.reduce_mean %[[A]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<6.400000e+01> : tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[CONSTANT]], %[[CONSTANT_1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[DIV]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<2x4x8xf32>
// CHECK-NEXT: return %[[REDUCE_MEAN]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x4x8xf32>
func.func @forward() -> (tensor<2x4x8xf32>, tensor<f32>) {
  %a = pmesh.get_param @a : tensor<2x4x8xf32>
  %l = pmesh.reduce_mean %a axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %a, %l : tensor<2x4x8xf32>, tensor<f32>
}

// -----

// An f16 loss is cast to f32; the cast is differentiated too (its gradient,
// the seed cast back to f16, flows into the f16 model).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf16>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[A]] axes = [0, 1] {keepdims = false} : tensor<4x8xf16> -> tensor<f16>
// CHECK-NEXT: %[[CAST:.*]] = pmesh.cast %[[REDUCE_SUM]] : tensor<f16> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CAST_1:.*]] = pmesh.cast %[[CONSTANT]] : tensor<f32> -> tensor<f16>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CAST_1]] : tensor<f16> -> tensor<1x1xf16>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf16> -> tensor<4x8xf16>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<4x8xf16>
// CHECK-NEXT: return %[[CAST]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf16>
func.func @forward() -> tensor<f16> {
  %a = pmesh.get_param @a : tensor<4x8xf16>
  %l = pmesh.reduce_sum %a axes = [0, 1] {keepdims = false} : tensor<4x8xf16> -> tensor<f16>
  return %l : tensor<f16>
}
