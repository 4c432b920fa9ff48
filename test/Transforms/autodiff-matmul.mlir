// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient rule of matmul, result = op(a) @ op(b) [+ bias] with G its
// gradient:
//   da = G @ op(b)^T        (transpose_a: da = op(b) @ G^T)
//   db = op(a)^T @ G        (transpose_b: db = G^T @ op(a))
// expressed with the transpose flags, never with explicit transposes; a
// broadcast batch is summed (unbroadcast). A 2-D weight used by a batched
// activation folds the batch into the contraction: [rows, K]^T @ [rows, N].
// Every loss is reduce_sum of the result.

// a @ b, [4,8] @ [8,16]: da = G @ b^T, db = a^T @ G.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[B]] {transpose_b = true} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[A]], %[[BROADCAST]] {transpose_a = true} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MATMUL_2]] : tensor<8x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<8x16xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<8x16xf32>
  %y = pmesh.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// a^T @ b, [8,4]^T @ [8,16]: da = b @ G^T [8,4], db = a @ G [8,16].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<8x4xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[B]] {transpose_a = true} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[B]], %[[BROADCAST]] {transpose_b = true} : (tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[A]], %[[BROADCAST]] : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<8x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MATMUL_2]] : tensor<8x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<8x4xf32>
pmesh.param @b : tensor<8x16xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<8x4xf32>
  %b = pmesh.get_param @b : tensor<8x16xf32>
  %y = pmesh.matmul %a, %b {transpose_a = true} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// a @ b^T, [4,8] @ [16,8]^T: da = G @ b [4,8], db = G^T @ a [16,8].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<16x8xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[B]] {transpose_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[B]] : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[BROADCAST]], %[[A]] {transpose_a = true} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MATMUL_2]] : tensor<16x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<16x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<16x8xf32>
  %y = pmesh.matmul %a, %b {transpose_b = true} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// a^T @ b^T, [8,4]^T @ [16,8]^T: da = b^T @ G^T [8,4], db = G^T @ a^T [16,8].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<8x4xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<16x8xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[B]] {transpose_a = true, transpose_b = true} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[B]], %[[BROADCAST]] {transpose_a = true, transpose_b = true} : (tensor<16x8xf32>, tensor<4x16xf32>) -> tensor<8x4xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[BROADCAST]], %[[A]] {transpose_a = true, transpose_b = true} : (tensor<4x16xf32>, tensor<8x4xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<8x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MATMUL_2]] : tensor<16x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<8x4xf32>
pmesh.param @b : tensor<16x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<8x4xf32>
  %b = pmesh.get_param @b : tensor<16x8xf32>
  %y = pmesh.matmul %a, %b {transpose_a = true, transpose_b = true} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A batched activation [2,4,8] times a 2-D weight [8,16], with bias [16]:
