//===- StopSignal.cpp - stop after the step on SIGUSR1 ----------------------===//
#include "pipemesh/runtime/StopSignal.h"

#include <csignal>
#include <cstring>

namespace pipemesh::rt {
namespace {
volatile std::sig_atomic_t received = 0;

extern "C" void onStopSignal(int) { received = 1; }
} // namespace

void installStopSignalHandler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = onStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; // a blocking call in progress carries on
  sigaction(SIGUSR1, &sa, nullptr);
}

bool stopSignalReceived() { return received != 0; }

} // namespace pipemesh::rt
