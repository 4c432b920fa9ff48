#include "pipemesh/Import/ONNXImporter.h"
using namespace mlir;
OwningOpRef<ModuleOp> pipemesh::importONNXFile(llvm::StringRef, const ImportOptions &, MLIRContext *c) { return nullptr; }
