// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" --pmesh-autodiff | FileCheck %s --check-prefix=GPT
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" --pmesh-autodiff -canonicalize -cse | FileCheck %s --check-prefix=CLEAN
// Every op of @train_step (but the return) has a stage.
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" --pmesh-autodiff | sed -n '/func.func @train_step/,/^  }/p' | grep -E "^ +(%.* = )?pmesh\." | not grep -v "pmesh.stage = "
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3" --pmesh-autodiff | FileCheck %s --check-prefix=L4
// RUN: pipemesh-opt %s -split-input-file --pmesh-partition="stages=2" --pmesh-autodiff | FileCheck %s

// The tiny GPT-2 on two stages: the appended loss, its seed and the head's
// backward run on stage 1; block 0's backward and the embeddings' on stage 0.
// GPT-LABEL: func.func @train_step
// GPT: pmesh.get_param @transformer.h.0.mlp.c_proj.bias {pmesh.stage = 0 : i64}
// GPT-NEXT: pmesh.matmul {{.*}} {pmesh.stage = 0 : i64}
// GPT-NEXT: %[[X1:.*]] = pmesh.add %{{.*}}, %{{.*}} {pmesh.stage = 0 : i64}
// GPT-NEXT: pmesh.get_param @transformer.h.1.ln_1.weight {pmesh.stage = 1 : i64}
// GPT: %[[LOGITS:.*]] = pmesh.matmul %{{[0-9]+}}, %[[WTE1:[0-9]+]] {pmesh.stage = 1 : i64, transpose_b = true}
// GPT-NEXT: %[[LOSS:.*]] = pmesh.cross_entropy %[[LOGITS]], %arg1 {pmesh.stage = 1 : i64}
// GPT-NEXT: %[[ONE:.*]] = pmesh.constant {pmesh.stage = 1 : i64} dense<1.000000e+00>
// GPT-NEXT: %[[DLOGITS:.*]] = pmesh.cross_entropy_grad %[[ONE]], %[[LOGITS]], %arg1 {pmesh.stage = 1 : i64}
// GPT-NEXT: pmesh.matmul %[[DLOGITS]], %[[WTE1]] {pmesh.stage = 1 : i64}
// GPT: %[[DWTE1:.*]] = pmesh.matmul %{{[0-9]+}}, %{{[0-9]+}} {pmesh.stage = 1 : i64, transpose_a = true} : (tensor<16x256xf32>, tensor<16x64xf32>) -> tensor<256x64xf32>
// GPT-NEXT: pmesh.layer_norm_grad {{.*}} {pmesh.stage = 1 : i64}
// Block 1's input X1 (made on stage 0) is used twice on stage 1 (ln_1 and
// the residual add): its two gradients are summed on stage 1, so one tensor
// goes back to stage 0.
// GPT: %[[DX1A:.*]], %{{.*}}, %{{.*}} = pmesh.layer_norm_grad %{{[0-9]+}}, %[[X1]], %{{[0-9]+}} {pmesh.stage = 1 : i64}
// GPT-NEXT: %[[DX1:.*]] = pmesh.add %{{[0-9]+}}, %[[DX1A]] {pmesh.stage = 1 : i64}
// Then block 0 on stage 0, with its own fan-out sums.
// GPT-NEXT: pmesh.matmul %[[DX1]], %{{[0-9]+}} {pmesh.stage = 0 : i64, transpose_b = true} : (tensor<2x8x64xf32>, tensor<256x64xf32>)
// GPT: pmesh.attention_grad {{.*}} {pmesh.stage = 0 : i64
// GPT: %[[DEMB:.*]] = pmesh.embedding_grad %{{[0-9]+}}, %arg0 {pmesh.stage = 0 : i64}
// One accumulate_grad per (parameter, stage): the tied embedding's two
// gradients are not summed here (the plan all-reduces them across the tied
// stages).
// GPT-NEXT: pmesh.accumulate_grad @transformer.wte.weight, %[[DEMB]] {pmesh.stage = 0 : i64}
// GPT-NEXT: pmesh.accumulate_grad @transformer.wte.weight, %[[DWTE1]] {pmesh.stage = 1 : i64}
// GPT-NEXT: pmesh.accumulate_grad @transformer.wpe.weight, %{{.*}} {pmesh.stage = 0 : i64}
// GPT-NEXT: pmesh.accumulate_grad @transformer.h.0.ln_1.weight, %{{.*}} {pmesh.stage = 0 : i64}
// GPT: pmesh.accumulate_grad @transformer.h.1.ln_1.weight, %{{.*}} {pmesh.stage = 1 : i64}
// GPT: pmesh.accumulate_grad @transformer.ln_f.bias, %{{.*}} {pmesh.stage = 1 : i64}
// GPT-NEXT: return %[[LOSS]]
// GPT: pmesh.adamw [@transformer.wte.weight, @transformer.wpe.weight,

// After the cleanup the compile pipeline runs, both reads of the tied
// embedding survive (they differ in their stage).
// CLEAN-LABEL: func.func @train_step
// CLEAN: pmesh.get_param @transformer.wte.weight {pmesh.stage = 0 : i64}
// CLEAN: pmesh.get_param @transformer.wte.weight {pmesh.stage = 1 : i64}
// CLEAN: pmesh.accumulate_grad @transformer.wte.weight, %{{.*}} {pmesh.stage = 0 : i64}
// CLEAN-NEXT: pmesh.accumulate_grad @transformer.wte.weight, %{{.*}} {pmesh.stage = 1 : i64}

