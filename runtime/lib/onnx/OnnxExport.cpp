//===- OnnxExport.cpp - trained weights back into the ONNX model ------------===//
#include "pipemesh/runtime/OnnxExport.h"

#include "pipemesh/runtime/Bf16.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Half.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx-ml.pb.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;

namespace pipemesh::rt {
namespace {

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("--export-onnx: cannot read the source model '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

onnx::ModelProto loadModel(const std::string &path) {
  onnx::ModelProto model;
  std::string bytes = readFile(path);
  if (path.size() >= 8 && path.compare(path.size() - 8, 8, ".onnxtxt") == 0) {
    onnx::OnnxParser parser(bytes.c_str());
    auto status = parser.Parse(model);
    if (!status.IsOK())
      fail("--export-onnx: source model '", path,
           "' is malformed ONNX text: ", status.ErrorMessage());
    return model;
  }
  if (bytes.size() > INT32_MAX)
    fail("--export-onnx: source model '", path, "' is larger than 2 GiB");
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t *>(bytes.data()),
                                                (int)bytes.size());
  stream.SetTotalBytesLimit(INT32_MAX);
  if (!model.ParseFromCodedStream(&stream) || !model.has_graph())
    fail("--export-onnx: '", path, "' is not an ONNX model");
  return model;
}

/// Replaces external data by inline raw_data (read relative to baseDir).
void inlineExternalData(onnx::TensorProto &t, const fs::path &baseDir) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL)
    return;
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      location = kv.value();
    else if (kv.key() == "offset")
      offset = std::stoll(kv.value());
    else if (kv.key() == "length")
      length = std::stoll(kv.value());
  }
  if (length < 0) {
    int64_t n = 1;
    for (int64_t d : t.dims())
      n *= d;
    int es =
        t.data_type() == onnx::TensorProto::DOUBLE || t.data_type() == onnx::TensorProto::INT64  ? 8
        : t.data_type() == onnx::TensorProto::FLOAT || t.data_type() == onnx::TensorProto::INT32 ? 4
        : t.data_type() == onnx::TensorProto::FLOAT16 ||
                t.data_type() == onnx::TensorProto::BFLOAT16
            ? 2
            : 1;
    length = n * es;
  }
  fs::path file = baseDir / location;
  std::ifstream in(file, std::ios::binary);
  std::string bytes((size_t)length, '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in)
    fail("--export-onnx: cannot read external data of initializer '", t.name(), "' from '",
         file.string(), "'");
  t.clear_external_data();
  t.set_data_location(onnx::TensorProto::DEFAULT);
  t.set_raw_data(std::move(bytes));
}

/// The float values of an initializer (raw_data or float_data).
/// The float types a trained parameter can be written back as: a model
/// exported in half or bfloat16 precision keeps it (its graph computes in it).
bool isWritableFloat(const onnx::TensorProto &t) {
  return !t.has_data_type() || t.data_type() == onnx::TensorProto::UNDEFINED ||
         t.data_type() == onnx::TensorProto::FLOAT ||
         t.data_type() == onnx::TensorProto::BFLOAT16 ||
         t.data_type() == onnx::TensorProto::FLOAT16 ||
         t.data_type() == onnx::TensorProto::DOUBLE;
}

