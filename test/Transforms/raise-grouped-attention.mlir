// RUN: pipemesh-opt %s --pmesh-raise --split-input-file | FileCheck %s

// Grouped-query attention: an attention's k or v that copies fewer heads to
// every query head reads those heads instead (query head h reads h / g).
// Shapes: B = 2, H = 4 query heads, Hkv = 2, T = 8, D = 16 unless noted.

// Llama's repeat_kv as PyTorch 2 exports it: [B, Hkv, T, D] unsqueezed,
// expanded to [B, Hkv, 2, T, D], merged to [B, H, T, D]. k then goes through
// the exporter's k^T over merged batch dims (reshape, transpose, reshape,
// transpose back), which moves no element.

// CHECK-LABEL: func.func @llama_repeat_kv
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x8x16xf32>, %[[K:[^:]*]]: tensor<2x2x8x16xf32>, %[[V:[^:]*]]: tensor<2x2x8x16xf32>)
// CHECK-NEXT: %[[O:.*]] = pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NEXT: return %[[O]]
func.func @llama_repeat_kv(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>,
                           %v: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k5 = pmesh.reshape %k : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %kx = pmesh.broadcast %k5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %v5 = pmesh.reshape %v : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %vx = pmesh.broadcast %v5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %vr = pmesh.reshape %vx : tensor<2x2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %k3 = pmesh.reshape %kx : tensor<2x2x2x8x16xf32> -> tensor<8x8x16xf32>
  %kt3 = pmesh.transpose %k3 perm = [0, 2, 1] : tensor<8x8x16xf32> -> tensor<8x16x8xf32>
  %kt = pmesh.reshape %kt3 : tensor<8x16x8xf32> -> tensor<2x4x16x8xf32>
  %kr = pmesh.transpose %kt perm = [0, 1, 3, 2] : tensor<2x4x16x8xf32> -> tensor<2x4x8x16xf32>
  %o = pmesh.attention %q, %kr, %vr {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// The decomposed form the exporter writes: raised, then grouped.

// CHECK-LABEL: func.func @decomposed_repeat_kv
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x8x16xf32>, %[[K:[^:]*]]: tensor<2x2x8x16xf32>, %[[V:[^:]*]]: tensor<2x2x8x16xf32>)
// CHECK-NOT: pmesh.broadcast
// CHECK: pmesh.attention %[[Q]], %[[K]], %[[V]] {causal = false, scale = 1.000000e+00 : f32} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK-NOT: pmesh.softmax
func.func @decomposed_repeat_kv(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>,
                                %v: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k5 = pmesh.reshape %k : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %kx = pmesh.broadcast %k5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %kr = pmesh.reshape %kx : tensor<2x2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %v5 = pmesh.reshape %v : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %vx = pmesh.broadcast %v5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %vr = pmesh.reshape %vx : tensor<2x2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %s = pmesh.matmul %q, %kr {transpose_b = true} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
  %p = pmesh.softmax %s {axis = -1 : i64} : tensor<2x4x8x8xf32>
  %o = pmesh.matmul %p, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Negative: the copies in tile order ([B, 1, Hkv] expanded to [B, 2, Hkv]:
// query head h would read h % Hkv, not h / g) stay copies.

// CHECK-LABEL: func.func @tiled_heads
// CHECK: pmesh.broadcast
// CHECK: pmesh.attention %{{.*}} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
func.func @tiled_heads(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k5 = pmesh.reshape %k : tensor<2x2x8x16xf32> -> tensor<2x1x2x8x16xf32>
  %kx = pmesh.broadcast %k5 : tensor<2x1x2x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %kr = pmesh.reshape %kx : tensor<2x2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %o = pmesh.attention %q, %kr, %q {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Negative: a transpose between the copies and the attention that moves
// elements (the two query-head factors swapped) stays.

// CHECK-LABEL: func.func @heads_reordered
// CHECK: pmesh.broadcast
// CHECK: pmesh.transpose
// CHECK: pmesh.attention %{{.*}} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
func.func @heads_reordered(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %k5 = pmesh.reshape %k : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %kx = pmesh.broadcast %k5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %ks = pmesh.transpose %kx perm = [0, 2, 1, 3, 4] : tensor<2x2x2x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %kr = pmesh.reshape %ks : tensor<2x2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %o = pmesh.attention %q, %kr, %q {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Negative: copies over the batch as well as the heads ([1, 1, T, D] to
// [B, H, T, D]) are not a head group and stay.

// CHECK-LABEL: func.func @copied_over_batch
// CHECK: pmesh.broadcast
// CHECK: pmesh.attention %{{.*}} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
func.func @copied_over_batch(%q: tensor<2x4x8x16xf32>, %k: tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %kx = pmesh.broadcast %k : tensor<1x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %o = pmesh.attention %q, %kx, %q {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Multi-query through an explicit broadcast of one head; v grouped already.

// CHECK-LABEL: func.func @one_head_broadcast
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x8x16xf32>, %[[K:[^:]*]]: tensor<2x1x8x16xf32>, %[[V:[^:]*]]: tensor<2x2x8x16xf32>)
// CHECK-NEXT: pmesh.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x1x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
func.func @one_head_broadcast(%q: tensor<2x4x8x16xf32>, %k: tensor<2x1x8x16xf32>,
                              %v: tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %kx = pmesh.broadcast %k : tensor<2x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %o = pmesh.attention %q, %kx, %v {scale = 0.25 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}