// Four layers on three stages ([1, 2, 1]): layer gradients on their layer's
// stage, the tied embedding accumulated on stages 0 and 2.
// L4-LABEL: func.func @train_step
// L4: pmesh.embedding_grad {{.*}} {pmesh.stage = 0 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.embed, %{{.*}} {pmesh.stage = 0 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.embed, %{{.*}} {pmesh.stage = 2 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.layers.0.w, %{{.*}} {pmesh.stage = 0 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.layers.1.w, %{{.*}} {pmesh.stage = 1 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.layers.2.w, %{{.*}} {pmesh.stage = 1 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.layers.3.w, %{{.*}} {pmesh.stage = 2 : i64}
// L4-NEXT: pmesh.accumulate_grad @model.norm.weight, %{{.*}} {pmesh.stage = 2 : i64}
// L4: pmesh.adamw [@model.embed, @model.layers.0.w, @model.layers.1.w, @model.layers.2.w, @model.layers.3.w, @model.norm.weight]

// A skip connection: the embedding output x0 is used by layer 0 (stage 0)
// and by layer 1 (stage 1). Its gradients come from two stages, so they
// meet on the stage of x0's producer.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X0:.*]] = pmesh.embedding %{{.*}}, %arg0 {pmesh.stage = 0 : i64}
// CHECK: pmesh.add %{{.*}}, %[[X0]] {pmesh.stage = 1 : i64}
// CHECK: %[[DZ:.*]] = pmesh.matmul %{{.*}}, %{{.*}} {pmesh.stage = 1 : i64} : (tensor<2x4x32xf32>, tensor<32x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[DX0A:.*]] = pmesh.matmul %{{.*}}, %{{.*}} {pmesh.stage = 0 : i64, transpose_b = true} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK: %[[DX0:.*]] = pmesh.add %[[DZ]], %[[DX0A]] {pmesh.stage = 0 : i64}
// CHECK-NEXT: pmesh.embedding_grad %[[DX0]], %arg0 {pmesh.stage = 0 : i64}
module {
  pmesh.param @embed : tensor<32x8xf32>
  pmesh.param @layers.0.w : tensor<8x8xf32>
  pmesh.param @layers.1.w : tensor<8x8xf32>
  func.func @forward(%ids: tensor<2x4xi64>) -> tensor<2x4x32xf32> {
    %emb = pmesh.get_param @embed : tensor<32x8xf32>
    %x0 = pmesh.embedding %emb, %ids : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
    %w0 = pmesh.get_param @layers.0.w : tensor<8x8xf32>
    %y0 = pmesh.matmul %x0, %w0 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %w1 = pmesh.get_param @layers.1.w : tensor<8x8xf32>
    %y1 = pmesh.matmul %y0, %w1 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %z = pmesh.add %y1, %x0 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %logits = pmesh.matmul %z, %emb {transpose_b = true} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
    return %logits : tensor<2x4x32xf32>
  }
}

// -----

// A model with its own f64 loss: the cast to the f32 loss and the seed go on
// the stage of the loss producer (the last stage); a weight transposed before
// use (computed from the parameter alone) is cloned with its parameter read.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[WT1:.*]] = pmesh.get_param @layers.1.w {pmesh.stage = 1 : i64}
// CHECK-NEXT: %[[T1:.*]] = pmesh.transpose %[[WT1]] perm = [1, 0] {pmesh.stage = 1 : i64}
// CHECK: %[[L:.*]] = pmesh.reduce_sum {{.*}} {keepdims = false, pmesh.stage = 1 : i64}
// CHECK-NEXT: %[[LF:.*]] = pmesh.cast %[[L]] {pmesh.stage = 1 : i64} : tensor<f64> -> tensor<f32>
// CHECK-NEXT: pmesh.constant {pmesh.stage = 1 : i64} dense<1.000000e+00> : tensor<f32>
// CHECK: pmesh.accumulate_grad @layers.0.w, %{{.*}} {pmesh.stage = 0 : i64}
// CHECK-NEXT: pmesh.accumulate_grad @layers.1.w, %{{.*}} {pmesh.stage = 1 : i64}
// CHECK-NEXT: return %[[LF]]
module {
  pmesh.param @layers.0.w : tensor<4x4xf64>
  pmesh.param @layers.1.w : tensor<4x4xf64>
  func.func @forward(%x: tensor<2x4xf64>) -> tensor<f64> {
    %w0 = pmesh.get_param @layers.0.w : tensor<4x4xf64>
    %y0 = pmesh.matmul %x, %w0 : (tensor<2x4xf64>, tensor<4x4xf64>) -> tensor<2x4xf64>
    %w1 = pmesh.get_param @layers.1.w : tensor<4x4xf64>
    %t1 = pmesh.transpose %w1 perm = [1, 0] : tensor<4x4xf64> -> tensor<4x4xf64>
    %y1 = pmesh.matmul %y0, %t1 : (tensor<2x4xf64>, tensor<4x4xf64>) -> tensor<2x4xf64>
    %l = pmesh.reduce_sum %y1 axes = [0, 1] {keepdims = false} : tensor<2x4xf64> -> tensor<f64>
    return %l : tensor<f64>
  }
}
