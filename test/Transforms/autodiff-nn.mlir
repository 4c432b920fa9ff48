// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient rules of the fused neural-network ops: each uses one composite
// gradient op whose operands are exactly the activations its backward needs
// (layer_norm_grad recomputes the statistics from the saved input, softmax
// and log_softmax grads use the saved output, attention_grad recomputes the
// probabilities from q, k, v). Losses are reduce_sum of the op's result
// unless the op is itself a loss.

// layer_norm with bias: layer_norm_grad(DY, x, scale) gives dx, dscale and
// dbias.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<2x4x8xf32>
// CHECK-NEXT: %[[G:.*]] = pmesh.get_param @g : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<8xf32>
// CHECK-NEXT: %[[LAYER_NORM:.*]] = pmesh.layer_norm %[[X]], %[[G]], %[[B]] : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[LAYER_NORM]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DX:[a-z0-9_]+]], %[[DSCALE:[a-z0-9_]+]], %[[DBIAS:[a-z0-9_]+]] = pmesh.layer_norm_grad %[[BROADCAST]], %[[X]], %[[G]] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[DX]] : tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @g, %[[DSCALE]] : tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[DBIAS]] : tensor<8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<2x4x8xf32>
pmesh.param @g : tensor<8xf32>
pmesh.param @b : tensor<8xf32>
func.func @forward() -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<2x4x8xf32>
  %g = pmesh.get_param @g : tensor<8xf32>
  %b = pmesh.get_param @b : tensor<8xf32>
  %y = pmesh.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// layer_norm without bias, over the last two dims (axis = 1), epsilon kept:
// the grad op's dbias is left unused.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<2x4x8xf32>
// CHECK-NEXT: %[[G:.*]] = pmesh.get_param @g : tensor<4x8xf32>
// CHECK-NEXT: %[[LAYER_NORM:.*]] = pmesh.layer_norm %[[X]], %[[G]] {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[LAYER_NORM]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DX:[a-z0-9_]+]], %[[DSCALE:[a-z0-9_]+]], %[[DBIAS:[a-z0-9_]+]] = pmesh.layer_norm_grad %[[BROADCAST]], %[[X]], %[[G]] {axis = 1 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf32>) -> (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[DX]] : tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @g, %[[DSCALE]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<2x4x8xf32>
pmesh.param @g : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<2x4x8xf32>
  %g = pmesh.get_param @g : tensor<4x8xf32>
  %y = pmesh.layer_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// layer_norm of an input (not a parameter): only dscale and dbias are used.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[G:.*]] = pmesh.get_param @g : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<8xf32>
