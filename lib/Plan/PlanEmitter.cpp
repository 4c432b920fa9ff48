//===- PlanEmitter.cpp - module -> plan artifact ---------------------------===//
//
// Lowers @train_step / @optimizer_step into one rank's instruction stream:
// zero the gradients, then per micro-batch load the data and run the
// train-step ops, accumulating gradients and the loss, then one AdamW step.
// Every value gets a buffer in one arena: parameters, gradients, Adam moments
// and constants persist; activations share memory by liveness (reshapes alias
// their input). See docs/plan-format.md.
//
//===----------------------------------------------------------------------===//
#include "pipemesh/Plan/Plan.h"

#include "pipemesh/Dialect/PMesh/PMesh.h"
#include "pipemesh/Dialect/PMesh/ShapeFunctions.h"
#include "pipemesh/Import/ONNXImporter.h"
#include "pipemesh/Plan/MemoryPlanner.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <cstring>

using namespace mlir;
namespace json = llvm::json;
namespace pm = pipemesh::pmesh;

namespace pipemesh::plan {

uint64_t fnv1a64(llvm::StringRef bytes, uint64_t hash) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

bool parseCompileOptions(llvm::StringRef text, CompileOptions &opts, std::string &why) {
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [key, value] = item.split('=');
    auto setInt = [&](int64_t &dst) {
      if (value.getAsInteger(10, dst) || dst <= 0) {
        why = "'" + key.str() + "' needs a positive integer, got '" + value.str() + "'";
        return false;
      }
      return true;
    };
    if (key == "batch" ? !setInt(opts.batch)
        : key == "seq" ? !setInt(opts.seq)
        : key == "pp" ? !setInt(opts.pp)
        : key == "dp" ? !setInt(opts.dp)
        : key == "vpp" ? !setInt(opts.vpp)
        : key == "microbatches" ? !setInt(opts.microbatches)
                                : false)
      return false;
    if (key == "schedule")
      opts.schedule = value.str();
    else if (key == "shapes-only")
      opts.shapesOnly = value == "true" || value == "1";
    else if (key == "labels") {
      if (value != "auto" && value != "next" && value != "same") {
        why = "labels must be auto, next or same, got '" + value.str() + "'";
        return false;
      }
      opts.labels = value.str();
    } else if (!llvm::is_contained({"batch", "seq", "pp", "dp", "vpp", "microbatches"}, key)) {
      why = "unknown option '" + key.str() + "'";
      return false;
    }
  }
  if (!opts.batch || !opts.seq) {
    why = "batch=B and seq=T are required";
    return false;
  }
  return true;
}

namespace {

struct Buffer {
  std::string name;
  llvm::SmallVector<int64_t> shape;
  std::string dtype; // f32, i64, i32, i1, f64, f16, bf16
  std::string kind;  // input, activation, param, grad, adam_m, adam_v, constant
  std::string param; // for param/grad/adam_*
  std::string data;  // constant: safetensors entry
  int aliasOf = -1;  // reshape results share their input's memory
  int64_t offset = 0;
  int64_t bytes() const {
    int64_t es = dtype == "f64" || dtype == "i64" ? 8
                 : dtype == "f16" || dtype == "bf16" ? 2
                 : dtype == "i1" ? 1
                                 : 4;
    return shapes::numElements(shape) * es;
  }
};

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

/// Builds one rank's buffers and program.
class Emitter {
public:
  Emitter(ModuleOp module, const CompileOptions &opts) : module(module), opts(opts) {}

  LogicalResult run(llvm::raw_ostream &os);

private:
  int addBuffer(Buffer b) {
    buffers.push_back(std::move(b));
    return buffers.size() - 1;
  }
  int root(int id) const {
    while (buffers[id].aliasOf >= 0)
      id = buffers[id].aliasOf;
    return id;
  }
  Buffer valueBuffer(Value v, StringRef kind, StringRef name) {
    auto t = cast<RankedTensorType>(v.getType());
    Buffer b;
    b.name = name.str();
    b.shape.assign(t.getShape().begin(), t.getShape().end());
    b.dtype = dtypeOf(t.getElementType());
    b.kind = kind.str();
    return b;
  }
  LogicalResult lowerTrainStep(func::FuncOp train);
  LogicalResult layoutArena();
  LogicalResult writeWeights(std::string &blob);
  json::Object manifest();

