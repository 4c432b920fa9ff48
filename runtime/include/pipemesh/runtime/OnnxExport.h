//===- OnnxExport.h - trained weights back into the ONNX model --*- C++ -*-===//
//
// --export-onnx OUT.onnx: a copy of the plan's source model (model.source)
// with every parameter's initializer replaced by its trained values:
//  - a parameter whose name is an initializer writes that initializer;
//  - a parameter that an exporter deduplicated behind `Identity(source)`
//    (its name is the Identity's output) gets its own initializer under its
//    own name and the Identity node is removed, since the parameters trained
//    apart;
//  - an initializer holding a parameter transposed (the folded copy of a
//    tied embedding that the importer re-tied) is rewritten transposed: those
//    named in the plan (params[].transposed_copies) and any 2-D initializer
//    whose original values are exactly the transpose of a parameter's.
// External data of the source is read and written back inline; when the
// result would pass protobuf's 2 GiB limit, initializers are written as
// external data to OUT.onnx.data instead. Links protobuf and onnx only.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_ONNXEXPORT_H
#define PIPEMESH_RUNTIME_ONNXEXPORT_H

#include "pipemesh/runtime/DType.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pipemesh::rt {

struct ExportParam {
  std::string name, source;
  Dims shape;
  const float *data;
  std::vector<std::string> transposedCopies;
};

struct ExportSummary {
  int written = 0;    ///< initializers overwritten in place
  int split = 0;      ///< Identity-deduplicated parameters given their own initializer
  int transposed = 0; ///< transposed copies rewritten
  bool externalData = false;
};

/// Writes `out` from `sourceModel` (binary .onnx or ONNX text .onnxtxt).
ExportSummary exportOnnx(const std::string &sourceModel, const std::string &out,
                         const std::vector<ExportParam> &params);

/// Finds the plan's source model: `source` as given, else beside the plan
/// file (a relative `source` from the plan's directory, an absolute one by
/// its file name). Error naming both candidates when neither exists.
std::string resolveModelSource(const std::string &source, const std::string &planPath);

/// The model --export-onnx reads: `onnxSource` (--onnx-source) when given,
/// which must be a file, else resolveModelSource. pipemesh-run calls it
/// before training, so that a missing model fails the run at its start.
std::string checkModelSource(const std::string &onnxSource, const std::string &planSource,
                             const std::string &planPath);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_ONNXEXPORT_H
