// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient rules of the binary elementwise ops, each without and with numpy
// broadcasting. Every loss is reduce_sum over all axes of the op's result, so
// the result gradient is the seed 1.0 broadcast to the result shape (DY).
// Broadcasting is undone by reduce_sum over the broadcast axes, then a
// reshape back to the operand's rank (unbroadcast).

// add: both gradients are DY.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[ADD:.*]] = pmesh.add %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ADD]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// add [2,4,8] + [4,1]: the rhs gradient sums axes 0 (leading) and 2
// (size 1 in the operand), then reshapes [4] -> [4,1].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<2x4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x1xf32>
// CHECK-NEXT: %[[ADD:.*]] = pmesh.add %[[A]], %[[B]] : (tensor<2x4x8xf32>, tensor<4x1xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ADD]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[BROADCAST]] axes = [0, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[REDUCE_SUM_1]] : tensor<4xf32> -> tensor<4x1xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[RESHAPE_1]] : tensor<4x1xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<2x4x8xf32>
pmesh.param @b : tensor<4x1xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<2x4x8xf32>
  %b = pmesh.get_param @b : tensor<4x1xf32>
  %y = pmesh.add %a, %b : (tensor<2x4x8xf32>, tensor<4x1xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sub: lhs DY, rhs -DY.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[SUB]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[NEG:.*]] = pmesh.neg %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[NEG]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.sub %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sub [8] - [4,8]: the broadcast lhs sums the leading axis (no reshape: the
// sum already has the operand's shape); the rhs is -DY.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[A]], %[[B]] : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[SUB]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[BROADCAST]] axes = [0] {keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[NEG:.*]] = pmesh.neg %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[REDUCE_SUM_1]] : tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[NEG]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.sub %a, %b : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// mul: da = DY * b, db = DY * a.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[A]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MUL_2]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.mul %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// mul [4,8] * [1,8]: db = unbroadcast(DY * a) = reshape(reduce_sum axis 0).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<1x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[B]] : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[A]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MUL_2]] axes = [0] {keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[REDUCE_SUM_1]] : tensor<8xf32> -> tensor<1x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[RESHAPE_1]] : tensor<1x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<1x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<1x8xf32>
  %y = pmesh.mul %a, %b : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// mul by a constant: only the parameter operand gets a gradient.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<3.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[CONSTANT]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT_1]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[CONSTANT]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %c = pmesh.constant dense<3.0> : tensor<f32>
  %y = pmesh.mul %a, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// div: da = DY / b; db = -(DY * y) / b = -DY * a / b^2.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[DIV]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DIV_1:.*]] = pmesh.div %[[BROADCAST]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[BROADCAST]], %[[DIV]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[DIV_2:.*]] = pmesh.div %[[MUL]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[NEG:.*]] = pmesh.neg %[[DIV_2]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[DIV_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[NEG]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.div %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// div [4,8] / [8]: the divisor's gradient is summed over the leading axis.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<8xf32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[DIV]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DIV_1:.*]] = pmesh.div %[[BROADCAST]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[BROADCAST]], %[[DIV]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[DIV_2:.*]] = pmesh.div %[[MUL]], %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[NEG:.*]] = pmesh.neg %[[DIV_2]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[NEG]] axes = [0] {keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[DIV_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[REDUCE_SUM_1]] : tensor<8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<8xf32>
  %y = pmesh.div %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// pow: da = DY * (b * a^(b-1)), db = DY * (y * log a).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[POW:.*]] = pmesh.pow %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[POW]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[B]], %[[CONSTANT_1]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[POW_1:.*]] = pmesh.pow %[[A]], %[[SUB]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[B]], %[[POW_1]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[LOG:.*]] = pmesh.log %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[POW]], %[[LOG]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_3:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL_2]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[MUL_3]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.pow %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// pow with a 0-d exponent parameter: its gradient sums every axis.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<f32>
// CHECK-NEXT: %[[POW:.*]] = pmesh.pow %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[POW]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[B]], %[[CONSTANT_1]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[POW_1:.*]] = pmesh.pow %[[A]], %[[SUB]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[B]], %[[POW_1]] : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[LOG:.*]] = pmesh.log %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[POW]], %[[LOG]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_3:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL_2]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MUL_3]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[REDUCE_SUM_1]] : tensor<f32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<f32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<f32>
  %y = pmesh.pow %a, %b : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// pow by a constant exponent (x^3 of the decomposed GELU): only da, with
// b - 1 built from the constant.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<3.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[POW:.*]] = pmesh.pow %[[A]], %[[CONSTANT]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[POW]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT_1]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_2:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[CONSTANT]], %[[CONSTANT_2]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK-NEXT: %[[POW_1:.*]] = pmesh.pow %[[A]], %[[SUB]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[CONSTANT]], %[[POW_1]] : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %three = pmesh.constant dense<3.0> : tensor<f32>
  %y = pmesh.pow %a, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// max: where(y == a) routes DY to a, the rest to b (ties go to the lhs).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[MAX:.*]] = pmesh.max %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MAX]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[EQUAL:.*]] = pmesh.equal %[[MAX]], %[[A]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[WHERE:.*]] = pmesh.where %[[EQUAL]], %[[BROADCAST]], %[[CONSTANT_1]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[WHERE_1:.*]] = pmesh.where %[[EQUAL]], %[[CONSTANT_1]], %[[BROADCAST]] : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[WHERE]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[WHERE_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.max %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// max [4,1] vs [2,4,8]: the broadcast lhs is broadcast for the comparison,
// and its gradient is summed over axes 0 and 2 and reshaped to [4,1].
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x1xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<2x4x8xf32>
// CHECK-NEXT: %[[MAX:.*]] = pmesh.max %[[A]], %[[B]] : (tensor<4x1xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MAX]] axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[BROADCAST_1:.*]] = pmesh.broadcast %[[A]] : tensor<4x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[EQUAL:.*]] = pmesh.equal %[[MAX]], %[[BROADCAST_1]] : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xi1>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[WHERE:.*]] = pmesh.where %[[EQUAL]], %[[BROADCAST]], %[[CONSTANT_1]] : (tensor<2x4x8xi1>, tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[WHERE]] axes = [0, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<4xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[REDUCE_SUM_1]] : tensor<4xf32> -> tensor<4x1xf32>
// CHECK-NEXT: %[[WHERE_1:.*]] = pmesh.where %[[EQUAL]], %[[CONSTANT_1]], %[[BROADCAST]] : (tensor<2x4x8xi1>, tensor<f32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[RESHAPE_1]] : tensor<4x1xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[WHERE_1]] : tensor<2x4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x1xf32>
pmesh.param @b : tensor<2x4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x1xf32>
  %b = pmesh.get_param @b : tensor<2x4x8xf32>
  %y = pmesh.max %a, %b : (tensor<4x1xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
