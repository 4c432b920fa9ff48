//===- BlasTest.cpp - configureBlas never overrides a set core type ---------===//
//
// The re-execution itself is tested end to end by runtime.configureBlas.reexec
// (BlasProbe.cpp).
//
//===----------------------------------------------------------------------===//

#include "pipemesh/runtime/CpuKernels.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace pipemesh::rt::cpu::test {
namespace {

/// Arguments handed to configureBlas: if it ever re-executed this binary, the
/// new process would run only ReexecSentinel, which fails.
char arg0[] = "pipemesh-cpu-kernels-test";
char arg1[] = "--gtest_filter=ReexecSentinel.*";
char *fakeArgv[] = {arg0, arg1, nullptr};

TEST(ReexecSentinel, NotReexecuted) {
  // Passes in a normal run; fails only in a process configureBlas re-executed.
  EXPECT_EQ(std::getenv("PIPEMESH_BLAS_REEXEC"), nullptr)
      << "configureBlas re-executed the test binary";
}

/// Sets a variable for one test and restores it afterwards.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      saved = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved)
      setenv(name, saved->c_str(), 1);
    else
      unsetenv(name);
  }

private:
  const char *name;
  std::optional<std::string> saved;
};

TEST(ConfigureBlas, KeepsAnOpenblasCoretypeThatIsSet) {
  // A wait policy is set too, so that nothing else asks for a re-execution.
  ScopedEnv policy("OMP_WAIT_POLICY", "passive");
  ScopedEnv timeout("OPENBLAS_THREAD_TIMEOUT", "4");
  for (const char *value : {"Prescott", "Haswell"}) {
    ASSERT_EQ(setenv("OPENBLAS_CORETYPE", value, 1), 0);
    unsetenv("PIPEMESH_BLAS_REEXEC");
    const std::string line = configureBlas(2, fakeArgv);
    EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), value);
    EXPECT_EQ(std::getenv("PIPEMESH_BLAS_REEXEC"), nullptr);
    EXPECT_NE(line.find(std::string("OPENBLAS_CORETYPE=") + value), std::string::npos) << line;
    EXPECT_NE(line.find("from the environment"), std::string::npos) << line;
  }
  unsetenv("OPENBLAS_CORETYPE");
}

TEST(ConfigureBlas, MarkerPreventsASecondReexecution) {
  unsetenv("OPENBLAS_CORETYPE");
  ASSERT_EQ(setenv("PIPEMESH_BLAS_REEXEC", "1", 1), 0);
  const std::string line = configureBlas(2, fakeArgv);
  EXPECT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr);
  EXPECT_NE(line.find("OpenBLAS core"), std::string::npos) << line;
  unsetenv("PIPEMESH_BLAS_REEXEC");
}

TEST(ConfigureBlas, KeepsAWaitPolicyThatIsSet) {
  ScopedEnv core("OPENBLAS_CORETYPE", "Haswell");
  ScopedEnv timeout("OPENBLAS_THREAD_TIMEOUT", "4");
  for (const char *var : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    ScopedEnv policy("OMP_WAIT_POLICY", nullptr);
    ScopedEnv spin("GOMP_SPINCOUNT", nullptr);
    ScopedEnv chosen(var, std::string(var) == "OMP_WAIT_POLICY" ? "active" : "1000");
    unsetenv("PIPEMESH_BLAS_REEXEC");
    const std::string line = configureBlas(2, fakeArgv);
    EXPECT_EQ(std::getenv("PIPEMESH_BLAS_REEXEC"), nullptr);
    EXPECT_NE(line.find(std::string(var) + "="), std::string::npos) << line;
    EXPECT_NE(line.find("from the environment"), std::string::npos) << line;
  }
}

TEST(ConfigureBlas, PreferredThreadEnv) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  const Env passive{{"OMP_WAIT_POLICY", "passive"}};
  EXPECT_EQ(preferredThreadEnv(nullptr, nullptr, nullptr, 2), passive);
  EXPECT_EQ(preferredThreadEnv("", "", "", 2), passive);
  EXPECT_EQ(preferredThreadEnv("active", nullptr, nullptr, 2), Env{});
  EXPECT_EQ(preferredThreadEnv(nullptr, "10000", nullptr, 2), Env{});
  // The pthread build's own threads also sleep at once.
  EXPECT_EQ(preferredThreadEnv(nullptr, nullptr, nullptr, 1),
            (Env{{"OMP_WAIT_POLICY", "passive"}, {"OPENBLAS_THREAD_TIMEOUT", "4"}}));
  EXPECT_EQ(preferredThreadEnv("active", nullptr, "28", 1), Env{});
  EXPECT_EQ(preferredThreadEnv(nullptr, nullptr, nullptr, 0), passive);
}

TEST(ConfigureBlas, WidensOnlyMpirunsDefaultBindingOfALoneRank) {
  // mpirun -np 1 (one rank on the node, bound by mpirun's default).
  EXPECT_TRUE(widensDefaultBinding("1", "1", nullptr, nullptr, nullptr));
  EXPECT_TRUE(widensDefaultBinding("1", "1", "", "", ""));
  // Not launched by mpirun, or not bound by it.
  EXPECT_FALSE(widensDefaultBinding(nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_FALSE(widensDefaultBinding("1", nullptr, nullptr, nullptr, nullptr));
  // Several ranks share the node: one core each is what they should have.
  EXPECT_FALSE(widensDefaultBinding("2", "1", nullptr, nullptr, nullptr));
  // A binding, mapping or CPU set the user asked for is kept.
  EXPECT_FALSE(widensDefaultBinding("1", "1", "core", nullptr, nullptr));
  EXPECT_FALSE(widensDefaultBinding("1", "1", nullptr, "core:PE=1", nullptr));
  EXPECT_FALSE(widensDefaultBinding("1", "1", nullptr, nullptr, "0"));
}

TEST(ConfigureBlas, PreferredCore) {
  // Generic or older cores are upgraded to what the CPU can run.
  EXPECT_EQ(preferredBlasCore("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(preferredBlasCore("Prescott", false, true), "Haswell");
  EXPECT_EQ(preferredBlasCore("Sandybridge", false, true), "Haswell");
  EXPECT_EQ(preferredBlasCore("Haswell", true, true), "SkylakeX");
  EXPECT_EQ(preferredBlasCore("Zen", true, true), "SkylakeX"); // Zen 4
  // Already suitable, or nothing better available.
  EXPECT_EQ(preferredBlasCore("SkylakeX", true, true), "");
  EXPECT_EQ(preferredBlasCore("COOPERLAKE", true, true), "");
  EXPECT_EQ(preferredBlasCore("SapphireRapids", true, true), "");
  EXPECT_EQ(preferredBlasCore("Haswell", false, true), "");
  EXPECT_EQ(preferredBlasCore("Zen", false, true), "");
  EXPECT_EQ(preferredBlasCore("Prescott", false, false), "");
}

} // namespace
} // namespace pipemesh::rt::cpu::test
