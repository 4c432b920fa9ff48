//===- FloatConstants.h - reading float constants' values ---------*- C++ -*-===//
//
// The importer and the raise read the values of large float constants (a
// causal mask folded at 4096 tokens has 2^24 of them). An APFloat per element
// cost most of a second there, so f32 and f64 attributes are read in place.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_DIALECT_PMESH_FLOATCONSTANTS_H
#define PIPEMESH_DIALECT_PMESH_FLOATCONSTANTS_H

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/APFloat.h"

namespace pipemesh::pmesh {

/// Calls fn(v) with every element of the float constant `attr`, in order, as a
/// double (exact for every float type), until fn returns false. Returns
/// whether it went through all of them.
template <typename Fn> bool forEachFloat(mlir::DenseElementsAttr attr, Fn &&fn) {
  if (auto fs = attr.tryGetValues<float>(); mlir::succeeded(fs)) {
    for (float v : *fs)
      if (!fn((double)v))
        return false;
    return true;
  }
  if (auto ds = attr.tryGetValues<double>(); mlir::succeeded(ds)) {
    for (double v : *ds)
      if (!fn(v))
        return false;
    return true;
  }
  for (llvm::APFloat v : attr.getValues<llvm::APFloat>()) {
    bool lost = false;
    v.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &lost);
    if (!fn(v.convertToDouble()))
      return false;
  }
  return true;
}

} // namespace pipemesh::pmesh

#endif // PIPEMESH_DIALECT_PMESH_FLOATCONSTANTS_H
