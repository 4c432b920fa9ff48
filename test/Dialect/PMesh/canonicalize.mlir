// RUN: pipemesh-opt %s -canonicalize | FileCheck %s

// Folders and canonicalization patterns of the pmesh dialect.

//===----------------------------------------------------------------------===//
// Identity ops fold to their input
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @identity_reshape(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_reshape(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = pmesh.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @identity_transpose(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_transpose(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = pmesh.transpose %x perm = [0, 1, 2] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @identity_transpose_scalar(
// CHECK-SAME: %[[X:.*]]: tensor<f32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_transpose_scalar(%x: tensor<f32>) -> tensor<f32> {
  %0 = pmesh.transpose %x perm = [] : tensor<f32> -> tensor<f32>
  return %0 : tensor<f32>
}

// Swapping two equal dims keeps the type but moves data: not an identity.
// CHECK-LABEL: func.func @same_type_transpose_kept(
// CHECK-SAME: %[[X:.*]]: tensor<3x3xf32>)
// CHECK-NEXT: %[[T:.*]] = pmesh.transpose %[[X]] perm = [1, 0] : tensor<3x3xf32> -> tensor<3x3xf32>
// CHECK-NEXT: return %[[T]]
func.func @same_type_transpose_kept(%x: tensor<3x3xf32>) -> tensor<3x3xf32> {
  %0 = pmesh.transpose %x perm = [1, 0] : tensor<3x3xf32> -> tensor<3x3xf32>
  return %0 : tensor<3x3xf32>
}

// CHECK-LABEL: func.func @identity_broadcast(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_broadcast(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = pmesh.broadcast %x : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @identity_slice(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_slice(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = pmesh.slice %x [[0, 0] : [2, 3] : [1, 1]] : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// A size-1 dim keeps its one element whatever the stride.
// CHECK-LABEL: func.func @identity_slice_size_one(
// CHECK-SAME: %[[X:.*]]: tensor<1x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_slice_size_one(%x: tensor<1x3xf32>) -> tensor<1x3xf32> {
  %0 = pmesh.slice %x [[0, 0] : [1, 3] : [4, 1]] : tensor<1x3xf32> -> tensor<1x3xf32>
  return %0 : tensor<1x3xf32>
}

// CHECK-LABEL: func.func @identity_cast(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @identity_cast(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = pmesh.cast %x : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @non_identity_kept(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: pmesh.reshape %[[X]] : tensor<2x3xf32> -> tensor<6xf32>
// CHECK-NEXT: pmesh.broadcast %[[X]] : tensor<2x3xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: pmesh.slice %[[X]]{{\[\[}}0, 1] : [2, 3] : [1, 1]] : tensor<2x3xf32> -> tensor<2x2xf32>
// CHECK-NEXT: pmesh.cast %[[X]] : tensor<2x3xf32> -> tensor<2x3xf16>
// CHECK-NEXT: return
func.func @non_identity_kept(%x: tensor<2x3xf32>)
    -> (tensor<6xf32>, tensor<4x2x3xf32>, tensor<2x2xf32>, tensor<2x3xf16>) {
  %0 = pmesh.reshape %x : tensor<2x3xf32> -> tensor<6xf32>
  %1 = pmesh.broadcast %x : tensor<2x3xf32> -> tensor<4x2x3xf32>
  %2 = pmesh.slice %x [[0, 1] : [2, 3] : [1, 1]] : tensor<2x3xf32> -> tensor<2x2xf32>
  %3 = pmesh.cast %x : tensor<2x3xf32> -> tensor<2x3xf16>
  return %0, %1, %2, %3 : tensor<6xf32>, tensor<4x2x3xf32>, tensor<2x2xf32>, tensor<2x3xf16>
}

//===----------------------------------------------------------------------===//
// Chains
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reshape_of_reshape(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[R:.*]] = pmesh.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<4x6xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_of_reshape(%x: tensor<2x3x4xf32>) -> tensor<4x6xf32> {
  %0 = pmesh.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
  %1 = pmesh.reshape %0 : tensor<24xf32> -> tensor<4x6xf32>
  return %1 : tensor<4x6xf32>
}

// Three reshapes collapse into one.
// CHECK-LABEL: func.func @reshape_chain(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[R:.*]] = pmesh.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<1x24xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_chain(%x: tensor<2x3x4xf32>) -> tensor<1x24xf32> {
  %0 = pmesh.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
  %1 = pmesh.reshape %0 : tensor<24xf32> -> tensor<4x6xf32>
  %2 = pmesh.reshape %1 : tensor<4x6xf32> -> tensor<1x24xf32>
  return %2 : tensor<1x24xf32>
}

// Reshaping back to the original type leaves nothing.
// CHECK-LABEL: func.func @reshape_round_trip(
// CHECK-SAME: %[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @reshape_round_trip(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = pmesh.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  %1 = pmesh.reshape %0 : tensor<3x2xf32> -> tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// The inner reshape stays while something else uses it.
// CHECK-LABEL: func.func @reshape_of_reshape_multi_use(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-DAG: %[[A:.*]] = pmesh.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<24xf32>
// CHECK-DAG: %[[B:.*]] = pmesh.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<4x6xf32>
// CHECK: return %[[A]], %[[B]]
func.func @reshape_of_reshape_multi_use(%x: tensor<2x3x4xf32>) -> (tensor<24xf32>, tensor<4x6xf32>) {
  %0 = pmesh.reshape %x : tensor<2x3x4xf32> -> tensor<24xf32>
  %1 = pmesh.reshape %0 : tensor<24xf32> -> tensor<4x6xf32>
  return %0, %1 : tensor<24xf32>, tensor<4x6xf32>
}

// transpose(transpose(x, p1), p2) = transpose(x, p1[p2]): here
// [0, 2, 1, 3][[0, 2, 3, 1]] = [0, 1, 3, 2].
// CHECK-LABEL: func.func @transpose_of_transpose(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4x5xf32>)
// CHECK-NEXT: %[[T:.*]] = pmesh.transpose %[[X]] perm = [0, 1, 3, 2] : tensor<2x3x4x5xf32> -> tensor<2x3x5x4xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_of_transpose(%x: tensor<2x3x4x5xf32>) -> tensor<2x3x5x4xf32> {
  %0 = pmesh.transpose %x perm = [0, 2, 1, 3] : tensor<2x3x4x5xf32> -> tensor<2x4x3x5xf32>
  %1 = pmesh.transpose %0 perm = [0, 2, 3, 1] : tensor<2x4x3x5xf32> -> tensor<2x3x5x4xf32>
  return %1 : tensor<2x3x5x4xf32>
}

// A non-involutive pair checks the order of composition: [1, 2, 0] twice is
// [2, 0, 1].
// CHECK-LABEL: func.func @transpose_rotation(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.*]] = pmesh.transpose %[[X]] perm = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_rotation(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = pmesh.transpose %x perm = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %1 = pmesh.transpose %0 perm = [1, 2, 0] : tensor<3x4x2xf32> -> tensor<4x2x3xf32>
  return %1 : tensor<4x2x3xf32>
}

