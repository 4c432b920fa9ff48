//===- Blas.cpp - picking OpenBLAS's kernels and the threads' waiting -------===//
//
// Two process-wide settings are read only when the libraries load, so
// configureBlas (first thing in main) sets them and re-executes the program
// once when they are missing; it never overrides a value already set, and an
// environment marker guards against re-executing twice.
//
// - OPENBLAS_CORETYPE. OpenBLAS (DYNAMIC_ARCH builds, as Debian's) chooses its
//   kernels from the CPU model. 0.3.21 does not know the newest Xeons and falls
//   back to the generic "Prescott" kernels, 4-5x slower on sgemm. When the
//   chosen core is weaker than the CPU's features, the matching core is set.
// - How idle threads wait. libgomp's threads (the kernels' `omp parallel`
//   regions, and OpenBLAS's own threads in its OpenMP build) spin-wait for
//   ~300000 iterations before sleeping, and the pthread build's BLAS threads
//   spin for 2^28 cycles. The executor alternates GEMMs with serial code and
//   short parallel regions, so the threads spend much of the step spinning;
//   on a machine whose cores are shared (other jobs, other ranks) the spinning
//   takes the cores' time from the threads doing the work, and the step
//   slows by 2x and more. OMP_WAIT_POLICY=passive (and, for the pthread build,
//   OPENBLAS_THREAD_TIMEOUT=4) makes idle threads sleep at once; a wake-up
//   costs tens of microseconds, well under 1% of a step. Set either
//   OMP_WAIT_POLICY or GOMP_SPINCOUNT to choose otherwise.
// - Which CPUs the threads may use. Open MPI's mpirun binds each rank to one
//   core by default when it launches two ranks or fewer; libgomp and OpenBLAS
//   then size their pools to that one core, so `mpirun -np 1 pipemesh-run`
//   trains on one core of many. When mpirun bound the only rank of a node
//   that way without being asked to (widensDefaultBinding), the affinity is
//   widened to every CPU the process may use (its cpuset) before the
//   re-execution. An explicit --bind-to, --map-by or --cpu-set is kept.
//
//===----------------------------------------------------------------------===//

#include "KernelUtil.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sched.h>
#include <unistd.h>

