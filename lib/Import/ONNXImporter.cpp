//===- ONNXImporter.cpp - ONNX model -> pmesh IR ----------------------------===//
//
// Walks the graph once in topological order. A node whose inputs are all
// constants is evaluated on the host (ConstTensor) - this is how the shape
// plumbing of dynamic-axes exports disappears once batch and seq are bound.
// Every other node becomes pmesh ops with static shapes, checked against the
// shared shape functions first so a bad model is a diagnostic naming the node,
// never an assertion in an op builder.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Import/ONNXImporter.h"

#include "BufferInitializers.h"
#include "ConstTensor.h"
#include "LocalFunctions.h"
#include "ONNXModelLoader.h"
#include "pipemesh/Dialect/PMesh/FloatConstants.h"
#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <cmath>
#include <functional>
#include <memory>
#include <set>

using namespace mlir;
using namespace pipemesh;
using namespace pipemesh::onnximport;
namespace pm = pipemesh::pmesh;

namespace {

/// Larger constant results are emitted as ops instead of folded, so an
/// Expand of a mask to [B, H, T, T] cannot exhaust host memory.
constexpr int64_t kFoldLimit = 1 << 24;

/// No tensor of a GPT comes near 2^40 elements; a larger (or overflowing) shape
/// is a malformed model, reported before any arithmetic on it.
constexpr int64_t kMaxElements = int64_t(1) << 40;
bool tooLarge(llvm::ArrayRef<int64_t> shape) {
  auto n = shapes::checkedNumElements(shape);
  return !n || *n > kMaxElements;
}

/// Whether a constant of `shape` is small enough to fold (and its size does
/// not overflow).
bool foldable(llvm::ArrayRef<int64_t> shape) {
  auto n = shapes::checkedNumElements(shape);
  return n && *n <= kFoldLimit;
}

/// What a graph value is at import time.
struct Entry {
  enum Kind { Const, LazyConst, Param, Val, Poison } kind = Val;
  std::shared_ptr<ConstTensor> c;        // Const
  const onnx::TensorProto *init = nullptr; // LazyConst / Param (initial values)
  std::string paramName;                 // Param: the symbol
  mlir::Value v;                         // Val (also the cached get_param / constant)
  /// Const: the values with every dim along which they do not change cut to
  /// 1 (compressUniformDims), broadcasting to `shape`. Alone (no `c`) for a
  /// constant too large to hold whole, such as a [B, 1, T, T] mask of B equal
  /// rows: elementwise folds compute on it, everything else sees it emitted as
  /// a pmesh.constant broadcast to `shape` (kind Val, `reduced` kept).
  std::shared_ptr<ConstTensor> reduced;
  std::string poison;                    // Poison: why it cannot be used
  shapes::Shape shape;
  DType dtype = DType::F32;
};

class Importer;

/// One node being imported: inputs, attributes, outputs and diagnostics.
class NodeCtx {
public:
  NodeCtx(Importer &imp, const onnx::NodeProto &node, int index, int64_t opset, Location loc)
      : imp(imp), node(node), index(index), opset(opset), loc(loc) {}

  Importer &imp;
  const onnx::NodeProto &node;
  int index;
  int64_t opset;
  Location loc;

  std::string describe() const;
  LogicalResult fail(const Twine &msg) const;

  int numInputs() const { return node.input_size(); }
  bool has(int k) const { return k < node.input_size() && !node.input(k).empty(); }
  bool hasOutput(int k) const { return k < node.output_size() && !node.output(k).empty(); }

  /// The first attribute of a wrong type read through the typed accessors
  /// below; importNode turns it into an error once the handler returns, so a
  /// handler never silently uses a default in its place.
  mutable std::string attrError;
  mutable bool failedOnce = false;

  const onnx::AttributeProto *attr(StringRef name) const {
    for (const auto &a : node.attribute())
      if (a.name() == name)
        return &a;
    return nullptr;
  }
  /// The attribute if it has type `type` (or no recorded type, as in very old
  /// models); otherwise records an error and returns null.
  const onnx::AttributeProto *typedAttr(StringRef name,
                                        onnx::AttributeProto::AttributeType type,
                                        const char *what,
                                        onnx::AttributeProto::AttributeType alt =
                                            onnx::AttributeProto::UNDEFINED) const {
    auto *a = attr(name);
    if (!a || a->type() == type || a->type() == onnx::AttributeProto::UNDEFINED ||
        (alt != onnx::AttributeProto::UNDEFINED && a->type() == alt))
      return a;
    if (attrError.empty())
      attrError = "attribute '" + name.str() + "' must be " + what + ", got " +
                  onnx::AttributeProto::AttributeType_Name(a->type());
    return nullptr;
  }
  int64_t attrInt(StringRef name, int64_t dflt) const {
    auto *a = typedAttr(name, onnx::AttributeProto::INT, "an INT");
    return a ? a->i() : dflt;
  }
  double attrFloat(StringRef name, double dflt) const {
    // An integer literal is accepted for a float attribute (alpha = 1).
    auto *a = typedAttr(name, onnx::AttributeProto::FLOAT, "a FLOAT", onnx::AttributeProto::INT);
    if (!a)
      return dflt;
    return a->type() == onnx::AttributeProto::INT ? (double)a->i() : (double)a->f();
  }
  std::string attrString(StringRef name, StringRef dflt) const {
    auto *a = typedAttr(name, onnx::AttributeProto::STRING, "a STRING");
    return a ? a->s() : dflt.str();
  }
  std::optional<std::vector<int64_t>> attrInts(StringRef name) const {
    auto *a = typedAttr(name, onnx::AttributeProto::INTS, "a list of INTS");
    if (!a)
      return std::nullopt;
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  const onnx::TensorProto *attrTensor(StringRef name) const {
    auto *a = typedAttr(name, onnx::AttributeProto::TENSOR, "a TENSOR");
    return a ? &a->t() : nullptr;
  }
};

class Importer {
public:
  Importer(MLIRContext *ctx, const ImportOptions &opts, onnx::ModelProto &model,
           StringRef sourceName, StringRef baseDir)
      : ctx(ctx), b(ctx), opts(opts), model(model), sourceName(sourceName.str()),
        baseDir(baseDir.str()) {}

  OwningOpRef<ModuleOp> run();

  // --- value access used by the op handlers -------------------------------
  FailureOr<Entry *> entry(const NodeCtx &n, int k);
  /// The input as a constant, or failure (with a diagnostic) if it is not one.
  FailureOr<const ConstTensor *> constIn(const NodeCtx &n, int k, StringRef role);
  /// The input as a constant when it is one (no diagnostic otherwise).
  const ConstTensor *maybeConst(const NodeCtx &n, int k);
  /// The input as a constant in its reduced form (see Entry::reduced) and its
  /// full shape, or null when it is not a constant. Never emits anything.
  std::pair<const ConstTensor *, shapes::Shape> reducedConst(const NodeCtx &n, int k);
  /// Sets output k to the constant `reduced` broadcast to `shape`: held whole
  /// when that is small enough to fold, else in reduced form only.
  void setReducedConst(const NodeCtx &n, int k, ConstTensor reduced, ArrayRef<int64_t> shape);
  FailureOr<Value> valueIn(const NodeCtx &n, int k);
  Value materialize(Entry &e, Location loc);
  Value materializeConst(const ConstTensor &c, Location loc);

  static Entry constEntry(ConstTensor c);
  static Entry valueEntry(Value v);
  void setConst(const NodeCtx &n, int k, ConstTensor c);
  void setValue(const NodeCtx &n, int k, Value v);
  void setPoison(const NodeCtx &n, int k, const std::string &why);
  /// Frees a folded constant nobody reads any more (its emitted value, if
  /// any, stays).
  void releaseConstant(const std::string &name);

  RankedTensorType tensorType(ArrayRef<int64_t> shape, Type elt) {
    return RankedTensorType::get(shape, elt);
  }
  FailureOr<Type> elementType(DType t, const NodeCtx *n, StringRef what);
  static shapes::Shape shapeOf(Value v) {
    auto s = cast<RankedTensorType>(v.getType()).getShape();
    return shapes::Shape(s.begin(), s.end());
  }

  MLIRContext *ctx;
  OpBuilder b;
  const ImportOptions &opts;
  onnx::ModelProto &model;
  std::string sourceName, baseDir;
  ModuleOp module;
  llvm::StringMap<int64_t> opsets;
  llvm::StringMap<Entry> values;
  llvm::StringMap<pm::ParamOp> params;
  Block *paramInsertBlock = nullptr;
  Operation *lastParam = nullptr;
  /// log_softmax results, so NegativeLogLikelihoodLoss can become cross_entropy.
  llvm::DenseMap<Value, std::pair<Value, int64_t>> logSoftmaxInputs;
  /// Parameters read by an embedding lookup: candidates for a tied head.
  llvm::StringSet<> embeddingParams;
  /// Symbolic dim names bound while importing the graph inputs.
  std::map<std::string, int64_t> boundDims;
  /// Float types other than float32 the model uses (imported as float32).
  std::set<std::string> otherFloatTypes;
  /// IsNaN outputs of computed values, by name: the softmax each one tests
  /// (only the guard Where(IsNaN(p), 0, p) may use them).
  llvm::StringMap<Value> nanTests;
  /// Tensor sequences (SplitToSequence results) by name, for SequenceAt.
  llvm::StringMap<std::vector<Entry>> sequences;

private:
  LogicalResult importInitializers();
  FailureOr<SmallVector<Type>> importInputs(Block *&body);
  LogicalResult importNode(const onnx::NodeProto &node, int index);
  void restoreTiedEmbedding();
  void warnSharedParameters();
  LogicalResult checkDeclaredOutput(const onnx::ValueInfoProto &out, const Entry &e);
  Location nodeLoc(const onnx::NodeProto &node, int index);
};

//===----------------------------------------------------------------------===//
// NodeCtx
//===----------------------------------------------------------------------===//

std::string NodeCtx::describe() const {
  std::string name = nodeLabel(node, index);
  std::string domain = node.domain().empty() ? "ai.onnx" : node.domain();
  return "node '" + name + "' (" + node.op_type() + ", domain " + domain + ", opset " +
         std::to_string(opset) + ")";
}

LogicalResult NodeCtx::fail(const Twine &msg) const {
  // One error per node: the first is the cause, later ones only echo it.
  if (!failedOnce)
    emitError(loc) << describe() << ": " << msg;
  failedOnce = true;
  return failure();
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

FailureOr<Type> Importer::elementType(DType t, const NodeCtx *n, StringRef what) {
  switch (t) {
  case DType::F32: return (Type)b.getF32Type();
  case DType::F16:
  case DType::BF16:
  case DType::F64:
    // The IR computes in float32 and the plan's activations=/params= options
    // choose what is stored in bf16: a model.half() or bfloat16 export trains
    // like its float32 twin from the same (rounded) weights.
    otherFloatTypes.insert(dtypeName(t));
    return (Type)b.getF32Type();
  case DType::I64: return (Type)b.getI64Type();
  case DType::I32: return (Type)b.getI32Type();
  case DType::Bool: return (Type)b.getI1Type();
  default:
    if (n)
      return n->fail(Twine(what) + " has element type " + dtypeName(t) +
                     ", which pmesh does not support outside constants");
    emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0))
        << what << " has unsupported element type " << dtypeName(t);
    return failure();
  }
}

static DType dtypeOf(Type t) {
  if (t.isF32()) return DType::F32;
  if (t.isF16()) return DType::F16;
  if (t.isBF16()) return DType::BF16;
  if (t.isF64()) return DType::F64;
  if (t.isInteger(1)) return DType::Bool;
  if (t.isInteger(32)) return DType::I32;
  return DType::I64;
}

FailureOr<Entry *> Importer::entry(const NodeCtx &n, int k) {
  if (!n.has(k)) {
    (void)n.fail("input " + Twine(k) + " is missing");
    return failure();
  }
  auto it = values.find(n.node.input(k));
  if (it == values.end()) {
    (void)n.fail("input '" + n.node.input(k) +
                 "' is not defined by an earlier node, an initializer or a graph input");
    return failure();
  }
  Entry &e = it->second;
  if (e.kind == Entry::Poison) {
    (void)n.fail("input '" + n.node.input(k) + "' " + e.poison);
    return failure();
  }
  if (e.kind == Entry::LazyConst) {
    auto c = std::make_shared<ConstTensor>();
    std::string why;
    if (!readTensor(*e.init, baseDir, *c, why)) {
      (void)n.fail(why);
      return failure();
    }
    e.c = std::move(c);
    e.kind = Entry::Const;
  }
  if (e.kind == Entry::Const && !e.c) {
    // Too large to hold whole: every consumer but an elementwise fold reads
    // it as the emitted value.
    e.v = materialize(e, n.loc);
    e.kind = Entry::Val;
  }
  return &e;
}

std::pair<const ConstTensor *, shapes::Shape> Importer::reducedConst(const NodeCtx &n, int k) {
  if (n.has(k)) {
    auto it = values.find(n.node.input(k));
    if (it != values.end() && it->second.reduced)
      return {it->second.reduced.get(), it->second.shape};
  }
  const ConstTensor *c = maybeConst(n, k);
  if (!c)
    return {nullptr, {}};
  // Reduced on first use by an elementwise fold, so that a product of two
  // (a [B, 1, T, 1] and a [B, 1, 1, T] position table) stays small.
  Entry &e = values.find(n.node.input(k))->second;
  // Shared when nothing compresses: a [T, T] mask is not copied.
  e.reduced = c->shape.size() >= 2 && c->numel() >= 64 && hasUniformDim(*c)
                  ? std::make_shared<ConstTensor>(compressUniformDims(*c))
                  : e.c;
  return {e.reduced.get(), e.shape};
}

void Importer::setReducedConst(const NodeCtx &n, int k, ConstTensor reduced,
                               ArrayRef<int64_t> shape) {
  if (!n.hasOutput(k))
    return;
  if (foldable(shape)) {
    setConst(n, k, reduced.shape == shapes::Shape(shape.begin(), shape.end())
                       ? std::move(reduced)
                       : foldBroadcast(reduced, shape));
    return;
  }
  Entry e;
  e.kind = Entry::Const;
  e.dtype = reduced.dtype;
  e.shape = shapes::Shape(shape.begin(), shape.end());
  e.reduced = std::make_shared<ConstTensor>(hasUniformDim(reduced) ? compressUniformDims(reduced)
                                                                    : std::move(reduced));
  values[n.node.output(k)] = std::move(e);
}

const ConstTensor *Importer::maybeConst(const NodeCtx &n, int k) {
  if (!n.has(k))
    return nullptr;
  auto it = values.find(n.node.input(k));
  if (it == values.end() ||
      (it->second.kind != Entry::Const && it->second.kind != Entry::LazyConst))
    return nullptr;
  auto e = entry(n, k);
  return succeeded(e) ? (*e)->c.get() : nullptr;
}

FailureOr<const ConstTensor *> Importer::constIn(const NodeCtx &n, int k, StringRef role) {
  auto e = entry(n, k);
  if (failed(e))
    return failure();
  if ((*e)->kind != Entry::Const) {
    (void)n.fail("input '" + n.node.input(k) + "' (" + role +
                 ") must be a constant once the dynamic dims are bound");
    return failure();
  }
  return (*e)->c.get();
}

FailureOr<Value> Importer::valueIn(const NodeCtx &n, int k) {
  auto e = entry(n, k);
  if (failed(e))
    return failure();
  if ((*e)->kind == Entry::Const || (*e)->kind == Entry::Param)
    if (failed(elementType((*e)->dtype, &n, "input '" + n.node.input(k) + "'")))
      return failure();
  return materialize(**e, n.loc);
}

Value Importer::materializeConst(const ConstTensor &c, Location loc) {
  Type elt = *elementType(c.dtype, nullptr, "constant");
  auto type = tensorType(c.shape, elt);
  DenseElementsAttr attr;
  bool splat = c.numel() > 0;
  for (int64_t k = 1; k < c.numel() && splat; ++k)
    splat = c.isFloat() ? c.f[k] == c.f[0] : c.i[k] == c.i[0];
  int64_t n = splat ? 1 : c.numel();
  auto splatType = splat ? tensorType({}, elt) : type;
  if (elt.isF32()) {
    std::vector<float> v(c.f.begin(), c.f.begin() + n);
    attr = DenseElementsAttr::get(splatType, llvm::ArrayRef(v));
  } else if (elt.isF64()) {
    attr = DenseElementsAttr::get(splatType, llvm::ArrayRef(c.f.data(), n));
  } else if (isa<FloatType>(elt)) {
    SmallVector<APFloat> v;
    for (int64_t k = 0; k < n; ++k) {
      APFloat f((float)c.f[k]);
      bool lost;
      f.convert(cast<FloatType>(elt).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      v.push_back(f);
    }
    attr = DenseElementsAttr::get(splatType, v);
  } else if (elt.isInteger(1)) {
    SmallVector<bool> v(c.i.begin(), c.i.begin() + n);
    attr = DenseElementsAttr::get(splatType, llvm::ArrayRef(v));
  } else if (elt.isInteger(32)) {
    std::vector<int32_t> v(c.i.begin(), c.i.begin() + n);
    attr = DenseElementsAttr::get(splatType, llvm::ArrayRef(v));
  } else {
    attr = DenseElementsAttr::get(splatType, llvm::ArrayRef(c.i.data(), n));
  }
  if (splat)
    attr = DenseElementsAttr::get(type, attr.getSplatValue<Attribute>());
  return b.create<pm::ConstantOp>(loc, cast<ElementsAttr>(attr));
}

Value Importer::materialize(Entry &e, Location loc) {
  if (e.v)
    return e.v;
  if (e.kind == Entry::Const && !e.c) {
    Value small = materializeConst(*e.reduced, loc);
    e.v = b.create<pm::BroadcastOp>(loc, tensorType(e.shape, cast<RankedTensorType>(
                                                               small.getType()).getElementType()),
                                    small);
    return e.v;
  }
  if (e.kind == Entry::Const) {
    e.v = materializeConst(*e.c, loc);
    return e.v;
  }
  // Param: declare the symbol on first use (keeps declaration order = use order).
  auto type = tensorType(e.shape, *elementType(e.dtype, nullptr, "parameter"));
  pm::ParamOp &param = params[e.paramName];
  if (!param) {
    OpBuilder::InsertionGuard guard(b);
    if (lastParam)
      b.setInsertionPointAfter(lastParam);
    else
      b.setInsertionPointToStart(module.getBody());
    param = b.create<pm::ParamOp>(NameLoc::get(b.getStringAttr(e.paramName),
                                               FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0)),
                                  e.paramName, type,
                                  b.getStringAttr(e.init->name()));
    lastParam = param;
  }
  e.v = b.create<pm::GetParamOp>(loc, type, e.paramName);
  return e.v;
}

Entry Importer::constEntry(ConstTensor c) {
  Entry e;
  e.kind = Entry::Const;
  e.shape = c.shape;
  e.dtype = c.dtype;
  e.c = std::make_shared<ConstTensor>(std::move(c));
  return e;
}

Entry Importer::valueEntry(Value v) {
  Entry e;
  e.kind = Entry::Val;
  e.v = v;
  e.shape = shapeOf(v);
  e.dtype = dtypeOf(cast<RankedTensorType>(v.getType()).getElementType());
  return e;
}

void Importer::setConst(const NodeCtx &n, int k, ConstTensor c) {
  if (n.hasOutput(k))
    values[n.node.output(k)] = constEntry(std::move(c));
}

void Importer::setValue(const NodeCtx &n, int k, Value v) {
  if (n.hasOutput(k))
    values[n.node.output(k)] = valueEntry(v);
}

void Importer::releaseConstant(const std::string &name) {
  auto it = values.find(name);
  if (it == values.end() || it->second.kind != Entry::Const)
    return;
  Entry &e = it->second;
  e.c.reset();
  e.reduced.reset();
  if (e.v) {
    e.kind = Entry::Val;
  } else {
    e.kind = Entry::Poison;
    e.poison = "was released after its last reader (an importer bug)";
  }
}

void Importer::setPoison(const NodeCtx &n, int k, const std::string &why) {
  if (!n.hasOutput(k))
    return;
  Entry e;
  e.kind = Entry::Poison;
  e.poison = why;
  values[n.node.output(k)] = std::move(e);
}

//===----------------------------------------------------------------------===//
// Op handlers
//===----------------------------------------------------------------------===//

using Handler = std::function<LogicalResult(Importer &, NodeCtx &)>;

/// Emits op T after checking the shapes the shared shape functions compute.
template <typename OpT, typename... Args>
Value create(Importer &imp, NodeCtx &n, Type resultType, Args &&...args) {
  return imp.b.create<OpT>(n.loc, resultType, std::forward<Args>(args)...);
}

Type eltOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

/// Whether two shapes hold the same (non-overflowing) number of elements.
bool sameNumel(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  auto na = shapes::checkedNumElements(a), nb = shapes::checkedNumElements(b);
  return na && nb && *na == *nb;
}

FailureOr<Value> reshapeTo(Importer &imp, NodeCtx &n, Value v, ArrayRef<int64_t> shape) {
  if (Importer::shapeOf(v) == shapes::Shape(shape.begin(), shape.end()))
    return v;
  if (!sameNumel(Importer::shapeOf(v), shape))
    return n.fail("cannot reshape " + shapes::str(Importer::shapeOf(v)) + " to " +
                  shapes::str(shape));
  return create<pm::ReshapeOp>(imp, n, imp.tensorType(shape, eltOf(v)), v);
}

/// Folds an elementwise binary node whose inputs are both constants. True when
/// folded; false when an input is computed or the result is too large to fold.
FailureOr<bool> tryFoldBinary(Importer &imp, NodeCtx &n, BinaryFn ffn, BinaryIntFn ifn,
                              bool compare, bool mixedTypes) {
  auto [ca, la] = imp.reducedConst(n, 0);
  auto [cb, lb] = imp.reducedConst(n, 1);
  if (!ca || !cb)
    return false;
  std::string why;
  auto shape = shapes::broadcast(la, lb, why);
  if (!shape)
    return n.fail(why);
  if (ca->dtype != cb->dtype && !mixedTypes)
    return n.fail("operand element types differ");
  // Computed on the reduced forms: their broadcast is the result's reduced form.
  auto reducedShape = shapes::broadcast(ca->shape, cb->shape, why);
  if (!reducedShape || !foldable(*reducedShape))
    return false;
  DType out = compare ? DType::Bool : ca->dtype;
  auto r = foldBinary(*ca, *cb, out, ffn, ifn, why);
  if (!r)
    return n.fail(why);
  imp.setReducedConst(n, 0, std::move(*r), *shape);
  return true;
}

/// Why an op without a pmesh counterpart stops the import on a computed input.
LogicalResult foldOnlyError(NodeCtx &n) {
  return n.fail("is supported on constants only (folded at import), not on a computed value "
                "(computed from a buffer stored as an initializer? --constant-initializers="
                "NAME keeps it a constant)");
}

/// Builds an elementwise binary result of type `t` from operands of one
/// element type (broadcast by the ops themselves).
using BinaryEmitter = function_ref<Value(Importer &, NodeCtx &, Type t, Value lhs, Value rhs)>;

/// An elementwise binary node: folded on constants, else `emit`ted on its
/// operands (a Pow exponent of another type cast to the base's first).
LogicalResult binaryWith(Importer &imp, NodeCtx &n, BinaryFn ffn, BinaryIntFn ifn, bool compare,
                         bool isPow, BinaryEmitter emit) {
  auto folded = tryFoldBinary(imp, n, ffn, ifn, compare, isPow);
  if (failed(folded))
    return failure();
  if (*folded)
    return success();
  std::string why;
  auto a = imp.valueIn(n, 0), bv = imp.valueIn(n, 1);
  if (failed(a) || failed(bv))
    return failure();
  Value lhs = *a, rhs = *bv;
  if (eltOf(lhs) != eltOf(rhs)) {
    // Pow allows an exponent of another type; everything else must agree.
    if (!isPow)
      return n.fail("operand element types differ");
    rhs = create<pm::CastOp>(imp, n, imp.tensorType(Importer::shapeOf(rhs), eltOf(lhs)), rhs);
  }
  auto shape = shapes::broadcast(Importer::shapeOf(lhs), Importer::shapeOf(rhs), why);
  if (!shape)
    return n.fail(why);
  Type elt = compare ? imp.b.getI1Type() : eltOf(lhs);
  imp.setValue(n, 0, emit(imp, n, imp.tensorType(*shape, elt), lhs, rhs));
  return success();
}

/// Inserts a broadcast-free elementwise binary op, folding constants.
template <typename OpT>
LogicalResult binary(Importer &imp, NodeCtx &n, BinaryFn ffn, BinaryIntFn ifn,
                     bool compare = false) {
  return binaryWith(imp, n, ffn, ifn, compare, std::is_same_v<OpT, pm::PowOp>,
                    [](Importer &imp, NodeCtx &n, Type t, Value lhs, Value rhs) -> Value {
                      return create<OpT>(imp, n, t, lhs, rhs);
                    });
}

template <typename OpT>
LogicalResult unary(Importer &imp, NodeCtx &n, double (*fn)(double)) {
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    imp.setConst(n, 0, foldUnary(*c, fn));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  if (!isa<FloatType>(eltOf(*x)) && !std::is_same_v<OpT, pm::NegOp>)
    return n.fail("expects a floating-point input");
  imp.setValue(n, 0, create<OpT>(imp, n, x->getType(), *x));
  return success();
}

/// An elementwise function without a pmesh op (Cos, Sin): folded when its
/// input is a constant (rotary position tables computed from Range), an
/// error naming the node otherwise.
LogicalResult foldOnlyUnary(Importer &imp, NodeCtx &n, double (*fn)(double)) {
  const ConstTensor *c = imp.maybeConst(n, 0);
  if (!c)
    return foldOnlyError(n);
  imp.setConst(n, 0, foldUnary(*c, fn));
  return success();
}

/// 1 / x: folded on a constant, else a pmesh.div of a scalar 1 (torch.rsqrt
/// exports as Reciprocal(Sqrt(x))).
/// Input 0 of an elementwise node written as a composition of pmesh ops:
/// a floating-point activation, or a failure naming the node.
FailureOr<Value> floatActivationIn(Importer &imp, NodeCtx &n) {
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  if (!isa<FloatType>(eltOf(*x)))
    return n.fail("expects a floating-point input");
  return *x;
}

LogicalResult importReciprocal(Importer &imp, NodeCtx &n) {
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    if (!c->isFloat())
      return n.fail("expects a floating-point input");
    imp.setConst(n, 0, foldUnary(*c, [](double x) { return 1.0 / x; }));
    return success();
  }
  auto x = floatActivationIn(imp, n);
  if (failed(x))
    return failure();
  ConstTensor one = ConstTensor::zeros(DType::F32, {});
  one.set(0, 1.0);
  Value oneV = imp.materializeConst(one, n.loc);
  if (eltOf(oneV) != eltOf(*x))
    oneV = create<pm::CastOp>(imp, n, RankedTensorType::get({}, eltOf(*x)), oneV);
  imp.setValue(n, 0, create<pm::DivOp>(imp, n, x->getType(), oneV, *x));
  return success();
}

