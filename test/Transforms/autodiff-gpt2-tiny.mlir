// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-autodiff -canonicalize -cse | FileCheck %s
// RUN: pipemesh-opt %models/fixtures/gpt2_tiny_op17.onnx --batch=2 --seq=8 --pmesh-autodiff -canonicalize -cse --pmesh-summary -o /dev/null | FileCheck %s --check-prefix=SUMMARY

// The whole emitted train step of a tiny GPT-2 (2 layers, C=64, 4 heads,
// V=256, tied output head) imported from ONNX: @forward returns logits, so
// the causal-LM cross-entropy is appended with a `targets` input; backward
// through the head, ln_f, two blocks (MLP, attention with the q/k/v split)
// and the embeddings; one summed gradient for the tied token embedding;
// 28 accumulate_grads and one adamw over all 28 parameters.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDS:[a-z0-9]+]]: tensor<2x8xi64> {pmesh.name = "input_ids"}, %[[TGT:[a-z0-9]+]]: tensor<2x8xi64> {pmesh.name = "targets"}) -> (tensor<f32> {pmesh.name = "loss"})
// CHECK-NEXT: %[[ONE:.*]] = pmesh.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[WTE:.*]] = pmesh.get_param @transformer.wte.weight : tensor<256x64xf32>
// CHECK-NEXT: %[[TOK:.*]] = pmesh.embedding %[[WTE]], %[[IDS]]
// CHECK-NEXT: %[[WPE:.*]] = pmesh.get_param @transformer.wpe.weight : tensor<64x64xf32>
// CHECK-NEXT: %[[POS:.*]] = pmesh.slice %[[WPE]]{{\[\[}}0, 0] : [8, 64] : [1, 1{{\]\]}} : tensor<64x64xf32> -> tensor<8x64xf32>
// CHECK-NEXT: %[[H0:.*]] = pmesh.add %[[TOK]], %[[POS]]

// The last block's MLP and ln_f in the forward copy.
// CHECK: %[[LN2W:.*]] = pmesh.get_param @transformer.h.1.ln_2.weight
// CHECK-NEXT: %[[LN2B:.*]] = pmesh.get_param @transformer.h.1.ln_2.bias
// CHECK-NEXT: %[[LN2:.*]] = pmesh.layer_norm %[[X1:[0-9]+]], %[[LN2W]], %[[LN2B]]
// CHECK-NEXT: %[[FCW:.*]] = pmesh.get_param @transformer.h.1.mlp.c_fc.weight : tensor<64x256xf32>
// CHECK-NEXT: %[[FCB:.*]] = pmesh.get_param @transformer.h.1.mlp.c_fc.bias
// CHECK-NEXT: %[[FC:.*]] = pmesh.matmul %[[LN2]], %[[FCW]] bias %[[FCB]]
// CHECK-NEXT: %[[ACT:.*]] = pmesh.gelu %[[FC]] {approximate = "tanh"} : tensor<2x8x256xf32>
// CHECK-NEXT: %[[PJW:.*]] = pmesh.get_param @transformer.h.1.mlp.c_proj.weight : tensor<256x64xf32>
// CHECK-NEXT: %[[PJB:.*]] = pmesh.get_param @transformer.h.1.mlp.c_proj.bias
// CHECK-NEXT: %[[PJ:.*]] = pmesh.matmul %[[ACT]], %[[PJW]] bias %[[PJB]]
// CHECK-NEXT: %[[X2:.*]] = pmesh.add %[[X1]], %[[PJ]]
// CHECK-NEXT: %[[LNFW:.*]] = pmesh.get_param @transformer.ln_f.weight
// CHECK-NEXT: %[[LNFB:.*]] = pmesh.get_param @transformer.ln_f.bias
// CHECK-NEXT: %[[LNF:.*]] = pmesh.layer_norm %[[X2]], %[[LNFW]], %[[LNFB]]
// CHECK-NEXT: %[[LOGITS:.*]] = pmesh.matmul %[[LNF]], %[[WTE]] {transpose_b = true} : (tensor<2x8x64xf32>, tensor<256x64xf32>) -> tensor<2x8x256xf32>

