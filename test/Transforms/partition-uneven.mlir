// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3" | FileCheck %s
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3 print=true" -o /dev/null | FileCheck %s --check-prefix=PRINT
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3 layers-per-stage=2,3,2" | FileCheck %s --check-prefix=E232
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=7" | FileCheck %s --check-prefix=S7
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=5" | FileCheck %s --check-prefix=S5
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=6 print=true" -o /dev/null | FileCheck %s --check-prefix=R1
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=6 ranks=3 print=true" -o /dev/null | FileCheck %s --check-prefix=R3
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=6 ranks=3" | FileCheck %s --check-prefix=R3-IR

// Six chunks, at least one layer each: the last, 1 layer + the head, is the
// largest; the contiguous tie-break then gives later chunks more layers,
// which on 3 interleaved ranks would put 2 layers + the head on rank 2
// (chunks 2 and 5).
// R1: stage 3: layer 3 (1): time
// R1-NEXT: stage 4: layers 4-5 (2): time
// R1-NEXT: stage 5: layer 6 (1) + post: time
// On 3 ranks (interleaved, 2 rounds): the head alone in the last chunk,
// whose rank then holds 1 layer; ranks 0 and 1 hold 3 (rank 0 with the
// embedding's time: 3 layers on rank 2 would be 3 + head).
// R3: stage 0: layer 0 (1) + pre: time
// R3-NEXT: stage 1: layer 1 (1): time
// R3-NEXT: stage 2: layer 2 (1): time
// R3-NEXT: stage 3: layers 3-4 (2): time
// R3-NEXT: stage 4: layers 5-6 (2): time
// R3-NEXT: stage 5: no layers (0) + post: time
// R3: rank 0 (stages 0, 3): time
// R3-NEXT: rank 1 (stages 1, 4): time
// R3-NEXT: rank 2 (stages 2, 5): time
// R3-IR: module attributes {pmesh.layers_per_stage = array<i64: 1, 1, 1, 2, 2, 0>, pmesh.num_stages = 6 : i64}
// R3-IR: pmesh.get_param @blocks.6.w {pmesh.stage = 4 : i64}
// R3-IR: pmesh.get_param @model.norm.weight {pmesh.stage = 5 : i64}

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
