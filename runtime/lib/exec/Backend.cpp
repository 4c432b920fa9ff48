//===- Backend.cpp - the registry of compute backends and their plugins -----===//
#include "pipemesh/runtime/Backend.h"

#include "pipemesh/runtime/Error.h"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <set>

namespace pipemesh::rt {

namespace fs = std::filesystem;

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

static const char kPluginPrefix[] = "libpipemesh-backend-";
static const char kPluginSuffix[] = ".so";

/// Where plugins are: lib/ beside the directory of the running executable
/// (the build tree's bin/ and lib/, and bench/gpu_bundle.sh's).
static fs::path pluginDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return {};
  return exe.parent_path().parent_path() / "lib";
}

std::string availableBackends() {
  std::set<std::string> names;
  for (const auto &kv : registry())
    names.insert(kv.first);
  std::error_code ec;
  fs::path dir = pluginDir();
  if (!dir.empty())
    for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
      std::string f = e.path().filename().string();
      size_t pre = sizeof(kPluginPrefix) - 1, suf = sizeof(kPluginSuffix) - 1;
      if (f.size() > pre + suf && f.compare(0, pre, kPluginPrefix) == 0 &&
          f.compare(f.size() - suf, suf, kPluginSuffix) == 0)
        names.insert(f.substr(pre, f.size() - pre - suf));
    }
  names.erase("cpu");
  std::string list = "cpu";
  for (const std::string &n : names)
    list += ", " + n;
  return list;
}

const BackendFactory &loadBackend(const std::string &name) {
  if (const BackendFactory *f = findBackend(name))
    return *f;
  bool plain = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
  fs::path dir = pluginDir();
  fs::path path = dir / (kPluginPrefix + name + kPluginSuffix);
  std::error_code ec;
  if (!plain || dir.empty() || !fs::exists(path, ec))
    fail("backend '", name, "' is not available in this build (available: ", availableBackends(),
         plain && !dir.empty() ? "; no plugin " + path.string() : std::string(), ")");
  // RTLD_NOW: a library or a runtime symbol the plugin lacks is named here,
  // not at its first call. The handle is never closed: the registered
  // factory's code lives in the plugin.
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    fail("backend '", name, "': cannot load its plugin: ", dlerror());
  auto buildId = reinterpret_cast<const char *(*)()>(dlsym(handle, "pipemesh_backend_build_id"));
  auto registerIt = reinterpret_cast<void (*)()>(dlsym(handle, "pipemesh_register_backend"));
  if (!buildId || !registerIt)
    fail("backend '", name, "': ", path.string(),
         " is not a PipeMesh backend plugin (it lacks pipemesh_backend_build_id or "
         "pipemesh_register_backend)");
  if (std::string(buildId()) != PIPEMESH_BUILD_ID)
    fail("backend '", name, "': the plugin ", path.string(), " comes from another build (",
         buildId(), ") than this pipemesh-run (", PIPEMESH_BUILD_ID,
         "): their classes may differ; install the two from one build");
  registerIt();
  if (const BackendFactory *f = findBackend(name))
    return *f;
  fail("backend '", name, "': its plugin ", path.string(), " registered no backend of that name");
}

} // namespace pipemesh::rt
