// RUN: pipemesh-opt %s -split-input-file -verify-diagnostics

// One case per verifier error path of the pmesh dialect, in the order of
// PMeshOps.td. Shape errors come from the shared rules in ShapeFunctions.cpp.

//===----------------------------------------------------------------------===//
// Static shapes
//===----------------------------------------------------------------------===//

func.func @dynamic_operand(%a: tensor<?x4xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = pmesh.add %a, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @dynamic_result(%a: tensor<2x4xf32>) {
  // expected-error @+1 {{result #0 must be statically shaped tensor}}
  %0 = pmesh.reshape %a : tensor<2x4xf32> -> tensor<?xf32>
  return
}

// -----

func.func @unranked(%a: tensor<*xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %0 = "pmesh.neg"(%a) : (tensor<*xf32>) -> tensor<*xf32>
  return
}

// -----

// expected-error @+1 {{attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor}}
pmesh.param @w : tensor<?x4xf32>

//===----------------------------------------------------------------------===//
// Parameters and constants
//===----------------------------------------------------------------------===//

// -----

func.func @param_in_function() {
  // The Symbol trait rejects this before the op's own "must be declared at
  // module level" check, which is left for a param with no parent at all.
  // expected-error @+1 {{'pmesh.param' op symbol's parent must have the SymbolTable trait}}
  pmesh.param @w : tensor<4xf32>
  return
}

// -----

func.func @get_missing_param() {
  // expected-error @+1 {{'pmesh.get_param' op 'nope' does not name a pmesh.param}}
  %0 = pmesh.get_param @nope : tensor<4xf32>
  return
}

// -----

func.func @not_a_param() {
  // expected-error @+1 {{'pmesh.get_param' op 'not_a_param' does not name a pmesh.param}}
  %0 = pmesh.get_param @not_a_param : tensor<4xf32>
  return
}

// -----

pmesh.param @w : tensor<4x8xf32>
func.func @get_param_wrong_type() {
  // expected-error @+1 {{'pmesh.get_param' op type 'tensor<8x4xf32>' differs from parameter @w of type 'tensor<4x8xf32>'}}
  %0 = pmesh.get_param @w : tensor<8x4xf32>
  return
}

// -----

func.func @constant_type_mismatch() {
  // The custom form takes the result type from the value; the generic form
  // can disagree.
  // expected-error @+1 {{'pmesh.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "pmesh.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  return
}

// -----

func.func @constant_not_a_tensor() {
  // expected-error @+1 {{result #0 must be statically shaped tensor}}
  %0 = pmesh.constant dense<1.0> : vector<2xf32>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// -----

func.func @broadcast_mismatch(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.add' op shapes 2x3 and 4 do not broadcast (dim 1: 3 vs 4)}}
  %0 = pmesh.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @binary_wrong_result_shape(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.mul' op result shape 3 does not match the expected 2x3}}
  %0 = pmesh.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @binary_mixed_elements(%a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+1 {{'pmesh.sub' op operand element types differ: 'f32' vs 'f16'}}
  %0 = pmesh.sub %a, %b : (tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

func.func @binary_wrong_result_element(%a: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.div' op result element type must be 'f32', got 'f16'}}
  %0 = pmesh.div %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf16>
  return
}

// -----

func.func @compare_not_i1(%a: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.equal' op result element type must be 'i1', got 'f32'}}
  %0 = pmesh.equal %a, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @less_not_i1(%a: tensor<3xi64>) {
  // expected-error @+1 {{'pmesh.less' op result element type must be 'i1', got 'i64'}}
  %0 = pmesh.less %a, %a : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  return
}

// -----

func.func @and_not_i1(%a: tensor<3xi32>) {
  // expected-error @+1 {{'pmesh.and' op operands must be i1, got 'i32'}}
  %0 = pmesh.and %a, %a : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  return
}

// -----

func.func @not_not_i1(%a: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.not' op operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = pmesh.not %a : tensor<3xf32>
  return
}

// -----

func.func @sqrt_of_integer(%a: tensor<3xi32>) {
  // expected-error @+1 {{'pmesh.sqrt' op operand #0 must be statically shaped tensor of floating-point values}}
  %0 = pmesh.sqrt %a : tensor<3xi32>
  return
}

// -----

func.func @unary_type_change(%a: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.exp' op requires the same type for all operands and results}}
  %0 = "pmesh.exp"(%a) : (tensor<3xf32>) -> tensor<3xf16>
  return
}

// -----

func.func @cast_changes_shape(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.cast' op cast must not change the shape: 2x3 vs 3x2}}
  %0 = pmesh.cast %a : tensor<2x3xf32> -> tensor<3x2xf16>
  return
}

// -----

func.func @where_cond_not_i1(%c: tensor<3xf32>, %a: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = pmesh.where %c, %a, %a : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

func.func @where_mixed_elements(%c: tensor<3xi1>, %a: tensor<3xf32>, %b: tensor<3xf16>) {
  // expected-error @+1 {{'pmesh.where' op on_true, on_false and result must share an element type, got 'f32', 'f16' and 'f32'}}
  %0 = pmesh.where %c, %a, %b : (tensor<3xi1>, tensor<3xf32>, tensor<3xf16>) -> tensor<3xf32>
  return
}

// -----

func.func @where_cond_does_not_broadcast(%c: tensor<4xi1>, %a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.where' op shapes 4 and 2x3 do not broadcast (dim 1: 4 vs 3)}}
  %0 = pmesh.where %c, %a, %a : (tensor<4xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_axis_out_of_range(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.reduce_sum' op reduction axis 2 out of range for shape 2x3}}
  %0 = pmesh.reduce_sum %a axes = [2] : tensor<2x3xf32> -> tensor<2x1xf32>
  return
}

// -----

func.func @reduce_negative_axis_out_of_range(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.reduce_mean' op reduction axis -3 out of range for shape 2x3}}
  %0 = pmesh.reduce_mean %a axes = [-3] : tensor<2x3xf32> -> tensor<2x1xf32>
  return
}

// -----

func.func @reduce_axis_repeated(%a: tensor<2x3xf32>) {
  // 1 and -1 name the same dim.
  // expected-error @+1 {{'pmesh.reduce_sum' op reduction axes [1, -1] name dim 1 more than once (shape 2x3)}}
  %0 = pmesh.reduce_sum %a axes = [1, -1] : tensor<2x3xf32> -> tensor<2x1xf32>
  return
}

// -----

func.func @reduce_of_scalar(%a: tensor<f32>) {
  // expected-error @+1 {{'pmesh.reduce_sum' op reduction axis 0 out of range for shape scalar}}
  %0 = pmesh.reduce_sum %a axes = [0] : tensor<f32> -> tensor<f32>
  return
}

// -----

func.func @reduce_keepdims_mismatch(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.reduce_mean' op result shape 2x1 does not match the expected 2}}
  %0 = pmesh.reduce_mean %a axes = [1] {keepdims = false} : tensor<2x3xf32> -> tensor<2x1xf32>
  return
}

// -----

func.func @reduce_element_type(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.reduce_sum' op result element type must equal the input's}}
  %0 = pmesh.reduce_sum %a axes = [1] : tensor<2x3xf32> -> tensor<2x1xf16>
  return
}

//===----------------------------------------------------------------------===//
// Fused neural-network ops
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_contracting(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op contracting dims differ: 2x3 @ 4x5 (3 vs 4)}}
  %0 = pmesh.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return
}

// -----

func.func @matmul_contracting_transposed(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op contracting dims differ: 2x3^T @ 4x5^T (2 vs 5)}}
  %0 = pmesh.matmul %a, %b {transpose_a = true, transpose_b = true} : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<3x4xf32>
  return
}

// -----

func.func @matmul_rank_1(%a: tensor<3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op matmul operands must have rank >= 2, got 3 and 3x4}}
  %0 = pmesh.matmul %a, %b : (tensor<3xf32>, tensor<3x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @matmul_batch_mismatch(%a: tensor<2x4x3xf32>, %b: tensor<5x3x4xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op matmul batch dims: shapes 2 and 5 do not broadcast (dim 0: 2 vs 5)}}
  %0 = pmesh.matmul %a, %b : (tensor<2x4x3xf32>, tensor<5x3x4xf32>) -> tensor<2x4x4xf32>
  return
}

// -----

func.func @matmul_wrong_result(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op result shape 2x3 does not match the expected 2x4}}
  %0 = pmesh.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  return
}