// The appended loss and its gradient, seeded with 1.0.
// CHECK-NEXT: %[[LOSS:.*]] = pmesh.cross_entropy %[[LOGITS]], %[[TGT]] : (tensor<2x8x256xf32>, tensor<2x8xi64>) -> tensor<f32>
// CHECK-NEXT: %[[DLOGITS:.*]] = pmesh.cross_entropy_grad %[[ONE]], %[[LOGITS]], %[[TGT]] : (tensor<f32>, tensor<2x8x256xf32>, tensor<2x8xi64>) -> tensor<2x8x256xf32>

// The tied head: d(ln_f) = DLOGITS @ wte; its wte gradient folds the batch:
// [16,256]^T @ [16,64].
// CHECK-NEXT: %[[DLNF:.*]] = pmesh.matmul %[[DLOGITS]], %[[WTE]] : (tensor<2x8x256xf32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[LNF2:.*]] = pmesh.reshape %[[LNF]] : tensor<2x8x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT: %[[DLOGITS2:.*]] = pmesh.reshape %[[DLOGITS]] : tensor<2x8x256xf32> -> tensor<16x256xf32>
// CHECK-NEXT: %[[DWTE_HEAD:.*]] = pmesh.matmul %[[DLOGITS2]], %[[LNF2]] {transpose_a = true} : (tensor<16x256xf32>, tensor<16x64xf32>) -> tensor<256x64xf32>

// ln_f, then the MLP of block 1 in reverse.
// CHECK-NEXT: %[[DX2:.*]], %[[DLNFW:[a-z0-9_]+]], %[[DLNFB:[a-z0-9_]+]] = pmesh.layer_norm_grad %[[DLNF]], %[[X2]], %[[LNFW]]
// CHECK-NEXT: %[[DACT:.*]] = pmesh.matmul %[[DX2]], %[[PJW]] {transpose_b = true} : (tensor<2x8x64xf32>, tensor<256x64xf32>) -> tensor<2x8x256xf32>
// CHECK-NEXT: %[[ACT2:.*]] = pmesh.reshape %[[ACT]] : tensor<2x8x256xf32> -> tensor<16x256xf32>
// CHECK-NEXT: %[[DX22:.*]] = pmesh.reshape %[[DX2]] : tensor<2x8x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT: %[[DPJW:.*]] = pmesh.matmul %[[ACT2]], %[[DX22]] {transpose_a = true} : (tensor<16x256xf32>, tensor<16x64xf32>) -> tensor<256x64xf32>
// CHECK-NEXT: %[[DPJB:.*]] = pmesh.reduce_sum %[[DX2]] axes = [0, 1] {keepdims = false} : tensor<2x8x64xf32> -> tensor<64xf32>
// CHECK-NEXT: %[[DFC:.*]] = pmesh.gelu_grad %[[DACT]], %[[FC]] {approximate = "tanh"} : tensor<2x8x256xf32>
// CHECK-NEXT: %[[DLN2:.*]] = pmesh.matmul %[[DFC]], %[[FCW]] {transpose_b = true} : (tensor<2x8x256xf32>, tensor<64x256xf32>) -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[LN22:.*]] = pmesh.reshape %[[LN2]] : tensor<2x8x64xf32> -> tensor<16x64xf32>
// CHECK-NEXT: %[[DFC2:.*]] = pmesh.reshape %[[DFC]] : tensor<2x8x256xf32> -> tensor<16x256xf32>
// CHECK-NEXT: %[[DFCW:.*]] = pmesh.matmul %[[LN22]], %[[DFC2]] {transpose_a = true} : (tensor<16x64xf32>, tensor<16x256xf32>) -> tensor<64x256xf32>
// CHECK-NEXT: %[[DFCB:.*]] = pmesh.reduce_sum %[[DFC]] axes = [0, 1] {keepdims = false} : tensor<2x8x256xf32> -> tensor<256xf32>
// CHECK-NEXT: %[[DLN2X:.*]], %[[DLN2W:[a-z0-9_]+]], %[[DLN2B:[a-z0-9_]+]] = pmesh.layer_norm_grad %[[DLN2]], %[[X1]], %[[LN2W]]

// Fan-out of the residual stream X1 (ln_2 and the residual add): summed.
// CHECK-NEXT: %[[DX1:.*]] = pmesh.add %[[DX2]], %[[DLN2X]] : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>

