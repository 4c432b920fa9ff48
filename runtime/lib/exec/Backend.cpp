//===- Backend.cpp - the registry of compute backends -----------------------===//
#include "pipemesh/runtime/Backend.h"

namespace pipemesh::rt {

ComputeBackend::~ComputeBackend() = default;

static std::map<std::string, BackendFactory> &registry() {
  static std::map<std::string, BackendFactory> r;
  return r;
}

void registerBackend(const std::string &name, BackendFactory factory) {
  registry()[name] = std::move(factory);
}

const BackendFactory *findBackend(const std::string &name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> availableBackends() {
  std::vector<std::string> out{"cpu"};
  for (const auto &kv : registry())
    out.push_back(kv.first);
  return out;
}

} // namespace pipemesh::rt
