//===- ONNXModelLoader.cpp - reading ONNX files and tensor data -------------===//
#include "ONNXModelLoader.h"

#include "pipemesh/runtime/Half.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/defs/parser.h>

#include <cstring>
#include <fstream>

namespace pipemesh::onnximport {

std::string nodeLabel(const onnx::NodeProto &node, int index) {
  if (!node.name().empty())
    return node.name();
  if (node.output_size() > 0 && !node.output(0).empty())
    return "#" + std::to_string(index) + " -> " + node.output(0);
  return "#" + std::to_string(index);
}

bool parseModel(llvm::StringRef bytes, bool isText, onnx::ModelProto &model, std::string &why) {
  if (isText) {
    std::string text = bytes.str(); // the parser wants a NUL-terminated string
    try {
      onnx::OnnxParser parser(text.c_str());
      auto status = parser.Parse(model);
      if (!status.IsOK()) {
        why = "malformed ONNX text: " + status.ErrorMessage();
        return false;
      }
    } catch (const std::exception &e) {
      why = std::string("malformed ONNX text: ") + e.what();
      return false;
    }
  } else {
    google::protobuf::io::CodedInputStream stream(
        reinterpret_cast<const uint8_t *>(bytes.data()), (int)std::min<size_t>(bytes.size(), INT32_MAX));
    stream.SetTotalBytesLimit(INT32_MAX);
    if (bytes.size() > INT32_MAX) {
      why = "model file is larger than 2 GiB: store the weights as external data";
      return false;
    }
    if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
      why = "not an ONNX model, or a truncated/corrupt protobuf";
      return false;
    }
  }
  if (!model.has_graph()) {
    why = "not an ONNX model: it has no graph";
    return false;
  }
  if (model.opset_import_size() == 0 && !isText) {
    why = "not an ONNX model: it has no opset_import";
    return false;
  }
  return true;
}

bool isExternal(const onnx::TensorProto &t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL;
}

bool externalRef(const onnx::TensorProto &t, llvm::StringRef baseDir, ExternalRef &ref,
                 std::string &why) {
  std::string location;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset" || kv.key() == "length") {
      char *end = nullptr;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end || v < 0) {
        why = "initializer '" + t.name() + "': bad external data " + kv.key() + " '" +
              kv.value() + "'";
        return false;
      }
      (kv.key() == "offset" ? ref.offset : ref.length) = v;
    }
  }
  if (location.empty()) {
    why = "initializer '" + t.name() + "' is stored externally but names no location";
    return false;
  }
  llvm::SmallString<256> path(baseDir);
  llvm::sys::path::append(path, location);
  ref.path = std::string(path);
  return true;
}

static int64_t elementSize(DType t) {
  switch (t) {
  case DType::F64: case DType::I64: case DType::U64: return 8;
  case DType::F32: case DType::I32: case DType::U32: return 4;
  case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
  default: return 1;
  }
}

/// The byte size of a tensor's data from its dims and element type, without
/// overflow.
static bool tensorBytes(const onnx::TensorProto &t, int64_t &bytes, std::string &why) {
  bytes = elementSize((DType)t.data_type());
  for (int64_t d : t.dims())
    if (d < 0 || llvm::MulOverflow(bytes, d, bytes)) {
      why = "tensor '" + t.name() + "' has a negative or too large shape";
      return false;
    }
  return true;
}

bool checkExternalData(const onnx::TensorProto &t, llvm::StringRef baseDir, std::string &why) {
  ExternalRef ref;
  if (!externalRef(t, baseDir, ref, why))
    return false;
  uint64_t size;
  if (llvm::sys::fs::file_size(ref.path, size)) {
    why = "initializer '" + t.name() + "': external data file '" + ref.path + "' is missing";
    // models/gen_gpt2.py --shapes-only names the file it never writes so.
    if (llvm::StringRef(ref.path).ends_with(".shapes-only.data"))
      why += " (a shapes-only model: compile it with shapes-only=true to plan and simulate "
             "without weights)";
    return false;
  }
  int64_t bytes, end;
  if (!tensorBytes(t, bytes, why))
    return false;
  if (ref.length >= 0 && ref.length < bytes) {
    why = "initializer '" + t.name() + "': external data length " + std::to_string(ref.length) +
          " is shorter than the " + std::to_string(bytes) + " bytes of its shape";
    return false;
  }
  if (llvm::AddOverflow(ref.offset, bytes, end) || (int64_t)size < end) {
    why = "initializer '" + t.name() + "': external data file '" + ref.path + "' has " +
          std::to_string(size) + " bytes, needs " +
          (end < 0 ? std::string("more") : std::to_string(end));
    return false;
  }
  return true;
}

/// The tensor's little-endian bytes, from raw_data or external data; empty
/// `bytes` with a true result means the values are in the typed fields.
static bool rawBytes(const onnx::TensorProto &t, llvm::StringRef baseDir, int64_t expect,
                     std::string &bytes, std::string &why) {
  if (isExternal(t)) {
    if (!checkExternalData(t, baseDir, why))
      return false;
    ExternalRef ref;
    externalRef(t, baseDir, ref, why);
    std::ifstream in(ref.path, std::ios::binary);
    in.seekg(ref.offset);
    bytes.resize(expect);
    in.read(bytes.data(), expect);
    if (!in) {
      why = "initializer '" + t.name() + "': cannot read external data from '" + ref.path + "'";
      return false;
    }
    return true;
  }
  if (t.has_raw_data()) {
    if ((int64_t)t.raw_data().size() != expect) {
      why = "tensor '" + t.name() + "' has " + std::to_string(t.raw_data().size()) +
            " bytes of raw data, expected " + std::to_string(expect);
      return false;
    }
    bytes = t.raw_data();
  }
  return true;
}

