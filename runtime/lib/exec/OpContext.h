//===- OpContext.h - what an op binder sees (private) ------------*- C++ -*-===//
//
// Each *Ops.cpp file registers one binder per op name. A binder checks the
// instruction against the buffer table through an OpContext and returns the
// thunk that runs it. Errors thrown here (and from thunks) carry no
// instruction prefix: the executor adds "rank R, instruction I (op): ".
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_LIB_EXEC_OPCONTEXT_H
#define PIPEMESH_RUNTIME_LIB_EXEC_OPCONTEXT_H

#include "pipemesh/runtime/Backend.h"
#include "pipemesh/runtime/Error.h"
#include "pipemesh/runtime/Executor.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace pipemesh::rt {

class OpContext {
public:
  OpContext(ExecEnv &env, const Instruction &inst) : env(env), inst(inst) {}

  ExecEnv &env;
  const Instruction &inst;
  InstrClass cls = InstrClass::Compute;
  /// What a failure report says this instruction was doing beyond its op
  /// name ("recv from rank 0, tag 3"); empty: the op name alone.
  std::string activity;
  /// bf16 buffers this instruction reads and writes as f32 staging copies
  /// (Executor: widened before the kernel, rounded back after it), by
  /// buffer id: in() and out() return these instead of the arena's.
  std::map<int64_t, TensorRef> staged;

  size_t numIn() const { return inst.in.size(); }
  size_t numOut() const { return inst.out.size(); }
  TensorRef in(size_t i) const;
  TensorRef out(size_t i) const;
  /// Error unless minIn <= #in <= maxIn and minOut <= #out <= maxOut.
  void expectCounts(size_t minIn, size_t maxIn, size_t minOut, size_t maxOut) const;
  /// Error unless `t` has element type `want`; `role` names it ("input 0").
  void expectDType(const TensorRef &t, DType want, const std::string &role) const;
  void expectFloat(const TensorRef &t, const std::string &role) const {
    expectDType(t, DType::F32, role);
  }
  void expectIndex(const TensorRef &t, const std::string &role) const;
  void expectShape(const TensorRef &t, const Dims &want, const std::string &role) const;

  /// Every attribute accessor goes through has(), which records the name: an
  /// attribute no binder asked about is one this runtime does not know.
  bool has(const char *name) const {
    attrsAsked.insert(name);
    return inst.attrs.contains(name);
  }
  double f64(const char *name, std::optional<double> dflt = std::nullopt) const;
  int64_t i64(const char *name, std::optional<int64_t> dflt = std::nullopt) const;
  bool boolean(const char *name, std::optional<bool> dflt = std::nullopt) const;
  std::string str(const char *name, std::optional<std::string> dflt = std::nullopt) const;
  Dims ints(const char *name) const;

  /// A non-negative axis for a tensor of `rank` dims (Error when out of range).
  int64_t axis(int64_t axis, int64_t rank, const char *what = "axis") const;
  /// A field of the instruction outside "attrs" ("peer", "keep", "params"),
  /// nullptr when absent. Every field accessor goes through it and records
  /// the name, as has() does for attributes.
  const nlohmann::json *fieldValue(const char *name) const;
  /// A numeric field (outside "attrs").
  double field(const char *name, std::optional<double> dflt = std::nullopt) const;
  /// A boolean field (outside "attrs"), `dflt` when absent.
  bool flag(const char *name, bool dflt) const;
  /// A non-negative integer field (outside "attrs"), 0 when absent (a wait's
  /// "keep": how many of the most recent sends or collectives it leaves
  /// outstanding).
  int64_t count(const char *name) const;

  template <typename... Args> [[noreturn]] void error(Args &&...args) const {
    fail(std::forward<Args>(args)...);
  }

  /// Counts the attributes `other` (a context for the same instruction, such
  /// as a host fallback's) asked about as asked here.
  void noteAttributesAsked(const OpContext &other) const {
    attrsAsked.insert(other.attrsAsked.begin(), other.attrsAsked.end());
    fieldsAsked.insert(other.fieldsAsked.begin(), other.fieldsAsked.end());
  }
  /// The first attribute, then field outside "attrs", of the instruction that
  /// no binder asked about ("attribute 'window'", "field 'keep'"); empty when
  /// none. Fields every instruction may carry (op, in, out, attrs) and the
  /// compiler's annotations that change nothing it computes (action, bytes,
  /// flops) count as asked.
  std::string firstUnasked() const;

private:
  mutable std::set<std::string, std::less<>> attrsAsked, fieldsAsked;

  const nlohmann::json &attr(const char *name) const;
};

// OpBinder and OpTable: pipemesh/runtime/Backend.h (backends bring their own table).

void registerElementwiseOps(OpTable &t);
void registerReduceOps(OpTable &t);
void registerMatmulOp(OpTable &t);
void registerNormOps(OpTable &t);
void registerActivationOps(OpTable &t);
void registerAttentionOps(OpTable &t);
void registerEmbeddingOps(OpTable &t);
void registerLossOps(OpTable &t);
void registerShapeOps(OpTable &t);
void registerControlOps(OpTable &t);
void registerCommOps(OpTable &t);
/// Whether `op` is one of registerCommOps' instructions: they move a
/// buffer's bytes as they are (messages, collectives, whose async completion
/// outlives the thunk) or only mark buffers (free, waits).
bool isCommOp(const std::string &op);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_LIB_EXEC_OPCONTEXT_H
