// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=1" | FileCheck %s --check-prefix=S1
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" | FileCheck %s --check-prefix=S2
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2 print=true" -o /dev/null | FileCheck %s --check-prefix=PRINT
// The device of a cluster (a preset or a cluster file) costs the layers instead:
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2 print=true cluster=a100-40g-25gbps" -o /dev/null | FileCheck %s --check-prefix=A100
// A100: pmesh-partition: 2 layers on 2 stages (balanced; device a100-40gb: 312000 GFLOP/s
// Every op of @forward (but the return) has a stage.
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" | grep -E "^ +(%.* = )?pmesh\." | grep -v "pmesh.param @" | not grep -v "pmesh.stage = "
// RUN: pipemesh-opt %models/fixtures/torch_gpt2_tiny_op14_dyn_nofold_mask_loss.onnx --batch=2 --seq=8 --pmesh-partition="stages=2" | FileCheck %s --check-prefix=TORCH

// The tiny GPT-2 (2 layers, tied output head) imported from ONNX.

// stages=1: everything on stage 0, the tied embedding read once.
// S1: module attributes {pmesh.layers_per_stage = array<i64: 2>, pmesh.num_stages = 1 : i64
// S1-NOT: pmesh.stage = 1
// S1-COUNT-1: pmesh.get_param @transformer.wte.weight {pmesh.stage = 0 : i64}
// S1-NOT: pmesh.get_param @transformer.wte.weight
// S1-NOT: pmesh.stage = 1

// stages=2: one block per stage; the embeddings go with block 0, ln_f and the
// head with block 1; the tied token embedding is read on both stages.
// S2: module attributes {pmesh.layers_per_stage = array<i64: 1, 1>, pmesh.num_stages = 2 : i64
// S2: %[[WTE0:.*]] = pmesh.get_param @transformer.wte.weight {pmesh.stage = 0 : i64} : tensor<256x64xf32>
// S2-NEXT: pmesh.embedding %[[WTE0]], %arg0 {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.get_param @transformer.wpe.weight {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.slice {{.*}} {pmesh.stage = 0 : i64}
// S2-NEXT: %[[H0:.*]] = pmesh.add {{.*}} {pmesh.stage = 0 : i64}
// S2-NEXT: pmesh.get_param @transformer.h.0.ln_1.weight {pmesh.stage = 0 : i64}
// S2: pmesh.attention {{.*}} {pmesh.stage = 0 : i64, scale = 2.500000e-01 : f32}
// S2: pmesh.get_param @transformer.h.0.mlp.c_proj.bias {pmesh.stage = 0 : i64}
// S2-NEXT: %[[PROJ0:.*]] = pmesh.matmul {{.*}} {pmesh.stage = 0 : i64}
// The residual add closes block 0, then block 1 starts on stage 1.
// S2-NEXT: %[[X1:.*]] = pmesh.add %{{[0-9]+}}, %[[PROJ0]] {pmesh.stage = 0 : i64}
// S2-NEXT: %[[LN1W:.*]] = pmesh.get_param @transformer.h.1.ln_1.weight {pmesh.stage = 1 : i64}
// S2-NEXT: %[[LN1B:.*]] = pmesh.get_param @transformer.h.1.ln_1.bias {pmesh.stage = 1 : i64}
// S2-NEXT: pmesh.layer_norm %[[X1]], %[[LN1W]], %[[LN1B]] {pmesh.stage = 1 : i64}
// S2-NOT: pmesh.stage = 0
// S2: pmesh.attention {{.*}} {pmesh.stage = 1 : i64, scale = 2.500000e-01 : f32}
// S2: %[[LNFW:.*]] = pmesh.get_param @transformer.ln_f.weight {pmesh.stage = 1 : i64}
// S2-NEXT: %[[LNFB:.*]] = pmesh.get_param @transformer.ln_f.bias {pmesh.stage = 1 : i64}
// S2-NEXT: %[[LNF:.*]] = pmesh.layer_norm %{{[0-9]+}}, %[[LNFW]], %[[LNFB]] {pmesh.stage = 1 : i64}
// The head's own copy of the tied embedding, read just before its use.
// S2-NEXT: %[[WTE1:.*]] = pmesh.get_param @transformer.wte.weight {pmesh.stage = 1 : i64} : tensor<256x64xf32>
// S2-NEXT: %[[LOGITS:.*]] = pmesh.matmul %[[LNF]], %[[WTE1]] {pmesh.stage = 1 : i64, transpose_b = true}
// S2-NEXT: return %[[LOGITS]]

// PRINT: pmesh-partition: 2 layers on 2 stages (balanced; device cpu: 150 GFLOP/s, 20 GB/s, efficiency 0.80)
// PRINT: pre (embeddings): time {{.*}}, activations 8.0 KiB, parameters 80.0 KiB
// PRINT-NEXT: layer 0 transformer.h.0: time {{.*}}, activations 100.0 KiB, parameters 195.2 KiB
// PRINT-NEXT: layer 1 transformer.h.1: time {{.*}}, activations 100.0 KiB, parameters 195.2 KiB
// PRINT-NEXT: post (head, appended loss): time {{.*}}, activations 20.0 KiB, parameters 64.5 KiB
// PRINT-NEXT: stage 0: layer 0 (1) + pre: time
// PRINT-NEXT: stage 1: layer 1 (1) + post: time
// PRINT-NEXT: max stage time

// A torch export with an attention mask input and its own loss against
// labels: the mask (no parameter) is computed on the stage of its first user
// (block 0's attention), the shifted labels on the stage of the loss.
// TORCH: %[[MIN:.*]] = pmesh.constant {pmesh.stage = 0 : i64} dense<-3.40282347E+38>
// TORCH: %[[M:.*]] = pmesh.reshape %arg1 {pmesh.stage = 0 : i64}
// TORCH: %[[MASK:.*]] = pmesh.mul %{{[0-9]+}}, %[[MIN]] {pmesh.stage = 0 : i64}
// TORCH: pmesh.attention {{.*}} mask %[[MASK]] {pmesh.stage = 0 : i64
// TORCH: pmesh.attention {{.*}} mask %[[MASK]] {pmesh.stage = 1 : i64
// TORCH: %[[WTE1:.*]] = pmesh.get_param @transformer.wte.weight {pmesh.stage = 1 : i64}
// TORCH-NEXT: pmesh.matmul %{{[0-9]+}}, %[[WTE1]] {pmesh.stage = 1 : i64, transpose_b = true}
// TORCH: pmesh.slice %arg2{{.*}} {pmesh.stage = 1 : i64}
// TORCH: pmesh.cross_entropy {{.*}} {pmesh.stage = 1 : i64}