/// Axes from the attribute (old opsets) or the optional input (new opsets).
FailureOr<std::optional<std::vector<int64_t>>> axesOf(Importer &imp, NodeCtx &n,
                                                      int64_t inputFromOpset, int inputIdx) {
  if (n.opset >= inputFromOpset) {
    if (n.attr("axes"))
      return n.fail("'axes' is an input from opset " + Twine(inputFromOpset) +
                    ", not an attribute");
    if (!n.has(inputIdx))
      return std::optional<std::vector<int64_t>>();
    auto c = imp.constIn(n, inputIdx, "axes");
    if (failed(c))
      return failure();
    return std::optional<std::vector<int64_t>>((*c)->ints());
  }
  return n.attrInts("axes");
}

LogicalResult normalizeAxes(NodeCtx &n, std::vector<int64_t> &axes, int64_t rank) {
  for (int64_t &a : axes) {
    auto na = shapes::normalizeAxis(a, rank);
    if (!na)
      return n.fail("axis " + Twine(a) + " out of range for rank " + Twine(rank));
    a = *na;
  }
  return success();
}

LogicalResult importReduce(Importer &imp, NodeCtx &n, bool mean) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  int64_t rank = (*e)->shape.size();
  auto axesOr = axesOf(imp, n, mean ? 18 : 13, 1);
  if (failed(axesOr))
    return failure();
  std::vector<int64_t> axes;
  if (*axesOr && !(*axesOr)->empty())
    axes = **axesOr;
  else if (n.attrInt("noop_with_empty_axes", 0)) {
    if ((*e)->kind == Entry::Const)
      imp.setConst(n, 0, *(*e)->c);
    else
      imp.setValue(n, 0, *imp.valueIn(n, 0));
    return success();
  } else
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  if (failed(normalizeAxes(n, axes, rank)))
    return failure();
  bool keep = n.attrInt("keepdims", 1) != 0;
  std::string why;
  auto shape = shapes::reduce((*e)->shape, axes, keep, why);
  if (!shape)
    return n.fail(why);
  if ((*e)->kind == Entry::Const) {
    imp.setConst(n, 0, foldReduce(*(*e)->c, axes, keep, mean));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  auto type = imp.tensorType(*shape, eltOf(*x));
  Value r = mean ? (Value)imp.b.create<pm::ReduceMeanOp>(n.loc, type, *x, axes, keep)
                 : (Value)imp.b.create<pm::ReduceSumOp>(n.loc, type, *x, axes, keep);
  imp.setValue(n, 0, r);
  return success();
}

