//===- pmesh-interp.cpp - reference interpreter for pmesh modules ---------===//
//
// The numeric oracle for the importer and the raise patterns (DESIGN.md §5,
// oracle 1): runs a pmesh module as printed by pipemesh-opt on given inputs,
// with the parameters' initial values read from the ONNX file the module was
// imported from, and writes its results.
//
//   pmesh-interp model.mlir --weights-dir DIR --input input_ids=ids.bin \
//       --output-dir OUT
//
// Files are raw little-endian: integer inputs int64 (i1: one byte each),
// float inputs float32. Each result NAME (its `pmesh.name`, else resultN)
// is written to OUT/NAME.bin, float32 for float results and int64 for
// integer ones, and summarised on stdout. Every op runs in double precision
// (see Kernels.h); an op it does not know is an error naming the op.
//
//===----------------------------------------------------------------------===//
#include "Kernels.h"

#include "ONNXModelLoader.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::interp;
namespace pm = pipemesh::pmesh;

namespace {
llvm::cl::opt<std::string> moduleFile(llvm::cl::Positional, llvm::cl::desc("<module.mlir>"),
                                      llvm::cl::init("-"));
llvm::cl::list<std::string> inputOpts("input",
                                      llvm::cl::desc("NAME=FILE: raw data of the argument named "
                                                     "NAME (int64, i1 as bytes, or float32)"));
llvm::cl::opt<std::string> outputDir("output-dir", llvm::cl::desc("Where to write NAME.bin"),
                                     llvm::cl::Required);
llvm::cl::opt<std::string> weightsDir("weights-dir",
                                      llvm::cl::desc("Directory to look for the module's "
                                                     "pmesh.source ONNX file in"),
                                      llvm::cl::init(""));
llvm::cl::opt<std::string> weightsFile("weights",
                                       llvm::cl::desc("ONNX file holding the parameters "
                                                      "(default: the module's pmesh.source)"),
                                       llvm::cl::init(""));
llvm::cl::opt<std::string> funcName("func", llvm::cl::desc("Function to run"),
                                    llvm::cl::init("forward"));
llvm::cl::opt<bool> trace("trace", llvm::cl::desc("Print every op's result shape and range"),
                          llvm::cl::init(false));

RankedTensorType tensorTypeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The `pmesh.name` of argument/result i, or a positional fallback.
std::string ioName(DictionaryAttr attrs, StringRef fallback, unsigned i) {
  if (attrs)
    if (auto name = attrs.getAs<StringAttr>("pmesh.name"))
      return name.str();
  return (fallback + Twine(i)).str();
}

double apfloatToDouble(llvm::APFloat v) {
  bool losesInfo;
  v.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return v.convertToDouble();
}

//===----------------------------------------------------------------------===//
// Parameters: initial values from the ONNX file
//===----------------------------------------------------------------------===//

class Weights {
public:
  explicit Weights(ModuleOp module) : module(module) {}

  /// The initial value of `param`, read on first use.
  std::optional<Tensor> get(pm::ParamOp param) {
    auto it = cache.find(param.getSymName());
    if (it != cache.end())
      return it->second;
    if (!loaded && failed(load(param)))
      return std::nullopt;
    std::optional<Tensor> t = read(param);
    if (t)
      cache[param.getSymName()] = *t;
    return t;
  }

private:
  /// Finds and parses the ONNX file: --weights, else the module's
  /// pmesh.source as given (relative to the current directory), under
  /// --weights-dir, or its file name under --weights-dir.
  LogicalResult load(pm::ParamOp user) {
    std::vector<std::string> candidates;
    if (!weightsFile.empty()) {
      candidates.push_back(weightsFile);
    } else {
      auto source = module->getAttrOfType<StringAttr>("pmesh.source");
      if (!source)
        return user.emitError("the module has no pmesh.source attribute naming its ONNX file; "
                              "pass --weights FILE.onnx");
      candidates.push_back(source.str());
      if (!weightsDir.empty()) {
        llvm::SmallString<256> p(weightsDir);
        llvm::sys::path::append(p, source.getValue());
        candidates.push_back(p.str().str());
        p = weightsDir;
        llvm::sys::path::append(p, llvm::sys::path::filename(source.getValue()));
        candidates.push_back(p.str().str());
      }
    }
    for (const std::string &c : candidates) {
      if (!llvm::sys::fs::is_regular_file(c))
        continue;
      auto buffer = llvm::MemoryBuffer::getFile(c, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/false);
      if (!buffer)
        return user.emitError() << "cannot read '" << c << "': " << buffer.getError().message();
      std::string why;
      if (!onnximport::parseModel((*buffer)->getBuffer(), StringRef(c).ends_with(".onnxtxt"),
                                  model, why))
        return user.emitError() << "'" << c << "': " << why;
      baseDir = llvm::sys::path::parent_path(c).str();
      if (baseDir.empty())
        baseDir = ".";
      for (const onnx::TensorProto &t : model.graph().initializer())
        initializers[t.name()] = &t;
      path = c;
      loaded = true;
      return success();
    }
    InFlightDiagnostic diag = user.emitError("cannot find the parameters' ONNX file; tried:");
    for (const std::string &c : candidates)
      diag << " '" << c << "'";
    return diag;
  }