// -----

func.func @matmul_bias_size(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %bias: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op bias must be 1-D of size 4, got 3}}
  %0 = pmesh.matmul %a, %b bias %bias : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_bias_rank(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %bias: tensor<2x4xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op bias must be 1-D of size 4, got 2x4}}
  %0 = pmesh.matmul %a, %b bias %bias : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_mixed_elements(%a: tensor<2x3xf32>, %b: tensor<3x4xbf16>) {
  // expected-error @+1 {{'pmesh.matmul' op b element type 'bf16' differs from a element type 'f32'}}
  %0 = pmesh.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xbf16>) -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_bias_element(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>, %bias: tensor<4xf16>) {
  // expected-error @+1 {{'pmesh.matmul' op bias element type 'f16' differs from a element type 'f32'}}
  %0 = pmesh.matmul %a, %b bias %bias : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf16>) -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_result_element(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{'pmesh.matmul' op result element type 'f64' differs from a element type 'f32'}}
  %0 = pmesh.matmul %a, %b : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf64>
  return
}

// -----

func.func @layer_norm_scale(%x: tensor<2x4xf32>, %g: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op layer_norm scale 3 does not match normalized dims 4}}
  %0 = pmesh.layer_norm %x, %g : (tensor<2x4xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @layer_norm_bias(%x: tensor<2x4xf32>, %g: tensor<4xf32>, %b: tensor<2x4xf32>) {
  // The bias may only cover the normalized dims (here the last one).
  // expected-error @+1 {{'pmesh.layer_norm' op layer_norm bias 2x4 does not match normalized dims 4}}
  %0 = pmesh.layer_norm %x, %g, %b : (tensor<2x4xf32>, tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @layer_norm_axis(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op layer_norm axis 2 out of range for shape 2x4}}
  %0 = pmesh.layer_norm %x, %g {axis = 2 : i64} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @layer_norm_negative_axis(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op layer_norm axis -3 out of range for shape 2x4}}
  %0 = pmesh.layer_norm %x, %g {axis = -3 : i64} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @layer_norm_epsilon_zero(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op epsilon must be positive, got 0}}
  %0 = pmesh.layer_norm %x, %g {epsilon = 0.0 : f32} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @layer_norm_epsilon_nan(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op epsilon must be positive, got nan}}
  %0 = pmesh.layer_norm %x, %g {epsilon = 0x7FC00000 : f32} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @layer_norm_result(%x: tensor<2x4xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op result type must equal the input type}}
  %0 = pmesh.layer_norm %x, %g : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @layer_norm_scale_element(%x: tensor<2x4xbf16>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.layer_norm' op scale element type 'f32' differs from input element type 'bf16'}}
  %0 = pmesh.layer_norm %x, %g : (tensor<2x4xbf16>, tensor<4xf32>) -> tensor<2x4xbf16>
  return
}