/// Constant / value-agnostic reshape used by Reshape, Squeeze, Unsqueeze.
LogicalResult reshapeOutput(Importer &imp, NodeCtx &n, Entry &in, ArrayRef<int64_t> shape) {
  if (!sameNumel(shape, in.shape))
    return n.fail("cannot reshape " + shapes::str(in.shape) + " to " + shapes::str(shape));
  if (in.kind == Entry::Const) {
    imp.setConst(n, 0, foldReshape(*in.c, shape));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  auto r = reshapeTo(imp, n, *x, shape);
  if (failed(r))
    return failure();
  imp.setValue(n, 0, *r);
  return success();
}

LogicalResult importReshape(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  auto s = imp.constIn(n, 1, "shape");
  if (failed(e) || failed(s))
    return failure();
  std::vector<int64_t> target = (*s)->ints();
  bool allowZero = n.opset >= 14 && n.attrInt("allowzero", 0);
  int64_t inferred = -1, known = 1;
  for (size_t d = 0; d < target.size(); ++d) {
    if (target[d] == 0 && !allowZero) {
      if (d >= (*e)->shape.size())
        return n.fail("shape has 0 at dim " + Twine(d) + " beyond the input's rank");
      target[d] = (*e)->shape[d];
    }
    if (target[d] == -1) {
      if (inferred >= 0)
        return n.fail("shape has more than one -1");
      inferred = d;
    } else if (target[d] < 0)
      return n.fail("shape has a negative dim " + Twine(target[d]));
    else if (llvm::MulOverflow(known, target[d], known))
      return n.fail("shape " + shapes::str(target) + " has too many elements");
  }
  auto totalOr = shapes::checkedNumElements((*e)->shape);
  if (!totalOr)
    return n.fail("input " + shapes::str((*e)->shape) + " has too many elements");
  int64_t total = *totalOr;
  if (inferred >= 0) {
    if (known == 0 || total % known)
      return n.fail("cannot reshape " + shapes::str((*e)->shape) + " to a shape with -1 and " +
                    Twine(known) + " known elements");
    target[inferred] = total / known;
  }
  return reshapeOutput(imp, n, **e, target);
}

LogicalResult importUnsqueeze(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  auto axesOr = axesOf(imp, n, 13, 1);
  if (failed(axesOr))
    return failure();
  if (!*axesOr)
    return n.fail("needs axes");
  std::vector<int64_t> axes = **axesOr;
  int64_t outRank = (*e)->shape.size() + axes.size();
  if (failed(normalizeAxes(n, axes, outRank)))
    return failure();
  std::vector<bool> isNew(outRank, false);
  for (int64_t a : axes) {
    if (isNew[a])
      return n.fail("repeated axis " + Twine(a));
    isNew[a] = true;
  }
  shapes::Shape out;
  size_t src = 0;
  for (int64_t d = 0; d < outRank; ++d)
    out.push_back(isNew[d] ? 1 : (*e)->shape[src++]);
  return reshapeOutput(imp, n, **e, out);
}

LogicalResult importSqueeze(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  auto axesOr = axesOf(imp, n, 13, 1);
  if (failed(axesOr))
    return failure();
  int64_t rank = (*e)->shape.size();
  std::vector<bool> drop(rank, false);
  if (*axesOr) {
    std::vector<int64_t> axes = **axesOr;
    if (failed(normalizeAxes(n, axes, rank)))
      return failure();
    for (int64_t a : axes) {
      if ((*e)->shape[a] != 1)
        return n.fail("cannot squeeze axis " + Twine(a) + " of size " + Twine((*e)->shape[a]));
      drop[a] = true;
    }
  } else
    for (int64_t d = 0; d < rank; ++d)
      drop[d] = (*e)->shape[d] == 1;
  shapes::Shape out;
  for (int64_t d = 0; d < rank; ++d)
    if (!drop[d])
      out.push_back((*e)->shape[d]);
  return reshapeOutput(imp, n, **e, out);
}

LogicalResult importIdentity(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  if (!n.hasOutput(0))
    return success();
  if ((*e)->kind == Entry::Param && (*e)->init->name() == n.node.input(0)) {
    // Exporters deduplicate equal initial values behind Identity: each such
    // output is a parameter of its own that starts from the same values. (An
    // Identity of such an output is only another name for it.)
    Entry p = **e;
    p.paramName = n.node.output(0);
    p.v = nullptr;
    imp.values[n.node.output(0)] = std::move(p);
    return success();
  }
  imp.values[n.node.output(0)] = **e;
  return success();
}

LogicalResult importConstant(Importer &imp, NodeCtx &n) {
  ConstTensor c;
  std::string why;
  if (n.attr("value")) {
    const onnx::TensorProto *t = n.attrTensor("value");
    if (!t)
      return n.fail(n.attrError);
    if (!readTensor(*t, imp.baseDir, c, why))
      return n.fail(why);
  } else if (n.attr("value_float")) {
    c = ConstTensor::zeros(DType::F32, {});
    c.set(0, n.attrFloat("value_float", 0.0));
  } else if (n.attr("value_floats")) {
    auto *a = n.typedAttr("value_floats", onnx::AttributeProto::FLOATS, "a list of FLOATS");
    if (!a)
      return n.fail(n.attrError);
    c = ConstTensor::zeros(DType::F32, {(int64_t)a->floats_size()});
    for (int k = 0; k < a->floats_size(); ++k)
      c.set(k, a->floats(k));
  } else if (n.attr("value_int")) {
    c = ConstTensor::scalarInt(n.attrInt("value_int", 0));
  } else if (n.attr("value_ints")) {
    c = ConstTensor::vectorInt(n.attrInts("value_ints").value_or(std::vector<int64_t>{}));
  } else if (n.attr("sparse_value") || n.attr("value_string") || n.attr("value_strings")) {
    return n.fail("sparse and string constants are not supported");
  } else {
    return n.fail("has no value attribute");
  }
  imp.setConst(n, 0, std::move(c));
  return success();
}

/// Cast, and CastLike (the type of its second input).
LogicalResult importCast(Importer &imp, NodeCtx &n) {
  DType to = (DType)n.attrInt("to", 0);
  if (n.node.op_type() == "CastLike") {
    auto like = imp.entry(n, 1);
    if (failed(like))
      return failure();
    to = (*like)->dtype;
  }
  if (!isSupportedType(to))
    return n.fail("unsupported target type " + Twine((int)to));
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    imp.setConst(n, 0, foldCast(*c, to));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  auto elt = imp.elementType(to, &n, "the cast result");
  if (failed(elt))
    return failure();
  if (eltOf(*x) == *elt) {
    imp.setValue(n, 0, *x);
    return success();
  }
  imp.setValue(n, 0,
               create<pm::CastOp>(imp, n, imp.tensorType(Importer::shapeOf(*x), *elt), *x));
  return success();
}

LogicalResult importShape(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  int64_t rank = (*e)->shape.size();
  int64_t start = n.attrInt("start", 0), end = n.attrInt("end", rank);
  auto clampAxis = [&](int64_t a) {
    if (a < 0)
      a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  start = clampAxis(start);
  end = clampAxis(end);
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back((*e)->shape[d]);
  imp.setConst(n, 0, ConstTensor::vectorInt(dims));
  return success();
}

LogicalResult importLookup(Importer &imp, NodeCtx &n, int64_t axis);

/// `x` gathered along `axis` at constant indices `ix` (of shape `idxShape`):
/// a slice when they are one contiguous run, else (a 2-D float table along
/// axis 0: OPT's positions, offset by 2 and repeated per row) an embedding
/// lookup of the constant indices.
FailureOr<Value> gatherConstIndices(Importer &imp, NodeCtx &n, Value x, int64_t axis,
                                    ArrayRef<int64_t> idxShape, std::vector<int64_t> ix) {
  shapes::Shape in = Importer::shapeOf(x);
  int64_t dim = in[axis];
  for (int64_t &i : ix)
    if (i < 0)
      i += dim;
  // Out of range is ONNX's error, and the usual cause is a sequence longer
  // than a position table (seq=65 against 64 positions): say which index.
  for (int64_t i : ix)
    if (i < 0 || i >= dim)
      return n.fail("constant index " + Twine(i < 0 ? i - dim : i) +
                    " is out of range for axis " + Twine(axis) + " of size " + Twine(dim) +
                    " (a sequence longer than a position table?)");
  shapes::Shape out(in.begin(), in.begin() + axis);
  out.append(idxShape.begin(), idxShape.end());
  out.append(in.begin() + axis + 1, in.end());
  bool contiguous = !ix.empty();
  for (size_t k = 0; k < ix.size(); ++k)
    contiguous &= ix[k] == ix[0] + (int64_t)k;
  if (!contiguous) {
    if (axis != 0 || in.size() != 2 || !isa<FloatType>(eltOf(x)))
      return n.fail("constant indices that are not one contiguous range are supported only "
                    "as an embedding lookup (2-D float table, axis 0)");
    ConstTensor ids = ConstTensor::zeros(DType::I64, idxShape);
    ids.i = ix;
    Value idsValue = imp.materializeConst(ids, n.loc);
    return create<pm::EmbeddingOp>(imp, n, imp.tensorType(out, eltOf(x)), x, idsValue);
  }
  SmallVector<int64_t> starts(in.size(), 0), limits(in.begin(), in.end()), strides(in.size(), 1);
  starts[axis] = ix[0];
  limits[axis] = ix[0] + ix.size();
  shapes::Shape sliced = in;
  sliced[axis] = ix.size();
  Value sl = create<pm::SliceOp>(imp, n, imp.tensorType(sliced, eltOf(x)), x, starts, limits,
                                 strides);
  return reshapeTo(imp, n, sl, out);
}

LogicalResult importGather(Importer &imp, NodeCtx &n) {
  auto data = imp.entry(n, 0);
  auto idx = imp.entry(n, 1);
  if (failed(data) || failed(idx))
    return failure();
  int64_t axis = n.attrInt("axis", 0);
  std::string why;
  if ((*data)->kind == Entry::Const && (*idx)->kind == Entry::Const) {
    if (auto ax = shapes::normalizeAxis(axis, (*data)->shape.size())) {
      shapes::Shape out((*data)->shape.begin(), (*data)->shape.begin() + *ax);
      out.append((*idx)->shape.begin(), (*idx)->shape.end());
      out.append((*data)->shape.begin() + *ax + 1, (*data)->shape.end());
      if (!foldable(out))
        return n.fail("constant Gather result " + shapes::str(out) + " is too large to fold");
    }
    auto r = foldGather(*(*data)->c, *(*idx)->c, axis, why);
    if (!r)
      return n.fail(why);
    imp.setConst(n, 0, std::move(*r));
    return success();
  }
  auto ax = shapes::normalizeAxis(axis, (*data)->shape.size());
  if (!ax)
    return n.fail("axis " + Twine(axis) + " out of range");
  if ((*idx)->kind == Entry::Const) {
    auto x = imp.valueIn(n, 0);
    if (failed(x))
      return failure();
    auto r = gatherConstIndices(imp, n, *x, *ax, (*idx)->shape, (*idx)->c->ints());
    if (failed(r))
      return failure();
    imp.setValue(n, 0, *r);
    return success();
  }
  return importLookup(imp, n, *ax);
}

/// Gather with indices that are not one contiguous run (data-dependent, or
/// constants that are not): an embedding lookup into a 2-D table along axis 0.
LogicalResult importLookup(Importer &imp, NodeCtx &n, int64_t axis) {
  auto data = imp.entry(n, 0);
  if (failed(data))
    return failure();
  std::string why;
  if (axis != 0 || (*data)->shape.size() != 2)
    return n.fail("data-dependent Gather is supported only as an embedding lookup (2-D table, "
                  "axis 0)");
  bool tableIsParam = (*data)->kind == Entry::Param;
  std::string paramName = (*data)->paramName;
  auto table = imp.valueIn(n, 0);
  auto ids = imp.valueIn(n, 1);
  if (failed(table) || failed(ids))
    return failure();
  if (!eltOf(*ids).isInteger(64) && !eltOf(*ids).isInteger(32))
    return n.fail("embedding indices must be int32 or int64");
  if (!isa<FloatType>(eltOf(*table)))
    return n.fail("data-dependent Gather is supported only as an embedding lookup into a "
                  "floating-point table");
  auto shape = shapes::embedding(Importer::shapeOf(*table), Importer::shapeOf(*ids), why);
  if (!shape)
    return n.fail(why);
  if (tableIsParam)
    imp.embeddingParams.insert(paramName);
  imp.setValue(n, 0,
               create<pm::EmbeddingOp>(imp, n, imp.tensorType(*shape, eltOf(*table)), *table, *ids));
  return success();
}

LogicalResult importConcat(Importer &imp, NodeCtx &n) {
  int64_t axis = n.attrInt("axis", 0);
  if (!n.attr("axis"))
    return n.fail("needs the 'axis' attribute");
  bool allConst = true;
  SmallVector<const ConstTensor *> cs;
  for (int k = 0; k < n.numInputs(); ++k) {
    const ConstTensor *c = imp.maybeConst(n, k);
    allConst &= c != nullptr;
    cs.push_back(c);
  }
  std::string why;
  SmallVector<shapes::Shape> constShapes;
  for (const ConstTensor *c : cs)
    if (c)
      constShapes.push_back(c->shape);
  auto constShape = allConst && !cs.empty() ? shapes::concat(constShapes, axis, why)
                                            : std::nullopt;
  if (allConst && !cs.empty() && (!constShape || foldable(*constShape))) {
    for (const ConstTensor *c : cs)
      if (c->dtype != cs[0]->dtype)
        return n.fail("inputs differ in element type");
    auto r = foldConcat(cs, axis, why);
    if (!r)
      return n.fail(why);
    imp.setConst(n, 0, std::move(*r));
    return success();
  }
  SmallVector<Value> all;
  SmallVector<shapes::Shape> shapesIn;
  for (int k = 0; k < n.numInputs(); ++k) {
    auto v = imp.valueIn(n, k);
    if (failed(v))
      return failure();
    all.push_back(*v);
    shapesIn.push_back(Importer::shapeOf(*v));
  }
  auto shape = shapes::concat(shapesIn, axis, why);
  if (!shape)
    return n.fail(why);
  for (Value v : all)
    if (eltOf(v) != eltOf(all[0]))
      return n.fail("inputs differ in element type");
  int64_t ax = *shapes::normalizeAxis(axis, shape->size());
  // ONNX allows empty inputs in Concat; they contribute nothing.
  SmallVector<Value> ins;
  for (Value v : all)
    if (!llvm::is_contained(Importer::shapeOf(v), 0))
      ins.push_back(v);
  Type elt = eltOf(all[0]);
  Value r;
  if (ins.empty())
    r = imp.materializeConst(ConstTensor::zeros(dtypeOf(elt), *shape), n.loc);
  else if (ins.size() == 1)
    r = ins[0];
  else
    r = create<pm::ConcatOp>(imp, n, imp.tensorType(*shape, elt), ins, ax);
  imp.setValue(n, 0, r);
  return success();
}

LogicalResult importSlice(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  shapes::Shape in = (*e)->shape;
  int64_t rank = in.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset < 10) {
    if (!n.attr("starts") || !n.attr("ends"))
      return n.fail("needs the 'starts' and 'ends' attributes below opset 10");
    starts = n.attrInts("starts").value_or(std::vector<int64_t>{});
    ends = n.attrInts("ends").value_or(std::vector<int64_t>{});
    axes = n.attrInts("axes").value_or(std::vector<int64_t>{});
  } else {
    if (n.attr("starts") || n.attr("ends"))
      return n.fail("'starts' and 'ends' are inputs from opset 10, not attributes");
    auto s = imp.constIn(n, 1, "starts"), en = imp.constIn(n, 2, "ends");
    if (failed(s) || failed(en))
      return failure();
    starts = (*s)->ints();
    ends = (*en)->ints();
    if (n.has(3)) {
      auto a = imp.constIn(n, 3, "axes");
      if (failed(a))
        return failure();
      axes = (*a)->ints();
    }
    if (n.has(4)) {
      auto st = imp.constIn(n, 4, "steps");
      if (failed(st))
        return failure();
      steps = (*st)->ints();
    }
  }
  if (starts.size() != ends.size())
    return n.fail("starts and ends differ in length");
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(k);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return n.fail("starts, ends, axes and steps differ in length");
  SmallVector<int64_t> lo(rank, 0), hi(in.begin(), in.end()), st(rank, 1);
  std::vector<bool> seen(rank, false);
  for (size_t k = 0; k < axes.size(); ++k) {
    auto ax = shapes::normalizeAxis(axes[k], rank);
    if (!ax)
      return n.fail("slice axis " + Twine(axes[k]) + " out of range");
    if (seen[*ax])
      return n.fail("slice axis " + Twine(axes[k]) + " is repeated");
    seen[*ax] = true;
    int64_t dim = in[*ax];
    if (steps[k] <= 0)
      return n.fail("slices with a step <= 0 are not supported");
    // ONNX semantics: negative indices count from the end, then clamp.
    auto clampIdx = [&](int64_t v) {
      if (v < 0)
        v += dim;
      return std::clamp<int64_t>(v, 0, dim);
    };
    lo[*ax] = clampIdx(starts[k]);
    hi[*ax] = std::max(lo[*ax], clampIdx(ends[k]));
    st[*ax] = steps[k];
  }
  std::string why;
  auto shape = shapes::slice(in, lo, hi, st, why);
  if (!shape)
    return n.fail(why);
  if ((*e)->kind == Entry::Const) {
    imp.setConst(n, 0, foldSlice(*(*e)->c, lo, hi, st));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  Value r = *shape == in ? *x
                         : create<pm::SliceOp>(imp, n, imp.tensorType(*shape, eltOf(*x)), *x, lo,
                                               hi, st);
  imp.setValue(n, 0, r);
  return success();
}

LogicalResult importRange(Importer &imp, NodeCtx &n) {
  auto s = imp.constIn(n, 0, "start"), l = imp.constIn(n, 1, "limit"),
       d = imp.constIn(n, 2, "delta");
  if (failed(s) || failed(l) || failed(d))
    return failure();
  if ((*s)->numel() != 1 || (*l)->numel() != 1 || (*d)->numel() != 1)
    return n.fail("start, limit and delta must be scalars");
  double start = (*s)->asDouble(0), limit = (*l)->asDouble(0), delta = (*d)->asDouble(0);
  if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    return n.fail("start, limit and delta must be finite");
  if (delta == 0)
    return n.fail("delta must not be 0");
  // Opset 27's stash_type 0 computes a half-precision range in its own type;
  // the values here are computed wider and rounded once (stash_type 1).
  if (((*s)->dtype == DType::F16 || (*s)->dtype == DType::BF16) && n.attrInt("stash_type", 1) == 0)
    return n.fail("stash_type 0 (a half-precision range accumulated in its own type) is not "
                  "supported");
  double steps = std::ceil((limit - start) / delta);
  if (steps > (double)kFoldLimit)
    return n.fail("range of more than " + Twine(kFoldLimit) + " elements is too large");
  int64_t count = std::max<int64_t>(0, (int64_t)steps);
  if (count > kFoldLimit)
    return n.fail("range of " + Twine(count) + " elements is too large");
  ConstTensor r = ConstTensor::zeros((*s)->dtype, {count});
  for (int64_t k = 0; k < count; ++k) {
    if (r.isFloat())
      r.set(k, start + k * delta);
    else
      r.setInt(k, (int64_t)((uint64_t)(*s)->asInt(0) + (uint64_t)k * (uint64_t)(*d)->asInt(0)));
  }
  imp.setConst(n, 0, std::move(r));
  return success();
}

/// Trilu of a constant (the causal mask torch.triu exports): folded. A
/// Trilu of a computed value has no pmesh op.
LogicalResult importTrilu(Importer &imp, NodeCtx &n) {
  auto x = imp.constIn(n, 0, "input");
  if (failed(x))
    return failure();
  int64_t k = 0;
  if (n.has(1)) {
    auto kt = imp.constIn(n, 1, "k");
    if (failed(kt))
      return failure();
    if ((*kt)->numel() != 1)
      return n.fail("k must be a scalar");
    k = (*kt)->asInt(0);
  }
  const ConstTensor &in = **x;
  if (in.shape.size() < 2)
    return n.fail("input must have at least 2 dimensions, has " + Twine(in.shape.size()));
  const bool upper = n.attrInt("upper", 1) != 0;
  ConstTensor r = in;
  const int64_t rows = in.shape[in.shape.size() - 2], cols = in.shape.back();
  for (int64_t e = 0; e < in.numel(); ++e) {
    int64_t i = (e / cols) % rows, j = e % cols;
    bool keep = upper ? j - i >= k : j - i <= k;
    if (!keep) {
      if (r.isFloat())
        r.set(e, 0.0);
      else
        r.setInt(e, 0);
    }
  }
  imp.setConst(n, 0, std::move(r));
  return success();
}

LogicalResult importConstantOfShape(Importer &imp, NodeCtx &n) {
  auto s = imp.constIn(n, 0, "shape");
  if (failed(s))
    return failure();
  std::vector<int64_t> shape = (*s)->ints();
  if (tooLarge(shape))
    return n.fail("shape " + shapes::str(shape) + " is negative or too large");
  for (int64_t d : shape)
    if (d < 0)
      return n.fail("negative dim in shape");
  ConstTensor value = ConstTensor::zeros(DType::F32, {1});
  std::string why;
  if (n.attr("value")) {
    const onnx::TensorProto *t = n.attrTensor("value");
    if (!t)
      return n.fail(n.attrError);
    if (!readTensor(*t, imp.baseDir, value, why))
      return n.fail(why);
  }
  if (value.numel() != 1)
    return n.fail("value must hold one element");
  if (!foldable(shape))
    return n.fail("constant of shape " + shapes::str(shape) + " is too large to fold");
  imp.setConst(n, 0, foldBroadcast(foldReshape(value, {}), shape));
  return success();
}

/// Tile (Bloom's ALiBi slopes repeated per sequence): folded on constants; on
/// activations, each axis gets a new one before it that is broadcast to its
/// repeat count, then the pairs merge: [d0, d1] -> [1, d0, 1, d1] ->
/// [r0, d0, r1, d1] -> [r0 * d0, r1 * d1].
LogicalResult importTile(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  auto r = imp.constIn(n, 1, "repeats");
  if (failed(e) || failed(r))
    return failure();
  std::vector<int64_t> repeats = (*r)->ints();
  shapes::Shape in = (*e)->shape;
  if (repeats.size() != in.size())
    return n.fail(Twine(repeats.size()) + " repeats for an input of rank " + Twine(in.size()));
  shapes::Shape split, spread, out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (repeats[d] < 0)
      return n.fail("repeat " + Twine(repeats[d]) + " is negative");
    split.append({1, in[d]});
    spread.append({repeats[d], in[d]});
    out.push_back(repeats[d] * in[d]);
  }
  if (tooLarge(spread))
    return n.fail("result " + shapes::str(out) + " is too large");
  if ((*e)->kind == Entry::Const && foldable(out)) {
    imp.setConst(n, 0, foldReshape(foldBroadcast(foldReshape(*(*e)->c, split), spread), out));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  auto lifted = reshapeTo(imp, n, *x, split);
  if (failed(lifted))
    return failure();
  Value wide = create<pm::BroadcastOp>(imp, n, imp.tensorType(spread, eltOf(*x)), *lifted);
  auto tiled = reshapeTo(imp, n, wide, out);
  if (failed(tiled))
    return failure();
  imp.setValue(n, 0, *tiled);
  return success();
}

LogicalResult importExpand(Importer &imp, NodeCtx &n) {
  auto s = imp.constIn(n, 1, "shape");
  if (failed(s))
    return failure();
  std::string why;
  std::vector<int64_t> target = (*s)->ints();
  for (int64_t d : target)
    if (d < 0)
      return n.fail("shape " + shapes::str(target) + " has a negative dim");
  if (tooLarge(target))
    return n.fail("shape " + shapes::str(target) + " is too large");
  // A constant is expanded in its reduced form: nothing is copied.
  if (auto [c, logical] = imp.reducedConst(n, 0); c) {
    auto shape = shapes::broadcast(logical, target, why);
    if (!shape)
      return n.fail(why);
    imp.setReducedConst(n, 0, *c, *shape);
    return success();
  }
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  auto shape = shapes::broadcast((*e)->shape, target, why);
  if (!shape)
    return n.fail(why);
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  Value r = *shape == Importer::shapeOf(*x)
                ? *x
                : create<pm::BroadcastOp>(imp, n, imp.tensorType(*shape, eltOf(*x)), *x);
  imp.setValue(n, 0, r);
  return success();
}

/// Comparisons and logic beyond pmesh's less, equal and not: folded on
/// constants (the masks exporters compute from positions, such as
/// transformers' packed-sequence check); on activations (a padding mask built
/// from an attention_mask input) written with less, equal, not and where.
enum class Logic { LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor };

template <typename Cmp> LogicalResult importLogic(Importer &imp, NodeCtx &n, Logic kind) {
  bool logical = kind == Logic::And || kind == Logic::Or || kind == Logic::Xor;
  const ConstTensor *ca = imp.maybeConst(n, 0), *cb = imp.maybeConst(n, 1);
  if (logical && ((ca && ca->dtype != DType::Bool) || (cb && cb->dtype != DType::Bool)))
    return n.fail("expects bool inputs");
  auto folded = tryFoldBinary(
      imp, n, [](double a, double b) { return double(Cmp()(a, b)); },
      [](int64_t a, int64_t b) { return int64_t(Cmp()(a, b)); }, /*compare=*/true, false);
  if (failed(folded))
    return failure();
  if (*folded)
    return success();
  auto a = imp.valueIn(n, 0), b = imp.valueIn(n, 1);
  if (failed(a) || failed(b))
    return failure();
  Type ea = eltOf(*a), eb = eltOf(*b);
  if (ea != eb)
    return n.fail("operand element types differ");
  if (logical && !ea.isInteger(1))
    return n.fail("expects bool inputs");
  // not(less(b, a)) is a <= b only where neither is NaN: integers only.
  if ((kind == Logic::LessOrEqual || kind == Logic::GreaterOrEqual) && !isa<IntegerType>(ea))
    return n.fail("is supported on floating-point values only when they are constants");
  std::string why;
  auto shape = shapes::broadcast(Importer::shapeOf(*a), Importer::shapeOf(*b), why);
  if (!shape)
    return n.fail(why);
  Type boolType = imp.tensorType(*shape, imp.b.getI1Type());
  auto less = [&](Value x, Value y) { return create<pm::LessOp>(imp, n, boolType, x, y); };
  auto negate = [&](Value x) { return create<pm::NotOp>(imp, n, boolType, x); };
  auto boolConst = [&](bool v) {
    ConstTensor c = ConstTensor::zeros(DType::Bool, {});
    c.i[0] = v;
    return imp.materializeConst(c, n.loc);
  };
  Value r;
  switch (kind) {
  case Logic::Greater: r = less(*b, *a); break;
  case Logic::LessOrEqual: r = negate(less(*b, *a)); break;
  case Logic::GreaterOrEqual: r = negate(less(*a, *b)); break;
  case Logic::And:
    r = create<pm::WhereOp>(imp, n, boolType, *a, *b, boolConst(false));
    break;
  case Logic::Or:
    r = create<pm::WhereOp>(imp, n, boolType, *a, boolConst(true), *b);
    break;
  case Logic::Xor:
    r = negate(create<pm::EqualOp>(imp, n, boolType, *a, *b));
    break;
  }
  imp.setValue(n, 0, r);
  return success();
}

struct LogicalXor {
  bool operator()(int64_t a, int64_t b) const { return !a != !b; }
};

/// Whether softmax(`scores`) along `axis` can never hold a NaN: true when no
/// constant -inf (or NaN) mask can hide a whole row, i.e. the scores are a
/// product with no mask, or that product plus a constant whose every row along
/// `axis` keeps a key that is not -inf. (Rows of finite scores plus a finite
/// fill such as finfo.min never give NaN either.)
bool softmaxRowsAlwaysDefined(Value scores, int64_t axis) {
  Operation *def = scores.getDefiningOp();
  if (def && isa<pm::MatMulOp, pm::MulOp, pm::DivOp>(def))
    return true;
  auto add = dyn_cast_or_null<pm::AddOp>(def);
  if (!add)
    return false;
  // The mask, broadcast or not (a large one is held reduced: see Entry).
  auto constantMask = [](Value v) {
    while (auto broadcast = v.getDefiningOp<pm::BroadcastOp>())
      v = broadcast.getInput();
    return v.getDefiningOp<pm::ConstantOp>();
  };
  auto mask = constantMask(add.getRhs());
  if (!mask)
    mask = constantMask(add.getLhs());
  auto values = mask ? dyn_cast<DenseElementsAttr>(mask.getValue()) : DenseElementsAttr();
  if (!values || !isa<FloatType>(values.getElementType()))
    return false;
  int64_t rank = Importer::shapeOf(scores).size();
  if (axis < 0)
    axis += rank;
  shapes::Shape shape = Importer::shapeOf(mask);
  std::vector<uint8_t> hidden;
  hidden.reserve(values.getNumElements());
  pm::forEachFloat(values, [&](double v) {
    hidden.push_back(std::isnan(v) || v == -INFINITY);
    return true;
  });
  if (!hidden.empty() && std::find(hidden.begin(), hidden.end(), 1) == hidden.end())
    return true;
  // The mask is aligned to the scores' last dims; without the softmax axis
  // every element is a row of its own.
  int64_t maskAxis = axis - (rank - (int64_t)shape.size());
  int64_t len = 1, inner = 1, outer = hidden.size();
  if (maskAxis >= 0) {
    len = shape[maskAxis];
    inner = shapes::numElements(ArrayRef<int64_t>(shape).drop_front(maskAxis + 1));
    outer = shapes::numElements(ArrayRef<int64_t>(shape).take_front(maskAxis));
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      bool visible = false;
      for (int64_t j = 0; j < len && !visible; ++j)
        visible = !hidden[(o * len + j) * inner + in];
      if (!visible)
        return false;
    }
  return true;
}

/// isnan(x) as not(x == x), exact under IEEE comparison.
Value emitIsNaN(Importer &imp, NodeCtx &n, Value x) {
  Type boolType = imp.tensorType(Importer::shapeOf(x), imp.b.getI1Type());
  return create<pm::NotOp>(imp, n, boolType, create<pm::EqualOp>(imp, n, boolType, x, x));
}

/// IsNaN: folded on constants, not(x == x) on activations. On a softmax output
/// it is PyTorch's guard of scaled_dot_product_attention, Where(IsNaN(p), 0, p),
/// for rows whose every key is masked: left to importWhere, which drops it where
/// no row can be (and keeps the attention raisable) or emits it.
LogicalResult importIsNaN(Importer &imp, NodeCtx &n) {
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    ConstTensor r = ConstTensor::zeros(DType::Bool, c->shape);
    for (int64_t k = 0; k < r.numel(); ++k)
      r.i[k] = c->isFloat() && std::isnan(c->f[k]);
    imp.setConst(n, 0, std::move(r));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  if (!isa<FloatType>(eltOf(*x))) { // integers are never NaN
    ConstTensor none = ConstTensor::zeros(DType::Bool, Importer::shapeOf(*x));
    if (!foldable(none.shape))
      return n.fail("result is too large to fold");
    imp.setConst(n, 0, std::move(none));
    return success();
  }
  if (!x->getDefiningOp<pm::SoftmaxOp>()) {
    imp.setValue(n, 0, emitIsNaN(imp, n, *x));
    return success();
  }
  imp.setPoison(n, 0, "is IsNaN of a softmax, supported only as the guard "
                      "Where(IsNaN(p), 0, p)");
  if (n.hasOutput(0))
    imp.nanTests[n.node.output(0)] = *x;
  return success();
}

/// The guard Where(IsNaN(p), 0, p) of a softmax p: p itself when no row of p
/// can be NaN, else the guard as where(not(p == p), 0, p).
LogicalResult importNaNGuard(Importer &imp, NodeCtx &n, Value probs) {
  const ConstTensor *zero = imp.maybeConst(n, 1);
  auto other = n.has(2) ? imp.valueIn(n, 2) : FailureOr<Value>(failure());
  if (!zero || zero->numel() != 1 || zero->asDouble(0) != 0.0 || failed(other) ||
      *other != probs)
    return n.fail("uses IsNaN of a softmax other than as the guard Where(IsNaN(p), 0, p)");
  auto softmax = probs.getDefiningOp<pm::SoftmaxOp>();
  if (softmaxRowsAlwaysDefined(softmax.getInput(), softmax.getAxis())) {
    imp.setValue(n, 0, probs);
    return success();
  }
  auto zeroValue = imp.valueIn(n, 1);
  if (failed(zeroValue))
    return failure();
  if (eltOf(*zeroValue) != eltOf(probs))
    return n.fail("X and Y differ in element type");
  imp.setValue(n, 0, create<pm::WhereOp>(imp, n, probs.getType(), emitIsNaN(imp, n, probs),
                                         *zeroValue, probs));
  return success();
}

/// CumSum: folded on constants (transformers counts packed sequences with it).
LogicalResult importCumSum(Importer &imp, NodeCtx &n) {
  const ConstTensor *x = imp.maybeConst(n, 0);
  if (!x)
    return foldOnlyError(n);
  auto axis = imp.constIn(n, 1, "axis");
  if (failed(axis))
    return failure();
  if ((*axis)->numel() != 1 || (*axis)->isFloat())
    return n.fail("axis must be an integer scalar");
  std::string why;
  auto r = foldCumSum(*x, (*axis)->asInt(0), n.attrInt("exclusive", 0) != 0,
                      n.attrInt("reverse", 0) != 0, why);
  if (!r)
    return n.fail(why);
  imp.setConst(n, 0, std::move(*r));
  return success();
}

/// The rows that GatherND / ScatterND index tuples (the last dim of
/// `indices`, one entry per dim of `lead`) address in `lead` flattened, in
/// the tuples' order; negative entries count from the end. An error naming
/// the node for an entry out of range.
FailureOr<std::vector<int64_t>> flatRows(NodeCtx &n, const ConstTensor &indices,
                                         ArrayRef<int64_t> lead) {
  int64_t k = lead.size();
  auto strides = stridesOf(lead);
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < indices.numel() / k; ++t) {
    int64_t row = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t ix = indices.asInt(t * k + j);
      if (ix < -lead[j] || ix >= lead[j])
        return n.fail("index " + Twine(ix) + " out of range for dim of size " + Twine(lead[j]));
      row += (ix < 0 ? ix + lead[j] : ix) * strides[j];
    }
    rows.push_back(row);
  }
  return rows;
}

