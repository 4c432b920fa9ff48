//===- ONNXWeightReader.cpp - initializer values for the plan emitter ------===//
#include "ONNXModelLoader.h"
#include "pipemesh/Import/ONNXImporter.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace pipemesh;

namespace {
class WeightReaderImpl : public ONNXWeightReader {
public:
  onnx::ModelProto model;
  std::string baseDir;
  llvm::StringMap<const onnx::TensorProto *> byName;

  bool readFloat32(llvm::StringRef name, std::vector<float> &values, std::string &why) override {
    const onnx::TensorProto *t = byName.lookup(name);
    if (!t) {
      why = "the model has no initializer '" + name.str() + "'";
      return false;
    }
    return onnximport::readFloat32(*t, baseDir, values, why);
  }
};
} // namespace

std::unique_ptr<ONNXWeightReader> ONNXWeightReader::open(llvm::StringRef path, std::string &why) {
  auto buffer = llvm::MemoryBuffer::getFile(path, false, false);
  if (!buffer) {
    why = "cannot open '" + path.str() + "': " + buffer.getError().message();
    return nullptr;
  }
  auto reader = std::make_unique<WeightReaderImpl>();
  if (!onnximport::parseModel((*buffer)->getBuffer(), path.ends_with(".onnxtxt"), reader->model,
                              why))
    return nullptr;
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  reader->baseDir = dir.empty() ? "." : dir.str();
  for (const onnx::TensorProto &t : reader->model.graph().initializer())
    reader->byName[t.name()] = &t;
  return reader;
}
