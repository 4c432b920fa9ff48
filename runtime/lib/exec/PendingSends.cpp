//===- PendingSends.cpp - a rank's sends in flight -------------------------===//
#include "pipemesh/runtime/PendingSends.h"

#include <algorithm>

namespace pipemesh::rt {

void PendingSends::post(std::unique_ptr<CommRequest> request) {
  inFlight.push_back({posted++, std::move(request)});
}

void PendingSends::progress() {
  inFlight.erase(std::remove_if(inFlight.begin(), inFlight.end(),
                                [](const Entry &e) { return e.request->test(); }),
                 inFlight.end());
}

void PendingSends::waitAllBut(size_t keep) {
  const uint64_t upTo = posted > keep ? posted - keep : 0; // seqs below are completed
  auto end = std::find_if(inFlight.begin(), inFlight.end(),
                          [&](const Entry &e) { return e.seq >= upTo; });
  for (auto it = inFlight.begin(); it != end; ++it)
    it->request->wait();
  inFlight.erase(inFlight.begin(), end);
}

} // namespace pipemesh::rt