  ModuleOp module;
  const CompileOptions &opts;
  std::vector<Buffer> buffers;
  llvm::DenseMap<Value, int> bufferOf;
  llvm::StringMap<int> paramBuf, gradBuf, mBuf, vBuf;
  std::vector<std::string> paramOrder;
  llvm::StringMap<std::string> paramSource;
  llvm::StringMap<bool> paramDecay;
  llvm::StringMap<DenseElementsAttr> constants;
  json::Array body; // one micro-batch
  std::vector<int> bodyUsesFirst, bodyUsesLast; // per buffer, instruction indices
  int tokensBuf = -1, targetsBuf = -1;
  int64_t vocab = 0, arenaBytes = 0, persistentBytes = 0, activationPeak = 0;
  double flopsPerMicrobatch = 0;
  std::string lossMode = "appended";
};

LogicalResult Emitter::lowerTrainStep(func::FuncOp train) {
  // Parameters: value, gradient and AdamW moments persist for the whole run.
  auto adamw = [&]() -> pm::AdamWOp {
    auto opt = module.lookupSymbol<func::FuncOp>("optimizer_step");
    if (!opt)
      return nullptr;
    pm::AdamWOp found;
    opt.walk([&](pm::AdamWOp op) { found = op; });
    return found;
  }();
  if (!adamw)
    return module.emitError("no @optimizer_step with pmesh.adamw: run --pmesh-autodiff first");
  for (auto [sym, decay] : llvm::zip(adamw.getParams(), adamw.getDecay()))
    paramDecay[cast<FlatSymbolRefAttr>(sym).getValue()] = decay;
  for (auto param : module.getOps<pm::ParamOp>()) {
    StringRef name = param.getSymName();
    auto t = cast<RankedTensorType>(param.getType());
    if (!t.getElementType().isF32())
      return param.emitOpError("only float32 parameters are supported");
    Buffer b;
    b.name = name.str();
    b.shape.assign(t.getShape().begin(), t.getShape().end());
    b.dtype = "f32";
    b.param = name.str();
    b.kind = "param";
    paramBuf[name] = addBuffer(b);
    paramOrder.push_back(name.str());
    paramSource[name] = param.getSource() ? param.getSource()->str() : name.str();
    if (paramDecay.count(name)) {
      b.kind = "grad", b.name = name.str() + ".grad";
      gradBuf[name] = addBuffer(b);
      b.kind = "adam_m", b.name = name.str() + ".adam_m";
      mBuf[name] = addBuffer(b);
      b.kind = "adam_v", b.name = name.str() + ".adam_v";
      vBuf[name] = addBuffer(b);
    }
  }

  // Inputs: what the data loader feeds.
  Block &entry = train.getBody().front();
  int maskBuf = -1;
  for (BlockArgument arg : entry.getArguments()) {
    auto nameAttr = train.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "pmesh.name");
    StringRef name = nameAttr ? nameAttr.getValue() : "";
    auto t = cast<RankedTensorType>(arg.getType());
    if (t.getShape() != llvm::ArrayRef<int64_t>({opts.batch, opts.seq}))
      return train.emitError() << "input '" << name << "' has shape "
                               << shapes::str(t.getShape()) << ", expected [batch, seq] = ["
                               << opts.batch << ", " << opts.seq << "]";
    if (name == "input_ids" || (tokensBuf < 0 && name != "targets" && name != "labels" &&
                                name != "attention_mask" && t.getElementType().isInteger(64))) {
      tokensBuf = addBuffer(valueBuffer(arg, "input", name));
      bufferOf[arg] = tokensBuf;
    } else if (name == "targets" || name == "labels") {
      bool same = opts.labels == "same";
      if (name == "labels" && opts.labels == "auto")
        same = llvm::any_of(arg.getUsers(), [](Operation *u) { return isa<pm::SliceOp>(u); });
      if (name == "labels")
        lossMode = "model";
      if (same) {
        lossMode = "model-shifted";
        continue; // bound to the tokens buffer below
      }
      targetsBuf = addBuffer(valueBuffer(arg, "input", name));
      bufferOf[arg] = targetsBuf;
    } else if (name == "attention_mask") {
      // Every token of a training window is real: the mask is all ones.
      Buffer b = valueBuffer(arg, "constant", name);
      b.data = "const." + name.str();
      auto ones = DenseElementsAttr::get(t, t.getElementType().isInteger(1)
                                                ? (Attribute)BoolAttr::get(t.getContext(), true)
                                                : (Attribute)IntegerAttr::get(t.getElementType(), 1));
      if (isa<FloatType>(t.getElementType()))
        ones = DenseElementsAttr::get(t, FloatAttr::get(t.getElementType(), 1.0));
      constants[b.data] = ones;
      maskBuf = addBuffer(b);
      bufferOf[arg] = maskBuf;
    } else {
      return train.emitError() << "cannot feed input '" << name
                               << "': the data loader provides input_ids, targets/labels and "
                                  "attention_mask";
    }
  }
  if (tokensBuf < 0)
    return train.emitError("no token input (input_ids)");
  for (BlockArgument arg : entry.getArguments())
    if (!bufferOf.count(arg))
      bufferOf[arg] = tokensBuf; // labels == input ids, shifted inside the model

