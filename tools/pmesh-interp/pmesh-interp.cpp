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
// is written to OUT/NAME.bin, float32 for float results (float64 with
// --results-f64) and int64 for integer ones, and summarised on stdout. Every
// op runs in double precision (see Kernels.h); an op it does not know is an
// error naming the op.
//
// Training steps and finite differences (the gradient oracle):
//
//   pmesh-interp trained.mlir --func train_step --input ... \
//       --params-dir P --grads-dir G [--fd-probes probes.txt --fd-out losses.txt]
//
// runs @train_step (the output of --pmesh-autodiff), records every
// `pmesh.accumulate_grad @param, %g` (summed per parameter) and writes each
// parameter's gradient to G/<param>.bin as raw float64. Parameter values may
// come from raw float64 files instead of the ONNX file (--params-dir,
// --param-override), so they need not be float32-representable; one element
// may be shifted (--perturb-param NAME --index I --delta H). --fd-probes
// lists such shifts, one "NAME INDEX DELTA" per line: after the normal run,
// the function runs once per probe (only the ops its first result needs) and
// --fd-out gets that result, a scalar, as one %.17g line per probe.
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
#include "llvm/ADT/DenseSet.h"
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
#include <cstdio>
#include <cstring>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::interp;
namespace pm = pipemesh::pmesh;

