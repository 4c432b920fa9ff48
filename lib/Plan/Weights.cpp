//===- Weights.cpp - buffers' JSON helpers and the safetensors blob --------===//
#include "PlanInternal.h"

#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Import/ONNXImporter.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
namespace json = llvm::json;

namespace pipemesh::plan::detail {

int64_t Buffer::bytes() const {
  int64_t es = dtype == "f64" || dtype == "i64" ? 8
               : dtype == "f16" || dtype == "bf16" ? 2
               : dtype == "i1" ? 1
                               : 4;
  return shapes::numElements(shape) * es;
}

std::string dtypeOf(Type t) {
  if (t.isF32()) return "f32";
  if (t.isF64()) return "f64";
  if (t.isF16()) return "f16";
  if (t.isBF16()) return "bf16";
  if (t.isInteger(1)) return "i1";
  if (t.isInteger(32)) return "i32";
  return "i64";
}

json::Value attrToJson(Attribute a) {
  if (auto b = dyn_cast<BoolAttr>(a))
    return b.getValue();
  if (auto i = dyn_cast<IntegerAttr>(a))
    return i.getValue().getSExtValue();
  if (auto f = dyn_cast<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto s = dyn_cast<StringAttr>(a))
    return s.getValue();
  if (auto d = dyn_cast<DenseI64ArrayAttr>(a))
    return json::Array(d.asArrayRef());
  if (auto d = dyn_cast<DenseBoolArrayAttr>(a)) {
    json::Array arr;
    for (bool v : d.asArrayRef())
      arr.push_back(v);
    return arr;
  }
  if (auto s = dyn_cast<FlatSymbolRefAttr>(a))
    return s.getValue();
  std::string text;
  llvm::raw_string_ostream os(text);
  a.print(os);
  return text;
}

/// safetensors: 8-byte header length, JSON header, then the data.
LogicalResult writeWeights(ModuleOp module, const WeightsSpec &spec, bool shapesOnly,
                           std::string &blob) {
  json::Object header;
  std::string data;
  std::unique_ptr<ONNXWeightReader> reader;
  std::string source;
  if (auto s = module->getAttrOfType<StringAttr>("pmesh.source"))
    source = s.getValue().str();
  if (!shapesOnly) {
    std::string why;
    reader = ONNXWeightReader::open(source, why);
    if (!reader)
      return module.emitError() << "reading the initial weights: " << why;
  }
  auto add = [&](llvm::StringRef name, llvm::StringRef dtype, llvm::ArrayRef<int64_t> shape,
                 llvm::StringRef bytes) {
    int64_t begin = data.size();
    data.append(bytes.data(), bytes.size());
    header[name] = json::Object{{"dtype", dtype},
                                {"shape", json::Array(shape)},
                                {"data_offsets", json::Array{begin, (int64_t)data.size()}}};
  };
  if (reader) {
    for (const std::string &p : spec.params) {
      std::vector<float> values;
      std::string why;
      if (!reader->readFloat32(spec.paramSource.lookup(p), values, why))
        return module.emitError() << "parameter '" << p << "': " << why;
      llvm::ArrayRef<int64_t> shape = spec.paramShape.find(p)->second;
      if ((int64_t)values.size() != shapes::numElements(shape))
        return module.emitError() << "parameter '" << p << "' has " << values.size()
                                  << " initial values for shape " << shapes::str(shape);
      add(p, "F32", shape,
          llvm::StringRef(reinterpret_cast<const char *>(values.data()), values.size() * 4));
    }
  }
  for (auto &[name, attr] : spec.constants) {
    Type elt = attr.getElementType();
    std::string bytes;
    llvm::StringRef dtype;
    auto shape = attr.getType().getShape();
    if (elt.isF32()) {
      dtype = "F32";
      for (float f : attr.getValues<float>())
        bytes.append(reinterpret_cast<const char *>(&f), 4);
    } else if (elt.isInteger(1)) {
      dtype = "BOOL";
      for (bool v : attr.getValues<bool>())
        bytes.push_back(v ? 1 : 0);
    } else if (elt.isInteger(64)) {
      dtype = "I64";
      for (int64_t v : attr.getValues<int64_t>())
        bytes.append(reinterpret_cast<const char *>(&v), 8);
    } else if (elt.isInteger(32)) {
      dtype = "I32";
      for (int32_t v : attr.getValues<int32_t>())
        bytes.append(reinterpret_cast<const char *>(&v), 4);
    } else {
      return module.emitError() << "constant of element type " << elt << " cannot be emitted";
    }
    add(name, dtype, shape, bytes);
  }
  std::string headerText;
  llvm::raw_string_ostream hs(headerText);
  hs << json::Value(std::move(header));
  while (headerText.size() % 8)
    headerText.push_back(' ');
  uint64_t n = headerText.size();
  blob.assign(reinterpret_cast<const char *>(&n), 8);
  blob += headerText;
  blob += data;
  return success();
}

} // namespace pipemesh::plan::detail