static float bf16ToFloat(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Decodes element k of a little-endian buffer of type `dt`.
static double decodeFloat(DType dt, const char *p) {
  switch (dt) {
  case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
  case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
  case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return rt::halfToFloat(v); }
  case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16ToFloat(v); }
  default: return 0;
  }
}

static int64_t decodeInt(DType dt, const char *p) {
  switch (dt) {
  case DType::I64: case DType::U64: { int64_t v; std::memcpy(&v, p, 8); return v; }
  case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::U32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
  case DType::U16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
  case DType::I8: return (int8_t)*p;
  case DType::U8: return (uint8_t)*p;
  case DType::Bool: return *p != 0;
  default: return 0;
  }
}

bool readTensor(const onnx::TensorProto &t, llvm::StringRef baseDir, ConstTensor &out,
                std::string &why) {
  DType dt = (DType)t.data_type();
  if (!isSupportedType(dt)) {
    why = "tensor '" + t.name() + "' has unsupported element type " + std::to_string((int)dt);
    return false;
  }
  shapes::Shape shape;
  for (int64_t d : t.dims()) {
    if (d < 0) {
      why = "tensor '" + t.name() + "' has a negative dim";
      return false;
    }
    shape.push_back(d);
  }
  auto numel = shapes::checkedNumElements(shape);
  int64_t n = numel ? *numel : -1;
  // Values are held as 8-byte host elements: 1 GiB at most.
  if (!numel || n > (int64_t)1 << 27) {
    why = "tensor '" + t.name() + "' is too large to fold at import time";
    return false;
  }
  out = ConstTensor::zeros(dt, shape);
  std::string bytes;
  if (!rawBytes(t, baseDir, n * elementSize(dt), bytes, why))
    return false;
  if (!bytes.empty() || n == 0) {
    int64_t es = elementSize(dt);
    for (int64_t k = 0; k < n; ++k) {
      const char *p = bytes.data() + k * es;
      if (out.isFloat())
        out.f[k] = decodeFloat(dt, p);
      else
        out.i[k] = decodeInt(dt, p);
    }
    return true;
  }
  // Typed fields: which one depends on the element type (see onnx.proto).
  auto mismatch = [&](int64_t have) {
    why = "tensor '" + t.name() + "' has " + std::to_string(have) + " values for " +
          std::to_string(n) + " elements";
    return false;
  };
  switch (dt) {
  case DType::F32:
    if (t.float_data_size() != n)
      return mismatch(t.float_data_size());
    for (int64_t k = 0; k < n; ++k)
      out.f[k] = t.float_data(k);
    return true;
  case DType::F64:
    if (t.double_data_size() != n)
      return mismatch(t.double_data_size());
    for (int64_t k = 0; k < n; ++k)
      out.f[k] = t.double_data(k);
    return true;
  case DType::I64:
    if (t.int64_data_size() != n)
      return mismatch(t.int64_data_size());
    for (int64_t k = 0; k < n; ++k)
      out.i[k] = t.int64_data(k);
    return true;
  case DType::U32: case DType::U64:
    if (t.uint64_data_size() != n)
      return mismatch(t.uint64_data_size());
    for (int64_t k = 0; k < n; ++k)
      out.i[k] = (int64_t)t.uint64_data(k);
    return true;
  default: // int32_data carries the narrow types, and f16/bf16 as bit patterns
    if (t.int32_data_size() != n)
      return mismatch(t.int32_data_size());
    for (int64_t k = 0; k < n; ++k) {
      int32_t v = t.int32_data(k);
      if (dt == DType::F16)
        out.f[k] = rt::halfToFloat((uint16_t)v);
      else if (dt == DType::BF16)
        out.f[k] = bf16ToFloat((uint16_t)v);
      else
        out.setInt(k, v);
    }
    return true;
  }
}

bool readFloat32(const onnx::TensorProto &t, llvm::StringRef baseDir, std::vector<float> &out,
                 std::string &why) {
  DType dt = (DType)t.data_type();
  if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16 && dt != DType::F64) {
    why = "tensor '" + t.name() + "' is not a float tensor";
    return false;
  }
  int64_t nbytes;
  if (!tensorBytes(t, nbytes, why))
    return false;
  int64_t es = elementSize(dt), n = nbytes / es;
  std::string bytes;
  if (!rawBytes(t, baseDir, nbytes, bytes, why))
    return false;
  out.resize(n);
  if (!bytes.empty() || n == 0) {
    if (dt == DType::F32)
      std::memcpy(out.data(), bytes.data(), n * 4);
    else // a half, bfloat16 or double export: float32 masters from its values
      for (int64_t k = 0; k < n; ++k)
        out[k] = (float)decodeFloat(dt, bytes.data() + k * es);
    return true;
  }
  // Typed fields: float_data, double_data, or float16/bfloat16 bit patterns
  // in int32_data.
  int64_t have = dt == DType::F32   ? t.float_data_size()
                 : dt == DType::F64 ? t.double_data_size()
                                    : t.int32_data_size();
  if (have != n) {
    why = "tensor '" + t.name() + "' has " + std::to_string(have) + " values for " +
          std::to_string(n) + " elements";
    return false;
  }
  for (int64_t k = 0; k < n; ++k)
    out[k] = dt == DType::F32   ? t.float_data(k)
             : dt == DType::F64 ? (float)t.double_data(k)
             : dt == DType::F16 ? rt::halfToFloat((uint16_t)t.int32_data(k))
                                : bf16ToFloat((uint16_t)t.int32_data(k));
  return true;
}

} // namespace pipemesh::onnximport