std::vector<float> floats(const onnx::TensorProto &t) {
  std::vector<float> v;
  bool narrow = t.data_type() == onnx::TensorProto::BFLOAT16 ||
                t.data_type() == onnx::TensorProto::FLOAT16;
  auto widen = [&](uint16_t bits) {
    return t.data_type() == onnx::TensorProto::BFLOAT16 ? bf16ToFloat(bits) : halfToFloat(bits);
  };
  if (narrow && t.has_raw_data()) {
    v.resize(t.raw_data().size() / 2);
    for (size_t k = 0; k < v.size(); ++k) {
      uint16_t bits;
      std::memcpy(&bits, t.raw_data().data() + 2 * k, 2);
      v[k] = widen(bits);
    }
  } else if (narrow) { // bit patterns in int32_data
    for (int32_t bits : t.int32_data())
      v.push_back(widen((uint16_t)bits));
  } else if (t.data_type() == onnx::TensorProto::DOUBLE && t.has_raw_data()) {
    v.resize(t.raw_data().size() / 8);
    for (size_t k = 0; k < v.size(); ++k) {
      double d;
      std::memcpy(&d, t.raw_data().data() + 8 * k, 8);
      v[k] = (float)d;
    }
  } else if (t.data_type() == onnx::TensorProto::DOUBLE) {
    v.assign(t.double_data().begin(), t.double_data().end());
  } else if (t.has_raw_data()) {
    v.resize(t.raw_data().size() / 4);
    std::memcpy(v.data(), t.raw_data().data(), v.size() * 4);
  } else {
    v.assign(t.float_data().begin(), t.float_data().end());
  }
  return v;
}

/// Writes `data` into `t` in `t`'s own float type (float32 unless it is a
/// bfloat16 or float16 initializer, rounded to nearest even, or a float64 one).
void setFloats(onnx::TensorProto &t, const float *data, const Dims &shape) {
  int type = t.data_type();
  t.clear_dims();
  for (int64_t d : shape)
    t.add_dims(d);
  t.clear_float_data();
  t.clear_int32_data();
  int64_t n = numElements(shape);
  if (type == onnx::TensorProto::BFLOAT16 || type == onnx::TensorProto::FLOAT16) {
    std::string raw((size_t)(2 * n), '\0');
    for (int64_t k = 0; k < n; ++k) {
      uint16_t bits = type == onnx::TensorProto::BFLOAT16 ? floatToBf16(data[k])
                                                          : floatToHalf(data[k]);
      std::memcpy(&raw[2 * k], &bits, 2);
    }
    t.set_raw_data(std::move(raw));
    return;
  }
  if (type == onnx::TensorProto::DOUBLE) {
    t.clear_double_data();
    std::string raw((size_t)(8 * n), '\0');
    for (int64_t k = 0; k < n; ++k) {
      double d = data[k];
      std::memcpy(&raw[8 * k], &d, 8);
    }
    t.set_raw_data(std::move(raw));
    return;
  }
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.set_raw_data(std::string(reinterpret_cast<const char *>(data), n * 4));
}

Dims dimsOf(const onnx::TensorProto &t) { return Dims(t.dims().begin(), t.dims().end()); }