// Attention of block 1: the heads are transposed back, q/k/v concatenated
// into the c_attn output gradient.
// CHECK: %[[DQ:[a-z0-9_]+]], %[[DK:[a-z0-9_]+]], %[[DV:[a-z0-9_]+]] = pmesh.attention_grad %{{.*}} {scale = 2.500000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
// CHECK-NEXT: %[[DKT:.*]] = pmesh.transpose %[[DK]] perm = [0, 2, 1, 3] : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
// CHECK-NEXT: %[[DVT:.*]] = pmesh.transpose %[[DV]] perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[DVR:.*]] = pmesh.reshape %[[DVT]] : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[DKR:.*]] = pmesh.reshape %[[DKT]] : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[DQT:.*]] = pmesh.transpose %[[DQ]] perm = [0, 2, 1, 3]
// CHECK-NEXT: %[[DQR:.*]] = pmesh.reshape %[[DQT]] : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[DQKV:.*]] = pmesh.concat %[[DQR]], %[[DKR]], %[[DVR]] axis = 2 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x192xf32>

// The embeddings: the residual gradient at the input, summed over the batch
// for the position slice (slice_grad into the [64,64] wpe), scattered into
// the token table, and added to the head's gradient of the tied wte.
// CHECK: %[[DLN1X:[a-z0-9_]+]], %{{.*}} = pmesh.layer_norm_grad %{{[0-9]+}}, %[[H0]], %{{[0-9]+}} :
// CHECK-NEXT: %[[DH0:.*]] = pmesh.add %{{[0-9]+}}, %[[DLN1X]] : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
// CHECK-NEXT: %[[DPOS:.*]] = pmesh.reduce_sum %[[DH0]] axes = [0] {keepdims = false} : tensor<2x8x64xf32> -> tensor<8x64xf32>
// CHECK-NEXT: %[[DWPE:.*]] = pmesh.slice_grad %[[DPOS]]{{\[\[}}0, 0] : [8, 64] : [1, 1{{\]\]}} : tensor<8x64xf32> -> tensor<64x64xf32>
// CHECK-NEXT: %[[DTOK:.*]] = pmesh.embedding_grad %[[DH0]], %[[IDS]] : (tensor<2x8x64xf32>, tensor<2x8xi64>) -> tensor<256x64xf32>
// CHECK-NEXT: %[[DWTE:.*]] = pmesh.add %[[DWTE_HEAD]], %[[DTOK]] : (tensor<256x64xf32>, tensor<256x64xf32>) -> tensor<256x64xf32>

// One accumulate_grad per parameter, in declaration order.
// CHECK-NEXT: pmesh.accumulate_grad @transformer.wte.weight, %[[DWTE]] : tensor<256x64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.wpe.weight, %[[DWPE]] : tensor<64x64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.ln_1.weight, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.ln_1.bias, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.attn.c_attn.weight, %{{.*}} : tensor<64x192xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.attn.c_attn.bias, %{{.*}} : tensor<192xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.attn.c_proj.weight, %{{.*}} : tensor<64x64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.attn.c_proj.bias, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.ln_2.weight, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.ln_2.bias, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.mlp.c_fc.weight, %{{.*}} : tensor<64x256xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.mlp.c_fc.bias, %{{.*}} : tensor<256xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.mlp.c_proj.weight, %{{.*}} : tensor<256x64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.0.mlp.c_proj.bias, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.ln_1.weight, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.ln_1.bias, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.attn.c_attn.weight, %{{.*}} : tensor<64x192xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.attn.c_attn.bias, %{{.*}} : tensor<192xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.attn.c_proj.weight, %{{.*}} : tensor<64x64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.attn.c_proj.bias, %{{.*}} : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.ln_2.weight, %[[DLN2W]] : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.ln_2.bias, %[[DLN2B]] : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.mlp.c_fc.weight, %[[DFCW]] : tensor<64x256xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.mlp.c_fc.bias, %[[DFCB]] : tensor<256xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.mlp.c_proj.weight, %[[DPJW]] : tensor<256x64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.h.1.mlp.c_proj.bias, %[[DPJB]] : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.ln_f.weight, %[[DLNFW]] : tensor<64xf32>
// CHECK-NEXT: pmesh.accumulate_grad @transformer.ln_f.bias, %[[DLNFB]] : tensor<64xf32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
// CHECK-NEXT: }