namespace pipemesh::rt::cpu {

namespace {

constexpr const char *kCoreTypeVar = "OPENBLAS_CORETYPE";
constexpr const char *kMarkerVar = "PIPEMESH_BLAS_REEXEC";
/// Space-separated names of the variables the re-execution set.
constexpr const char *kSetVar = "PIPEMESH_BLAS_SET";
/// "N M": the process was bound to N CPUs and widened to M before the
/// re-execution (for the log line).
constexpr const char *kWidenedVar = "PIPEMESH_CPUS_WIDENED";

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

const char *env(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool setByPipemesh(const char *name) {
  const char *set = env(kSetVar);
  if (!set)
    return false;
  const std::string list = std::string(" ") + set + " ";
  return list.find(std::string(" ") + name + " ") != std::string::npos;
}

/// CPUs the calling thread may run on (0 when the kernel does not say).
int affinityCount() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  return sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
}

/// Widens the calling thread's (the process's, before any thread starts) CPU
/// affinity to every CPU the kernel lets it use; returns {before, after}.
std::pair<int, int> widenAffinity() {
  const int before = affinityCount();
  cpu_set_t all;
  CPU_ZERO(&all);
  const long configured = sysconf(_SC_NPROCESSORS_CONF);
  for (long c = 0; c < std::min<long>(configured, CPU_SETSIZE); ++c)
    CPU_SET(c, &all);
  // The kernel intersects the request with the process's cpuset.
  if (before == 0 || sched_setaffinity(0, sizeof all, &all) != 0)
    return {before, before};
  return {before, affinityCount()};
}

/// "OpenMP threads, OMP_WAIT_POLICY=passive set by pipemesh" and the like.
std::string describeThreads(int parallel) {
  std::string s = parallel == 2   ? "OpenMP threads"
                  : parallel == 1 ? "pthread threads"
                                  : "single-threaded";
  for (const char *var : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT"})
    if (const char *v = env(var))
      s += std::string(", ") + var + "=" + v +
           (setByPipemesh(var) ? " set by pipemesh" : " from the environment");
  const int cpus = affinityCount();
  s += ", " + std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  int before = 0, after = 0;
  if (const char *w = env(kWidenedVar); w && std::sscanf(w, "%d %d", &before, &after) == 2)
    s += " (widened from mpirun's default binding to " + std::to_string(before) +
         ": the only rank on this node; --bind-to chooses)";
  return s;
}

} // namespace

namespace detail {
// PIPEMESH_KERNEL_ISA=generic keeps the base builds (tests run both).
int gKernelIsa = cpuHasAvx2() && !(env("PIPEMESH_KERNEL_ISA") &&
                                   std::string(env("PIPEMESH_KERNEL_ISA")) == "generic")
                     ? 1
                     : 0;
} // namespace detail

std::string kernelIsa() { return detail::useAvx2() ? "avx2" : "generic"; }

bool setKernelIsa(const std::string &isa) {
  if (isa == "generic") {
    detail::gKernelIsa = 0;
    return true;
  }
  if (isa == "avx2" && PIPEMESH_HAVE_AVX2_BUILD && cpuHasAvx2()) {
    detail::gKernelIsa = 1;
    return true;
  }
  return false;
}

std::string preferredBlasCore(const std::string &core, bool avx512, bool avx2) {
  const std::string c = lower(core);
  if (avx512 && !oneOf(c, {"skylakex", "cooperlake", "sapphirerapids"}))
    return "SkylakeX";
  if (!avx512 && avx2 && !oneOf(c, {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids", "excavator"}))
    return "Haswell";
  return "";
}

std::vector<std::pair<std::string, std::string>>
preferredThreadEnv(const char *ompWaitPolicy, const char *gompSpincount,
                   const char *openblasThreadTimeout, int openblasParallel) {
  auto set = [](const char *v) { return v && *v; };
  std::vector<std::pair<std::string, std::string>> out;
  if (!set(ompWaitPolicy) && !set(gompSpincount))
    out.emplace_back("OMP_WAIT_POLICY", "passive");
  if (openblasParallel == 1 && !set(openblasThreadTimeout))
    out.emplace_back("OPENBLAS_THREAD_TIMEOUT", "4");
  return out;
}

bool widensDefaultBinding(const char *localSize, const char *boundAtLaunch,
                          const char *bindingPolicy, const char *mappingPolicy,
                          const char *cpuSet) {
  auto set = [](const char *v) { return v && *v; };
  return set(localSize) && std::string(localSize) == "1" && set(boundAtLaunch) &&
         std::string(boundAtLaunch) == "1" && !set(bindingPolicy) && !set(mappingPolicy) &&
         !set(cpuSet);
}

std::string configureBlas(int argc, char **argv) {
  const std::string core = coreName();
  const int parallel = openblas_get_parallel();
  std::vector<std::pair<std::string, std::string>> fixes;

  // The core type, described as before any change.
  std::string coreLine = "BLAS: OpenBLAS core " + core;
  std::string want;
  if (const char *set = env(kCoreTypeVar)) {
    const bool byUs = env(kMarkerVar) && (setByPipemesh(kCoreTypeVar) || !env(kSetVar));
    coreLine += std::string(" (") + kCoreTypeVar + "=" + set +
                (byUs ? " set by pipemesh for this CPU)" : " from the environment)");
  } else {
    want = preferredBlasCore(core, cpuHasAvx512(), cpuHasAvx2());
    if (!want.empty()) {
      if (env(kMarkerVar))
        coreLine += " (" + want + " would suit this CPU; " + kCoreTypeVar +
                    " was cleared after the re-execution, not retrying)";
      else
        fixes.emplace_back(kCoreTypeVar, want);
    }
  }
  for (auto &kv : preferredThreadEnv(env("OMP_WAIT_POLICY"), env("GOMP_SPINCOUNT"),
                                     env("OPENBLAS_THREAD_TIMEOUT"), parallel))
    fixes.push_back(kv);

  // Before the re-execution decision: a widened affinity needs the libraries
  // loaded anew to size their pools.
  bool widened = false;
  if (!env(kMarkerVar) &&
      widensDefaultBinding(env("OMPI_COMM_WORLD_LOCAL_SIZE"), env("OMPI_MCA_orte_bound_at_launch"),
                           env("OMPI_MCA_hwloc_base_binding_policy"),
                           env("OMPI_MCA_rmaps_base_mapping_policy"),
                           env("OMPI_MCA_hwloc_base_cpu_set"))) {
    auto [before, after] = widenAffinity();
    if (after > before) {
      widened = true;
      setenv(kWidenedVar, (std::to_string(before) + " " + std::to_string(after)).c_str(), 1);
    }
  }

  auto line = [&] {
    return coreLine + "; " + describeThreads(parallel) + "; kernels " + kernelIsa();
  };
  if ((fixes.empty() && !widened) || env(kMarkerVar))
    return line();
  if (argc < 1 || !argv || !argv[0] || argv[argc] != nullptr) {
    std::string advice;
    for (auto &[var, value] : fixes)
      advice += (advice.empty() ? "" : " ") + var + "=" + value;
    return advice.empty() ? line() : line() + " (set " + advice + " for this CPU and machine)";
  }

  std::string names;
  for (auto &[var, value] : fixes) {
    setenv(var.c_str(), value.c_str(), 1);
    names += (names.empty() ? "" : " ") + var;
  }
  setenv(kSetVar, names.c_str(), 1);
  setenv(kMarkerVar, "1", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  // Still here: exec failed. Carry on as we are.
  const int err = errno;
  for (auto &kv : fixes)
    unsetenv(kv.first.c_str());
  unsetenv(kSetVar);
  unsetenv(kMarkerVar);
  return line() + " (re-executing with " + names + " set failed: " + std::strerror(err) + ")";
}

} // namespace pipemesh::rt::cpu
