// RUN: pipemesh-opt %s --pmesh-raise --split-input-file | FileCheck %s

// The chain torch.onnx writes below opset 17 (and gen_gpt2.py at opset < 17):
// ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add.

pmesh.param @ln_w : tensor<8xf32> {source = "ln.weight"}
pmesh.param @ln_b : tensor<8xf32> {source = "ln.bias"}

// CHECK-LABEL: func.func @torch_opset13
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[G:.*]] = pmesh.get_param @ln_w
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @ln_b
// The default epsilon (1e-5) and axis (-1) are not printed.
// CHECK-NEXT: %[[Y:.*]] = pmesh.layer_norm %[[X]], %[[G]], %[[B]] : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @torch_opset13(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %gamma = pmesh.get_param @ln_w : tensor<8xf32>
  %beta = pmesh.get_param @ln_b : tensor<8xf32>
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %s = pmesh.sqrt %ve : tensor<2x4x1xf32>
  %n = pmesh.div %d, %s : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %y = pmesh.mul %n, %gamma : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %z = pmesh.add %y, %beta : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %z : tensor<2x4x8xf32>
}

// -----

// Commuted affine operands, the positive last axis (opset 18 writes axes as an
// input; the importer folds it to the same attribute), one-element constants,
// d * d for the square and a non-default epsilon.

