// activations=bf16 keeps every piece of a parameter gradient f32, however the
// backward combines them before accumulate_grad: here @w's gradient is a GEMM
// result [4x8], transposed, scaled by a constant and added to a second piece.
// The activations the GEMMs read are bf16; values computed from the inputs
// alone (positions cast to f32) stay f32.

// RUN: pipemesh-opt %s --pipemesh-compile="batch=2 seq=4 activations=bf16 shapes-only=1" -o %t.plan
// RUN: pipemesh-opt --print-plan %t.plan | FileCheck %s
// RUN: pipemesh-opt --print-plan %t.plan | FileCheck %s --check-prefix=NOT

// CHECK: activations=bf16
// CHECK: activation bf16  [2x4x8]
// CHECK: activation f32   [2x4]
// CHECK: activation f32   [2x4x1] {{.*}} (view of
// CHECK: activation bf16  [2x4x8]
// CHECK: activation bf16  [2x4x4]
// CHECK: activation bf16  [2x4x16]
// The head's gradient is added into its accumulation by its GEMM (no
// buffer); @w's pieces are f32: the GEMM's [4x8], its transpose, the scaled
// and the summed pieces.
// CHECK-NOT: activation {{.*}} [4x16]
// CHECK: activation f32   [4x8]
// CHECK: activation f32   [8x4]
// CHECK: activation f32   [8x4]
// CHECK: activation f32   [8x4]
// CHECK: program:
// CHECK: matmul %{{[0-9]+}}, %{{[0-9]+}} -> %6 accumulate scale 1.000000e+00 {"transpose_a":true,"transpose_b":false}
// The only bf16 [8x4] buffers are views of activations (the GEMMs' operands).
// NOT-NOT: activation bf16  [8x4] {{.*}}v{{[0-9]+$}}
// NOT-NOT: activation bf16  [4x8]
// NOT: program:

module {
  pmesh.param @emb : tensor<16x8xf32>
  pmesh.param @w : tensor<8x4xf32>
  pmesh.param @head : tensor<4x16xf32>
  func.func @train_step(%ids: tensor<2x4xi64> {pmesh.name = "input_ids"}, %tgt: tensor<2x4xi64> {pmesh.name = "targets"}) -> (tensor<f32> {pmesh.name = "loss"}) {
    %one = pmesh.constant dense<1.000000e+00> : tensor<f32>
    %half = pmesh.constant dense<5.000000e-01> : tensor<8x4xf32>
    %e = pmesh.get_param @emb : tensor<16x8xf32>
    %x = pmesh.embedding %e, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
    // Positions as floats: computed from the inputs alone, so stored exactly.
    %pos = pmesh.cast %ids : tensor<2x4xi64> -> tensor<2x4xf32>
    %pos3 = pmesh.reshape %pos : tensor<2x4xf32> -> tensor<2x4x1xf32>
    %xp = pmesh.add %x, %pos3 : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
    %w = pmesh.get_param @w : tensor<8x4xf32>
    %h = pmesh.matmul %xp, %w : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> tensor<2x4x4xf32>
    %hd = pmesh.get_param @head : tensor<4x16xf32>
    %logits = pmesh.matmul %h, %hd : (tensor<2x4x4xf32>, tensor<4x16xf32>) -> tensor<2x4x16xf32>
    %loss = pmesh.cross_entropy %logits, %tgt : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
    %dlogits = pmesh.cross_entropy_grad %one, %logits, %tgt : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
    %dh = pmesh.matmul %dlogits, %hd {transpose_b = true} : (tensor<2x4x16xf32>, tensor<4x16xf32>) -> tensor<2x4x4xf32>
    %h2 = pmesh.reshape %h : tensor<2x4x4xf32> -> tensor<8x4xf32>
    %dl2 = pmesh.reshape %dlogits : tensor<2x4x16xf32> -> tensor<8x16xf32>
    %dhead = pmesh.matmul %h2, %dl2 {transpose_a = true} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %dh2 = pmesh.reshape %dh : tensor<2x4x4xf32> -> tensor<8x4xf32>
    %x2 = pmesh.reshape %xp : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %dwT = pmesh.matmul %dh2, %x2 {transpose_a = true} : (tensor<8x4xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %dw = pmesh.transpose %dwT perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
    %dws = pmesh.mul %dw, %half : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    %dwsum = pmesh.add %dws, %dws : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
    pmesh.accumulate_grad @w, %dwsum : tensor<8x4xf32>
    pmesh.accumulate_grad @head, %dhead : tensor<4x16xf32>
    return %loss : tensor<f32>
  }
  func.func @optimizer_step() {
    pmesh.adamw [@w, @head] decay = [true, true]
    return
  }
}
