//===- ProgramView.h - a rank's instructions, field by field -*- C++ -*-===//
//
// What the readers of a plan (the simulator's loader, the deadlock check)
// see of a rank's program: instruction k's fields by name, with the values
// of docs/plan-format.md. A manifest's "program" array is one view; the
// compiler's own instructions, before they become JSON, are another, so a
// search simulates its candidates without building their manifests.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_SIM_PROGRAMVIEW_H
#define PIPEMESH_SIM_PROGRAMVIEW_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>

namespace pipemesh::sim {

class ProgramView {
public:
  virtual ~ProgramView() = default;
  virtual size_t size() const = 0;
  /// Field `key` of instruction k, or null when it has none (or is not an
  /// object: isObject).
  virtual const llvm::json::Value *field(size_t k, llvm::StringRef key) const = 0;
  /// Whether instruction k is an object at all (a manifest may hold anything).
  virtual bool isObject(size_t k) const { return true; }

  std::optional<llvm::StringRef> getString(size_t k, llvm::StringRef key) const {
    const llvm::json::Value *v = field(k, key);
    return v ? v->getAsString() : std::nullopt;
  }
  std::optional<int64_t> getInteger(size_t k, llvm::StringRef key) const {
    const llvm::json::Value *v = field(k, key);
    return v ? v->getAsInteger() : std::nullopt;
  }
  std::optional<double> getNumber(size_t k, llvm::StringRef key) const {
    const llvm::json::Value *v = field(k, key);
    return v ? v->getAsNumber() : std::nullopt;
  }
  std::optional<bool> getBoolean(size_t k, llvm::StringRef key) const {
    const llvm::json::Value *v = field(k, key);
    return v ? v->getAsBoolean() : std::nullopt;
  }
  const llvm::json::Array *getArray(size_t k, llvm::StringRef key) const {
    const llvm::json::Value *v = field(k, key);
    return v ? v->getAsArray() : nullptr;
  }
};

/// A manifest rank's "program" array.
class JsonProgramView : public ProgramView {
public:
  explicit JsonProgramView(const llvm::json::Array &program) : program(program) {}
  size_t size() const override { return program.size(); }
  bool isObject(size_t k) const override { return program[k].getAsObject() != nullptr; }
  const llvm::json::Value *field(size_t k, llvm::StringRef key) const override {
    const llvm::json::Object *o = program[k].getAsObject();
    return o ? o->get(key) : nullptr;
  }

private:
  const llvm::json::Array &program;
};

} // namespace pipemesh::sim

#endif // PIPEMESH_SIM_PROGRAMVIEW_H
