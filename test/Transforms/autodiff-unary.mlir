// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient rules of the unary elementwise ops, cast and where. Every loss is
// reduce_sum over all axes of the op's result, so the result gradient is the
// seed 1.0 broadcast to the result shape (DY).

// neg: -DY.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[NEG:.*]] = pmesh.neg %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[NEG]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[NEG_1:.*]] = pmesh.neg %[[BROADCAST]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[NEG_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %y = pmesh.neg %a : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sqrt: DY / (2 * y), y = sqrt(a): 1 / (2 sqrt(a)).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[SQRT:.*]] = pmesh.sqrt %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[SQRT]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[SQRT]], %[[CONSTANT_1]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[BROADCAST]], %[[MUL]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[DIV]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %y = pmesh.sqrt %a : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// tanh: DY * (1 - y * y).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[TANH:.*]] = pmesh.tanh %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[TANH]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[TANH]], %[[TANH]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[CONSTANT_1]], %[[MUL]] : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[SUB]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %y = pmesh.tanh %a : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// erf: DY * exp(-(a * a)) * 2/sqrt(pi) (= 1.12837923).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[ERF:.*]] = pmesh.erf %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ERF]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[A]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[NEG:.*]] = pmesh.neg %[[MUL]] : tensor<4x8xf32>
// CHECK-NEXT: %[[EXP:.*]] = pmesh.exp %[[NEG]] : tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.12837923> : tensor<f32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[EXP]], %[[CONSTANT_1]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL_1]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_2]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %y = pmesh.erf %a : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// exp: DY * y.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[EXP:.*]] = pmesh.exp %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[EXP]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[BROADCAST]], %[[EXP]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %y = pmesh.exp %a : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// log: DY / a.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[LOG:.*]] = pmesh.log %[[A]] : tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[LOG]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[DIV:.*]] = pmesh.div %[[BROADCAST]], %[[A]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[DIV]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %y = pmesh.log %a : tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// cast f16 -> f32: the gradient is cast back to f16, the parameter's type.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf16>
// CHECK-NEXT: %[[CAST:.*]] = pmesh.cast %[[A]] : tensor<4x8xf16> -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[CAST]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CAST_1:.*]] = pmesh.cast %[[BROADCAST]] : tensor<4x8xf32> -> tensor<4x8xf16>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[CAST_1]] : tensor<4x8xf16>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf16>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf16>
  %c = pmesh.cast %a : tensor<4x8xf16> -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %c axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// cast of integer ids to float: no gradient flows into the integer operand.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<4x8xi64>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[CAST:.*]] = pmesh.cast %[[ARG0]] : tensor<4x8xi64> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[CAST]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[CAST]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_1]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward(%ids: tensor<4x8xi64>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %f = pmesh.cast %ids : tensor<4x8xi64> -> tensor<4x8xf32>
  %y = pmesh.mul %a, %f : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// where: on_true gets where(cond, DY, 0), on_false where(cond, 0, DY); the
// condition gets none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<4x8xi1>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[WHERE:.*]] = pmesh.where %[[ARG0]], %[[A]], %[[B]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[WHERE]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[WHERE_1:.*]] = pmesh.where %[[ARG0]], %[[BROADCAST]], %[[CONSTANT_1]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[WHERE_2:.*]] = pmesh.where %[[ARG0]], %[[CONSTANT_1]], %[[BROADCAST]] : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[WHERE_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[WHERE_2]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward(%cond: tensor<4x8xi1>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %y = pmesh.where %cond, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// where with broadcasting (a masked fill): an [8] on_true parameter and a
// 0-d constant on_false under a [4,8] condition. on_true's gradient is summed
// over the leading axis; the constant gets none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<4x8xi1>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<8xf32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<-1.000000e+04> : tensor<f32>
// CHECK-NEXT: %[[WHERE:.*]] = pmesh.where %[[ARG0]], %[[A]], %[[CONSTANT]] : (tensor<4x8xi1>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[WHERE]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT_1]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_2:.*]] = pmesh.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[WHERE_1:.*]] = pmesh.where %[[ARG0]], %[[BROADCAST]], %[[CONSTANT_2]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[WHERE_1]] axes = [0] {keepdims = false} : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[REDUCE_SUM_1]] : tensor<8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<8xf32>
func.func @forward(%cond: tensor<4x8xi1>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<8xf32>
  %fill = pmesh.constant dense<-1.0e+4> : tensor<f32>
  %y = pmesh.where %cond, %a, %fill : (tensor<4x8xi1>, tensor<8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A comparison feeding where: equal/less/and/not produce no gradient, and
// the integer and boolean values are not differentiated.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<4x8xf32>
// CHECK-NEXT: %[[LESS:.*]] = pmesh.less %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT: %[[EQUAL:.*]] = pmesh.equal %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
// CHECK-NEXT: %[[NOT:.*]] = pmesh.not %[[EQUAL]] : tensor<4x8xi1>
// CHECK-NEXT: %[[AND:.*]] = pmesh.and %[[LESS]], %[[NOT]] : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
// CHECK-NEXT: %[[WHERE:.*]] = pmesh.where %[[AND]], %[[A]], %[[B]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[WHERE]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[WHERE_1:.*]] = pmesh.where %[[AND]], %[[BROADCAST]], %[[CONSTANT_1]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[WHERE_2:.*]] = pmesh.where %[[AND]], %[[CONSTANT_1]], %[[BROADCAST]] : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[WHERE_1]] : tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[WHERE_2]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
pmesh.param @b : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %b = pmesh.get_param @b : tensor<4x8xf32>
  %lt = pmesh.less %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %eq = pmesh.equal %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %ne = pmesh.not %eq : tensor<4x8xi1>
  %c = pmesh.and %lt, %ne : (tensor<4x8xi1>, tensor<4x8xi1>) -> tensor<4x8xi1>
  %y = pmesh.where %c, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
