// RUN: pipemesh-opt %s --pmesh-raise --split-input-file | FileCheck %s

// MatMul + Add(bias) becomes one matmul with a bias; a transpose of an
// operand that moves its innermost dim becomes the transpose_a/b flag.

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x3x8xf32>, %[[W:[^:]*]]: tensor<8x16xf32>, %[[B:[^:]*]]: tensor<16xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.matmul %[[X]], %[[W]] bias %[[B]] : (tensor<2x3x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @linear(%x: tensor<2x3x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x3x16xf32> {
  %mm = pmesh.matmul %x, %w : (tensor<2x3x8xf32>, tensor<8x16xf32>) -> tensor<2x3x16xf32>
  %y = pmesh.add %mm, %b : (tensor<2x3x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32>
  return %y : tensor<2x3x16xf32>
}

// -----

// Bias first, weights as parameters.

pmesh.param @w : tensor<8x16xf32> {source = "fc.weight"}
pmesh.param @b : tensor<16xf32> {source = "fc.bias"}

// CHECK-LABEL: func.func @bias_first
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x8xf32>)
// CHECK-NEXT: %[[W:.*]] = pmesh.get_param @w
// CHECK-NEXT: %[[B:.*]] = pmesh.get_param @b
// CHECK-NEXT: %[[Y:.*]] = pmesh.matmul %[[X]], %[[W]] bias %[[B]] : (tensor<3x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<3x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @bias_first(%x: tensor<3x8xf32>) -> tensor<3x16xf32> {
  %w = pmesh.get_param @w : tensor<8x16xf32>
  %b = pmesh.get_param @b : tensor<16xf32>
  %mm = pmesh.matmul %x, %w : (tensor<3x8xf32>, tensor<8x16xf32>) -> tensor<3x16xf32>
  %y = pmesh.add %b, %mm : (tensor<16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  return %y : tensor<3x16xf32>
}

// -----

// Gemm-style weight stored [out, in] and transposed in the graph: the
// transpose becomes transpose_b and the bias folds in as well.

// CHECK-LABEL: func.func @transposed_weight_and_bias
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x8xf32>, %[[W:[^:]*]]: tensor<16x8xf32>, %[[B:[^:]*]]: tensor<16xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.matmul %[[X]], %[[W]] bias %[[B]] {transpose_b = true} : (tensor<3x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<3x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @transposed_weight_and_bias(%x: tensor<3x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>)
    -> tensor<3x16xf32> {
  %wt = pmesh.transpose %w perm = [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %mm = pmesh.matmul %x, %wt : (tensor<3x8xf32>, tensor<8x16xf32>) -> tensor<3x16xf32>
  %y = pmesh.add %mm, %b : (tensor<3x16xf32>, tensor<16xf32>) -> tensor<3x16xf32>
  return %y : tensor<3x16xf32>
}

// -----

// Tied LM head: the embedding table is used directly with transpose_b, even
// though the same table also feeds the embedding lookup.

pmesh.param @wte : tensor<32x8xf32> {source = "transformer.wte.weight"}

// CHECK-LABEL: func.func @tied_head
// CHECK-SAME: (%[[IDS:[^:]*]]: tensor<2x3xi64>, %[[H:[^:]*]]: tensor<2x3x8xf32>)
// CHECK-NEXT: %[[WTE:.*]] = pmesh.get_param @wte
// CHECK-NEXT: %[[E:.*]] = pmesh.embedding %[[WTE]], %[[IDS]]
// CHECK-NEXT: %[[L:.*]] = pmesh.matmul %[[H]], %[[WTE]] {transpose_b = true} : (tensor<2x3x8xf32>, tensor<32x8xf32>) -> tensor<2x3x32xf32>
// CHECK-NEXT: return %[[E]], %[[L]]
func.func @tied_head(%ids: tensor<2x3xi64>, %h: tensor<2x3x8xf32>)
    -> (tensor<2x3x8xf32>, tensor<2x3x32xf32>) {
  %wte = pmesh.get_param @wte : tensor<32x8xf32>
  %e = pmesh.embedding %wte, %ids : (tensor<32x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %wt = pmesh.transpose %wte perm = [1, 0] : tensor<32x8xf32> -> tensor<8x32xf32>
  %l = pmesh.matmul %h, %wt : (tensor<2x3x8xf32>, tensor<8x32xf32>) -> tensor<2x3x32xf32>
  return %e, %l : tensor<2x3x8xf32>, tensor<2x3x32xf32>
}

// -----

// A swap of the last two dims of `a` becomes transpose_a; a transpose that was
// already transpose_b flips back.

// CHECK-LABEL: func.func @both_operands
// CHECK-SAME: (%[[A:[^:]*]]: tensor<2x8x3xf32>, %[[B:[^:]*]]: tensor<2x8x5xf32>)
// CHECK-NEXT: %[[Y:.*]] = pmesh.matmul %[[A]], %[[B]] {transpose_a = true} : (tensor<2x8x3xf32>, tensor<2x8x5xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT: return %[[Y]]
func.func @both_operands(%a: tensor<2x8x3xf32>, %b: tensor<2x8x5xf32>) -> tensor<2x3x5xf32> {
  %at = pmesh.transpose %a perm = [0, 2, 1] : tensor<2x8x3xf32> -> tensor<2x3x8xf32>
  %bt = pmesh.transpose %b perm = [0, 2, 1] : tensor<2x8x5xf32> -> tensor<2x5x8xf32>
  %y = pmesh.matmul %at, %bt {transpose_b = true} : (tensor<2x3x8xf32>, tensor<2x5x8xf32>) -> tensor<2x3x5xf32>
  return %y : tensor<2x3x5xf32>
}

// -----

// Heads split straight into [B, H, D, T] (perm [0, 2, 3, 1]): the matmul
// reads [B, H, T, D] with transpose_b, the innermost dim stays in place.

// CHECK-LABEL: func.func @head_split_key
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x4x2x8xf32>)
// CHECK-NEXT: %[[KH:.*]] = pmesh.transpose %[[K]] perm = [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
// CHECK-NEXT: %[[S:.*]] = pmesh.matmul %[[Q]], %[[KH]] {transpose_b = true}
// CHECK-NEXT: return %[[S]]
func.func @head_split_key(%q: tensor<1x2x4x8xf32>, %k: tensor<1x4x2x8xf32>) -> tensor<1x2x4x4xf32> {
  %kt = pmesh.transpose %k perm = [0, 2, 3, 1] : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %s = pmesh.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  return %s : tensor<1x2x4x4xf32>
}

// -----

// Negative: a transpose that keeps the innermost dim in place is no
// transposed operand; one with another user would have to be duplicated.

// CHECK-LABEL: func.func @transposes_kept
// CHECK-SAME: (%[[A:[^:]*]]: tensor<1x4x2x8xf32>, %[[B:[^:]*]]: tensor<1x2x8x4xf32>, %[[K:[^:]*]]: tensor<1x4x2x8xf32>)
// CHECK-NEXT: %[[AT:.*]] = pmesh.transpose %[[A]] perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[X:.*]] = pmesh.matmul %[[AT]], %[[B]] :
// CHECK-NEXT: %[[KT:.*]] = pmesh.transpose %[[K]] perm = [0, 2, 3, 1]
// CHECK-NEXT: %[[Y:.*]] = pmesh.matmul %[[AT]], %[[KT]] :
// CHECK-NEXT: return %[[X]], %[[Y]], %[[KT]]
func.func @transposes_kept(%a: tensor<1x4x2x8xf32>, %b: tensor<1x2x8x4xf32>, %k: tensor<1x4x2x8xf32>)
    -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x8x4xf32>) {
  %at = pmesh.transpose %a perm = [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %x = pmesh.matmul %at, %b : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %kt = pmesh.transpose %k perm = [0, 2, 3, 1] : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %y = pmesh.matmul %at, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  return %x, %y, %kt : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Negative: the bias-free product is also returned.

// CHECK-LABEL: func.func @matmul_has_other_use
// CHECK-NEXT: %[[MM:.*]] = pmesh.matmul %{{[^ ]*}}, %{{[^ ]*}} :
// CHECK-NEXT: %[[Y:.*]] = pmesh.add %[[MM]], %{{.*}}
// CHECK-NEXT: return %[[Y]], %[[MM]]
func.func @matmul_has_other_use(%x: tensor<3x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>)
    -> (tensor<3x16xf32>, tensor<3x16xf32>) {
  %mm = pmesh.matmul %x, %w : (tensor<3x8xf32>, tensor<8x16xf32>) -> tensor<3x16xf32>
  %y = pmesh.add %mm, %b : (tensor<3x16xf32>, tensor<16xf32>) -> tensor<3x16xf32>
  return %y, %mm : tensor<3x16xf32>, tensor<3x16xf32>
}

// -----

// Negative: [1, 16] is not the 1-D bias pmesh.matmul takes, a full-shape
// operand is a residual, and a matmul that already has a bias keeps the add.

// CHECK-LABEL: func.func @not_a_bias
// CHECK-SAME: (%[[X:[^:]*]]: tensor<3x8xf32>, %[[W:[^:]*]]: tensor<8x16xf32>, %[[B2:[^:]*]]: tensor<1x16xf32>, %[[R:[^:]*]]: tensor<3x16xf32>, %[[B:[^:]*]]: tensor<16xf32>)
// CHECK-NEXT: %[[M1:.*]] = pmesh.matmul %[[X]], %[[W]] :
// CHECK-NEXT: %[[Y1:.*]] = pmesh.add %[[M1]], %[[B2]]
// CHECK-NEXT: %[[M2:.*]] = pmesh.matmul %[[X]], %[[W]] :
// CHECK-NEXT: %[[Y2:.*]] = pmesh.add %[[M2]], %[[R]]
// CHECK-NEXT: %[[M3:.*]] = pmesh.matmul %[[X]], %[[W]] bias %[[B]] :
// CHECK-NEXT: %[[Y3:.*]] = pmesh.add %[[M3]], %[[B]]
// CHECK-NEXT: return %[[Y1]], %[[Y2]], %[[Y3]]
func.func @not_a_bias(%x: tensor<3x8xf32>, %w: tensor<8x16xf32>, %b2: tensor<1x16xf32>,
                      %r: tensor<3x16xf32>, %b: tensor<16xf32>)
    -> (tensor<3x16xf32>, tensor<3x16xf32>, tensor<3x16xf32>) {
  %m1 = pmesh.matmul %x, %w : (tensor<3x8xf32>, tensor<8x16xf32>) -> tensor<3x16xf32>
  %y1 = pmesh.add %m1, %b2 : (tensor<3x16xf32>, tensor<1x16xf32>) -> tensor<3x16xf32>
  %m2 = pmesh.matmul %x, %w : (tensor<3x8xf32>, tensor<8x16xf32>) -> tensor<3x16xf32>
  %y2 = pmesh.add %m2, %r : (tensor<3x16xf32>, tensor<3x16xf32>) -> tensor<3x16xf32>
  %m3 = pmesh.matmul %x, %w bias %b : (tensor<3x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<3x16xf32>
  %y3 = pmesh.add %m3, %b : (tensor<3x16xf32>, tensor<16xf32>) -> tensor<3x16xf32>
  return %y1, %y2, %y3 : tensor<3x16xf32>, tensor<3x16xf32>, tensor<3x16xf32>
}