namespace {
// Only these in --help: the LLVM libraries register hundreds of their own.
llvm::cl::OptionCategory interpOptions("pmesh-interp options");
llvm::cl::opt<std::string> moduleFile(llvm::cl::Positional, llvm::cl::desc("<module.mlir>"),
                                      llvm::cl::init("-"), llvm::cl::cat(interpOptions));
llvm::cl::list<std::string> inputOpts("input",
                                      llvm::cl::desc("NAME=FILE: raw data of the argument named "
                                                     "NAME (int64, i1 as bytes, or float32)"),
                                      llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> outputDir("output-dir", llvm::cl::desc("Where to write NAME.bin"),
                                     llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<bool> resultsF64("results-f64",
                               llvm::cl::desc("Write float results as float64, not float32"),
                               llvm::cl::init(false), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> weightsDir("weights-dir",
                                      llvm::cl::desc("Directory to look for the module's "
                                                     "pmesh.source ONNX file in"),
                                      llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> weightsFile("weights",
                                       llvm::cl::desc("ONNX file holding the parameters "
                                                      "(default: the module's pmesh.source)"),
                                       llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> funcName("func", llvm::cl::desc("Function to run"),
                                    llvm::cl::init("forward"), llvm::cl::cat(interpOptions));
llvm::cl::opt<bool> trace("trace", llvm::cl::desc("Print every op's result shape and range"),
                          llvm::cl::init(false), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> gradsDir("grads-dir",
                                    llvm::cl::desc("Write each parameter's accumulated gradient "
                                                   "(pmesh.accumulate_grad) to DIR/<param>.bin "
                                                   "as raw float64"),
                                    llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::list<std::string> paramOverrides(
    "param-override",
    llvm::cl::desc("NAME=FILE: raw float64 values of parameter @NAME, replacing its initial "
                   "value from the ONNX file"),
    llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> paramsDir("params-dir",
                                     llvm::cl::desc("Parameters with a file DIR/<param>.bin "
                                                    "(raw float64) take their values from it"),
                                     llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> perturbParam("perturb-param",
                                        llvm::cl::desc("Add --delta to element --index of this "
                                                       "parameter (finite differences)"),
                                        llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<int64_t> perturbIndex("index", llvm::cl::desc("Flat element of --perturb-param"),
                                    llvm::cl::init(0), llvm::cl::cat(interpOptions));
llvm::cl::opt<double> perturbDelta("delta", llvm::cl::desc("Shift of --perturb-param"),
                                   llvm::cl::init(0.0), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> fdProbes("fd-probes",
                                    llvm::cl::desc("File of \"NAME INDEX DELTA\" lines: rerun "
                                                   "the function once per shifted parameter"),
                                    llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<std::string> fdOut("fd-out",
                                 llvm::cl::desc("Where --fd-probes writes the first result of "
                                                "each run (%.17g, one line per probe)"),
                                 llvm::cl::init(""), llvm::cl::cat(interpOptions));
llvm::cl::opt<bool> exactFloatCasts(
    "exact-float-casts",
    llvm::cl::desc("pmesh.cast between float types keeps the value unrounded (for finite "
                   "differences through casts)"),
    llvm::cl::init(false), llvm::cl::cat(interpOptions));

/// One parameter element shifted by `delta`.
struct Perturbation {
  std::string param;
  int64_t index = 0;
  double delta = 0;
};

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

  /// A value of `param` read from a raw float64 file instead of the ONNX file.
  void setOverride(StringRef name, StringRef file) { overrides[name] = file.str(); }

  /// The initial value of `param`, read on first use.
  std::optional<Tensor> get(pm::ParamOp param) {
    auto it = cache.find(param.getSymName());
    if (it != cache.end())
      return it->second;
    if (std::optional<std::string> file = overrideFile(param.getSymName())) {
      std::optional<Tensor> t = readF64(param, *file);
      if (t)
        cache[param.getSymName()] = *t;
      return t;
    }
    if (!loaded && failed(load(param)))
      return std::nullopt;
    std::optional<Tensor> t = read(param);
    if (t)
      cache[param.getSymName()] = *t;
    return t;
  }

private:
  /// --param-override's file for `name`, else --params-dir's if it exists.
  std::optional<std::string> overrideFile(StringRef name) {
    auto it = overrides.find(name);
    if (it != overrides.end())
      return it->second;
    if (paramsDir.empty())
      return std::nullopt;
    llvm::SmallString<256> p(paramsDir);
    llvm::sys::path::append(p, name + ".bin");
    if (llvm::sys::fs::is_regular_file(p))
      return p.str().str();
    return std::nullopt;
  }

  std::optional<Tensor> readF64(pm::ParamOp param, StringRef file) {
    auto type = cast<RankedTensorType>(param.getType());
    Tensor t = Tensor::zeros(type.getElementType(), type.getShape());
    if (!t.isFloat()) {
      param.emitError() << "only float parameters can be read from float64 files ('" << file
                        << "')";
      return std::nullopt;
    }
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      param.emitError() << "cannot read '" << file << "': " << buffer.getError().message();
      return std::nullopt;
    }
    StringRef bytes = (*buffer)->getBuffer();
    if (bytes.size() != (size_t)t.numel() * 8) {
      param.emitError() << "'" << file << "' has " << bytes.size() << " bytes; " << type
                        << " needs " << t.numel() * 8 << " (raw float64)";
      return std::nullopt;
    }
    std::memcpy(t.f.data(), bytes.data(), bytes.size());
    return t;
  }

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
  llvm::StringMap<std::string> overrides;
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
    if (t.isFloat() && resultsF64) {
      os.write(reinterpret_cast<const char *>(&v), 8);
    } else if (t.isFloat()) {
      float f = (float)roundToFloat(Float32Type::get(t.elementType.getContext()), v);
      os.write(reinterpret_cast<const char *>(&f), 4);
    } else {
      os.write(reinterpret_cast<const char *>(&t.i[k]), 8);
    }
  }
  llvm::outs() << name << ": " << (t.isFloat() ? (resultsF64 ? "float64" : "float32") : "int64")
               << " "
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

  /// The gradients pmesh.accumulate_grad recorded, in first-record order.
  const std::vector<std::pair<std::string, Tensor>> &gradients() const { return grads; }

  /// Runs the body of `func`, leaving the returned values in `results`. With
  /// `firstResultOnly`, runs only the ops the first returned value depends on
  /// (and returns only it). `perturb` shifts one parameter element.
  LogicalResult run(func::FuncOp func, std::vector<Tensor> &results, bool firstResultOnly = false,
                    const Perturbation *perturb = nullptr) {
    perturbation = perturb;
    perturbApplied = false;
    grads.clear();
    llvm::DenseSet<Operation *> needed;
    if (firstResultOnly)
      needed = opsNeededByFirstResult(func);
    for (Operation &op : func.getBody().front()) {
      if (auto ret = dyn_cast<func::ReturnOp>(op)) {
        if (perturb && !perturbApplied)
          return func.emitError() << "@" << func.getName() << " never reads parameter @"
                                  << perturb->param << " that --perturb-param/--fd-probes names";
        for (Value v : ret.getOperands()) {
          results.push_back(value(v));
          if (firstResultOnly)
            break;
        }
        return success();
      }
      if (firstResultOnly && !needed.count(&op))
        continue;
      if (failed(eval(&op)))
        return failure();
      if (trace)
        for (Value r : op.getResults())
          traceValue(&op, r);
    }
    return func.emitError("function body has no func.return");
  }

private:
  /// The ops whose results the first returned value of `func` depends on.
  static llvm::DenseSet<Operation *> opsNeededByFirstResult(func::FuncOp func) {
    llvm::DenseSet<Operation *> needed;
    llvm::DenseSet<Value> live;
    Block &body = func.getBody().front();
    if (auto ret = dyn_cast<func::ReturnOp>(body.getTerminator()))
      if (ret.getNumOperands())
        live.insert(ret.getOperand(0));
    for (Operation &op : llvm::reverse(body)) {
      if (!llvm::any_of(op.getResults(), [&](Value r) { return live.count(r); }))
        continue;
      needed.insert(&op);
      for (Value v : op.getOperands())
        live.insert(v);
    }
    return needed;
  }

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

  /// Records every result of a multi-result op.
  LogicalResult setAll(Operation *op, std::optional<std::vector<Tensor>> ts,
                       const std::string &why) {
    if (!ts)
      return op->emitOpError() << "cannot be evaluated: " << why;
    if (ts->size() != op->getNumResults())
      return op->emitOpError() << "has " << op->getNumResults() << " results, the kernel gave "
                               << ts->size();
    for (unsigned k = 0; k < ts->size(); ++k)
      if (failed(set(op, k, std::move((*ts)[k]), "")))
        return failure();
    return success();
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
          if (perturbation && perturbation->param == o.getName()) {
            if (!t->isFloat() || perturbation->index < 0 ||
                perturbation->index >= t->numel())
              return o.emitOpError() << "cannot perturb element " << perturbation->index
                                     << " of @" << o.getName() << " ("
                                     << shapeStr(t->shape) << ")";
            t->f[perturbation->index] += perturbation->delta;
            perturbApplied = true;
          }
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
        .Case([&](pm::SigmoidOp) { return setUnary(op, UnaryKind::Sigmoid); })
        .Case([&](pm::LogOp) { return setUnary(op, UnaryKind::Log); })
        .Case([&](pm::NotOp) { return setUnary(op, UnaryKind::Not); })
        .Case([&](pm::CastOp o) {
          Type to = tensorTypeOf(o.getResult()).getElementType();
          const Tensor &x = value(o.getInput());
          if (exactFloatCasts && x.isFloat() && isa<FloatType>(to)) {
            Tensor t = x;
            t.elementType = to;
            return set(op, 0, std::move(t), "");
          }
          return set(op, 0, interp::cast(x, to, why), why);
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
                               o.getCausal(), o.getWindow(), apfloatToDouble(o.getSoftcap()),
                               why),
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
        // Gradient ops.
        .Case([&](pm::LayerNormGradOp o) {
          return setAll(op,
                        layerNormGrad(value(o.getDy()), value(o.getX()), value(o.getScale()),
                                      apfloatToDouble(o.getEpsilon()), (int64_t)o.getAxis(),
                                      why),
                        why);
        })
        .Case([&](pm::GeluGradOp o) -> LogicalResult {
          if (o.getApproximate() != "none" && o.getApproximate() != "tanh")
            return o.emitOpError() << "unknown approximate \"" << o.getApproximate() << "\"";
          GeluKind kind = o.getApproximate() == "tanh" ? GeluKind::Tanh : GeluKind::Erf;
          return set(op, 0, geluGrad(value(o.getDy()), value(o.getX()), kind, why), why);
        })
        .Case([&](pm::SoftmaxGradOp o) {
          return set(op, 0,
                     softmaxGrad(value(o.getDy()), value(o.getY()), (int64_t)o.getAxis(), false,
                                 why),
                     why);
        })
        .Case([&](pm::LogSoftmaxGradOp o) {
          return set(op, 0,
                     softmaxGrad(value(o.getDy()), value(o.getY()), (int64_t)o.getAxis(), true,
                                 why),
                     why);
        })
        .Case([&](pm::AttentionGradOp o) {
          return setAll(op,
                        attentionGrad(value(o.getDout()), value(o.getQ()), value(o.getK()),
                                      value(o.getV()), optional(o.getMask()),
                                      apfloatToDouble(o.getScale()), o.getCausal(),
                                      o.getWindow(), apfloatToDouble(o.getSoftcap()), why),
                        why);
        })
        .Case([&](pm::EmbeddingGradOp o) {
          int64_t rows = tensorTypeOf(o.getDtable()).getDimSize(0);
          return set(op, 0, embeddingGrad(value(o.getDy()), value(o.getIds()), rows, why),
                     why);
        })
        .Case([&](pm::CrossEntropyGradOp o) {
          return set(op, 0,
                     crossEntropyGrad(value(o.getDloss()), value(o.getLogits()),
                                      value(o.getTargets()), (int64_t)o.getIgnoreIndex(),
                                      o.getReduction(), why),
                     why);
        })
        .Case([&](pm::SliceGradOp o) {
          return set(op, 0,
                     sliceGrad(value(o.getDy()), tensorTypeOf(o.getDx()).getShape(),
                               o.getStarts(), o.getLimits(), o.getStrides(), why),
                     why);
        })
        .Case([&](pm::AccumulateGradOp o) -> LogicalResult {
          const Tensor &g = value(o.getGrad());
          for (auto &[name, acc] : grads) {
            if (name != o.getParam())
              continue;
            if (ArrayRef<int64_t>(acc.shape) != ArrayRef<int64_t>(g.shape))
              return o.emitOpError() << "gradient " << shapeStr(g.shape) << " for @"
                                     << o.getParam() << " after one of " << shapeStr(acc.shape);
            for (int64_t k = 0; k < g.numel(); ++k)
              acc.f[k] += g.f[k];
            return success();
          }
          grads.emplace_back(o.getParam().str(), g);
          return success();
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
  std::vector<std::pair<std::string, Tensor>> grads;
  const Perturbation *perturbation = nullptr;
  bool perturbApplied = false;
};

/// Writes DIR/<param>.bin (raw float64) for every recorded gradient.
bool writeGradients(const std::vector<std::pair<std::string, Tensor>> &grads) {
  for (const auto &[name, g] : grads) {
    llvm::SmallString<256> path(gradsDir);
    llvm::sys::path::append(path, name + ".bin");
    if (std::error_code ec =
            llvm::sys::fs::create_directories(llvm::sys::path::parent_path(path))) {
      llvm::errs() << "error: cannot create the directory of '" << path << "': " << ec.message()
                   << "\n";
      return false;
    }
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << "error: cannot write '" << path << "': " << ec.message() << "\n";
      return false;
    }
    os.write(reinterpret_cast<const char *>(g.f.data()), g.f.size() * sizeof(double));
    double sq = 0;
    for (double v : g.f)
      sq += v * v;
    llvm::outs() << "grad " << name << ": float64 " << shapeStr(g.shape) << " -> " << path
                 << " (norm " << std::sqrt(sq) << ")\n";
  }
  return true;
}

/// Reads --fd-probes: one "NAME INDEX DELTA" per line (blank lines and #
/// comments skipped).
std::optional<std::vector<Perturbation>> readProbes(StringRef file) {
  auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer) {
    llvm::errs() << "error: cannot read '" << file << "': " << buffer.getError().message()
                 << "\n";
    return std::nullopt;
  }
  std::vector<Perturbation> probes;
  SmallVector<StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (auto [n, line] : llvm::enumerate(lines)) {
    line = line.trim();
    if (line.empty() || line.starts_with("#"))
      continue;
    SmallVector<StringRef> fields;
    line.split(fields, ' ', -1, /*KeepEmpty=*/false);
    Perturbation p;
    if (fields.size() == 3) {
      p.param = fields[0].str();
      if (!fields[1].getAsInteger(10, p.index) && !fields[2].getAsDouble(p.delta)) {
        probes.push_back(p);
        continue;
      }
    }
    llvm::errs() << "error: " << file << ":" << n + 1 << ": expected \"NAME INDEX DELTA\", got '"
                 << line << "'\n";
    return std::nullopt;
  }
  return probes;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  llvm::cl::HideUnrelatedOptions(interpOptions);
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
  if (outputDir.empty() && gradsDir.empty() && fdProbes.empty()) {
    llvm::errs() << "error: nothing to write: give --output-dir, --grads-dir or --fd-probes\n";
    return 1;
  }
  if (!fdProbes.empty() && fdOut.empty()) {
    llvm::errs() << "error: --fd-probes needs --fd-out\n";
    return 1;
  }
  Weights weights(*module);
  for (const std::string &opt : paramOverrides) {
    auto [name, path] = StringRef(opt).split('=');
    if (name.empty() || path.empty()) {
      llvm::errs() << "error: --param-override expects NAME=FILE, got '" << opt << "'\n";
      return 1;
    }
    if (!module->lookupSymbol<pm::ParamOp>(name)) {
      llvm::errs() << "error: --param-override '" << name << "' names no pmesh.param\n";
      return 1;
    }
    weights.setOverride(name, path);
  }
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

  std::optional<Perturbation> perturb;
  if (!perturbParam.empty())
    perturb = Perturbation{perturbParam, perturbIndex, perturbDelta};
  std::vector<Tensor> results;
  if (failed(interp.run(func, results, /*firstResultOnly=*/false, perturb ? &*perturb : nullptr)))
    return 1;

  if (!outputDir.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(outputDir)) {
      llvm::errs() << "error: cannot create '" << outputDir << "': " << ec.message() << "\n";
      return 1;
    }
    for (unsigned k = 0; k < results.size(); ++k)
      if (!writeOutput(results[k], ioName(func.getResultAttrDict(k), "result", k)))
        return 1;
  }
  if (!gradsDir.empty()) {
    if (interp.gradients().empty()) {
      llvm::errs() << "error: --grads-dir: @" << funcName
                   << " accumulated no gradient (no pmesh.accumulate_grad ran)\n";
      return 1;
    }
    if (!writeGradients(interp.gradients()))
      return 1;
  }

  if (fdProbes.empty())
    return 0;
  std::optional<std::vector<Perturbation>> probes = readProbes(fdProbes);
  if (!probes)
    return 1;
  std::error_code ec;
  llvm::raw_fd_ostream os(fdOut, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << "error: cannot write '" << fdOut << "': " << ec.message() << "\n";
    return 1;
  }
  for (const Perturbation &p : *probes) {
    std::vector<Tensor> first;
    if (failed(interp.run(func, first, /*firstResultOnly=*/true, &p)))
      return 1;
    if (first.empty() || !first[0].isFloat() || first[0].numel() != 1) {
      llvm::errs() << "error: --fd-probes needs @" << funcName
                   << " to return a float scalar first (the loss)\n";
      return 1;
    }
    char line[64];
    std::snprintf(line, sizeof(line), "%.17g\n", first[0].f[0]);
    os << line;
  }
  llvm::outs() << "fd-probes: " << probes->size() << " runs -> " << fdOut << "\n";
  return 0;
}