// CHECK-NEXT: %[[LAYER_NORM:.*]] = pmesh.layer_norm %[[ARG0]], %[[G]], %[[B]] : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[LAYER_NORM]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DX:[a-z0-9_]+]], %[[DSCALE:[a-z0-9_]+]], %[[DBIAS:[a-z0-9_]+]] = pmesh.layer_norm_grad %[[BROADCAST]], %[[ARG0]], %[[G]] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @g, %[[DSCALE]] : tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[DBIAS]] : tensor<8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @g : tensor<8xf32>
pmesh.param @b : tensor<8xf32>
func.func @forward(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %g = pmesh.get_param @g : tensor<8xf32>
  %b = pmesh.get_param @b : tensor<8xf32>
  %y = pmesh.layer_norm %x, %g, %b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// layer_norm with a bias of another (broadcast) shape than the scale: dbias
// is DY summed to the bias shape.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<2x4x8xf32>
// CHECK-NEXT: %[[G:.*]] = pmesh.get_param @g : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<1xf32>
// CHECK-NEXT: %[[LAYER_NORM:.*]] = pmesh.layer_norm %[[X]], %[[G]], %[[B]] : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[LAYER_NORM]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DX:[a-z0-9_]+]], %[[DSCALE:[a-z0-9_]+]], %[[DBIAS:[a-z0-9_]+]] = pmesh.layer_norm_grad %[[BROADCAST]], %[[X]], %[[G]] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[BROADCAST]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[REDUCE_SUM_1]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[DX]] : tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @g, %[[DSCALE]] : tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[RESHAPE_1]] : tensor<1xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<2x4x8xf32>
pmesh.param @g : tensor<8xf32>
pmesh.param @b : tensor<1xf32>
func.func @forward() -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<2x4x8xf32>
  %g = pmesh.get_param @g : tensor<8xf32>
  %b = pmesh.get_param @b : tensor<1xf32>
  %y = pmesh.layer_norm %x, %g, %b : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<1xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu (tanh approximation) -> gelu_grad(DY, x) with the same approximation.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<4x8xf32>
// CHECK-NEXT: %[[GELU:.*]] = pmesh.gelu %[[X]] {approximate = "tanh"} : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[GELU]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[GELU_GRAD:.*]] = pmesh.gelu_grad %[[BROADCAST]], %[[X]] {approximate = "tanh"} : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[GELU_GRAD]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<4x8xf32>
  %y = pmesh.gelu %x {approximate = "tanh"} : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gelu (exact) -> gelu_grad with the default approximate = "none".
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<4x8xf32>
// CHECK-NEXT: %[[GELU:.*]] = pmesh.gelu %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[GELU]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[GELU_GRAD:.*]] = pmesh.gelu_grad %[[BROADCAST]], %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[GELU_GRAD]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<4x8xf32>
  %y = pmesh.gelu %x : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// softmax over axis 0 -> softmax_grad(DY, y) on the saved output, same axis.
// The loss multiplies by a weight so that DY is not constant.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<4x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<4x8xf32>
// CHECK-NEXT: %[[SOFTMAX:.*]] = pmesh.softmax %[[X]] {axis = 0 : i64} : tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[SOFTMAX]], %[[ARG0]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[SOFTMAX_GRAD:.*]] = pmesh.softmax_grad %[[MUL_1]], %[[SOFTMAX]] {axis = 0 : i64} : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[SOFTMAX_GRAD]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<4x8xf32>
func.func @forward(%w: tensor<4x8xf32>) -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<4x8xf32>
  %y = pmesh.softmax %x {axis = 0 : i64} : tensor<4x8xf32>
  %p = pmesh.mul %y, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// log_softmax -> log_softmax_grad(DY, y) on the saved output.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<4x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[X:.*]] = pmesh.get_param @x : tensor<4x8xf32>
// CHECK-NEXT: %[[LOG_SOFTMAX:.*]] = pmesh.log_softmax %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[LOG_SOFTMAX]], %[[ARG0]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[ARG0]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[LOG_SOFTMAX_GRAD:.*]] = pmesh.log_softmax_grad %[[MUL_1]], %[[LOG_SOFTMAX]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @x, %[[LOG_SOFTMAX_GRAD]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @x : tensor<4x8xf32>
func.func @forward(%w: tensor<4x8xf32>) -> tensor<f32> {
  %x = pmesh.get_param @x : tensor<4x8xf32>
  %y = pmesh.log_softmax %x : tensor<4x8xf32>
  %p = pmesh.mul %y, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %p axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// causal attention -> attention_grad(DY, q, k, v) with the scale and causal
// flag, giving dq, dk, dv.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[Q:.*]] = pmesh.get_param @q : tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[K:.*]] = pmesh.get_param @k : tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[V:.*]] = pmesh.get_param @v : tensor<2x2x4x16xf32>
// CHECK-NEXT: %[[ATTENTION:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 0.353553385 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ATTENTION]] axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x2x4x16xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1x1xf32> -> tensor<2x2x4x16xf32>
// CHECK-NEXT: %[[DQ:[a-z0-9_]+]], %[[DK:[a-z0-9_]+]], %[[DV:[a-z0-9_]+]] = pmesh.attention_grad %[[BROADCAST]], %[[Q]], %[[K]], %[[V]] {scale = 0.353553385 : f32} : (tensor<2x2x4x16xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x16xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @q, %[[DQ]] : tensor<2x2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @k, %[[DK]] : tensor<2x2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @v, %[[DV]] : tensor<2x2x4x16xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @q : tensor<2x2x4x8xf32>
pmesh.param @k : tensor<2x2x4x8xf32>
pmesh.param @v : tensor<2x2x4x16xf32>
func.func @forward() -> tensor<f32> {
  %q = pmesh.get_param @q : tensor<2x2x4x8xf32>
  %k = pmesh.get_param @k : tensor<2x2x4x8xf32>
  %v = pmesh.get_param @v : tensor<2x2x4x16xf32>
  %y = pmesh.attention %q, %k, %v {scale = 0.353553385 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x2x4x16xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// attention with an additive mask (an input), not causal, Tq = 3 < Tk = 5:
// the mask is passed to attention_grad and gets no gradient.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x1x5xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[Q:.*]] = pmesh.get_param @q : tensor<2x3x8xf32>
// CHECK-NEXT: %[[K:.*]] = pmesh.get_param @k : tensor<2x5x8xf32>
// CHECK-NEXT: %[[V:.*]] = pmesh.get_param @v : tensor<2x5x8xf32>
// CHECK-NEXT: %[[ATTENTION:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[ARG0]] {causal = false, scale = 1.250000e-01 : f32} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x1x5xf32>) -> tensor<2x3x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ATTENTION]] axes = [0, 1, 2] {keepdims = false} : tensor<2x3x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x3x8xf32>
// CHECK-NEXT: %[[DQ:[a-z0-9_]+]], %[[DK:[a-z0-9_]+]], %[[DV:[a-z0-9_]+]] = pmesh.attention_grad %[[BROADCAST]], %[[Q]], %[[K]], %[[V]] mask %[[ARG0]] {causal = false, scale = 1.250000e-01 : f32} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x1x5xf32>) -> (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @q, %[[DQ]] : tensor<2x3x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @k, %[[DK]] : tensor<2x5x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @v, %[[DV]] : tensor<2x5x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @q : tensor<2x3x8xf32>
pmesh.param @k : tensor<2x5x8xf32>
pmesh.param @v : tensor<2x5x8xf32>
func.func @forward(%mask: tensor<2x1x5xf32>) -> tensor<f32> {
  %q = pmesh.get_param @q : tensor<2x3x8xf32>
  %k = pmesh.get_param @k : tensor<2x5x8xf32>
  %v = pmesh.get_param @v : tensor<2x5x8xf32>
  %y = pmesh.attention %q, %k, %v mask %mask {scale = 0.125 : f32, causal = false} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>, tensor<2x5x8xf32>, tensor<2x1x5xf32>) -> tensor<2x3x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x3x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// causal attention with a padding mask (an input), as an exported model with
// an attention_mask computes it: both go to attention_grad (causal = true is
// the default and not printed; the non-causal case above prints it).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x1x1x4xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[Q:.*]] = pmesh.get_param @q : tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[K:.*]] = pmesh.get_param @k : tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[V:.*]] = pmesh.get_param @v : tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[ATTENTION:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[ARG0]] {scale = 0.353553385 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ATTENTION]] axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1x1xf32> -> tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[DQ:[a-z0-9_]+]], %[[DK:[a-z0-9_]+]], %[[DV:[a-z0-9_]+]] = pmesh.attention_grad %[[BROADCAST]], %[[Q]], %[[K]], %[[V]] mask %[[ARG0]] {scale = 0.353553385 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>) -> (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @q, %[[DQ]] : tensor<2x2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @k, %[[DK]] : tensor<2x2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @v, %[[DV]] : tensor<2x2x4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @q : tensor<2x2x4x8xf32>
pmesh.param @k : tensor<2x2x4x8xf32>
pmesh.param @v : tensor<2x2x4x8xf32>
func.func @forward(%mask: tensor<2x1x1x4xf32>) -> tensor<f32> {
  %q = pmesh.get_param @q : tensor<2x2x4x8xf32>
  %k = pmesh.get_param @k : tensor<2x2x4x8xf32>
  %v = pmesh.get_param @v : tensor<2x2x4x8xf32>
  %y = pmesh.attention %q, %k, %v mask %mask {scale = 0.353553385 : f32, causal = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2, 3] {keepdims = false} : tensor<2x2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// attention where only v is a parameter: one attention_grad, only dv used.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[ARG1:[a-z0-9]+]]: tensor<2x4x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[V:.*]] = pmesh.get_param @v : tensor<2x4x8xf32>
// CHECK-NEXT: %[[ATTENTION:.*]] = pmesh.attention %[[ARG0]], %[[ARG1]], %[[V]] {scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ATTENTION]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DQ:[a-z0-9_]+]], %[[DK:[a-z0-9_]+]], %[[DV:[a-z0-9_]+]] = pmesh.attention_grad %[[BROADCAST]], %[[ARG0]], %[[ARG1]], %[[V]] {scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT: pmesh.accumulate_grad @v, %[[DV]] : tensor<2x4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @v : tensor<2x4x8xf32>
func.func @forward(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>) -> tensor<f32> {
  %v = pmesh.get_param @v : tensor<2x4x8xf32>
  %y = pmesh.attention %q, %k, %v {scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// embedding -> embedding_grad(DY, ids) with the table's type; the ids get
// none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4xi64>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[WTE:.*]] = pmesh.get_param @wte : tensor<16x8xf32>
// CHECK-NEXT: %[[EMBEDDING:.*]] = pmesh.embedding %[[WTE]], %[[ARG0]] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[EMBEDDING]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[EMBEDDING_GRAD:.*]] = pmesh.embedding_grad %[[BROADCAST]], %[[ARG0]] : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @wte, %[[EMBEDDING_GRAD]] : tensor<16x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @wte : tensor<16x8xf32>
func.func @forward(%ids: tensor<2x4xi64>) -> tensor<f32> {
  %wte = pmesh.get_param @wte : tensor<16x8xf32>
  %y = pmesh.embedding %wte, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// cross_entropy (mean) as the model's own loss: the seed 1.0 goes straight
// into cross_entropy_grad, with ignore_index and reduction kept.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4xi64>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[LOGITS:.*]] = pmesh.get_param @logits : tensor<2x4x16xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY:.*]] = pmesh.cross_entropy %[[LOGITS]], %[[ARG0]] {ignore_index = -1 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CROSS_ENTROPY_GRAD:.*]] = pmesh.cross_entropy_grad %[[CONSTANT]], %[[LOGITS]], %[[ARG0]] {ignore_index = -1 : i64} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @logits, %[[CROSS_ENTROPY_GRAD]] : tensor<2x4x16xf32>
// CHECK-NEXT: return %[[CROSS_ENTROPY]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @logits : tensor<2x4x16xf32>
func.func @forward(%t: tensor<2x4xi64>) -> tensor<f32> {
  %z = pmesh.get_param @logits : tensor<2x4x16xf32>
  %l = pmesh.cross_entropy %z, %t {ignore_index = -1 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// cross_entropy with reduction "sum" and i32 targets.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<8xi32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[LOGITS:.*]] = pmesh.get_param @logits : tensor<8x16xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY:.*]] = pmesh.cross_entropy %[[LOGITS]], %[[ARG0]] {reduction = "sum"} : (tensor<8x16xf32>, tensor<8xi32>) -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CROSS_ENTROPY_GRAD:.*]] = pmesh.cross_entropy_grad %[[CONSTANT]], %[[LOGITS]], %[[ARG0]] {reduction = "sum"} : (tensor<f32>, tensor<8x16xf32>, tensor<8xi32>) -> tensor<8x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @logits, %[[CROSS_ENTROPY_GRAD]] : tensor<8x16xf32>
// CHECK-NEXT: return %[[CROSS_ENTROPY]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @logits : tensor<8x16xf32>
func.func @forward(%t: tensor<8xi32>) -> tensor<f32> {
  %z = pmesh.get_param @logits : tensor<8x16xf32>
  %l = pmesh.cross_entropy %z, %t {reduction = "sum"} : (tensor<8x16xf32>, tensor<8xi32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// cross_entropy with reduction "none" ([2,4] losses) then a mean: dloss is
// the [2,4] gradient of the mean.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4xi64>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[LOGITS:.*]] = pmesh.get_param @logits : tensor<2x4x16xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY:.*]] = pmesh.cross_entropy %[[LOGITS]], %[[ARG0]] {reduction = "none"} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
// CHECK-NEXT: %[[REDUCE_MEAN:.*]] = pmesh.reduce_mean %[[CROSS_ENTROPY]] axes = [0, 1] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<8.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[CONSTANT]], %[[CONSTANT_1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[DIV]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<2x4xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY_GRAD:.*]] = pmesh.cross_entropy_grad %[[BROADCAST]], %[[LOGITS]], %[[ARG0]] {reduction = "none"} : (tensor<2x4xf32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK-NEXT: pmesh.accumulate_grad @logits, %[[CROSS_ENTROPY_GRAD]] : tensor<2x4x16xf32>
// CHECK-NEXT: return %[[REDUCE_MEAN]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @logits : tensor<2x4x16xf32>
func.func @forward(%t: tensor<2x4xi64>) -> tensor<f32> {
  %z = pmesh.get_param @logits : tensor<2x4x16xf32>
  %ce = pmesh.cross_entropy %z, %t {reduction = "none"} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  %l = pmesh.reduce_mean %ce axes = [0, 1] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