std::vector<float> transposed(const float *x, int64_t rows, int64_t cols) {
  std::vector<float> y((size_t)(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[c * rows + r] = x[r * cols + c];
  return y;
}

} // namespace

std::string resolveModelSource(const std::string &source, const std::string &planPath) {
  if (source.empty())
    fail("--export-onnx: the plan names no source model (model.source); pass --onnx-source");
  std::error_code ec;
  if (fs::is_regular_file(source, ec))
    return source;
  // pipemesh-opt records an absolute path: a plan and its model moved
  // together are found by the model's file name beside the plan.
  const fs::path beside = fs::path(planPath).parent_path() /
                          (fs::path(source).is_absolute() ? fs::path(source).filename()
                                                          : fs::path(source));
  if (fs::is_regular_file(beside, ec))
    return beside.string();
  fail("--export-onnx: the plan's source model '", source, "' does not exist (nor does '",
       beside.string(), "' beside the plan); pass --onnx-source PATH");
}

std::string checkModelSource(const std::string &onnxSource, const std::string &planSource,
                             const std::string &planPath) {
  if (onnxSource.empty())
    return resolveModelSource(planSource, planPath);
  std::error_code ec;
  if (!fs::is_regular_file(onnxSource, ec))
    fail("--onnx-source '", onnxSource, "' is not a file");
  return onnxSource;
}

ExportSummary exportOnnx(const std::string &sourceModel, const std::string &out,
                         const std::vector<ExportParam> &params) {
  ExportSummary sum;
  onnx::ModelProto model = loadModel(sourceModel);
  onnx::GraphProto *g = model.mutable_graph();
  fs::path baseDir = fs::path(sourceModel).parent_path();
  std::map<std::string, onnx::TensorProto *> inits;
  for (auto &t : *g->mutable_initializer()) {
    inlineExternalData(t, baseDir);
    inits[t.name()] = &t;
  }
  // Original values of every 2-D parameter, to recognize transposed copies.
  std::map<std::string, std::vector<float>> original;
  for (const ExportParam &p : params)
    if (p.shape.size() == 2 && inits.count(p.source))
      original[p.name] = floats(*inits[p.source]);

  std::set<std::string> targets; // initializers holding trained values
  std::set<std::string> claimedSources;
  for (const ExportParam &p : params)
    if (inits.count(p.name))
      claimedSources.insert(p.name);
  std::set<int> removeNodes;
  for (const ExportParam &p : params) {
    onnx::TensorProto *t = nullptr;
    if (inits.count(p.name)) {
      t = inits[p.name];
      ++sum.written;
    } else {
      int identity = -1;
      for (int i = 0; i < g->node_size(); ++i) {
        const auto &n = g->node(i);
        if (n.op_type() == "Identity" && n.output_size() == 1 && n.output(0) == p.name &&
            n.input_size() == 1)
          identity = i;
      }
      if (identity >= 0) {
        removeNodes.insert(identity);
        // The split copy keeps the type of what the Identity read (a bfloat16
        // model's graph computes in bfloat16).
        auto from = inits.find(g->node(identity).input(0));
        int type = from != inits.end() && from->second->data_type()
                       ? from->second->data_type()
                       : (int)onnx::TensorProto::FLOAT;
        t = g->add_initializer();
        t->set_name(p.name);
        t->set_data_type(type);
        inits[p.name] = t;
        if (model.ir_version() < 4) {
          auto *vi = g->add_input();
          vi->set_name(p.name);
          auto *tt = vi->mutable_type()->mutable_tensor_type();
          tt->set_elem_type(type);
          for (int64_t d : p.shape)
            tt->mutable_shape()->add_dim()->set_dim_value(d);
        }
        ++sum.split;
      } else if (inits.count(p.source) && !claimedSources.count(p.source)) {
        t = inits[p.source];
        claimedSources.insert(p.source);
        ++sum.written;
      } else {
        fail("--export-onnx: parameter '", p.name, "' (initializer '", p.source,
             "') matches no initializer and no Identity of one in '", sourceModel, "'");
      }
    }
    if (!isWritableFloat(*t))
      fail("--export-onnx: initializer '", t->name(), "' is not a float tensor");
    if (t->dims_size() && numElements(dimsOf(*t)) != numElements(p.shape))
      fail("--export-onnx: initializer '", t->name(), "' has shape ", shapeStr(dimsOf(*t)),
           " but parameter '", p.name, "' has shape ", shapeStr(p.shape));
    setFloats(*t, p.data, p.shape);
    targets.insert(t->name());
  }
  if (!removeNodes.empty()) {
    auto *nodes = g->mutable_node();
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (int i = 0; i < nodes->size(); ++i)
      if (!removeNodes.count(i))
        *kept.Add() = nodes->Get(i);
    nodes->Swap(&kept);
  }

  // Transposed copies: named by the plan, or recognized by their values.
  for (const ExportParam &p : params) {
    if (p.shape.size() != 2)
      continue;
    int64_t R = p.shape[0], C = p.shape[1];
    std::vector<float> trainedT;
    auto write = [&](onnx::TensorProto &t) {
      if (trainedT.empty())
        trainedT = transposed(p.data, R, C);
      setFloats(t, trainedT.data(), {C, R});
      targets.insert(t.name());
      ++sum.transposed;
    };
    for (const std::string &name : p.transposedCopies) {
      if (!inits.count(name))
        fail("--export-onnx: transposed copy '", name, "' of parameter '", p.name,
             "' is not an initializer of '", sourceModel, "'");
      write(*inits[name]);
    }
    auto orig = original.find(p.name);
    if (orig == original.end() || (int64_t)orig->second.size() != R * C)
      continue;
    for (auto &[name, t] : inits) {
      if (targets.count(name) || t->dims_size() != 2 || t->dims(0) != C || t->dims(1) != R ||
          !isWritableFloat(*t))
        continue;
      std::vector<float> v = floats(*t);
      if ((int64_t)v.size() != R * C)
        continue;
      bool equal = true;
      for (int64_t r = 0; r < R && equal; ++r)
        for (int64_t c = 0; c < C; ++c)
          if (v[c * R + r] != orig->second[r * C + c]) {
            equal = false;
            break;
          }
      if (equal)
        write(*t);
    }
  }

  // Protobuf cannot serialize 2 GiB: move the initializers to external data.
  // (PIPEMESH_ONNX_INLINE_LIMIT lowers the threshold, for tests.)
  size_t limit = (size_t)INT32_MAX - (64u << 20);
  if (const char *env = std::getenv("PIPEMESH_ONNX_INLINE_LIMIT"))
    limit = std::min<size_t>(limit, std::strtoull(env, nullptr, 10));
  std::string dataName = fs::path(out).filename().string() + ".data";
  // Both files are written beside their paths and renamed over them at the
  // end: a failed export (a full disk) leaves what was there, which may be
  // the source model itself, as it was.
  auto tmpOf = [](const fs::path &p) { return fs::path(p.string() + ".tmp"); };
  fs::path dataPath;
  struct RemoveTemps { // on a failure (fail() throws), no temp file stays behind
    std::vector<fs::path> paths;
    ~RemoveTemps() {
      std::error_code ignored;
      for (const fs::path &p : paths)
        fs::remove(p, ignored);
    }
  } temps{{tmpOf(out)}};
  if (model.ByteSizeLong() > limit) {
    sum.externalData = true;
    dataPath = fs::path(out).parent_path() / dataName;
    temps.paths.push_back(tmpOf(dataPath));
    std::ofstream data(tmpOf(dataPath), std::ios::binary | std::ios::trunc);
    if (!data)
      fail("--export-onnx: cannot write '", dataPath.string(), "'");
    uint64_t offset = 0;
    for (auto &t : *g->mutable_initializer()) {
      if (!t.has_raw_data() || t.raw_data().size() < 1024)
        continue;
      uint64_t pad = (4096 - offset % 4096) % 4096;
      data.write(std::string(pad, '\0').data(), (std::streamsize)pad);
      offset += pad;
      const std::string &raw = t.raw_data();
      data.write(raw.data(), (std::streamsize)raw.size());
      auto add = [&](const char *k, const std::string &v) {
        auto *e = t.add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", dataName);
      add("offset", std::to_string(offset));
      add("length", std::to_string(raw.size()));
      offset += raw.size();
      t.clear_raw_data();
      t.set_data_location(onnx::TensorProto::EXTERNAL);
    }
    if (!data.flush())
      fail("--export-onnx: cannot write '", dataPath.string(), "'");
  }
  {
    std::ofstream o(tmpOf(out), std::ios::binary | std::ios::trunc);
    if (!o || !model.SerializeToOstream(&o) || !o.flush())
      fail("--export-onnx: cannot write '", out, "'");
  }
  std::error_code ec;
  if (!dataPath.empty())
    fs::rename(tmpOf(dataPath), dataPath, ec);
  if (!ec)
    fs::rename(tmpOf(out), out, ec);
  if (ec)
    fail("--export-onnx: cannot write '", out, "': ", ec.message());
  return sum;
}

} // namespace pipemesh::rt
