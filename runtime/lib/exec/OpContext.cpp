//===- OpContext.cpp - what an op binder sees ------------------------------===//
#include "OpContext.h"

namespace pipemesh::rt {

TensorRef OpContext::in(size_t i) const {
  if (i >= inst.in.size())
    error("expects at least ", i + 1, " inputs, has ", inst.in.size());
  if (auto it = staged.find(inst.in[i]); it != staged.end())
    return it->second;
  return env.arena.tensor(inst.in[i]);
}

TensorRef OpContext::out(size_t i) const {
  if (i >= inst.out.size())
    error("expects at least ", i + 1, " outputs, has ", inst.out.size());
  if (auto it = staged.find(inst.out[i]); it != staged.end())
    return it->second;
  return env.arena.tensor(inst.out[i]);
}

void OpContext::expectCounts(size_t minIn, size_t maxIn, size_t minOut, size_t maxOut) const {
  auto range = [](size_t lo, size_t hi) {
    return lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
  };
  if (numIn() < minIn || numIn() > maxIn)
    error("expects ", range(minIn, maxIn), " inputs, has ", numIn());
  if (numOut() < minOut || numOut() > maxOut)
    error("expects ", range(minOut, maxOut), " outputs, has ", numOut());
}

static std::string describe(const TensorRef &t) {
  return concat("buffer ", t.info->id, t.info->name.empty() ? "" : " '" + t.info->name + "'", " (",
                shapeStr(t.shape), "x", dtypeName(t.dtype), ")");
}

void OpContext::expectDType(const TensorRef &t, DType want, const std::string &role) const {
  if (t.dtype != want)
    error(role, " ", describe(t), " must be ", dtypeName(want));
}

void OpContext::expectIndex(const TensorRef &t, const std::string &role) const {
  if (t.dtype != DType::I64 && t.dtype != DType::I32)
    error(role, " ", describe(t), " must be i64 or i32");
}

void OpContext::expectShape(const TensorRef &t, const Dims &want, const std::string &role) const {
  if (t.shape != want)
    error(role, " ", describe(t), " must have shape ", shapeStr(want));
}

std::string OpContext::firstUnasked() const {
  for (const auto &kv : inst.attrs.items())
    if (!attrsAsked.count(kv.key()))
      return "attribute '" + kv.key() + "'";
  static const std::set<std::string, std::less<>> kAlwaysKnown = {
      "op", "in", "out", "attrs", "action", "bytes", "flops"};
  for (const auto &kv : inst.json.items())
    if (!kAlwaysKnown.count(kv.key()) && !fieldsAsked.count(kv.key()))
      return "field '" + kv.key() + "'";
  return "";
}

const nlohmann::json &OpContext::attr(const char *name) const { return inst.attrs.at(name); }

const nlohmann::json *OpContext::fieldValue(const char *name) const {
  fieldsAsked.insert(name);
  auto it = inst.json.find(name);
  return it == inst.json.end() ? nullptr : &*it;
}

double OpContext::f64(const char *name, std::optional<double> dflt) const {
  if (!has(name)) {
    if (!dflt)
      error("has no attribute '", name, "'");
    return *dflt;
  }
  const auto &v = attr(name);
  if (!v.is_number())
    error("attribute '", name, "' must be a number, got ", v.dump());
  return v.get<double>();
}

int64_t OpContext::i64(const char *name, std::optional<int64_t> dflt) const {
  if (!has(name)) {
    if (!dflt)
      error("has no attribute '", name, "'");
    return *dflt;
  }
  const auto &v = attr(name);
  if (!v.is_number_integer())
    error("attribute '", name, "' must be an integer, got ", v.dump());
  return v.get<int64_t>();
}

bool OpContext::boolean(const char *name, std::optional<bool> dflt) const {
  if (!has(name)) {
    if (!dflt)
      error("has no attribute '", name, "'");
    return *dflt;
  }
  const auto &v = attr(name);
  if (!v.is_boolean())
    error("attribute '", name, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}

std::string OpContext::str(const char *name, std::optional<std::string> dflt) const {
  if (!has(name)) {
    if (!dflt)
      error("has no attribute '", name, "'");
    return *dflt;
  }
  const auto &v = attr(name);
  if (!v.is_string())
    error("attribute '", name, "' must be a string, got ", v.dump());
  return v.get<std::string>();
}

Dims OpContext::ints(const char *name) const {
  if (!has(name))
    error("has no attribute '", name, "'");
  const auto &v = attr(name);
  Dims out;
  if (!v.is_array())
    error("attribute '", name, "' must be an array of integers, got ", v.dump());
  for (const auto &d : v) {
    if (!d.is_number_integer())
      error("attribute '", name, "' must be an array of integers, got ", v.dump());
    out.push_back(d.get<int64_t>());
  }
  return out;
}

int64_t OpContext::axis(int64_t a, int64_t rank, const char *what) const {
  if (a < -rank || a >= rank)
    error(what, " ", a, " is out of range for rank ", rank);
  return a < 0 ? a + rank : a;
}

double OpContext::field(const char *name, std::optional<double> dflt) const {
  const nlohmann::json *it = fieldValue(name);
  if (!it) {
    if (!dflt)
      error("has no field '", name, "'");
    return *dflt;
  }
  if (!it->is_number())
    error("field '", name, "' must be a number, got ", it->dump());
  return it->get<double>();
}

bool OpContext::flag(const char *name, bool dflt) const {
  const nlohmann::json *it = fieldValue(name);
  if (!it)
    return dflt;
  if (!it->is_boolean())
    error("field '", name, "' must be true or false, got ", it->dump());
  return it->get<bool>();
}

int64_t OpContext::count(const char *name) const {
  const nlohmann::json *it = fieldValue(name);
  if (!it)
    return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 0)
    error("\"", name, "\" must be a non-negative integer, got ", it->dump());
  return it->get<int64_t>();
}

const OpTable &opTable() {
  static const OpTable table = [] {
    OpTable t;
    registerElementwiseOps(t);
    registerReduceOps(t);
    registerMatmulOp(t);
    registerNormOps(t);
    registerActivationOps(t);
    registerAttentionOps(t);
    registerEmbeddingOps(t);
    registerLossOps(t);
    registerShapeOps(t);
    registerControlOps(t);
    registerCommOps(t);
    return t;
  }();
  return table;
}

} // namespace pipemesh::rt
