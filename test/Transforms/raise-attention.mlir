// RUN: pipemesh-opt %s --pmesh-raise --split-input-file | FileCheck %s

// Scaled dot-product attention as exporters write it: q @ k^T, scalar
// factors, an optional causal where, an optional additive mask, softmax over
// the keys, @ v. Shapes: B = 1, H = 2, T = 4, D = 8 unless noted.

// gen_gpt2.py: heads split by reshape + transpose, k^T straight from
// [B, T, H, D] with perm [0, 2, 3, 1], a scale multiplied after the matmul,
// where(tril, s, finfo.min). k is rebuilt as [B, H, T, D] from the original.

// CHECK-LABEL: func.func @gen_gpt2
// CHECK-SAME: (%[[QS:[^:]*]]: tensor<1x4x2x8xf32>, %[[KS:[^:]*]]: tensor<1x4x2x8xf32>, %[[VS:[^:]*]]: tensor<1x4x2x8xf32>)
// CHECK-NEXT: %[[Q:.*]] = pmesh.transpose %[[QS]] perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[V:.*]] = pmesh.transpose %[[VS]] perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[K:.*]] = pmesh.transpose %[[KS]] perm = [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
// The default causal = true is not printed.
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 0.353553385 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @gen_gpt2(%qs: tensor<1x4x2x8xf32>, %ks: tensor<1x4x2x8xf32>, %vs: tensor<1x4x2x8xf32>)
    -> tensor<1x2x4x8xf32> {
  %scale = pmesh.constant dense<0.353553385> : tensor<f32>
  %mask = pmesh.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %q = pmesh.transpose %qs perm = [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %kt = pmesh.transpose %ks perm = [0, 2, 3, 1] : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %v = pmesh.transpose %vs perm = [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
  %s = pmesh.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %ss = pmesh.mul %s, %scale : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %ss, %neg : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// HF GPT-2: k.transpose(-1, -2), division by sqrt(D), the causal mask sliced
// from the [1, 1, n_ctx, n_ctx] `bias` buffer (evaluated here), then
// `+ attention_mask` and softmax over the positive last axis.

// CHECK-LABEL: func.func @hf_gpt2_sliced_mask_and_padding
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>, %[[M:[^:]*]]: tensor<1x1x1x4xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 0.353553385 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @hf_gpt2_sliced_mask_and_padding(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                           %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x1x4xf32>)
    -> tensor<1x2x4x8xf32> {
  %sqrtd = pmesh.constant dense<2.82842708> : tensor<f32>
  %bias = pmesh.constant dense<[[[[true, false, false, false, false, false, false, false], [true, true, false, false, false, false, false, false], [true, true, true, false, false, false, false, false], [true, true, true, true, false, false, false, false], [true, true, true, true, true, false, false, false], [true, true, true, true, true, true, false, false], [true, true, true, true, true, true, true, false], [true, true, true, true, true, true, true, true]]]]> : tensor<1x1x8x8xi1>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %kt = pmesh.transpose %k perm = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = pmesh.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %sd = pmesh.div %s, %sqrtd : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %mask = pmesh.slice %bias[[0, 0, 0, 0] : [1, 1, 4, 4] : [1, 1, 1, 1]] : tensor<1x1x8x8xi1> -> tensor<1x1x4x4xi1>
  %w = pmesh.where %mask, %sd, %neg : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %wm = pmesh.add %w, %m : (tensor<1x2x4x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %wm {axis = 3 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// torch's scaled_dot_product_attention export: sqrt(scale) applied to q and to
// k^T separately (both folded into `scale`), an additive mask in front of the
// scores and no causal where.

// CHECK-LABEL: func.func @torch_sdpa_split_scale
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>, %[[M:[^:]*]]: tensor<4x4xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {causal = false, scale = 0.353553{{[0-9]*}} : f32}
// CHECK-NEXT: return %[[O]]
func.func @torch_sdpa_split_scale(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                  %v: tensor<1x2x4x8xf32>, %m: tensor<4x4xf32>)
    -> tensor<1x2x4x8xf32> {
  %c = pmesh.constant dense<0.594603539> : tensor<1xf32>
  %qs = pmesh.mul %q, %c : (tensor<1x2x4x8xf32>, tensor<1xf32>) -> tensor<1x2x4x8xf32>
  %kt = pmesh.transpose %k perm = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %kts = pmesh.mul %c, %kt : (tensor<1xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  %s = pmesh.matmul %qs, %kts : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %m, %s : (tensor<4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// No mask at all, k read through transpose_b, several factors (a mul and a
// div) on the scores: causal = false, scale = 0.5 / 4.

// CHECK-LABEL: func.func @transpose_b_unmasked
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x8xf32>, %[[K:[^:]*]]: tensor<2x6x8xf32>, %[[V:[^:]*]]: tensor<2x6x3xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 1.250000e-01 : f32} : (tensor<2x4x8xf32>, tensor<2x6x8xf32>, tensor<2x6x3xf32>) -> tensor<2x4x3xf32>
// CHECK-NEXT: return %[[O]]
func.func @transpose_b_unmasked(%q: tensor<2x4x8xf32>, %k: tensor<2x6x8xf32>, %v: tensor<2x6x3xf32>)
    -> tensor<2x4x3xf32> {
  %half = pmesh.constant dense<0.5> : tensor<f32>
  %four = pmesh.constant dense<4.0> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x6x8xf32>) -> tensor<2x4x6xf32>
  %s1 = pmesh.mul %half, %s : (tensor<f32>, tensor<2x4x6xf32>) -> tensor<2x4x6xf32>
  %s2 = pmesh.div %s1, %four : (tensor<2x4x6xf32>, tensor<f32>) -> tensor<2x4x6xf32>
  %p = pmesh.softmax %s2 {axis = 2 : i64} : tensor<2x4x6xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x4x6xf32>, tensor<2x6x3xf32>) -> tensor<2x4x3xf32>
  return %o : tensor<2x4x3xf32>
}

// -----

// masked_fill(triu(ones, 1), -inf): the condition marks the hidden keys, the
// fill is on the true side, the mask is [T, T].

// CHECK-LABEL: func.func @masked_fill_triu_neg_inf
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[O]]
func.func @masked_fill_triu_neg_inf(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                    %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %upper = pmesh.constant dense<[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]> : tensor<4x4xi1>
  %ninf = pmesh.constant dense<0xFF800000> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %upper, %ninf, %s : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Fewer queries than keys (Tq = 2, Tk = 4): the causal mask is aligned to the
// end, mask[i][j] = j <= i + 2.

// CHECK-LABEL: func.func @causal_aligned_to_end
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x2x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32} : (tensor<1x2x2x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @causal_aligned_to_end(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x4x8xf32>,
                                 %v: tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32> {
  %mask = pmesh.constant dense<[[true, true, true, false], [true, true, true, true]]> : tensor<2x4xi1>
  %neg = pmesh.constant dense<-1.0e+09> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x2x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<2x4xi1>, tensor<1x2x2x4xf32>, tensor<f32>) -> tensor<1x2x2x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x2x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// gen_gpt2.py --causal-mask=computed: not(less(rows, cols)) of the folded
// position ids, unsqueezed to [1, 1, T, T]; evaluated at compile time.

// CHECK-LABEL: func.func @computed_mask
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[O]]
func.func @computed_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                         %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %rows = pmesh.constant dense<[[0], [1], [2], [3]]> : tensor<4x1xi64>
  %cols = pmesh.constant dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %lt = pmesh.less %rows, %cols : (tensor<4x1xi64>, tensor<1x4xi64>) -> tensor<4x4xi1>
  %allowed = pmesh.not %lt : tensor<4x4xi1>
  %mask = pmesh.reshape %allowed : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A mask expression through transpose, broadcast, cast and and: the upper
// triangle transposed is the lower one.

// CHECK-LABEL: func.func @composed_mask_expression
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[O]]
func.func @composed_mask_expression(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                    %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %upper = pmesh.constant dense<[[true, true, true, true], [false, true, true, true], [false, false, true, true], [false, false, false, true]]> : tensor<4x4xi1>
  %one = pmesh.constant dense<1> : tensor<1xi64>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %lower = pmesh.transpose %upper perm = [1, 0] : tensor<4x4xi1> -> tensor<4x4xi1>
  %lower4 = pmesh.broadcast %lower : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %true = pmesh.cast %one : tensor<1xi64> -> tensor<1xi1>
  %mask = pmesh.and %lower4, %true : (tensor<1x1x4x4xi1>, tensor<1xi1>) -> tensor<1x1x4x4xi1>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: the same expression without the transpose is the anti-causal
// (upper) mask.

// CHECK-LABEL: func.func @composed_mask_expression_upper
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.where
func.func @composed_mask_expression_upper(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                          %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %upper = pmesh.constant dense<[[true, true, true, true], [false, true, true, true], [false, false, true, true], [false, false, false, true]]> : tensor<4x4xi1>
  %one = pmesh.constant dense<1> : tensor<1xi64>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %upper4 = pmesh.broadcast %upper : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %true = pmesh.cast %one : tensor<1xi64> -> tensor<1xi1>
  %mask = pmesh.and %upper4, %true : (tensor<1x1x4x4xi1>, tensor<1xi1>) -> tensor<1x1x4x4xi1>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A [Tk] additive mask added straight to the matmul is first folded in as a
// matmul bias; it is the attention mask all the same (the scale sits on q).

// CHECK-LABEL: func.func @key_padding_mask_as_bias
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>, %[[M:[^:]*]]: tensor<4xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {causal = false, scale = 2.500000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @key_padding_mask_as_bias(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                    %v: tensor<1x2x4x8xf32>, %m: tensor<4xf32>)
    -> tensor<1x2x4x8xf32> {
  %c = pmesh.constant dense<0.25> : tensor<f32>
  %qs = pmesh.mul %q, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %s = pmesh.matmul %qs, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %s, %m : (tensor<1x2x4x4xf32>, tensor<4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// k^T has another user: attention gets its own [B, H, T, D] view of k and the
// original transpose stays for that user.

// CHECK-LABEL: func.func @key_transpose_shared
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[KS:[^:]*]]: tensor<1x4x2x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[KT:.*]] = pmesh.transpose %[[KS]] perm = [0, 2, 3, 1]
// CHECK-NEXT: %[[K:.*]] = pmesh.transpose %[[KS]] perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[O]], %[[KT]]
func.func @key_transpose_shared(%q: tensor<1x2x4x8xf32>, %ks: tensor<1x4x2x8xf32>, %v: tensor<1x2x4x8xf32>)
    -> (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) {
  %kt = pmesh.transpose %ks perm = [0, 2, 3, 1] : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %s = pmesh.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %s {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>
}

// -----

// Negative: a constant mask that is not causal (key 1 hidden from query 3)
// must not become causal = true; the where stays and nothing is raised.

// CHECK-LABEL: func.func @non_causal_constant_mask
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.where
// CHECK: pmesh.softmax
func.func @non_causal_constant_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                    %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = pmesh.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, false, true, true]]> : tensor<4x4xi1>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: the upper triangle including the diagonal on the visible side is
// the anti-causal mask.

// CHECK-LABEL: func.func @upper_triangular_mask
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.where
func.func @upper_triangular_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                 %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = pmesh.constant dense<[[true, true, true, true], [false, true, true, true], [false, false, true, true], [false, false, false, true]]> : tensor<4x4xi1>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: a mask that is not a compile-time constant.

// CHECK-LABEL: func.func @runtime_mask
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.where
func.func @runtime_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                        %v: tensor<1x2x4x8xf32>, %mask: tensor<4x4xi1>) -> tensor<1x2x4x8xf32> {
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: -1e4 does not hide a key exactly.

// CHECK-LABEL: func.func @fill_not_negative_enough
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.where
func.func @fill_not_negative_enough(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                    %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = pmesh.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %neg = pmesh.constant dense<-1.0e+04> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: the probabilities are also returned (e.g. output_attentions).

// CHECK-LABEL: func.func @probabilities_have_other_use
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @probabilities_have_other_use(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                        %v: tensor<1x2x4x8xf32>)
    -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %s {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %p : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}

// -----

// Negative: the scaled scores are also returned.

// CHECK-LABEL: func.func @scores_have_other_use
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @scores_have_other_use(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                 %v: tensor<1x2x4x8xf32>)
    -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>) {
  %c = pmesh.constant dense<0.125> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %ss = pmesh.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %ss {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %ss : tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>
}

// -----

// Negative: softmax over the queries is no attention.

// CHECK-LABEL: func.func @softmax_over_queries
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @softmax_over_queries(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %s {axis = 2 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: a factor applied after the additive mask would scale the mask
// too, which `scale` cannot express.

// CHECK-LABEL: func.func @scale_after_mask
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @scale_after_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                            %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %c = pmesh.constant dense<0.125> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %ss = pmesh.mul %sm, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %ss {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: with more queries than keys a causal mask hides every key from
// the first queries; pmesh.attention does not define that.

// CHECK-LABEL: func.func @more_queries_than_keys
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.where
func.func @more_queries_than_keys(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x2x8xf32>,
                                  %v: tensor<1x2x2x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = pmesh.constant dense<[[false, false], [false, false], [true, false], [true, true]]> : tensor<4x2xi1>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x4x2xf32>
  %w = pmesh.where %mask, %s, %neg : (tensor<4x2xi1>, tensor<1x2x4x2xf32>, tensor<f32>) -> tensor<1x2x4x2xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x2xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x2xf32>, tensor<1x2x2x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Multi-query attention without repeat_kv: k shared by all heads through a
// broadcasting matmul stays one head (grouped-query attention: every query
// head reads it); v already has q's heads.

// CHECK-LABEL: func.func @broadcast_key
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x1x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 1.000000e+00 : f32} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @broadcast_key(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>,
                         %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %s {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Falcon's multi-query attention as PyTorch 2 exports it: one k head and one
// v head of [B, 1, T, D], k^T written as reshape, swap, reshape, both
// broadcast by the matmuls over 2 query heads, a causal additive mask: the
// attention reads the one k and v head (no copies).

// CHECK-LABEL: func.func @falcon_multi_query
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x1x4x8xf32>, %[[V:[^:]*]]: tensor<1x1x4x8xf32>)
// CHECK-NOT: pmesh.broadcast
// CHECK: pmesh.attention %[[Q]], %{{.*}}, %[[V]] {scale = 2.500000e-01 : f32} : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NOT: pmesh.softmax
func.func @falcon_multi_query(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>,
                              %v: tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %half = pmesh.constant dense<0.5> : tensor<1xf32>
  %mask = pmesh.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %k3 = pmesh.reshape %k : tensor<1x1x4x8xf32> -> tensor<1x4x8xf32>
  %kt3 = pmesh.transpose %k3 perm = [0, 2, 1] : tensor<1x4x8xf32> -> tensor<1x8x4xf32>
  %kt = pmesh.reshape %kt3 : tensor<1x8x4xf32> -> tensor<1x1x8x4xf32>
  %qs = pmesh.mul %q, %half : (tensor<1x2x4x8xf32>, tensor<1xf32>) -> tensor<1x2x4x8xf32>
  %kts = pmesh.mul %kt, %half : (tensor<1x1x8x4xf32>, tensor<1xf32>) -> tensor<1x1x8x4xf32>
  %s = pmesh.matmul %qs, %kts : (tensor<1x2x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %s, %mask : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Sliding-window attention: a where band of 2 keys (each query sees itself
// and the key before it) is causal attention with window = 2.

// CHECK-LABEL: func.func @sliding_window_where
// CHECK: pmesh.attention %{{.*}} {scale = 1.000000e+00 : f32, window = 2 : i64}
// CHECK-NOT: pmesh.softmax
func.func @sliding_window_where(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %band = pmesh.constant dense<[[true, false, false, false], [true, true, false, false], [false, true, true, false], [false, false, true, true]]> : tensor<4x4xi1>
  %neg = pmesh.constant dense<0xFF800000> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %band, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// transformers' sliding-window mask as an additive constant (Mistral), 3 keys
// wide, 2 queries aligned to the end of 4 keys: query 0 is at position 2 and
// sees keys 0..2, query 1 keys 1..3.

// CHECK-LABEL: func.func @sliding_window_additive
// CHECK: pmesh.attention %{{.*}} {scale = 1.000000e+00 : f32, window = 3 : i64} : (tensor<1x2x2x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
func.func @sliding_window_additive(%q: tensor<1x2x2x8xf32>, %k: tensor<1x2x4x8xf32>,
                                   %v: tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32> {
  %mask = pmesh.constant dense<[[[[0.0, 0.0, 0.0, -3.40282347E+38], [-3.40282347E+38, 0.0, 0.0, 0.0]]]]> : tensor<1x1x2x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x2x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x4xf32>
  %sm = pmesh.add %s, %mask : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x2x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x2x8xf32>
  return %o : tensor<1x2x2x8xf32>
}

// -----

// GPT-Neo's local layers: their own causal where, then transformers' additive
// band of 2 keys: the band is what both leave visible.

// CHECK-LABEL: func.func @causal_where_then_additive_band
// CHECK: pmesh.attention %{{.*}} {scale = 1.000000e+00 : f32, window = 2 : i64}
// CHECK-NOT: pmesh.add
func.func @causal_where_then_additive_band(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                           %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %tril = pmesh.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]> : tensor<4x4xi1>
  %neg = pmesh.constant dense<-3.40282347E+38> : tensor<f32>
  %band = pmesh.constant dense<[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [-3.40282347E+38, 0.0, 0.0, -3.40282347E+38], [-3.40282347E+38, -3.40282347E+38, 0.0, 0.0]]> : tensor<4x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %tril, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %wm = pmesh.add %w, %band : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %wm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: a band with a hole (the last query skips key 1) is no window;
// the mask stays a where.

// CHECK-LABEL: func.func @band_with_hole
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @band_with_hole(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                          %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %band = pmesh.constant dense<[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, false, true, true]]> : tensor<4x4xi1>
  %neg = pmesh.constant dense<0xFF800000> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = pmesh.where %band, %s, %neg : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %w {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Gemma 2's soft-capped scores: (q @ k^T) * scale / cap, tanh, * cap, then the
// causal mask. The cap becomes `softcap`; the scale inside it stays `scale`.

// CHECK-LABEL: func.func @gemma2_softcap
// CHECK: pmesh.attention %{{.*}} {scale = 6.250000e-02 : f32, softcap = 5.000000e+01 : f32}
// CHECK-NOT: pmesh.tanh
func.func @gemma2_softcap(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                          %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %scale = pmesh.constant dense<0.0625> : tensor<f32>
  %cap = pmesh.constant dense<50.0> : tensor<f32>
  %mask = pmesh.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %ss = pmesh.mul %s, %scale : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %sd = pmesh.div %ss, %cap : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %t = pmesh.tanh %sd : tensor<1x2x4x4xf32>
  %sc = pmesh.mul %t, %cap : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %sc, %mask : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: a factor between the cap and the mask (2 * 50 tanh(s / 50)) is no
// soft cap of the scores' scale; the chain stays decomposed.

// CHECK-LABEL: func.func @factor_after_softcap
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.tanh
func.func @factor_after_softcap(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %two = pmesh.constant dense<2.0> : tensor<f32>
  %cap = pmesh.constant dense<50.0> : tensor<f32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %sd = pmesh.div %s, %cap : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %t = pmesh.tanh %sd : tensor<1x2x4x4xf32>
  %sc = pmesh.mul %t, %cap : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %s2 = pmesh.mul %sc, %two : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %s2 {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A cap of 1 as the exporter's optimizer leaves it (Gemma 2 at opset 23): the
// factors of 1 around the tanh folded away, tanh(scale * q @ k^T) + mask.

// CHECK-LABEL: func.func @bare_tanh_is_cap_one
// CHECK: pmesh.attention %{{.*}} {scale = 6.250000e-02 : f32, softcap = 1.000000e+00 : f32}
// CHECK-NOT: pmesh.tanh
func.func @bare_tanh_is_cap_one(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %scale = pmesh.constant dense<0.0625> : tensor<f32>
  %mask = pmesh.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %ss = pmesh.mul %s, %scale : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %t = pmesh.tanh %ss : tensor<1x2x4x4xf32>
  %sm = pmesh.add %t, %mask : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: a tanh over the masked scores (tanh(s + mask)) caps the mask too,
// which `softcap` (applied before the mask) cannot say; it stays decomposed.

// CHECK-LABEL: func.func @tanh_over_mask
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.tanh
func.func @tanh_over_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                          %v: tensor<1x2x4x8xf32>, %mask: tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %s, %mask : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %t = pmesh.tanh %sm : tensor<1x2x4x4xf32>
  %p = pmesh.softmax %t {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Bloom: the scores in [B * H, T, T] with the ALiBi bias added there, reshaped
// to [B, H, T, T] for the causal mask and the softmax, reshaped back for @ v.
// The attention is built in the scores' layout: the causal mask is dropped,
// the bias stays its mask.

// CHECK-LABEL: func.func @bloom_alibi_across_reshapes
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x8xf32>, %[[K:[^:]*]]: tensor<2x4x8xf32>, %[[V:[^:]*]]: tensor<2x4x8xf32>)
// CHECK: %[[ALIBI:.*]] = pmesh.constant
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] mask %[[ALIBI]] {scale = 2.500000e-01 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x1x4xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @bloom_alibi_across_reshapes(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>,
                                       %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %scale = pmesh.constant dense<0.25> : tensor<f32>
  %alibi = pmesh.constant dense<[[[0.0, 0.5, 1.0, 1.5]], [[0.0, 0.25, 0.5, 0.75]]]> : tensor<2x1x4xf32>
  %causal = pmesh.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %ss = pmesh.mul %s, %scale : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
  %sb = pmesh.add %ss, %alibi : (tensor<2x4x4xf32>, tensor<2x1x4xf32>) -> tensor<2x4x4xf32>
  %s4 = pmesh.reshape %sb : tensor<2x4x4xf32> -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %s4, %causal : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p4 = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %p = pmesh.reshape %p4 : tensor<1x2x4x4xf32> -> tensor<2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Negative: the mask after the reshape is no causal band (a key padding mask):
// it cannot be an operand in the scores' layout, so nothing is raised.

// CHECK-LABEL: func.func @mask_after_reshape_not_causal
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @mask_after_reshape_not_causal(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>,
                                         %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %pad = pmesh.constant dense<[0.0, 0.0, -3.40282347E+38, 0.0]> : tensor<4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
  %s4 = pmesh.reshape %s : tensor<2x4x4xf32> -> tensor<1x2x4x4xf32>
  %sm = pmesh.add %s4, %pad : (tensor<1x2x4x4xf32>, tensor<4xf32>) -> tensor<1x2x4x4xf32>
  %p4 = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %p = pmesh.reshape %p4 : tensor<1x2x4x4xf32> -> tensor<2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Negative: the probabilities are reshaped for @ v but the scores never were:
// the layouts differ (pmesh.reshape of [1, 2, 4, 4] to [2, 4, 4] here merges
// leading dims, but the scores' matmul ran in [1, 2, 4, 4]).

// CHECK-LABEL: func.func @probabilities_reshaped_alone
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @probabilities_reshaped_alone(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                        %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p4 = pmesh.softmax %s {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %p = pmesh.reshape %p4 : tensor<1x2x4x4xf32> -> tensor<2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Negative: one head of probabilities broadcast over two heads of v: the
// scores' leading dims are not the output's, no attention of q, k and v.

// CHECK-LABEL: func.func @probabilities_broadcast_over_values
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @probabilities_broadcast_over_values(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>,
                                               %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p = pmesh.softmax %s {axis = -1 : i64} : tensor<1x1x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// An additive mask constant of 0 on the visible keys and finfo.min / -inf on
// the hidden ones in the causal pattern (what PyTorch 2 exports of transformers'
// models add), directly or broadcast over the batch: causal attention, no mask.

// CHECK-LABEL: func.func @additive_causal_constant
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x2x4x8xf32>, %[[K:[^:]*]]: tensor<2x2x4x8xf32>, %[[V:[^:]*]]: tensor<2x2x4x8xf32>)
// CHECK-NEXT: %[[O1:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
// CHECK-NEXT: %[[O2:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
// CHECK-NEXT: return %[[O1]], %[[O2]]
func.func @additive_causal_constant(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>,
                                   %v: tensor<2x2x4x8xf32>) -> (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) {
  %quarter = pmesh.constant dense<0.25> : tensor<f32>
  %min = pmesh.constant dense<[[[[0.0, 0xFF7FFFFF, 0xFF7FFFFF, 0xFF7FFFFF], [0.0, 0.0, 0xFF7FFFFF, 0xFF7FFFFF], [0.0, 0.0, 0.0, 0xFF7FFFFF], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %ninf = pmesh.constant dense<[[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [-0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %wide = pmesh.broadcast %ninf : tensor<1x1x4x4xf32> -> tensor<2x1x4x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %s1 = pmesh.mul %s, %quarter : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %m1 = pmesh.add %s1, %min : (tensor<2x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p1 = pmesh.softmax %m1 {axis = -1 : i64} : tensor<2x2x4x4xf32>
  %o1 = pmesh.matmul %p1, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  %t = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %t1 = pmesh.mul %t, %quarter : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %m2 = pmesh.add %t1, %wide : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p2 = pmesh.softmax %m2 {axis = -1 : i64} : tensor<2x2x4x4xf32>
  %o2 = pmesh.matmul %p2, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o1, %o2 : tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>
}

// -----

// Additive constants that are not exactly causal stay masks: one more hidden
// key, a -1e4 fill (too shallow to hide a key whatever the scores), a value
// that shifts a visible key.

// CHECK-LABEL: func.func @additive_not_causal
// CHECK-COUNT-3: pmesh.attention {{.*}} mask
func.func @additive_not_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>)
    -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %extra = pmesh.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0xFF800000, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %shallow = pmesh.constant dense<[[0.0, -1.0e4, -1.0e4, -1.0e4], [0.0, 0.0, -1.0e4, -1.0e4], [0.0, 0.0, 0.0, -1.0e4], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %shift = pmesh.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.5, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %a = pmesh.add %s, %extra : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %pa = pmesh.softmax %a {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %oa = pmesh.matmul %pa, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %t = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %b = pmesh.add %t, %shallow : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %pb = pmesh.softmax %b {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %ob = pmesh.matmul %pb, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  %u = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %c = pmesh.add %u, %shift : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %pc = pmesh.softmax %c {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %oc = pmesh.matmul %pc, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %oa, %ob, %oc : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// GPT-NeoX-Japanese: the scores are computed as [B * H, T, T] (baddbmm from
// zeros, which are looked through), reshaped to [B, H, T, T], masked there
// with a causal band and normalized, and p @ v runs in [B, H]. The attention
// is built in the probabilities' layout: q and k are reshaped to it.

// CHECK-LABEL: func.func @scores_reshaped_before_probabilities
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<4x3x8xf32>, %[[K:[^:]*]]: tensor<4x3x8xf32>, %[[V:[^:]*]]: tensor<2x2x3x8xf32>)
// CHECK-DAG: %[[Q4:.*]] = pmesh.reshape %[[Q]] : tensor<4x3x8xf32> -> tensor<2x2x3x8xf32>
// CHECK-DAG: %[[K4:.*]] = pmesh.reshape %[[K]] : tensor<4x3x8xf32> -> tensor<2x2x3x8xf32>
// CHECK: %[[O:.*]] = pmesh.attention %[[Q4]], %[[K4]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x2x3x8xf32>, tensor<2x2x3x8xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
// CHECK-NEXT: return %[[O]]
// CHECK-NOT: pmesh.softmax
func.func @scores_reshaped_before_probabilities(%q: tensor<4x3x8xf32>, %k: tensor<4x3x8xf32>,
                                                %v: tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32> {
  %scale = pmesh.constant dense<0.25> : tensor<f32>
  %zeros = pmesh.constant dense<0.0> : tensor<4x3x3xf32>
  %causal = pmesh.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]]]> : tensor<1x1x3x3xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x3xf32>
  %ss = pmesh.mul %s, %scale : (tensor<4x3x3xf32>, tensor<f32>) -> tensor<4x3x3xf32>
  %sz = pmesh.add %zeros, %ss : (tensor<4x3x3xf32>, tensor<4x3x3xf32>) -> tensor<4x3x3xf32>
  %s4 = pmesh.reshape %sz : tensor<4x3x3xf32> -> tensor<2x2x3x3xf32>
  %sm = pmesh.add %s4, %causal : (tensor<2x2x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<2x2x3x3xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %o : tensor<2x2x3x8xf32>
}

// -----

// Negative: as above, but what is added before the reshape is a real mask
// (ALiBi-like), in the scores' layout, which is not the probabilities': it
// cannot be the attention's operand, so nothing is raised.

// CHECK-LABEL: func.func @mask_in_scores_layout_after_relayout
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @mask_in_scores_layout_after_relayout(%q: tensor<4x3x8xf32>, %k: tensor<4x3x8xf32>,
                                                %v: tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32> {
  %bias = pmesh.constant dense<[0.0, 0.5, 1.0]> : tensor<3xf32>
  %causal = pmesh.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]]]> : tensor<1x1x3x3xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<4x3x8xf32>, tensor<4x3x8xf32>) -> tensor<4x3x3xf32>
  %sb = pmesh.add %s, %bias : (tensor<4x3x3xf32>, tensor<3xf32>) -> tensor<4x3x3xf32>
  %s4 = pmesh.reshape %sb : tensor<4x3x3xf32> -> tensor<2x2x3x3xf32>
  %sm = pmesh.add %s4, %causal : (tensor<2x2x3x3xf32>, tensor<1x1x3x3xf32>) -> tensor<2x2x3x3xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<2x2x3x3xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x2x3x3xf32>, tensor<2x2x3x8xf32>) -> tensor<2x2x3x8xf32>
  return %o : tensor<2x2x3x8xf32>
}

// -----

// A zero constant added to unmasked scores is no mask: the attention has none.

// CHECK-LABEL: func.func @zeros_added_to_scores
// CHECK: pmesh.attention %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} {causal = false, scale = 1.000000e+00 : f32}
// CHECK-NOT: pmesh.softmax
func.func @zeros_added_to_scores(%q: tensor<2x3x8xf32>, %k: tensor<2x3x8xf32>,
                                 %v: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %zeros = pmesh.constant dense<0.0> : tensor<2x3x3xf32>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x3xf32>
  %sz = pmesh.add %s, %zeros : (tensor<2x3x3xf32>, tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
  %p = pmesh.softmax %sz {axis = -1 : i64} : tensor<2x3x3xf32>
  %o = pmesh.matmul %p, %v : (tensor<2x3x3xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %o : tensor<2x3x8xf32>
}

// -----

// A band computed as PyTorch 2 and gen_gpt2 compute it, not folded (past
// 4096 tokens the importer leaves it to the raise): not(rows < cols) and
// (rows - cols < 2), the and written as where(a, b, false).

// CHECK-LABEL: func.func @computed_band_with_sub_and_where
// CHECK: pmesh.attention %{{.*}} {scale = 1.000000e+00 : f32, window = 2 : i64}
// CHECK-NOT: pmesh.softmax
func.func @computed_band_with_sub_and_where(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                            %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %rows = pmesh.constant dense<[[0], [1], [2], [3]]> : tensor<4x1xi64>
  %cols = pmesh.constant dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>
  %two = pmesh.constant dense<2> : tensor<i64>
  %false = pmesh.constant dense<false> : tensor<i1>
  %ninf = pmesh.constant dense<0xFF800000> : tensor<f32>
  %after = pmesh.less %rows, %cols : (tensor<4x1xi64>, tensor<1x4xi64>) -> tensor<4x4xi1>
  %causal = pmesh.not %after : tensor<4x4xi1>
  %d = pmesh.sub %rows, %cols : (tensor<4x1xi64>, tensor<1x4xi64>) -> tensor<4x4xi64>
  %near = pmesh.less %d, %two : (tensor<4x4xi64>, tensor<i64>) -> tensor<4x4xi1>
  %allowed = pmesh.where %causal, %near, %false : (tensor<4x4xi1>, tensor<4x4xi1>, tensor<i1>) -> tensor<4x4xi1>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.where %allowed, %s, %ninf : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Negative: the same with rows + cols < 4 in place of the distance: an
// anti-diagonal cut, no band; it stays decomposed.

// CHECK-LABEL: func.func @computed_mask_not_a_band
// CHECK-NOT: pmesh.attention
// CHECK: pmesh.softmax
func.func @computed_mask_not_a_band(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                                    %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %rows = pmesh.constant dense<[[0], [1], [2], [3]]> : tensor<4x1xi64>
  %cols = pmesh.constant dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>
  %four = pmesh.constant dense<4> : tensor<i64>
  %false = pmesh.constant dense<false> : tensor<i1>
  %ninf = pmesh.constant dense<0xFF800000> : tensor<f32>
  %after = pmesh.less %rows, %cols : (tensor<4x1xi64>, tensor<1x4xi64>) -> tensor<4x4xi1>
  %causal = pmesh.not %after : tensor<4x4xi1>
  %sum = pmesh.add %rows, %cols : (tensor<4x1xi64>, tensor<1x4xi64>) -> tensor<4x4xi64>
  %cut = pmesh.less %sum, %four : (tensor<4x4xi64>, tensor<i64>) -> tensor<4x4xi1>
  %allowed = pmesh.where %causal, %cut, %false : (tensor<4x4xi1>, tensor<4x4xi1>, tensor<i1>) -> tensor<4x4xi1>
  %s = pmesh.matmul %q, %k {transpose_b = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %sm = pmesh.where %allowed, %s, %ninf : (tensor<4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = pmesh.softmax %sm {axis = -1 : i64} : tensor<1x2x4x4xf32>
  %o = pmesh.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