/// GatherND: folded on constants (the vmapped mask functions of transformers
/// index position tables with it).
LogicalResult importGatherND(Importer &imp, NodeCtx &n) {
  const ConstTensor *indices = imp.maybeConst(n, 1);
  if (!indices)
    return foldOnlyError(n);
  if (indices->isFloat())
    return n.fail("indices must be integers");
  std::string why;
  int64_t batchDims = n.attrInt("batch_dims", 0);
  if (const ConstTensor *data = imp.maybeConst(n, 0)) {
    auto r = foldGatherND(*data, *indices, batchDims, kFoldLimit, why);
    if (!r)
      return n.fail(why.empty() ? "result is too large to fold" : why);
    imp.setConst(n, 0, std::move(*r));
    return success();
  }
  // Constant indices into an activation (Falcon picks its query, key and
  // value heads this way): with no batch dims, a Gather along the flattened
  // leading dims the indices address.
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  shapes::Shape in = Importer::shapeOf(*x);
  int64_t k = indices->shape.empty() ? 0 : indices->shape.back();
  if (batchDims != 0 || k < 1 || k > (int64_t)in.size())
    return n.fail("on a computed value is supported only with constant indices, no batch dims "
                  "and an index length within the data's rank");
  shapes::Shape lead(in.begin(), in.begin() + k), flatShape = {shapes::numElements(lead)};
  flatShape.append(in.begin() + k, in.end());
  auto flat = flatRows(n, *indices, lead);
  if (failed(flat))
    return failure();
  auto reshaped = reshapeTo(imp, n, *x, flatShape);
  if (failed(reshaped))
    return failure();
  shapes::Shape idxShape(indices->shape.begin(), indices->shape.end() - 1);
  auto r = gatherConstIndices(imp, n, *reshaped, 0, idxShape, std::move(*flat));
  if (failed(r))
    return failure();
  imp.setValue(n, 0, *r);
  return success();
}

/// ScatterND with constant indices (PyTorch 2 writes slice assignments,
/// torch.slice_scatter, this way: DeepSeek's attention fills q and k from
/// their rotary and plain parts). Every row of the data's first k dims comes
/// from the data or from the last update written to it; runs of rows from one
/// source become slices, concatenated. Folded on constants.
LogicalResult importScatterND(Importer &imp, NodeCtx &n) {
  if (n.attrString("reduction", "none") != "none")
    return n.fail("reduction other than 'none' is not supported");
  const ConstTensor *indices = imp.maybeConst(n, 1);
  if (!indices)
    return n.fail("is supported with constant indices only");
  if (indices->isFloat())
    return n.fail("indices must be integers");
  auto data = imp.entry(n, 0), updates = imp.entry(n, 2);
  if (failed(data) || failed(updates))
    return failure();
  shapes::Shape in = (*data)->shape;
  int64_t k = indices->shape.empty() ? 0 : indices->shape.back();
  if (k < 1 || k > (int64_t)in.size())
    return n.fail("index length " + Twine(k) + " must be between 1 and the data's rank " +
                  Twine(in.size()));
  shapes::Shape lead(in.begin(), in.begin() + k), rest(in.begin() + k, in.end());
  shapes::Shape wantUpdates(indices->shape.begin(), indices->shape.end() - 1);
  wantUpdates.append(rest.begin(), rest.end());
  if ((*updates)->shape != wantUpdates)
    return n.fail("updates have shape " + shapes::str((*updates)->shape) + ", expected " +
                  shapes::str(wantUpdates));
  // The source of every row: -1 the data's own, else the update's number.
  int64_t rows = shapes::numElements(lead), numUpdates = indices->numel() / k;
  if (rows > kFoldLimit)
    return n.fail("scatters into " + Twine(rows) + " rows, more than " + Twine(kFoldLimit));
  int64_t rowSize = shapes::numElements(rest);
  auto written = flatRows(n, *indices, lead);
  if (failed(written))
    return failure();
  std::vector<int64_t> source(rows, -1);
  for (int64_t u = 0; u < numUpdates; ++u)
    source[(*written)[u]] = u;
  const ConstTensor *cd = imp.maybeConst(n, 0), *cu = imp.maybeConst(n, 2);
  if (cd && cu) {
    if (cd->dtype != cu->dtype)
      return n.fail("data and updates differ in element type");
    ConstTensor r = *cd;
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t e = 0; source[row] >= 0 && e < rowSize; ++e) {
        int64_t from = source[row] * rowSize + e;
        if (r.isFloat())
          r.f[row * rowSize + e] = cu->f[from];
        else
          r.i[row * rowSize + e] = cu->i[from];
      }
    imp.setConst(n, 0, std::move(r));
    return success();
  }
  auto x = imp.valueIn(n, 0), y = imp.valueIn(n, 2);
  if (failed(x) || failed(y))
    return failure();
  if (eltOf(*x) != eltOf(*y))
    return n.fail("data and updates differ in element type");
  // Rows as the first dim of [rows, rest...] and [numUpdates, rest...].
  shapes::Shape dataRows = {rows}, updateRows = {numUpdates};
  dataRows.append(rest.begin(), rest.end());
  updateRows.append(rest.begin(), rest.end());
  auto flatData = reshapeTo(imp, n, *x, dataRows);
  auto flatUpdates = reshapeTo(imp, n, *y, updateRows);
  if (failed(flatData) || failed(flatUpdates))
    return failure();
  constexpr int kMaxRuns = 64;
  SmallVector<Value> runs;
  for (int64_t row = 0; row < rows;) {
    // A run: consecutive rows of the data, or consecutive updates.
    int64_t end = row + 1;
    bool fromData = source[row] < 0;
    while (end < rows && (fromData ? source[end] < 0
                                   : source[end] == source[end - 1] + 1))
      ++end;
    if (runs.size() == kMaxRuns)
      return n.fail("writes more than " + Twine(kMaxRuns) +
                    " separate ranges of rows (only slice-like scatters are supported)");
    Value from = fromData ? *flatData : *flatUpdates;
    int64_t first = fromData ? row : source[row];
    shapes::Shape fromShape = Importer::shapeOf(from), part = fromShape;
    part[0] = end - row;
    if (part == fromShape) {
      runs.push_back(from);
    } else {
      SmallVector<int64_t> starts(part.size(), 0), limits(fromShape.begin(), fromShape.end()),
          steps(part.size(), 1);
      starts[0] = first;
      limits[0] = first + (end - row);
      runs.push_back(create<pm::SliceOp>(imp, n, imp.tensorType(part, eltOf(from)), from, starts,
                                         limits, steps));
    }
    row = end;
  }
  Value all = runs.size() == 1
                  ? runs[0]
                  : create<pm::ConcatOp>(imp, n, imp.tensorType(dataRows, eltOf(*x)), runs, 0);
  auto r = reshapeTo(imp, n, all, in);
  if (failed(r))
    return failure();
  imp.setValue(n, 0, *r);
  return success();
}

LogicalResult importWhere(Importer &imp, NodeCtx &n) {
  if (n.has(0)) {
    auto guard = imp.nanTests.find(n.node.input(0));
    if (guard != imp.nanTests.end())
      return importNaNGuard(imp, n, guard->second);
  }
  auto [c, lc] = imp.reducedConst(n, 0);
  auto [x, lx] = imp.reducedConst(n, 1);
  auto [y, ly] = imp.reducedConst(n, 2);
  std::string why;
  if (c && x && y) {
    auto xy = shapes::broadcast(lx, ly, why);
    auto shape = xy ? shapes::broadcast(lc, *xy, why) : xy;
    if (!shape)
      return n.fail(why);
    if (x->dtype != y->dtype)
      return n.fail("X and Y differ in element type");
    if (c->dtype != DType::Bool)
      return n.fail("condition must be bool");
    // Computed on the reduced forms (see tryFoldBinary).
    auto rxy = shapes::broadcast(x->shape, y->shape, why);
    auto reducedShape = rxy ? shapes::broadcast(c->shape, *rxy, why) : rxy;
    if (reducedShape && foldable(*reducedShape)) {
      auto r = foldWhere(*c, *x, *y, why);
      if (!r)
        return n.fail(why);
      imp.setReducedConst(n, 0, std::move(*r), *shape);
      return success();
    }
  }
  auto cv = imp.valueIn(n, 0), xv = imp.valueIn(n, 1), yv = imp.valueIn(n, 2);
  if (failed(cv) || failed(xv) || failed(yv))
    return failure();
  if (!eltOf(*cv).isInteger(1))
    return n.fail("condition must be bool");
  if (eltOf(*xv) != eltOf(*yv))
    return n.fail("X and Y differ in element type");
  auto xy = shapes::broadcast(Importer::shapeOf(*xv), Importer::shapeOf(*yv), why);
  auto shape = xy ? shapes::broadcast(Importer::shapeOf(*cv), *xy, why) : xy;
  if (!shape)
    return n.fail(why);
  imp.setValue(n, 0, create<pm::WhereOp>(imp, n, imp.tensorType(*shape, eltOf(*xv)), *cv, *xv,
                                         *yv));
  return success();
}

LogicalResult importNot(Importer &imp, NodeCtx &n) {
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    ConstTensor r = foldCast(*c, DType::Bool);
    for (auto &v : r.i)
      v = !v;
    imp.setConst(n, 0, std::move(r));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  if (!eltOf(*x).isInteger(1))
    return n.fail("input must be bool");
  imp.setValue(n, 0, create<pm::NotOp>(imp, n, x->getType(), *x));
  return success();
}

/// MatMul with numpy semantics for 1-D operands.
/// `bias` is fused only when it is [N]; callers check.
FailureOr<Value> emitMatMul(Importer &imp, NodeCtx &n, Value a, Value bm, Value bias, bool ta,
                            bool tb) {
  std::string why;
  shapes::Shape sa = Importer::shapeOf(a), sb = Importer::shapeOf(bm);
  if (sa.empty() || sb.empty())
    return n.fail("matmul operands must not be scalars");
  bool vecA = sa.size() == 1, vecB = sb.size() == 1;
  if (vecA) {
    auto r = reshapeTo(imp, n, a, {1, sa[0]});
    if (failed(r))
      return failure();
    a = *r;
  }
  if (vecB) {
    auto r = reshapeTo(imp, n, bm, {sb[0], 1});
    if (failed(r))
      return failure();
    bm = *r;
  }
  if (eltOf(a) != eltOf(bm) || !isa<FloatType>(eltOf(a)))
    return n.fail("matmul operands must share a floating-point element type");
  auto shape = shapes::matmul(Importer::shapeOf(a), Importer::shapeOf(bm), ta, tb, why);
  if (!shape)
    return n.fail(why);
  if (bias && (Importer::shapeOf(bias) != shapes::Shape{shape->back()} ||
               eltOf(bias) != eltOf(a)))
    return n.fail("bias " + shapes::str(Importer::shapeOf(bias)) + " must be a vector of " +
                  Twine(shape->back()) + " elements of the operands' type");
  Value r = imp.b.create<pm::MatMulOp>(n.loc, imp.tensorType(*shape, eltOf(a)), a, bm, bias, ta,
                                       tb);
  if (vecA || vecB) {
    shapes::Shape out(shape->begin(), shape->end());
    if (vecB)
      out.erase(out.end() - 1);
    if (vecA)
      out.erase(out.end() - (vecB ? 1 : 2));
    auto rr = reshapeTo(imp, n, r, out);
    if (failed(rr))
      return failure();
    r = *rr;
  }
  return r;
}

LogicalResult importMatMul(Importer &imp, NodeCtx &n) {
  // Of constants (HF's rotary angles, inv_freq @ position_ids): folded, so
  // the Cos and Sin after it fold too. Too much work to fold, or shapes that
  // do not multiply (emitMatMul says why): emitted as an op.
  const ConstTensor *ca = imp.maybeConst(n, 0), *cb = imp.maybeConst(n, 1);
  std::string why;
  if (ca && cb)
    if (auto r = foldMatMul(*ca, *cb, kFoldLimit, why)) {
      imp.setConst(n, 0, std::move(*r));
      return success();
    }
  auto a = imp.valueIn(n, 0), bm = imp.valueIn(n, 1);
  if (failed(a) || failed(bm))
    return failure();
  auto r = emitMatMul(imp, n, *a, *bm, nullptr, false, false);
  if (failed(r))
    return failure();
  imp.setValue(n, 0, *r);
  return success();
}

Value scalarConst(Importer &imp, Location loc, double v, Type elt) {
  ConstTensor c = ConstTensor::zeros(dtypeOf(elt), {});
  c.set(0, v);
  return imp.materializeConst(c, loc);
}