// da = G @ w^T [2,4,8]; dw = reshape(a)[8 rows, 8]^T @ reshape(G)[8 rows, 16]
// with no per-batch products; dbias sums G over axes 0 and 1.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x4x8xf32>
// CHECK-NEXT: %[[W:.*]] = pmesh.get_param @w : tensor<8x16xf32>
// CHECK-NEXT: %[[BIAS:.*]] = pmesh.get_param @bias : tensor<16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[W]] bias %[[BIAS]] : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[W]] {transpose_b = true} : (tensor<2x4x16xf32>, tensor<8x16xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[A]] : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[RESHAPE_2:.*]] = pmesh.reshape %[[BROADCAST]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[RESHAPE_1]], %[[RESHAPE_2]] {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[BROADCAST]] axes = [0, 1] {keepdims = false} : tensor<2x4x16xf32> -> tensor<16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @w, %[[MATMUL_2]] : tensor<8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @bias, %[[REDUCE_SUM_1]] : tensor<16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x4x8xf32>
pmesh.param @w : tensor<8x16xf32>
pmesh.param @bias : tensor<16xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x4x8xf32>
  %w = pmesh.get_param @w : tensor<8x16xf32>
  %bias = pmesh.get_param @bias : tensor<16xf32>
  %y = pmesh.matmul %a, %w bias %bias : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A batched activation [2,4,8] times a transposed 2-D weight [16,8]^T (the
// tied output head): dw = reshape(G)[8, 16]^T @ reshape(a)[8, 8] = [16,8].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x4x8xf32>
// CHECK-NEXT: %[[W:.*]] = pmesh.get_param @w : tensor<16x8xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[W]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[W]] : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[A]] : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[RESHAPE_2:.*]] = pmesh.reshape %[[BROADCAST]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[RESHAPE_2]], %[[RESHAPE_1]] {transpose_a = true} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @w, %[[MATMUL_2]] : tensor<16x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x4x8xf32>
pmesh.param @w : tensor<16x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x4x8xf32>
  %w = pmesh.get_param @w : tensor<16x8xf32>
  %y = pmesh.matmul %a, %w {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A transposed batched activation [2,8,4]^T with a 2-D weight [8,16]: no
// folding (the rows are not contiguous); dw = a @ G per batch [2,8,16],
// summed over the batch.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x8x4xf32>
// CHECK-NEXT: %[[W:.*]] = pmesh.get_param @w : tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[W]] {transpose_a = true} : (tensor<2x8x4xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[W]], %[[BROADCAST]] {transpose_b = true} : (tensor<8x16xf32>, tensor<2x4x16xf32>) -> tensor<2x8x4xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[A]], %[[BROADCAST]] : (tensor<2x8x4xf32>, tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MATMUL_2]] axes = [0] {keepdims = false} : tensor<2x8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MATMUL_1]] : tensor<2x8x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @w, %[[REDUCE_SUM_1]] : tensor<8x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x8x4xf32>
pmesh.param @w : tensor<8x16xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x8x4xf32>
  %w = pmesh.get_param @w : tensor<8x16xf32>
  %y = pmesh.matmul %a, %w {transpose_a = true} : (tensor<2x8x4xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A 2-D lhs [4,8] with a batched rhs [2,8,16]: da = G @ b^T [2,4,8] summed
// over the batch to [4,8]; db = a^T @ G [2,8,16].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<2x8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[B]] {transpose_b = true} : (tensor<2x4x16xf32>, tensor<2x8x16xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MATMUL_1]] axes = [0] {keepdims = false} : tensor<2x4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[A]], %[[BROADCAST]] {transpose_a = true} : (tensor<4x8xf32>, tensor<2x4x16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[REDUCE_SUM_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MATMUL_2]] : tensor<2x8x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<2x8x16xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<2x8x16xf32>
  %y = pmesh.matmul %a, %b : (tensor<4x8xf32>, tensor<2x8x16xf32>) -> tensor<2x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Batch broadcasting [2,1,4,8] @ [3,8,16] -> [2,3,4,16]: da [2,3,4,8] is
// summed over axis 1 and reshaped to [2,1,4,8]; db [2,3,8,16] is summed over
// the leading axis.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x1x4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<3x8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[A]], %[[B]] : (tensor<2x1x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x3x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x3x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1x1xf32> -> tensor<2x3x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[B]] {transpose_b = true} : (tensor<2x3x4x16xf32>, tensor<3x8x16xf32>) -> tensor<2x3x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MATMUL_1]] axes = [1] {keepdims = false} : tensor<2x3x4x8xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[REDUCE_SUM_1]] : tensor<2x4x8xf32> -> tensor<2x1x4x8xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[A]], %[[BROADCAST]] {transpose_a = true} : (tensor<2x1x4x8xf32>, tensor<2x3x4x16xf32>) -> tensor<2x3x8x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM_2:.*]] = pmesh.reduce_sum %[[MATMUL_2]] axes = [0] {keepdims = false} : tensor<2x3x8x16xf32> -> tensor<3x8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[RESHAPE_1]] : tensor<2x1x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[REDUCE_SUM_2]] : tensor<3x8x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x1x4x8xf32>
pmesh.param @b : tensor<3x8x16xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x1x4x8xf32>
  %b = pmesh.get_param @b : tensor<3x8x16xf32>
  %y = pmesh.matmul %a, %b : (tensor<2x1x4x8xf32>, tensor<3x8x16xf32>) -> tensor<2x3x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x3x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Equal 4-D batches, q @ k^T as in decomposed attention scores: dq = G @ k,
// dk = G^T @ q, both per batch with no reduction.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[Q:.*]] = pmesh.get_param @q : tensor<2x3x4x8xf32>
// CHECK-NEXT: %[[K:.*]] = pmesh.get_param @k : tensor<2x3x5x8xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[Q]], %[[K]] {transpose_b = true} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>) -> tensor<2x3x4x5xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x3x4x5xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1x1xf32> -> tensor<2x3x4x5xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[BROADCAST]], %[[K]] : (tensor<2x3x4x5xf32>, tensor<2x3x5x8xf32>) -> tensor<2x3x4x8xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[BROADCAST]], %[[Q]] {transpose_a = true} : (tensor<2x3x4x5xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x5x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @q, %[[MATMUL_1]] : tensor<2x3x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @k, %[[MATMUL_2]] : tensor<2x3x5x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @q : tensor<2x3x4x8xf32>
pmesh.param @k : tensor<2x3x5x8xf32>
func.func @forward() -> tensor<f32> {
  %q = pmesh.get_param @q : tensor<2x3x4x8xf32>
  %k = pmesh.get_param @k : tensor<2x3x5x8xf32>
  %y = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x3x4x8xf32>, tensor<2x3x5x8xf32>) -> tensor<2x3x4x5xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x3x4x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Only the weight is a parameter (the activation is an input): no da.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[W:.*]] = pmesh.get_param @w : tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[ARG0]], %[[W]] : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MATMUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[ARG0]] : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[RESHAPE_2:.*]] = pmesh.reshape %[[BROADCAST]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[RESHAPE_1]], %[[RESHAPE_2]] {transpose_a = true} : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @w, %[[MATMUL_1]] : tensor<8x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @w : tensor<8x16xf32>
func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %w = pmesh.get_param @w : tensor<8x16xf32>
  %y = pmesh.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}
