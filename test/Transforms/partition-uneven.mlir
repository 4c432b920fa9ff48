// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3" | FileCheck %s
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3 print=true" -o /dev/null | FileCheck %s --check-prefix=PRINT
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3 layers-per-stage=2,3,2" | FileCheck %s --check-prefix=E232
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=7" | FileCheck %s --check-prefix=S7
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=5" | FileCheck %s --check-prefix=S5

// Seven layers (named blocks.<i>) on three stages: the head and the loss
// weigh on the last stage, so it gets one layer: [3, 3, 1].
// CHECK: module attributes {pmesh.layers_per_stage = array<i64: 3, 3, 1>, pmesh.num_stages = 3 : i64}
// CHECK: pmesh.get_param @model.embed {pmesh.stage = 0 : i64}
// CHECK: pmesh.get_param @blocks.0.w {pmesh.stage = 0 : i64}
// CHECK: pmesh.get_param @blocks.1.w {pmesh.stage = 0 : i64}
// CHECK: pmesh.get_param @blocks.2.w {pmesh.stage = 0 : i64}
// CHECK: pmesh.get_param @blocks.3.w {pmesh.stage = 1 : i64}
// CHECK: pmesh.get_param @blocks.4.w {pmesh.stage = 1 : i64}
// CHECK: pmesh.get_param @blocks.5.w {pmesh.stage = 1 : i64}
// CHECK: pmesh.get_param @blocks.6.w {pmesh.stage = 2 : i64}
// CHECK: pmesh.get_param @model.norm.weight {pmesh.stage = 2 : i64}
// CHECK: pmesh.get_param @model.embed {pmesh.stage = 2 : i64}

// PRINT: pmesh-partition: 7 layers on 3 stages (balanced;
// PRINT: layer 6 blocks.6: time
// PRINT: stage 0: layers 0-2 (3) + pre: time
// PRINT-NEXT: stage 1: layers 3-5 (3): time
// PRINT-NEXT: stage 2: layer 6 (1) + post: time

// E232: module attributes {pmesh.layers_per_stage = array<i64: 2, 3, 2>, pmesh.num_stages = 3 : i64}
// E232: pmesh.get_param @blocks.1.w {pmesh.stage = 0 : i64}
// E232: pmesh.get_param @blocks.2.w {pmesh.stage = 1 : i64}
// E232: pmesh.get_param @blocks.4.w {pmesh.stage = 1 : i64}
// E232: pmesh.get_param @blocks.5.w {pmesh.stage = 2 : i64}

// As many stages as layers.
// S7: pmesh.layers_per_stage = array<i64: 1, 1, 1, 1, 1, 1, 1>, pmesh.num_stages = 7 : i64
// S7: pmesh.get_param @blocks.6.w {pmesh.stage = 6 : i64}

// S5: pmesh.layers_per_stage = array<i64: 1, 1, 2, 2, 1>, pmesh.num_stages = 5 : i64