LogicalResult importGemm(Importer &imp, NodeCtx &n) {
  auto a = imp.valueIn(n, 0), bm = imp.valueIn(n, 1);
  if (failed(a) || failed(bm))
    return failure();
  if (Importer::shapeOf(*a).size() != 2 || Importer::shapeOf(*bm).size() != 2)
    return n.fail("Gemm operands must be 2-D");
  double alpha = n.attrFloat("alpha", 1.0), beta = n.attrFloat("beta", 1.0);
  bool ta = n.attrInt("transA", 0), tb = n.attrInt("transB", 0);
  Value bias;
  if (n.has(2)) {
    auto c = imp.valueIn(n, 2);
    if (failed(c))
      return failure();
    bias = *c;
  }
  // Only a bias of exactly [N] fuses into the matmul; any other C (a [1]
  // vector, a scalar, [M, N], [M, 1], ...) is broadcast and added below.
  int64_t outN = Importer::shapeOf(*bm)[tb ? 0 : 1];
  bool fuseBias = bias && alpha == 1.0 && beta == 1.0 &&
                  Importer::shapeOf(bias) == shapes::Shape{outN};
  auto mm = emitMatMul(imp, n, *a, *bm, fuseBias ? bias : Value(), ta, tb);
  if (failed(mm))
    return failure();
  Value y = *mm;
  if (fuseBias || (!bias && alpha == 1.0)) {
    imp.setValue(n, 0, y);
    return success();
  }
  // General form: alpha * (A @ B) + beta * C.
  Type elt = eltOf(y);
  std::string why;
  if (alpha != 1.0)
    y = imp.b.create<pm::MulOp>(n.loc, y.getType(), y, scalarConst(imp, n.loc, alpha, elt));
  if (bias) {
    if (beta != 1.0)
      bias = imp.b.create<pm::MulOp>(n.loc, bias.getType(), bias,
                                     scalarConst(imp, n.loc, beta, elt));
    auto shape = shapes::broadcast(Importer::shapeOf(y), Importer::shapeOf(bias), why);
    if (!shape || *shape != Importer::shapeOf(y))
      return n.fail("C " + shapes::str(Importer::shapeOf(bias)) + " does not broadcast to " +
                    shapes::str(Importer::shapeOf(y)));
    y = imp.b.create<pm::AddOp>(n.loc, y.getType(), y, bias);
  }
  imp.setValue(n, 0, y);
  return success();
}

/// The pieces of `in` cut along `axis` into `sizes`: folded slices of a
/// constant, else the results of one pmesh.split.
FailureOr<std::vector<Entry>> splitPieces(Importer &imp, NodeCtx &n, Entry &in, int64_t axis,
                                          ArrayRef<int64_t> sizes) {
  std::string why;
  auto pieces = shapes::split(in.shape, axis, sizes, why);
  if (!pieces)
    return n.fail(why);
  std::vector<Entry> out;
  if (in.kind == Entry::Const) {
    int64_t off = 0;
    for (int64_t size : sizes) {
      SmallVector<int64_t> lo(in.shape.size(), 0), hi(in.shape.begin(), in.shape.end()),
          st(in.shape.size(), 1);
      lo[axis] = off;
      hi[axis] = off + size;
      off += size;
      out.push_back(Importer::constEntry(foldSlice(*in.c, lo, hi, st)));
    }
    return out;
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  SmallVector<Type> types;
  for (auto &p : *pieces)
    types.push_back(imp.tensorType(p, eltOf(*x)));
  auto op = imp.b.create<pm::SplitOp>(n.loc, types, *x, axis, sizes);
  for (Value piece : op.getResults())
    out.push_back(Importer::valueEntry(piece));
  return out;
}

/// The input of a Split or SplitToSequence and its axis, normalized.
FailureOr<std::pair<Entry *, int64_t>> splitInput(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  int64_t axis = n.attrInt("axis", 0);
  auto ax = shapes::normalizeAxis(axis, (*e)->shape.size());
  if (!ax)
    return n.fail("axis " + Twine(axis) + " out of range");
  return std::make_pair(*e, *ax);
}

LogicalResult importSplit(Importer &imp, NodeCtx &n) {
  auto in = splitInput(imp, n);
  if (failed(in))
    return failure();
  auto [e, ax] = *in;
  int64_t dim = e->shape[ax];
  std::vector<int64_t> sizes;
  if (n.opset >= 13 && n.attr("split"))
    return n.fail("'split' is an input from opset 13, not an attribute");
  if (n.opset < 13) {
    sizes = n.attrInts("split").value_or(std::vector<int64_t>{});
  } else if (n.has(1)) {
    auto s = imp.constIn(n, 1, "split");
    if (failed(s))
      return failure();
    sizes = (*s)->ints();
  }
  if (sizes.empty()) {
    int64_t parts = n.node.output_size();
    if (n.opset >= 18) {
      if (!n.attr("num_outputs"))
        return n.fail("needs 'split' or 'num_outputs' from opset 18");
      parts = n.attrInt("num_outputs", parts);
      if (parts != n.node.output_size())
        return n.fail("num_outputs differs from the number of outputs");
    }
    if (parts <= 0)
      return n.fail("has no outputs");
    // Equal pieces; from opset 18 the last one may be smaller.
    int64_t piece = (dim + parts - 1) / parts;
    if (dim > 0 && (parts - 1) * piece >= dim)
      return n.fail("cannot split dim " + Twine(dim) + " into " + Twine(parts) +
                    " non-empty pieces");
    if (n.opset < 18 && dim % parts)
      return n.fail("dim " + Twine(dim) + " does not split evenly into " + Twine(parts));
    for (int64_t k = 0; k < parts; ++k)
      sizes.push_back(std::min(piece, dim - k * piece));
  }
  if ((int64_t)sizes.size() != n.node.output_size())
    return n.fail(Twine(sizes.size()) + " split sizes for " + Twine(n.node.output_size()) +
                  " outputs");
  auto pieces = splitPieces(imp, n, *e, ax, sizes);
  if (failed(pieces))
    return failure();
  for (size_t k = 0; k < pieces->size(); ++k)
    if (n.hasOutput(k))
      imp.values[n.node.output(k)] = std::move((*pieces)[k]);
  return success();
}

/// SplitToSequence: the pieces of a split, held as a sequence for SequenceAt
/// (torch.split as the dynamo exporter writes it without its optimizer).
LogicalResult importSplitToSequence(Importer &imp, NodeCtx &n) {
  auto in = splitInput(imp, n);
  if (failed(in))
    return failure();
  auto [e, ax] = *in;
  int64_t dim = e->shape[ax];
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (n.has(1)) {
    auto s = imp.constIn(n, 1, "split");
    if (failed(s))
      return failure();
    if ((*s)->isFloat() || (*s)->shape.size() > 1)
      return n.fail("split must be an integer scalar or vector");
    sizes = (*s)->ints();
    if ((*s)->shape.empty()) { // one piece size; the last piece may be smaller
      int64_t piece = sizes[0];
      if (piece <= 0)
        return n.fail("split size " + Twine(piece) + " must be positive");
      sizes.clear();
      for (int64_t off = 0; off < dim; off += piece)
        sizes.push_back(std::min(piece, dim - off));
    }
  } else {
    sizes.assign(dim, 1);
    squeeze = n.attrInt("keepdims", 1) == 0;
  }
  auto pieces = splitPieces(imp, n, *e, ax, sizes);
  if (failed(pieces))
    return failure();
  if (squeeze)
    for (Entry &piece : *pieces) {
      shapes::Shape shape = piece.shape;
      shape.erase(shape.begin() + ax);
      if (piece.kind == Entry::Const) {
        piece = Importer::constEntry(foldReshape(*piece.c, shape));
      } else {
        auto v = reshapeTo(imp, n, piece.v, shape);
        if (failed(v))
          return failure();
        piece = Importer::valueEntry(*v);
      }
    }
  imp.setPoison(n, 0, "is a tensor sequence, usable only by SequenceAt");
  if (n.hasOutput(0))
    imp.sequences[n.node.output(0)] = std::move(*pieces);
  return success();
}

LogicalResult importSequenceAt(Importer &imp, NodeCtx &n) {
  auto seq = n.has(0) ? imp.sequences.find(n.node.input(0)) : imp.sequences.end();
  if (seq == imp.sequences.end())
    return n.fail("input '" + (n.has(0) ? n.node.input(0) : std::string()) +
                  "' is not a sequence made by SplitToSequence");
  auto pos = imp.constIn(n, 1, "position");
  if (failed(pos))
    return failure();
  if ((*pos)->numel() != 1 || (*pos)->isFloat())
    return n.fail("position must be an integer scalar");
  int64_t size = seq->second.size(), k = (*pos)->asInt(0);
  if (k < -size || k >= size)
    return n.fail("position " + Twine(k) + " out of range for a sequence of " + Twine(size));
  if (n.hasOutput(0))
    imp.values[n.node.output(0)] = seq->second[k < 0 ? k + size : k];
  return success();
}

LogicalResult importTranspose(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  int64_t rank = (*e)->shape.size();
  std::vector<int64_t> perm;
  if (auto p = n.attrInts("perm"))
    perm = *p;
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  std::string why;
  auto shape = shapes::transpose((*e)->shape, perm, why);
  if (!shape)
    return n.fail(why);
  if ((*e)->kind == Entry::Const) {
    imp.setConst(n, 0, foldTranspose(*(*e)->c, perm));
    return success();
  }
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  imp.setValue(n, 0, create<pm::TransposeOp>(imp, n, imp.tensorType(*shape, eltOf(*x)), *x, perm));
  return success();
}

/// Softmax and LogSoftmax: opsets < 13 flatten to 2-D at `axis` (default 1),
/// which equals the per-axis form only when axis is the last dim.
FailureOr<std::pair<Value, int64_t>> softmaxInput(Importer &imp, NodeCtx &n) {
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  int64_t rank = Importer::shapeOf(*x).size();
  int64_t axis = n.attrInt("axis", n.opset >= 13 ? -1 : 1);
  auto ax = shapes::normalizeAxis(axis, rank);
  if (!ax)
    return n.fail("axis " + Twine(axis) + " out of range for rank " + Twine(rank));
  if (n.opset < 13 && *ax != rank - 1)
    return n.fail("opset < 13 softmax over a non-last axis (flattening semantics) is not "
                  "supported");
  if (!isa<FloatType>(eltOf(*x)))
    return n.fail("expects a floating-point input");
  return std::make_pair(*x, *ax);
}

LogicalResult importSoftmax(Importer &imp, NodeCtx &n) {
  auto in = softmaxInput(imp, n);
  if (failed(in))
    return failure();
  imp.setValue(n, 0, imp.b.create<pm::SoftmaxOp>(n.loc, in->first.getType(), in->first,
                                                 in->second));
  return success();
}

LogicalResult importLogSoftmax(Importer &imp, NodeCtx &n) {
  auto in = softmaxInput(imp, n);
  if (failed(in))
    return failure();
  Value r = imp.b.create<pm::LogSoftmaxOp>(n.loc, in->first.getType(), in->first, in->second);
  imp.logSoftmaxInputs[r] = *in;
  imp.setValue(n, 0, r);
  return success();
}

LogicalResult importDropout(Importer &imp, NodeCtx &n) {
  auto e = imp.entry(n, 0);
  if (failed(e))
    return failure();
  if (n.opset >= 12 && n.has(2)) {
    auto t = imp.constIn(n, 2, "training_mode");
    if (failed(t))
      return failure();
    if ((*t)->numel() != 1 || (*t)->asInt(0))
      return n.fail("training_mode=true dropout is not supported (PipeMesh trains without "
                    "dropout)");
  }
  if (n.opset < 7 && n.attrInt("is_test", 0) == 0)
    return n.fail("dropout in training mode (is_test=0) is not supported (PipeMesh trains "
                  "without dropout)");
  imp.values[n.node.output(0)] = **e;
  imp.setPoison(n, 1, "is a Dropout mask, which is not supported");
  return success();
}

/// cross_entropy of logits [N, C, d...] (class axis 1, as ONNX) and targets.
LogicalResult emitCrossEntropy(Importer &imp, NodeCtx &n, Value logits, int64_t classAxis,
                               Value targets) {
  if (n.has(2))
    return n.fail("class weights are not supported");
  std::string reduction = n.attrString("reduction", "mean");
  int64_t ignore = n.attrInt("ignore_index", -100);
  if (!n.attr("ignore_index"))
    ignore = INT64_MIN; // ONNX: no ignored class unless given
  shapes::Shape ls = Importer::shapeOf(logits);
  int64_t rank = ls.size();
  if (classAxis != rank - 1) {
    SmallVector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d)
      if (d != classAxis)
        perm.push_back(d);
    perm.push_back(classAxis);
    std::string why;
    auto shape = shapes::transpose(ls, perm, why);
    logits = imp.b.create<pm::TransposeOp>(n.loc, imp.tensorType(*shape, eltOf(logits)), logits,
                                           perm);
  }
  if (!eltOf(targets).isInteger(64) && !eltOf(targets).isInteger(32))
    return n.fail("labels must be int32 or int64");
  std::string why;
  auto shape = shapes::crossEntropy(Importer::shapeOf(logits), Importer::shapeOf(targets),
                                    reduction, why);
  if (!shape)
    return n.fail(why);
  imp.setValue(n, 0, imp.b.create<pm::CrossEntropyOp>(n.loc,
                                                      imp.tensorType(*shape, eltOf(logits)),
                                                      logits, targets, ignore, reduction));
  return success();
}

LogicalResult importSoftmaxCrossEntropyLoss(Importer &imp, NodeCtx &n) {
  auto scores = imp.valueIn(n, 0), labels = imp.valueIn(n, 1);
  if (failed(scores) || failed(labels))
    return failure();
  if (Importer::shapeOf(*scores).size() < 2)
    return n.fail("scores must have rank >= 2 ([N, C, ...])");
  imp.setPoison(n, 1, "is the log_prob output of SoftmaxCrossEntropyLoss, which is not "
                      "supported");
  return emitCrossEntropy(imp, n, *scores, 1, *labels);
}

LogicalResult importNLLLoss(Importer &imp, NodeCtx &n) {
  auto in = imp.valueIn(n, 0), target = imp.valueIn(n, 1);
  if (failed(in) || failed(target))
    return failure();
  auto it = imp.logSoftmaxInputs.find(*in);
  if (it == imp.logSoftmaxInputs.end() || it->second.second != 1 % (int64_t)Importer::shapeOf(*in).size())
    return n.fail("NegativeLogLikelihoodLoss is supported only on the LogSoftmax of the class "
                  "axis (axis 1)");
  return emitCrossEntropy(imp, n, it->second.first, 1, *target);
}

LogicalResult emitLayerNorm(Importer &imp, NodeCtx &n, Value x, Value scale, Value bias,
                            int64_t axis, double eps, int outIdx) {
  std::string why;
  std::optional<ArrayRef<int64_t>> biasShape;
  shapes::Shape bs;
  if (bias) {
    bs = Importer::shapeOf(bias);
    biasShape = bs;
  }
  if (!shapes::layerNorm(Importer::shapeOf(x), Importer::shapeOf(scale), biasShape, axis, why))
    return n.fail(why);
  if (eps <= 0)
    return n.fail("epsilon must be positive");
  if (!isa<FloatType>(eltOf(x)))
    return n.fail("expects a floating-point input");
  imp.setValue(n, outIdx, imp.b.create<pm::LayerNormOp>(n.loc, x.getType(), x, scale, bias,
                                                        imp.b.getF32FloatAttr(eps),
                                                        imp.b.getI64IntegerAttr(axis)));
  return success();
}

LogicalResult importLayerNormalization(Importer &imp, NodeCtx &n) {
  auto x = imp.valueIn(n, 0), scale = imp.valueIn(n, 1);
  if (failed(x) || failed(scale))
    return failure();
  Value bias;
  if (n.has(2)) {
    auto bv = imp.valueIn(n, 2);
    if (failed(bv))
      return failure();
    bias = *bv;
  }
  imp.setPoison(n, 1, "is the Mean output of LayerNormalization, which is not supported");
  imp.setPoison(n, 2, "is the InvStdDev output of LayerNormalization, which is not supported");
  return emitLayerNorm(imp, n, *x, *scale, bias, n.attrInt("axis", -1),
                       n.attrFloat("epsilon", 1e-5), 0);
}

FailureOr<Value> addValues(Importer &imp, NodeCtx &n, Value a, Value bv) {
  std::string why;
  auto shape = shapes::broadcast(Importer::shapeOf(a), Importer::shapeOf(bv), why);
  if (!shape)
    return n.fail(why);
  if (eltOf(a) != eltOf(bv))
    return n.fail("operand element types differ");
  return (Value)imp.b.create<pm::AddOp>(n.loc, imp.tensorType(*shape, eltOf(a)), a, bv);
}

LogicalResult importGeluLike(Importer &imp, NodeCtx &n, StringRef approximate, bool withBias) {
  auto x = imp.valueIn(n, 0);
  if (failed(x))
    return failure();
  Value v = *x;
  if (withBias && n.has(1)) {
    auto bv = imp.valueIn(n, 1);
    if (failed(bv))
      return failure();
    auto s = addValues(imp, n, v, *bv);
    if (failed(s))
      return failure();
    v = *s;
  }
  if (!isa<FloatType>(eltOf(v)))
    return n.fail("expects a floating-point input");
  imp.setValue(n, 0, imp.b.create<pm::GeluOp>(n.loc, v.getType(), v, approximate));
  return success();
}

LogicalResult importGelu(Importer &imp, NodeCtx &n) {
  // ai.onnx Gelu (opset 20) carries the approximation; com.microsoft's is exact.
  std::string approx = n.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return n.fail("unsupported approximate='" + approx + "'");
  return importGeluLike(imp, n, approx, false);
}

LogicalResult importSkipLayerNorm(Importer &imp, NodeCtx &n) {
  auto x = imp.valueIn(n, 0), skip = imp.valueIn(n, 1), gamma = imp.valueIn(n, 2);
  if (failed(x) || failed(skip) || failed(gamma))
    return failure();
  Value beta;
  if (n.has(3)) {
    auto bv = imp.valueIn(n, 3);
    if (failed(bv))
      return failure();
    beta = *bv;
  }
  auto sum = addValues(imp, n, *x, *skip);
  if (failed(sum))
    return failure();
  Value s = *sum;
  if (n.has(4)) {
    auto bias = imp.valueIn(n, 4);
    if (failed(bias))
      return failure();
    auto s2 = addValues(imp, n, s, *bias);
    if (failed(s2))
      return failure();
    s = *s2;
  }
  imp.setPoison(n, 1, "is the mean output of SkipLayerNormalization, which is not supported");
  imp.setPoison(n, 2, "is the inv_std_var output of SkipLayerNormalization, which is not "
                      "supported");
  imp.setValue(n, 3, s);
  return emitLayerNorm(imp, n, s, *gamma, beta, -1, n.attrFloat("epsilon", 1e-12), 0);
}

/// [B, T, heads * D] -> [B, heads, T, D] (packed attention heads, split).
FailureOr<Value> splitHeads(Importer &imp, NodeCtx &n, Value t, int64_t heads, const char *what) {
  shapes::Shape ts = Importer::shapeOf(t);
  if (ts.size() != 3 || heads <= 0 || ts[2] % heads)
    return n.fail(Twine(what) + " " + shapes::str(ts) + " does not split into " + Twine(heads) +
                  " heads");
  auto split = reshapeTo(imp, n, t, {ts[0], ts[1], heads, ts[2] / heads});
  if (failed(split))
    return failure();
  return (Value)imp.b.create<pm::TransposeOp>(
      n.loc, imp.tensorType({ts[0], heads, ts[1], ts[2] / heads}, eltOf(t)), *split,
      SmallVector<int64_t>{0, 2, 1, 3});
}

/// [B, heads, T, D] -> [B, T, heads * D], splitHeads undone.
FailureOr<Value> mergeHeads(Importer &imp, NodeCtx &n, Value t) {
  shapes::Shape ts = Importer::shapeOf(t);
  Value back = imp.b.create<pm::TransposeOp>(n.loc,
                                             imp.tensorType({ts[0], ts[2], ts[1], ts[3]}, eltOf(t)),
                                             t, SmallVector<int64_t>{0, 2, 1, 3});
  return reshapeTo(imp, n, back, {ts[0], ts[2], ts[1] * ts[3]});
}

