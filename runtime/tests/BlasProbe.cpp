//===- BlasProbe.cpp - end-to-end check of configureBlas' re-execution ------===//
//
// Run as `env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT
// LD_PRELOAD=libpipemesh-fake-blas-core.so pipemesh-blas-probe first "second arg"`:
// OpenBLAS then claims the generic Prescott core, so on a CPU with AVX2 or
// AVX-512 configureBlas must re-execute the probe exactly once, with
// OPENBLAS_CORETYPE set, the idle threads' wait policy set, and the arguments
// intact. Exit status 0 when all of that holds.
//
//===----------------------------------------------------------------------===//

#include "pipemesh/runtime/CpuKernels.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char **argv) {
  using namespace pipemesh::rt::cpu;
  const std::string line = configureBlas(argc, argv);
  std::printf("%s\n", line.c_str());
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const std::string want = preferredBlasCore("Prescott", avx512, avx2);
  const char *core = std::getenv("OPENBLAS_CORETYPE");
  const char *marker = std::getenv("PIPEMESH_BLAS_REEXEC");
  int failures = 0;
  auto check = [&](bool ok, const char *what) {
    if (!ok) {
      std::printf("FAIL: %s\n", what);
      ++failures;
    }
  };
  const char *policy = std::getenv("OMP_WAIT_POLICY");
  check(marker && std::strcmp(marker, "1") == 0, "re-execution marker set");
  check(policy && std::strcmp(policy, "passive") == 0, "OMP_WAIT_POLICY=passive set");
  check(line.find("OMP_WAIT_POLICY=passive set by pipemesh") != std::string::npos,
        "log line names the wait policy");
  if (want.empty()) {
    std::printf("CPU without AVX2: no core type expected\n");
    check(!core, "OPENBLAS_CORETYPE left unset");
  } else {
    check(core && want == core, "OPENBLAS_CORETYPE set to the preferred core");
    check(line.find("set by pipemesh for this CPU") != std::string::npos,
          "log line names pipemesh");
  }
  check(argc == 3 && std::strcmp(argv[1], "first") == 0 &&
            std::strcmp(argv[2], "second arg") == 0,
        "arguments preserved");
  std::printf("%s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