  std::optional<Tensor> read(pm::ParamOp param) {
    auto type = cast<RankedTensorType>(param.getType());
    std::string name = param.getSource() ? param.getSource()->str() : param.getSymName().str();
    auto it = initializers.find(name);
    if (it == initializers.end()) {
      param.emitError() << "no initializer '" << name << "' in '" << path << "'";
      return std::nullopt;
    }
    const onnx::TensorProto &init = *it->second;
    Shape dims(init.dims().begin(), init.dims().end());
    if (ArrayRef<int64_t>(dims) != type.getShape()) {
      param.emitError() << "initializer '" << name << "' has shape " << shapeStr(dims)
                        << " but the parameter is " << type;
      return std::nullopt;
    }
    Tensor t = Tensor::zeros(type.getElementType(), type.getShape());
    std::string why;
    if (type.getElementType().isF32()) {
      std::vector<float> values;
      if (!onnximport::readFloat32(init, baseDir, values, why)) {
        param.emitError() << why;
        return std::nullopt;
      }
      t.f.assign(values.begin(), values.end());
      return t;
    }
    onnximport::ConstTensor c;
    if (!onnximport::readTensor(init, baseDir, c, why)) {
      param.emitError() << why;
      return std::nullopt;
    }
    if (c.isFloat() != t.isFloat()) {
      param.emitError() << "initializer '" << name << "' has element type "
                        << onnximport::dtypeName(c.dtype) << " but the parameter is " << type;
      return std::nullopt;
    }
    if (t.isFloat())
      t.f = c.f;
    else
      t.i = c.i;
    return t;
  }

  ModuleOp module;
  bool loaded = false;
  std::string path, baseDir;
  onnx::ModelProto model;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  llvm::StringMap<Tensor> cache;
};

//===----------------------------------------------------------------------===//
// Inputs and outputs
//===----------------------------------------------------------------------===//

std::optional<Tensor> readInput(BlockArgument arg, StringRef name, StringRef file) {
  RankedTensorType type = tensorTypeOf(arg);
  Tensor t = Tensor::zeros(type.getElementType(), type.getShape());
  auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    llvm::errs() << "error: cannot read input '" << name << "' from '" << file
                 << "': " << buffer.getError().message() << "\n";
    return std::nullopt;
  }
  StringRef bytes = (*buffer)->getBuffer();
  bool isBool = type.getElementType().isInteger(1);
  size_t elementSize = t.isFloat() ? 4 : isBool ? 1 : 8;
  if (bytes.size() != (size_t)t.numel() * elementSize) {
    llvm::errs() << "error: input '" << name << "' (" << type << ") needs "
                 << t.numel() * elementSize << " bytes, '" << file << "' has " << bytes.size()
                 << "\n";
    return std::nullopt;
  }
  for (int64_t k = 0; k < t.numel(); ++k) {
    const char *p = bytes.data() + k * elementSize;
    if (t.isFloat()) {
      float v;
      std::memcpy(&v, p, 4);
      t.f[k] = roundToFloat(t.elementType, v);
    } else if (isBool) {
      t.i[k] = *p != 0;
    } else {
      int64_t v;
      std::memcpy(&v, p, 8);
      if (wrapToInt(t.elementType, v) != v) {
        llvm::errs() << "error: input '" << name << "' value " << v << " (element " << k
                     << ") does not fit " << type.getElementType() << "\n";
        return std::nullopt;
      }
      t.i[k] = v;
    }
  }
  return t;
}

