// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=5" 2>&1 | FileCheck %s --check-prefix=TOO-MANY
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=0" 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3 layers-per-stage=2,2" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 layers-per-stage=1,1" 2>&1 | FileCheck %s --check-prefix=SUM
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3 layers-per-stage=2,0,2" 2>&1 | FileCheck %s --check-prefix=MIDDLE
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 layers-per-stage=5,-1" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 device=tpu" 2>&1 | FileCheck %s --check-prefix=DEVICE
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 cluster=no-such-cluster" 2>&1 | FileCheck %s --check-prefix=CLUSTER
// RUN: echo '{"preset": "a100-40g-25gbps", "device": {"preset": "a100-40gb", "kernel_overhead_s": 1e308}}' > %t.overhead.json
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 cluster=%t.overhead.json" 2>&1 | FileCheck %s --check-prefix=INFINITE
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3 ranks=2" 2>&1 | FileCheck %s --check-prefix=RANKS
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-autodiff --pmesh-partition="stages=2" 2>&1 | FileCheck %s --check-prefix=AFTER-AD
// RUN: not pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2" --pmesh-partition="stages=2" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not pipemesh-opt %s -split-input-file --pmesh-partition="stages=2" 2>&1 | FileCheck %s --check-prefix=NO-LAYERS
// RUN: not pipemesh-opt %s -split-input-file --pmesh-partition="stages=2 layers-per-stage=0,2" 2>&1 | FileCheck %s --check-prefix=EMPTY

// TOO-MANY: error: pmesh-partition: stages=5 but the model has only 4 transformer layers: every stage needs at least one (layers-per-stage may give the first or the last stage none)
// ZERO: error: pmesh-partition: stages must be at least 1, got 0
// COUNT: error: pmesh-partition: layers-per-stage has 2 entries but stages=3
// SUM: error: pmesh-partition: layers-per-stage sums to 2 but the model has 4 transformer layers
// MIDDLE: error: pmesh-partition: layers-per-stage gives stage 1 no layers: only the first and the last stage may have none (they still hold the embedding, or the head and the loss)
// NEGATIVE: error: pmesh-partition: layers-per-stage gives stage 1 -1 layers; counts must be >= 0
// DEVICE: error: pmesh-partition: unknown device 'tpu' (known: cpu, v100, a100, a100-40gb, a100-80gb, h100, h200)
// CLUSTER: error: pmesh-partition: cluster=no-such-cluster: unknown cluster preset
// INFINITE: error: pmesh-partition: device 'a100-40gb' costs a layer at an infinite time: its kernel overhead or another figure of the cluster file is out of range
// RANKS: error: pmesh-partition: ranks=2 must be at least 1 and divide stages=3
// AFTER-AD: error: the module already has a @train_step: run --pmesh-partition before --pmesh-autodiff
// TWICE: error: the module is already partitioned (it has pmesh.num_stages)

// No parameter names a layer: nothing to cut.
// NO-LAYERS: error: pmesh-partition: found no transformer layers (parameters named *.h.<i>.*, *.layers.<i>.*, *.blocks.<i>.* or *.layer.<i>.*), so there is nothing to cut into stages=2
module {
  pmesh.param @w : tensor<4x4xf32>
  func.func @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %w = pmesh.get_param @w : tensor<4x4xf32>
    %y = pmesh.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %l = pmesh.reduce_sum %y axes = [0, 1] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// No embedding: with no layer, stage 0 would only read its input.
// EMPTY: error: pmesh-partition: stage 0 would hold no computation (layers per stage: 0,2)
module {
  pmesh.param @h.0.w : tensor<4x4xf32>
  pmesh.param @h.1.w : tensor<4x4xf32>
  func.func @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %w0 = pmesh.get_param @h.0.w : tensor<4x4xf32>
    %y0 = pmesh.matmul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %w1 = pmesh.get_param @h.1.w : tensor<4x4xf32>
    %y1 = pmesh.matmul %y0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %l = pmesh.reduce_sum %y1 axes = [0, 1] {keepdims = false} : tensor<2x4xf32> -> tensor<f32>
    return %l : tensor<f32>
  }
}
