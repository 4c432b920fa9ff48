//===- Activity.cpp - what this rank is doing, for its last words ----------===//
#include "pipemesh/runtime/Activity.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <unistd.h>

namespace pipemesh::rt::activity {
namespace {

std::atomic<const char *> current{"start-up"};
std::atomic<int64_t> currentStep{-1};
int rankId = 0;

/// Appends `s` to buf (async-signal-safe).
size_t put(char *buf, size_t at, size_t cap, const char *s) {
  while (*s && at + 1 < cap)
    buf[at++] = *s++;
  return at;
}

size_t putInt(char *buf, size_t at, size_t cap, int64_t v) {
  char digits[24];
  int n = 0;
  bool neg = v < 0;
  uint64_t u = neg ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
  do {
    digits[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (neg && at + 1 < cap)
    buf[at++] = '-';
  while (n && at + 1 < cap)
    buf[at++] = digits[--n];
  return at;
}

void onTerminate(int sig) {
  char buf[1024];
  size_t n = 0, cap = sizeof buf;
  n = put(buf, n, cap, "pipemesh-run: error: rank ");
  n = putInt(buf, n, cap, rankId);
  n = put(buf, n, cap, ": terminated by signal ");
  n = putInt(buf, n, cap, sig);
  n = put(buf, n, cap, " during ");
  int64_t step = currentStep.load(std::memory_order_relaxed);
  if (step >= 0) { // numbered like the progress lines ("step 3/10")
    n = put(buf, n, cap, "step ");
    n = putInt(buf, n, cap, step + 1);
    n = put(buf, n, cap, ", ");
  }
  const char *what = current.load(std::memory_order_relaxed);
  n = put(buf, n, cap, what ? what : "?");
  n = put(buf, n, cap,
          ": the launcher ended the job (another rank failed or died; its message or the "
          "launcher's says which)\n");
  ssize_t w = ::write(STDERR_FILENO, buf, n);
  (void)w;
  ::_exit(1);
}

} // namespace

void set(const char *what) { current.store(what, std::memory_order_relaxed); }

void setStep(int64_t step) { currentStep.store(step, std::memory_order_relaxed); }

void installTerminationHandler(int rank) {
  rankId = rank;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onTerminate;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}

void disarm() { std::signal(SIGTERM, SIG_DFL); }

} // namespace pipemesh::rt::activity
