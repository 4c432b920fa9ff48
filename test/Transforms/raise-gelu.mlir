// RUN: pipemesh-opt %s --pmesh-raise --split-input-file | FileCheck %s

// GELU as exporters spell it out: the tanh approximation and the exact (erf)
// form, in the association and operand orders different exporters write.

// The form gen_gpt2.py writes (ONNX has no GELU before opset 20):
// mul(mul(x, 0.5), add(tanh(mul(add(x, mul(pow(x, 3), c)), k)), 1)).

// CHECK-LABEL: func.func @tanh_gen_gpt2
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x32xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.gelu %[[X]] {approximate = "tanh"} : tensor<2x4x32xf32>
// CHECK-NEXT: return %[[Y]]
func.func @tanh_gen_gpt2(%x: tensor<2x4x32xf32>) -> tensor<2x4x32xf32> {
  %three = pmesh.constant dense<3.0> : tensor<f32>
  %c = pmesh.constant dense<0.044715> : tensor<f32>
  %k = pmesh.constant dense<0.797884583> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %cube = pmesh.pow %x, %three : (tensor<2x4x32xf32>, tensor<f32>) -> tensor<2x4x32xf32>
  %t0 = pmesh.mul %cube, %c : (tensor<2x4x32xf32>, tensor<f32>) -> tensor<2x4x32xf32>
  %inner = pmesh.add %x, %t0 : (tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  %arg = pmesh.mul %inner, %k : (tensor<2x4x32xf32>, tensor<f32>) -> tensor<2x4x32xf32>
  %t = pmesh.tanh %arg : tensor<2x4x32xf32>
  %xh = pmesh.mul %x, %half : (tensor<2x4x32xf32>, tensor<f32>) -> tensor<2x4x32xf32>
  %onept = pmesh.add %t, %one : (tensor<2x4x32xf32>, tensor<f32>) -> tensor<2x4x32xf32>
  %y = pmesh.mul %xh, %onept : (tensor<2x4x32xf32>, tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
  return %y : tensor<2x4x32xf32>
}

// -----

// torch's NewGELU export: constants first, x^3 as x * (x * x), one-element
// constants, the 0.5 applied last.

// CHECK-LABEL: func.func @tanh_torch_commuted
// CHECK-SAME: (%[[X:.*]]: tensor<8x16xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.gelu %[[X]] {approximate = "tanh"} : tensor<8x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @tanh_torch_commuted(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %c = pmesh.constant dense<0.044715> : tensor<1xf32>
  %k = pmesh.constant dense<0.7978846> : tensor<1xf32>
  %half = pmesh.constant dense<0.5> : tensor<1xf32>
  %one = pmesh.constant dense<1.0> : tensor<1xf32>
  %sq = pmesh.mul %x, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %cube = pmesh.mul %x, %sq : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %t0 = pmesh.mul %c, %cube : (tensor<1xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %inner = pmesh.add %t0, %x : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %arg = pmesh.mul %k, %inner : (tensor<1xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %t = pmesh.tanh %arg : tensor<8x16xf32>
  %onept = pmesh.add %one, %t : (tensor<1xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %xt = pmesh.mul %x, %onept : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %y = pmesh.mul %half, %xt : (tensor<1xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}

// -----

// Megatron's bias_gelu: 0.5 x (1 + tanh(0.79788456 x (1 + 0.044715 x x))).

// CHECK-LABEL: func.func @tanh_megatron
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.gelu %[[X]] {approximate = "tanh"} : tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @tanh_megatron(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = pmesh.constant dense<0.044715> : tensor<f32>
  %k = pmesh.constant dense<0.79788456> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %xh = pmesh.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %kx = pmesh.mul %k, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %cx = pmesh.mul %c, %x : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %cxx = pmesh.mul %cx, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %p = pmesh.add %one, %cxx : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %arg = pmesh.mul %kx, %p : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %t = pmesh.tanh %arg : tensor<4x8xf32>
  %onept = pmesh.add %t, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xh, %onept : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// torch.nn.GELU() (exact) below opset 20: x * 0.5 * (1 + erf(x / sqrt(2))),
// the rounded sqrt(2) torch writes.

// CHECK-LABEL: func.func @erf_div_sqrt2
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.gelu %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @erf_div_sqrt2(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %sqrt2 = pmesh.constant dense<1.41421354> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %a = pmesh.div %x, %sqrt2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = pmesh.erf %a : tensor<4x8xf32>
  %onepe = pmesh.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %xe = pmesh.mul %x, %onepe : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xe, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// The multiplying form, x * 0.70710677, with the halving as a division at
// the root and 1 + erf commuted.

// CHECK-LABEL: func.func @erf_mul_rsqrt2_div2
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.gelu %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @erf_mul_rsqrt2_div2(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = pmesh.constant dense<0.707106769> : tensor<1xf32>
  %one = pmesh.constant dense<1.0> : tensor<1xf32>
  %two = pmesh.constant dense<2.0> : tensor<1xf32>
  %a = pmesh.mul %x, %r : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  %e = pmesh.erf %a : tensor<4x8xf32>
  %onepe = pmesh.add %one, %e : (tensor<1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %xe = pmesh.mul %onepe, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = pmesh.div %xe, %two : (tensor<4x8xf32>, tensor<1xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// The expanded form 0.5 x + 0.5 x erf(x / sqrt(2)) ends in an add.

// CHECK-LABEL: func.func @erf_expanded
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.gelu %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @erf_expanded(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = pmesh.constant dense<0.707106769> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %a = pmesh.mul %x, %r : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = pmesh.erf %a : tensor<4x8xf32>
  %xh = pmesh.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %xhe = pmesh.mul %x, %e : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %xhe2 = pmesh.mul %xhe, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = pmesh.add %xh, %xhe2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Negative: 0.04 is not 0.044715 (beyond the 1e-4 rounding tolerance).

// CHECK-LABEL: func.func @tanh_wrong_cubic_coefficient
// CHECK-NOT: pmesh.gelu
// CHECK: pmesh.tanh
func.func @tanh_wrong_cubic_coefficient(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %three = pmesh.constant dense<3.0> : tensor<f32>
  %c = pmesh.constant dense<0.04> : tensor<f32>
  %k = pmesh.constant dense<0.797884583> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %cube = pmesh.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t0 = pmesh.mul %cube, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %inner = pmesh.add %x, %t0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %arg = pmesh.mul %inner, %k : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t = pmesh.tanh %arg : tensor<4x8xf32>
  %xh = pmesh.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %onept = pmesh.add %t, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xh, %onept : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Negative: the outer factor 0.6 is no GELU.

// CHECK-LABEL: func.func @erf_wrong_outer_factor
// CHECK-NOT: pmesh.gelu
// CHECK: pmesh.erf
func.func @erf_wrong_outer_factor(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %sqrt2 = pmesh.constant dense<1.41421354> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %f = pmesh.constant dense<0.6> : tensor<f32>
  %a = pmesh.div %x, %sqrt2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = pmesh.erf %a : tensor<4x8xf32>
  %onepe = pmesh.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %xe = pmesh.mul %x, %onepe : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xe, %f : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Negative: erf(x / 2) is not the exact GELU.

// CHECK-LABEL: func.func @erf_wrong_argument_scale
// CHECK-NOT: pmesh.gelu
// CHECK: pmesh.erf
func.func @erf_wrong_argument_scale(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %a = pmesh.div %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = pmesh.erf %a : tensor<4x8xf32>
  %onepe = pmesh.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %xe = pmesh.mul %x, %onepe : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xe, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Negative: tanh(...) is also returned, so the formula cannot go away.

// CHECK-LABEL: func.func @tanh_has_other_use
// CHECK-NOT: pmesh.gelu
// CHECK: pmesh.tanh
func.func @tanh_has_other_use(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %three = pmesh.constant dense<3.0> : tensor<f32>
  %c = pmesh.constant dense<0.044715> : tensor<f32>
  %k = pmesh.constant dense<0.797884583> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %cube = pmesh.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t0 = pmesh.mul %cube, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %inner = pmesh.add %x, %t0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %arg = pmesh.mul %inner, %k : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t = pmesh.tanh %arg : tensor<4x8xf32>
  %xh = pmesh.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %onept = pmesh.add %t, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xh, %onept : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %t : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Negative: the argument is of another tensor than the outer factor.

// CHECK-LABEL: func.func @erf_of_other_tensor
// CHECK-NOT: pmesh.gelu
// CHECK: pmesh.erf
func.func @erf_of_other_tensor(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %sqrt2 = pmesh.constant dense<1.41421354> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %a = pmesh.div %w, %sqrt2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %e = pmesh.erf %a : tensor<4x8xf32>
  %onepe = pmesh.add %e, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %xe = pmesh.mul %x, %onepe : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %xe, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Negative: a rank-2 "scalar" broadcasts x [8] to [1, 8]; gelu keeps x's type.

// CHECK-LABEL: func.func @erf_broadcasting_constant
// CHECK-NOT: pmesh.gelu
// CHECK: pmesh.erf
func.func @erf_broadcasting_constant(%x: tensor<8xf32>) -> tensor<1x8xf32> {
  %sqrt2 = pmesh.constant dense<1.41421354> : tensor<f32>
  %one = pmesh.constant dense<1.0> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<1x1xf32>
  %a = pmesh.div %x, %sqrt2 : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %e = pmesh.erf %a : tensor<8xf32>
  %onepe = pmesh.add %e, %one : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %xe = pmesh.mul %x, %onepe : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %y = pmesh.mul %xe, %half : (tensor<8xf32>, tensor<1x1xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}
