// RUN: pipemesh-opt %s --split-input-file --pmesh-autodiff | FileCheck %s

// Gradient accumulation and the optimizer step: fan-out gradients are summed,
// a parameter read by several get_param ops gets one accumulate_grad with
// the sum, a parameter that does not influence the loss gets no
// accumulate_grad and is left out of pmesh.adamw, and weight decay applies to
// parameters of rank >= 2 only. accumulate_grad and adamw list parameters in
// declaration order.

// Fan-out: %h = a * x is used by two ops; its gradient is the sum of both
// contributions (added when the second use is differentiated), before it
// flows on into @a.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<4x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<4x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[ARG0]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[EXP:.*]] = pmesh.exp %[[MUL]] : tensor<4x8xf32>
// CHECK-NEXT: %[[TANH:.*]] = pmesh.tanh %[[MUL]] : tensor<4x8xf32>
// CHECK-NEXT: %[[ADD:.*]] = pmesh.add %[[EXP]], %[[TANH]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[ADD]] axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[TANH]], %[[TANH]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[CONSTANT_1:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[SUB:.*]] = pmesh.sub %[[CONSTANT_1]], %[[MUL_1]] : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[SUB]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_3:.*]] = pmesh.mul %[[BROADCAST]], %[[EXP]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[ADD_1:.*]] = pmesh.add %[[MUL_2]], %[[MUL_3]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: %[[MUL_4:.*]] = pmesh.mul %[[ADD_1]], %[[ARG0]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[MUL_4]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }

// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: ()
// CHECK-NEXT: pmesh.adamw [@a] decay = [true]
// CHECK-NEXT: return
// CHECK-NEXT: }
pmesh.param @a : tensor<4x8xf32>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  %h = pmesh.mul %a, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %e = pmesh.exp %h : tensor<4x8xf32>
  %t = pmesh.tanh %h : tensor<4x8xf32>
  %s = pmesh.add %e, %t : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = pmesh.reduce_sum %s axes = [0, 1] {keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A value used twice by one op (x * x): both operand gradients are summed.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: () -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[A:.*]] = pmesh.get_param @a : tensor<8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[A]], %[[A]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL]] axes = [0] {keepdims = false} : tensor<8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1xf32> -> tensor<8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[BROADCAST]], %[[A]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[A]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: %[[ADD:.*]] = pmesh.add %[[MUL_1]], %[[MUL_2]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @a, %[[ADD]] : tensor<8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }

// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: ()
// CHECK-NEXT: pmesh.adamw [@a] decay = [false]
// CHECK-NEXT: return
// CHECK-NEXT: }
pmesh.param @a : tensor<8xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<8xf32>
  %sq = pmesh.mul %a, %a : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = pmesh.reduce_sum %sq axes = [0] {keepdims = false} : tensor<8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A tied parameter: the token embedding read by two get_param ops, once for
// the lookup and once for the output head. One accumulate_grad with the sum
// of the embedding_grad and the head's weight gradient.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x4xi64>, %[[ARG1:[a-z0-9]+]]: tensor<2x4xi64>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[WTE:.*]] = pmesh.get_param @wte : tensor<16x8xf32>
// CHECK-NEXT: %[[EMBEDDING:.*]] = pmesh.embedding %[[WTE]], %[[ARG0]] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[WTE_1:.*]] = pmesh.get_param @wte : tensor<16x8xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[EMBEDDING]], %[[WTE_1]] {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[CROSS_ENTROPY:.*]] = pmesh.cross_entropy %[[MATMUL]], %[[ARG1]] : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[CROSS_ENTROPY_GRAD:.*]] = pmesh.cross_entropy_grad %[[CONSTANT]], %[[MATMUL]], %[[ARG1]] : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[CROSS_ENTROPY_GRAD]], %[[WTE_1]] : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[EMBEDDING]] : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[CROSS_ENTROPY_GRAD]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[MATMUL_2:.*]] = pmesh.matmul %[[RESHAPE_1]], %[[RESHAPE]] {transpose_a = true} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[EMBEDDING_GRAD:.*]] = pmesh.embedding_grad %[[MATMUL_1]], %[[ARG0]] : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
// CHECK-NEXT: %[[ADD:.*]] = pmesh.add %[[MATMUL_2]], %[[EMBEDDING_GRAD]] : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @wte, %[[ADD]] : tensor<16x8xf32>
// CHECK-NEXT: return %[[CROSS_ENTROPY]] : tensor<f32>
// CHECK-NEXT: }

// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: ()
// CHECK-NEXT: pmesh.adamw [@wte] decay = [true]
// CHECK-NEXT: return
// CHECK-NEXT: }
pmesh.param @wte : tensor<16x8xf32>
func.func @forward(%ids: tensor<2x4xi64>, %t: tensor<2x4xi64>) -> tensor<f32> {
  %wte = pmesh.get_param @wte : tensor<16x8xf32>
  %h = pmesh.embedding %wte, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %wte2 = pmesh.get_param @wte : tensor<16x8xf32>
  %z = pmesh.matmul %h, %wte2 {transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %l = pmesh.cross_entropy %z, %t : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Parameters that do not influence the loss: @unused is never read, @dead is
// read but only feeds a value the loss does not use. Neither gets an
// accumulate_grad or is in the adamw list, and @dead's dead exp is not
// differentiated. Decay flags: rank 2 and 3 true, rank 1 and 0 false.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[ARG0:[a-z0-9]+]]: tensor<2x8x8xf32>) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[W:.*]] = pmesh.get_param @w : tensor<8x8xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b : tensor<8xf32>
// CHECK-NEXT: %[[DEAD:.*]] = pmesh.get_param @dead : tensor<8xf32>
// CHECK-NEXT: %[[S:.*]] = pmesh.get_param @s : tensor<f32>
// CHECK-NEXT: %[[K:.*]] = pmesh.get_param @k : tensor<2x8x8xf32>
// CHECK-NEXT: %[[EXP:.*]] = pmesh.exp %[[DEAD]] : tensor<8xf32>
// CHECK-NEXT: %[[MATMUL:.*]] = pmesh.matmul %[[ARG0]], %[[W]] bias %[[B]] : (tensor<2x8x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[MUL:.*]] = pmesh.mul %[[MATMUL]], %[[K]] : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[MUL_1:.*]] = pmesh.mul %[[MUL]], %[[S]] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM:.*]] = pmesh.reduce_sum %[[MUL_1]] axes = [0, 1, 2] {keepdims = false} : tensor<2x8x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[CONSTANT:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[RESHAPE:.*]] = pmesh.reshape %[[CONSTANT]] : tensor<f32> -> tensor<1x1x1xf32>
// CHECK-NEXT: %[[BROADCAST:.*]] = pmesh.broadcast %[[RESHAPE]] : tensor<1x1x1xf32> -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[MUL_2:.*]] = pmesh.mul %[[BROADCAST]], %[[S]] : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[MUL_3:.*]] = pmesh.mul %[[BROADCAST]], %[[MUL]] : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_1:.*]] = pmesh.reduce_sum %[[MUL_3]] axes = [0, 1, 2] {keepdims = false} : tensor<2x8x8xf32> -> tensor<f32>
// CHECK-NEXT: %[[MUL_4:.*]] = pmesh.mul %[[MUL_2]], %[[K]] : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[MUL_5:.*]] = pmesh.mul %[[MUL_2]], %[[MATMUL]] : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
// CHECK-NEXT: %[[RESHAPE_1:.*]] = pmesh.reshape %[[ARG0]] : tensor<2x8x8xf32> -> tensor<16x8xf32>
// CHECK-NEXT: %[[RESHAPE_2:.*]] = pmesh.reshape %[[MUL_4]] : tensor<2x8x8xf32> -> tensor<16x8xf32>
// CHECK-NEXT: %[[MATMUL_1:.*]] = pmesh.matmul %[[RESHAPE_1]], %[[RESHAPE_2]] {transpose_a = true} : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
// CHECK-NEXT: %[[REDUCE_SUM_2:.*]] = pmesh.reduce_sum %[[MUL_4]] axes = [0, 1] {keepdims = false} : tensor<2x8x8xf32> -> tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @w, %[[MATMUL_1]] : tensor<8x8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @b, %[[REDUCE_SUM_2]] : tensor<8xf32>
// CHECK-NEXT: pmesh.accumulate_grad @s, %[[REDUCE_SUM_1]] : tensor<f32>
// CHECK-NEXT: pmesh.accumulate_grad @k, %[[MUL_5]] : tensor<2x8x8xf32>
// CHECK-NEXT: return %[[REDUCE_SUM]] : tensor<f32>
// CHECK-NEXT: }

// CHECK-LABEL: func.func @optimizer_step
// CHECK-SAME: ()
// CHECK-NEXT: pmesh.adamw [@w, @b, @s, @k] decay = [true, false, false, true]
// CHECK-NEXT: return
// CHECK-NEXT: }
pmesh.param @w : tensor<8x8xf32>
pmesh.param @unused : tensor<8x8xf32>
pmesh.param @b : tensor<8xf32>
pmesh.param @dead : tensor<8xf32>
pmesh.param @s : tensor<f32>
pmesh.param @k : tensor<2x8x8xf32>
func.func @forward(%x: tensor<2x8x8xf32>) -> tensor<f32> {
  %w = pmesh.get_param @w : tensor<8x8xf32>
  %b = pmesh.get_param @b : tensor<8xf32>
  %dead = pmesh.get_param @dead : tensor<8xf32>
  %s = pmesh.get_param @s : tensor<f32>
  %k = pmesh.get_param @k : tensor<2x8x8xf32>
  %junk = pmesh.exp %dead : tensor<8xf32>
  %h = pmesh.matmul %x, %w bias %b : (tensor<2x8x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32>
  %hk = pmesh.mul %h, %k : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %hs = pmesh.mul %hk, %s : (tensor<2x8x8xf32>, tensor<f32>) -> tensor<2x8x8xf32>
  %l = pmesh.reduce_sum %hs axes = [0, 1, 2] {keepdims = false} : tensor<2x8x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
