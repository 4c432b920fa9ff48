//===- fuzz_import.cpp - libFuzzer target for the ONNX importer ------------===//
//
// Feeds arbitrary bytes to the importer as a binary ONNX model (or, when the
// input starts with '<', as ONNX text), and what imports to pmesh-raise, as
// pipemesh-opt does (the raise decodes constant masks and rewrites attention
// chains the fuzzer can shape). Any outcome but a clean import or a
// diagnostic - a crash, an assertion, a sanitizer report - is a bug.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Import/ONNXImporter.h"
#include "pipemesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::MLIRContext *context = [] {
    auto *ctx = new mlir::MLIRContext();
    ctx->loadDialect<pipemesh::pmesh::PMeshDialect, mlir::func::FuncDialect>();
    // Diagnostics are the expected outcome for bad input: swallow them.
    ctx->getDiagEngine().registerHandler([](mlir::Diagnostic &) {});
    return ctx;
  }();
  pipemesh::ImportOptions options;
  options.batch = 2;
  options.seq = 8;
  // Shape-only imports run the whole importer without weight files, so the
  // small shapes-only GPT fixtures make deep seeds.
  options.shapesOnly = true;
  // Nested local functions may legitimately inline into 200,000 nodes, about
  // 3 s here but past the fuzzer's 20 s timeout under its sanitizers: a tenth
  // of that keeps every input well inside it, so a timeout is a real hang.
  options.maxInlinedNodes = 20'000;
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  bool isText = !bytes.empty() && bytes.front() == '<';
  // External data resolves against a directory that holds no files, so
  // fuzzed locations can only ever name missing files.
  auto module = pipemesh::importONNXBuffer(bytes, isText, "fuzz.onnx", "/nonexistent-fuzz-dir",
                                           options, context);
  if (module) {
    mlir::PassManager pm(context);
    pm.addPass(pipemesh::createPMeshRaise());
    (void)pm.run(*module);
  }
  return 0;
}
