//===- ONNXModelLoader.h - reading ONNX files and tensor data ---*- C++ -*-===//
#ifndef PIPEMESH_LIB_IMPORT_ONNXMODELLOADER_H
#define PIPEMESH_LIB_IMPORT_ONNXMODELLOADER_H

#include "ConstTensor.h"

#include "llvm/ADT/StringRef.h"
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

namespace pipemesh::onnximport {

/// Parses a binary ModelProto (or, with isText, the ONNX text syntax) and
/// checks the minimum a model needs (a graph, an opset import). On failure
/// returns false with the reason in `why`.
bool parseModel(llvm::StringRef bytes, bool isText, onnx::ModelProto &model, std::string &why);

/// How messages name a node: its name, or for an unnamed one its index and
/// first output ("#12 -> attn_out"), or its index alone.
std::string nodeLabel(const onnx::NodeProto &node, int index);

/// Where an initializer's bytes live when stored as external data.
struct ExternalRef {
  std::string path; // resolved against the model's directory
  int64_t offset = 0;
  int64_t length = -1; // -1: to the end of the file
};

bool isExternal(const onnx::TensorProto &t);
bool externalRef(const onnx::TensorProto &t, llvm::StringRef baseDir, ExternalRef &ref,
                 std::string &why);
/// Checks that external data exists and is long enough, without reading it.
bool checkExternalData(const onnx::TensorProto &t, llvm::StringRef baseDir, std::string &why);

/// Reads a (small) initializer or Constant value into a host tensor.
bool readTensor(const onnx::TensorProto &t, llvm::StringRef baseDir, ConstTensor &out,
                std::string &why);
/// Reads a float32 initializer's values (for comparing parameters).
bool readFloat32(const onnx::TensorProto &t, llvm::StringRef baseDir, std::vector<float> &out,
                 std::string &why);

} // namespace pipemesh::onnximport

#endif // PIPEMESH_LIB_IMPORT_ONNXMODELLOADER_H