  // The micro-batch body.
  double invM = 1.0 / (double)(opts.microbatches * opts.dp);
  auto use = [&](int buf, int64_t at) {
    buf = root(buf);
    if ((size_t)buf >= bodyUsesFirst.size()) {
      bodyUsesFirst.resize(buffers.size(), INT32_MAX);
      bodyUsesLast.resize(buffers.size(), -1);
    }
    bodyUsesFirst[buf] = std::min<int>(bodyUsesFirst[buf], at);
    bodyUsesLast[buf] = std::max<int>(bodyUsesLast[buf], at);
  };
  int constCount = 0;
  for (Operation &op : entry) {
    int64_t at = body.size();
    if (auto get = dyn_cast<pm::GetParamOp>(op)) {
      bufferOf[get] = paramBuf.lookup(get.getName());
      continue;
    }
    if (auto c = dyn_cast<pm::ConstantOp>(op)) {
      Buffer b = valueBuffer(c, "constant", "const" + std::to_string(constCount));
      b.data = "const." + std::to_string(constCount++);
      auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
      if (!dense)
        return c.emitOpError("only dense constants can be emitted");
      constants[b.data] = dense;
      bufferOf[c] = addBuffer(b);
      continue;
    }
    if (auto r = dyn_cast<pm::ReshapeOp>(op)) {
      Buffer b = valueBuffer(r, "activation", "v" + std::to_string(buffers.size()));
      b.aliasOf = bufferOf.lookup(r.getInput());
      bufferOf[r] = addBuffer(b);
      continue;
    }
    if (auto acc = dyn_cast<pm::AccumulateGradOp>(op)) {
      int src = bufferOf.lookup(acc.getGrad());
      use(src, at);
      body.push_back(json::Object{{"op", "accumulate"},
                                  {"in", json::Array{src}},
                                  {"out", json::Array{gradBuf.lookup(acc.getParam())}},
                                  {"scale", invM}});
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      int src = bufferOf.lookup(ret.getOperand(0));
      use(src, at);
      body.push_back(json::Object{{"op", "loss"}, {"in", json::Array{src}}, {"scale", invM}});
      continue;
    }
    if (op.getDialect()->getNamespace() != "pmesh")
      return op.emitOpError("cannot be emitted into a plan");
    json::Array ins, outs;
    for (Value v : op.getOperands()) {
      int id = bufferOf.lookup(v);
      ins.push_back(id);
      use(id, at);
    }
    for (Value r : op.getResults()) {
      int id = addBuffer(valueBuffer(r, "activation", "v" + std::to_string(buffers.size())));
      bufferOf[r] = id;
      outs.push_back(id);
      use(id, at);
    }
    json::Object attrs;
    for (NamedAttribute a : op.getAttrs())
      attrs[a.getName().getValue()] = attrToJson(a.getValue());
    // Defaults are not stored on the op but the runtime needs them spelled out.
    if (auto mm = dyn_cast<pm::MatMulOp>(op)) {
      attrs["transpose_a"] = mm.getTransposeA();
      attrs["transpose_b"] = mm.getTransposeB();
      auto shape = cast<RankedTensorType>(mm.getType()).getShape();
      auto a = cast<RankedTensorType>(mm.getA().getType()).getShape();
      int64_t k = mm.getTransposeA() ? a[a.size() - 2] : a.back();
      flopsPerMicrobatch += 2.0 * shapes::numElements(shape) * k;
    }
    auto attentionFlops = [&](Value q, Value k, double matmuls) {
      auto qs = cast<RankedTensorType>(q.getType()).getShape();
      auto ks = cast<RankedTensorType>(k.getType()).getShape();
      flopsPerMicrobatch += matmuls * 2.0 * shapes::numElements(qs) * ks[ks.size() - 2];
    };
    if (auto a = dyn_cast<pm::AttentionOp>(op))
      attentionFlops(a.getQ(), a.getK(), 2);
    if (auto a = dyn_cast<pm::AttentionGradOp>(op))
      attentionFlops(a.getQ(), a.getK(), 5);
    if (auto e = dyn_cast<pm::EmbeddingOp>(op))
      if (root(bufferOf.lookup(e.getIds())) == tokensBuf)
        vocab = cast<RankedTensorType>(e.getTable().getType()).getDimSize(0);
    json::Object inst{{"op", op.getName().getStringRef().drop_front(6)},
                      {"in", std::move(ins)},
                      {"out", std::move(outs)}};
    if (!attrs.empty())
      inst["attrs"] = std::move(attrs);
    body.push_back(std::move(inst));
  }
  // Inputs are written by load_microbatch just before the body.
  use(tokensBuf, -1);
  if (targetsBuf >= 0)
    use(targetsBuf, -1);
  (void)maskBuf;
  return success();
}

