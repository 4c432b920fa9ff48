//===- Passes.h - PipeMesh passes -------------------------------*- C++ -*-===//
#ifndef PIPEMESH_TRANSFORMS_PASSES_H
#define PIPEMESH_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"

namespace mlir {
class RewritePatternSet;
}

namespace pipemesh {

#define GEN_PASS_DECL
#include "pipemesh/Transforms/Passes.h.inc"

/// The raise patterns, for passes that want them mixed with others. (The
/// pmesh-raise pass also keeps computed masks' analysis across layers, which
/// needs its rewrite listener; these evaluate a shared mask for each layer.)
void populateRaisePatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "pipemesh/Transforms/Passes.h.inc"

} // namespace pipemesh

#endif // PIPEMESH_TRANSFORMS_PASSES_H
