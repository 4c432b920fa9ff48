//===- ONNXImporter.h - ONNX model -> pmesh IR ------------------*- C++ -*-===//
//
// Reads an ONNX model (binary protobuf, optionally with external data, or the
// ONNX text syntax) and produces a module holding `pmesh.param` symbols and a
// `func.func @forward` with static shapes. Shape plumbing is folded at import
// time once the dynamic dims are bound; decomposed patterns are left for the
// `pmesh-raise` pass. Errors are reported as MLIR diagnostics whose location
// names the ONNX node (name, op type, domain, opset).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_IMPORT_ONNXIMPORTER_H
#define PIPEMESH_IMPORT_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>
#include <optional>
#include <string>

namespace pipemesh {

enum class TieEmbeddings { Auto, On, Off };

struct ImportOptions {
  /// Binds symbolic dim 0 / dim 1 of graph inputs (unless named in `dims`).
  std::optional<int64_t> batch;
  std::optional<int64_t> seq;
  /// Binds symbolic dims by name (`--dim NAME=VALUE`).
  std::map<std::string, int64_t> dims;
  /// Restores the tie between the token embedding and an output head that
  /// constant folding stored as its transposed copy.
  TieEmbeddings tieEmbeddings = TieEmbeddings::Auto;
  /// Initializers stored as external data need not exist (shape-only models).
  bool shapesOnly = false;
  /// Float initializers whose whole name matches this regex are constants,
  /// not trained parameters: the buffers an exporter stores as initializers
  /// (rotary tables, inv_freq). Empty: none.
  std::string constantInitializers;
  /// Float initializers whose whole name matches this regex are trained even
  /// where their use marks them a buffer (a table only multiplied into
  /// activations, see lib/Import/BufferInitializers.h). Empty: none.
  std::string trainableInitializers;
  /// A graph input named attention_mask is the constant 1 everywhere (what a
  /// plan feeds it: a training window has no padding), so the masks computed
  /// from it fold. Set when compiling a plan; a plain import keeps it an input.
  bool attentionMaskOnes = false;
  /// Model-local functions are inlined into at most this many nodes (calls
  /// nested n deep, each calling twice, make 2^n). The default bounds what a
  /// few kilobytes of nested calls can cost at about 10 s; the fuzzer, whose
  /// sanitizers run the importer ~10x slower, sets less.
  size_t maxInlinedNodes = 200'000;
};

/// Imports `path` (`.onnx` binary or `.onnxtxt` text). Returns null after
/// emitting diagnostics on failure.
mlir::OwningOpRef<mlir::ModuleOp> importONNXFile(llvm::StringRef path,
                                                 const ImportOptions &options,
                                                 mlir::MLIRContext *context);

/// Imports from an in-memory buffer (used by the fuzzer). `isText` selects the
/// ONNX text syntax; `baseDir` resolves external data.
mlir::OwningOpRef<mlir::ModuleOp> importONNXBuffer(llvm::StringRef bytes, bool isText,
                                                   llvm::StringRef sourceName,
                                                   llvm::StringRef baseDir,
                                                   const ImportOptions &options,
                                                   mlir::MLIRContext *context);

/// Reads initializer values (float32) from an ONNX model, for writing the
/// initial weights of a plan. Parameters never pass through the IR.
class ONNXWeightReader {
public:
  virtual ~ONNXWeightReader() = default;
  /// Opens `path` (binary or text ONNX); null with `why` on failure.
  static std::unique_ptr<ONNXWeightReader> open(llvm::StringRef path, std::string &why);
  /// Values of initializer `name` (external data included); false with `why`.
  virtual bool readFloat32(llvm::StringRef name, std::vector<float> &values,
                           std::string &why) = 0;
};

} // namespace pipemesh

#endif // PIPEMESH_IMPORT_ONNXIMPORTER_H
