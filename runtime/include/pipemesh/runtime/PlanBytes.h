//===- PlanBytes.h - which bytes of the arena an instruction touches -*- C++ -*-===//
//
// Buffers share arena memory by liveness, so what an instruction reads or
// writes is a question about byte ranges, not buffer ids (a view has its own
// id and the same bytes; a later buffer may take part of a dead one's bytes).
// The device backend's stream ordering and its fusions across instructions
// ask these questions.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEMESH_RUNTIME_PLANBYTES_H
#define PIPEMESH_RUNTIME_PLANBYTES_H

#include "pipemesh/runtime/Plan.h"

#include <cstdint>
#include <vector>

namespace pipemesh::rt {

/// Bytes [begin, end) of a rank's arena.
struct ByteRange {
  uint64_t begin = 0, end = 0;
  bool overlaps(const ByteRange &o) const { return begin < o.end && o.begin < end; }
  bool operator==(const ByteRange &o) const { return begin == o.begin && end == o.end; }
};

ByteRange bytesOf(const RankPlan &rank, int64_t bufferId);

/// Every range an instruction names: its inputs, then its outputs, then the
/// buffers control and communication instructions name ("bufs", and the
/// param/grad/m/v of "params" entries).
std::vector<ByteRange> namedBytes(const RankPlan &rank, const Instruction &inst);

/// Whether the value held in `bytes` is dead after instruction `after`: no
/// later instruction reads any of those bytes before a later output rewrites
/// them. An output that readsItsOutputs() adds into is read; control and
/// communication instructions are taken to read every buffer they name.
bool deadAfter(const RankPlan &rank, size_t after, ByteRange bytes);

} // namespace pipemesh::rt

#endif // PIPEMESH_RUNTIME_PLANBYTES_H