// -----

func.func @gelu_approximate(%x: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.gelu' op approximate must be "none" or "tanh", got "fast"}}
  %0 = pmesh.gelu %x {approximate = "fast"} : tensor<4xf32>
  return
}

// -----

func.func @softmax_axis(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{'pmesh.softmax' op axis 2 out of range for shape 2x4}}
  %0 = pmesh.softmax %x {axis = 2 : i64} : tensor<2x4xf32>
  return
}

// -----

func.func @softmax_of_scalar(%x: tensor<f32>) {
  // The default axis -1 does not exist in a 0-d tensor.
  // expected-error @+1 {{'pmesh.softmax' op axis -1 out of range for shape scalar}}
  %0 = pmesh.softmax %x : tensor<f32>
  return
}

// -----

func.func @log_softmax_axis(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{'pmesh.log_softmax' op axis -3 out of range for shape 2x4}}
  %0 = pmesh.log_softmax %x {axis = -3 : i64} : tensor<2x4xf32>
  return
}

// -----

func.func @attention_rank(%q: tensor<2x8x16xf32>, %k: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention q, k, v must have equal rank >= 2: 2x8x16, 2x2x8x16, 2x2x8x16}}
  %0 = pmesh.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_rank_1(%q: tensor<16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention q, k, v must have equal rank >= 2: 16, 16, 16}}
  %0 = pmesh.attention %q, %q, %q {scale = 1.0 : f32} : (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @attention_leading_dims(%q: tensor<2x8x16xf32>, %k: tensor<3x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention leading dims of k and v must be q's, or q's with the last (the heads) divided by a group size: 2x8x16, 3x8x16, 3x8x16}}
  %0 = pmesh.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<2x8x16xf32>, tensor<3x8x16xf32>, tensor<3x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

