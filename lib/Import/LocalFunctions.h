//===- LocalFunctions.h - inlining an ONNX model's local functions -*- C++ -*-===//
//
// ONNX IR 8 lets a model define functions of its own (ModelProto.functions)
// and call them like ops: torch.onnx.export(export_modules_as_functions=...)
// writes one per module class, with the module's weights passed in as inputs.
// The importer handles ops, so every call is replaced by the function's body
// first, with its internal tensors and nodes renamed under the call's name.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_LIB_IMPORT_LOCALFUNCTIONS_H
#define PIPEMESH_LIB_IMPORT_LOCALFUNCTIONS_H

#include <string>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace pipemesh::onnximport {

/// Replaces every call of a model-local function in the main graph by the
/// function's body, recursively, and drops the functions. Returns false with
/// `why` (naming the function and the call) for what cannot be inlined: a
/// function that calls itself, a call with more inputs or outputs than the function
/// declares, a function on another version of the default domain, a body node
/// with a subgraph, more than `maxNodes` nodes once inlined.
bool inlineLocalFunctions(onnx::ModelProto &model, size_t maxNodes, std::string &why);

} // namespace pipemesh::onnximport

#endif // PIPEMESH_LIB_IMPORT_LOCALFUNCTIONS_H