LogicalResult Emitter::layoutArena() {
  bodyUsesFirst.resize(buffers.size(), INT32_MAX);
  bodyUsesLast.resize(buffers.size(), -1);
  auto align = [](int64_t v) { return (v + 63) / 64 * 64; };
  // Persistent buffers first, in table order.
  int64_t offset = 0;
  std::vector<int> transient;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer &b = buffers[i];
    if (b.aliasOf >= 0)
      continue;
    if (b.kind == "activation" || b.kind == "input") {
      transient.push_back(i);
      continue;
    }
    b.offset = offset;
    offset += align(b.bytes());
  }
  persistentBytes = offset;
  llvm::SmallVector<LiveRange> ranges;
  for (int i : transient) {
    int64_t first = std::min<int64_t>(bodyUsesFirst[i], bodyUsesLast[i]);
    int64_t last = std::max<int64_t>(bodyUsesLast[i], first);
    ranges.push_back({buffers[i].bytes(), first, last});
  }
  llvm::SmallVector<int64_t> offsets;
  activationPeak = assignOffsets(ranges, offsets);
  for (auto [i, off] : llvm::zip(transient, offsets))
    buffers[i].offset = persistentBytes + off;
  for (Buffer &b : buffers)
    if (b.aliasOf >= 0)
      b.offset = buffers[root(b.aliasOf)].offset;
  arenaBytes = persistentBytes + activationPeak;
  return success();
}

