// RUN: pipemesh-opt --no-implicit-module %s | FileCheck %s

// A pmesh.param with no parent op at all (here the top-level op; also one
// built through the C++ API and not yet inserted) must fail verification
// rather than crash. pipemesh-opt does not verify the top-level op itself,
// but the printer does, and falls back to the generic form when it fails.

// CHECK: "pmesh.param"() <{sym_name = "w", type = tensor<4xf32>}> : () -> ()
pmesh.param @w : tensor<4xf32>
