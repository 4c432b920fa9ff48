// RUN: not pipemesh-opt %s --split-input-file --pmesh-autodiff --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Errors of --pmesh-autodiff: each names what is wrong, and the pass fails
// (non-zero exit).

// CHECK: error: no func.func @forward to differentiate
pmesh.param @a : tensor<4xf32>
func.func @model() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4xf32>
  %l = pmesh.reduce_sum %a axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The loss is computed from an input only.
// CHECK: error: the loss does not depend on any parameter
// CHECK-NEXT: func.func @forward(%x: tensor<4xf32>) -> tensor<f32> {
pmesh.param @a : tensor<4xf32>
func.func @forward(%x: tensor<4xf32>) -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4xf32>
  %l = pmesh.reduce_sum %x axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A parameter reaches the loss only through an integer cast: no gradient
// path, so still no dependence.
// CHECK: error: the loss does not depend on any parameter
pmesh.param @a : tensor<4xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4xf32>
  %i = pmesh.cast %a : tensor<4xf32> -> tensor<4xi64>
  %f = pmesh.cast %i : tensor<4xi64> -> tensor<4xf32>
  %l = pmesh.reduce_sum %f axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Several unnamed (or not "loss"-named) 0-d results.
// CHECK: error: several 0-d results and none named 'loss': cannot tell the loss
pmesh.param @a : tensor<4xf32>
func.func @forward() -> (tensor<f32>, tensor<f32> {pmesh.name = "aux"}) {
  %a = pmesh.get_param @a : tensor<4xf32>
  %s = pmesh.reduce_sum %a axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  %m = pmesh.reduce_mean %a axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %s, %m : tensor<f32>, tensor<f32>
}

// -----

// Neither a 0-d loss nor rank-3 logits.
// CHECK: error: @forward returns neither a 0-d loss nor [batch, seq, vocab] logits
pmesh.param @a : tensor<4x8xf32>
func.func @forward() -> tensor<4x8xf32> {
  %a = pmesh.get_param @a : tensor<4x8xf32>
  return %a : tensor<4x8xf32>
}

// -----

// Two rank-3 results, none named "logits".
// CHECK: error: @forward returns neither a 0-d loss nor [batch, seq, vocab] logits
pmesh.param @a : tensor<2x4x8xf32>
func.func @forward() -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %a = pmesh.get_param @a : tensor<2x4x8xf32>
  return %a, %a : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// The pass runs once per module.
// CHECK: error: module already has a @train_step or @optimizer_step
pmesh.param @a : tensor<4xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4xf32>
  %l = pmesh.reduce_sum %a axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @train_step() {
  return
}

// -----

// An attention mask computed from a parameter has no gradient rule.
// CHECK: error: 'pmesh.attention' op gradient with respect to the attention mask is not supported
pmesh.param @q : tensor<1x4x8xf32>
pmesh.param @bias : tensor<4x4xf32>
func.func @forward() -> tensor<f32> {
  %q = pmesh.get_param @q : tensor<1x4x8xf32>
  %m = pmesh.get_param @bias : tensor<4x4xf32>
  %y = pmesh.attention %q, %q, %q mask %m {scale = 0.35 : f32} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<4x4xf32>) -> tensor<1x4x8xf32>
  %l = pmesh.reduce_sum %y axes = [0, 1, 2] {keepdims = false} : tensor<1x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// An op without a gradient rule on the path from a parameter to the loss.
// CHECK: error: 'pmesh.gelu_grad' op has no gradient rule
pmesh.param @a : tensor<4xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a : tensor<4xf32>
  %g = pmesh.gelu_grad %a, %a : tensor<4xf32>
  %l = pmesh.reduce_sum %g axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// After --pmesh-partition every op of @forward has a stage; a partial
// annotation is a broken input.
// CHECK: error: 'pmesh.reduce_sum' op has no pmesh.stage while other ops of @forward have one
pmesh.param @a : tensor<4xf32>
func.func @forward() -> tensor<f32> {
  %a = pmesh.get_param @a {pmesh.stage = 0 : i64} : tensor<4xf32>
  %l = pmesh.reduce_sum %a axes = [0] {keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