// CHECK-LABEL: func.func @commuted_positive_axis
// CHECK-SAME: (%[[X:.*]]: tensor<3x16xf32>, %[[G:.*]]: tensor<16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.layer_norm %[[X]], %[[G]], %[[B]] {epsilon = 9.99999997E-7 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @commuted_positive_axis(%x: tensor<3x16xf32>, %gamma: tensor<16xf32>,
                                  %beta: tensor<16xf32>) -> tensor<3x16xf32> {
  %eps = pmesh.constant dense<1.0e-06> : tensor<1xf32>
  %m = pmesh.reduce_mean %x axes = [1] {keepdims = true} : tensor<3x16xf32> -> tensor<3x1xf32>
  %d = pmesh.sub %x, %m : (tensor<3x16xf32>, tensor<3x1xf32>) -> tensor<3x16xf32>
  %p = pmesh.mul %d, %d : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %v = pmesh.reduce_mean %p axes = [1] : tensor<3x16xf32> -> tensor<3x1xf32>
  %ve = pmesh.add %eps, %v : (tensor<1xf32>, tensor<3x1xf32>) -> tensor<3x1xf32>
  %s = pmesh.sqrt %ve : tensor<3x1xf32>
  %n = pmesh.div %d, %s : (tensor<3x16xf32>, tensor<3x1xf32>) -> tensor<3x16xf32>
  %y = pmesh.mul %gamma, %n : (tensor<16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %z = pmesh.add %beta, %y : (tensor<16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  return %z : tensor<3x16xf32>
}

// -----

// No beta: the layer_norm keeps no bias. sqrt written as pow 0.5.

// CHECK-LABEL: func.func @no_beta
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[G:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.layer_norm %[[X]], %[[G]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @no_beta(%x: tensor<4x8xf32>, %gamma: tensor<8xf32>) -> tensor<4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.pow %ve, %half : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %n, %gamma : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Without affine parameters the scale is a constant of ones.

// CHECK-LABEL: func.func @no_affine
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[ONES:.*]] = pmesh.constant dense<1.000000e+00> : tensor<8xf32>
// CHECK-NEXT: %[[Y:.*]] = pmesh.layer_norm %[[X]], %[[ONES]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @no_affine(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Normalizing over the two trailing axes gives axis = -2, with affine
// parameters of the normalized shape.

// CHECK-LABEL: func.func @two_trailing_axes
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>, %[[G:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.layer_norm %[[X]], %[[G]], %[[B]] {axis = -2 : i64}
// CHECK-NEXT: return %[[Y]]
func.func @two_trailing_axes(%x: tensor<2x4x8xf32>, %gamma: tensor<4x8xf32>,
                             %beta: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1, -2] : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %d = pmesh.sub %x, %m : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %v = pmesh.reduce_mean %p axes = [1, 2] : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<2x1x1xf32>, tensor<f32>) -> tensor<2x1x1xf32>
  %s = pmesh.sqrt %ve : tensor<2x1x1xf32>
  %n = pmesh.div %d, %s : (tensor<2x4x8xf32>, tensor<2x1x1xf32>) -> tensor<2x4x8xf32>
  %y = pmesh.mul %n, %gamma : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %z = pmesh.add %y, %beta : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return %z : tensor<2x4x8xf32>
}

// -----

// Negative: x - mean(x) is also returned, so the decomposition must stay.

// CHECK-LABEL: func.func @centered_has_other_use
// CHECK-NOT: pmesh.layer_norm
// CHECK: pmesh.reduce_mean
// CHECK: pmesh.div
// CHECK: pmesh.mul
// CHECK: pmesh.add
func.func @centered_has_other_use(%x: tensor<4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %n, %gamma : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %z = pmesh.add %y, %beta : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %z, %d : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Negative: the variance is also returned.

// CHECK-LABEL: func.func @variance_has_other_use
// CHECK-NOT: pmesh.layer_norm
// CHECK: pmesh.sqrt
func.func @variance_has_other_use(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %n, %v : tensor<4x8xf32>, tensor<4x1xf32>
}

// -----

// Negative: pow 3 is no variance.

// CHECK-LABEL: func.func @wrong_exponent
// CHECK-NOT: pmesh.layer_norm
// CHECK: pmesh.pow
func.func @wrong_exponent(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %three = pmesh.constant dense<3.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Negative: statistics over a leading axis are no layer normalization.

// CHECK-LABEL: func.func @leading_axis
// CHECK-NOT: pmesh.layer_norm
// CHECK: pmesh.reduce_mean %{{.*}} axes = [0]
func.func @leading_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [0] : tensor<4x8xf32> -> tensor<1x8xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [0] : tensor<4x8xf32> -> tensor<1x8xf32>
  %ve = pmesh.add %v, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = pmesh.sqrt %ve : tensor<1x8xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<1x8xf32>) -> tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Negative: the mean is of another tensor.

// CHECK-LABEL: func.func @mean_of_other_tensor
// CHECK-NOT: pmesh.layer_norm
func.func @mean_of_other_tensor(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %w axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Negative: a negative "epsilon" is no epsilon.

// CHECK-LABEL: func.func @negative_epsilon
// CHECK-NOT: pmesh.layer_norm
func.func @negative_epsilon(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<-1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Partial: a full-shape (not per-feature) multiplier and a normalized value
// with a second use are not folded into the layer_norm.

// CHECK-LABEL: func.func @affine_not_folded
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[G:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK: %[[N:.*]] = pmesh.layer_norm %[[X]], %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: %[[Y:.*]] = pmesh.mul %[[N]], %[[G]]
// CHECK: %[[N2:.*]] = pmesh.layer_norm %[[X]], %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: %[[Z:.*]] = pmesh.add %[[N2]], %[[B]]
// CHECK: return %[[Y]], %[[Z]], %[[N2]]
func.func @affine_not_folded(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>, %b: tensor<8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %eps = pmesh.constant dense<1.0e-05> : tensor<f32>
  %m = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = pmesh.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = pmesh.pow %d, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v = pmesh.reduce_mean %p axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = pmesh.add %v, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = pmesh.sqrt %ve : tensor<4x1xf32>
  %n = pmesh.div %d, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %y = pmesh.mul %n, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m2 = pmesh.reduce_mean %x axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %d2 = pmesh.sub %x, %m2 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p2 = pmesh.pow %d2, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %v2 = pmesh.reduce_mean %p2 axes = [-1] : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve2 = pmesh.add %v2, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s2 = pmesh.sqrt %ve2 : tensor<4x1xf32>
  %n2 = pmesh.div %d2, %s2 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %z = pmesh.add %n2, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y, %z, %n2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
