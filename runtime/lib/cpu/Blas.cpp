//===- Blas.cpp - picking OpenBLAS's kernels for this CPU -------------------===//
//
// OpenBLAS (DYNAMIC_ARCH builds, as Debian's) chooses its kernels once, when
// the library loads, from the CPU model or from OPENBLAS_CORETYPE. 0.3.21 does
// not know the newest Xeons and falls back to the generic "Prescott" kernels,
// 4-5x slower on sgemm. configureBlas compares the chosen core with the CPU's
// features and, when it is weaker, sets OPENBLAS_CORETYPE and re-executes the
// program once (the variable must be set before the library loads). It never
// overrides a set OPENBLAS_CORETYPE, and an environment marker guards against
// re-executing twice.
//
//===----------------------------------------------------------------------===//

#include "pipemesh/runtime/CpuKernels.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace pipemesh::rt::cpu {

namespace {

constexpr const char *kCoreTypeVar = "OPENBLAS_CORETYPE";
constexpr const char *kMarkerVar = "PIPEMESH_BLAS_REEXEC";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool oneOf(const std::string &name, std::initializer_list<const char *> names) {
  for (const char *n : names)
    if (name == n)
      return true;
  return false;
}

bool cpuHasAvx512() {
  // The instruction subsets OpenBLAS's SkylakeX kernels use. libgcc checks that
  // the OS saves the AVX-512 state too.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}

bool cpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

std::string coreName() {
  const char *name = openblas_get_corename();
  return name ? name : "unknown";
}

} // namespace

std::string preferredBlasCore(const std::string &core, bool avx512, bool avx2) {
  const std::string c = lower(core);
  if (avx512 && !oneOf(c, {"skylakex", "cooperlake", "sapphirerapids"}))
    return "SkylakeX";
  if (!avx512 && avx2 && !oneOf(c, {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"}))
    return "Haswell";
  return "";
}

std::string configureBlas(int argc, char **argv) {
  const std::string core = coreName();
  if (const char *set = std::getenv(kCoreTypeVar); set && *set) {
    if (std::getenv(kMarkerVar))
      return "BLAS: OpenBLAS core " + core + " (" + kCoreTypeVar + "=" + set +
             " set by pipemesh for this CPU)";
    return "BLAS: OpenBLAS core " + core + " (" + kCoreTypeVar + "=" + set +
           " from the environment)";
  }
  const std::string want = preferredBlasCore(core, cpuHasAvx512(), cpuHasAvx2());
  if (want.empty())
    return "BLAS: OpenBLAS core " + core;
  if (std::getenv(kMarkerVar))
    return "BLAS: OpenBLAS core " + core + " (" + want + " would suit this CPU; " + kCoreTypeVar +
           " was cleared after the re-execution, not retrying)";
  if (argc < 1 || !argv || !argv[0] || argv[argc] != nullptr)
    return "BLAS: OpenBLAS core " + core + " (" + want +
           " would suit this CPU; set " + kCoreTypeVar + "=" + want + ")";

  setenv(kCoreTypeVar, want.c_str(), 1);
  setenv(kMarkerVar, "1", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  // Still here: exec failed. Carry on with the generic kernels.
  const int err = errno;
  unsetenv(kCoreTypeVar);
  unsetenv(kMarkerVar);
  return "BLAS: OpenBLAS core " + core + " (re-executing with " + kCoreTypeVar + "=" + want +
         " failed: " + std::strerror(err) + ")";
}

} // namespace pipemesh::rt::cpu