bool writeOutput(const Tensor &t, StringRef name) {
  llvm::SmallString<256> path(outputDir);
  llvm::sys::path::append(path, name + ".bin");
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    llvm::errs() << "error: cannot write '" << path << "': " << ec.message() << "\n";
    return false;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t k = 0; k < t.numel(); ++k) {
    double v = t.at(k);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    if (t.isFloat()) {
      float f = (float)roundToFloat(Float32Type::get(t.elementType.getContext()), v);
      os.write(reinterpret_cast<const char *>(&f), 4);
    } else {
      os.write(reinterpret_cast<const char *>(&t.i[k]), 8);
    }
  }
  llvm::outs() << name << ": " << (t.isFloat() ? "float32" : "int64") << " "
               << shapeStr(t.shape) << " -> " << path;
  if (t.numel())
    llvm::outs() << " (min " << lo << ", max " << hi << ")";
  llvm::outs() << "\n";
  return true;
}

//===----------------------------------------------------------------------===//
// The interpreter
//===----------------------------------------------------------------------===//

class Interpreter {
public:
  explicit Interpreter(Weights &weights) : weights(weights) {}

  void bind(Value v, Tensor t) { env[v] = std::move(t); }
  const Tensor &value(Value v) { return env.find(v)->second; }

  /// Runs the body of `func`, leaving the returned values in `results`.
  LogicalResult run(func::FuncOp func, std::vector<Tensor> &results) {
    for (Operation &op : func.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        for (Value v : ret.getOperands())
          results.push_back(value(v));
        return success();
      }
      if (failed(eval(&op)))
        return failure();
      if (trace)
        for (Value r : op.getResults())
          traceValue(&op, r);
    }
    return func.emitError("function body has no func.return");
  }

