//===- pipemesh-opt.cpp - the PipeMesh compiler driver ----------------------===//
//
// An mlir-opt style driver that also accepts ONNX models: `.onnx` and
// `.onnxtxt` inputs are imported (and raised, unless --no-raise) before the
// usual pass pipeline from the command line runs.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Import/ONNXImporter.h"
#include "pipemesh/Plan/Passes.h"
#include "pipemesh/Plan/Plan.h"
#include "pipemesh/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace mlir;
using namespace llvm;

namespace {

/// Writes the output through `write` into a temporary file beside its path,
/// renamed over it only when `write` succeeds (llvm::writeToOutput): a failed
/// compile leaves what was there (a plan compiled earlier) as it was, and
/// never a partial file. "-" is stdout. `write` reports its own errors.
int writeOutput(StringRef path, llvm::function_ref<LogicalResult(raw_ostream &)> write) {
  bool writeFailed = false; // and reported
  Error e = writeToOutput(path, [&](raw_ostream &os) -> Error {
    writeFailed = failed(write(os));
    return writeFailed ? createStringError(inconvertibleErrorCode(), "not written")
                       : Error::success();
  });
  if (!e)
    return 0;
  if (writeFailed)
    consumeError(std::move(e));
  else
    errs() << "error: cannot write " << toString(std::move(e)) << "\n"; // names the path
  return 1;
}

cl::OptionCategory importCategory("ONNX import options");

cl::opt<int64_t> batchOpt("batch", cl::desc("Bind symbolic dim 0 of graph inputs"),
                          cl::init(-1), cl::cat(importCategory));
cl::opt<int64_t> seqOpt("seq", cl::desc("Bind symbolic dim 1 of graph inputs"), cl::init(-1),
                        cl::cat(importCategory));
cl::list<std::string> dimOpts("dim", cl::desc("Bind a symbolic dim by name: NAME=VALUE"),
                              cl::cat(importCategory));
cl::opt<std::string> tieOpt("tie-embeddings",
                            cl::desc("Restore a tied output head stored as a transposed copy "
                                     "of the token embedding: auto|on|off"),
                            cl::init("auto"), cl::cat(importCategory));
cl::opt<bool> noRaiseOpt("no-raise",
                         cl::desc("Import without raising decomposed patterns to fused ops"),
                         cl::init(false), cl::cat(importCategory));
cl::opt<std::string> constantInitializersOpt(
    "constant-initializers",
    cl::desc("Float initializers whose name matches this regex are constants, not trained "
             "parameters (buffers an exporter stored as initializers: rotary tables)"),
    cl::value_desc("REGEX"), cl::cat(importCategory));
cl::opt<std::string> trainableInitializersOpt(
    "trainable-initializers",
    cl::desc("Float initializers whose name matches this regex are trained parameters even "
             "where the importer takes them for buffers (a table only multiplied into "
             "activations)"),
    cl::value_desc("REGEX"), cl::cat(importCategory));
cl::opt<bool> shapesOnlyOpt("shapes-only",
                            cl::desc("Do not require external weight data to exist"),
                            cl::init(false), cl::cat(importCategory));

cl::OptionCategory compileCategory("Compiling a plan");
cl::opt<std::string> compileOpt(
    "pipemesh-compile",
    cl::desc("Run the whole pipeline and write a plan: \"batch=B seq=T [pp=1 dp=1 vpp=1 "
             "microbatches=M schedule=gpipe|1f1b|interleaved|elastic|bfs|zb-h1|zb-h2 group=N "
             "fwd-groups=a,b bwd-groups=c,d groups=auto defer-w=none|chunk|all|bucket "
             "zero=0|1|2|3|a,b,..|auto prefetch=N|auto recompute=none|selective|full|auto "
             "mem-limit=40GiB cluster=PRESET|FILE activations=f32|bf16 params=f32|bf16 "
             "grad-reduce=f32|bf16 layers-per-stage=a,b,... labels=auto|next|same "
             "shapes-only=false]\" (docs/pipemesh-opt.md)"),
    cl::init(""), cl::cat(compileCategory));
cl::opt<bool> explainOpt("explain",
                         cl::desc("With --pipemesh-compile: print the chosen plan's simulated "
                                  "step against the best plan of each other schedule "
                                  "(cluster=... picks the simulated cluster)"),
                         cl::init(false), cl::cat(compileCategory));
cl::opt<bool> printPlanOpt("print-plan", cl::desc("Print the input plan file as text"),
                           cl::init(false), cl::cat(compileCategory));

bool isONNXPath(StringRef path) { return path.ends_with(".onnx") || path.ends_with(".onnxtxt"); }

/// Parses the import flags; reports a bad flag value and returns nullopt.
std::optional<pipemesh::ImportOptions> importOptionsFromFlags() {
  pipemesh::ImportOptions opts;
  if (batchOpt != -1) {
    if (batchOpt <= 0) {
      errs() << "error: --batch must be positive, got " << batchOpt << "\n";
      return std::nullopt;
    }
    opts.batch = batchOpt;
  }
  if (seqOpt != -1) {
    if (seqOpt <= 0) {
      errs() << "error: --seq must be positive, got " << seqOpt << "\n";
      return std::nullopt;
    }
    opts.seq = seqOpt;
  }
  for (const std::string &d : dimOpts) {
    auto [name, value] = StringRef(d).split('=');
    int64_t v;
    if (name.empty() || value.getAsInteger(10, v) || v <= 0) {
      errs() << "error: --dim expects NAME=POSITIVE_INTEGER, got '" << d << "'\n";
      return std::nullopt;
    }
    opts.dims[name.str()] = v;
  }
  if (tieOpt == "auto")
    opts.tieEmbeddings = pipemesh::TieEmbeddings::Auto;
  else if (tieOpt == "on")
    opts.tieEmbeddings = pipemesh::TieEmbeddings::On;
  else if (tieOpt == "off")
    opts.tieEmbeddings = pipemesh::TieEmbeddings::Off;
  else {
    errs() << "error: --tie-embeddings must be auto, on or off, got '" << tieOpt << "'\n";
    return std::nullopt;
  }
  opts.shapesOnly = shapesOnlyOpt;
  opts.constantInitializers = constantInitializersOpt;
  opts.trainableInitializers = trainableInitializersOpt;
  return opts;
}

/// Imports (and raises) an ONNX model, returning it as MLIR text with
/// locations so that later diagnostics still name the ONNX node.
std::unique_ptr<MemoryBuffer> importToBuffer(StringRef path, DialectRegistry &registry) {
  auto opts = importOptionsFromFlags();
  if (!opts)
    return nullptr;
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = pipemesh::importONNXFile(path, *opts, &context);
  if (!module)
    return nullptr;
  if (!noRaiseOpt) {
    PassManager pm(&context);
    pm.addPass(pipemesh::createPMeshRaise());
    pm.addPass(createCSEPass());
    if (failed(pm.run(*module)))
      return nullptr;
  }
  std::string text;
  raw_string_ostream os(text);
  module->print(os, OpPrintingFlags().enableDebugInfo().printGenericOpForm(false));
  return MemoryBuffer::getMemBufferCopy(text, path);
}
/// --pipemesh-compile: import (or parse), raise, build the training step,
/// clean up, and write the plan to the output file.
int compileToPlan(StringRef inputFilename, StringRef outputFilename, DialectRegistry &registry) {
  pipemesh::plan::CompileOptions copts;
  std::string why;
  if (!pipemesh::plan::parseCompileOptions(compileOpt, copts, why)) {
    errs() << "error: --pipemesh-compile: " << why << "\n";
    return 1;
  }
  // The import flag says the same as the compile option: a plan without weights.
  copts.shapesOnly |= shapesOnlyOpt;
  if (outputFilename == "-") {
    errs() << "error: --pipemesh-compile writes a binary plan: give -o NAME.plan\n";
    return 1;
  }
  auto opts = importOptionsFromFlags();
  if (!opts)
    return 1;
  // batch and seq of the compile options bind the model's dynamic dims.
  opts->batch = copts.batch;
  opts->seq = copts.seq;
  opts->shapesOnly |= copts.shapesOnly;
  opts->attentionMaskOnes = true; // what the plan feeds it
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // A failing pass names its op by location; the whole module is no help.
  context.printOpOnDiagnostic(false);
  SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  OwningOpRef<ModuleOp> module;
  if (isONNXPath(inputFilename)) {
    module = pipemesh::importONNXFile(inputFilename, *opts, &context);
  } else {
    std::string errorMessage;
    auto file = openInputFile(inputFilename, &errorMessage);
    if (!file) {
      errs() << "error: " << errorMessage << "\n";
      return 1;
    }
    sourceMgr.AddNewSourceBuffer(std::move(file), SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  }
  if (!module)
    return 1;
  PassManager pm(&context);
  // A module that already has its @train_step (hand-written or staged by an
  // earlier run) is emitted as it is; otherwise: raise, partition into
  // pp * vpp chunks when there are several (unless @forward already carries
  // stages), build the training step.
  if (!module->lookupSymbol("train_step")) {
    pm.addPass(pipemesh::createPMeshRaise());
    int64_t chunks = copts.pp * copts.vpp;
    auto forward = module->lookupSymbol<func::FuncOp>("forward");
    bool staged = forward && llvm::any_of(forward.getOps(), [](Operation &op) {
                    return op.hasAttr("pmesh.stage");
                  });
    if (chunks > 1 && !staged) {
      if (!PassInfo::lookup("pmesh-partition")) {
        errs() << "error: pp * vpp = " << chunks
               << " pipeline chunks need the pmesh-partition pass, which this build lacks\n";
        return 1;
      }
      std::string pipeline = "pmesh-partition{stages=" + std::to_string(chunks) +
                             " ranks=" + std::to_string(copts.pp);
      // The layers are costed on the cluster's device when the plan names
      // one (the default, cpu, is the pass's own default).
      if (copts.cluster != pipemesh::plan::CompileOptions().cluster)
        pipeline += " cluster=\"" + copts.cluster + "\"";
      if (!copts.layersPerStage.empty()) {
        pipeline += " layers-per-stage=";
        for (auto [k, n] : llvm::enumerate(copts.layersPerStage))
          pipeline += (k ? "," : "") + std::to_string(n);
      }
      pipeline += "}";
      std::string message;
      raw_string_ostream ms(message);
      if (failed(parsePassPipeline(pipeline, pm, ms))) {
        errs() << "error: --pipemesh-compile: cannot run '" << pipeline << "': " << message
               << "\n";
        return 1;
      }
    }
    pm.addPass(pipemesh::createPMeshAutodiff());
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  if (failed(pm.run(*module)))
    return 1;
  copts.explain = explainOpt;
  return writeOutput(outputFilename, [&](raw_ostream &os) {
    return pipemesh::plan::emitPlan(*module, copts, os);
  });
}
} // namespace

/// The options registered so far that are not this tool's: LLVM's code
/// generation and target flags (AArch64, AMDGPU, ...), which the static
/// libraries register when they load and which mean nothing here. Hidden
/// from --help (--help-hidden still lists them); MLIR's own options (passes,
/// -o, --mlir-print-ir-*, ...) are registered after this and stay listed.
static void hideLinkedLlvmOptions() {
  for (auto &entry : cl::getRegisteredOptions()) {
    cl::Option *o = entry.second;
    bool ours = llvm::any_of(o->Categories, [](cl::OptionCategory *c) {
      return c == &importCategory || c == &compileCategory;
    });
    StringRef name = entry.first();
    if (!ours && name != "help" && name != "version" && name != "color" &&
        o->getOptionHiddenFlag() == cl::NotHidden)
      o->setHiddenFlag(cl::Hidden);
  }
}

int main(int argc, char **argv) {
  InitLLVM y(argc, argv);
  hideLinkedLlvmOptions();
#ifdef __GLIBC__
  // A plan's emission allocates and frees a rank's program many times over
  // (the recompute and schedule searches): glibc would hand large blocks
  // back to the kernel at each free and fault them in again at the next
  // allocation (a tenth of a 128-micro-batch groups=auto compile).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  DialectRegistry registry;
  registry.insert<pipemesh::pmesh::PMeshDialect, func::FuncDialect>();
  pipemesh::registerPMeshPasses();
  pipemesh::plan::registerPlanPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::registerPrintOpStatsPass();

  auto [inputFilename, outputFilename] =
      registerAndParseCLIOptions(argc, argv, "PipeMesh compiler driver\n", registry);

  if (printPlanOpt) {
    std::string why;
    if (!pipemesh::plan::printPlan(inputFilename, outs(), why)) {
      errs() << "error: " << why << "\n";
      return 1;
    }
    return 0;
  }
  if (!compileOpt.empty())
    return compileToPlan(inputFilename, outputFilename, registry);

  std::unique_ptr<MemoryBuffer> input;
  if (isONNXPath(inputFilename)) {
    input = importToBuffer(inputFilename, registry);
    if (!input)
      return 1;
  } else {
    std::string errorMessage;
    input = openInputFile(inputFilename, &errorMessage);
    if (!input) {
      errs() << "error: " << errorMessage << "\n";
      return 1;
    }
  }

  MlirOptMainConfig config = MlirOptMainConfig::createFromCLOptions();
  return writeOutput(outputFilename, [&](raw_ostream &os) {
    return MlirOptMain(os, std::move(input), registry, config);
  });
}
