//===- MemoryPlanner.cpp - static arena offsets from liveness --------------===//
#include "pipemesh/Plan/MemoryPlanner.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>

namespace pipemesh::plan {

static int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

int64_t assignOffsets(llvm::ArrayRef<LiveRange> ranges, llvm::SmallVectorImpl<int64_t> &offsets,
                      int64_t alignment) {
  offsets.assign(ranges.size(), 0);
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), 0);
  // Big buffers first: they are the hardest to fit into gaps.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].bytes > ranges[b].bytes; });
  // Placed ranges by time bucket, so that a range only meets the placed
  // ranges near it in time (a plan of a big model has tens of thousands of
  // transient buffers, most of them short-lived).
  int64_t horizon = 0;
  for (const LiveRange &r : ranges)
    horizon = std::max(horizon, r.last + 1);
  constexpr int64_t kBucket = 64;
  std::vector<std::vector<size_t>> buckets(horizon / kBucket + 1);
  std::vector<size_t> seenAt(ranges.size(), SIZE_MAX);
  int64_t peak = 0;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (auto [n, i] : llvm::enumerate(order)) {
    const LiveRange &r = ranges[i];
    // Occupied [offset, end) of placed ranges overlapping in time, by offset.
    busy.clear();
    for (int64_t k = r.first / kBucket; k <= r.last / kBucket; ++k)
      for (size_t j : buckets[k]) {
        const LiveRange &o = ranges[j];
        if (seenAt[j] == n || !(o.first <= r.last && r.first <= o.last))
          continue;
        seenAt[j] = n;
        busy.push_back({offsets[j], offsets[j] + alignUp(o.bytes, alignment)});
      }
    std::sort(busy.begin(), busy.end());
    int64_t candidate = 0, need = alignUp(r.bytes, alignment);
    for (auto [start, end] : busy) {
      if (candidate + need <= start)
        break;
      candidate = std::max(candidate, end);
    }
    offsets[i] = candidate;
    peak = std::max(peak, candidate + need);
    for (int64_t k = r.first / kBucket; k <= r.last / kBucket; ++k)
      buckets[k].push_back(i);
  }
  return peak;
}

int64_t liveBytesLowerBound(llvm::ArrayRef<LiveRange> ranges) {
  std::map<int64_t, int64_t> delta;
  for (const LiveRange &r : ranges) {
    delta[r.first] += r.bytes;
    delta[r.last + 1] -= r.bytes;
  }
  int64_t live = 0, peak = 0;
  for (auto [t, d] : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

} // namespace pipemesh::plan