private:
  /// Records result `idx` of `op`, first checking that the shape and element
  /// type the kernel computed are the ones the IR declares.
  LogicalResult set(Operation *op, unsigned idx, std::optional<Tensor> t,
                    const std::string &why) {
    if (!t)
      return op->emitOpError() << "cannot be evaluated: " << why;
    RankedTensorType declared = tensorTypeOf(op->getResult(idx));
    if (ArrayRef<int64_t>(t->shape) != declared.getShape() ||
        t->elementType != declared.getElementType())
      return op->emitOpError() << "evaluates to a " << shapeStr(t->shape) << " tensor of "
                               << t->elementType << " but declares result #" << idx << " as "
                               << declared;
    bind(op->getResult(idx), std::move(*t));
    return success();
  }

  LogicalResult setBinary(Operation *op, BinaryKind kind) {
    std::string why;
    Type elt = tensorTypeOf(op->getResult(0)).getElementType();
    return set(op, 0, binary(kind, value(op->getOperand(0)), value(op->getOperand(1)), elt, why),
               why);
  }

  LogicalResult setUnary(Operation *op, UnaryKind kind) {
    return set(op, 0, unary(kind, value(op->getOperand(0))), "");
  }

  const Tensor *optional(Value v) { return v ? &value(v) : nullptr; }

  LogicalResult eval(Operation *op) {
    std::string why;
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        // Parameters and constants.
        .Case([&](pm::GetParamOp o) -> LogicalResult {
          auto param = SymbolTable::lookupNearestSymbolFrom<pm::ParamOp>(o, o.getNameAttr());
          if (!param)
            return o.emitOpError() << "'" << o.getName() << "' does not name a pmesh.param";
          std::optional<Tensor> t = weights.get(param);
          if (!t)
            return o.emitOpError() << "cannot read parameter @" << o.getName();
          return set(op, 0, std::move(t), "");
        })
        .Case([&](pm::ConstantOp o) { return set(op, 0, constant(o, why), why); })
        // Elementwise.
        .Case([&](pm::AddOp) { return setBinary(op, BinaryKind::Add); })
        .Case([&](pm::SubOp) { return setBinary(op, BinaryKind::Sub); })
        .Case([&](pm::MulOp) { return setBinary(op, BinaryKind::Mul); })
        .Case([&](pm::DivOp) { return setBinary(op, BinaryKind::Div); })
        .Case([&](pm::PowOp) { return setBinary(op, BinaryKind::Pow); })
        .Case([&](pm::MaxOp) { return setBinary(op, BinaryKind::Max); })
        .Case([&](pm::EqualOp) { return setBinary(op, BinaryKind::Equal); })
        .Case([&](pm::LessOp) { return setBinary(op, BinaryKind::Less); })
        .Case([&](pm::AndOp) { return setBinary(op, BinaryKind::And); })
        .Case([&](pm::NegOp) { return setUnary(op, UnaryKind::Neg); })
        .Case([&](pm::SqrtOp) { return setUnary(op, UnaryKind::Sqrt); })
        .Case([&](pm::TanhOp) { return setUnary(op, UnaryKind::Tanh); })
        .Case([&](pm::ErfOp) { return setUnary(op, UnaryKind::Erf); })
        .Case([&](pm::ExpOp) { return setUnary(op, UnaryKind::Exp); })
        .Case([&](pm::LogOp) { return setUnary(op, UnaryKind::Log); })
        .Case([&](pm::NotOp) { return setUnary(op, UnaryKind::Not); })
        .Case([&](pm::CastOp o) {
          return set(op, 0,
                     interp::cast(value(o.getInput()),
                                  tensorTypeOf(o.getResult()).getElementType(), why),
                     why);
        })
        .Case([&](pm::WhereOp o) {
          return set(op, 0,
                     where(value(o.getCond()), value(o.getOnTrue()), value(o.getOnFalse()), why),
                     why);
        })
        // Reductions.
        .Case([&](pm::ReduceMeanOp o) {
          return set(op, 0, reduce(value(o.getInput()), o.getAxes(), o.getKeepdims(), true, why),
                     why);
        })
        .Case([&](pm::ReduceSumOp o) {
          return set(op, 0, reduce(value(o.getInput()), o.getAxes(), o.getKeepdims(), false, why),
                     why);
        })
        // Fused NN ops.
        .Case([&](pm::MatMulOp o) {
          return set(op, 0,
                     matmul(value(o.getA()), value(o.getB()), optional(o.getBias()),
                            o.getTransposeA(), o.getTransposeB(), why),
                     why);
        })
        .Case([&](pm::LayerNormOp o) {
          return set(op, 0,
                     layerNorm(value(o.getInput()), value(o.getScale()), optional(o.getBias()),
                               apfloatToDouble(o.getEpsilon()), (int64_t)o.getAxis(), why),
                     why);
        })
        .Case([&](pm::GeluOp o) -> LogicalResult {
          if (o.getApproximate() != "none" && o.getApproximate() != "tanh")
            return o.emitOpError() << "unknown approximate \"" << o.getApproximate() << "\"";
          GeluKind kind = o.getApproximate() == "tanh" ? GeluKind::Tanh : GeluKind::Erf;
          return set(op, 0, gelu(value(o.getInput()), kind), "");
        })
        .Case([&](pm::SoftmaxOp o) {
          return set(op, 0, softmax(value(o.getInput()), (int64_t)o.getAxis(), false, why),
                     why);
        })
        .Case([&](pm::LogSoftmaxOp o) {
          return set(op, 0, softmax(value(o.getInput()), (int64_t)o.getAxis(), true, why),
                     why);
        })
        .Case([&](pm::AttentionOp o) {
          return set(op, 0,
                     attention(value(o.getQ()), value(o.getK()), value(o.getV()),
                               optional(o.getMask()), apfloatToDouble(o.getScale()),
                               o.getCausal(), why),
                     why);
        })
        .Case([&](pm::EmbeddingOp o) {
          return set(op, 0, embedding(value(o.getTable()), value(o.getIds()), why), why);
        })
        .Case([&](pm::CrossEntropyOp o) {
          return set(op, 0,
                     crossEntropy(value(o.getLogits()), value(o.getTargets()),
                                  (int64_t)o.getIgnoreIndex(), o.getReduction(), why),
                     why);
        })
        // Shape ops.
        .Case([&](pm::ReshapeOp o) {
          return set(op, 0,
                     reshape(value(o.getInput()), tensorTypeOf(o.getResult()).getShape(), why),
                     why);
        })
        .Case([&](pm::TransposeOp o) {
          return set(op, 0, transpose(value(o.getInput()), o.getPerm(), why), why);
        })
        .Case([&](pm::BroadcastOp o) {
          return set(op, 0,
                     broadcastTo(value(o.getInput()), tensorTypeOf(o.getResult()).getShape(),
                                 why),
                     why);
        })
        .Case([&](pm::SplitOp o) -> LogicalResult {
          auto pieces = split(value(o.getInput()), o.getAxis(), o.getSizes(), why);
          if (!pieces)
            return o.emitOpError() << "cannot be evaluated: " << why;
          if (pieces->size() != o.getNumResults())
            return o.emitOpError() << "has " << o.getNumResults() << " results for "
                                   << pieces->size() << " pieces";
          for (unsigned k = 0; k < pieces->size(); ++k)
            if (failed(set(op, k, std::move((*pieces)[k]), "")))
              return failure();
          return success();
        })
        .Case([&](pm::ConcatOp o) {
          SmallVector<const Tensor *> ins;
          for (Value v : o.getInputs())
            ins.push_back(&value(v));
          return set(op, 0, concat(ins, o.getAxis(), why), why);
        })
        .Case([&](pm::SliceOp o) {
          return set(op, 0,
                     slice(value(o.getInput()), o.getStarts(), o.getLimits(), o.getStrides(),
                           why),
                     why);
        })
        .Default([&](Operation *o) -> LogicalResult {
          return o->emitOpError() << "is not supported by pmesh-interp";
        });
  }

  std::optional<Tensor> constant(pm::ConstantOp o, std::string &why) {
    auto type = tensorTypeOf(o.getResult());
    auto dense = dyn_cast<DenseElementsAttr>(o.getValue());
    if (!dense) {
      why = "only dense constants are supported";
      return std::nullopt;
    }
    Tensor t = Tensor::zeros(type.getElementType(), type.getShape());
    int64_t k = 0;
    if (t.isFloat()) {
      for (llvm::APFloat v : dense.getValues<llvm::APFloat>())
        t.f[k++] = apfloatToDouble(v);
    } else {
      bool isBool = type.getElementType().isInteger(1);
      for (llvm::APInt v : dense.getValues<llvm::APInt>())
        t.i[k++] = isBool ? (int64_t)v.getZExtValue() : v.getSExtValue();
    }
    if (k != t.numel()) {
      why = "constant holds " + std::to_string(k) + " values for " + std::to_string(t.numel()) +
            " elements";
      return std::nullopt;
    }
    return t;
  }

  void traceValue(Operation *op, Value r) {
    const Tensor &t = value(r);
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (int64_t k = 0; k < t.numel(); ++k) {
      lo = std::min(lo, t.at(k));
      hi = std::max(hi, t.at(k));
      sum += t.at(k);
    }
    llvm::errs() << op->getName() << " " << op->getLoc() << " -> " << shapeStr(t.shape)
                 << " min " << lo << " max " << hi << " mean "
                 << (t.numel() ? sum / t.numel() : 0.0) << "\n";
  }

  Weights &weights;
  llvm::DenseMap<Value, Tensor> env;
};
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  llvm::cl::ParseCommandLineOptions(argc, argv, "pmesh reference interpreter (numeric oracle)\n");

  DialectRegistry registry;
  registry.insert<pm::PMeshDialect, func::FuncDialect>();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();

  auto file = llvm::MemoryBuffer::getFileOrSTDIN(moduleFile);
  if (!file) {
    llvm::errs() << "error: cannot read '" << moduleFile << "': " << file.getError().message()
                 << "\n";
    return 1;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*file), llvm::SMLoc());
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;
  auto func = module->lookupSymbol<func::FuncOp>(funcName);
  if (!func || func.isExternal()) {
    llvm::errs() << "error: the module has no function @" << funcName << " with a body\n";
    return 1;
  }

  // Inputs, matched to the arguments by pmesh.name.
  llvm::StringMap<std::string> inputFiles;
  for (const std::string &opt : inputOpts) {
    auto [name, path] = StringRef(opt).split('=');
    if (name.empty() || path.empty()) {
      llvm::errs() << "error: --input expects NAME=FILE, got '" << opt << "'\n";
      return 1;
    }
    inputFiles[name] = path.str();
  }
  Weights weights(*module);
  Interpreter interp(weights);
  llvm::StringMap<bool> used;
  for (BlockArgument arg : func.getArguments()) {
    std::string name = ioName(func.getArgAttrDict(arg.getArgNumber()), "arg",
                              arg.getArgNumber());
    auto it = inputFiles.find(name);
    if (it == inputFiles.end()) {
      llvm::errs() << "error: no --input for argument '" << name << "' ("
                   << arg.getType() << ")\n";
      return 1;
    }
    used[name] = true;
    std::optional<Tensor> t = readInput(arg, name, it->second);
    if (!t)
      return 1;
    interp.bind(arg, std::move(*t));
  }
  for (auto &kv : inputFiles) {
    if (!used.count(kv.getKey())) {
      llvm::errs() << "error: --input '" << kv.getKey() << "' names no argument of @"
                   << funcName << "\n";
      return 1;
    }
  }

  std::vector<Tensor> results;
  if (failed(interp.run(func, results)))
    return 1;

  if (std::error_code ec = llvm::sys::fs::create_directories(outputDir)) {
    llvm::errs() << "error: cannot create '" << outputDir << "': " << ec.message() << "\n";
    return 1;
  }
  for (unsigned k = 0; k < results.size(); ++k)
    if (!writeOutput(results[k], ioName(func.getResultAttrDict(k), "result", k)))
      return 1;
  return 0;
}