/// ai.onnx RMSNormalization (opset 23; PyTorch 2 writes nn.RMSNorm so):
/// y = x / sqrt(mean(x^2 over axis..last) + epsilon) * scale, written out
/// with the ops a decomposed RMSNorm export uses. stash_type (the precision
/// of the mean) is at least the input's: PipeMesh computes in f32 or wider.
LogicalResult importRMSNormalization(Importer &imp, NodeCtx &n) {
  auto x = floatActivationIn(imp, n);
  auto scale = imp.valueIn(n, 1);
  if (failed(x) || failed(scale))
    return failure();
  shapes::Shape xs = Importer::shapeOf(*x);
  const int64_t rank = xs.size();
  int64_t axis = n.attrInt("axis", -1);
  if (axis < -rank || axis >= rank)
    return n.fail("axis " + Twine(axis) + " is out of range for rank " + Twine(rank));
  axis = axis < 0 ? axis + rank : axis;
  // The spec asks for a scale that broadcasts to the normalized dims; its
  // function body multiplies with numpy broadcasting, and PyTorch 2 writes
  // F.rms_norm without a weight as ones of the input's whole shape.
  std::string why;
  if (eltOf(*scale) != eltOf(*x) || !shapes::broadcastsTo(Importer::shapeOf(*scale), xs))
    return n.fail("scale " + shapes::str(Importer::shapeOf(*scale)) + " must broadcast to the "
                  "input " + shapes::str(xs) + " with its element type");
  Type elt = eltOf(*x);
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d)
    axes.push_back(d);
  auto meanShape = shapes::reduce(xs, axes, true, why);
  if (!meanShape)
    return n.fail(why);
  auto meanType = imp.tensorType(*meanShape, elt);
  Value sq = imp.b.create<pm::MulOp>(n.loc, x->getType(), *x, *x);
  Value mean = imp.b.create<pm::ReduceMeanOp>(n.loc, meanType, sq, axes, true);
  Value eps = scalarConst(imp, n.loc, n.attrFloat("epsilon", 1e-5), elt);
  Value rms = imp.b.create<pm::SqrtOp>(
      n.loc, meanType, imp.b.create<pm::AddOp>(n.loc, meanType, mean, eps));
  Value y = imp.b.create<pm::DivOp>(n.loc, x->getType(), *x, rms);
  imp.setValue(n, 0, imp.b.create<pm::MulOp>(n.loc, x->getType(), y, *scale));
  return success();
}

/// ai.onnx RotaryEmbedding (opset 23; PyTorch 2's optimizer fuses transformers'
/// rotary into it at opset 23): the first rotary_embedding_dim dims of each head
/// (all by default) rotated pairwise, x1' = cos x1 - sin x2, x2' = sin x1 + cos x2,
/// with (x1, x2) the two halves or (interleaved) the even and odd dims; the
/// rest passed through. cos and sin are [B, S, r / 2], or gathered from a
/// [positions, r / 2] cache by constant position_ids. Written out with slices,
/// products and a concat.
LogicalResult importRotaryEmbedding(Importer &imp, NodeCtx &n) {
  auto x = floatActivationIn(imp, n);
  if (failed(x))
    return failure();
  Type elt = eltOf(*x);
  shapes::Shape xs = Importer::shapeOf(*x);
  if (xs.size() != 3 && xs.size() != 4)
    return n.fail("X must be [B, heads, S, D] or [B, S, heads * D], got " + shapes::str(xs));
  // Work in [B, S, heads, D] for 3-D input, [B, heads, S, D] for 4-D.
  Value in = *x;
  if (xs.size() == 3) {
    int64_t heads = n.attrInt("num_heads", 0);
    if (heads <= 0 || xs[2] % heads)
      return n.fail("a 3-D X " + shapes::str(xs) + " needs num_heads dividing its last dim");
    auto r = reshapeTo(imp, n, in, {xs[0], xs[1], heads, xs[2] / heads});
    if (failed(r))
      return failure();
    in = *r;
  }
  shapes::Shape shape = Importer::shapeOf(in);
  const int64_t B = shape[0], S = xs.size() == 3 ? shape[1] : shape[2], D = shape[3];
  const int64_t rot = n.attrInt("rotary_embedding_dim", 0) ? n.attrInt("rotary_embedding_dim", 0) : D;
  if (rot <= 0 || rot > D || rot % 2)
    return n.fail("rotary_embedding_dim " + Twine(rot) + " must be even and at most the head "
                  "size " + Twine(D));
  const int64_t half = rot / 2;
  // cos and sin as [B, S, half] (or [1, S, half], the same for every
  // sequence, as PyTorch 2 writes them), then shaped to broadcast over the heads.
  shapes::Shape table = {B, S, half};
  auto angles = [&](int k, const char *what) -> FailureOr<Value> {
    if (n.has(3)) {
      auto cache = imp.constIn(n, k, what);
      auto pos = imp.constIn(n, 3, "position_ids");
      if (failed(cache) || failed(pos))
        return failure();
      std::string why;
      auto g = foldGather(**cache, **pos, 0, why);
      if (!g)
        return n.fail(Twine(what) + " at position_ids: " + why);
      if (g->shape != table)
        return n.fail(Twine(what) + " at position_ids is " + shapes::str(g->shape) + ", expected " +
                      shapes::str(table));
      return imp.materializeConst(*g, n.loc);
    }
    auto v = imp.valueIn(n, k);
    if (failed(v))
      return failure();
    shapes::Shape vs = Importer::shapeOf(*v);
    if (vs.size() != 3 || !shapes::broadcastsTo(vs, table) || eltOf(*v) != elt)
      return n.fail(Twine(what) + " " + shapes::str(vs) + " must be " + shapes::str(table) +
                    " (or broadcast to it) of X's element type");
    return *v;
  };
  auto cosV = angles(1, "cos_cache"), sinV = angles(2, "sin_cache");
  if (failed(cosV) || failed(sinV))
    return failure();
  auto overHeads = [&](Value t) {
    int64_t b = Importer::shapeOf(t)[0];
    return reshapeTo(imp, n, t, xs.size() == 3 ? shapes::Shape{b, S, 1, half}
                                               : shapes::Shape{b, 1, S, half});
  };
  auto cosB = overHeads(*cosV), sinB = overHeads(*sinV);
  if (failed(cosB) || failed(sinB))
    return failure();
  const bool interleaved = n.attrInt("interleaved", 0) != 0;
  auto slice = [&](int64_t begin, int64_t end, int64_t step) {
    SmallVector<int64_t> starts(4, 0), limits(shape.begin(), shape.end()), strides(4, 1);
    starts[3] = begin, limits[3] = end, strides[3] = step;
    shapes::Shape part = shape;
    part[3] = (end - begin + step - 1) / step;
    return (Value)imp.b.create<pm::SliceOp>(n.loc, imp.tensorType(part, elt), in, starts, limits,
                                            strides);
  };
  Value x1 = interleaved ? slice(0, rot, 2) : slice(0, half, 1);
  Value x2 = interleaved ? slice(1, rot, 2) : slice(half, rot, 1);
  Type partType = x1.getType();
  auto mul = [&](Value a, Value b) { return (Value)imp.b.create<pm::MulOp>(n.loc, partType, a, b); };
  Value real = imp.b.create<pm::SubOp>(n.loc, partType, mul(*cosB, x1), mul(*sinB, x2));
  Value imag = imp.b.create<pm::AddOp>(n.loc, partType, mul(*sinB, x1), mul(*cosB, x2));
  shapes::Shape rotShape = shape;
  rotShape[3] = rot;
  Value rotated;
  if (interleaved) {
    // (real, imag) pairs back into dims 2i and 2i + 1.
    shapes::Shape pairs = {shape[0], shape[1], shape[2], half, 1};
    auto re = reshapeTo(imp, n, real, pairs), im = reshapeTo(imp, n, imag, pairs);
    if (failed(re) || failed(im))
      return failure();
    shapes::Shape both = {shape[0], shape[1], shape[2], half, 2};
    Value zipped = imp.b.create<pm::ConcatOp>(n.loc, imp.tensorType(both, elt),
                                              ValueRange{*re, *im}, 4);
    auto r = reshapeTo(imp, n, zipped, rotShape);
    if (failed(r))
      return failure();
    rotated = *r;
  } else {
    rotated = imp.b.create<pm::ConcatOp>(n.loc, imp.tensorType(rotShape, elt),
                                         ValueRange{real, imag}, 3);
  }
  Value out = rotated;
  if (rot < D)
    out = imp.b.create<pm::ConcatOp>(n.loc, imp.tensorType(shape, elt),
                                     ValueRange{rotated, slice(rot, D, 1)}, 3);
  if (xs.size() == 3) {
    auto r = reshapeTo(imp, n, out, xs);
    if (failed(r))
      return failure();
    out = *r;
  }
  imp.setValue(n, 0, out);
  return success();
}

/// ai.onnx Attention (opsets 23-25; PyTorch 2 writes scaled_dot_product_attention
/// so from opset 23) without a key/value cache. 3-D inputs [B, T, heads * D]
/// take their head counts from the attributes; grouped-query heads
/// (kv_num_heads < q_num_heads) serve H / Hkv query heads each, as ONNX
/// specifies (query head h reads head h / g). Without a mask input it is
/// pmesh.attention itself wherever that can say it: ONNX's causal attention
/// is aligned to the first key (key j <= query i), pmesh's to the last, the
/// same when Tq == Tk; a causal window of `left_window_size` keys back is
/// `window = left + 1`; right_window_size 0 is causal. Otherwise (a mask, a
/// two-sided window, Tq != Tk) it is written out as the exporters' decomposed
/// attention, which the raise fuses (constant causal and banded masks
/// recognized, grouped heads read in place):
///   s = (q @ k^T) * scale;  s = softcap * tanh(s / softcap)  (softcap > 0)
///   s = where(allowed, s, -inf)   is_causal and the window sizes
///   s = s + mask                  a bool mask as 0 / -inf, a float one as is
///   y = softmax(s) @ v
/// A query that sees no key is 0 in ONNX's reference; it is NaN in the
/// decomposed form, as in the decomposed exports (no training window has one).
/// softmax_precision asks for at least the input's precision: PipeMesh computes
/// softmax in f32 or wider.
LogicalResult importAttention(Importer &imp, NodeCtx &n) {
  for (int k = 4; k < n.numInputs(); ++k)
    if (n.has(k))
      return n.fail("input " + Twine(k) + " (past_key, past_value, nonpad_kv_seqlen: a key/value "
                    "cache, for inference) is not supported");
  auto q = imp.valueIn(n, 0), k = imp.valueIn(n, 1), v = imp.valueIn(n, 2);
  if (failed(q) || failed(k) || failed(v))
    return failure();
  Type elt = eltOf(*q);
  if (!isa<FloatType>(elt) || eltOf(*k) != elt || eltOf(*v) != elt)
    return n.fail("Q, K and V must share a floating-point element type");
  shapes::Shape qs = Importer::shapeOf(*q), ks = Importer::shapeOf(*k), vs = Importer::shapeOf(*v);
  if (qs.size() != ks.size() || qs.size() != vs.size() || (qs.size() != 3 && qs.size() != 4))
    return n.fail("Q, K and V must all be 3-D or all 4-D, got " + shapes::str(qs) + ", " +
                  shapes::str(ks) + ", " + shapes::str(vs));
  const bool packed = qs.size() == 3;
  if (packed) {
    if (!n.attr("q_num_heads") || !n.attr("kv_num_heads"))
      return n.fail("3-D Q, K, V need the q_num_heads and kv_num_heads attributes");
    int64_t qh = n.attrInt("q_num_heads", 0), kvh = n.attrInt("kv_num_heads", 0);
    auto q4 = splitHeads(imp, n, *q, qh, "Q"), k4 = splitHeads(imp, n, *k, kvh, "K"),
         v4 = splitHeads(imp, n, *v, kvh, "V");
    if (failed(q4) || failed(k4) || failed(v4))
      return failure();
    *q = *q4, *k = *k4, *v = *v4;
    qs = Importer::shapeOf(*q), ks = Importer::shapeOf(*k), vs = Importer::shapeOf(*v);
  }
  const int64_t B = qs[0], H = qs[1], Tq = qs[2], D = qs[3], Hk = ks[1], Tk = ks[2], Dv = vs[3];
  if (ks[0] != B || vs[0] != B || ks[3] != D || vs[1] != Hk || vs[2] != Tk)
    return n.fail("Q " + shapes::str(qs) + ", K " + shapes::str(ks) + " and V " +
                  shapes::str(vs) + " do not fit [B, H, Tq, D], [B, Hkv, Tk, D], [B, Hkv, Tk, Dv]");
  if (!packed && (n.attr("q_num_heads") || n.attr("kv_num_heads")) &&
      (n.attrInt("q_num_heads", H) != H || n.attrInt("kv_num_heads", Hk) != Hk))
    return n.fail("q_num_heads / kv_num_heads differ from the 4-D inputs' heads");
  if (Hk != H && (Hk <= 0 || H % Hk))
    return n.fail("grouped-query attention needs the query heads (" + Twine(H) +
                  ") to be a multiple of the key/value heads (" + Twine(Hk) + ")");
  if (n.hasOutput(3))
    imp.setPoison(n, 3, "is Attention's qk_matmul_output, which is not supported");
  // With no cache, the present key and value are K and V themselves.
  if (n.hasOutput(1))
    imp.setValue(n, 1, *k);
  if (n.hasOutput(2))
    imp.setValue(n, 2, *v);

  double scale = n.attr("scale") ? n.attrFloat("scale", 0.0) : 1.0 / std::sqrt((double)D);
  double softcap = n.attrFloat("softcap", 0.0);
  if (softcap < 0 || !std::isfinite(softcap))
    return n.fail("softcap " + Twine(std::to_string(softcap)) + " must be finite and >= 0");
  const bool causal = n.attrInt("is_causal", 0) != 0;
  const int64_t left = n.attrInt("left_window_size", -1), right = n.attrInt("right_window_size", -1);
  if (left < -1 || right < -1)
    return n.fail("left_window_size and right_window_size must be -1 or >= 0");
  auto finish = [&](Value y) -> LogicalResult {
    if (packed) {
      auto flat = mergeHeads(imp, n, y);
      if (failed(flat))
        return failure();
      y = *flat;
    }
    imp.setValue(n, 0, y);
    return success();
  };
  const bool causalLike = causal || right == 0;
  if (!n.has(3) && (causalLike ? Tq == Tk : left < 0 && right < 0)) {
    int64_t window = causalLike && left >= 0 ? left + 1 : 0;
    return finish(imp.b.create<pm::AttentionOp>(
        n.loc, imp.tensorType({B, H, Tq, Dv}, elt), *q, *k, *v, /*mask=*/Value(),
        imp.b.getF32FloatAttr((float)scale), imp.b.getBoolAttr(causalLike),
        window ? imp.b.getI64IntegerAttr(window) : IntegerAttr(),
        softcap > 0 ? imp.b.getF32FloatAttr((float)softcap) : FloatAttr()));
  }

  // Grouped heads, repeated for their query heads (the raise reads them in place).
  auto repeatHeads = [&](Value t) -> FailureOr<Value> {
    if (Hk == H)
      return t;
    shapes::Shape ts = Importer::shapeOf(t);
    auto one = reshapeTo(imp, n, t, {B, Hk, 1, ts[2], ts[3]});
    if (failed(one))
      return failure();
    Value copies = imp.b.create<pm::BroadcastOp>(
        n.loc, imp.tensorType({B, Hk, H / Hk, ts[2], ts[3]}, elt), *one);
    return reshapeTo(imp, n, copies, {B, H, ts[2], ts[3]});
  };
  auto kr = repeatHeads(*k), vr = repeatHeads(*v);
  if (failed(kr) || failed(vr))
    return failure();

  auto scores = emitMatMul(imp, n, *q, *kr, nullptr, false, true);
  if (failed(scores))
    return failure();
  Value s = *scores;
  Type scoresType = s.getType();
  s = imp.b.create<pm::MulOp>(n.loc, scoresType, s, scalarConst(imp, n.loc, scale, elt));
  if (softcap > 0) {
    Value cap = scalarConst(imp, n.loc, softcap, elt);
    Value t = imp.b.create<pm::TanhOp>(n.loc, scoresType,
                                       imp.b.create<pm::DivOp>(n.loc, scoresType, s, cap));
    s = imp.b.create<pm::MulOp>(n.loc, scoresType, t, cap);
  }
  if (causal || left >= 0 || right >= 0) {
    // allowed[i, j]: j <= i (causal), i - j <= left, j - i <= right.
    if (Tq * Tk > kFoldLimit)
      return n.fail("a causal or windowed attention of " + Twine(Tq) + " queries and " +
                    Twine(Tk) + " keys that pmesh.attention cannot say directly (a mask input, "
                    "a two-sided window, Tq != Tk) is too large to write out as a mask");
    ConstTensor allowed = ConstTensor::zeros(DType::Bool, {Tq, Tk});
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = 0; j < Tk; ++j)
        allowed.setInt(i * Tk + j, (!causal || j <= i) && (left < 0 || i - j <= left) &&
                                       (right < 0 || j - i <= right));
    Value cond = imp.materializeConst(allowed, n.loc);
    s = imp.b.create<pm::WhereOp>(n.loc, scoresType, cond, s,
                                  scalarConst(imp, n.loc, -INFINITY, elt));
  }
  if (n.has(3)) {
    auto e = imp.entry(n, 3);
    if (failed(e))
      return failure();
    shapes::Shape ms = (*e)->shape;
    shapes::Shape full = {B, H, Tq, Tk};
    if (ms.empty() || ms.back() != Tk || !shapes::broadcastsTo(ms, full))
      return n.fail("attn_mask " + shapes::str(ms) + " must broadcast to " + shapes::str(full) +
                    " (a mask shorter than the keys pads a key/value cache, which is not "
                    "supported)");
    Value mask;
    if ((*e)->kind == Entry::Const && (*e)->c->dtype == DType::Bool) {
      // A bool mask is 0 where it attends and -inf elsewhere.
      ConstTensor add = ConstTensor::zeros(dtypeOf(elt), ms);
      for (int64_t i = 0; i < add.numel(); ++i)
        add.set(i, (*e)->c->i[i] ? 0.0 : -INFINITY);
      mask = imp.materializeConst(add, n.loc);
    } else {
      auto m = imp.valueIn(n, 3);
      if (failed(m))
        return failure();
      mask = *m;
      if (eltOf(mask).isInteger(1))
        mask = imp.b.create<pm::WhereOp>(n.loc, imp.tensorType(ms, elt), mask,
                                         scalarConst(imp, n.loc, 0.0, elt),
                                         scalarConst(imp, n.loc, -INFINITY, elt));
      else if (eltOf(mask) != elt)
        return n.fail("attn_mask must be bool or Q's element type");
    }
    auto sum = addValues(imp, n, s, mask);
    if (failed(sum))
      return failure();
    s = *sum;
  }
  Value p = imp.b.create<pm::SoftmaxOp>(n.loc, scoresType, s, -1);
  auto y = emitMatMul(imp, n, p, *vr, nullptr, false, false);
  if (failed(y))
    return failure();
  return finish(*y);
}

