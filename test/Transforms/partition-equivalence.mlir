// Partitioning changes where ops run, not what they compute: with the stage
// attributes stripped and the usual cleanup, the staged training step is the
// unstaged one, op for op and in the same order (so gradients are bitwise
// the same), except that the tied embedding's two gradients are accumulated
// separately instead of summed first.

// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-autodiff -canonicalize -cse > %t.gpt.ref.mlir
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" --pmesh-autodiff \
// RUN:   | sed -E -f %S/Inputs/strip-stages.sed | pipemesh-opt -canonicalize -cse > %t.gpt.staged.mlir
// RUN: not diff %t.gpt.ref.mlir %t.gpt.staged.mlir | FileCheck %s --check-prefix=GPT

// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-autodiff -canonicalize -cse > %t.blocks.ref.mlir
// RUN: pipemesh-opt %S/Inputs/partition-7-blocks.mlir --pmesh-partition="stages=3" --pmesh-autodiff \
// RUN:   | sed -E -f %S/Inputs/strip-stages.sed | pipemesh-opt -canonicalize -cse > %t.blocks.staged.mlir
// RUN: not diff %t.blocks.ref.mlir %t.blocks.staged.mlir | FileCheck %s --check-prefix=BLOCKS

// GPT: {{^[0-9]+,[0-9]+c[0-9]+,[0-9]+$}}
// GPT-NEXT: <     %[[SUM:[0-9]+]] = pmesh.add %[[HEAD:[0-9]+]], %[[EMB:[0-9]+]] : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>
// GPT-NEXT: <     pmesh.accumulate_grad @transformer.wte.weight, %[[SUM]] : tensor<256x64xf32>
// GPT-NEXT: ---
// GPT-NEXT: >     pmesh.accumulate_grad @transformer.wte.weight, %[[EMB]] : tensor<256x64xf32>
// GPT-NEXT: >     pmesh.accumulate_grad @transformer.wte.weight, %[[HEAD]] : tensor<256x64xf32>
// GPT-NOT: {{.}}

// BLOCKS: {{^[0-9]+,[0-9]+c[0-9]+,[0-9]+$}}
// BLOCKS-NEXT: <     %[[SUM:[0-9]+]] = pmesh.add %[[HEAD:[0-9]+]], %[[EMB:[0-9]+]] : (tensor<64x16xf32>, tensor<64x16xf32>) -> tensor<64x16xf32>
// BLOCKS-NEXT: <     pmesh.accumulate_grad @model.embed, %[[SUM]] : tensor<64x16xf32>
// BLOCKS-NEXT: ---
// BLOCKS-NEXT: >     pmesh.accumulate_grad @model.embed, %[[EMB]] : tensor<64x16xf32>
// BLOCKS-NEXT: >     pmesh.accumulate_grad @model.embed, %[[HEAD]] : tensor<64x16xf32>
// BLOCKS-NOT: {{.}}