// Grouped heads share q's batch: only the last leading dim may be smaller.
func.func @attention_grouped_batch(%q: tensor<2x4x8x16xf32>, %k: tensor<1x2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention leading dims of k and v must be q's, or q's with the last (the heads) divided by a group size: 2x4x8x16, 1x2x8x16, 1x2x8x16}}
  %0 = pmesh.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<2x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  return
}

// -----

func.func @attention_grad_grouped_dk(%dout: tensor<2x4x8x16xf32>, %q: tensor<2x4x8x16xf32>,
                                     %k: tensor<2x2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention_grad' op dq, dk, dv must have the types of q, k, v}}
  %0:3 = pmesh.attention_grad %dout, %q, %k, %k {scale = 1.0 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>)
  return
}

// -----

func.func @attention_head_dims(%q: tensor<2x8x16xf32>, %k: tensor<2x8x32xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention head dims of q and k differ: 2x8x16 vs 2x8x32}}
  %0 = pmesh.attention %q, %k, %k {scale = 1.0 : f32} : (tensor<2x8x16xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @attention_kv_lengths(%q: tensor<2x8x16xf32>, %k: tensor<2x8x16xf32>, %v: tensor<2x6x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention key and value lengths differ: 2x8x16 vs 2x6x16}}
  %0 = pmesh.attention %q, %k, %v {scale = 1.0 : f32} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x6x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_negative_window(%q: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op window must be >= 0 (0: no limit), got -1}}
  %0 = pmesh.attention %q, %q, %q {scale = 1.0 : f32, window = -1} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_negative_softcap(%q: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op softcap must be finite and >= 0 (0: none), got -5}}
  %0 = pmesh.attention %q, %q, %q {scale = 1.0 : f32, softcap = -5.0 : f32} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_window_not_causal(%q: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op a sliding window (window = 4) needs causal attention}}
  %0 = pmesh.attention %q, %q, %q {scale = 1.0 : f32, causal = false, window = 4} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_grad_window_not_causal(%q: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention_grad' op a sliding window (window = 2) needs causal attention}}
  %0:3 = pmesh.attention_grad %q, %q, %q, %q {scale = 1.0 : f32, causal = false, window = 2} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>)
  return
}

// -----