/// com.microsoft Attention: fused QKV projection + multi-head attention.
LogicalResult importMSAttention(Importer &imp, NodeCtx &n) {
  auto x = imp.valueIn(n, 0), w = imp.valueIn(n, 1);
  if (failed(x) || failed(w))
    return failure();
  for (int k = 4; k < n.numInputs(); ++k)
    if (n.has(k))
      return n.fail("input " + Twine(k) +
                    " (past state / relative position bias / past_sequence_length) is not "
                    "supported");
  if (n.attr("qkv_hidden_sizes") || n.attrInt("do_rotary", 0) || n.attrInt("past_present_share_buffer", 0))
    return n.fail("qkv_hidden_sizes, do_rotary and past_present_share_buffer are not supported");
  int64_t heads = n.attrInt("num_heads", 0);
  shapes::Shape xs = Importer::shapeOf(*x), ws = Importer::shapeOf(*w);
  if (xs.size() != 3 || ws.size() != 2 || ws[1] % 3 || heads <= 0)
    return n.fail("expects input [B, S, C], weights [C, 3*C'] and num_heads > 0");
  int64_t B = xs[0], S = xs[1], hidden = ws[1] / 3;
  if (hidden % heads)
    return n.fail("hidden size " + Twine(hidden) + " is not divisible by num_heads " +
                  Twine(heads));
  int64_t D = hidden / heads;
  Value bias;
  if (n.has(2)) {
    auto bv = imp.valueIn(n, 2);
    if (failed(bv))
      return failure();
    bias = *bv;
  }
  if (bias && Importer::shapeOf(bias) != shapes::Shape{3 * hidden})
    return n.fail("bias must be 1-D of size " + Twine(3 * hidden));
  auto mm = emitMatMul(imp, n, *x, *w, bias, false, false);
  if (failed(mm))
    return failure();
  Value qkv = *mm;
  auto sliceType = imp.tensorType({B, S, hidden}, eltOf(qkv));
  auto split = imp.b.create<pm::SplitOp>(n.loc, SmallVector<Type>(3, sliceType), qkv, 2,
                                         SmallVector<int64_t>(3, hidden));
  SmallVector<Value> qkvHeads;
  for (Value part : split.getResults())
    qkvHeads.push_back(*splitHeads(imp, n, part, heads, "Q, K, V"));
  Value mask;
  if (n.has(3)) {
    // mask_index as a [B, S] 0/1 key-padding mask: masked keys get
    // mask_filter_value (onnxruntime's default -10000) added to the scores.
    auto m = imp.valueIn(n, 3);
    if (failed(m))
      return failure();
    if (Importer::shapeOf(*m) != shapes::Shape{B, S})
      return n.fail("only a 2-D [batch, seq] mask_index is supported");
    Type f = eltOf(qkv);
    Value mf = imp.b.create<pm::CastOp>(n.loc, imp.tensorType({B, S}, f), *m);
    Value inv = imp.b.create<pm::SubOp>(n.loc, mf.getType(), scalarConst(imp, n.loc, 1.0, f), mf);
    Value add = imp.b.create<pm::MulOp>(
        n.loc, mf.getType(), inv,
        scalarConst(imp, n.loc, n.attrFloat("mask_filter_value", -10000.0), f));
    mask = *reshapeTo(imp, n, add, {B, 1, 1, S});
  }
  double scale = n.attrFloat("scale", 0.0);
  if (scale == 0.0)
    scale = 1.0 / std::sqrt((double)D);
  Value att = imp.b.create<pm::AttentionOp>(
      n.loc, qkvHeads[0].getType(), qkvHeads[0], qkvHeads[1], qkvHeads[2], mask,
      imp.b.getF32FloatAttr(scale), imp.b.getBoolAttr(n.attrInt("unidirectional", 0) != 0),
      /*window=*/IntegerAttr(), /*softcap=*/FloatAttr());
  imp.setValue(n, 0, *mergeHeads(imp, n, att));
  imp.setPoison(n, 1, "is the present state of Attention, which is not supported");
  return success();
}

/// Two's-complement wrap-around, as integer tensors behave (no UB on overflow).
int64_t wrapInt(uint64_t v) { return (int64_t)v; }

/// Relu (OPT's MLP) as max(0, x): pmesh.max sends the gradient of a tie to its
/// left operand, so x gets none at 0, as PyTorch's relu gives.
LogicalResult importRelu(Importer &imp, NodeCtx &n) {
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    imp.setConst(n, 0, foldUnary(*c, [](double x) { return x > 0 ? x : (std::isnan(x) ? x : 0.0); }));
    return success();
  }
  auto x = floatActivationIn(imp, n);
  if (failed(x))
    return failure();
  Value zero = scalarConst(imp, n.loc, 0.0, eltOf(*x));
  imp.setValue(n, 0, create<pm::MaxOp>(imp, n, x->getType(), zero, *x));
  return success();
}

/// Softplus, log(1 + exp(x)) (Apertus' xIELU activation), written without
/// overflow as max(x, 0) + log(1 + exp(-|x|)), |x| = max(x, -x). Both maxes
/// give a tie's gradient to x, so the derivative at 0 is 1 - 1/2 = 1/2.
LogicalResult importSoftplus(Importer &imp, NodeCtx &n) {
  if (const ConstTensor *c = imp.maybeConst(n, 0)) {
    imp.setConst(n, 0, foldUnary(*c, [](double x) {
      return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
    }));
    return success();
  }
  auto x = floatActivationIn(imp, n);
  if (failed(x))
    return failure();
  Type t = x->getType();
  Value zero = scalarConst(imp, n.loc, 0.0, eltOf(*x));
  Value one = scalarConst(imp, n.loc, 1.0, eltOf(*x));
  Value absX = create<pm::MaxOp>(imp, n, t, *x, create<pm::NegOp>(imp, n, t, *x));
  Value tail = create<pm::LogOp>(
      imp, n, t,
      create<pm::AddOp>(imp, n, t, one,
                        create<pm::ExpOp>(imp, n, t, create<pm::NegOp>(imp, n, t, absX))));
  imp.setValue(n, 0, create<pm::AddOp>(imp, n, t, create<pm::MaxOp>(imp, n, t, *x, zero), tail));
  return success();
}

/// Max or Min of two inputs (elementwise, broadcast), or of any number of
/// constants (GPT-J's and Falcon's exports take the max of three shape
/// values). Min on activations is -max(-a, -b) (Apertus clamps with it); a
/// tie's gradient goes to a, as pmesh.max gives it to its left operand.
LogicalResult importMinMax(Importer &imp, NodeCtx &n, bool isMin) {
  auto fmax = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); };
  auto imax = [](int64_t a, int64_t b) { return std::max(a, b); };
  auto fmin = [](double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); };
  auto imin = [](int64_t a, int64_t b) { return std::min(a, b); };
  BinaryFn ffn = isMin ? BinaryFn(fmin) : BinaryFn(fmax);
  BinaryIntFn ifn = isMin ? BinaryIntFn(imin) : BinaryIntFn(imax);
  if (n.numInputs() == 2 && !isMin)
    return binary<pm::MaxOp>(imp, n, ffn, ifn);
  if (n.numInputs() == 2)
    return binaryWith(imp, n, ffn, ifn, /*compare=*/false, /*isPow=*/false,
                      [](Importer &imp, NodeCtx &n, Type t, Value a, Value b) -> Value {
                        Value negMax =
                            create<pm::MaxOp>(imp, n, t, create<pm::NegOp>(imp, n, a.getType(), a),
                                              create<pm::NegOp>(imp, n, b.getType(), b));
                        return create<pm::NegOp>(imp, n, t, negMax);
                      });
  if (n.numInputs() < 1)
    return n.fail("needs at least one input");
  std::optional<ConstTensor> acc;
  for (int k = 0; k < n.numInputs(); ++k) {
    const ConstTensor *c = imp.maybeConst(n, k);
    if (!c)
      return n.fail("with " + Twine(n.numInputs()) +
                    " inputs is supported on constants only (two inputs on any values)");
    if (acc && acc->dtype != c->dtype)
      return n.fail("operand element types differ");
    std::string why;
    if (!acc) {
      acc = *c;
    } else {
      auto shape = shapes::broadcast(acc->shape, c->shape, why);
      if (!shape)
        return n.fail(why);
      if (!foldable(*shape))
        return n.fail("result is too large to fold");
      acc = foldBinary(*acc, *c, acc->dtype, ffn, ifn, why);
      if (!acc)
        return n.fail(why);
    }
  }
  imp.setConst(n, 0, std::move(*acc));
  return success();
}

template <typename OpT> LogicalResult bin(Importer &imp, NodeCtx &n, BinaryFn f, BinaryIntFn i) {
  return binary<OpT>(imp, n, f, i);
}

/// The newest ai.onnx opset the importer reads.
constexpr int64_t kMaxOpset = 28;

const std::map<std::string, Handler> &onnxHandlers() {
  static const std::map<std::string, Handler> handlers = {
      {"Constant", importConstant},
      {"Identity", importIdentity},
      {"Cast", importCast},
      {"CastLike", importCast},
      {"Shape", importShape},
      {"Gather", importGather},
      {"Unsqueeze", importUnsqueeze},
      {"Squeeze", importSqueeze},
      {"Concat", importConcat},
      {"Reshape", importReshape},
      {"Slice", importSlice},
      {"Range", importRange},
      {"Trilu", importTrilu},
      {"ConstantOfShape", importConstantOfShape},
      {"Expand", importExpand},
      {"Tile", importTile},
      {"Where", importWhere},
      {"Not", importNot},
      {"IsNaN", importIsNaN},
      {"CumSum", importCumSum},
      {"GatherND", importGatherND},
      {"ScatterND", importScatterND},
      {"LessOrEqual", [](Importer &i, NodeCtx &n) { return importLogic<std::less_equal<>>(i, n, Logic::LessOrEqual); }},
      {"Greater", [](Importer &i, NodeCtx &n) { return importLogic<std::greater<>>(i, n, Logic::Greater); }},
      {"GreaterOrEqual", [](Importer &i, NodeCtx &n) { return importLogic<std::greater_equal<>>(i, n, Logic::GreaterOrEqual); }},
      {"And", [](Importer &i, NodeCtx &n) { return importLogic<std::logical_and<>>(i, n, Logic::And); }},
      {"Or", [](Importer &i, NodeCtx &n) { return importLogic<std::logical_or<>>(i, n, Logic::Or); }},
      {"Xor", [](Importer &i, NodeCtx &n) { return importLogic<LogicalXor>(i, n, Logic::Xor); }},
      {"Equal",
       [](Importer &i, NodeCtx &n) {
         return binary<pm::EqualOp>(
             i, n, [](double a, double b) { return double(a == b); },
             [](int64_t a, int64_t b) { return int64_t(a == b); }, true);
       }},
      {"Less",
       [](Importer &i, NodeCtx &n) {
         return binary<pm::LessOp>(
             i, n, [](double a, double b) { return double(a < b); },
             [](int64_t a, int64_t b) { return int64_t(a < b); }, true);
       }},
      {"Add",
       [](Importer &i, NodeCtx &n) {
         return bin<pm::AddOp>(i, n, [](double a, double b) { return a + b; },
                               [](int64_t a, int64_t b) { return wrapInt((uint64_t)a + b); });
       }},
      {"Sub",
       [](Importer &i, NodeCtx &n) {
         return bin<pm::SubOp>(i, n, [](double a, double b) { return a - b; },
                               [](int64_t a, int64_t b) { return wrapInt((uint64_t)a - b); });
       }},
      {"Mul",
       [](Importer &i, NodeCtx &n) {
         return bin<pm::MulOp>(i, n, [](double a, double b) { return a * b; },
                               [](int64_t a, int64_t b) { return wrapInt((uint64_t)a * b); });
       }},
      {"Div",
       [](Importer &i, NodeCtx &n) {
         return bin<pm::DivOp>(i, n, [](double a, double b) { return a / b; },
                               [](int64_t a, int64_t b) -> int64_t {
                                 // x / 0 has no defined value; INT64_MIN / -1 wraps.
                                 if (b == 0)
                                   return 0;
                                 return b == -1 ? wrapInt(0 - (uint64_t)a) : a / b;
                               });
       }},
      {"Pow",
       [](Importer &i, NodeCtx &n) {
         return bin<pm::PowOp>(i, n, [](double a, double b) { return std::pow(a, b); },
                               [](int64_t a, int64_t b) {
                                 return saturateToInt64(std::pow((double)a, (double)b));
                               });
       }},
      {"Max", [](Importer &i, NodeCtx &n) { return importMinMax(i, n, /*isMin=*/false); }},
      {"Min", [](Importer &i, NodeCtx &n) { return importMinMax(i, n, /*isMin=*/true); }},
      {"Relu", importRelu},
      {"Softplus", importSoftplus},
      {"Sqrt", [](Importer &i, NodeCtx &n) { return unary<pm::SqrtOp>(i, n, [](double x) { return std::sqrt(x); }); }},
      {"Tanh", [](Importer &i, NodeCtx &n) { return unary<pm::TanhOp>(i, n, [](double x) { return std::tanh(x); }); }},
      {"Erf", [](Importer &i, NodeCtx &n) { return unary<pm::ErfOp>(i, n, [](double x) { return std::erf(x); }); }},
      {"Exp", [](Importer &i, NodeCtx &n) { return unary<pm::ExpOp>(i, n, [](double x) { return std::exp(x); }); }},
      {"Reciprocal", importReciprocal},
      {"Cos", [](Importer &i, NodeCtx &n) { return foldOnlyUnary(i, n, [](double x) { return std::cos(x); }); }},
      {"Sin", [](Importer &i, NodeCtx &n) { return foldOnlyUnary(i, n, [](double x) { return std::sin(x); }); }},
      {"Sigmoid", [](Importer &i, NodeCtx &n) { return unary<pm::SigmoidOp>(i, n, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }); }},
      {"Log", [](Importer &i, NodeCtx &n) { return unary<pm::LogOp>(i, n, [](double x) { return std::log(x); }); }},
      {"Neg", [](Importer &i, NodeCtx &n) { return unary<pm::NegOp>(i, n, [](double x) { return -x; }); }},
      {"ReduceMean", [](Importer &i, NodeCtx &n) { return importReduce(i, n, true); }},
      {"ReduceSum", [](Importer &i, NodeCtx &n) { return importReduce(i, n, false); }},
      {"LayerNormalization", importLayerNormalization},
      {"MatMul", importMatMul},
      {"Gemm", importGemm},
      {"Split", importSplit},
      {"SplitToSequence", importSplitToSequence},
      {"SequenceAt", importSequenceAt},
      {"Transpose", importTranspose},
      {"Softmax", importSoftmax},
      {"LogSoftmax", importLogSoftmax},
      {"Dropout", importDropout},
      {"SoftmaxCrossEntropyLoss", importSoftmaxCrossEntropyLoss},
      {"NegativeLogLikelihoodLoss", importNLLLoss},
      {"Gelu", importGelu},
      {"Attention", importAttention},
      {"RMSNormalization", importRMSNormalization},
      {"RotaryEmbedding", importRotaryEmbedding},
  };
  return handlers;
}

const std::map<std::string, Handler> &microsoftHandlers() {
  static const std::map<std::string, Handler> handlers = {
      {"Attention", importMSAttention},
      {"SkipLayerNormalization", importSkipLayerNorm},
      {"FastGelu", [](Importer &i, NodeCtx &n) { return importGeluLike(i, n, "tanh", true); }},
      {"BiasGelu", [](Importer &i, NodeCtx &n) { return importGeluLike(i, n, "none", true); }},
      {"Gelu", [](Importer &i, NodeCtx &n) { return importGeluLike(i, n, "none", false); }},
  };
  return handlers;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

Location Importer::nodeLoc(const onnx::NodeProto &node, int index) {
  std::string name = !node.name().empty()   ? node.name()
                     : node.output_size() ? node.output(0)
                                          : "#" + std::to_string(index);
  return NameLoc::get(b.getStringAttr(name),
                      FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0));
}

LogicalResult Importer::importInitializers() {
  auto fileLoc = FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0);
  // --constant-initializers, --trainable-initializers: anchored, so that "cos"
  // does not match "cos_sin_w".
  auto nameRegex = [&](StringRef flag, const std::string &pattern,
                       std::optional<llvm::Regex> &regex) {
    if (pattern.empty())
      return true;
    regex.emplace("^(" + pattern + ")$");
    std::string why;
    if (regex->isValid(why))
      return true;
    emitError(fileLoc) << flag << ": bad regular expression '" << pattern << "': " << why;
    return false;
  };
  std::optional<llvm::Regex> constantNames, trainableNames;
  if (!nameRegex("--constant-initializers", opts.constantInitializers, constantNames) ||
      !nameRegex("--trainable-initializers", opts.trainableInitializers, trainableNames))
    return failure();
  // An additive mask: every value 0 or "minus infinity" (-inf, finfo.min, the
  // -1e4 of older exports), some of them the latter. A 0/1 mask: every value
  // 0 or 1, both present. Only small tables are read.
  auto valuesOf = [&](const onnx::TensorProto &t) {
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (!foldable(dims))
      return TableValues::Other;
    ConstTensor c;
    std::string why;
    if (!readTensor(t, baseDir, c, why) || !c.isFloat())
      return TableValues::Other;
    bool additive = true, zeroOne = true, anyZero = false, anyOne = false, anyFill = false;
    for (double v : c.f) {
      additive &= v == 0 || v <= -1e4;
      zeroOne &= v == 0 || v == 1;
      anyZero |= v == 0;
      anyOne |= v == 1;
      anyFill |= v <= -1e4;
    }
    if (additive && anyFill)
      return TableValues::AdditiveMask;
    if (zeroOne && anyZero && anyOne)
      return TableValues::ZeroOne;
    return TableValues::Other;
  };
  std::map<std::string, BufferUse> buffers = findBufferInitializers(model.graph(), valuesOf, opts.attentionMaskOnes);
  const onnx::GraphProto &g = model.graph();
  for (const onnx::TensorProto &t : g.initializer()) {
    Entry e;
    e.dtype = (DType)t.data_type();
    e.init = &t;
    for (int64_t d : t.dims()) {
      if (d < 0) {
        emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0))
            << "initializer '" << t.name() << "' has a negative dim";
        return failure();
      }
      e.shape.push_back(d);
    }
    if (tooLarge(e.shape)) {
      emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0))
          << "initializer '" << t.name() << "' of shape " << shapes::str(e.shape)
          << " is too large";
      return failure();
    }
    if (!isSupportedType(e.dtype)) {
      emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0))
          << "initializer '" << t.name() << "' has unsupported element type "
          << dtypeName(e.dtype) << " (" << (int)e.dtype << ")";
      return failure();
    }
    // Floating tensors with more than one element are trainable weights; the
    // rest (integer tables, bool masks, scalars) are constants.
    auto numel = shapes::checkedNumElements(e.shape);
    if (!numel) {
      emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0))
          << "initializer '" << t.name() << "' has too many elements";
      return failure();
    }
    bool isParam = isFloatType(e.dtype) && *numel > 1;
    bool namedConstant = constantNames && constantNames->match(t.name());
    bool namedTrainable = trainableNames && trainableNames->match(t.name());
    if (isParam && namedConstant && namedTrainable) {
      emitError(fileLoc) << "initializer '" << t.name()
                         << "' is named by both --constant-initializers and "
                            "--trainable-initializers";
      return failure();
    }
    auto buffer = buffers.find(t.name());
    bool constant = namedConstant;
    if (isParam && !namedConstant && !namedTrainable && buffer != buffers.end()) {
      // Silent only where it could not have been trained anyway: no gradient
      // reaches it, a Cos of it would fail the import, or it starts as a mask.
      if (!buffer->second.forced)
        emitWarning(fileLoc) << "initializer '" << t.name() << "' of shape "
                             << shapes::str(e.shape)
                             << " is taken for a buffer (a constant), not a trained "
                                "parameter: "
                             << buffer->second.why << "; --trainable-initializers='"
                             << t.name() << "' trains it";
      constant = true;
    }
    isParam &= !constant;
    if (isParam) {
      e.kind = Entry::Param;
      e.paramName = t.name();
      std::string why;
      if (isExternal(t) && !opts.shapesOnly && !checkExternalData(t, baseDir, why)) {
        emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0)) << why;
        return failure();
      }
    } else {
      e.kind = Entry::LazyConst;
    }
    values[t.name()] = std::move(e);
  }
  return success();
}

