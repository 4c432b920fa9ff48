//===- PMeshDialect.cpp - the pmesh dialect --------------------------------===//
#include "pipemesh/Dialect/PMesh/PMesh.h"

using namespace mlir;
using namespace pipemesh::pmesh;

#include "pipemesh/Dialect/PMesh/PMeshOpsDialect.cpp.inc"
#include "pipemesh/Dialect/PMesh/PMeshInterfaces.cpp.inc"

void PMeshDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "pipemesh/Dialect/PMesh/PMeshOps.cpp.inc"
      >();
}

Operation *PMeshDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                             Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}
