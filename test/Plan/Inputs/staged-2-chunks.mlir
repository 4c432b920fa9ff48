// A staged training step (two chunks: chunk 0 = embedding, w1 + b1, gelu; chunk 1 = w2, tied head, loss),
// as --pmesh-partition + --pmesh-autodiff produce it: every op has its
// pmesh.stage, the tied embedding @wte is read on the first and the last chunk
// and gets one accumulate_grad per chunk. Input of the test/Plan tests.
module {
  pmesh.param @wte : tensor<16x8xf32>
  pmesh.param @w1 : tensor<8x6xf32>
  pmesh.param @b1 : tensor<6xf32>
  pmesh.param @w2 : tensor<6x8xf32>
  func.func @train_step(%arg0: tensor<2x4xi64> {pmesh.name = "input_ids"}, %arg1: tensor<2x4xi64> {pmesh.name = "targets"}) -> (tensor<f32> {pmesh.name = "loss"}) {
    %0 = pmesh.constant {pmesh.stage = 1 : i64} dense<1.000000e+00> : tensor<f32>
    %1 = pmesh.get_param @wte {pmesh.stage = 0 : i64} : tensor<16x8xf32>
    %2 = pmesh.embedding %1, %arg0 {pmesh.stage = 0 : i64} : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
    %3 = pmesh.get_param @w1 {pmesh.stage = 0 : i64} : tensor<8x6xf32>
    %4 = pmesh.get_param @b1 {pmesh.stage = 0 : i64} : tensor<6xf32>
    %5 = pmesh.matmul %2, %3 bias %4 {pmesh.stage = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x6xf32>, tensor<6xf32>) -> tensor<2x4x6xf32>
    %6 = pmesh.gelu %5 {pmesh.stage = 0 : i64} : tensor<2x4x6xf32>
    %7 = pmesh.get_param @w2 {pmesh.stage = 1 : i64} : tensor<6x8xf32>
    %8 = pmesh.matmul %6, %7 {pmesh.stage = 1 : i64} : (tensor<2x4x6xf32>, tensor<6x8xf32>) -> tensor<2x4x8xf32>
    %9 = pmesh.get_param @wte {pmesh.stage = 1 : i64} : tensor<16x8xf32>
    %10 = pmesh.matmul %8, %9 {pmesh.stage = 1 : i64, transpose_b = true} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
    %11 = pmesh.cross_entropy %10, %arg1 {pmesh.stage = 1 : i64} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
    %12 = pmesh.cross_entropy_grad %0, %10, %arg1 {pmesh.stage = 1 : i64} : (tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4x16xf32>
    %13 = pmesh.matmul %12, %9 {pmesh.stage = 1 : i64} : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %14 = pmesh.reshape %8 {pmesh.stage = 1 : i64} : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %15 = pmesh.reshape %12 {pmesh.stage = 1 : i64} : tensor<2x4x16xf32> -> tensor<8x16xf32>
    %16 = pmesh.matmul %15, %14 {pmesh.stage = 1 : i64, transpose_a = true} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
    %17 = pmesh.matmul %13, %7 {pmesh.stage = 1 : i64, transpose_b = true} : (tensor<2x4x8xf32>, tensor<6x8xf32>) -> tensor<2x4x6xf32>
    %18 = pmesh.reshape %6 {pmesh.stage = 1 : i64} : tensor<2x4x6xf32> -> tensor<8x6xf32>
    %19 = pmesh.reshape %13 {pmesh.stage = 1 : i64} : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %20 = pmesh.matmul %18, %19 {pmesh.stage = 1 : i64, transpose_a = true} : (tensor<8x6xf32>, tensor<8x8xf32>) -> tensor<6x8xf32>
    %21 = pmesh.gelu_grad %17, %5 {pmesh.stage = 0 : i64} : tensor<2x4x6xf32>
    %22 = pmesh.matmul %21, %3 {pmesh.stage = 0 : i64, transpose_b = true} : (tensor<2x4x6xf32>, tensor<8x6xf32>) -> tensor<2x4x8xf32>
    %23 = pmesh.reshape %2 {pmesh.stage = 0 : i64} : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %24 = pmesh.reshape %21 {pmesh.stage = 0 : i64} : tensor<2x4x6xf32> -> tensor<8x6xf32>
    %25 = pmesh.matmul %23, %24 {pmesh.stage = 0 : i64, transpose_a = true} : (tensor<8x8xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
    %26 = pmesh.reduce_sum %21 axes = [0, 1] {keepdims = false, pmesh.stage = 0 : i64} : tensor<2x4x6xf32> -> tensor<6xf32>
    %27 = pmesh.embedding_grad %22, %arg0 {pmesh.stage = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
    pmesh.accumulate_grad @wte, %27 {pmesh.stage = 0 : i64} : tensor<16x8xf32>
    pmesh.accumulate_grad @wte, %16 {pmesh.stage = 1 : i64} : tensor<16x8xf32>
    pmesh.accumulate_grad @w1, %25 {pmesh.stage = 0 : i64} : tensor<8x6xf32>
    pmesh.accumulate_grad @b1, %26 {pmesh.stage = 0 : i64} : tensor<6xf32>
    pmesh.accumulate_grad @w2, %20 {pmesh.stage = 1 : i64} : tensor<6x8xf32>
    return %11 : tensor<f32>
  }
  func.func @optimizer_step() {
    pmesh.adamw [@wte, @w1, @b1, @w2] decay = [true, true, false, true]
    return
  }
}