FailureOr<SmallVector<Type>> Importer::importInputs(Block *&body) {
  const onnx::GraphProto &g = model.graph();
  SmallVector<Type> types;
  SmallVector<std::string> names;
  std::map<std::string, int64_t> bound = opts.dims;
  auto loc = FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0);
  for (const onnx::ValueInfoProto &in : g.input()) {
    if (values.count(in.name()))
      continue; // an initializer listed as an input (IR version < 4)
    if (!in.type().has_tensor_type()) {
      emitError(loc) << "graph input '" << in.name() << "' is not a tensor";
      return failure();
    }
    const auto &tt = in.type().tensor_type();
    DType dt = (DType)tt.elem_type();
    auto elt = elementType(dt, nullptr, "graph input '" + in.name() + "'");
    if (failed(elt))
      return failure();
    if (!tt.has_shape()) {
      emitError(loc) << "graph input '" << in.name() << "' has no shape";
      return failure();
    }
    shapes::Shape shape;
    for (int axis = 0; axis < tt.shape().dim_size(); ++axis) {
      const auto &dim = tt.shape().dim(axis);
      if (dim.has_dim_value()) {
        if (dim.dim_value() < 0) {
          emitError(loc) << "graph input '" << in.name() << "' axis " << axis
                         << " has a negative size " << dim.dim_value();
          return failure();
        }
        shape.push_back(dim.dim_value()); // 0 is a valid static (empty) dim
        continue;
      }
      std::string name = dim.has_dim_param() ? dim.dim_param() : "";
      std::optional<int64_t> v;
      if (!name.empty() && bound.count(name))
        v = bound[name];
      else if (axis == 0 && opts.batch)
        v = opts.batch;
      else if (axis == 1 && opts.seq)
        v = opts.seq;
      if (!v) {
        std::string hint = axis == 0 ? "--batch" : axis == 1 ? "--seq" : "";
        auto diag = emitError(loc) << "graph input '" << in.name() << "' axis " << axis;
        if (!name.empty())
          diag << " ('" << name << "')";
        diag << " is dynamic: bind it with ";
        if (!hint.empty())
          diag << hint << " or ";
        diag << "--dim " << (name.empty() ? "NAME" : name) << "=VALUE";
        return failure();
      }
      if (!name.empty())
        bound[name] = *v; // the same symbolic name gets the same value everywhere
      shape.push_back(*v);
    }
    if (tooLarge(shape)) {
      emitError(loc) << "graph input '" << in.name() << "' of shape " << shapes::str(shape)
                     << " is too large";
      return failure();
    }
    if (isConstantGraphInput(in.name(), opts.attentionMaskOnes)) {
      // A training window starts at position 0 (DESIGN.md section 2), so every
      // row is 0..T-1, as HF computes it when it is not passed: a constant, and
      // the rotary tables computed from it fold. Nor does it hold padding, so an
      // attention_mask (compiling a plan) is all ones and the masks computed
      // from it fold too.
      bool mask = in.name() == "attention_mask";
      if ((!mask && !isa<IntegerType>(*elt)) || shape.empty() || !foldable(shape)) {
        emitError(loc) << "graph input '" << in.name() << "' must be "
                       << (mask ? "a tensor" : "an integer tensor")
                       << " whose last axis is the sequence, got " << dtypeName(dt) << " "
                       << shapes::str(shape);
        return failure();
      }
      Entry e;
      e.kind = Entry::Const;
      e.dtype = dt;
      e.shape = shape;
      e.c = std::make_shared<ConstTensor>(ConstTensor::zeros(dt, shape));
      for (int64_t k = 0; k < e.c->numel(); ++k)
        e.c->setInt(k, mask ? 1 : k % shape.back());
      values[in.name()] = std::move(e);
      continue;
    }
    types.push_back(tensorType(shape, *elt));
    names.push_back(in.name());
  }
  boundDims = bound;
  auto func = b.create<func::FuncOp>(loc, "forward", b.getFunctionType(types, {}));
  body = func.addEntryBlock();
  for (auto [k, name] : llvm::enumerate(names)) {
    func.setArgAttr(k, "pmesh.name", b.getStringAttr(name));
    Entry e;
    e.kind = Entry::Val;
    e.v = body->getArgument(k);
    e.shape = shapeOf(e.v);
    e.dtype = dtypeOf(cast<RankedTensorType>(types[k]).getElementType());
    values[name] = std::move(e);
  }
  return types;
}

LogicalResult Importer::importNode(const onnx::NodeProto &node, int index) {
  std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
  auto opsetIt = opsets.find(domain);
  int64_t opset = opsetIt == opsets.end() ? 0 : opsetIt->second;
  NodeCtx n(*this, node, index, opset, nodeLoc(node, index));
  if (opsetIt == opsets.end()) {
    // com.microsoft contrib ops are versioned 1 and often imported implicitly.
    if (domain != "com.microsoft")
      return n.fail("domain '" + domain + "' is not in the model's opset_import");
    n.opset = 1;
  }
  if (!domain.empty() && domain != "com.microsoft")
    return n.fail("unsupported domain");
  const auto &table = domain.empty() ? onnxHandlers() : microsoftHandlers();
  auto it = table.find(node.op_type());
  if (it == table.end())
    return n.fail("unsupported op");
  // Opsets 22-28 changed the supported ops only by new element types (which
  // the importer refuses by name), Cast's round_mode (for float8e8m0 only)
  // and Range's stash_type (checked there); they added Attention and
  // RMSNormalization (23).
  if (domain.empty() && (n.opset < 1 || n.opset > kMaxOpset))
    return n.fail("unsupported opset (PipeMesh reads opsets up to " + Twine(kMaxOpset) + ")");
  if (domain.empty()) {
    // Ops newer than the model's opset do not exist in it.
    static const llvm::StringMap<int64_t> since = {
        {"Expand", 8},           {"ConstantOfShape", 9},
        {"Where", 9},            {"Erf", 9},
        {"Range", 11},           {"SoftmaxCrossEntropyLoss", 12},
        {"NegativeLogLikelihoodLoss", 12}, {"LayerNormalization", 17},
        {"Gelu", 20},            {"Trilu", 14},
        {"Attention", 23},       {"RMSNormalization", 23},
        {"RotaryEmbedding", 23}};
    auto s = since.find(node.op_type());
    if (s != since.end() && n.opset < s->second)
      return n.fail("ai.onnx " + node.op_type() + " exists from opset " + Twine(s->second));
  }
  // Every supported op has a first output; the handlers rely on it.
  if (!n.hasOutput(0))
    return n.fail("has no first output");
  // ONNX graphs are in SSA form: a name is defined once.
  llvm::StringSet<> outs;
  for (const std::string &out : node.output())
    if (!out.empty() && (values.count(out) || !outs.insert(out).second))
      return n.fail("output '" + out + "' is already defined");
  if (failed(it->second(*this, n)))
    return failure();
  if (!n.attrError.empty())
    return n.fail(n.attrError);
  return success();
}

void Importer::restoreTiedEmbedding() {
  if (opts.tieEmbeddings == TieEmbeddings::Off)
    return;
  // The output head: a parameter that is the right-hand side of a matmul whose
  // result the function returns (through reshapes). Only such a parameter may
  // be tied - other [C, V] weights (an MLP with 4C == V) must never be.
  llvm::StringSet<> heads;
  module.walk([&](func::ReturnOp ret) {
    for (Value v : ret.getOperands()) {
      while (auto r = v.getDefiningOp<pm::ReshapeOp>())
        v = r.getInput();
      if (auto mm = v.getDefiningOp<pm::MatMulOp>())
        if (auto g = mm.getB().getDefiningOp<pm::GetParamOp>())
          heads.insert(g.getName());
    }
  });
  // A head stored as the exact transposed copy of the token embedding: [C, V]
  // against the embedding's [V, C].
  for (auto &emb : embeddingParams) {
    pm::ParamOp embOp = params.lookup(emb.getKey());
    if (!embOp)
      continue;
    auto embType = cast<RankedTensorType>(embOp.getType());
    for (auto &kv : params) {
      pm::ParamOp head = kv.second;
      if (!head || head == embOp || !heads.contains(kv.getKey()))
        continue;
      auto ht = cast<RankedTensorType>(head.getType());
      if (ht.getRank() != 2 || ht.getDimSize(0) != embType.getDimSize(1) ||
          ht.getDimSize(1) != embType.getDimSize(0) || ht.getElementType() != embType.getElementType())
        continue;
      const onnx::TensorProto *headInit = values.lookup(kv.getKey().str()).init;
      const onnx::TensorProto *embInit = values.lookup(emb.getKey().str()).init;
      if (!headInit || !embInit)
        continue;
      bool equal = false;
      std::string why;
      std::vector<float> hv, ev;
      if (!opts.shapesOnly && readFloat32(*headInit, baseDir, hv, why) &&
          readFloat32(*embInit, baseDir, ev, why)) {
        int64_t V = embType.getDimSize(0), C = embType.getDimSize(1);
        equal = true;
        for (int64_t v = 0; v < V && equal; ++v)
          for (int64_t c = 0; c < C; ++c)
            if (hv[c * V + v] != ev[v * C + c]) {
              equal = false;
              break;
            }
      }
      if (!equal && opts.tieEmbeddings != TieEmbeddings::On)
        continue;
      // Replace every read of the head by the transposed embedding.
      SmallVector<pm::GetParamOp> reads;
      module.walk([&](pm::GetParamOp g) {
        if (g.getName() == head.getSymName())
          reads.push_back(g);
      });
      for (pm::GetParamOp g : reads) {
        b.setInsertionPoint(g);
        Value e = b.create<pm::GetParamOp>(g.getLoc(), embType, embOp.getSymName());
        Value t = b.create<pm::TransposeOp>(g.getLoc(), ht, e, SmallVector<int64_t>{1, 0});
        g.getResult().replaceAllUsesWith(t);
        g.erase();
      }
      emitWarning(head.getLoc()) << "output head '" << head.getSymName() << "' "
                                 << (equal ? "is an exact transposed copy of"
                                           : "is tied (--tie-embeddings=on) to")
                                 << " the token embedding '" << embOp.getSymName()
                                 << "': restored the tie";
      kv.second = nullptr;
      head.erase();
      return;
    }
  }
}

/// A graph output's declared element type and shape (where it gives them)
/// must match what the import computed: a mismatch means the model is
/// inconsistent or an op was imported wrongly, never something to pass on.
/// A trained initializer read by several nodes of one op type (five
/// LayerNormalizations, say) is one parameter they all share. Models rarely
/// mean that (the tied embedding is read by a Gather and a MatMul), but an
/// exporter that merges initializers of equal values makes it out of a freshly
/// initialized model's scales and biases: say so, once per initializer.
void Importer::warnSharedParameters() {
  const onnx::GraphProto &g = model.graph();
  std::map<std::string, std::map<std::string, std::vector<std::string>>> readers;
  for (int k = 0; k < g.node_size(); ++k) {
    const onnx::NodeProto &node = g.node(k);
    if (node.op_type() == "Identity") // copies become parameters of their own
      continue;
    std::string name = !node.name().empty()   ? node.name()
                       : node.output_size() ? node.output(0)
                                            : "#" + std::to_string(k);
    std::set<std::string> seen; // a node reading it twice is one reader
    for (const std::string &in : node.input())
      if (params.count(in) && seen.insert(in).second)
        readers[in][node.op_type()].push_back(name);
  }
  auto fileLoc = FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0);
  for (auto &[init, byType] : readers)
    for (auto &[opType, nodes] : byType) {
      if (nodes.size() < 2)
        continue;
      auto diag = emitWarning(fileLoc)
                  << "initializer '" << init << "' is read by " << nodes.size() << " "
                  << opType << " nodes ('" << nodes[0] << "', '" << nodes[1] << "'"
                  << (nodes.size() > 2 ? ", ..." : "")
                  << "): they train it as one shared parameter. An exporter that merges "
                     "initializers of equal values (torch.onnx.export(dynamo=True) does by "
                     "default) ties the equal scales and biases of a freshly initialized "
                     "model; export with optimize=False unless they are meant to be shared";
      break;
    }
}

LogicalResult Importer::checkDeclaredOutput(const onnx::ValueInfoProto &out, const Entry &e) {
  if (!out.type().has_tensor_type())
    return success();
  const auto &tt = out.type().tensor_type();
  auto fail = [&](const Twine &what) {
    emitError(FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0))
        << "graph output '" << out.name() << "' " << what;
    return failure();
  };
  DType declared = (DType)tt.elem_type();
  // Every float type is imported as float32 (elementType), so a bfloat16
  // output computes float32 here.
  bool bothFloat = isFloatType(declared) && isFloatType(e.dtype);
  if (declared != DType::Undefined && declared != e.dtype && !bothFloat)
    return fail(Twine("is declared ") + dtypeName(declared) + " but computes " +
                dtypeName(e.dtype));
  if (!tt.has_shape())
    return success();
  shapes::Shape want;
  const auto &dims = tt.shape().dim();
  bool known = (int64_t)dims.size() == (int64_t)e.shape.size();
  for (int k = 0; k < dims.size() && known; ++k) {
    if (dims[k].has_dim_value())
      want.push_back(dims[k].dim_value());
    else if (dims[k].has_dim_param() && boundDims.count(dims[k].dim_param()))
      want.push_back(boundDims[dims[k].dim_param()]);
    else
      want.push_back(e.shape[k]); // an unnamed or unbound dim matches anything
  }
  if (!known || want != e.shape) {
    std::string decl = "[";
    for (int k = 0; k < dims.size(); ++k) {
      if (k)
        decl += ", ";
      decl += dims[k].has_dim_value() ? std::to_string(dims[k].dim_value())
              : dims[k].has_dim_param() ? dims[k].dim_param()
                                        : "?";
    }
    decl += "]";
    return fail("is declared with shape " + decl + " but computes " + shapes::str(e.shape));
  }
  return success();
}

OwningOpRef<ModuleOp> Importer::run() {
  auto fileLoc = FileLineColLoc::get(b.getStringAttr(sourceName), 0, 0);
  for (const auto &op : model.opset_import()) {
    std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    opsets[domain] = op.version();
  }
  if (!opsets.count("")) {
    emitError(fileLoc) << "the model imports no version of the default ONNX domain";
    return nullptr;
  }
  OwningOpRef<ModuleOp> owned = ModuleOp::create(fileLoc);
  module = *owned;
  module->setAttr("pmesh.source", b.getStringAttr(sourceName));
  module->setAttr("pmesh.opset", b.getI64IntegerAttr(opsets[""]));
  b.setInsertionPointToEnd(module.getBody());
  if (failed(importInitializers()))
    return nullptr;
  Block *body = nullptr;
  auto inputTypes = importInputs(body);
  if (failed(inputTypes))
    return nullptr;
  auto func = cast<func::FuncOp>(body->getParentOp());
  b.setInsertionPointToEnd(body);
  const onnx::GraphProto &g = model.graph();
  // Folded constants are dropped after their last reader: a mask folded at
  // 4096 tokens goes through several [T, T] intermediates of 8 bytes an
  // element, which need not all be held at once. (Graph outputs are never
  // dropped; local functions see only their call's inputs.)
  llvm::StringMap<int64_t> readersLeft;
  for (const onnx::NodeProto &node : g.node())
    for (const std::string &input : node.input())
      if (!input.empty())
        ++readersLeft[input];
  for (const onnx::ValueInfoProto &out : g.output())
    ++readersLeft[out.name()];
  for (int k = 0; k < g.node_size(); ++k) {
    if (failed(importNode(g.node(k), k)))
      return nullptr;
    for (const std::string &input : g.node(k).input())
      if (!input.empty() && --readersLeft[input] == 0)
        releaseConstant(input);
  }
  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const onnx::ValueInfoProto &out : g.output()) {
    auto it = values.find(out.name());
    if (it == values.end()) {
      emitError(fileLoc) << "graph output '" << out.name() << "' is never produced";
      return nullptr;
    }
    if (it->second.kind == Entry::Poison) {
      emitError(fileLoc) << "graph output '" << out.name() << "' " << it->second.poison;
      return nullptr;
    }
    if (it->second.kind == Entry::LazyConst) {
      std::string why;
      auto c = std::make_shared<ConstTensor>();
      if (!readTensor(*it->second.init, baseDir, *c, why)) {
        emitError(fileLoc) << why;
        return nullptr;
      }
      it->second.c = c;
      it->second.kind = Entry::Const;
    }
    if (failed(elementType(it->second.dtype, nullptr, "graph output '" + out.name() + "'")))
      return nullptr;
    if (failed(checkDeclaredOutput(out, it->second)))
      return nullptr;
    Value v = materialize(it->second, fileLoc);
    results.push_back(v);
    resultTypes.push_back(v.getType());
  }
  if (results.empty()) {
    emitError(fileLoc) << "the graph has no outputs";
    return nullptr;
  }
  b.create<func::ReturnOp>(fileLoc, results);
  func.setFunctionType(b.getFunctionType(*inputTypes, resultTypes));
  for (auto [k, out] : llvm::enumerate(g.output()))
    func.setResultAttr(k, "pmesh.name", b.getStringAttr(out.name()));
  restoreTiedEmbedding();
  warnSharedParameters();
  if (!otherFloatTypes.empty()) {
    auto diag = emitWarning(fileLoc) << "the model's ";
    llvm::interleave(otherFloatTypes, diag, ", ");
    diag << " tensors are imported as float32; the plan's activations= and params= options "
            "choose the precision it trains in";
  }
  if (failed(mlir::verify(module)))
    return nullptr;
  return owned;
}

} // namespace

OwningOpRef<ModuleOp> pipemesh::importONNXBuffer(StringRef bytes, bool isText,
                                                 StringRef sourceName, StringRef baseDir,
                                                 const ImportOptions &options,
                                                 MLIRContext *context) {
  context->loadDialect<pm::PMeshDialect, func::FuncDialect>();
  onnx::ModelProto model;
  std::string why;
  if (!parseModel(bytes, isText, model, why) || !inlineLocalFunctions(model, options.maxInlinedNodes, why)) {
    emitError(FileLineColLoc::get(context, sourceName, 0, 0)) << why;
    return nullptr;
  }
  Importer importer(context, options, model, sourceName, baseDir);
  return importer.run();
}

OwningOpRef<ModuleOp> pipemesh::importONNXFile(StringRef path, const ImportOptions &options,
                                               MLIRContext *context) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    emitError(FileLineColLoc::get(context, path, 0, 0))
        << "cannot open '" << path << "': " << buffer.getError().message();
    return nullptr;
  }
  bool isText = path.ends_with(".onnxtxt");
  StringRef dir = llvm::sys::path::parent_path(path);
  return importONNXBuffer((*buffer)->getBuffer(), isText, path, dir.empty() ? "." : dir, options,
                          context);
}
