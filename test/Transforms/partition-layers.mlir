// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2" | FileCheck %s --check-prefix=S2
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3" | FileCheck %s --check-prefix=S3
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=4" | FileCheck %s --check-prefix=S4
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3 print=true" -o /dev/null | FileCheck %s --check-prefix=PRINT
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 layers-per-stage=2,2" | FileCheck %s --check-prefix=E22
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 layers-per-stage=0,4" | FileCheck %s --check-prefix=E04
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 layers-per-stage=4,0" | FileCheck %s --check-prefix=E40
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=2 layers-per-stage=4,0 print=true" -o /dev/null | FileCheck %s --check-prefix=E40-PRINT
// Every op of @forward (but the return) has a stage.
// RUN: pipemesh-opt %S/Inputs/partition-4-layers.mlir --pmesh-partition="stages=3" | grep -E "^ +(%.* = )?pmesh\." | grep -v "pmesh.param @" | not grep -v "pmesh.stage = "

// Four equal residual layers; the head and the appended loss cost about two
// layers (on the cpu preset), the embedding little. Balanced layouts put
// fewer layers on the last stage; ties go to later stages.

// stages=2: [3, 1] (3 layers + embedding vs 1 layer + head + loss).
// S2: module attributes {pmesh.layers_per_stage = array<i64: 3, 1>, pmesh.num_stages = 2 : i64}
// S2: %[[EMB0:.*]] = pmesh.get_param @model.embed {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.embedding %[[EMB0]], %arg0 {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.get_param @model.layers.0.w {pmesh.stage = 0 : i64}
// S2: pmesh.get_param @model.layers.2.w {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.matmul {{.*}} {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.gelu {{.*}} {pmesh.stage = 0 : i64}
// S2-NEXT: %[[X3:.*]] = pmesh.add {{.*}} {pmesh.stage = 0 : i64}
// S2-NEXT: %[[W3:.*]] = pmesh.get_param @model.layers.3.w {pmesh.stage = 1 : i64}
// S2-NEXT: pmesh.matmul %[[X3]], %[[W3]] {pmesh.stage = 1 : i64}
// S2-NEXT: pmesh.gelu {{.*}} {pmesh.stage = 1 : i64}
// S2-NEXT: pmesh.add %[[X3]], {{.*}} {pmesh.stage = 1 : i64}
// S2-NEXT: pmesh.get_param @model.norm.weight {pmesh.stage = 1 : i64}
// S2-NEXT: %[[N:.*]] = pmesh.layer_norm {{.*}} {pmesh.stage = 1 : i64}
// S2-NEXT: %[[EMB1:.*]] = pmesh.get_param @model.embed {pmesh.stage = 1 : i64}
// S2-NEXT: pmesh.matmul %[[N]], %[[EMB1]] {pmesh.stage = 1 : i64, transpose_b = true}

// stages=3: [1, 2, 1]; L = 4 does not divide by 3.
// S3: module attributes {pmesh.layers_per_stage = array<i64: 1, 2, 1>, pmesh.num_stages = 3 : i64}
// S3: pmesh.get_param @model.layers.0.w {pmesh.stage = 0 : i64}
// S3: pmesh.get_param @model.layers.1.w {pmesh.stage = 1 : i64}
// S3: pmesh.get_param @model.layers.2.w {pmesh.stage = 1 : i64}
// S3: pmesh.get_param @model.layers.3.w {pmesh.stage = 2 : i64}
// S3: pmesh.get_param @model.norm.weight {pmesh.stage = 2 : i64}
// S3: pmesh.get_param @model.embed {pmesh.stage = 2 : i64}

// stages=4: one layer each.
// S4: module attributes {pmesh.layers_per_stage = array<i64: 1, 1, 1, 1>, pmesh.num_stages = 4 : i64}
// S4: pmesh.get_param @model.embed {pmesh.stage = 0 : i64}
// S4: pmesh.get_param @model.layers.0.w {pmesh.stage = 0 : i64}
// S4: pmesh.get_param @model.layers.1.w {pmesh.stage = 1 : i64}
// S4: pmesh.get_param @model.layers.2.w {pmesh.stage = 2 : i64}
// S4: pmesh.get_param @model.layers.3.w {pmesh.stage = 3 : i64}
// S4: pmesh.get_param @model.embed {pmesh.stage = 3 : i64}

// PRINT: pmesh-partition: 4 layers on 3 stages (balanced; device cpu
// PRINT: pre (embeddings): time
// PRINT-NEXT: layer 0 model.layers.0: time
// PRINT-NEXT: layer 1 model.layers.1: time
// PRINT-NEXT: layer 2 model.layers.2: time
// PRINT-NEXT: layer 3 model.layers.3: time
// PRINT-NEXT: post (head, appended loss): time
// PRINT-NEXT: stage 0: layer 0 (1) + pre: time
// PRINT-NEXT: stage 1: layers 1-2 (2): time
// PRINT-NEXT: stage 2: layer 3 (1) + post: time
// PRINT-NEXT: max stage time

// Explicit layouts.
// E22: module attributes {pmesh.layers_per_stage = array<i64: 2, 2>, pmesh.num_stages = 2 : i64}
// E22: pmesh.get_param @model.layers.1.w {pmesh.stage = 0 : i64}
// E22: pmesh.get_param @model.layers.2.w {pmesh.stage = 1 : i64}

// The first stage may hold only the embedding.
// E04: module attributes {pmesh.layers_per_stage = array<i64: 0, 4>, pmesh.num_stages = 2 : i64}
// E04: pmesh.get_param @model.embed {pmesh.stage = 0 : i64}
// E04-NEXT: pmesh.embedding {{.*}} {pmesh.stage = 0 : i64}
// E04-NEXT: pmesh.get_param @model.layers.0.w {pmesh.stage = 1 : i64}

// The last stage may hold only the head and the loss.
// E40: module attributes {pmesh.layers_per_stage = array<i64: 4, 0>, pmesh.num_stages = 2 : i64}
// E40: pmesh.get_param @model.layers.3.w {pmesh.stage = 0 : i64}
// E40: pmesh.get_param @model.norm.weight {pmesh.stage = 1 : i64}
// E40-NEXT: pmesh.layer_norm {{.*}} {pmesh.stage = 1 : i64}
// E40-NEXT: pmesh.get_param @model.embed {pmesh.stage = 1 : i64}
// E40-PRINT: 4 layers on 2 stages (explicit layers-per-stage;
// E40-PRINT: stage 0: layers 0-3 (4) + pre: time
// E40-PRINT-NEXT: stage 1: no layers (0) + post: time