func.func @attention_mask(%q: tensor<2x8x16xf32>, %m: tensor<8x9xf32>) {
  // expected-error @+1 {{'pmesh.attention' op attention mask 8x9 does not broadcast to the scores 2x8x8}}
  %0 = pmesh.attention %q, %q, %q mask %m {scale = 1.0 : f32} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8x9xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_mask_rank(%q: tensor<8x16xf32>, %m: tensor<2x8x8xf32>) {
  // A mask may not add dims the scores do not have.
  // expected-error @+1 {{'pmesh.attention' op attention mask 2x8x8 does not broadcast to the scores 8x8}}
  %0 = pmesh.attention %q, %q, %q mask %m {scale = 1.0 : f32} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<2x8x8xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @attention_result(%q: tensor<2x8x16xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{'pmesh.attention' op result shape 2x8x16 does not match the expected 2x8x32}}
  %0 = pmesh.attention %q, %q, %v {scale = 1.0 : f32} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x32xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_mask_element(%q: tensor<8x16xf32>, %m: tensor<8x8xf16>) {
  // expected-error @+1 {{'pmesh.attention' op mask element type 'f16' differs from q element type 'f32'}}
  %0 = pmesh.attention %q, %q, %q mask %m {scale = 1.0 : f32} : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x8xf16>) -> tensor<8x16xf32>
  return
}

// -----

func.func @attention_missing_scale(%q: tensor<8x16xf32>) {
  // expected-error @+1 {{'pmesh.attention' op requires attribute 'scale'}}
  %0 = pmesh.attention %q, %q, %q : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @embedding_table_rank(%t: tensor<50x8x2xf32>, %ids: tensor<4xi64>) {
  // expected-error @+1 {{'pmesh.embedding' op embedding table must be 2-D, got 50x8x2}}
  %0 = pmesh.embedding %t, %ids : (tensor<50x8x2xf32>, tensor<4xi64>) -> tensor<4x8xf32>
  return
}

// -----

func.func @embedding_result(%t: tensor<50x8xf32>, %ids: tensor<2x4xi64>) {
  // expected-error @+1 {{'pmesh.embedding' op result shape 8x8 does not match the expected 2x4x8}}
  %0 = pmesh.embedding %t, %ids : (tensor<50x8xf32>, tensor<2x4xi64>) -> tensor<8x8xf32>
  return
}

// -----

func.func @embedding_result_element(%t: tensor<50x8xf32>, %ids: tensor<4xi64>) {
  // expected-error @+1 {{'pmesh.embedding' op result element type 'bf16' differs from table element type 'f32'}}
  %0 = pmesh.embedding %t, %ids : (tensor<50x8xf32>, tensor<4xi64>) -> tensor<4x8xbf16>
  return
}

// -----

func.func @embedding_float_ids(%t: tensor<50x8xf32>, %ids: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.embedding' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = pmesh.embedding %t, %ids : (tensor<50x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @cross_entropy_targets(%l: tensor<2x4x50xf32>, %t: tensor<2x5xi64>) {
  // expected-error @+1 {{'pmesh.cross_entropy' op cross_entropy logits 2x4x50 do not match targets 2x5 (expected [N..., V] and [N...])}}
  %0 = pmesh.cross_entropy %l, %t : (tensor<2x4x50xf32>, tensor<2x5xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_scalar_logits(%l: tensor<f32>, %t: tensor<i64>) {
  // expected-error @+1 {{'pmesh.cross_entropy' op cross_entropy logits scalar do not match targets scalar (expected [N..., V] and [N...])}}
  %0 = pmesh.cross_entropy %l, %t : (tensor<f32>, tensor<i64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_reduction(%l: tensor<4x50xf32>, %t: tensor<4xi64>) {
  // expected-error @+1 {{'pmesh.cross_entropy' op unknown reduction 'max' (expected mean, sum or none)}}
  %0 = pmesh.cross_entropy %l, %t {reduction = "max"} : (tensor<4x50xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_mean_result(%l: tensor<4x50xf32>, %t: tensor<4xi64>) {
  // expected-error @+1 {{'pmesh.cross_entropy' op result shape 4 does not match the expected scalar}}
  %0 = pmesh.cross_entropy %l, %t : (tensor<4x50xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @cross_entropy_none_result(%l: tensor<4x50xf32>, %t: tensor<4xi64>) {
  // expected-error @+1 {{'pmesh.cross_entropy' op result shape scalar does not match the expected 4}}
  %0 = pmesh.cross_entropy %l, %t {reduction = "none"} : (tensor<4x50xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_result_element(%l: tensor<4x50xf32>, %t: tensor<4xi64>) {
  // expected-error @+1 {{'pmesh.cross_entropy' op result element type 'f64' differs from logits element type 'f32'}}
  %0 = pmesh.cross_entropy %l, %t : (tensor<4x50xf32>, tensor<4xi64>) -> tensor<f64>
  return
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

// -----

func.func @reshape_count(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.reshape' op cannot reshape 2x3 (6 elements) to 4x2 (8 elements)}}
  %0 = pmesh.reshape %x : tensor<2x3xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @reshape_element(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.reshape' op reshape must not change the element type}}
  %0 = pmesh.reshape %x : tensor<2x3xf32> -> tensor<6xi32>
  return
}

// -----

func.func @reshape_overflow(%x: tensor<4xf32>) {
  // The product wraps around to 4 in int64 arithmetic.
  // expected-error @+1 {{'pmesh.reshape' op element count of 9223372036854775807x9223372036854775807x4 overflows int64}}
  %0 = pmesh.reshape %x : tensor<4xf32> -> tensor<9223372036854775807x9223372036854775807x4xf32>
  return
}

// -----

func.func @transpose_not_a_permutation(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.transpose' op perm [0, 0] is not a permutation of 0..1 (input 2x3)}}
  %0 = pmesh.transpose %x perm = [0, 0] : tensor<2x3xf32> -> tensor<2x2xf32>
  return
}

// -----

func.func @transpose_negative_entry(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.transpose' op perm [-1, 0] is not a permutation of 0..1 (input 2x3)}}
  %0 = pmesh.transpose %x perm = [-1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  return
}

// -----

func.func @transpose_empty_perm(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.transpose' op perm [] has 0 entries but the input 2x3 has rank 2}}
  %0 = pmesh.transpose %x perm = [] : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @transpose_of_scalar(%x: tensor<f32>) {
  // expected-error @+1 {{'pmesh.transpose' op perm [0] has 1 entries but the input scalar has rank 0}}
  %0 = pmesh.transpose %x perm = [0] : tensor<f32> -> tensor<f32>
  return
}

// -----

func.func @transpose_result(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.transpose' op result shape 2x3 does not match the expected 3x2}}
  %0 = pmesh.transpose %x perm = [1, 0] : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @transpose_element(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.transpose' op transpose must not change the element type}}
  %0 = pmesh.transpose %x perm = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf16>
  return
}

// -----

func.func @broadcast_incompatible(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.broadcast' op cannot broadcast 2x3 to 2x4}}
  %0 = pmesh.broadcast %x : tensor<2x3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @broadcast_drops_dims(%x: tensor<1x3xf32>) {
  // expected-error @+1 {{'pmesh.broadcast' op cannot broadcast 1x3 to 3}}
  %0 = pmesh.broadcast %x : tensor<1x3xf32> -> tensor<3xf32>
  return
}

// -----

func.func @broadcast_element(%x: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.broadcast' op broadcast must not change the element type}}
  %0 = pmesh.broadcast %x : tensor<3xf32> -> tensor<2x3xf16>
  return
}

// -----

func.func @split_sizes_sum(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{'pmesh.split' op split sizes [2, 2] sum to 4 but dim 1 of 2x6 is 6}}
  %0:2 = pmesh.split %x axis = 1 sizes = [2, 2] : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x2xf32>
  return
}

// -----

func.func @split_negative_size(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{'pmesh.split' op split size -2 is negative}}
  %0:2 = pmesh.split %x axis = 1 sizes = [8, -2] : tensor<2x6xf32> -> tensor<2x8xf32>, tensor<2x2xf32>
  return
}

// -----

func.func @split_sizes_overflow(%x: tensor<2xf32>) {
  // The sum would wrap around to 2.
  // expected-error @+1 {{'pmesh.split' op split sizes [9223372036854775807, 9223372036854775807, 4] overflow}}
  %0:3 = pmesh.split %x axis = 0 sizes = [9223372036854775807, 9223372036854775807, 4] : tensor<2xf32> -> tensor<9223372036854775807xf32>, tensor<9223372036854775807xf32>, tensor<4xf32>
  return
}

// -----

func.func @split_no_sizes(%x: tensor<0x6xf32>) {
  // Zero pieces would sum to the 0-sized dim, but a split without results
  // has no textual form.
  // expected-error @+1 {{'pmesh.split' op split of 0x6 needs at least one size}}
  "pmesh.split"(%x) <{axis = 0 : i64, sizes = array<i64>}> : (tensor<0x6xf32>) -> ()
  return
}

// -----

func.func @split_axis(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{'pmesh.split' op split axis 2 out of range for shape 2x6}}
  %0 = pmesh.split %x axis = 2 sizes = [6] : tensor<2x6xf32> -> tensor<2x6xf32>
  return
}

// -----

func.func @split_result_count(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{'pmesh.split' op 2 sizes but 1 results}}
  %0 = pmesh.split %x axis = 1 sizes = [3, 3] : tensor<2x6xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @split_result_type(%x: tensor<2x6xf32>) {
  // expected-error @+1 {{'pmesh.split' op result of type 'tensor<2x4xf32>' does not match piece 2x3}}
  %0:2 = pmesh.split %x axis = 1 sizes = [3, 3] : tensor<2x6xf32> -> tensor<2x3xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @concat_rank(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'pmesh.concat' op concat inputs differ in rank: 2x3 and 3}}
  %0 = pmesh.concat %a, %b axis = 0 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x3xf32>
  return
}

// -----

func.func @concat_dims(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{'pmesh.concat' op concat inputs differ outside axis 0: 2x3 and 2x4}}
  %0 = pmesh.concat %a, %b axis = 0 : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{'pmesh.concat' op concat axis -3 out of range for rank 2}}
  %0 = pmesh.concat %a, %a axis = -3 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @concat_no_inputs() {
  // expected-error @+1 {{'pmesh.concat' op concat needs at least one input}}
  %0 = pmesh.concat axis = 0 : () -> tensor<2xf32>
  return
}

// -----

func.func @concat_overflow(%a: tensor<9223372036854775807xf32>) {
  // expected-error @+1 {{'pmesh.concat' op concat size along axis 0 overflows int64}}
  %0 = pmesh.concat %a, %a axis = 0 : (tensor<9223372036854775807xf32>, tensor<9223372036854775807xf32>) -> tensor<1xf32>
  return
}

// -----

func.func @concat_element(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{'pmesh.concat' op inputs and result must share an element type}}
  %0 = pmesh.concat %a, %b axis = 0 : (tensor<2xf32>, tensor<2xf16>) -> tensor<4xf32>
  return
}

// -----

func.func @concat_result(%a: tensor<2x3xf32>, %b: tensor<5x3xf32>) {
  // expected-error @+1 {{'pmesh.concat' op result shape 8x3 does not match the expected 7x3}}
  %0 = pmesh.concat %a, %b axis = 0 : (tensor<2x3xf32>, tensor<5x3xf32>) -> tensor<8x3xf32>
  return
}

// -----

func.func @slice_limit_out_of_bounds(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice [0:7] out of bounds for dim 1 of size 6}}
  %0 = pmesh.slice %x [[0, 0] : [4, 7] : [1, 1]] : tensor<4x6xf32> -> tensor<4x7xf32>
  return
}

// -----

func.func @slice_negative_start(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice [-1:4] out of bounds for dim 0 of size 4}}
  %0 = pmesh.slice %x [[-1, 0] : [4, 6] : [1, 1]] : tensor<4x6xf32> -> tensor<5x6xf32>
  return
}

// -----

func.func @slice_start_after_limit(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice [3:2] out of bounds for dim 0 of size 4}}
  %0 = pmesh.slice %x [[3, 0] : [2, 6] : [1, 1]] : tensor<4x6xf32> -> tensor<0x6xf32>
  return
}

// -----

func.func @slice_zero_stride(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice stride must be positive (dim 1)}}
  %0 = pmesh.slice %x [[0, 0] : [4, 6] : [1, 0]] : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

func.func @slice_negative_stride(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice stride must be positive (dim 0)}}
  %0 = pmesh.slice %x [[0, 0] : [4, 6] : [-1, 1]] : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

func.func @slice_arity(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice needs one start, limit and stride per dim of 4x6}}
  %0 = pmesh.slice %x [[0] : [4] : [1]] : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

func.func @slice_result(%x: tensor<4x6xf32>) {
  // ceil((6 - 1) / 2) = 3 elements along dim 1.
  // expected-error @+1 {{'pmesh.slice' op result shape 4x2 does not match the expected 4x3}}
  %0 = pmesh.slice %x [[0, 1] : [4, 6] : [1, 2]] : tensor<4x6xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @slice_huge_stride(%x: tensor<4xf32>) {
  // A stride past the end still keeps the first element: the count used to
  // overflow to 0.
  // expected-error @+1 {{'pmesh.slice' op result shape 0 does not match the expected 1}}
  %0 = pmesh.slice %x [[0] : [4] : [9223372036854775807]] : tensor<4xf32> -> tensor<0xf32>
  return
}

// -----

func.func @slice_element(%x: tensor<4xf32>) {
  // expected-error @+1 {{'pmesh.slice' op slice must not change the element type}}
  %0 = pmesh.slice %x [[0] : [4] : [1]] : tensor<4xf32> -> tensor<4xf16>
  return
}

// -----

pmesh.rank_program attributes {pp_rank = 0 : i64, schedule = "1f1b", wait_lag = 1 : i64} {
  // expected-error @+1 {{phase must be "F", "B" or "W", got "X"}}
  pmesh.compute {chunk = 0 : i64, microbatch = 0 : i64, phase = "X"}
}

// -----

pmesh.rank_program attributes {pp_rank = 0 : i64, schedule = "bfs", wait_lag = 0 : i64} {
  // expected-error @+1 {{part must be non-negative and only on a "W"}}
  pmesh.compute {chunk = 0 : i64, microbatch = 0 : i64, phase = "B", part = 1 : i64}
}

// -----

func.func @outside() {
  // expected-error @+1 {{expects parent op 'pmesh.rank_program'}}
  pmesh.wait_sends
  return
}