// A transpose followed by its inverse leaves nothing.
// CHECK-LABEL: func.func @transpose_inverse(
// CHECK-SAME: %[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @transpose_inverse(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = pmesh.transpose %x perm = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %1 = pmesh.transpose %0 perm = [2, 0, 1] : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reshape_of_constant(
// CHECK-NEXT: %[[C:.*]] = pmesh.constant dense<{{\[\[}}1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK-NEXT: return %[[C]]
func.func @reshape_of_constant() -> tensor<2x3xi64> {
  %0 = pmesh.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %1 = pmesh.reshape %0 : tensor<6xi64> -> tensor<2x3xi64>
  return %1 : tensor<2x3xi64>
}

// CHECK-LABEL: func.func @reshape_of_splat_constant(
// CHECK-NEXT: %[[C:.*]] = pmesh.constant dense<2.500000e-01> : tensor<1x1xf32>
// CHECK-NEXT: return %[[C]]
func.func @reshape_of_splat_constant() -> tensor<1x1xf32> {
  %0 = pmesh.constant dense<0.25> : tensor<f32>
  %1 = pmesh.reshape %0 : tensor<f32> -> tensor<1x1xf32>
  return %1 : tensor<1x1xf32>
}

// The reshape chain and the constant fold together.
// CHECK-LABEL: func.func @reshape_chain_of_constant(
// CHECK-NEXT: %[[C:.*]] = pmesh.constant dense<[true, false, true, false]> : tensor<4xi1>
// CHECK-NEXT: return %[[C]]
func.func @reshape_chain_of_constant() -> tensor<4xi1> {
  %0 = pmesh.constant dense<[[true, false], [true, false]]> : tensor<2x2xi1>
  %1 = pmesh.reshape %0 : tensor<2x2xi1> -> tensor<1x4xi1>
  %2 = pmesh.reshape %1 : tensor<1x4xi1> -> tensor<4xi1>
  return %2 : tensor<4xi1>
}

// CHECK-LABEL: func.func @broadcast_of_splat_constant(
// CHECK-NEXT: %[[C:.*]] = pmesh.constant dense<-1.000000e+09> : tensor<2x8x8xf32>
// CHECK-NEXT: return %[[C]]
func.func @broadcast_of_splat_constant() -> tensor<2x8x8xf32> {
  %0 = pmesh.constant dense<-1.0e9> : tensor<1x8xf32>
  %1 = pmesh.broadcast %0 : tensor<1x8xf32> -> tensor<2x8x8xf32>
  return %1 : tensor<2x8x8xf32>
}

// Only splats are broadcast at compile time: a non-splat constant would grow.
// CHECK-LABEL: func.func @broadcast_of_non_splat_constant(
// CHECK-NEXT: %[[C:.*]] = pmesh.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: %[[B:.*]] = pmesh.broadcast %[[C]] : tensor<2xf32> -> tensor<3x2xf32>
// CHECK-NEXT: return %[[B]]
func.func @broadcast_of_non_splat_constant() -> tensor<3x2xf32> {
  %0 = pmesh.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %1 = pmesh.broadcast %0 : tensor<2xf32> -> tensor<3x2xf32>
  return %1 : tensor<3x2xf32>
}