/// safetensors: 8-byte header length, JSON header, then the data.
LogicalResult Emitter::writeWeights(std::string &blob) {
  json::Object header;
  std::string data;
  std::unique_ptr<ONNXWeightReader> reader;
  std::string source;
  if (auto s = module->getAttrOfType<StringAttr>("pmesh.source"))
    source = s.getValue().str();
  if (!opts.shapesOnly) {
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
    for (const std::string &p : paramOrder) {
      std::vector<float> values;
      std::string why;
      if (!reader->readFloat32(paramSource.lookup(p), values, why))
        return module.emitError() << "parameter '" << p << "': " << why;
      const Buffer &b = buffers[paramBuf.lookup(p)];
      if ((int64_t)values.size() != shapes::numElements(b.shape))
        return module.emitError() << "parameter '" << p << "' has " << values.size()
                                  << " initial values for shape " << shapes::str(b.shape);
      add(p, "F32", b.shape,
          llvm::StringRef(reinterpret_cast<const char *>(values.data()), values.size() * 4));
    }
  }
  for (auto &kv : constants) {
    DenseElementsAttr attr = kv.second;
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
    add(kv.getKey(), dtype, shape, bytes);
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

json::Object Emitter::manifest() {
  json::Array bufs;
  for (auto [i, b] : llvm::enumerate(buffers)) {
    json::Object o{{"id", (int64_t)i},          {"name", b.name},
                   {"shape", json::Array(b.shape)}, {"dtype", b.dtype},
                   {"offset", b.offset},        {"bytes", b.bytes()},
                   {"kind", b.kind}};
    if (!b.param.empty())
      o["param"] = b.param;
    if (!b.data.empty())
      o["data"] = b.data;
    if (b.aliasOf >= 0)
      o["alias_of"] = b.aliasOf;
    bufs.push_back(std::move(o));
  }
  json::Array program;
  json::Array grads;
  for (const std::string &p : paramOrder)
    if (gradBuf.count(p))
      grads.push_back(gradBuf.lookup(p));
  program.push_back(json::Object{{"op", "zero"}, {"out", std::move(grads)}});
  for (int64_t j = 0; j < opts.microbatches; ++j) {
    json::Array outs{tokensBuf};
    if (targetsBuf >= 0)
      outs.push_back(targetsBuf);
    program.push_back(
        json::Object{{"op", "load_microbatch"}, {"index", j}, {"out", std::move(outs)}});
    for (const json::Value &inst : body)
      program.push_back(inst);
  }
  json::Array adamParams;
  for (const std::string &p : paramOrder)
    if (gradBuf.count(p))
      adamParams.push_back(json::Object{{"param", paramBuf.lookup(p)},
                                        {"grad", gradBuf.lookup(p)},
                                        {"m", mBuf.lookup(p)},
                                        {"v", vBuf.lookup(p)},
                                        {"decay", paramDecay.lookup(p)}});
  program.push_back(json::Object{{"op", "adamw"}, {"params", std::move(adamParams)}});

  json::Array params;
  int64_t numParams = 0;
  for (const std::string &p : paramOrder) {
    const Buffer &b = buffers[paramBuf.lookup(p)];
    numParams += shapes::numElements(b.shape);
    params.push_back(json::Object{{"name", p},
                                  {"shape", json::Array(b.shape)},
                                  {"source", paramSource.lookup(p)},
                                  {"decay", paramDecay.lookup(p)},
                                  {"trained", (bool)gradBuf.count(p)}});
  }
  std::string source;
  if (auto s = module->getAttrOfType<StringAttr>("pmesh.source")) {
    llvm::SmallString<256> abs(s.getValue());
    llvm::sys::fs::make_absolute(abs);
    source = std::string(abs);
  }
  json::Object inputs{{"tokens", buffers[tokensBuf].name}};
  if (targetsBuf >= 0)
    inputs["targets"] = buffers[targetsBuf].name;
  return json::Object{
      {"format", "pipemesh-plan"},
      {"version", (int64_t)kPlanFormatVersion},
      {"model",
       json::Object{{"source", source},
                    {"batch", opts.batch},
                    {"seq", opts.seq},
                    {"vocab", vocab},
                    {"num_params", numParams},
                    {"flops_per_step", flopsPerMicrobatch * opts.microbatches * opts.dp},
                    {"loss", lossMode},
                    {"shapes_only", opts.shapesOnly}}},
      {"parallel", json::Object{{"pp", opts.pp},
                                {"dp", opts.dp},
                                {"vpp", opts.vpp},
                                {"microbatches", opts.microbatches},
                                {"schedule", opts.schedule},
                                {"world_size", opts.pp * opts.dp}}},
      {"inputs", std::move(inputs)},
      {"params", std::move(params)},
      {"ranks", json::Array{json::Object{{"rank", 0},
                                         {"arena_bytes", arenaBytes},
                                         {"persistent_bytes", persistentBytes},
                                         {"activation_peak_bytes", activationPeak},
                                         {"buffers", std::move(bufs)},
                                         {"program", std::move(program)}}}}};
}

LogicalResult Emitter::run(llvm::raw_ostream &os) {
  if (opts.pp != 1 || opts.dp != 1 || opts.vpp != 1)
    return module.emitError() << "pp=" << opts.pp << " dp=" << opts.dp << " vpp=" << opts.vpp
                              << ": only single-process plans (pp=1 dp=1 vpp=1) are "
                                 "implemented so far";
  auto train = module.lookupSymbol<func::FuncOp>("train_step");
  if (!train)
    return module.emitError("no @train_step: run --pmesh-autodiff first");
  if (failed(lowerTrainStep(train)) || failed(layoutArena()))
    return failure();
  std::string weights;
  if (failed(writeWeights(weights)))
    return failure();
  std::string manifestText;
  llvm::raw_string_ostream ms(manifestText);
  ms << json::Value(manifest());
  uint64_t hash = fnv1a64(weights, fnv1a64(manifestText));
  uint32_t version = kPlanFormatVersion, reserved = 0;
  uint64_t lm = manifestText.size(), lw = weights.size();
  os.write(kPlanMagic, 8);
  os.write(reinterpret_cast<const char *>(&version), 4);
  os.write(reinterpret_cast<const char *>(&reserved), 4);
  os.write(reinterpret_cast<const char *>(&lm), 8);
  os.write(reinterpret_cast<const char *>(&lw), 8);
  os.write(reinterpret_cast<const char *>(&hash), 8);
  os << manifestText << weights;
  return success();
}

} // namespace

LogicalResult emitPlan(ModuleOp module, const CompileOptions &opts, llvm::raw_ostream &os) {
  Emitter emitter(module, opts);
  return emitter.run(os);
}

} // namespace pipemesh::plan