// AdamW over every parameter; weight decay on the matrices only.
// CHECK-LABEL: func.func @optimizer_step()
// CHECK-NEXT: pmesh.adamw [@transformer.wte.weight, @transformer.wpe.weight, @transformer.h.0.ln_1.weight, @transformer.h.0.ln_1.bias, @transformer.h.0.attn.c_attn.weight, @transformer.h.0.attn.c_attn.bias, @transformer.h.0.attn.c_proj.weight, @transformer.h.0.attn.c_proj.bias, @transformer.h.0.ln_2.weight, @transformer.h.0.ln_2.bias, @transformer.h.0.mlp.c_fc.weight, @transformer.h.0.mlp.c_fc.bias, @transformer.h.0.mlp.c_proj.weight, @transformer.h.0.mlp.c_proj.bias, @transformer.h.1.ln_1.weight, @transformer.h.1.ln_1.bias, @transformer.h.1.attn.c_attn.weight, @transformer.h.1.attn.c_attn.bias, @transformer.h.1.attn.c_proj.weight, @transformer.h.1.attn.c_proj.bias, @transformer.h.1.ln_2.weight, @transformer.h.1.ln_2.bias, @transformer.h.1.mlp.c_fc.weight, @transformer.h.1.mlp.c_fc.bias, @transformer.h.1.mlp.c_proj.weight, @transformer.h.1.mlp.c_proj.bias, @transformer.ln_f.weight, @transformer.ln_f.bias]
// CHECK-SAME: decay = [true, true, false, false, true, false, true, false, false, false, true, false, true, false, false, false, true, false, true, false, false, false, true, false, true, false, false, false]
// CHECK-NEXT: return

// Op counts. Forward: 9 matmuls (4 per block and the head), 5 layer_norms,
// 2 attentions, 2 gelus, 5 adds (position and 4 residuals), 8 reshapes and
// 8 transposes (heads). Backward: 2 matmuls per forward matmul (all 18
// operands need gradients), 18 reshapes folding the batch of the 9 weight
// gradients plus 8 reshape gradients, 8 transposes, 9 reduce_sums (8 biases
// and the broadcast position embedding), 5 adds (4 residual fan-outs and the
// tied wte), one composite gradient op per composite forward op, the two
// splits' gradients as concats, and the seed as the only constant.
// SUMMARY-LABEL: function @train_step
// SUMMARY-NEXT: input  input_ids: tensor<2x8xi64>
// SUMMARY-NEXT: input  targets: tensor<2x8xi64>
// SUMMARY-NEXT: output loss: tensor<f32>
// SUMMARY-NEXT: ops:
// SUMMARY-NEXT: pmesh.reshape 34{{$}}
// SUMMARY-NEXT: pmesh.get_param 28{{$}}
// SUMMARY-NEXT: pmesh.accumulate_grad 28{{$}}
// SUMMARY-NEXT: pmesh.matmul 27{{$}}
// SUMMARY-NEXT: pmesh.transpose 16{{$}}
// SUMMARY-NEXT: pmesh.add 10{{$}}
// SUMMARY-NEXT: pmesh.reduce_sum 9{{$}}
// SUMMARY-NEXT: pmesh.layer_norm 5{{$}}
// SUMMARY-NEXT: pmesh.layer_norm_grad 5{{$}}
// SUMMARY-NEXT: pmesh.split 2{{$}}
// SUMMARY-NEXT: pmesh.attention 2{{$}}
// SUMMARY-NEXT: pmesh.gelu 2{{$}}
// SUMMARY-NEXT: pmesh.gelu_grad 2{{$}}
// SUMMARY-NEXT: pmesh.attention_grad 2{{$}}
// SUMMARY-NEXT: pmesh.concat 2{{$}}
// SUMMARY-NEXT: pmesh.constant 1{{$}}
// SUMMARY-NEXT: pmesh.embedding 1{{$}}
// SUMMARY-NEXT: pmesh.slice 1{{$}}
// SUMMARY-NEXT: pmesh.cross_entropy 1{{$}}
// SUMMARY-NEXT: pmesh.cross_entropy_grad 1{{$}}
// SUMMARY-NEXT: pmesh.slice_grad 1{{$}}
// SUMMARY-NEXT: pmesh.embedding_grad 1{{$}}
// SUMMARY-NEXT: func.return 1{{$}}
// SUMMARY-NEXT: function @optimizer_step
// SUMMARY-NEXT: ops:
// SUMMARY-NEXT: pmesh.adamw 1{{$}}
// SUMMARY-NEXT: func.return 1{{$}}
