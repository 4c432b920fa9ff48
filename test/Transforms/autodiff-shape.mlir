// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient rules of the shape ops. Losses are reduce_sum of the op's result
// times a weight input %w, so the result gradient (DY = DS * w, DS the
// broadcast seed) is not a constant.

// reshape: DY reshaped back to the input shape.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x3x4xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x12xf32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[A]] : tensor<2x12xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[RESHAPE]], %[[ARG0]] : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE_1]] : tensor<1x1x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[RESHAPE_2:.*]] = pmesh.reshape %[[MUL_1]] : tensor<2x3x4xf32> -> tensor<2x12xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[RESHAPE_2]] : tensor<2x12xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x12xf32>
func.func @forward(%w: tensor<2x3x4xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x12xf32>
  %y = pmesh.reshape %a : tensor<2x12xf32> -> tensor<2x3x4xf32>
  %p = pmesh.mul %y, %w : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// transpose by perm [1, 2, 0]: DY transposed by the inverse perm [2, 0, 1].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<3x4x2xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x3x4xf32>
// CHECK-NEXT: %[[TRANSPOSE:.*]] = pmesh.transpose %[[A]] perm = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[TRANSPOSE]], %[[ARG0]] : (tensor<3x4x2xf32>, tensor<3x4x2xf32>) -> tensor<3x4x2xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1, 2] {keepdims = false} : tensor<3x4x2xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<3x4x2xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<3x4x2xf32>, tensor<3x4x2xf32>) -> tensor<3x4x2xf32>
// CHECK-NEXT: %[[TRANSPOSE_1:.*]] = pmesh.transpose %[[MUL_1]] perm = [2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[TRANSPOSE_1]] : tensor<2x3x4xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x3x4xf32>
func.func @forward(%w: tensor<3x4x2xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x3x4xf32>
  %y = pmesh.transpose %a perm = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %p = pmesh.mul %y, %w : (tensor<3x4x2xf32>, tensor<3x4x2xf32>) -> tensor<3x4x2xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1, 2] {keepdims = false} : tensor<3x4x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// transpose of the attention heads, perm [0, 2, 1, 3] (its own inverse).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4x8x16xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x8x4x16xf32>
// CHECK-NEXT: %[[TRANSPOSE:.*]] = pmesh.transpose %[[A]] perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[TRANSPOSE]], %[[ARG0]] : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x4x8x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1x1xf32> -> tensor<2x4x8x16xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT: %[[TRANSPOSE_1:.*]] = pmesh.transpose %[[MUL_1]] perm = [0, 2, 1, 3] : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[TRANSPOSE_1]] : tensor<2x8x4x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x8x4x16xf32>
func.func @forward(%w: tensor<2x4x8x16xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x8x4x16xf32>
  %y = pmesh.transpose %a perm = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %p = pmesh.mul %y, %w : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x4x8x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// broadcast [3,1] -> [2,3,4]: DY summed over axes 0 and 2, reshaped to [3,1].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x3x4xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<3x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[A]] : tensor<3x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST_1]], %[[ARG0]] : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MUL_1]] axes = [0, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<3xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[REDUCE_SUM_1]] : tensor<3xf32> -> tensor<3x1xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[RESHAPE_1]] : tensor<3x1xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<3x1xf32>
func.func @forward(%w: tensor<2x3x4xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<3x1xf32>
  %y = pmesh.broadcast %a : tensor<3x1xf32> -> tensor<2x3x4xf32>
  %p = pmesh.mul %y, %w : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1, 2] {keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// slice (strided) -> slice_grad: DY scattered into zeros of the input shape,
// same starts, limits and strides.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<3x4xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<8x6xf32>
// CHECK-NEXT: %[[SLICE:.*]] = pmesh.slice %[[A]]{{\[\[}}1, 2] : [7, 6] : [2, 1{{\]\]}} : tensor<8x6xf32> -> tensor<3x4xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[SLICE]], %[[ARG0]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<3x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<3x4xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: %[[SLICE_GRAD:.*]] = pmesh.slice_grad %[[MUL_1]]{{\[\[}}1, 2] : [7, 6] : [2, 1{{\]\]}} : tensor<3x4xf32> -> tensor<8x6xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[SLICE_GRAD]] : tensor<8x6xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<8x6xf32>
func.func @forward(%w: tensor<3x4xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<8x6xf32>
  %y = pmesh.slice %a[[1, 2] : [7, 6] : [2, 1]] : tensor<8x6xf32> -> tensor<3x4xf32>
  %p = pmesh.mul %y, %w : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// split into three pieces (the q, k, v of c_attn), all used: concat of the
// three piece gradients along the split axis.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x12xf32>
// CHECK-NEXT: %[[SPLIT:.*]]:3 = pmesh.split %[[A]] axis = 1 sizes = [4, 4, 4] : tensor<2x12xf32> -> tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[SPLIT]]#0, %[[ARG0]] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[SPLIT]]#1, %[[SPLIT]]#2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[ADD:.*]] = pmesh.add %[[MUL]], %[[MUL_1]] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ADD]] axes = [0, 1] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[SPLIT]]#2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[MUL_3:.*]] = pmesh.mul %[[BROADCAST]], %[[SPLIT]]#1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[MUL_4:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[CONCAT:.*]] = pmesh.concat %[[MUL_4]], %[[MUL_2]], %[[MUL_3]] axis = 1 : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x12xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[CONCAT]] : tensor<2x12xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x12xf32>
func.func @forward(%w: tensor<2x4xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x12xf32>
  %s:3 = pmesh.split %a axis = 1 sizes = [4, 4, 4] : tensor<2x12xf32> -> tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
  %p0 = pmesh.mul %s#0, %w : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p1 = pmesh.mul %s#1, %s#2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p = pmesh.add %p0, %p1 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// split with one unused piece (uneven sizes, negative axis): the unused
// piece's gradient is a 0-d zero constant broadcast to its shape.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<3x2xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<5x2xf32>
// CHECK-NEXT: %[[SPLIT:.*]]:2 = pmesh.split %[[A]] axis = -2 sizes = [2, 3] : tensor<5x2xf32> -> tensor<2x2xf32>, tensor<3x2xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[SPLIT]]#1, %[[ARG0]] : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<3x2xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<3x2xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[CONSTANT_1]] : tensor<f32> -> tensor<2x2xf32>
// CHECK-NEXT: %[[CONCAT:.*]] = pmesh.concat %[[BROADCAST_1]], %[[MUL_1]] axis = -2 : (tensor<2x2xf32>, tensor<3x2xf32>) -> tensor<5x2xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[CONCAT]] : tensor<5x2xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<5x2xf32>
func.func @forward(%w: tensor<3x2xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<5x2xf32>
  %s:2 = pmesh.split %a axis = -2 sizes = [2, 3] : tensor<5x2xf32> -> tensor<2x2xf32>, tensor<3x2xf32>
  %p = pmesh.mul %s#1, %w : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x2xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<3x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// concat of two parameters and an input along axis 1: each parameter gets
// the slice of DY at its offset; the input gets none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x1xf32>, %[[ARG1:[a-z0-9]+]]: tensor<2x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x3xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<2x4xf32>
// CHECK-NEXT: %[[CONCAT:.*]] = pmesh.concat %[[A]], %[[ARG0]], %[[B]] axis = 1 : (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[CONCAT]], %[[ARG1]] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<2x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<2x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG1]] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[SLICE:.*]] = pmesh.slice %[[MUL_1]]{{\[\[}}0, 0] : [2, 3] : [1, 1{{\]\]}} : tensor<2x8xf32> -> tensor<2x3xf32>
// CHECK-NEXT: %[[SLICE_1:.*]] = pmesh.slice %[[MUL_1]]{{\[\[}}0, 4] : [2, 8] : [1, 1{{\]\]}} : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[SLICE]] : tensor<2x3xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[SLICE_1]] : tensor<2x4xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x3xf32>
pmesh.param @b : tensor<2x4xf32>
func.func @forward(%x: tensor<2x1xf32>, %w: tensor<2x8xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x3xf32>
  %b = pmesh.get_param @b : tensor<2x4xf32>
  %y = pmesh.concat %a, %x, %b axis = 1 : (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  %p = pmesh.mul %y, %w : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// concat along a negative axis (-2 of rank 2).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<3x4xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<1x4xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<2x4xf32>
// CHECK-NEXT: %[[CONCAT:.*]] = pmesh.concat %[[A]], %[[B]] axis = -2 : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[CONCAT]], %[[ARG0]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<3x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<3x4xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK-NEXT: %[[SLICE:.*]] = pmesh.slice %[[MUL_1]]{{\[\[}}0, 0] : [1, 4] : [1, 1{{\]\]}} : tensor<3x4xf32> -> tensor<1x4xf32>
// CHECK-NEXT: %[[SLICE_1:.*]] = pmesh.slice %[[MUL_1]]{{\[\[}}1, 0] : [3, 4] : [1, 1{{\]\]}} : tensor<3x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[SLICE]] : tensor<1x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[SLICE_1]] : tensor<2x4xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<1x4xf32>
pmesh.param @b : tensor<2x4xf32>
func.func @forward(%w: tensor<3x4xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<1x4xf32>
  %b = pmesh.get_param @b : tensor<2x4xf32>
  %y = pmesh.concat %a, %b axis = -2 : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
  %p = pmesh.mul %y, %w : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
