//===- MemoryPlanner.h - static arena offsets from liveness ----*- C++ -*-===//
#ifndef PIPEMESH_PLAN_MEMORYPLANNER_H
#define PIPEMESH_PLAN_MEMORYPLANNER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <cstdint>

namespace pipemesh::plan {

/// A buffer that must hold `bytes` from instruction `first` to `last`
/// (inclusive).
struct LiveRange {
  int64_t bytes;
  int64_t first;
  int64_t last;
};

/// Assigns each range an offset so that ranges alive at the same time never
/// overlap: greedy by decreasing size, each placed at the lowest offset that
/// fits among the already placed ranges it overlaps in time. Offsets are
/// multiples of `alignment`. Returns the peak (the arena size needed).
int64_t assignOffsets(llvm::ArrayRef<LiveRange> ranges, llvm::SmallVectorImpl<int64_t> &offsets,
                      int64_t alignment = 64);

/// The largest sum of bytes alive at one instruction: a lower bound that any
/// assignment's peak meets or exceeds.
int64_t liveBytesLowerBound(llvm::ArrayRef<LiveRange> ranges);

} // namespace pipemesh::plan

#endif // PIPEMESH_PLAN_MEMORYPLANNER_H
