//===- Activity.cpp - what this rank is doing, for its last words ----------===//
#include "pipemesh/runtime/Activity.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <unistd.h>

namespace pipemesh::rt::activity {
namespace {

/// The activity, copied: set() writes the slot the handler does not read and
/// then publishes it. The handler interrupts the thread that calls set(), so
/// the published slot is never being written while it reads it, and what it
/// prints does not depend on the caller's string still being alive (an
/// executor unwound by an error frees its instructions' descriptions before
/// the launcher's SIGTERM may come).
char slots[2][256] = {"start-up", ""};
std::atomic<int> published{0};
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
  n = put(buf, n, cap, current());
  n = put(buf, n, cap,
          ": the launcher ended the job (another rank failed or died; its message or the "
          "launcher's says which)\n");
  ssize_t w = ::write(STDERR_FILENO, buf, n);
  (void)w;
  ::_exit(1);
}

} // namespace

void set(const char *what) {
  const int next = 1 - published.load(std::memory_order_relaxed);
  char *slot = slots[next];
  size_t n = 0;
  for (; what && what[n] && n + 1 < sizeof slots[next]; ++n)
    slot[n] = what[n];
  slot[n] = '\0';
  published.store(next, std::memory_order_release);
}

const char *current() { return slots[published.load(std::memory_order_acquire)]; }

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
