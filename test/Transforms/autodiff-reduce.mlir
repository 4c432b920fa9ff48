// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient rules of reduce_sum and reduce_mean: the result gradient is
// reshaped to the input's rank with the reduced dims kept as 1 (unless
// keepdims already did), then broadcast to the input shape; reduce_mean
// first divides it by the number of reduced elements.

// reduce_sum without keepdims over the last axis: [4,8] -> [4] is followed
// by a reduce_mean over [4] (DY of [4] = 1/4), so both rules appear; the
// mean's DY is a 0-d value reshaped to [1] and broadcast.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[A]] axes = [1] {keepdims = false} : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[REDUCE_MEAN:.*]] = pmesh.reduce_mean %[[REDUCE_SUM]] axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<4.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[CONSTANT]], %[[CONSTANT_1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[DIV]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[BROADCAST]] : tensor<4xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[RESHAPE_1]] : tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_MEAN]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %s = pmesh.reduce_sum %a axes = [1] {keepdims = false} : tensor<4x8xf32> -> tensor<4xf32>
  %l = pmesh.reduce_mean %s axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce_sum with keepdims (the default): the [4,1] gradient is broadcast
// directly, no reshape.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[A]] axes = [1] : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[REDUCE_SUM]] axes = [0, 1] {keepdims = false} : tensor<4x1xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[BROADCAST]] : tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM_1]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %s = pmesh.reduce_sum %a axes = [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %l = pmesh.reduce_sum %s axes = [0, 1] {keepdims = false} : tensor<4x1xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce_sum over a negative axis and a middle axis, without keepdims.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x3x4xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[A]] axes = [-1, 1] {keepdims = false} : tensor<2x3x4xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[REDUCE_SUM]] axes = [0] {keepdims = false} : tensor<2xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[BROADCAST]] : tensor<2xf32> -> tensor<2x1x1xf32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[RESHAPE_1]] : tensor<2x1x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST_1]] : tensor<2x3x4xf32>
// CHECK-NEXT: return %[[REDUCE_SUM_1]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x3x4xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x3x4xf32>
  %s = pmesh.reduce_sum %a axes = [-1, 1] {keepdims = false} : tensor<2x3x4xf32> -> tensor<2xf32>
  %l = pmesh.reduce_sum %s axes = [0] {keepdims = false} : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce_mean with keepdims over axes 0 and 2 of [2,3,4]: DY / 8, then
// broadcast [1,3,1] -> [2,3,4].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x3x4xf32>
// CHECK-NEXT: %[[REDUCE_MEAN:.*]] = pmesh.reduce_mean %[[A]] axes = [0, 2] : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[REDUCE_MEAN]] axes = [0, 1, 2] {keepdims = false} : tensor<1x3x1xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<1x3x1xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<8.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[BROADCAST]], %[[CONSTANT_1]] : (tensor<1x3x1xf32>, tensor<f32>) -> tensor<1x3x1xf32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[DIV]] : tensor<1x3x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST_1]] : tensor<2x3x4xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x3x4xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x3x4xf32>
  %m = pmesh.reduce_mean %a axes = [0, 2] : tensor<2x3x4xf32> -> tensor<1x3x1xf32>
  %l = pmesh.reduce_sum %m axes = [0, 1, 2] {keepdims = false} : tensor<1x3x1xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce_mean over every axis without keepdims (a mean loss): the 0-d
// gradient 1/32 is reshaped to [1,1] and broadcast.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_MEAN:.*]] = pmesh.reduce_mean %[[A]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<3.200000e+01> : tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[CONSTANT]], %[[CONSTANT_1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[DIV]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_MEAN]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %l = pmesh.reduce_mean %a axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
