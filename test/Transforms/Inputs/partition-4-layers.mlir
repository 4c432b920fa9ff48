// Four residual "layers" (model.layers.<i>), a tied embedding / output head
// and a final norm: the input of test/Transforms/partition-layers.mlir.
module {
  pmesh.param @model.embed : tensor<64x16xf32>
  pmesh.param @model.layers.0.w : tensor<16x16xf32>
  pmesh.param @model.layers.1.w : tensor<16x16xf32>
  pmesh.param @model.layers.2.w : tensor<16x16xf32>
  pmesh.param @model.layers.3.w : tensor<16x16xf32>
  pmesh.param @model.norm.weight : tensor<16xf32>
  func.func @forward(%ids: tensor<2x8xi64>) -> tensor<2x8x64xf32> {
    %emb = pmesh.get_param @model.embed : tensor<64x16xf32>
    %x0 = pmesh.embedding %emb, %ids : (tensor<64x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
    %w0 = pmesh.get_param @model.layers.0.w : tensor<16x16xf32>
    %m0 = pmesh.matmul %x0, %w0 : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %g0 = pmesh.gelu %m0 : tensor<2x8x16xf32>
    %x1 = pmesh.add %x0, %g0 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %w1 = pmesh.get_param @model.layers.1.w : tensor<16x16xf32>
    %m1 = pmesh.matmul %x1, %w1 : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %g1 = pmesh.gelu %m1 : tensor<2x8x16xf32>
    %x2 = pmesh.add %x1, %g1 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %w2 = pmesh.get_param @model.layers.2.w : tensor<16x16xf32>
    %m2 = pmesh.matmul %x2, %w2 : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %g2 = pmesh.gelu %m2 : tensor<2x8x16xf32>
    %x3 = pmesh.add %x2, %g2 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %w3 = pmesh.get_param @model.layers.3.w : tensor<16x16xf32>
    %m3 = pmesh.matmul %x3, %w3 : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %g3 = pmesh.gelu %m3 : tensor<2x8x16xf32>
    %x4 = pmesh.add %x3, %g3 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %nw = pmesh.get_param @model.norm.weight : tensor<16xf32>
    %n = pmesh.layer_norm %x4, %nw : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %logits = pmesh.matmul %n, %emb {transpose_b = true} : (tensor<2x8x16xf32>, tensor<64x16xf32>) -> tensor<2x8x64xf32>
    return %logits : tensor<2x8x64xf32>
  }
}
